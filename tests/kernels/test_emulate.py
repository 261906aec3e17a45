"""kernels/emulate.py: rounding to the emulated storage formats (RNE, saturation for FP8) and accumulation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attention_conformance.kernels import emulate

LOW = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
       "float8_e5m2": ml_dtypes.float8_e5m2, "float32": np.float32}


@pytest.mark.parametrize("fmt", list(LOW))
def test_round_to_matches_ml_dtypes_inside_the_range(fmt):
    rng = np.random.default_rng(0)
    x32 = (rng.standard_normal(50000) * rng.choice([1e-3, 1, 100], 50000)).astype(np.float32)
    x32 = x32[np.abs(x32) <= emulate.fmt_max(fmt)]
    want = x32.astype(LOW[fmt]).astype(np.float64)
    for src in (x32, x32.astype(np.float64)):
        got = np.asarray(emulate.round_to(src, fmt), dtype=np.float64)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{fmt} from {src.dtype}: {src[bad[0]]!r} -> {got[bad[0]]!r}, ml_dtypes {want[bad[0]]!r}"
    assert emulate.round_to(x32, fmt).dtype == np.float32, "low-precision values are carried in float32"


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_saturates_from_float32_and_float64(fmt):
    m = emulate.fmt_max(fmt)
    for dt in (np.float32, np.float64):
        x = np.array([m * 1.5, -m * 3, np.inf], dtype=dt)
        assert np.array_equal(emulate.round_to(x, fmt), [m, -m, m]), f"{fmt} from {dt.__name__}: no saturation"


def test_single_rounding_from_float64():
    # a float64 value just above a bf16 tie: float32 would first round it onto the tie
    tie = 1.0 + 2.0**-8
    x = np.array([tie + 2.0**-40, tie, 1.0 + 3 * 2.0**-8])
    got = emulate.round_to(x, "bfloat16").astype(np.float64)
    assert np.array_equal(got, [1.0 + 2.0**-7, 1.0, 1.0 + 2.0**-6]), f"bf16 RNE from float64 gave {got}"


def test_float64_is_identity_and_accumulators():
    x = np.random.default_rng(1).standard_normal(10)
    assert np.array_equal(emulate.round_to(x, "float64"), x)
    assert emulate.acc_dtype("float64") is np.float64 and emulate.acc_dtype("bf16") is np.float32
    assert emulate.matmul(np.ones((2, 3)), np.ones((3, 2)), "float16").dtype == np.float32
    with pytest.raises(ValueError, match="dtype"):
        emulate.canonical("float128")
