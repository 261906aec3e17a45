"""Attention sinks (SEMANTICS.md §18), chunked attention (§19), KV-cache append (§20) in the FP64 oracle.

Each rule is checked against a second route: central differences for every gradient including d sink (with
and without an LSE cotangent), the streaming path and the split/merge path for the forward, an explicit
boolean mask built from the tests' own scalar predicate for chunks, and a dense recomputation for KV append.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle_helpers import case_repr, rand_qkv, scalar_visible

from attention_conformance import oracles
from attention_conformance.oracles.numgrad import central_differences

ATOL = 2e-8  # the gradient bound of tests/oracles/test_oracle_gradients.py
SHAPE = dict(B=2, Hq=4, Hkv=2, Lq=5, Lk=7, d=3, dv=2)
SINKS = np.array([0.3, -2.0, 4.0, -np.inf])  # ordinary, negative, large-ish, "no sink"

GRAD_CASES = {
    "sinks": {"sinks": SINKS},
    "sinks_causal_br_empty_rows": {"sinks": SINKS, "causal": True, "seqlens_q": [5, 5], "seqlens_k": [3, 7]},
    "sinks_varlen_no_keys": {"sinks": SINKS, "seqlens_q": [5, 3], "seqlens_k": [6, 0]},
    "sinks_softcap_window": {"sinks": SINKS, "softcap": 2.0, "window": (1, 1)},
    "chunk_causal": {"chunk": 3, "causal": True},
    "chunk_window_sinks": {"chunk": 2, "window": (1, None), "sinks": SINKS},
}


def _real_rows(kw: dict) -> np.ndarray:
    sq = np.asarray(kw.get("seqlens_q", [SHAPE["Lq"]] * SHAPE["B"]))
    return np.arange(SHAPE["Lq"])[None, :] < sq[:, None]


def _numeric(q, k, v, dout, dlse, kw):
    """Central differences of sum(out * dout) + sum(lse * dlse) w.r.t. q, k, v (and sinks)."""
    real = _real_rows(kw)
    cts = [dout * real[:, None, :, None], dlse * real[:, None, :]]
    sinks = kw.get("sinks")
    rest = {n: x for n, x in kw.items() if n != "sinks"}

    def f(a, b, c, *s):
        out, lse = oracles.attention(a, b, c, sinks=s[0] if s else None, **rest)
        return out, np.where(np.isfinite(lse), lse, 0.0)

    return central_differences(f, [q, k, v] + ([sinks] if sinks is not None else []), cts, eps=1e-5)


@pytest.mark.backward
@pytest.mark.parametrize("with_dlse", [False, True], ids=["dout_only", "dout_and_dlse"])
@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradients_match_central_differences(name, with_dlse):
    """dq, dk, dv and d sink of sum(out * dout) + sum(lse * dlse) (§13, §18) vs central differences."""
    kw = GRAD_CASES[name]
    q, k, v, dout = rand_qkv(**SHAPE, dout=True, seed=21)
    dlse = np.random.default_rng(22).standard_normal(dout.shape[:3]) if with_dlse else np.zeros(dout.shape[:3])
    analytic = oracles.attention_backward(q, k, v, dout, dlse=dlse if with_dlse else None, **kw)
    numeric = _numeric(q, k, v, dout, dlse, kw)
    assert len(analytic) == len(numeric) == (4 if "sinks" in kw else 3)
    for gname, a, n in zip(("dq", "dk", "dv", "dsinks"), analytic, numeric):
        err = float(np.abs(a - n).max())
        assert err <= ATOL, f"{gname}: |analytic - central difference| = {err:.3e} > {ATOL:g}; {case_repr(SHAPE, kw)}"


def test_dsink_formula_by_hand():
    """d sink = sum_i P_sink,i (dlse_i - D_i), D_i = dout_i . out_i (§18), written out for one head."""
    q, k, v, dout = rand_qkv(B=1, Hq=1, Hkv=1, Lq=3, Lk=4, d=2, dv=2, dout=True, seed=3)
    dlse = np.array([[[0.5, -1.0, 2.0]]])
    sinks = np.array([0.8])
    out, lse = oracles.attention(q, k, v, sinks=sinks)
    p_sink = np.exp(sinks[0] - lse[0, 0])
    expect = np.sum(p_sink * (dlse[0, 0] - np.sum(dout[0, 0] * out[0, 0], axis=-1)))
    got = oracles.attention_backward(q, k, v, dout, sinks=sinks, dlse=dlse)[3]
    assert abs(got[0] - expect) <= 1e-14, (got, expect)
    without_dlse = oracles.attention_backward(q, k, v, dout, sinks=sinks)[3]
    assert abs(without_dlse[0] - (expect - np.sum(p_sink * dlse[0, 0]))) <= 1e-14


def test_fully_masked_row_with_sink():
    """No visible key: O = 0 and LSE = the sink logit exactly; its d sink is its dlse (P_sink = 1, D = 0)."""
    q, k, v, dout = rand_qkv(B=1, Hq=2, Hkv=1, Lq=3, Lk=4, d=2, dv=3, dout=True, seed=4)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    sinks = np.array([-0.75, 3.5])
    out, lse = oracles.attention(q, k, v, mask=mask, sinks=sinks)
    assert np.all(out[:, :, 1] == 0.0)
    np.testing.assert_array_equal(lse[0, :, 1], sinks)
    dlse = np.zeros((1, 2, 3))
    dlse[0, :, 1] = [2.0, -3.0]
    dq, _, _, ds = oracles.attention_backward(q, k, v, np.zeros_like(dout), mask=mask, sinks=sinks, dlse=dlse)
    np.testing.assert_array_equal(ds, [2.0, -3.0])  # only row 1 has a cotangent: P_sink = 1, D = 0 there
    assert np.all(dq[:, :, 1] == 0)
    o0, l0 = oracles.attention(q, k[:, :, :0], v[:, :, :0], sinks=sinks)  # Lk = 0: every row is empty
    assert np.all(o0 == 0) and np.all(l0 == sinks[None, :, None])


def test_large_and_very_negative_sinks_stay_finite():
    """A sink of 1e4 gives LSE = 1e4, O ~ 0 (never +inf or NaN: the sink is in the running max); a sink of
    -1e4 changes nothing; a sink of -inf is exactly no sink (flash-attention PR #2752 class)."""
    q, k, v = rand_qkv(**SHAPE, seed=5)
    base_out, base_lse = oracles.attention(q, k, v, causal=True)
    for path in (oracles.attention, lambda *a, **kw: oracles.streaming_attention(*a, block=2, **kw)):
        out, lse = path(q, k, v, causal=True, sinks=np.full(4, 1e4))
        assert np.all(np.isfinite(out)) and np.all(np.abs(out) < 1e-300)
        np.testing.assert_allclose(lse, 1e4, rtol=0, atol=1e-9)
        out, lse = path(q, k, v, causal=True, sinks=np.full(4, -1e4))
        np.testing.assert_allclose(out, base_out, rtol=0, atol=1e-14)
        np.testing.assert_allclose(lse, base_lse, rtol=0, atol=1e-14)
    out, lse = oracles.attention(q, k, v, causal=True, sinks=np.full(4, -np.inf))
    np.testing.assert_array_equal(out, base_out)
    np.testing.assert_array_equal(lse, base_lse)


FORWARD_CASES = {
    "sinks": {"sinks": SINKS},
    "sinks_gqa_causal": {"sinks": SINKS, "causal": True},
    "sinks_varlen": {"sinks": SINKS, "seqlens_q": [5, 2], "seqlens_k": [0, 7], "causal": True},
    "chunk2": {"chunk": 2},
    "chunk3_causal_br": {"chunk": 3, "causal": True},
    "chunk4_causal_tl_window": {"chunk": 4, "causal": True, "alignment": "top_left", "window": (2, None)},
    "chunk_bigger_than_lk": {"chunk": 100, "causal": True},
    "chunk1": {"chunk": 1},
    "chunk_sinks_softcap": {"chunk": 3, "sinks": SINKS, "softcap": 1.5},
}


@pytest.mark.parametrize("name", list(FORWARD_CASES))
def test_streaming_and_merge_equal_dense(name):
    """The row-streaming path (sink in the running state) and split partials merged with the sink added
    once agree with the dense oracle (§14, §18, §19)."""
    kw = FORWARD_CASES[name]
    q, k, v = rand_qkv(**SHAPE, seed=6)
    out, lse = oracles.attention(q, k, v, **kw)
    for block in (1, 3, 8):
        so, sl = oracles.streaming_attention(q, k, v, block=block, **kw)
        np.testing.assert_allclose(so, out, rtol=0, atol=1e-12)
        np.testing.assert_allclose(sl, lse, rtol=0, atol=1e-12)
    part_kw = {n: x for n, x in kw.items() if n != "sinks"}
    outs, lses = oracles.split_partials(q, k, v, [0, 2, 2, 5, 7], **part_kw)
    mo, ml = oracles.merge_partials(outs[::-1], lses[::-1], sinks=kw.get("sinks"))
    np.testing.assert_allclose(mo, out, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ml, lse, rtol=0, atol=1e-12)


def test_split_partials_refuse_sinks():
    q, k, v = rand_qkv(**SHAPE)
    with pytest.raises(ValueError, match="sinks: split partials are sink-free"):
        oracles.split_partials(q, k, v, [0, 7], sinks=SINKS)


@pytest.mark.parametrize("kw", [
    {"chunk": 3}, {"chunk": 2, "causal": True}, {"chunk": 4, "alignment": "top_left", "causal": True},
    {"chunk": 3, "window": (1, 1)}, {"chunk": 2, "causal": True, "seqlens_q": [5, 1], "seqlens_k": [7, 4]},
], ids=str)
def test_chunk_equals_its_explicit_mask(kw):
    """`chunk=` gives the numbers of a boolean mask built pair by pair from the rule of §19
    (same chunk of the aligned positions, floor division, ANDed with causal, window, padding)."""
    q, k, v = rand_qkv(**SHAPE, seed=8)
    B, Lq, Lk = SHAPE["B"], SHAPE["Lq"], SHAPE["Lk"]
    sq = kw.get("seqlens_q", [Lq] * B)
    sk = kw.get("seqlens_k", [Lk] * B)
    mask = np.zeros((B, 1, Lq, Lk), bool)
    for b, i, j in np.ndindex(B, Lq, Lk):
        mask[b, 0, i, j] = scalar_visible(i, j, sq[b], sk[b], kw.get("causal", False),
                                          kw.get("alignment", "bottom_right"), kw.get("window"), kw["chunk"])
    out, lse = oracles.attention(q, k, v, **kw)
    ref_out, ref_lse = oracles.attention(q, k, v, mask=mask, seqlens_q=kw.get("seqlens_q"),
                                         seqlens_k=kw.get("seqlens_k"))
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    vis = oracles.visibility(Lq, Lk, chunk=kw["chunk"], causal=kw.get("causal", False),
                             alignment=kw.get("alignment", "bottom_right"), window=kw.get("window"),
                             seqlens_q=kw.get("seqlens_q"), seqlens_k=kw.get("seqlens_k"))
    np.testing.assert_array_equal(np.broadcast_to(vis, mask.shape), mask)


def test_chunk_edges_by_hand():
    """Lq = Lk = 6, chunk 4, causal: rows 0-3 see keys 0..i, rows 4-5 see keys 4..i (the chunk edge at 4)."""
    vis = oracles.visibility(6, 6, causal=True, chunk=4)
    expect = np.array([[j <= i and (i // 4) == (j // 4) for j in range(6)] for i in range(6)])
    np.testing.assert_array_equal(vis, expect)
    assert vis[4, 3] == np.False_ and vis[3, 3] and vis[4, 4]
    # bottom-right with Lq < Lk: the aligned position of row i is i + 2
    vis = oracles.visibility(2, 4, causal=True, chunk=3)
    np.testing.assert_array_equal(vis, [[True, True, True, False], [False, False, False, True]])


def test_kv_append_ignores_slots_past_the_sequence():
    """New rows land at cache_seqlens[b]; NaN or huge values past the new length change nothing (§20)."""
    rng = np.random.default_rng(9)
    B, Hkv, Lc, Ln, d, dv = 2, 1, 9, 2, 3, 2
    kc = np.full((B, Hkv, Lc, d), np.nan)
    vc = np.full((B, Hkv, Lc, dv), np.nan)
    lens = np.array([3, 6])
    for b in range(B):
        kc[b, :, : lens[b]] = rng.standard_normal((Hkv, lens[b], d))
        vc[b, :, : lens[b]] = rng.standard_normal((Hkv, lens[b], dv))
    kn, vn = rng.standard_normal((B, Hkv, Ln, d)), rng.standard_normal((B, Hkv, Ln, dv))
    q = rng.standard_normal((B, 2, Ln, d))
    k, v, seqlens_k = oracles.kv_append(kc, vc, kn, vn, lens)
    np.testing.assert_array_equal(seqlens_k, lens + Ln)
    assert np.isnan(kc[0, 0, 3]).all(), "the caller's cache is not modified"
    out, lse = oracles.attention(q, k, v, seqlens_k=seqlens_k, causal=True, sinks=np.array([0.1, -0.4]))
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    for b in range(B):  # dense recomputation per sequence: cache prefix + new rows, nothing else
        kd = np.concatenate([kc[b:b + 1, :, : lens[b]], kn[b:b + 1]], axis=2)
        vd = np.concatenate([vc[b:b + 1, :, : lens[b]], vn[b:b + 1]], axis=2)
        ro, rl = oracles.attention(q[b:b + 1], kd, vd, causal=True, sinks=np.array([0.1, -0.4]))
        np.testing.assert_allclose(out[b:b + 1], ro, rtol=0, atol=1e-14)
        np.testing.assert_allclose(lse[b:b + 1], rl, rtol=0, atol=1e-14)


@pytest.mark.parametrize("args, match", [
    ({"sinks": np.zeros(3)}, r"sinks must have shape \[Hq\] = \[4\]"),
    ({"sinks": np.zeros((1, 4))}, r"sinks must have shape \[Hq\]"),
    ({"sinks": np.array([0.0, np.nan, 0.0, 0.0])}, r"sinks has nan at head 1"),
    ({"sinks": np.array([0.0, 0.0, np.inf, 0.0])}, r"sinks has inf at head 2"),
    ({"sinks": np.array(["a"] * 4)}, r"sinks must have a real dtype"),
    ({"chunk": 0}, r"chunk must be None or an int >= 1"),
    ({"chunk": -3}, r"chunk must be None or an int >= 1"),
    ({"chunk": 2.5}, r"chunk must be None or an int >= 1"),
    ({"chunk": True}, r"chunk must be None or an int >= 1"),
], ids=lambda x: str(x)[:40])
def test_errors_name_the_argument(args, match):
    q, k, v, dout = rand_qkv(**SHAPE, dout=True)
    for fn, extra in ((oracles.attention, ()), (oracles.attention_backward, (dout,)),
                      (oracles.streaming_attention, ())):
        with pytest.raises(ValueError, match=match) as info:
            fn(q, k, v, *extra, **args)
        assert "q.shape=(2, 4, 5, 3)" in str(info.value)


def test_dlse_and_kv_append_errors():
    q, k, v, dout = rand_qkv(**SHAPE, dout=True)
    with pytest.raises(ValueError, match=r"dlse must have shape \[B, Hq, Lq\] = \[2, 4, 5\]"):
        oracles.attention_backward(q, k, v, dout, dlse=np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"dlse has a non-finite value"):
        oracles.attention_backward(q, k, v, dout, dlse=np.full((2, 4, 5), np.nan))
    with pytest.raises(ValueError, match=r"cache_seqlens entries must lie in \[0, Lc - Ln\] = \[0, 5\]"):
        oracles.kv_append(k, v, k[:, :, :2], v[:, :, :2], [6, 1])
    with pytest.raises(ValueError, match=r"cache_seqlens must hold B=2 integers"):
        oracles.kv_append(k, v, k[:, :, :2], v[:, :, :2], [1])
    with pytest.raises(ValueError, match=r"k_new/v_new must be \[B, Hkv, Ln, D\]"):
        oracles.kv_append(k, v, k[:1, :, :2], v[:1, :, :2], [1, 1])
    with pytest.raises(ValueError, match=r"sinks must have shape \[Hq\] = \[4\]"):
        oracles.merge_partials(np.zeros((1, 2, 4, 5, 2)), np.zeros((1, 2, 4, 5)), sinks=np.zeros(2))
