"""Precision emulation for the NumPy reference kernels (oracles/SEMANTICS.md §10 for the FP8 formats).

A real attention kernel rounds its operands to a storage dtype (bf16, fp16, e4m3, e5m2), multiplies
them on tensor cores with float32 accumulation, rounds P to the input dtype before the PV product,
and writes the output in the input dtype. These helpers reproduce those steps on the CPU:

- `round_to(x, fmt)`: round to the grid of ``fmt`` with round-to-nearest-even; the FP8 formats and
  every float64 source saturate to +-max instead of overflowing (a single rounding: no detour through
  float32, whose double rounding breaks RNE ties);
- `acc_dtype(fmt)`: the accumulator dtype (float64 only for the "float64" emulation, float32 otherwise);
- `matmul(a, b, fmt)`: a float32 (or float64) matmul of operands already on the grid.

Formats: "float64", "float32", "float16", "bfloat16", "float8_e4m3fn" / "e4m3fn", "float8_e5m2" / "e5m2".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from attention_conformance.oracles.formats import GRID, round_once

__all__ = ["FORMATS", "Format", "acc_dtype", "canonical", "fmt_max", "blas_threads", "matmul", "round_exact",
           "round_to"]


_CONTROLLER = None


@contextlib.contextmanager
def blas_threads(n: int = 1) -> Iterator[None]:
    """Within the block NumPy's BLAS runs on ``n`` threads; the process's own setting is back afterwards.

    The reference kernels multiply many small tiles (64-128 wide); on a shared 2-core machine a multi-threaded
    OpenBLAS spins its threads and runs such products 10-200x slower than one thread. The reference adapters run
    their kernels inside this block (`threadpoolctl`, one controller per process: ~15 us a block), so importing this
    module changes nothing for the rest of the process.
    """
    global _CONTROLLER
    from threadpoolctl import ThreadpoolController

    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=n, user_api="blas"):
        yield


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: mantissa bits, smallest normal exponent, largest finite value."""

    name: str
    mbits: int
    emin: int
    max: float
    np_dtype: object
    saturating: bool


#: the formats a reference kernel stores in, their grids from `oracles.formats.GRID` (one table of the formats)
FORMATS: dict[str, Format] = {
    "float64": Format("float64", 52, -1022, float(np.finfo(np.float64).max), np.float64, False),
    **{name: Format(name, *GRID[name], np_dtype, name.startswith("float8"))
       for name, np_dtype in (("float32", np.float32), ("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16),
                              ("float8_e4m3fn", ml_dtypes.float8_e4m3fn), ("float8_e5m2", ml_dtypes.float8_e5m2))},
}
_ALIASES = {"e4m3fn": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "fp16": "float16",
            "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}


def canonical(fmt: str, argname: str = "dtype") -> str:
    """The canonical format name of ``fmt`` (aliases e4m3fn, e5m2, bf16, ...); ValueError naming ``argname``."""
    name = _ALIASES.get(fmt, fmt)
    if name not in FORMATS:
        raise ValueError(f"{argname}={fmt!r} is not a known format; expected one of {sorted(FORMATS)} "
                         f"or aliases {sorted(_ALIASES)}")
    return name


def fmt_max(fmt: str) -> float:
    """Largest finite value of ``fmt``."""
    return FORMATS[canonical(fmt)].max


def acc_dtype(fmt: str) -> type:
    """Accumulator dtype of a kernel whose storage dtype is ``fmt``: float64 for "float64", else float32."""
    return np.float64 if canonical(fmt) == "float64" else np.float32


def round_exact(x: np.ndarray, fmt: str) -> np.ndarray:
    """Round float64 ``x`` to ``fmt`` with one RNE rounding and saturation to +-max; float64 result.

    Works on the exact value (`oracles.formats.round_once`): the quantum 2**(e - mbits) of the binade of |x|
    (subnormal binade clamped at ``emin``) scales x by a power of two, so ``np.round`` (half to even) rounds exactly
    once. NaN stays NaN; +-inf and out-of-range values saturate to +-max (SEMANTICS.md §10).
    """
    name = canonical(fmt)
    if name == "float64":
        return np.array(x, dtype=np.float64)
    return round_once(x, name, saturate=True)


def round_to(x: np.ndarray, fmt: str) -> np.ndarray:
    """``x`` rounded to ``fmt``, returned in the accumulator dtype `acc_dtype(fmt)` (exact there).

    float64 sources go through `round_exact` (single rounding); float32 sources use an ml_dtypes cast,
    clipped first for the FP8 formats (ml_dtypes gives NaN/inf on FP8 overflow).
    """
    name = canonical(fmt)
    f = FORMATS[name]
    acc = acc_dtype(name)
    x = np.asarray(x)
    if name == "float64":
        return x.astype(np.float64)
    if x.dtype == np.float64:
        return round_exact(x, name).astype(acc)
    x32 = x.astype(np.float32, copy=False)
    if f.saturating:
        x32 = np.clip(x32, -f.max, f.max)
    return x32.astype(f.np_dtype).astype(acc)


def matmul(a: np.ndarray, b: np.ndarray, fmt: str) -> np.ndarray:
    """``a @ b`` accumulated in `acc_dtype(fmt)` (float32 tensor-core style, or float64)."""
    acc = acc_dtype(fmt)
    return np.matmul(np.ascontiguousarray(a, dtype=acc), np.ascontiguousarray(b, dtype=acc))
