"""The seeds' worked examples, each its own test ([FA-anim] = seeds/000_*, [FA2-ch] = seeds/001_*).

Scores are fed through the oracle API with d = 1, q = 1, scale = 1 so that k_j *is* score s_j.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_conformance import oracles
from attention_conformance.oracles.numgrad import numerical_gradients
from attention_conformance.oracles.streaming import key_tiles


def _one_row(scores, values):
    """q [1,1,1,1] = 1, k = scores, v = values, so s_j = scores[j] with scale = 1."""
    q = np.ones((1, 1, 1, 1))
    k = np.asarray(scores, dtype=float).reshape(1, 1, -1, 1)
    v = np.asarray(values, dtype=float).reshape(1, 1, len(scores), -1)
    return q, k, v


def test_online_softmax_example_o_4966():
    """[FA-anim] "Online softmax · 数字跟着走": tiles [1, 2] / [2, 8] then [3, 0] / [4, 10]: O ~ 4.966."""
    q, k, v = _one_row([1, 2, 3, 0], [2, 8, 4, 10])
    # state after the first tile: m = 2, weights [e^-1, 1]
    m1, l1, o1 = 2.0, math.exp(-1) + 1, 2 * math.exp(-1) + 8
    # the second tile raises the max to 3: alpha = e^-1 rescales l and o together
    alpha = math.exp(m1 - 3.0)
    l2 = alpha * l1 + 1 + math.exp(-3)
    o2 = alpha * o1 + 4 + 10 * math.exp(-3)
    expected = o2 / l2
    out, lse = oracles.streaming_attention(q, k, v, block=2, scale=1.0)
    dense, dlse = oracles.attention(q, k, v, scale=1.0)
    assert round(expected, 3) == 4.966
    assert abs(out[0, 0, 0, 0] - expected) < 1e-14 and abs(dense[0, 0, 0, 0] - expected) < 1e-14
    assert abs(lse[0, 0, 0] - (3.0 + math.log(l2))) < 1e-14 and abs(dlse[0, 0, 0] - lse[0, 0, 0]) < 1e-14


def test_exercise_1_merge_not_average():
    """[FA-anim] 练习 1: block A s=0, v=10; block B s=ln 3, v=2: O = 4; averaging the local outputs gives 6."""
    q, k, v = _one_row([0, math.log(3)], [10, 2])
    out, _ = oracles.attention(q, k, v, scale=1.0)
    assert abs(out[0, 0, 0, 0] - 4.0) < 1e-14
    outs, lses = oracles.split_partials(q, k, v, [0, 1, 2], scale=1.0)
    assert abs(outs[:, 0, 0, 0, 0].mean() - 6.0) < 1e-14  # the wrong answer
    merged, _ = oracles.merge_partials(outs, lses)
    assert abs(merged[0, 0, 0, 0] - 4.0) < 1e-14
    assert abs(oracles.streaming_attention(q, k, v, block=1, scale=1.0)[0][0, 0, 0, 0] - 4.0) < 1e-14


def test_exercise_2_softmax_backward():
    """[FA-anim] 练习 2: P = [0.2, 0.3, 0.5], V = [1, 3, 5], dO = 2: O = 3.6, D = 7.2,
    dS = [-1.04, -0.36, 1.4] (sums to 0), dV = [0.4, 0.6, 1.0]."""
    P = np.array([0.2, 0.3, 0.5])
    q, k, v = _one_row(np.log(P), [1, 3, 5])
    dout = np.full((1, 1, 1, 1), 2.0)
    out, lse = oracles.attention(q, k, v, scale=1.0)
    np.testing.assert_allclose(np.exp(k[0, 0, :, 0] - lse[0, 0, 0]), P, rtol=0, atol=1e-15)
    assert abs(out[0, 0, 0, 0] - 3.6) < 1e-14
    assert abs(2.0 * out[0, 0, 0, 0] - 7.2) < 1e-14  # D = dO . O
    dq, dk, dv = oracles.attention_backward(q, k, v, dout, scale=1.0)
    ds = dk[0, 0, :, 0]  # dK_j = scale * dS_j * q = dS_j
    np.testing.assert_allclose(ds, [-1.04, -0.36, 1.4], rtol=0, atol=1e-14)
    assert abs(ds.sum()) < 1e-14
    np.testing.assert_allclose(dv[0, 0, :, 0], [0.4, 0.6, 1.0], rtol=0, atol=1e-15)
    assert abs(dq[0, 0, 0, 0] - float(ds @ np.log(P))) < 1e-14  # dQ = scale * sum_j dS_j k_j


def test_one_query_two_key_backward():
    """[FA-anim] "演算 · 一个 query，两个 key": d=1, q=1, k=[0, ln 3], v=[2, 6], dO=2: P=[1/4, 3/4], O=5,
    D=10, dS=[-1.5, 1.5], dQ = 1.5 ln 3, dK = [-1.5, 1.5], dV = [0.5, 1.5]."""
    q, k, v = _one_row([0, math.log(3)], [2, 6])
    dout = np.full((1, 1, 1, 1), 2.0)
    out, lse = oracles.attention(q, k, v)  # d = 1: default scale 1/sqrt(1) = 1
    np.testing.assert_allclose(np.exp(k[0, 0, :, 0] - lse[0, 0, 0]), [0.25, 0.75], rtol=0, atol=1e-15)
    assert abs(out[0, 0, 0, 0] - 5.0) < 1e-14
    assert abs(2.0 * out[0, 0, 0, 0] - 10.0) < 1e-14  # D
    dq, dk, dv = oracles.attention_backward(q, k, v, dout)
    np.testing.assert_allclose(dk[0, 0, :, 0], [-1.5, 1.5], rtol=0, atol=1e-14)  # = dS * q
    assert abs(dq[0, 0, 0, 0] - 1.5 * math.log(3)) < 1e-14
    np.testing.assert_allclose(dv[0, 0, :, 0], [0.5, 1.5], rtol=0, atol=1e-15)


def test_split_k_example():
    """[FA2-ch] "工程实操 沿键切分的归约" and "切分与归约的反向一致性": scores [1, 2, 4, 0], values [2, 5, 1, 9],
    two splits: partials (m, l, u) = (2, 1.367879, 5.735759), (4, 1.018316, 1.164841); merged O ~ 1.612955;
    averaging normalised partials ~ 2.668533; dO/ds ~ [0.016012, 0.380898, -0.509337, 0.112427]."""
    scores = [1.0, 2.0, 4.0, 0.0]
    q, k, v = _one_row(scores, [2, 5, 1, 9])
    outs, lses = oracles.split_partials(q, k, v, [0, 2, 4], scale=1.0)
    m = np.array([max(scores[:2]), max(scores[2:])])
    l = np.exp(lses[:, 0, 0, 0] - m)
    u = l * outs[:, 0, 0, 0, 0]
    np.testing.assert_allclose(m, [2, 4])
    np.testing.assert_allclose(l, [1.367879, 1.018316], rtol=0, atol=5e-7)
    np.testing.assert_allclose(u, [5.735759, 1.164841], rtol=0, atol=5e-7)
    merged, _ = oracles.merge_partials(outs, lses)
    assert abs(merged[0, 0, 0, 0] - 1.612955) < 5e-7
    assert abs(outs[:, 0, 0, 0, 0].mean() - 2.668533) < 5e-7
    dout = np.ones((1, 1, 1, 1))
    _, dk, _ = oracles.attention_backward(q, k, v, dout, scale=1.0)
    expected = [0.016012, 0.380898, -0.509337, 0.112427]
    np.testing.assert_allclose(dk[0, 0, :, 0], expected, rtol=0, atol=5e-7)
    assert abs(dk.sum()) < 1e-14
    _, num_dk, _ = numerical_gradients(lambda a, b, c: oracles.attention(a, b, c, scale=1.0)[0], q, k, v, dout)
    np.testing.assert_allclose(num_dk[0, 0, :, 0], expected, rtol=0, atol=5e-7)


def test_causal_tail_n5_tile4():
    """[FA-anim] "实现 · causal 与尾块": N = 5, tile = 4: in the second key tile only key 4 exists and
    only row 4 sees it; rows 0-3 skip that tile entirely."""
    N, tile = 5, 4
    tiles = key_tiles(N, tile)
    assert tiles == [(0, 4), (4, 8)]
    vis = oracles.visibility(N, N, causal=True)
    start, stop = tiles[1]
    j = np.arange(start, stop)
    in_range = j < N  # the tail check j < N
    tile_valid = np.zeros((N, tile), bool)
    tile_valid[:, in_range] = vis[:, j[in_range]]
    assert tile_valid[4].tolist() == [True, False, False, False]
    assert not tile_valid[:4].any()
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, N, 3)) for _ in range(3))
    dense_o, dense_l = oracles.attention(q, k, v, causal=True)
    for block in (tile, 1, 2, 3, 5, 6):
        o, lse = oracles.streaming_attention(q, k, v, causal=True, block=block)
        np.testing.assert_allclose(o, dense_o, rtol=0, atol=1e-12, err_msg=f"block={block}")
        np.testing.assert_allclose(lse, dense_l, rtol=0, atol=1e-12, err_msg=f"block={block}")
    assert abs(dense_o[0, 0, 0] - v[0, 0, 0]).max() < 1e-15  # row 0 sees only key 0


@pytest.mark.parametrize("Lk", [1, 8])
def test_decode_single_query_sees_every_key(Lk):
    """[FA-anim]: "长度 1 的 Q 不等于'只能看 key 0'": bottom-right causal with Lq = 1 sees all Lk keys."""
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((1, 1, 1, 4)), rng.standard_normal((1, 1, Lk, 4)), rng.standard_normal((1, 1, Lk, 2))
    np.testing.assert_array_equal(oracles.attention(q, k, v, causal=True)[0], oracles.attention(q, k, v)[0])
    assert oracles.visibility(1, Lk, causal=True).all()
    assert oracles.visibility(1, Lk, causal=True, alignment="top_left").sum() == 1
