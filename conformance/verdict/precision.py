"""The precision model of a correct kernel for one case: unit roundoffs, growth factors (TOLERANCES.md §1-§2).

`precision_model(case)` says in which formats a correct kernel rounds (output, P, score and softmax accumulation)
and `PrecisionModel` holds the unit roundoffs; `gamma(n)` is the probabilistic growth factor of an n-term sum
(Higham-Mary, `LAMBDA`). The bounds (`conformance.verdict.bounds`) and the naive same-precision implementation
(`conformance.verdict.naive`) read the model; the judge takes it for an adapter's own output dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attention_conformance.cases.case import Case

__all__ = [
    "FP8_ACCUMULATOR_U",
    "FP8_CASE_OUTPUT_DTYPES",
    "LAMBDA",
    "PrecisionModel",
    "gamma",
    "precision_model",
    "smallest_normal",
    "subnormal_half_spacing",
    "tiny_p_error",
    "unit_roundoff",
]

#: Higham-Mary probabilistic rounding-error constant: sum of n terms has error <= LAMBDA sqrt(n) u
#: sum |terms| except with probability <= 2 exp(-LAMBDA^2 / 2) (~7.5e-6 for LAMBDA = 5).
LAMBDA = 5.0
_FORMAT_BITS = {  # (mantissa bits, smallest normal exponent)
    "float64": (52, -1022),
    "float32": (23, -126),
    "float16": (10, -14),
    "bfloat16": (7, -126),
    "float8_e4m3fn": (3, -6),
    "float8_e5m2": (2, -14),
}
#: Accumulation precision assumed for FP8 tensor-core GEMMs: Hopper FP8 MMA keeps ~14 bits in its
#: accumulator (DeepSeek-V3 report, section 3.3.2), so u = 2^-13 covers it.
FP8_ACCUMULATOR_U = 2.0**-13


def unit_roundoff(dtype: str) -> float:
    """u = 2^-(p) for a format with p-1 stored mantissa bits (round to nearest)."""
    mbits, _ = _FORMAT_BITS[dtype]
    return 2.0 ** (-(mbits + 1))


def subnormal_half_spacing(dtype: str) -> float:
    """Largest absolute rounding error in the subnormal range: half the subnormal spacing."""
    mbits, emin = _FORMAT_BITS[dtype]
    return 2.0 ** (emin - mbits - 1)


def smallest_normal(dtype: str) -> float:
    _, emin = _FORMAT_BITS[dtype]
    return 2.0**emin


def tiny_p_error(p_dtype: str, p_flush: float) -> float:
    """Absolute error of a tiny probability P (TOLERANCES.md §1, `eta_p`): rounding to P's format in its subnormal
    range, or the softmax exponential's flush to zero (`p_flush`), whichever is larger."""
    return max(subnormal_half_spacing(p_dtype), p_flush)


def gamma(n: int | np.ndarray) -> np.ndarray | float:
    """Growth factor of an n-term fp sum / dot product: min(n, LAMBDA sqrt(n)) (TOLERANCES.md §2)."""
    n = np.asarray(n, dtype=np.float64)
    out = np.minimum(n, LAMBDA * np.sqrt(n))
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class PrecisionModel:
    """Unit roundoffs of a correct kernel for one case (TOLERANCES.md §1).

    u_out: output dtype; u_p: P for the PV product (the input dtype, FP8 format for FP8 cases);
    u_s: score GEMM accumulation; u_a: softmax / PV / gradient accumulation; eta_p: absolute error of a tiny P
    (`tiny_p_error`: its subnormal rounding, or `p_flush`); floor: smallest normal of the output dtype
    (flush-to-zero), over out_scale for an FP8 output written as codes of O * out_scale (SEMANTICS.md §10);
    p_flush: the P below which an fp32 softmax may give 0, fp32's smallest normal 2^-126 (``ex2.approx.ftz.f32``,
    the exponential of FlashAttention's kernels), 0 for an fp64 softmax.
    """

    in_dtype: str
    out_dtype: str
    p_dtype: str
    u_out: float
    u_p: float
    u_s: float
    u_a: float
    eta_p: float
    floor: float
    out_scale: float = 1.0
    p_flush: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


#: output dtypes an FP8 case may return (SEMANTICS.md §10): bf16 (the FA3 API), fp16 / fp32, and FP8 codes with a
#: per-tensor output scale (cuDNN's API)
FP8_CASE_OUTPUT_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")


def precision_model(case: Case, out_dtype: str | None = None, out_scale: float = 1.0) -> PrecisionModel:
    """The precision model of a correct kernel for `case` (optionally with a different output dtype); `out_scale`:
    an FP8 output's scale (its codes hold O * out_scale, SEMANTICS.md §10), which divides the floor."""
    if not (math.isfinite(out_scale) and out_scale > 0):
        raise ValueError(f"precision_model: out_scale must be finite and > 0, got {out_scale!r}")
    if out_scale != 1.0 and not (out_dtype or "").startswith("float8_"):
        raise ValueError(f"precision_model: out_scale {out_scale!r} applies to an FP8 output only, "
                         f"not to out_dtype {out_dtype!r}")
    if case.fp8 is not None:
        in_dt = "float8_" + case.fp8.format
        p_dt = in_dt
        out_dt = out_dtype or "bfloat16"
        u_s = u_a = FP8_ACCUMULATOR_U
        softmax = "float32"  # the FP8 GEMMs accumulate into fp32 registers; softmax runs there
    else:
        in_dt = case.dtype
        p_dt = in_dt
        out_dt = out_dtype or in_dt
        softmax = "float64" if in_dt == "float64" else "float32"
        u_s = u_a = unit_roundoff(softmax)
    if out_dt not in _FORMAT_BITS:
        out_dt = "float32"
    p_flush = smallest_normal("float32") if softmax == "float32" else 0.0
    return PrecisionModel(
        in_dtype=in_dt, out_dtype=out_dt, p_dtype=p_dt, u_out=unit_roundoff(out_dt), u_p=unit_roundoff(p_dt),
        u_s=u_s, u_a=u_a, eta_p=tiny_p_error(p_dt, p_flush), floor=smallest_normal(out_dt) / out_scale,
        out_scale=out_scale, p_flush=p_flush,
    )
