"""oracles/formats.py: one round to nearest, ties to even, from float64 (SEMANTICS.md §1, §10), held to
independent roundings: the float64 bit pattern rounded as an integer (bfloat16's normal range), NumPy's direct
float64 -> float16 / float32 casts; the edges by hand."""

from __future__ import annotations

import numpy as np
import pytest

from attention_conformance.oracles.formats import GRID, round_once


def _bf16_by_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 RNE of normal-range float64 ``x`` on its bits: 52 - 7 = 45 mantissa bits dropped, the half
    (2^44 - 1 plus the lowest kept bit) added first, so a tie goes to the even neighbour."""
    bits = x.view(np.uint64)
    keep = (bits >> np.uint64(45)) & np.uint64(1)
    rounded = (bits + np.uint64(2**44 - 1) + keep) & ~np.uint64(2**45 - 1)
    return rounded.view(np.float64)


def test_bfloat16_equals_the_integer_rounding_of_the_bits():
    rng = np.random.default_rng(7)
    mant = rng.uniform(1.0, 2.0, 2_000_000)
    exps = rng.integers(-126, 127, mant.size)
    x = np.ldexp(mant, exps) * rng.choice([-1.0, 1.0], mant.size)
    ties = np.ldexp(1 + (2 * rng.integers(0, 128, 1000) + 1) * 2.0**-8, rng.integers(-126, 127, 1000))
    x = np.concatenate([x, ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf)])
    got = round_once(x, "bfloat16", saturate=False)
    want = _bf16_by_bits(x)
    ok = np.abs(want) <= GRID["bfloat16"][2]
    assert np.array_equal(got[ok], want[ok])


@pytest.mark.parametrize("fmt", ["float16", "float32"])
def test_numpy_casts_round_once(fmt):
    rng = np.random.default_rng(3)
    x = np.ldexp(rng.uniform(1.0, 2.0, 500_000), rng.integers(-30, 16, 500_000)) * rng.choice([-1.0, 1.0], 500_000)
    with np.errstate(over="ignore"):
        want = x.astype(fmt).astype(np.float64)
    assert np.array_equal(round_once(x, fmt, saturate=False), want)


def test_overflow_is_inf_or_max_and_nan_stays():
    fmax = GRID["bfloat16"][2]
    x = np.array([fmax * (1 + 2**-9), 2.0**128 * (1 - 2**-9), -np.inf, np.nan])
    assert round_once(x, "bfloat16", saturate=False)[:3].tolist() == [fmax, np.inf, -np.inf]
    assert round_once(x, "bfloat16", saturate=True)[:3].tolist() == [fmax, fmax, -fmax]
    assert np.isnan(round_once(x, "bfloat16", saturate=True)[3])
    with pytest.raises(ValueError, match="fmt='int8' is not a format"):
        round_once(x, "int8", saturate=True)
