"""Probing a plain SDPA-signature function: which dtypes and features it runs, inside what it declares.

`probe(fn, claims, device)` calls the function on small tensors, once per (function, claims, device):

1. **dtypes**: for each dtype (the declared ones, else float32, float16, bfloat16, float64) the
   candidate shapes of `candidate_shapes` in order until one runs: without a declaration d = 16 on a tiny
   non-square problem, then shapes real kernels accept (d = 64 and 128, L = 128, non-causal and causal);
   a declaration narrows them (declared head dims, ``causal="only"`` -> causal calls only,
   ``seqlen_multiple`` -> lengths that are multiples). A dtype none of them runs on records every
   candidate's exception.
2. **features** not declared (GQA, dv != d, boolean mask, float bias, scale, causal square and
   non-square, non-causal, backward): one call each on the first shape that ran (its causal mode kept
   where the feature allows it, so a causal-only kernel is probed causally).
3. **head dims** not declared: `head_dim_reason` probes a case's (d, dv) lazily, on the first shape's
   dtype, lengths and causal mode.

A probe that raises makes its feature NOT_SUPPORTED with the exception as the reason; the probes
express SEMANTICS.md §1-§7 through the SDPA signature (``is_causal`` = top-left, §4; boolean mask
True = attend, float mask added to the scores, §6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.declared import SDPA_DTYPES, Claims

__all__ = ["FEATURES", "PROBE_DTYPES", "ProbeShape", "ProbeReport", "candidate_shapes", "probe", "head_dim_reason",
           "sdpa_kwargs", "first_tensor"]

PROBE_DTYPES = SDPA_DTYPES
#: probes beyond dtypes, in the order they are reported
FEATURES = ("gqa", "dv_ne_d", "bool_mask", "float_bias", "scale", "causal", "causal_nonsquare", "noncausal",
            "backward")
#: the `Claims` key that declares each feature
CLAIM_OF = {"gqa": "gqa", "dv_ne_d": "dv_ne_d", "bool_mask": "mask", "float_bias": "bias", "scale": "scale",
            "causal": "causal", "causal_nonsquare": "causal", "noncausal": "causal", "backward": "backward"}
_B, _H = 1, 2
_NO_MASK = "declared causal='only': never called with an attn_mask (is_causal=True and a mask are exclusive)"


@dataclass(frozen=True)
class ProbeShape:
    """One probe problem: head dim, lengths, and whether the call is ``is_causal=True``."""

    d: int
    Lq: int
    Lk: int
    causal: bool

    def describe(self) -> str:
        return f"d={self.d} Lq={self.Lq} Lk={self.Lk} {'causal' if self.causal else 'non-causal'}"


@dataclass
class ProbeReport:
    """{feature: None if it ran, else why not}, and the dtype and shape the feature probes used."""

    results: dict[str, str | None] = field(default_factory=dict)
    dtype: str | None = None
    shape: ProbeShape | None = None


def sdpa_kwargs(attn_mask=None, is_causal: bool = False, scale: float | None = None, gqa: bool = False) -> dict:
    """Only the keyword arguments that differ from SDPA's defaults (a function without, say,
    ``enable_gqa`` still runs every MHA case)."""
    kwargs: dict[str, Any] = {}
    if attn_mask is not None:
        kwargs["attn_mask"] = attn_mask
    if is_causal:
        kwargs["is_causal"] = True
    if scale is not None:
        kwargs["scale"] = scale
    if gqa:
        kwargs["enable_gqa"] = True
    return kwargs


def first_tensor(result):
    """The output tensor of a call that may return (out, lse, ...)."""
    if isinstance(result, tuple | list):
        return result[0]
    return result


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def candidate_shapes(claims: Claims | None) -> list[ProbeShape]:
    """The shapes a dtype probe tries, in order, inside what ``claims`` declares."""
    c = claims or Claims()
    modes = [True] if c.causal == "only" else [False] if c.causal is False else [False, True]
    m = c.seqlen_multiple or 1
    L = _round_up(128, m)
    out: list[ProbeShape] = []
    if c.head_dims is None:
        if m == 1 and False in modes:
            out.append(ProbeShape(16, 5, 7, False))  # tiny and non-square: the cheap first try
        dims = [64, 128]
    else:
        dims = sorted(c.head_dims, key=lambda d: (d not in (64, 128), d))
    for d in dims:
        for causal in modes:
            out.append(ProbeShape(d, L, L, causal))
    return out


class _Caller:
    """Makes probe tensors and calls the function; every exception becomes the text of a reason."""

    def __init__(self, fn: Callable, device: str):
        self.fn = fn
        self.device = device
        self.gen = torch.Generator().manual_seed(1234)

    def rand(self, *shape: int, dtype) -> Any:
        return torch.randn(*shape, generator=self.gen, dtype=torch.float32).to(dtype).to(self.device)

    def attempt(self, call: Callable[[], Any]) -> str | None:
        try:
            out = first_tensor(call())
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"returned {type(out).__name__}, not a torch.Tensor")
            return None
        except Exception as exc:  # the probe's whole point: any exception means "not supported"
            return _describe(exc)

    def plain(self, dtype: str, s: ProbeShape, *, hq: int = _H, dv: int | None = None, **kw) -> str | None:
        dt = tc.torch_dtype(dtype)
        q = self.rand(_B, hq, s.Lq, s.d, dtype=dt)
        k = self.rand(_B, _H, s.Lk, s.d, dtype=dt)
        v = self.rand(_B, _H, s.Lk, dv or s.d, dtype=dt)
        return self.attempt(lambda: self.fn(q, k, v, **sdpa_kwargs(is_causal=s.causal, gqa=hq != _H, **kw)))


def _dtype_probes(call: _Caller, claims: Claims, report: ProbeReport) -> None:
    shapes = candidate_shapes(claims)
    for name in PROBE_DTYPES:
        if claims.dtypes is not None and name not in claims.dtypes:
            report.results[f"dtype:{name}"] = f"not declared (claims dtypes={sorted(claims.dtypes)})"
            continue
        order = shapes if report.shape is None else [report.shape] + [s for s in shapes if s != report.shape]
        errors: list[str] = []
        for s in order:
            err = call.plain(name, s)
            if err is None:
                if report.shape is None:
                    report.dtype, report.shape = name, s
                break
            errors.append(f"{s.describe()}: {err}")
        else:
            report.results[f"dtype:{name}"] = "; ".join(errors)
            continue
        report.results[f"dtype:{name}"] = None


def _feature_probes(call: _Caller, claims: Claims, report: ProbeReport, shapes: list[ProbeShape]) -> None:
    dt, s = report.dtype, report.shape
    assert dt is not None and s is not None
    gen, device = call.gen, call.device
    square = ProbeShape(s.d, s.Lk, s.Lk, s.causal)
    wide = ProbeShape(s.d, s.Lq, 2 * s.Lk, True)
    other_dims = sorted((claims.head_dims or {2 * s.d}) - {s.d})

    def masked(float_bias: bool) -> str | None:
        dtt = tc.torch_dtype(dt)
        q, k, v = (call.rand(_B, _H, n, s.d, dtype=dtt) for n in (s.Lq, s.Lk, s.Lk))
        if float_bias:
            mask = call.rand(_B, _H, s.Lq, s.Lk, dtype=dtt)
        else:
            mask = torch.rand(_B, 1, s.Lq, s.Lk, generator=gen).to(device) > 0.3
            mask[..., 0] = True
        return call.attempt(lambda: call.fn(q, k, v, **sdpa_kwargs(attn_mask=mask)))

    def grad() -> str | None:
        dtt = tc.torch_dtype(dt)
        leaves = [call.rand(_B, _H, n, s.d, dtype=dtt).requires_grad_(True) for n in (s.Lq, s.Lk, s.Lk)]

        def run():
            with torch.enable_grad():
                out = first_tensor(call.fn(*leaves, **sdpa_kwargs(is_causal=s.causal)))
                # the sum's gradient is ones_like(out): the same backward without an explicit cotangent, whose
                # shape check imports sympy (0.85 s on a 2-core machine, in every process that probes a function)
                return torch.autograd.grad(out.sum(), leaves)[0]

        return call.attempt(run)

    def noncausal() -> str | None:
        if not s.causal:
            return None
        tried = [t for t in shapes if not t.causal]
        errs = [f"{t.describe()}: {e}" for t in tried if (e := call.plain(dt, t)) is not None]
        return None if len(errs) < len(tried) or not tried else "; ".join(errs)

    probes: dict[str, Callable[[], str | None]] = {
        "gqa": lambda: call.plain(dt, s, hq=2 * _H),
        "dv_ne_d": lambda: call.plain(dt, s, dv=other_dims[0]) if other_dims else
        f"no declared head dim other than d={s.d}",
        "bool_mask": lambda: _NO_MASK if claims.causal == "only" else masked(False),
        "float_bias": lambda: _NO_MASK if claims.causal == "only" else masked(True),
        "scale": lambda: call.plain(dt, s, scale=0.37),
        "causal": lambda: call.plain(dt, ProbeShape(s.d, square.Lq, square.Lk, True)),
        "causal_nonsquare": lambda: call.plain(dt, wide),
        "noncausal": noncausal,
        "backward": grad,
    }
    for feature in FEATURES:
        declared = getattr(claims, CLAIM_OF[feature])
        if feature == "noncausal" and declared is not None:
            report.results[feature] = "declared causal='only'" if declared == "only" else None
        elif feature in ("causal", "causal_nonsquare") and declared is not None:
            report.results[feature] = "declared causal=False" if declared is False else None
        elif declared is not None:
            report.results[feature] = None if declared else f"declared {CLAIM_OF[feature]}=False"
        else:
            report.results[feature] = probes[feature]()


# (function identity, claims, device) -> ProbeReport; one probe per process
_CACHE: dict[tuple[int, str, str], ProbeReport] = {}
_KEEP: dict[int, Any] = {}  # keeps probed functions alive so their id() stays unique


def probe(fn: Callable, claims: Claims | None, device: str) -> ProbeReport:
    """The `ProbeReport` of ``fn`` on ``device`` inside ``claims`` (computed once per process)."""
    claims = claims or Claims()
    key = (id(fn), claims.key(), device)
    if key not in _CACHE:
        _KEEP[id(fn)] = fn
        report = ProbeReport()
        call = _Caller(fn, device)
        _dtype_probes(call, claims, report)
        if report.shape is None:
            for feature in FEATURES:
                report.results[feature] = "no dtype probe succeeded, so no feature could be probed"
        else:
            _feature_probes(call, claims, report, candidate_shapes(claims))
        _CACHE[key] = report
    return _CACHE[key]


def head_dim_reason(fn: Callable, claims: Claims | None, device: str, d: int, dv: int) -> str | None:
    """None when ``fn`` runs head dims (d, dv) on the probe dtype and shape, else the exception (cached)."""
    report = probe(fn, claims, device)
    if report.shape is None or (d == dv == report.shape.d):
        return None
    key = f"head_dim:{d}x{dv}"
    if key not in report.results:
        s = report.shape
        report.results[key] = _Caller(fn, device).plain(report.dtype, ProbeShape(d, s.Lq, s.Lk, s.causal), dv=dv)
    return report.results[key]
