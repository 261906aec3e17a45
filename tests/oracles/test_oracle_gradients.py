"""Analytic backward (SEMANTICS.md §13) vs central differences of the forward: max abs error <= 2e-8."""

from __future__ import annotations

import numpy as np
import pytest
from oracle_helpers import case_repr, rand_qkv

from attention_conformance import oracles
from attention_conformance.oracles.numgrad import compare_gradients, numerical_gradients

ATOL = 2e-8  # the seed lab's bound ([FA-anim] "动手 · CPU 参考实现")
_rng = np.random.default_rng(3)
_row_mask = np.ones((5, 6), bool)
_row_mask[2] = False  # one fully masked row (§8)

CASES = {
    "plain": {},
    "causal_bottom_right": {"causal": True},
    "causal_top_left": {"causal": True, "alignment": "top_left"},
    "window_bottom_right": {"window": (1, 2)},
    "window_top_left": {"window": (2, 0), "alignment": "top_left"},
    "causal_window": {"causal": True, "window": (1, None)},
    "mask_random": {"mask": _rng.random((2, 1, 5, 6)) > 0.3},
    "mask_full_row": {"mask": _row_mask},
    "bias": {"bias": _rng.standard_normal((4, 5, 6))},
    "bias_neg_inf": {"bias": np.where(_rng.random((5, 6)) > 0.7, -np.inf, 0.5)},
    "softcap": {"softcap": 0.8, "scale": 1.7},
    "negative_scale": {"scale": -1.1},
    "varlen": {"seqlens_q": [3, 5], "seqlens_k": [6, 2], "causal": True},
    "varlen_empty": {"seqlens_q": [0, 4], "seqlens_k": [6, 0]},
}
SHAPES = {
    "gqa_dv_ne_d": dict(B=2, Hq=4, Hkv=2, Lq=5, Lk=6, d=3, dv=2),
    "mqa_lq_gt_lk": dict(B=1, Hq=2, Hkv=1, Lq=6, Lk=4, d=2, dv=3),
}


def _check(shape, kw):
    q, k, v, dout = rand_qkv(**shape, dout=True, seed=5)
    analytic = oracles.attention_backward(q, k, v, dout, **kw)
    numeric = numerical_gradients(lambda a, b, c: oracles.attention(a, b, c, **kw)[0], q, k, v, dout, eps=1e-6)
    for name, (err, idx) in compare_gradients(analytic, numeric).items():
        assert err <= ATOL, (
            f"{name}{idx}: |analytic - central difference| = {err:.3e} > {ATOL:g}; {case_repr(shape, kw)}"
        )
    return analytic


@pytest.mark.backward
@pytest.mark.parametrize("name", list(CASES))
def test_backward_matches_central_differences(name):
    _check(SHAPES["gqa_dv_ne_d"], dict(CASES[name]))


@pytest.mark.backward
@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"causal": True, "alignment": "top_left", "softcap": 2.0}])
def test_backward_mqa_lq_gt_lk(kw):
    """Lq > Lk: under bottom-right causal the first rows are fully masked (§4, §8)."""
    dq, _, _ = _check(SHAPES["mqa_lq_gt_lk"], kw)
    if kw.get("causal") and kw.get("alignment", "bottom_right") == "bottom_right":
        assert np.all(dq[:, :, :2] == 0), "fully masked rows must have dq = 0 exactly (§8)"


@pytest.mark.backward
def test_fully_masked_rows_contribute_nothing():
    """dq = 0 on masked rows; dk, dv unchanged when those rows' dout changes (§8, §13)."""
    q, k, v, dout = rand_qkv(**SHAPES["gqa_dv_ne_d"], dout=True, seed=9)
    dq, dk, dv = oracles.attention_backward(q, k, v, dout, mask=_row_mask)
    assert np.all(dq[:, :, 2] == 0)
    dout2 = dout.copy()
    dout2[:, :, 2] = 1e3
    _, dk2, dv2 = oracles.attention_backward(q, k, v, dout2, mask=_row_mask)
    np.testing.assert_array_equal(dk, dk2)
    np.testing.assert_array_equal(dv, dv2)


@pytest.mark.backward
def test_gqa_backward_is_sum_over_group():
    """dk, dv of a kv head = sum over its query heads of the MHA gradients with repeated K, V (§9)."""
    q, k, v, dout = rand_qkv(**SHAPES["gqa_dv_ne_d"], dout=True, seed=4)
    dq, dk, dv = oracles.attention_backward(q, k, v, dout, causal=True)
    kr, vr = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    dq2, dkr, dvr = oracles.attention_backward(q, kr, vr, dout, causal=True)
    np.testing.assert_allclose(dq, dq2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(dk, dkr.reshape(2, 2, 2, 6, 3).sum(axis=2), rtol=0, atol=1e-14)
    np.testing.assert_allclose(dv, dvr.reshape(2, 2, 2, 6, 2).sum(axis=2), rtol=0, atol=1e-14)


def test_gradcheck_helper_catches_a_wrong_gradient():
    q, k, v, dout = rand_qkv(B=1, Hq=1, Hkv=1, Lq=3, Lk=3, d=2, dout=True)

    def wrong(a, b, c, g):
        dq, dk, dv = oracles.attention_backward(a, b, c, g)
        return dq * 1.01, dk, dv

    with pytest.raises(oracles.numgrad.GradientMismatch, match=r"dq\[\(0, 0, \d, \d\)\]"):
        oracles.gradcheck(lambda a, b, c: oracles.attention(a, b, c)[0], wrong, q, k, v, dout)
    report = oracles.gradcheck(lambda a, b, c: oracles.attention(a, b, c)[0], oracles.attention_backward, q, k, v, dout)
    assert max(e for e, _ in report.values()) <= ATOL


@pytest.mark.backward
def test_padded_rows_and_keys_in_backward():
    """§7: padded query rows get dq = 0 and their dout is ignored; padded keys get dk = dv = 0."""
    q, k, v, dout = rand_qkv(**SHAPES["gqa_dv_ne_d"], dout=True, seed=12)
    kw = dict(seqlens_q=[3, 5], seqlens_k=[4, 6], causal=True)
    dq, dk, dv = oracles.attention_backward(q, k, v, dout, **kw)
    assert np.all(dq[0, :, 3:] == 0) and np.all(dk[0, :, 4:] == 0) and np.all(dv[0, :, 4:] == 0)
    dout2 = dout.copy()
    dout2[0, :, 3:] = 1e6
    for a, b in zip((dq, dk, dv), oracles.attention_backward(q, k, v, dout2, **kw)):
        np.testing.assert_array_equal(a, b)
