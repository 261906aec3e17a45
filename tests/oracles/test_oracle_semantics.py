"""Semantic rules of SEMANTICS.md checked as identities between oracle calls (§2-§9, §12)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from oracle_helpers import rand_qkv, scalar_visible

from attention_conformance import oracles


def _same(a, b, atol=1e-14, what=""):
    (oa, la), (ob, lb) = a, b
    np.testing.assert_array_equal(np.isneginf(la), np.isneginf(lb), err_msg=f"{what}: -inf rows differ")
    np.testing.assert_allclose(oa, ob, rtol=0, atol=atol, err_msg=what)
    fin = np.isfinite(la)
    np.testing.assert_allclose(la[fin], lb[fin], rtol=0, atol=atol, err_msg=what)


def _naive(q, k, v, scale, vis, softcap=None, bias=0.0):
    """Textbook dense formula on one head, used only where no -inf row occurs."""
    s = scale * q @ k.T
    if softcap:
        s = softcap * np.tanh(s / softcap)
    s = np.where(vis, s + bias, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True) @ v


def test_default_scale_uses_d_not_dv():
    q, k, v = rand_qkv(B=1, Hq=1, Hkv=1, Lq=4, Lk=5, d=3, dv=7)
    out, _ = oracles.attention(q, k, v)
    ref = _naive(q[0, 0], k[0, 0], v[0, 0], 1 / math.sqrt(3), np.ones((4, 5), bool))
    np.testing.assert_allclose(out[0, 0], ref, rtol=0, atol=1e-14)
    _same(oracles.attention(q, k, v), oracles.attention(q, k, v, scale=1 / math.sqrt(3)))


def test_pipeline_order_softcap_then_bias_then_mask():
    q, k, v = rand_qkv(B=1, Hq=1, Hkv=1, Lq=4, Lk=5, d=3)
    rng = np.random.default_rng(0)
    bias = rng.standard_normal((4, 5))
    mask = rng.random((4, 5)) > 0.3
    mask[:, 0] = True
    out, _ = oracles.attention(q, k, v, scale=1.5, softcap=0.7, bias=bias, mask=mask)
    ref = _naive(q[0, 0], k[0, 0], v[0, 0], 1.5, mask, softcap=0.7, bias=bias)
    np.testing.assert_allclose(out[0, 0], ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("Lq,Lk", [(4, 7), (7, 4), (5, 5)])
def test_causal_alignment_rule(alignment, Lq, Lk):
    vis = oracles.visibility(Lq, Lk, causal=True, alignment=alignment)
    off = Lk - Lq if alignment == "bottom_right" else 0
    i, j = np.indices((Lq, Lk))
    np.testing.assert_array_equal(vis, j <= i + off)


def test_alignments_coincide_for_equal_lengths():
    q, k, v = rand_qkv(Lq=6, Lk=6)
    _same(oracles.attention(q, k, v, causal=True), oracles.attention(q, k, v, causal=True, alignment="top_left"))


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_causal_with_window_forces_right_zero(alignment):
    q, k, v = rand_qkv(Lq=5, Lk=8)
    base = oracles.attention(q, k, v, causal=False, window=(2, 0), alignment=alignment)
    for right in (None, 0, 3):
        _same(oracles.attention(q, k, v, causal=True, window=(2, right), alignment=alignment), base, what=f"{right=}")


def test_window_sk_minus_one_zero_equals_causal():
    """FA #1133: window (Lk - 1, 0) must equal plain causal."""
    q, k, v = rand_qkv(Lq=5, Lk=8)
    _same(oracles.attention(q, k, v, window=(7, 0)), oracles.attention(q, k, v, causal=True))


def test_window_rule():
    vis = oracles.visibility(4, 6, window=(1, 2))
    i, j = np.indices((4, 6))
    c = i + 2
    np.testing.assert_array_equal(vis, (j >= c - 1) & (j <= c + 2))
    assert oracles.visibility(4, 6, window=(None, None)).all()
    assert oracles.visibility(4, 6, window=None).all()


@pytest.mark.parametrize(
    "kw",
    [
        {"causal": True},
        {"causal": True, "alignment": "top_left", "window": (1, None)},
        {"window": (0, 2)},
        {"causal": True, "seqlens_q": [3, 5], "seqlens_k": [6, 2]},
        {"window": (1, 1), "alignment": "top_left", "seqlens_q": [5, 1], "seqlens_k": [3, 6]},
    ],
)
def test_visibility_mask_expresses_the_same_semantics(kw):
    q, k, v = rand_qkv(Lq=5, Lk=6)
    vis = oracles.visibility(5, 6, **kw)
    explicit = oracles.attention(q, k, v, mask=vis)
    _same(oracles.attention(q, k, v, **kw), explicit)
    if "seqlens_q" in kw:  # padded rows: visibility is all False
        for b, sq in enumerate(kw["seqlens_q"]):
            assert not vis[b, 0, sq:].any()


