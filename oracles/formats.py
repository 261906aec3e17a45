"""The floating-point formats inputs and kernels are rounded to, and one exact rounding to each.

Implements the rounding of oracles/SEMANTICS.md §1 (case inputs: one round to nearest, ties to even, from the
float64 value, the same on every machine) and §10 (FP8: the same rounding, saturating at +-max). Written on the
format's grid instead of by a cast: NumPy rounds float64 -> float16 / float32 once, but ml_dtypes' casts to
bfloat16 go through float32 in some of its versions, and a double rounding breaks ties the other way (1 + 2^-8 +
2^-30 is 1 + 2^-7 in bfloat16, 1.0 through float32), so a machine's inputs would depend on its ml_dtypes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GRID", "round_once"]

#: (mantissa bits, smallest normal exponent, largest finite value) of each format rounded on its grid
GRID: dict[str, tuple[int, int, float]] = {
    "float32": (23, -126, float(np.finfo(np.float32).max)),
    "float16": (10, -14, 65504.0),
    "bfloat16": (7, -126, (2 - 2**-7) * 2.0**127),
    "float8_e4m3fn": (3, -6, 448.0),
    "float8_e5m2": (2, -14, 57344.0),
}


def round_once(x: np.ndarray, fmt: str, *, saturate: bool) -> np.ndarray:
    """float64 ``x`` rounded once to ``fmt`` (a key of `GRID`), float64 out; NaN stays NaN.

    Within the binade of |x| (clamped at the smallest normal exponent, so subnormals share its quantum) x is divided
    by the quantum 2^(e - mantissa bits), an exact power-of-two scaling, rounded half to even by ``np.round`` and
    multiplied back. Beyond the largest finite value: with ``saturate`` (§10's FP8, the kernels' emulated stores)
    +-max, +-inf included; without (§1, IEEE round to nearest) a value that rounds past max is +-inf.
    """
    if fmt not in GRID:
        raise ValueError(f"fmt={fmt!r} is not a format rounded on its grid; expected one of {sorted(GRID)}")
    mbits, emin, fmax = GRID[fmt]
    x = np.asarray(x, dtype=np.float64)
    if saturate:
        x = np.where(np.isinf(x), np.copysign(fmax, x), x)
    _, ex = np.frexp(np.abs(x))
    quantum = np.ldexp(1.0, (np.maximum(ex.astype(np.int64) - 1, emin) - mbits).astype(np.int32))
    with np.errstate(invalid="ignore"):  # +-inf / quantum, NaN
        out = np.round(x / quantum) * quantum
        if saturate:
            return np.clip(out, -fmax, fmax)
        return np.where(np.abs(out) > fmax, np.copysign(np.inf, x), out)
