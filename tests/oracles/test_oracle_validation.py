"""Bad input raises ValueError naming the argument and the shapes (SEMANTICS.md §15). One test per rule."""

from __future__ import annotations

import numpy as np
import pytest
from oracle_helpers import rand_qkv

from attention_conformance import oracles


@pytest.fixture
def qkv():
    return rand_qkv(B=2, Hq=4, Hkv=2, Lq=5, Lk=6, d=3, dv=2)


def _raises(match, fn, *args, **kw):
    with pytest.raises(ValueError, match=match) as info:
        fn(*args, **kw)
    assert "shape" in str(info.value), f"message does not name the shapes: {info.value}"
    return str(info.value)


def test_rank_not_4(qkv):
    q, k, v = qkv
    msg = _raises(r"q must have rank 4", oracles.attention, q[0], k, v)
    assert "(4, 5, 3)" in msg


def test_rank_not_4_backward_dout(qkv):
    q, k, v = qkv
    _raises(r"dout must have rank 4", oracles.attention_backward, q, k, v, np.zeros((4, 5, 2)))


def test_head_dims_differ(qkv):
    q, k, v = qkv
    _raises(r"q and k head dims differ", oracles.attention, q, k[..., :2], v)


def test_hq_not_multiple_of_hkv(qkv):
    q, k, v = qkv
    _raises(r"Hq=3 must be a multiple of Hkv=2", oracles.attention, q[:, :3], k, v)


def test_kv_mismatch(qkv):
    q, k, v = qkv
    _raises(r"k and v must share", oracles.attention, q, k, v[:, :, :4])


def test_batch_mismatch(qkv):
    q, k, v = qkv
    _raises(r"batch size", oracles.attention, q[:1], k, v)


def test_mask_not_broadcastable(qkv):
    q, k, v = qkv
    _raises(r"mask of shape \(5, 5\) does not broadcast", oracles.attention, q, k, v, mask=np.ones((5, 5), bool))


def test_mask_not_boolean(qkv):
    q, k, v = qkv
    _raises(r"mask must be boolean", oracles.attention, q, k, v, mask=np.ones((5, 6)))


def test_bias_not_broadcastable(qkv):
    q, k, v = qkv
    _raises(r"bias of shape \(3, 1, 1\) does not broadcast", oracles.attention, q, k, v, bias=np.zeros((3, 1, 1)))


@pytest.mark.parametrize("window", [(-1, 0), (0, -2), (-1, -1)])
def test_window_negative(qkv, window):
    q, k, v = qkv
    _raises(r"window (left|right) entry must be >= 0", oracles.attention, q, k, v, window=window)


def test_window_not_a_pair(qkv):
    q, k, v = qkv
    _raises(r"window must be None or a pair", oracles.attention, q, k, v, window=(1, 2, 3))


@pytest.mark.parametrize("softcap", [0, 0.0, -1.0, float("inf")])
def test_softcap_not_positive(qkv, softcap):
    q, k, v = qkv
    _raises(r"softcap must be None or a finite number > 0", oracles.attention, q, k, v, softcap=softcap)


def test_scale_not_finite(qkv):
    q, k, v = qkv
    _raises(r"scale must be None or a finite real", oracles.attention, q, k, v, scale=float("nan"))


@pytest.mark.parametrize("name,value", [("seqlens_q", [5, 6]), ("seqlens_k", [-1, 3]), ("seqlens_k", [7, 0])])
def test_seqlens_out_of_range(qkv, name, value):
    q, k, v = qkv
    _raises(rf"{name} entries must be integers in \[0, L", oracles.attention, q, k, v, **{name: value})


def test_seqlens_wrong_length(qkv):
    q, k, v = qkv
    _raises(r"seqlens_q must be a sequence of B=2", oracles.attention, q, k, v, seqlens_q=[1, 2, 3])


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_input(qkv, name, bad):
    arrs = dict(zip("qkv", qkv))
    arrs[name][1, 1, 2, 0] = bad
    msg = _raises(rf"{name} has a non-finite value", oracles.attention, arrs["q"], arrs["k"], arrs["v"])
    assert "(1, 1, 2, 0)" in msg
    out, _ = oracles.attention(arrs["q"], arrs["k"], arrs["v"], allow_nonfinite=True)  # opt-in: no error
    assert out.shape == (2, 4, 5, 2)


def test_nonfinite_dout(qkv):
    q, k, v = qkv
    dout = np.zeros((2, 4, 5, 2))
    dout[0, 0, 0, 0] = np.nan
    _raises(r"dout has a non-finite value", oracles.attention_backward, q, k, v, dout)


def test_nonfinite_bias(qkv):
    q, k, v = qkv
    bias = np.zeros((5, 6))
    bias[2, 3] = np.nan
    _raises(r"bias has NaN/\+Inf", oracles.attention, q, k, v, bias=bias)
    bias[2, 3] = -np.inf  # -inf is legal: it means masked (§6)
    oracles.attention(q, k, v, bias=bias)


def test_unknown_alignment(qkv):
    q, k, v = qkv
    _raises(r"alignment must be one of", oracles.attention, q, k, v, causal=True, alignment="bottom-right")


def test_dout_wrong_shape(qkv):
    q, k, v = qkv
    _raises(r"dout must have shape", oracles.attention_backward, q, k, v, np.zeros((2, 4, 5, 3)))


def test_non_real_dtype(qkv):
    q, k, v = qkv
    _raises(r"q must have a real dtype", oracles.attention, q.astype(complex), k, v)


def test_merge_partials_bad_lse():
    with pytest.raises(ValueError, match=r"lses has inf"):
        oracles.merge_partials(np.zeros((2, 3, 4)), np.array([[0.0, np.inf, 0.0], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"outs must be \[S, ..., Lq, dv\]"):
        oracles.merge_partials(np.zeros((2, 3, 4)), np.zeros((2, 4)))


def test_split_partials_bad_boundaries(qkv):
    q, k, v = qkv
    _raises(r"boundaries must be non-decreasing edges from 0 to Lk=6", oracles.split_partials, q, k, v, [0, 4, 3, 6])


def test_streaming_bad_block(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"block must be an int >= 1"):
        oracles.streaming_attention(q, k, v, block=0)
