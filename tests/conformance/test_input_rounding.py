"""`cases.inputs.round_to_dtype`: one round to nearest, ties to even, from float64, the same on every machine
(SEMANTICS.md §1: inputs exact in the case dtype; §10 FP8 saturating). The inputs of a case, and a standalone repro's
digest of them, must not depend on the installed ml_dtypes, some of whose versions cast float64 to bfloat16 through
float32 (rounded twice)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import make_inputs, round_to_dtype
from attention_conformance.reproduce.inputs import harness_arrays
from attention_conformance.reproduce.source import input_digest

#: 1 + 2^-8 + 2^-30: above the bfloat16 tie 1 + 2^-8, so it rounds up to 1 + 2^-7; through float32 it becomes the tie
#: itself (2^-30 is under float32's half ulp at 1) and then rounds to even, 1.0
ABOVE_TIE = 1 + 2**-8 + 2**-30


def test_bfloat16_ties_are_broken_on_the_float64_value():
    x = np.array([ABOVE_TIE, -ABOVE_TIE, 1 + 2**-8, 1 + 3 * 2**-8])
    assert round_to_dtype(x, "bfloat16").tolist() == [1 + 2**-7, -(1 + 2**-7), 1.0, 1 + 2**-6]
    twice = x.astype(np.float32).astype(np.float64)
    assert twice[0] == 1 + 2**-8  # the detour through float32 lands on the tie


def test_bfloat16_edges_subnormals_overflow_nan_and_signed_zero():
    big = (2 - 2**-7) * 2.0**127  # the largest finite bfloat16
    x = np.array([big, big * (1 + 2**-9), 2.0**128 * (1 - 2**-9), np.inf, -np.inf, np.nan, -0.0, 2.0**-133,
                  3 * 2.0**-134, 2.0**-135])
    got = round_to_dtype(x, "bfloat16")
    assert got[0] == big and got[1] == big  # below the tie between max and 2^128
    assert got[2] == np.inf  # the tie rounds to the even 2^128: +inf
    assert got[3] == np.inf and got[4] == -np.inf and np.isnan(got[5])
    assert got[6] == 0.0 and np.signbit(got[6])
    assert got[7] == 2.0**-133 and got[8] == 2.0**-132 and got[9] == 0.0  # 3 * 2^-134: tie to even 2^-132; 2^-135: 0


def test_fp8_rounds_on_its_grid_and_saturates():
    x = np.array([1000.0, -np.inf, 1 + 2**-4 + 2**-30, 2.0**-10, 3 * 2.0**-10])  # the last two: subnormal ties
    assert round_to_dtype(x, "float8_e4m3fn").tolist() == [448.0, -448.0, 1 + 2**-3, 0.0, 2.0**-8]
    assert round_to_dtype(np.array([1e6, 1 + 2**-3 + 2**-30]), "float8_e5m2").tolist() == [57344.0, 1 + 2**-2]


def test_unknown_dtype_is_named():
    with pytest.raises(ValueError, match="dtype='int8' is not a case dtype"):
        round_to_dtype(np.zeros(2), "int8")


def test_inputs_do_not_depend_on_ml_dtypes(monkeypatch):
    """A bfloat16 case's inputs (the paged one whose digest differed on a machine with another ml_dtypes) are the same
    with ml_dtypes unimportable: the rounding is the harness's own."""
    case = Case(family="paged", B=4, Hq=4, Hkv=2, Lq=2, Lk=200, d=128, dv=128, dtype="bfloat16", causal=True,
                seqlens_k=(64, 65, 63, 0), layout="paged64", seed=1129107834)
    want = input_digest(harness_arrays(make_inputs(case)))
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    assert input_digest(harness_arrays(make_inputs(case))) == want
