"""What a plain function's signature says about the call the harness makes: notes for the person reading its FAILs.

A plain ``--impl module:fn`` is called as torch SDPA is (`conformance.adapters.third_party`): ``fn(q, k, v,
**kwargs)`` on [B, H, L, D] tensors, with only the keywords that differ from SDPA's defaults among ``attn_mask``,
``is_causal``, ``scale`` and ``enable_gqa`` (`sdpa_probes.sdpa_kwargs`). The probes find what raises: a function
without ``is_causal`` and without ``**kwargs`` raises TypeError on a causal call, and its causal cases are
NOT_SUPPORTED with that exception quoted. Two signatures run without raising and still compute another problem,
so that every case of a feature FAILs with nothing saying why:

- SDPA's keyword lands in ``**kwargs`` and the function never reads it there (``def f(q, k, v, **kw)``);
- the function names the feature its own way (``causal``, ``softmax_scale``, ``attn_bias``: flash-attn's and
  xformers' names), which then keeps its default, and SDPA's keyword lands in ``**kwargs``. A function with
  flash-attn's names usually also takes flash-attn's [B, L, H, D] layout, while the harness hands [B, H, L, D].

`signature_notes` says so, one line per finding; the adapter carries the lines with every call's results
(report.md's failure blocks and the pytest failure text show them) and the front ends print them at the start
of a run (`running.run_context.ConformanceRun.adapter_notes`). A signature that cannot be read (a builtin, a
C extension) gives no notes. Nothing here changes a verdict (SEMANTICS.md §1: the function is judged on what
it computes).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

__all__ = ["PASSED_KEYWORDS", "OTHER_NAMES", "signature_notes"]

#: the keywords the harness passes (where a case needs them); ``dropout_p`` is never passed (dropout 0)
PASSED_KEYWORDS = ("attn_mask", "is_causal", "scale", "enable_gqa")
#: names other attention APIs give SDPA's keywords (flash-attn: causal, softmax_scale; xformers: attn_bias, p)
OTHER_NAMES = {
    "causal": "is_causal",
    "mask": "attn_mask",
    "attention_mask": "attn_mask",
    "attn_bias": "attn_mask",
    "bias": "attn_mask",
    "softmax_scale": "scale",
    "sm_scale": "scale",
    "gqa": "enable_gqa",
}
#: parameter names of flash-attn's functions, whose tensors are [B, L, H, D]
_FLASH_ATTN_NAMES = ("softmax_scale", "window_size", "softcap", "alibi_slopes", "deterministic")


def signature_notes(fn: Callable) -> list[str]:
    """Notes on ``fn``'s signature against the call the harness makes (see the module docstring); [] when it
    names every keyword the harness passes, or when its signature cannot be read."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return []
    named = {p for p, v in params.items() if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)}
    var_kw = next((p for p, v in params.items() if v.kind is v.VAR_KEYWORD), None)
    notes = []
    for own, sdpa in OTHER_NAMES.items():
        if own in named and sdpa not in named:
            default = params[own].default
            keeps = "" if default is inspect.Parameter.empty else f" (= {default!r})"
            lands = (f"`{sdpa}` lands in `**{var_kw}`" if var_kw else f"a call with `{sdpa}` raises TypeError, so "
                     "the cases that need it are NOT_SUPPORTED")
            notes.append(f"the function takes `{own}`, not torch SDPA's `{sdpa}`: the harness passes SDPA's "
                         f"keywords, so `{own}` keeps its default{keeps} and {lands}")
    if var_kw:
        unnamed = [k for k in PASSED_KEYWORDS if k not in named and k not in {OTHER_NAMES.get(p) for p in named}]
        if unnamed:
            listed = ", ".join(f"`{k}`" for k in unnamed)
            notes.append(f"{listed} {'is' if len(unnamed) == 1 else 'are'} not named in the function's signature and "
                         f"{'lands' if len(unnamed) == 1 else 'land'} in `**{var_kw}`: if the function does not read "
                         f"{'it' if len(unnamed) == 1 else 'them'} there, every case that needs "
                         f"{'it' if len(unnamed) == 1 else 'them'} FAILs")
    if any(p in named for p in _FLASH_ATTN_NAMES):
        notes.append("the function has flash-attn's parameter names; the harness hands [B, H, L, D] tensors (torch "
                     "SDPA's layout), where flash-attn's functions take [B, L, H, D]: wrap it (transpose in and out), "
                     "or use the built-in flash-attn adapters (`python -m attention_conformance list`)")
    return notes
