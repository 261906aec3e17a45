"""How a standalone repro file calls the library under test: one plan per adapter family, from the adapter's own
translation of the case.

A `CallPlan` is the library side of a standalone repro (`conformance.reproduce.standalone`): the file's
``run_library(inp)`` function (the call the adapter makes for this case, written out with plain torch and the
library: the same spelling, dtype, layout, mask, flags and keyword arguments), ``cannot_run_here()`` (torch, a CUDA
device, the library), ``versions()``, the quantities the call returns, and the precision of its output (which sets
the tolerance). Each plan asks the adapter for its decisions rather than restating them: SDPA's
`conformance.adapters.torch_sdpa.sdpa_args` (is_causal, which attn_mask or CausalBias), the flash-attention adapters'
``call_for`` (`conformance.adapters.flash_attn.FaCall`: function, how q, k, v reach it, keywords), FlexAttention's
mask_mod / score_mod clauses as `conformance.adapters.torch_flex.flex_mods` builds them, cuDNN's FP8 graph as
`conformance.adapters.cudnn_fp8.sdpa_fp8_graph` builds it; whether the adapter claims the case, from its
``supports`` (or, without the device, its ``claim_reason``: `claim_reason`).

Families: ``torch-sdpa-{math,flash,efficient,cudnn}``, ``flash-attn-2``, ``flash-attn-3``, ``flash-attn-4`` (each
with its ``@ENTRY`` spellings), ``torch-flex``, ``cudnn-fp8``, ``flashinfer`` and ``xformers`` (each spelling;
`conformance.reproduce.flashinfer_calls`, `conformance.reproduce.xformers_calls`), and a plain SDPA-signature
function given as ``module:attr`` or ``path/to/file.py:attr`` (the file imports it as the harness did and makes the
adapter's call, conformance/adapters/third_party.py). Not written (`UnwritableCase`): the project's own kernels
(``cuda-*``, ``reference-*``: the plain ``repro`` snippet reproduces them, they need this package anyway) and adapter
objects given as ``module:attr`` (their call is their own code).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from attention_conformance.adapters.base import Adapter
from attention_conformance.adapters.variants import split_variant
from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import Case, page_size_of
from attention_conformance.reproduce.inputs import UnwritableCase

__all__ = ["CallPlan", "FAMILIES", "Family", "claim_reason", "family_of", "plan_call"]

_TORCH_DTYPE = {"float64": "torch.float64", "float32": "torch.float32", "float16": "torch.float16",
                "bfloat16": "torch.bfloat16"}


@dataclass
class CallPlan:
    """The library side of one standalone repro file (module docstring)."""

    library: str  # one line: what is called, for the file's title and docstring
    device: str  # "cpu" or "cuda"
    run_library: str  # source of ``run_library(inp)``
    cannot_run_here: str  # source of ``cannot_run_here()``
    versions: str  # source of ``versions()``
    observed: tuple[str, ...]  # what run_library returns: out, lse, dq, dk, dv, dsinks
    helpers: list[str] = field(default_factory=list)  # `conformance.reproduce.source` functions run_library calls
    out_dtype: str | None = None  # the output's precision when not the input dtype (FP8 output), and its scale
    out_scale: float = 1.0
    lse_plus_inf_ok: bool = False  # +inf on rows with no visible key passes (the harness's reading of the adapter)
    checked: str = ""  # how the adapter's claim on the case was checked, for the docstring


def _function(signature: str, doc: str, lines: list[str]) -> str:
    """``def signature:`` with docstring `doc` and body `lines` (each may hold nested indentation)."""
    wrapped = textwrap.fill(doc, width=112, subsequent_indent="    ", break_on_hyphens=False)
    body = "".join(f"    {line}\n" if line else "\n" for line in lines)
    return f'def {signature}:\n    """{wrapped}"""\n' + body


def _preflight(device: str, imports: list[tuple[str, str]], requirement: str, then: tuple[str, ...] = ()) -> str:
    """``cannot_run_here()``: torch, then a CUDA device (for "cuda"), then each (import line, package) of `imports`,
    then the lines `then`."""
    unused = "" if device == "cuda" else "  # noqa: F401"
    lines = ["try:", f"    import torch{unused}", "except ImportError as exc:", '    return f"needs torch ({exc})"']
    if device == "cuda":
        lines += ["if not torch.cuda.is_available():",
                  f'    return ("needs CUDA: {requirement}; "',
                  '            f"torch {torch.__version__} sees no CUDA device")']
    for statement, package in imports:
        lines += ["try:", f"    {statement}  # noqa: F401", "except ImportError as exc:",
                  f'    return f"needs {package} ({statement}: {{exc}})"']
    lines += [*then, "return None"]
    return _function("cannot_run_here()", "Why this file cannot make its call here (exit status 2), or None.", lines)


def _versions(extra: list[str], device: str, imports: tuple[str, ...] = ()) -> str:
    lines = [*sorted(("import torch", *imports)), "", 'parts = [f"torch {torch.__version__}"]']
    lines += extra
    if device == "cuda":
        lines += ['parts.append(f"{torch.cuda.get_device_name()} (sm{\'\'.join(map(str, '
                  'torch.cuda.get_device_capability()))})")']
    lines.append('return ", ".join(parts)')
    return _function("versions()", "The versions this run used, for the report.", lines)


def distribution_version(distribution: str) -> list[str]:
    """``versions()`` lines appending `distribution`'s version from its package metadata."""
    return ["try:", "    import importlib.metadata", "",
            f"    parts.append(f\"{distribution} {{importlib.metadata.version('{distribution}')}}\")",
            "except Exception:  # no distribution metadata",
            f'    parts.append("{distribution} (version unknown)")']