@pytest.mark.parametrize("causal,alignment", [(False, "bottom_right"), (True, "bottom_right"), (True, "top_left")])
def test_varlen_equals_per_sequence_slices(causal, alignment):
    """§7: alignment uses each sequence's real lengths; padded rows give O = 0, LSE = -inf."""
    q, k, v = rand_qkv(B=3, Lq=5, Lk=6)
    sq, sk = [2, 5, 0], [6, 3, 4]
    out, lse = oracles.attention(q, k, v, causal=causal, alignment=alignment, seqlens_q=sq, seqlens_k=sk)
    for b in range(3):
        o_b, l_b = oracles.attention(
            q[b : b + 1, :, : sq[b]],
            k[b : b + 1, :, : sk[b]],
            v[b : b + 1, :, : sk[b]],
            causal=causal,
            alignment=alignment,
        )
        _same((out[b : b + 1, :, : sq[b]], lse[b : b + 1, :, : sq[b]]), (o_b, l_b), what=f"batch {b}")
        assert np.all(out[b, :, sq[b] :] == 0) and np.all(np.isneginf(lse[b, :, sq[b] :]))


def test_padded_keys_are_never_read():
    q, k, v = rand_qkv(B=2, Lq=4, Lk=6)
    kw = dict(seqlens_k=[4, 6], seqlens_q=[2, 4], causal=True)
    ref = oracles.attention(q, k, v, **kw)
    k2, v2 = k.copy(), v.copy()
    k2[0, :, 4:] = np.nan
    v2[0, :, 4:] = np.inf
    _same(oracles.attention(q, k2, v2, allow_nonfinite=True, **kw), ref, atol=0)
    q2 = q.copy()
    q2[0, :, 2:] = np.nan  # padded query rows too; and padding is not an input error (§7, §15)
    _same(oracles.attention(q2, k2, v2, **kw), ref, atol=0)
    dout = np.ones((2, 4, 4, 3))
    dout[0, :, 2:] = np.nan
    clean = oracles.attention_backward(q, k, v, np.ones_like(dout), **kw)
    for a, b in zip(oracles.attention_backward(q2, k2, v2, dout, **kw), clean):
        np.testing.assert_array_equal(a, b)


def test_masked_nan_key_does_not_poison_output():
    """torch #101967: NaN in a masked-out key / value contributes nothing (§6)."""
    q, k, v = rand_qkv(Lq=4, Lk=6)
    mask = np.ones((4, 6), bool)
    mask[:, 3] = False
    ref = oracles.attention(q, k, v, mask=mask)
    k2, v2 = k.copy(), v.copy()
    k2[:, :, 3] = np.nan
    v2[:, :, 3] = np.nan
    _same(oracles.attention(q, k2, v2, mask=mask, allow_nonfinite=True), ref, atol=0)


def test_visible_nan_propagates_when_allowed():
    q, k, v = rand_qkv(B=1, Hq=1, Hkv=1, Lq=3, Lk=4)
    v[0, 0, 1, 0] = np.nan
    out, _ = oracles.attention(q, k, v, allow_nonfinite=True)
    assert np.isnan(out[0, 0, :, 0]).all() and np.isfinite(out[0, 0, :, 1:]).all()


def test_fully_masked_rows_zero_and_neg_inf():
    q, k, v = rand_qkv(Lq=6, Lk=3)
    out, lse = oracles.attention(q, k, v, causal=True)  # bottom-right: rows 0..2 see nothing
    assert np.all(out[:, :, :3] == 0) and np.all(np.isneginf(lse[:, :, :3]))
    assert np.all(np.isfinite(lse[:, :, 3:]))


def test_neg_inf_bias_equals_false_mask():
    q, k, v = rand_qkv(Lq=4, Lk=5)
    mask = np.random.default_rng(1).random((4, 5)) > 0.5
    mask[1] = False
    bias = np.where(mask, 0.0, -np.inf)
    _same(oracles.attention(q, k, v, bias=bias), oracles.attention(q, k, v, mask=mask), atol=0)


def test_finfo_min_bias_gives_mean_of_v():
    """§8: an additive finfo.min 'mask' over a whole row is not masking; it yields mean(V)."""
    q, k, v = rand_qkv(B=1, Hq=1, Hkv=1, Lq=2, Lk=5)
    bias = np.zeros((2, 5))
    bias[0] = np.finfo(np.float32).min
    out, lse = oracles.attention(q, k, v, bias=bias)
    np.testing.assert_allclose(out[0, 0, 0], v[0, 0].mean(axis=0), rtol=0, atol=1e-14)
    assert np.isfinite(lse[0, 0, 0])


