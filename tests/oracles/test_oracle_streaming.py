"""The independent streaming path equals the dense oracle (<= 1e-12) for every key block size 1..L+1
(SEMANTICS.md §3-§8, §12; [FA-anim] "Online softmax")."""

from __future__ import annotations

import numpy as np
import pytest
from oracle_helpers import case_repr, rand_qkv

from attention_conformance import oracles

TOL = 1e-12
_rng = np.random.default_rng(21)
_mask = _rng.random((1, 4, 6, 7)) > 0.4
_mask[0, 1, 3] = False
_neg_inf_bias = np.where(_rng.random((6, 7)) > 0.5, -np.inf, 0.25)
_neg_inf_bias[2] = -np.inf  # a row masked only through bias = -inf (§6, §8)
CASES = {
    "plain": {},
    "causal_bottom_right": {"causal": True},
    "causal_top_left": {"causal": True, "alignment": "top_left"},
    "window": {"window": (2, 1)},
    "causal_window_top_left": {"causal": True, "window": (1, 3), "alignment": "top_left"},
    "mask": {"mask": _mask},
    "bias_softcap": {"bias": _rng.standard_normal((6, 7)), "softcap": 1.3, "scale": -0.9},
    "bias_neg_inf_rows": {"bias": _neg_inf_bias},
    "varlen": {"seqlens_q": [6, 2], "seqlens_k": [3, 7], "causal": True},
}


def _compare(a, b, what, repro):
    out_a, lse_a = a
    out_b, lse_b = b
    np.testing.assert_array_equal(
        np.isneginf(lse_a), np.isneginf(lse_b), err_msg=f"{what}: -inf LSE rows differ; {repro}"
    )
    fin = np.isfinite(lse_a)
    err = max(np.abs(out_a - out_b).max(), np.abs(lse_a[fin] - lse_b[fin]).max(initial=0.0))
    assert err <= TOL, f"{what}: max |streaming - dense| = {err:.3e} > {TOL:g}; {repro}"


@pytest.mark.parametrize("name", list(CASES))
def test_streaming_equals_dense_every_block(name):
    shape = dict(B=2 if name == "varlen" else 1, Hq=4, Hkv=2, Lq=6, Lk=7, d=3, dv=2, seed=2)
    q, k, v = rand_qkv(**shape)
    kw = CASES[name]
    dense = oracles.attention(q, k, v, **kw)
    for block in range(1, shape["Lk"] + 2):
        _compare(oracles.streaming_attention(q, k, v, block=block, **kw), dense, f"block={block}", case_repr(shape, kw))


def test_streaming_handles_huge_score_jumps():
    """Scores that grow by ~1e3 between tiles: alpha underflows to 0, no overflow, no NaN (§12)."""
    q = np.ones((1, 1, 1, 1))
    k = np.array([-900.0, -5.0, 0.0, 700.0, 701.0, -1e3]).reshape(1, 1, 6, 1)
    v = np.arange(6.0).reshape(1, 1, 6, 1)
    dense = oracles.attention(q, k, v, scale=1.0)
    for block in range(1, 8):
        _compare(oracles.streaming_attention(q, k, v, block=block, scale=1.0), dense, f"block={block}", "jumps")


@pytest.mark.parametrize(
    "kw",
    [
        {"causal": True, "window": (5, None)},
        {"window": (3, 2), "alignment": "top_left", "softcap": 1.5},
        {"causal": True, "seqlens_q": [37, 20], "seqlens_k": [29, 11], "bias": "random", "mask": "random"},
    ],
    ids=["causal_window", "window_top_left_softcap", "varlen_bias_mask"],
)
def test_dense_block_size_does_not_matter(kw, monkeypatch):
    """The dense oracle's query blocking and per-block key ranges (scores.BLOCK_ELEMENTS, masking.key_range)
    are invisible in the results, forward and backward."""
    q, k, v, dout = rand_qkv(B=2, Hq=2, Hkv=1, Lq=37, Lk=29, d=4, seed=3, dout=True)
    rng = np.random.default_rng(5)
    kw = dict(kw)
    if kw.get("bias") == "random":
        kw["bias"] = rng.standard_normal((2, 1, 37, 29))
    if kw.get("mask") == "random":
        kw["mask"] = rng.random((37, 29)) > 0.2
    ref = oracles.attention(q, k, v, **kw)
    ref_grads = oracles.attention_backward(q, k, v, dout, **kw)
    import attention_conformance.oracles.scores as scores

    monkeypatch.setattr(scores, "BLOCK_ELEMENTS", 1)  # 8-row blocks
    _compare(oracles.attention(q, k, v, **kw), ref, "8-row blocks", repr(kw))
    for name, a, b in zip(("dq", "dk", "dv"), oracles.attention_backward(q, k, v, dout, **kw), ref_grads):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13, err_msg=f"{name} with 8-row blocks, {kw}")
