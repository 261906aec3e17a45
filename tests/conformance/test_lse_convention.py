"""LSE conventions (SEMANTICS.md §21): base-2 and packed layouts convert exactly to the contract's LSE."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_conformance.cases.case import Case
from attention_conformance.verdict.lse_convention import to_contract

CASE = Case(family="t", B=3, Hq=2, Hkv=1, Lq=5, Lk=7, d=4, dv=4, seqlens_q=(5, 0, 2), seqlens_k=(7, 7, 3))


def _lse() -> np.ndarray:
    lse = np.random.default_rng(0).standard_normal((3, 2, 5))
    lse[0, 1, 3] = -np.inf  # a fully masked row keeps its convention
    return lse


def _pack(lse: np.ndarray, lens) -> np.ndarray:
    """[Hq, total_q]: each sequence's real rows one after another (cu_seqlens order)."""
    return np.concatenate([lse[b, :, :n] for b, n in enumerate(lens)], axis=1)


def test_natural_bhs_is_identity():
    lse = _lse()
    np.testing.assert_array_equal(to_contract(lse, CASE), lse)


def test_base2_is_multiplied_by_ln2():
    lse = _lse()
    got = to_contract(lse / math.log(2.0), CASE, base="2")
    np.testing.assert_allclose(got, lse, rtol=1e-15, atol=0)
    assert got[0, 1, 3] == -np.inf


@pytest.mark.parametrize("layout", ["hs_total", "total_h"])
def test_packed_layouts_unpack_to_bhs(layout):
    lse = _lse()
    packed = _pack(lse, (5, 0, 2))
    packed = packed if layout == "hs_total" else packed.T
    got = to_contract(packed, CASE, layout=layout)
    real = np.arange(5)[None, :] < np.array([5, 0, 2])[:, None]
    np.testing.assert_array_equal(got[np.broadcast_to(real[:, None], got.shape)],
                                  lse[np.broadcast_to(real[:, None], lse.shape)])
    assert np.all(got[1] == -np.inf) and np.all(got[2, :, 2:] == -np.inf)


def test_shape_and_name_errors():
    with pytest.raises(ValueError, match=r"lse_layout='hs_total' \[Hq, total_q\] = \[2, 7\]"):
        to_contract(np.zeros((2, 8)), CASE, layout="hs_total")
    with pytest.raises(ValueError, match=r"lse_layout='bhs' \[B, Hq, Lq\] = \[3, 2, 5\]"):
        to_contract(np.zeros((2, 7)), CASE)
    with pytest.raises(ValueError, match=r"lse_base='10'"):
        to_contract(_lse(), CASE, base="10")
    with pytest.raises(ValueError, match=r"lse_layout='thd'"):
        to_contract(_lse(), CASE, layout="thd")