def test_empty_keys_and_empty_queries():
    q, k, v = rand_qkv(B=1, Lq=3, Lk=0)
    out, lse = oracles.attention(q, k, v)
    assert out.shape == (1, 4, 3, 3) and np.all(out == 0) and np.all(np.isneginf(lse))
    dq, dk, dv = oracles.attention_backward(q, k, v, np.ones_like(out))
    assert np.all(dq == 0) and dk.shape == (1, 2, 0, 3)
    q, k, v = rand_qkv(B=1, Lq=0, Lk=4)
    out, lse = oracles.attention(q, k, v)
    assert out.shape == (1, 4, 0, 3) and lse.shape == (1, 4, 0)


def test_gqa_equals_repeated_kv():
    q, k, v = rand_qkv(B=2, Hq=6, Hkv=2, Lq=4, Lk=5, d=3, dv=2)
    _same(
        oracles.attention(q, k, v, causal=True),
        oracles.attention(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1), causal=True),
        atol=0,
    )
    # query head h reads kv head h // 3: changing kv head 1 changes only query heads 3..5
    k2 = k.copy()
    k2[:, 1] *= 2  # (adding a constant would shift a row uniformly: softmax-invariant)
    o1, _ = oracles.attention(q, k, v)
    o2, _ = oracles.attention(q, k2, v)
    assert np.array_equal(o1[:, :3], o2[:, :3]) and not np.allclose(o1[:, 3:], o2[:, 3:])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.int8])
def test_any_real_dtype_is_widened_exactly(dtype):
    q, k, v = rand_qkv(B=1, Lq=3, Lk=4)
    ql, kl, vl = (np.clip(x * 3, -8, 8).astype(dtype) for x in (q, k, v))
    out, lse = oracles.attention(ql, kl, vl)
    assert out.dtype == np.float64 and lse.dtype == np.float64
    _same((out, lse), oracles.attention(*(x.astype(np.float64) for x in (ql, kl, vl))), atol=0)


def test_inputs_are_not_modified():
    q, k, v, dout = rand_qkv(dout=True)
    copies = [x.copy() for x in (q, k, v, dout)]
    oracles.attention(q, k, v, causal=True, softcap=1.0)
    oracles.attention_backward(q, k, v, dout, causal=True, softcap=1.0)
    for a, b in zip((q, k, v, dout), copies):
        np.testing.assert_array_equal(a, b)


def test_lse_is_natural_log_of_final_scores():
    q, k, v = rand_qkv(B=1, Hq=1, Hkv=1, Lq=2, Lk=3)
    bias = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, -np.inf]])
    _, lse = oracles.attention(q, k, v, scale=0.9, softcap=1.5, bias=bias)
    s = 1.5 * np.tanh(0.9 * q[0, 0] @ k[0, 0].T / 1.5) + bias
    np.testing.assert_allclose(lse[0, 0], np.log(np.exp(s).sum(axis=1)), rtol=0, atol=1e-14)


@pytest.mark.parametrize("Lq,Lk", [(5, 7), (7, 4)])
def test_block_masks_and_key_ranges_match_the_scalar_rule(Lq, Lk):
    """Every sub-block of `block_invisible` and every `key_range` agree with §4, §5, §7 pair by pair."""
    from attention_conformance.oracles.masking import block_invisible, key_range

    for sq, sk in [(Lq, Lk), (Lq - 2, Lk), (Lq, Lk - 3), (1, Lk), (Lq, 0)]:
        for causal in (False, True):
            for alignment in ("bottom_right", "top_left"):
                for window in [(None, None), (0, 0), (1, None), (None, 2), (2, 1)]:
                    sem = dict(sq=sq, sk=sk, causal=causal, alignment=alignment, window=window)
                    full = np.array([[scalar_visible(i, j, **sem) for j in range(Lk)] for i in range(Lq)], bool)
                    for r0, r1, c0, c1 in [(0, Lq, 0, Lk), (1, 3, 2, Lk), (Lq - 1, Lq, 0, 2), (2, Lq, 1, 3)]:
                        inv = block_invisible(r0, r1, c0, c1, **sem)
                        got = np.ones((r1 - r0, c1 - c0), bool) if inv is None else ~inv
                        where = f"{sem} rows {r0}:{r1} cols {c0}:{c1}"
                        np.testing.assert_array_equal(got, full[r0:r1, c0:c1], err_msg=where)
                    for r0 in range(sq):
                        for r1 in range(r0 + 1, sq + 1):
                            lo, hi = key_range(r0, r1, **sem)
                            cols = np.flatnonzero(full[r0:r1].any(axis=0))
                            assert cols.size == 0 or (lo <= cols.min() and cols.max() < hi), (sem, r0, r1, lo, hi)