def _to_numpy_lines(result: str = "result") -> list[str]:
    return [f'return {{name: t.detach().to("cpu", torch.float64).numpy() for name, t in {result}.items()}}']


def _tensor_lines(case: Case, dtype: str, names: tuple[str, ...], layout: str | None, grad: str,
                  suffix: str = "") -> list[str]:
    """q, k, v (views) in the case's layout, as the harness's `materialize` makes them, from ``inp[name + suffix]``."""
    layout = case.layout if layout is None else layout
    lines = []
    for n in names:
        lay = "contiguous" if (n == "q" and layout == "kv_broadcast") else layout
        lines.append(f'_, {n} = as_tensor(inp["{n}{suffix}"], {dtype}, DEVICE, "{lay}", {grad})')
    return lines


def _dout_lines(case: Case, dtype: str, layout: str | None = None) -> list[str]:
    """dout as the harness hands it to autograd: 0 on padded query rows (SEMANTICS.md §7, §17), in q's layout."""
    layout = case.layout if layout is None else layout
    lay = "contiguous" if layout == "kv_broadcast" else layout
    lines = ['dout = inp["dout"].copy()']
    if case.seqlens_q is not None:
        lines += [f"for b, n in enumerate({list(case.seqlens_q)}):",
                  "    dout[b, :, n:, :] = 0.0  # padded rows: their dout is ignored (SEMANTICS.md §7)"]
    lines.append(f'_, dout = as_tensor(dout, {dtype}, DEVICE, "{lay}")')
    return lines


def _wrapped(head: str, args: list[str], tail: str, width: int) -> list[str]:
    """``head + ", ".join(args) + tail`` over as many lines as `width` columns need, continuation lines aligned."""
    lines, line = [], head
    for i, arg in enumerate(args):
        piece = arg + (", " if i < len(args) - 1 else tail)
        if len(line) + len(piece.rstrip()) > width and line.strip() != head.strip():
            lines.append(line.rstrip())
            line = " " * len(head)
        line += piece
    return lines + [line]


def claim_reason(adapter: Adapter, spec: str, case: Case, device: str) -> tuple[str | None, str]:
    """(the adapter's reason to decline `case` on `device` or None, how that was checked).

    With the device here, ``adapter.supports``. Without it (a CUDA repro written on a CPU machine), the adapter's
    ``claim_reason``: the decision ``supports`` takes from its declarations alone (what the library claims, what the
    spelling carries); the library itself is asked when the file runs (its refusal then exits 2).
    """
    if adapter.unavailable_reason(device) is None:
        return adapter.supports(case, device), f"checked here with {adapter.name}.supports on {device}"
    declared = getattr(adapter, "claim_reason", None) or adapter.supports  # CudnnFP8.supports stops at the claims
    return declared(case, device), (f"checked against {adapter.name}'s declared claims; "
                                    f"{FAMILIES[family_of(spec)[0]].unasked} was not asked (no {device} device "
                                    "where this file was written)")


def _claim(adapter: Adapter, spec: str, case: Case, device: str) -> str:
    """How the adapter's claim on `case` was checked; `UnwritableCase` when it declines the case."""
    reason, how = claim_reason(adapter, spec, case, device)
    if reason:
        raise UnwritableCase(f"{adapter.name} declines case {case.id} (NOT_SUPPORTED): {reason}")
    return how


def _struct(case: Case) -> str:
    """The keyword arguments of `visible` / `dense_visibility` for `case`."""
    return f'causal={case.causal!r}, alignment="{case.alignment}", window={case.window!r}, chunk={case.chunk!r}'


def _sdpa_mask(args, case: Case, dtype: str) -> tuple[list[str], list[str]]:
    """(helpers, lines) that make ``attn_mask`` as an SDPA-signature call gets it (`sdpa_args`): a CausalBias, the
    dense boolean visibility, the bias where visible and -inf elsewhere, or None."""
    helpers = ["as_tensor"]
    if args.causal_bias is not None:
        return helpers, [f"attn_mask = {args.causal_bias}({case.Lq}, {case.Lk})  # a torch.nn.attention.bias "
                         "CausalBias"]
    if args.attn_mask is None:
        return helpers, ["attn_mask = None"]
    helpers += ["visible", "dense_visibility"]
    lens = (None if case.seqlens_q is None else list(case.seqlens_q),
            None if case.seqlens_k is None else list(case.seqlens_k))
    lines = [f'vis = dense_visibility({case.B}, {case.Lq}, {case.Lk}, {lens[0]}, {lens[1]}, inp.get("mask"),',
             f"                       {_struct(case)})"]
    if args.attn_mask.dtype == bool:
        return helpers, lines + ["attn_mask = torch.from_numpy(vis).to(DEVICE)  # True = attend"]
    return helpers, lines + ['attn_mask = np.where(vis, inp["bias"], -np.inf)  # the bias where visible, -inf '
                             "elsewhere", f"attn_mask = torch.from_numpy(attn_mask).to({dtype}).to(DEVICE)"]


