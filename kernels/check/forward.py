"""The fp16 / bf16 forward launchers (attn_fa2_fwd, attn_splitkv_fwd, attn_fa3_fwd and its builds) on random inputs,
judged by the conformance judge (`verdict.judge_outputs`).

`check_forward` draws q, k, v of one case on the device (a generator seeded per case; [B, L, H, D] strides with
``layout="bshd"``; random real lengths with ``varlen``, batch 0 at full length), runs the launcher (or ``runner``)
into O and LSE buffers poisoned with NaN between guard bands (`guard`), and reports:

- the judge's verdict against the FP64 oracle on the same rounded inputs, under the a-priori bounds of
  conformance/TOLERANCES.md: values, LSE with the -inf of fully masked rows (SEMANTICS.md §8, §12), every real row
  written (``out_fully_written``), inputs unchanged;
- what the judge does not compare: a changed guard band (a write past O or LSE) and padded query rows written
  (SEMANTICS.md §7; attn_params.h: a launcher leaves them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.kernels.check.guard import guard_ok, guarded
from attention_conformance.kernels.check.verdict import (
    device_case,
    dtype_name,
    judge_outputs,
    oracle,
    passed,
    real_rows,
    rel_err,
    to_numpy,
)

__all__ = ["case_name", "check_forward", "run_launcher"]


def run_launcher(launcher: str, q: Any, k: Any, v: Any, o: Any, lse: Any, **kw: Any) -> None:
    """One call of the library's ``launcher`` on torch tensors (`kernels.cuda_lib.fwd_params` takes ``kw``)."""
    from attention_conformance.kernels import cuda_lib

    cuda_lib.call(launcher, cuda_lib.fwd_params(q, k, v, o, lse, **kw))


def case_name(launcher: str, *, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int, dtype: Any, causal: bool = False,
              bottom_right: bool = True, window: Any = None, softcap: float | None = None, varlen: bool = False,
              layout: str = "contiguous", num_splits: int = 0, dv: int | None = None) -> str:
    """``fa2_fwd B2 H4/2 q200 k333 d64 bfloat16 causalBR ...``: one line naming the launcher and the case (``d192/128``
    where dv != d)."""
    dims = f"d{d}" if dv is None or dv == d else f"d{d}/{dv}"
    return (f"{launcher.removeprefix('attn_')} B{B} H{Hq}/{Hkv} q{Lq} k{Lk} {dims} {dtype_name(dtype)}"
            + (" causal" + ("BR" if bottom_right else "TL") if causal else "")
            + (f" win{tuple(window)}" if window else "") + (f" cap{softcap}" if softcap else "")
            + (" varlen" if varlen else "") + (f" {layout}" if layout != "contiguous" else "")
            + (f" S={num_splits}" if launcher == "attn_splitkv_fwd" else ""))


def _draw(B: int, H: int, L: int, d: int, layout: str, dtype: Any, device: str, gen: Any) -> Any:
    import torch

    if layout == "bshd":
        return torch.randn(B, L, H, d, device=device, generator=gen).to(dtype).transpose(1, 2)
    return torch.randn(B, H, L, d, device=device, generator=gen).to(dtype)


def check_forward(launcher: str, *, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int, dtype: Any,
                  causal: bool = False, bottom_right: bool = True, window: Any = None, softcap: float | None = None,
                  varlen: bool = False, layout: str = "contiguous", num_splits: int = 0, seed: int = 0,
                  runner: Callable[..., None] | None = None, device: str = "cuda", dv: int | None = None) -> dict:
    """One case through ``launcher`` (or through ``runner(q, k, v, o, lse, **kw)`` when given; ``launcher`` then
    only names the case); ``dv``: the head dim of V and O (None: d). Returns ``case`` (a name with the seed), ``ok``,
    ``problems`` (the judge's failure messages, then the guard-band and padded-row findings), ``outcome`` (the
    judge's), ``usage`` (worst error over its bound), and for tables ``rel_err`` (relative Frobenius error of the real
    rows) and ``lse_err`` (max |LSE - oracle| over the finite rows)."""
    import torch

    tdt = getattr(torch, dtype_name(dtype))
    gen = torch.Generator(device=device).manual_seed(seed)
    dv = d if dv is None else dv
    q, k, v = (_draw(B, h, L, x, layout, tdt, device, gen) for h, L, x in ((Hq, Lq, d), (Hkv, Lk, d), (Hkv, Lk, dv)))
    sq = sk = None
    if varlen:
        sq = torch.randint(0, Lq + 1, (B,), device=device, generator=gen, dtype=torch.int32)
        sk = torch.randint(0, Lk + 1, (B,), device=device, generator=gen, dtype=torch.int32)
        sq[0], sk[0] = Lq, Lk
    scale = 1.0 / math.sqrt(d)
    alignment = "bottom_right" if bottom_right else "top_left"
    obuf, o = guarded((B, Hq, Lq, dv), tdt, device)
    lbuf, lse = guarded((B, Hq, Lq), torch.float32, device)
    before = [x.clone() for x in (q, k, v)]
    kw: dict[str, Any] = dict(scale=scale, causal=causal, alignment=alignment, window=window, softcap=softcap,
                              seqlens_q=sq, seqlens_k=sk)
    if launcher == "attn_splitkv_fwd":
        kw["num_splits"] = num_splits
    if runner is None:
        run_launcher(launcher, q, k, v, o, lse, **kw)
    else:
        runner(q, k, v, o, lse, **kw)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    lens_q = None if sq is None else [int(n) for n in sq.tolist()]
    lens_k = None if sk is None else [int(n) for n in sk.tolist()]
    case = device_case(B=B, Hq=Hq, Hkv=Hkv, Lq=Lq, Lk=Lk, d=d, dtype=dtype, scale=scale, causal=causal,
                       alignment=alignment, window=window, softcap=softcap, seqlens_q=lens_q, seqlens_k=lens_k,
                       layout=layout, seed=seed, dv=dv)
    ref = oracle(case, CaseInputs(q=to_numpy(before[0]), k=to_numpy(before[1]), v=to_numpy(before[2])))
    out = to_numpy(o)
    valid = real_rows(B, Hq, Lq, lens_q)
    mutated = [n for n, x, b in zip("qkv", (q, k, v), before) if not torch.equal(x, b)]
    verdict = judge_outputs(case, ref, out, lse, out_dtype=dtype_name(dtype), mutated=mutated,
                            unwritten=int(np.isnan(out[valid]).sum()))
    extra = []
    if not (guard_ok(obuf) and guard_ok(lbuf)):
        extra.append("guard band changed: the launcher wrote past O or LSE")
    padded_written = int((~np.isnan(out[~valid]).all(axis=-1)).sum())
    if padded_written:
        extra.append(f"{padded_written} padded query rows of O written (SEMANTICS.md §7: a launcher leaves them)")
    name = case_name(launcher, B=B, Hq=Hq, Hkv=Hkv, Lq=Lq, Lk=Lk, d=d, dtype=dtype, causal=causal,
                     bottom_right=bottom_right, window=window, softcap=softcap, varlen=varlen, layout=layout,
                     num_splits=num_splits, dv=dv)
    lse_stats = verdict.stats.get("lse", {})
    return dict(case=f"{name} seed={seed}", ok=passed(verdict) and not extra, problems=list(verdict.failures) + extra,
                outcome=verdict.outcome, usage=verdict.usage, rel_err=rel_err(out[valid], ref.out[valid]),
                lse_err=float(lse_stats.get("max_err") or 0.0))