# -- torch SDPA -----------------------------------------------------------------------------------------------------
def _sdpa(adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    from attention_conformance.adapters.torch_sdpa import SDPA_SPELLINGS, sdpa_args

    checked = _claim(adapter, spec, case, device)
    dtype = _TORCH_DTYPE[case.dtype]
    backend = adapter.backend_name
    args = sdpa_args(adapter.entry_point, case, inputs.mask, inputs.bias)
    variant, is_causal = args.causal_bias, args.is_causal
    helpers, mask_lines = _sdpa_mask(args, case, dtype)
    spelled = SDPA_SPELLINGS[adapter.entry_point].call if adapter.entry_point else (
        "a dense boolean attn_mask" if args.attn_mask is not None and args.attn_mask.dtype == bool else
        "an additive attn_mask (the bias where visible, -inf elsewhere)" if args.attn_mask is not None else
        f"is_causal={is_causal}, attn_mask=None")
    gqa = ", enable_gqa=True" if args.enable_gqa else ""
    body = ["import torch", "from torch.nn.attention import SDPBackend, sdpa_kernel"]
    if variant is not None:
        body.append(f"from torch.nn.attention.bias import {variant}")
    body.append("")
    inner = _tensor_lines(case, dtype, ("q", "k", "v"), None, "requires_grad") + mask_lines + [
        "try:",
        f"    with sdpa_kernel([SDPBackend.{backend}]):  # only this backend: no silent fallback",
        "        out = torch.nn.functional.scaled_dot_product_attention(",
        f"            q, k, v, attn_mask=attn_mask, dropout_p=0.0, is_causal={is_causal},",
        f"            scale={args.scale!r}{gqa})",
        "except RuntimeError as exc:",
        '    if "No available kernel" in str(exc):  # the backend refused these inputs: it computed nothing',
        "        raise LibraryDeclined(str(exc)) from None",
        "    raise",
        "return q, k, v, out, attn_mask"]
    body += ["def sdpa(requires_grad):"] + [f"    {x}" if x else "" for x in inner] + [
        "", "result = {\"out\": sdpa(False)[3]}"]
    observed = ("out",)
    if backend == "EFFICIENT_ATTENTION" and variant is None and not case.backward and case.Hq == case.Hkv:
        # the LSE, as the adapter reads it: the backend's own aten op on the same tensors, its output equal to the
        # public call's (the same computation), the boolean mask as 0 / -inf
        body += ["q, k, v, _, fmask = sdpa(False)",
                 "if fmask is not None and fmask.dtype == torch.bool:",
                 "    fmask = torch.zeros(fmask.shape, dtype=q.dtype, device=DEVICE).masked_fill(~fmask, -math.inf)",
                 "op = torch.ops.aten._scaled_dot_product_efficient_attention(",
                 f"    q, k, v, fmask, True, 0.0, {is_causal}, scale={args.scale!r})",
                 "if torch.equal(op[0], result[\"out\"]):  # else the op is another computation: no LSE reported",
                 f"    result[\"lse\"] = op[1][..., :{case.Lq}].float()"]
        observed += ("lse",)
    if case.backward:
        body += ["q, k, v, out, _ = sdpa(True)  # the backward: autograd of sum(out * dout) through the same call"]
        body += _dout_lines(case, dtype)
        body += ["dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_outputs=dout)",
                 "result.update(dq=dq, dk=dk, dv=dv)"]
        observed += ("dq", "dk", "dv")
    body += _to_numpy_lines()
    library = (f"torch.nn.functional.scaled_dot_product_attention with only SDPBackend.{backend} enabled, "
               f"{spelled}" + (", enable_gqa=True" if gqa else ""))
    requirement = f"SDPBackend.{backend} runs on CUDA"
    return CallPlan(
        library=library, device=device, observed=observed, helpers=helpers, checked=checked,
        run_library=_function("run_library(inp)", f"The call under test: {library}, on {device}"
                              + ("; then its backward" if case.backward else "") + ". Returns float64 arrays.", body),
        cannot_run_here=_preflight(device, [], requirement), versions=_versions([], device))


# -- a plain function with torch SDPA's signature (``--impl module:attr`` / ``path/to/file.py:attr``) ----------------
def _function_source(spec: str) -> str:
    """Where the file imports the function from: an absolute path for ``file.py:attr``, else ``module:attr``."""
    import os

    from attention_conformance.adapters.third_party import is_file_spec

    if not is_file_spec(spec):
        return spec
    path, attr = spec.rsplit(":", 1)
    return f"{os.path.abspath(path)}:{attr}"


_LOAD_FUNCTION = [
    "import importlib",
    "import importlib.util",
    "import os",
    "",
    "if getattr(load_function, \"fn\", None) is not None:",
    "    return load_function.fn",
    "if FUNCTION.split(\":\")[0].endswith(\".py\") or os.sep in FUNCTION or \"/\" in FUNCTION:",
    "    where, attr = FUNCTION.rsplit(\":\", 1)",
    "    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)",
    "    obj = importlib.util.module_from_spec(spec)",
    "    sys.modules[spec.name] = obj",
    "    spec.loader.exec_module(obj)",
    "else:",
    "    where, attr = FUNCTION.split(\":\", 1)",
    "    sys.path.insert(0, os.getcwd())  # as `python -m attention_conformance` found it: the working directory first",
    "    obj = importlib.import_module(where)",
    "for part in attr.split(\".\"):",
    "    obj = getattr(obj, part)",
    "load_function.fn = obj",
    "return obj",
]


def _sdpa_function(adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    """A plain SDPA-signature function (conformance/adapters/third_party.py): imported by the file from its module or
    file, called as the adapter calls it (the arguments `sdpa_args` gives the per-case plan, only the keywords that
    differ from SDPA's defaults, the first element of a tuple result), its backward through autograd."""
    from attention_conformance.adapters.third_party import SdpaFunctionAdapter
    from attention_conformance.adapters.torch_sdpa import sdpa_args

    if not isinstance(adapter, SdpaFunctionAdapter):
        raise UnwritableCase(f"--impl {spec}: an adapter object's call is its own code; the standalone writer writes "
                             "the built-in adapters' calls and plain SDPA-signature functions (use `repro` without "
                             "--standalone)")
    checked = _claim(adapter, spec, case, device)
    dtype = _TORCH_DTYPE[case.dtype]
    args = sdpa_args(None, case, inputs.mask, inputs.bias)
    helpers, mask_lines = _sdpa_mask(args, case, dtype)
    keywords = (["attn_mask=attn_mask"] if args.attn_mask is not None else []) + (
        ["is_causal=True"] if args.is_causal else []) + (
        [f"scale={args.scale!r}"] if args.scale is not None else []) + (["enable_gqa=True"] if args.enable_gqa else [])
    where = _function_source(spec)
    inner = _tensor_lines(case, dtype, ("q", "k", "v"), None, "requires_grad") + (
        mask_lines if args.attn_mask is not None else []) + _wrapped(
        "out = fn(", ["q", "k", "v", *keywords], ")", 108) + [
        "if isinstance(out, (tuple, list)):  # (out, lse, ...): the output is the first",
        "    out = out[0]",
        "return q, k, v, out"]
    body = ["import torch", "", "fn = load_function()", "", "def call(requires_grad):"]
    body += [f"    {x}" if x else "" for x in inner] + ["", "result = {\"out\": call(False)[3]}"]
    observed: tuple[str, ...] = ("out",)
    if case.backward:
        body += ["q, k, v, out = call(True)  # the backward: autograd of sum(out * dout) through the same call"]
        body += _dout_lines(case, dtype)
        body += ["dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_outputs=dout)",
                 "result.update(dq=dq, dk=dk, dv=dv)"]
        observed += ("dq", "dk", "dv")
    body += _to_numpy_lines()
    spelled = ("a dense boolean attn_mask" if args.attn_mask is not None and args.attn_mask.dtype == bool else
               "an additive attn_mask (the bias where visible, -inf elsewhere)" if args.attn_mask is not None else
               f"is_causal={args.is_causal}, no attn_mask")
    library = f"{where} (torch SDPA's signature), {spelled}" + (", enable_gqa=True" if args.enable_gqa else "")
    load = _function("load_function()", f"The function under test, {where}: imported from its file, or its module "
                     "from sys.path (PYTHONPATH) as the harness imported it.", _LOAD_FUNCTION)
    preflight = _preflight(device, [], "the function was judged on CUDA", then=(
        "try:", "    load_function()", "except Exception as exc:",
        '    return f"cannot import the function under test {FUNCTION}: {type(exc).__name__}: {exc}"'))
    versions = _versions(["module = sys.modules.get(getattr(load_function(), \"__module__\", \"\"))",
                          "parts.append(f\"{FUNCTION} {getattr(module, '__version__', 'version unknown')}\")"], device)
    return CallPlan(
        library=library, device=device, observed=observed, helpers=helpers, checked=checked,
        run_library=f"FUNCTION = {where!r}  # module:attr (from sys.path) or /path/to/file.py:attr\n\n\n" + load
        + "\n\n" + _function("run_library(inp)", f"The call under test: {library}, on {device}"
                             + ("; then its backward" if case.backward else "") + ". Returns float64 arrays.", body),
        cannot_run_here=preflight, versions=versions)


# -- torch FlexAttention --------------------------------------------------------------------------------------------
def _flex(adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    checked = _claim(adapter, spec, case, device)
    dtype = _TORCH_DTYPE[case.dtype]
    B, Hq, Lq, Lk = case.B, case.Hq, case.Lq, case.Lk
    body = ["import warnings", "", "import torch", "import torch.nn.attention.flex_attention as fa", ""]
    body += _tensor_lines(case, dtype, ("q", "k", "v"), None, case.backward and device == "cuda")
    structural = case.causal or case.window is not None or case.varlen or case.chunk is not None
    mask_heads = 1
    if inputs.mask is not None:
        mask_heads = np.asarray(inputs.mask).shape[1]
        body.append(f'mask = torch.from_numpy(np.array(np.broadcast_to(inp["mask"], ({B}, {mask_heads}, {Lq}, {Lk}))))'
                    ".to(DEVICE)")
    if case.varlen:
        sq = list(case.seqlens_q) if case.seqlens_q is not None else [Lq] * B
        sk = list(case.seqlens_k) if case.seqlens_k is not None else [Lk] * B
        body += [f"seqlens_q = torch.tensor({sq}, dtype=torch.int64, device=DEVICE)",
                 f"seqlens_k = torch.tensor({sk}, dtype=torch.int64, device=DEVICE)"]
    left, right = case.window if case.window is not None else (None, None)
    if case.causal:
        right = 0
    mask_mod = "None"
    if structural or inputs.mask is not None:
        mm = ["def mask_mod(b, h, q_idx, kv_idx):"]
        if case.varlen:
            mm += ["    sq, sk = seqlens_q[b], seqlens_k[b]", "    keep = kv_idx < sk  # padded keys (SEMANTICS.md §7)"]
            offset = "(sk - sq)"
        else:
            mm.append("    keep = kv_idx >= 0")
            offset = f"{Lk - Lq}"
        if right is not None or left is not None or case.chunk is not None:
            mm.append(f"    diag = q_idx + {offset}  # the aligned diagonal c(i) (SEMANTICS.md §4)" if
                      case.alignment == "bottom_right" else "    diag = q_idx  # top-left alignment (SEMANTICS.md §4)")
        if right is not None:
            mm.append(f"    keep = keep & (kv_idx <= diag + {right})")
        if left is not None:
            mm.append(f"    keep = keep & (kv_idx >= diag - {left})")
        if case.chunk is not None:
            mm += ["    # chunks of the aligned positions (SEMANTICS.md §19)",
                   f'    keep = keep & (torch.div(diag, {case.chunk}, rounding_mode="floor") == '
                   f'torch.div(kv_idx, {case.chunk}, rounding_mode="floor"))']
        if inputs.mask is not None:
            mm.append(f"    keep = keep & mask[b, {'h' if mask_heads > 1 else '0'}, q_idx, kv_idx]")
        if case.varlen:
            mm.append("    keep = keep & (q_idx < sq)  # padded query rows: fully masked (SEMANTICS.md §17)")
        mm.append("    return keep")
        body += [""] + mm + [""]
        body.append(f"block_mask = fa.create_block_mask(mask_mod, {B}, {Hq if mask_heads > 1 else None}, {Lq}, {Lk}, "
                    "device=DEVICE)")
        mask_mod = "block_mask"
    score_mod = "None"
    if case.softcap is not None or inputs.bias is not None:
        sm = ["def score_mod(score, b, h, q_idx, kv_idx):"]
        if case.softcap is not None:
            cap = repr(case.softcap)
            sm.append(f"    score = {cap} * torch.tanh(score / {cap})  # softcap (SEMANTICS.md §3)")
        if inputs.bias is not None:
            heads = np.asarray(inputs.bias).shape[1]
            score_dtype = "torch.float64" if case.dtype == "float64" else "torch.float32"
            pre = [f'bias = np.array(np.broadcast_to(inp["bias"], ({B}, {heads}, {Lq}, {Lk})))']
            if case.seqlens_q is not None:
                pre += [f"for b, n in enumerate({list(case.seqlens_q)}):",
                        "    bias[b, :, n:, :] = 0.0  # padded query rows: a finite bias (their values are ignored)"]
            body += pre + [f"bias = torch.from_numpy(bias).to({score_dtype}).to(DEVICE)"]
            sm.append(f"    score = score + bias[b, {'h' if heads > 1 else '0'}, q_idx, kv_idx]")
        sm.append("    return score")
        body += [""] + sm + [""]
        score_mod = "score_mod"
    fn = "fa.flex_attention" if device == "cpu" else "torch.compile(fa.flex_attention, dynamic=False)"
    gqa = case.Hq != case.Hkv
    body += [f"flex = {fn}",
             f"kwargs = dict(score_mod={score_mod}, block_mask={mask_mod}, scale={case.scale!r}, enable_gqa={gqa})",
             "with warnings.catch_warnings():",
             '    warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")',
             '    if hasattr(fa, "AuxRequest"):',
             "        out, aux = flex(q, k, v, return_aux=fa.AuxRequest(lse=True), **kwargs)",
             "        lse = aux.lse",
             "    else:  # torch builds before AuxRequest",
             "        out, lse = flex(q, k, v, return_lse=True, **kwargs)",
             'result = {"out": out, "lse": lse}']
    observed: tuple[str, ...] = ("out", "lse")
    if case.backward:
        body += _dout_lines(case, dtype)
        body += ["dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_outputs=dout)",
                 "result.update(dq=dq, dk=dk, dv=dv)"]
        observed += ("dq", "dk", "dv")
    body += _to_numpy_lines()
    how = "eager" if device == "cpu" else "torch.compile(flex_attention, dynamic=False)"
    library = (f"torch FlexAttention ({how}) with the case's mask_mod / score_mod and return_aux=AuxRequest(lse=True)"
               + (", enable_gqa=True" if gqa else ""))
    return CallPlan(
        library=library, device=device, observed=observed, helpers=["as_tensor"], checked=checked,
        run_library=_function("run_library(inp)", f"The call under test: {library}, on {device}"
                              + (", with the backward through autograd" if case.backward else "")
                              + ". Returns float64 arrays.", body),
        cannot_run_here=_preflight(device, [("from torch.nn.attention import flex_attention", "torch FlexAttention")],
                                   "the compiled FlexAttention of this case runs on CUDA"),
        versions=_versions([], device))


# -- flash-attention (FA2, FA3, FA4) ---------------------------------------------------------------------------------
def _value(x: object) -> str:
    """A `FaCall` keyword value as code: NumPy arrays as tensors on the device, `Handed` names as the tensors the
    file makes under those names, the rest as literals."""
    from attention_conformance.adapters.flash_attn import Handed

    if isinstance(x, Handed):
        return {"sinks": "sink", "paged.block_table": "page_table", "paged.k_pool": "k", "paged.v_pool": "v"}[x.name]
    if isinstance(x, np.ndarray):  # int32 lengths and tables, float32 descales
        if x.size > 1 and (x == x.flat[0]).all():
            return f"torch.full({x.shape}, {x.flat[0].item()!r}, dtype=torch.{x.dtype.name}, device=DEVICE)"
        return f"torch.tensor({x.tolist()!r}, dtype=torch.{x.dtype.name}, device=DEVICE)"
    return repr(x)


def _flash_attn(adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    """FA2 / FA3 / FA4: the call the adapter's own `call_for` describes (function, how q, k, v reach it, keywords),
    written out; FA4's sink as a float32 leaf, its LSE cotangent, its documented page-tail precondition."""
    from attention_conformance.adapters.flash_attn import FlashAttn4

    checked = _claim(adapter, spec, case, device)
    entry = adapter.entry(case)
    call = adapter.call_for(case, inputs, True)
    module = adapter.module_names[0]
    fp8 = case.fp8 is not None
    dtype = "torch.float8_e4m3fn" if fp8 else _TORCH_DTYPE[case.dtype]
    paged = call.tensors == "paged"
    helpers = ["as_tensor"]
    names = ("q",) if paged else ("q", "k", "v")
    body = _tensor_lines(case, dtype, names, "contiguous" if paged else None, "requires_grad",
                         suffix="8" if fp8 else "")
    if case.sinks is not None:
        body += ["# learnable_sink: one logit per query head (SEMANTICS.md §18), float32",
                 'sink = torch.tensor(np.asarray(inp["sinks"], dtype=np.float32), device=DEVICE)'
                 ".requires_grad_(requires_grad)"]
    else:
        body.append("sink = None")
    if paged:
        page = page_size_of(case.layout)
        body += ["# the pools [num_pages, Hkv, page_size, d] as flash-attn's caches [num_pages, page_size, Hkv, d]",
                 'k_pool = np.ascontiguousarray(inp["k_pool"].transpose(0, 2, 1, 3))',
                 'v_pool = np.ascontiguousarray(inp["v_pool"].transpose(0, 2, 1, 3))',
                 'table = inp["block_table"]']
        if isinstance(adapter, FlashAttn4):  # FA4's documented precondition (the adapter's _finite_tail)
            lens = call.kwargs["seqused_k"].tolist()
            body += ["# FA4's documented precondition: the slots past seqused_k in a sequence's last, partially used",
                     "# page are read, so they are made finite; every page and table entry a sequence does not use",
                     "# keeps NaN",
                     f"for b, n in enumerate({lens}):",
                     f"    used = -(-n // {page})",
                     f"    if used and n % {page}:",
                     f"        k_pool[table[b, used - 1], n % {page}:] = 0.0",
                     f"        v_pool[table[b, used - 1], n % {page}:] = 0.0"]
        body += [f"k = torch.from_numpy(k_pool).to({dtype}).to(DEVICE)",
                 f"v = torch.from_numpy(v_pool).to({dtype}).to(DEVICE)",
                 "page_table = torch.from_numpy(table).to(DEVICE)"]
    kw = [f"{key}=want_lse" if key == "return_lse" else f"{key}={_value(x)}" for key, x in call.kwargs.items()]
    body += _wrapped("kw = dict(", kw, ")", width=104)
    if call.optional:  # keywords passed where the installed function has them (the adapter's rule)
        opt = [f"{key}=want_lse" if key.startswith("return_") else f"{key}={_value(x)}"
               for key, x in call.optional.items()]
        body += _wrapped("optional = dict(", opt, ")", width=104)
        body += [f"accepted = inspect.signature({call.function}).parameters",
                 "kw.update((name, x) for name, x in optional.items() if name in accepted)"]
    if call.tensors == "packed":
        helpers += ["pack_varlen", "unpack_varlen", "unpack_varlen_lse"]
        sq, sk = call.packed_lengths()
        body += [f"lens_q, lens_k = {sq}, {sk}  # sequences packed to [total, H, D]",
                 f"res = {call.function}(pack_varlen(q, lens_q), pack_varlen(k, lens_k), pack_varlen(v, lens_k), "
                 "**kw)",
                 "out, lse = (res[0], res[1] if len(res) > 1 else None) if isinstance(res, (tuple, list)) "
                 "else (res, None)",
                 f"lse = unpack_varlen_lse(lse, lens_q, {case.Lq}) if (want_lse and lse is not None) else None",
                 f"out = unpack_varlen(out, lens_q, {case.Lq})"]
    else:
        kv = "k, v" if paged else "k.transpose(1, 2), v.transpose(1, 2)"
        body += [f"res = {call.function}(q.transpose(1, 2), {kv}, **kw)  # [B, L, H, D]",
                 "out, lse = (res[0], res[1] if len(res) > 1 else None) if isinstance(res, (tuple, list)) "
                 "else (res, None)",
                 "out = out.transpose(1, 2)"]
    body.append("return (q, k, v, sink), out, (lse if want_lse else None)")
    run = ["import inspect", ""] if call.optional else []
    run += ["import torch", f"from {module} import {call.function}", "", "def fa(requires_grad, want_lse):"]
    run += [f"    {x}" for x in body]
    run += ["", "_, out, lse = fa(False, True)", 'result = {"out": out, "lse": lse}']
    observed: tuple[str, ...] = ("out", "lse")
    if case.backward:
        run += [f"leaves, out, lse = fa(True, {case.lse_grad!r})  # the backward: autograd through the library's"]
        run += _dout_lines(case, _TORCH_DTYPE[case.dtype], "contiguous" if paged else None)
        outputs, cotangents = "[out]", "[dout]"
        if case.lse_grad:
            run += ['dlse = np.array(inp["dlse"], dtype=np.float32)']
            if case.seqlens_q is not None:
                run += [f"for b, n in enumerate({list(case.seqlens_q)}):",
                        "    dlse[b, :, n:] = 0.0  # padded rows are not in the loss"]
            outputs, cotangents = "[out, lse]", "[dout, torch.from_numpy(dlse).to(device=DEVICE, dtype=lse.dtype)]"
        run += [f"grads = torch.autograd.grad({outputs}, leaves if leaves[3] is not None else leaves[:3], "
                f"grad_outputs={cotangents})",
                "result.update(dq=grads[0], dk=grads[1], dv=grads[2])"]
        observed += ("dq", "dk", "dv")
        if case.sinks is not None:
            run.append("result.update(dsinks=grads[3])")
            observed += ("dsinks",)
    run += _to_numpy_lines()
    package = adapter.package.split(" (")[0]
    library = f"{package} ({module}) {adapter.spellings[entry].call}" + (
        ", deterministic=True" if adapter.entry_point == "deterministic" else "")
    distribution = getattr(adapter, "distribution", None)
    top = module.split(".")[0]
    imports: tuple[str, ...] = ()
    if distribution:
        versions = distribution_version(distribution)
    else:
        imports = (f"import {top}",)
        versions = [f"parts.append(f\"{top} {{getattr({top}, '__version__', '?')}}\")"]
    return CallPlan(
        library=library, device="cuda", observed=observed, helpers=helpers, checked=checked, lse_plus_inf_ok=True,
        run_library=_function("run_library(inp)", f"The call under test: {library}"
                              + (", then its backward through autograd" if case.backward else "")
                              + ". Returns float64 arrays in [B, H, L, D] order.", run),
        cannot_run_here=_preflight("cuda", [(f"import {module}", package)],
                                   f"{package} runs on CUDA ({adapter.cc_text})"),
        versions=_versions(versions, "cuda", imports))


# -- cuDNN FP8 ------------------------------------------------------------------------------------------------------
def _cudnn_fp8(adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    from attention_conformance.adapters.cudnn_fp8 import OUTPUT_TOP, SCALE_S, output_scale

    checked = _claim(adapter, spec, case, device) + " (cuDNN's check_support runs again when the file builds the graph)"
    fp8 = inputs.fp8
    descales = [float(np.float32(float(np.asarray(fp8[n]).reshape(-1)[0])))
                for n in ("q_descale", "k_descale", "v_descale")]
    s_o = output_scale(float(np.abs(np.asarray(fp8["v8"])).max(initial=0.0)) * descales[2])
    fmt = "FP8_E4M3" if case.fp8.format == "e4m3fn" else "FP8_E5M2"
    torch_fp8 = "torch.float8_e4m3fn" if case.fp8.format == "e4m3fn" else "torch.float8_e5m2"
    scale = case.scale if case.scale is not None else case.d ** -0.5
    align = case.alignment if case.causal else None
    body = ["import cudnn", "import torch", "",
            "torch.backends.cudnn.version()  # torch loads its cuDNN library first; the frontend then uses it"]
    body += _tensor_lines(case, torch_fp8, ("q", "k", "v"), None, "False", suffix="8")
    body += ['descales = [float(np.float32(inp[n])) for n in ("q_descale", "k_descale", "v_descale")]',
             'v_max = float(np.abs(inp["v8"]).max()) * descales[2]',
             f"s_o = float(2.0 ** np.floor(np.log2({OUTPUT_TOP!r} / v_max))) if v_max > 0 else 1.0  # O as codes of "
             "O * s_o",
             "f32 = cudnn.data_type.FLOAT",
             f"graph = cudnn.pygraph(io_data_type=cudnn.data_type.{fmt}, intermediate_data_type=f32, "
             "compute_data_type=f32)",
             f"fp8 = cudnn.data_type.{fmt}",
             "t = {n: graph.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=fp8)",
             '     for n, x in (("q", q), ("k", k), ("v", v))}',
             'scalars = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")',
             "t.update({n: graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32) "
             "for n in scalars})",
             "o, stats, amax_s, amax_o = graph.sdpa_fp8(",
             '    *(t[n] for n in ("q", "k", "v", *scalars)), generate_stats=True, '
             f"attn_scale={scale!r},",
             f"    use_causal_mask={align == 'top_left'}, use_causal_mask_bottom_right={align == 'bottom_right'}, "
             'name="sdpa_fp8")',
             f"o.set_output(True).set_dim([{case.B}, {case.Hq}, {case.Lq}, {case.dv}]).set_stride("
             f"[{case.Hq * case.Lq * case.dv}, {case.Lq * case.dv}, {case.dv}, 1])",
             "o.set_data_type(cudnn.data_type.FP8_E4M3)",
             "stats.set_output(True).set_data_type(f32)",
             "for a in (amax_s, amax_o):",
             "    a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)",
             "try:  # cuDNN's own refusal of the graph: it computed nothing",
             "    graph.validate()",
             "    graph.build_operation_graph()",
             "    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])",
             "    graph.check_support()",
             "    graph.build_plans()",
             "except Exception as exc:",
             "    raise LibraryDeclined(f\"cuDNN declines sdpa_fp8: {exc}\") from None",
             "",
             "def scalar(x):",
             "    return torch.full((1, 1, 1, 1), float(x), dtype=torch.float32, device=DEVICE)",
             "",
             f"out = torch.empty(({case.B}, {case.Hq}, {case.Lq}, {case.dv}), dtype=torch.float8_e4m3fn, "
             "device=DEVICE)",
             f"lse = torch.empty(({case.B}, {case.Hq}, {case.Lq}, 1), dtype=torch.float32, device=DEVICE)",
             'nan = float("nan")',
             'data = {t["q"]: q, t["k"]: k, t["v"]: v, o: out, stats: lse, amax_s: scalar(nan), amax_o: scalar(nan)}',
             f"values = [*descales, 1.0 / {SCALE_S!r}, {SCALE_S!r}, s_o]  # descale_s, scale_s: P's max offset; "
             "scale_o",
             "data.update({t[n]: scalar(x) for n, x in zip(scalars, values)})",
             "workspace = torch.empty(max(graph.get_workspace_size(), 1), dtype=torch.uint8, device=DEVICE)",
             "handle = cudnn.create_handle()",
             "cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)",
             "graph.execute(data, workspace, handle=handle)",
             "torch.cuda.synchronize()",
             'return {"out": out.to(torch.float64).cpu().numpy() / s_o, "lse": lse[..., 0].to(torch.float64).cpu()'
             ".numpy()}"]
    library = (f"cuDNN's FP8 attention forward (cudnn-frontend sdpa_fp8 on torch's cuDNN): {case.fp8.format} codes "
               f"with per-tensor descales, P scaled by {SCALE_S:g} before its FP8 rounding, O as e4m3 codes of "
               "O x s_o, Stats as the LSE")
    versions = ["parts.append(f\"cudnn-frontend {getattr(cudnn, '__version__', '?')}, cuDNN "
                "{torch.backends.cudnn.version()}\")"]
    return CallPlan(
        library=library, device="cuda", observed=("out", "lse"), helpers=["as_tensor"], checked=checked,
        out_dtype="float8_e4m3fn", out_scale=s_o,
        run_library=_function("run_library(inp)", f"The call under test: {library}. Returns float64 arrays.", body),
        cannot_run_here=_preflight("cuda", [("import cudnn", "nvidia-cudnn-frontend")],
                                   "cuDNN's FP8 attention runs on CUDA (sm90 and newer)"),
        versions=_versions(versions, "cuda", ("import cudnn",)))


def _later(module: str, name: str) -> Callable[..., CallPlan]:
    """The plan `name` of ``conformance.reproduce.<module>`` (a library's plan of its own; imported when first used:
    that module imports this one)."""
    def plan(*args: object) -> CallPlan:
        import importlib

        return getattr(importlib.import_module(f"attention_conformance.reproduce.{module}"), name)(*args)

    return plan


@dataclass(frozen=True)
class Family:
    """How the writer handles one adapter family: its plan, the devices it writes for, and what a file written without
    the device did not ask (the adapter's claims are read from its declarations then: `claim_reason`)."""

    plan: Callable[..., CallPlan]
    devices: tuple[str, ...]
    unasked: str = "the library"


_DISPATCHER = "torch's dispatcher (torch._fused_sdp_choice)"
#: the family of ``--impl module:attr`` / ``path/to/file.py:attr`` (a plain SDPA-signature function)
FUNCTION_FAMILY = "module:attr"
#: adapter family (the built-in name before any ``@ENTRY``) -> `Family`
FAMILIES: dict[str, Family] = {
    "torch-sdpa-math": Family(_sdpa, ("cpu", "cuda"), _DISPATCHER),
    "torch-sdpa-flash": Family(_sdpa, ("cpu", "cuda"), _DISPATCHER),
    "torch-sdpa-efficient": Family(_sdpa, ("cuda",), _DISPATCHER),
    "torch-sdpa-cudnn": Family(_sdpa, ("cuda",), _DISPATCHER),
    "torch-flex": Family(_flex, ("cpu", "cuda"), "torch's compiler"),
    "flash-attn-2": Family(_flash_attn, ("cuda",)),
    "flash-attn-3": Family(_flash_attn, ("cuda",)),
    "flash-attn-4": Family(_flash_attn, ("cuda",)),
    "cudnn-fp8": Family(_cudnn_fp8, ("cuda",), "cuDNN's check_support"),
    FUNCTION_FAMILY: Family(_sdpa_function, ("cpu", "cuda"), "the function's probes"),
    "flashinfer": Family(_later("flashinfer_calls", "flashinfer_plan"), ("cuda",), "FlashInfer's backend choice"),
    "xformers": Family(_later("xformers_calls", "xformers_plan"), ("cuda",), "xformers' dispatcher"),
}


def family_of(spec: str) -> tuple[str, tuple[str, ...]]:
    """(family, devices) of adapter `spec`; `UnwritableCase` with the reason for a spec no plan is written for."""
    if ":" in spec:  # module:attr or file.py:attr: a plain SDPA-signature function (an adapter object: the plan says)
        return FUNCTION_FAMILY, FAMILIES[FUNCTION_FAMILY].devices
    base, _ = split_variant(spec)
    if base in FAMILIES:
        return base, FAMILIES[base].devices
    if base.startswith(("cuda-", "reference-")):
        raise UnwritableCase(f"--impl {spec}: this project's own kernel, which needs this package to run; "
                             "`repro` without --standalone reproduces it")
    raise UnwritableCase(f"--impl {spec}: no standalone call is written for {base} (written: {', '.join(FAMILIES)})")


def plan_call(adapter: Adapter, spec: str, case: Case, device: str, inputs: CaseInputs) -> CallPlan:
    """The `CallPlan` of `case` through `adapter` (loaded from `spec`) on `device`; `UnwritableCase` when the adapter
    declines the case or its family has no plan."""
    family, _ = family_of(spec)
    return FAMILIES[family].plan(adapter, spec, case, device, inputs)
