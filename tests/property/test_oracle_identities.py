"""Properties of the FP64 oracle (oracles/SEMANTICS.md), checked by Hypothesis on drawn problems.

Each property states a mathematical identity of exact attention and compares two FP64 evaluations
that reach the result by different routes (a shifted bias, a permutation, an explicit mask, a
different algorithm). They hold up to FP64 rounding, so the tolerances are ~1e-12 relative to the
magnitudes involved, never tuned to make a case pass. Reference semantics: §3 (pipeline), §4 (causal),
§5 (window), §6 (mask/bias), §7 (varlen), §8 (fully masked rows), §9 (GQA), §11 (Hadamard), §12 (LSE),
§13 (backward), §14 (split-KV merge). Profiles: property_tests/profiles.py (default ci).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from attention_conformance import oracles
from attention_conformance.property_tests.strategies import attention_arrays, bool_masks, sample_values

__all__: list[str] = []

RTOL = 1e-11  # FP64 identities: rounding of O(L) operations on O(1) values
GRAD_ATOL = 2e-8  # central differences (seed lab bound, SEMANTICS.md §13)


def _close(name: str, got: np.ndarray, want: np.ndarray, rtol: float = RTOL, context: str = "") -> None:
    """Assert got == want up to rtol * (1 + |want|) elementwise, with -inf/+inf required to match exactly."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != expected {want.shape}. {context}"
    inf_w, inf_g = np.isinf(want), np.isinf(got)
    bad_inf = (inf_w != inf_g) | (inf_w & (np.sign(want) != np.sign(got)))
    if bad_inf.any():
        idx = tuple(int(i) for i in np.argwhere(bad_inf)[0])
        raise AssertionError(f"{name}: infinity mismatch at index {idx}: got {got[idx]!r}, expected {want[idx]!r}. "
                             f"{context}")
    finite = ~inf_w
    if np.isnan(got[finite]).any():
        idx = tuple(int(i) for i in np.argwhere(np.isnan(got) & finite)[0])
        raise AssertionError(f"{name}: NaN at index {idx}, expected {want[idx]!r}. {context}")
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(got - want), 0.0)
    tol = rtol * (1.0 + np.where(finite, np.abs(want), 0.0))
    if (err > tol).any():
        ratio = err / tol
        idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        raise AssertionError(
            f"{name}: max error {err[idx]:.3e} at index {tuple(int(i) for i in idx)} exceeds tolerance "
            f"{tol[idx]:.3e} (rtol={rtol:g}); got {got[idx]!r}, expected {want[idx]!r}. {context}")


def _describe(a: dict) -> str:
    s = a["shape"]
    kw = {k: (v.shape if isinstance(v, np.ndarray) else v) for k, v in a["kwargs"].items()}
    return f"shape B={s['B']} Hq={s['Hq']} Hkv={s['Hkv']} Lq={s['Lq']} Lk={s['Lk']} d={s['d']} dv={s['dv']}; {kw}"


def _explicit_visibility(a: dict) -> np.ndarray:
    """[B, Hq, Lq, Lk] visibility written from the text of §4-§7 (independent of oracles.masking)."""
    s, kw = a["shape"], a["kwargs"]
    B, Hq, Lq, Lk = s["B"], s["Hq"], s["Lq"], s["Lk"]
    sqs = kw.get("seqlens_q") or (Lq,) * B
    sks = kw.get("seqlens_k") or (Lk,) * B
    left, right = kw.get("window") or (None, None)
    if kw.get("causal"):
        right = 0 if right is None else min(right, 0)
    vis = np.zeros((B, Hq, Lq, Lk), dtype=bool)
    for b in range(B):
        sq, sk = sqs[b], sks[b]
        off = sk - sq if kw.get("alignment", "bottom_right") == "bottom_right" else 0
        for i in range(sq):
            for j in range(sk):
                c = i + off
                ok = (right is None or j <= c + right) and (left is None or j >= c - left)
                if kw.get("chunk") is not None:  # §19: same chunk of the aligned positions (floor division)
                    ok = ok and math.floor(c / kw["chunk"]) == math.floor(j / kw["chunk"])
                vis[b, :, i, j] = ok
    if kw.get("mask") is not None:
        vis &= np.broadcast_to(kw["mask"], vis.shape)
    if kw.get("bias") is not None:
        vis &= np.broadcast_to(kw["bias"], vis.shape) != -np.inf
    return vis


def _explicit_scores(a: dict) -> np.ndarray:
    """Final scores s_ij of §3 (scale, softcap, bias, mask -> -inf), [B, Hq, Lq, Lk], by direct formula."""
    q, k, kw = a["q"], a["k"], a["kwargs"]
    group = q.shape[1] // k.shape[1]
    kk = np.repeat(k, group, axis=1)
    scale = kw.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * np.einsum("bhid,bhjd->bhij", q, kk)
    if kw.get("softcap") is not None:
        c = kw["softcap"]
        s = c * np.tanh(s / c)
    if kw.get("bias") is not None:
        s = s + kw["bias"]
    return np.where(_explicit_visibility(a), s, -np.inf)


def _plain_kwargs(a: dict, mask: np.ndarray) -> dict:
    """The same problem with causal/window/varlen folded into one explicit boolean mask (§6)."""
    kw = {k: v for k, v in a["kwargs"].items() if k in ("scale", "softcap", "bias")}
    kw["mask"] = mask
    return kw


# ---------------------------------------------------------------------------------------------
# §12 LSE and §3 pipeline
# ---------------------------------------------------------------------------------------------
@given(a=attention_arrays())
def test_lse_is_log_sum_exp_of_explicit_scores(a):
    """§12: LSE_i = log sum_j exp(s_ij) and out_i = sum_j exp(s_ij - LSE_i) v_j, with s from §3 written out."""
    out, lse = oracles.attention(a["q"], a["k"], a["v"], **a["kwargs"])
    s = _explicit_scores(a)
    m = s.max(axis=-1, initial=-np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(s - m_safe[..., None])
    l = w.sum(axis=-1)
    with np.errstate(divide="ignore"):
        want_lse = np.where(l > 0, m_safe + np.log(l), -np.inf)
    group = a["q"].shape[1] // a["k"].shape[1]
    vv = np.repeat(a["v"], group, axis=1)
    want_out = np.einsum("bhij,bhjd->bhid", w / np.where(l > 0, l, 1.0)[..., None], vv)
    event(f"fully masked rows: {'yes' if (l == 0).any() else 'no'}")
    _close("lse", lse, want_lse, context=_describe(a))
    _close("out", out, want_out, context=_describe(a))


@given(a=attention_arrays(), data=st.data())
def test_adding_a_constant_to_a_row_of_scores_changes_only_lse(a, data):
    """§3/§12: s_ij + c_i (through bias) leaves out unchanged and shifts LSE_i by c_i."""
    s = a["shape"]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="shift seed"))
    shift = rng.uniform(-50, 50, size=(s["B"], s["Hq"], s["Lq"], 1))
    kw = dict(a["kwargs"])
    base_bias = kw.get("bias")
    out0, lse0 = oracles.attention(a["q"], a["k"], a["v"], **kw)
    kw["bias"] = shift if base_bias is None else base_bias + shift
    out1, lse1 = oracles.attention(a["q"], a["k"], a["v"], **kw)
    _close("out (shifted rows)", out1, out0, rtol=1e-9, context=_describe(a))
    _close("lse (shifted rows)", lse1, lse0 + shift[..., 0], rtol=1e-11, context=_describe(a))


# ---------------------------------------------------------------------------------------------
# §4, §5, §7 visibility
# ---------------------------------------------------------------------------------------------
@given(a=attention_arrays(mask=False, bias=False, varlen=False),
       alignment=st.sampled_from(["bottom_right", "top_left"]))
def test_causal_equals_explicit_mask_in_both_alignments(a, alignment):
    """§4: causal=True with alignment == the boolean mask j <= i + (Lk - Lq) (bottom_right) or j <= i (top_left)."""
    kw = {k: v for k, v in a["kwargs"].items() if k in ("scale", "softcap")}
    Lq, Lk = a["shape"]["Lq"], a["shape"]["Lk"]
    off = Lk - Lq if alignment == "bottom_right" else 0
    explicit = np.arange(Lk)[None, :] <= np.arange(Lq)[:, None] + off
    out_c, lse_c = oracles.attention(a["q"], a["k"], a["v"], causal=True, alignment=alignment, **kw)
    out_m, lse_m = oracles.attention(a["q"], a["k"], a["v"], mask=explicit, **kw)
    event(f"causal {alignment}, Lq {'<' if Lq < Lk else '>' if Lq > Lk else '=='} Lk")
    _close("out causal vs mask", out_c, out_m, context=f"alignment={alignment}; " + _describe(a))
    _close("lse causal vs mask", lse_c, lse_m, context=f"alignment={alignment}; " + _describe(a))
    np.testing.assert_array_equal(oracles.visibility(Lq, Lk, causal=True, alignment=alignment), explicit,
                                  err_msg=f"visibility disagrees with §4 for Lq={Lq}, Lk={Lk}, {alignment}")


@given(a=attention_arrays(chunk=None))
def test_window_causal_varlen_equal_explicit_mask(a):
    """§5/§7/§19: every visibility feature (window, causal, varlen, chunk, mask, -inf bias) == one explicit mask."""
    vis = _explicit_visibility(a)
    out_f, lse_f = oracles.attention(a["q"], a["k"], a["v"], **a["kwargs"])
    out_m, lse_m = oracles.attention(a["q"], a["k"], a["v"], **_plain_kwargs(a, vis))
    if "window" in a["kwargs"]:
        event("window")
    if "chunk" in a["kwargs"]:
        event("chunk")
    _close("out features vs mask", out_f, out_m, context=_describe(a))
    _close("lse features vs mask", lse_f, lse_m, context=_describe(a))


@given(a=attention_arrays(mask=False, bias=False, varlen=False), data=st.data())
def test_causal_is_window_left_zero(a, data):
    """§5: causal=True, window=(w, r) == causal=False, window=(w, 0), and window=(Lk-1, 0) == causal (FA #1133)."""
    kw = {k: v for k, v in a["kwargs"].items() if k in ("scale", "softcap", "alignment")}
    Lk = a["shape"]["Lk"]
    left = data.draw(st.one_of(st.none(), st.integers(0, Lk + 1)), label="left")
    right = data.draw(st.one_of(st.none(), st.integers(0, 5)), label="right")
    out_c, lse_c = oracles.attention(a["q"], a["k"], a["v"], causal=True, window=(left, right), **kw)
    out_w, lse_w = oracles.attention(a["q"], a["k"], a["v"], window=(left, 0), **kw)
    _close("out causal+window vs window(left, 0)", out_c, out_w, context=_describe(a))
    _close("lse causal+window vs window(left, 0)", lse_c, lse_w, context=_describe(a))
    if kw.get("alignment", "bottom_right") == "bottom_right" and Lk >= 1 and a["shape"]["Lq"] <= Lk:
        out_f, _ = oracles.attention(a["q"], a["k"], a["v"], window=(Lk - 1, 0), **kw)
        out_p, _ = oracles.attention(a["q"], a["k"], a["v"], causal=True, **kw)
        _close("out window(Lk-1, 0) vs causal", out_f, out_p, context=_describe(a))


@given(a=attention_arrays(sinks=True, chunk=None))
def test_sink_is_one_more_key_with_zero_value(a):
    """§18: a sink sigma_h is a key every real row sees, with score sigma_h (q . 0 = 0, then bias sigma_h) and
    value 0: out and LSE equal attention over Lk + 1 keys with that key appended (so an empty row gets
    O = 0, LSE = sigma_h). Padded query rows see only the appended key in the explicit form, as in §18."""
    s, kw = a["shape"], a["kwargs"]
    B, Hq, Lq, Lk = s["B"], s["Hq"], s["Lq"], s["Lk"]
    sinks = kw["sinks"]
    vis = _explicit_visibility(a)
    mask = np.concatenate([vis, np.ones((B, Hq, Lq, 1), bool)], axis=-1)
    bias = np.zeros((B, Hq, Lq, Lk + 1))
    if kw.get("bias") is not None:
        bias[..., :Lk] = np.broadcast_to(kw["bias"], (B, Hq, Lq, Lk))
    live = np.isfinite(sinks)
    mask[..., Lk] = live[None, :, None]
    bias[..., Lk] = np.where(live, sinks, 0.0)[None, :, None]
    k1 = np.concatenate([a["k"], np.zeros(a["k"].shape[:2] + (1, a["k"].shape[3]))], axis=2)
    v1 = np.concatenate([a["v"], np.zeros(a["v"].shape[:2] + (1, a["v"].shape[3]))], axis=2)
    plain = {n: kw[n] for n in ("scale", "softcap") if n in kw}
    out_s, lse_s = oracles.attention(a["q"], a["k"], a["v"], **kw)
    out_k, lse_k = oracles.attention(a["q"], k1, v1, mask=mask, bias=bias, **plain)
    event(f"sink heads -inf: {int((~live).sum())}, empty rows: {'yes' if (~vis.any(-1)).any() else 'no'}")
    _close("out sink vs appended key", out_s, out_k, rtol=1e-10, context=_describe(a))
    _close("lse sink vs appended key", lse_s, lse_k, rtol=1e-11, context=_describe(a))


# ---------------------------------------------------------------------------------------------
# permutation, GQA, Hadamard
# ---------------------------------------------------------------------------------------------
@given(a=attention_arrays(), data=st.data())
def test_key_permutation_equivariance(a, data):
    """§3/§6: permuting keys, values and the mask/bias columns together leaves out and LSE unchanged."""
    vis = _explicit_visibility(a)
    kw = _plain_kwargs(a, vis)
    Lk = a["shape"]["Lk"]
    perm = np.array(data.draw(st.permutations(range(Lk)), label="perm"), dtype=np.int64)
    kw_p = dict(kw)
    kw_p["mask"] = vis[..., perm]
    if kw.get("bias") is not None:
        kw_p["bias"] = np.broadcast_to(kw["bias"], vis.shape)[..., perm]
    out0, lse0 = oracles.attention(a["q"], a["k"], a["v"], **kw)
    out1, lse1 = oracles.attention(a["q"], a["k"][:, :, perm], a["v"][:, :, perm], **kw_p)
    _close("out (permuted keys)", out1, out0, context=f"perm={perm.tolist()}; " + _describe(a))
    _close("lse (permuted keys)", lse1, lse0, context=f"perm={perm.tolist()}; " + _describe(a))


@given(a=attention_arrays(), backward=st.booleans())
def test_gqa_equals_repeated_kv_heads(a, backward):
    """§9: query head h reads kv head h // G; dk, dv of a kv head are the sums over its G query heads."""
    G = a["shape"]["Hq"] // a["shape"]["Hkv"]
    assume(G > 1)
    event(f"GQA ratio {G}")
    k_rep, v_rep = np.repeat(a["k"], G, axis=1), np.repeat(a["v"], G, axis=1)
    out0, lse0 = oracles.attention(a["q"], a["k"], a["v"], **a["kwargs"])
    out1, lse1 = oracles.attention(a["q"], k_rep, v_rep, **a["kwargs"])
    _close("out GQA vs repeated", out0, out1, context=_describe(a))
    _close("lse GQA vs repeated", lse0, lse1, context=_describe(a))
    if backward:
        dout = np.random.default_rng(1).standard_normal(out0.shape)
        dq0, dk0, dv0 = oracles.attention_backward(a["q"], a["k"], a["v"], dout, **a["kwargs"])
        dq1, dk1, dv1 = oracles.attention_backward(a["q"], k_rep, v_rep, dout, **a["kwargs"])
        B, Hkv, Lk = a["k"].shape[:3]
        _close("dq GQA vs repeated", dq0, dq1, rtol=1e-10, context=_describe(a))
        _close("dk GQA vs summed", dk0, dk1.reshape(B, Hkv, G, Lk, -1).sum(2), rtol=1e-10, context=_describe(a))
        _close("dv GQA vs summed", dv0, dv1.reshape(B, Hkv, G, Lk, -1).sum(2), rtol=1e-10, context=_describe(a))


@given(a=attention_arrays(max_dim=16), seed=st.integers(0, 2**16))
def test_hadamard_invariance(a, seed):
    """§11: M = H diag(s)/sqrt(d) is orthogonal, so attention(QM, KM, V) == attention(Q, K, V)."""
    d = a["shape"]["d"]
    assume(d & (d - 1) == 0)
    signs = oracles.hadamard.hadamard_signs(d, seed)
    qm = oracles.hadamard.random_hadamard(a["q"], signs)
    km = oracles.hadamard.random_hadamard(a["k"], signs)
    out0, lse0 = oracles.attention(a["q"], a["k"], a["v"], **a["kwargs"])
    out1, lse1 = oracles.attention(qm, km, a["v"], **a["kwargs"])
    _close("out (Hadamard-rotated Q, K)", out1, out0, rtol=1e-9, context=f"d={d}; " + _describe(a))
    _close("lse (Hadamard-rotated Q, K)", lse1, lse0, rtol=1e-9, context=f"d={d}; " + _describe(a))


# ---------------------------------------------------------------------------------------------
# §8 fully masked rows
# ---------------------------------------------------------------------------------------------
@given(a=attention_arrays(mask=False), data=st.data())
def test_fully_masked_rows_follow_the_contract(a, data):
    """§8: rows with no visible key: out = 0, LSE = -inf, dq = 0, no contribution to dk, dv."""
    s = a["shape"]
    mask = data.draw(bool_masks((s["B"], s["Hq"], s["Lq"], s["Lk"]), force_full_rows=True), label="mask")
    kw = dict(a["kwargs"], mask=mask)
    vis = _explicit_visibility(dict(a, kwargs=kw))
    empty = ~vis.any(axis=-1)
    assert empty.any()
    out, lse = oracles.attention(a["q"], a["k"], a["v"], **kw)
    idx = np.argwhere(empty)
    assert np.all(out[empty] == 0.0), f"out != 0 on fully masked rows {idx[:4].tolist()}; " + _describe(a)
    assert np.all(lse[empty] == -np.inf), f"lse != -inf on fully masked rows {idx[:4].tolist()}; " + _describe(a)
    rng = np.random.default_rng(0)
    dout = rng.standard_normal(out.shape)
    dq, dk, dv = oracles.attention_backward(a["q"], a["k"], a["v"], dout, **kw)
    assert np.all(dq[empty] == 0.0), f"dq != 0 on fully masked rows {idx[:4].tolist()}; " + _describe(a)
    dout2 = dout.copy()
    dout2[empty] = rng.standard_normal(dout2[empty].shape) * 100.0
    _, dk2, dv2 = oracles.attention_backward(a["q"], a["k"], a["v"], dout2, **kw)
    np.testing.assert_array_equal(dk2, dk, err_msg="dk depends on dout of fully masked rows; " + _describe(a))
    np.testing.assert_array_equal(dv2, dv, err_msg="dv depends on dout of fully masked rows; " + _describe(a))


# ---------------------------------------------------------------------------------------------
# §13 backward
# ---------------------------------------------------------------------------------------------
@given(a=attention_arrays())
def test_dS_rows_sum_to_zero(a):
    """§13: dS_ij = P_ij (dP_ij - D_i) with D_i = dout_i . out_i sums to 0 over j (D from the oracle's out)."""
    out, lse = oracles.attention(a["q"], a["k"], a["v"], **a["kwargs"])
    s = _explicit_scores(a)
    lse_safe = np.where(np.isfinite(lse), lse, 0.0)
    P = np.where(np.isfinite(s), np.exp(s - lse_safe[..., None]), 0.0)
    G = a["shape"]["Hq"] // a["shape"]["Hkv"]
    dout = np.random.default_rng(2).standard_normal(out.shape)
    dP = np.einsum("bhid,bhjd->bhij", dout, np.repeat(a["v"], G, axis=1))
    D = np.sum(dout * out, axis=-1)
    dS = P * (dP - D[..., None])
    scale_ = np.abs(P * dP).sum(axis=-1) + np.abs(D)
    rowsum = dS.sum(axis=-1)
    bad = np.abs(rowsum) > 1e-11 * (1.0 + scale_)
    assert not bad.any(), (f"sum_j dS_ij = {rowsum[bad][0]:.3e} != 0 at row {np.argwhere(bad)[0].tolist()}; "
                           + _describe(a))
    if a["kwargs"].get("softcap") is None:
        # dk_j = scale * sum_i dS_ij q_i, so sum_j dk_j = scale * sum_i (sum_j dS_ij) q_i = 0
        _, dk, _ = oracles.attention_backward(a["q"], a["k"], a["v"], dout, **a["kwargs"])
        tot = dk.sum(axis=2)
        mag = np.abs(dk).sum(axis=2) + 1.0
        assert np.all(np.abs(tot) <= 1e-10 * mag), f"sum_j dk_j = {tot.max():.3e} != 0; " + _describe(a)


@given(a=attention_arrays(max_work=600, max_len=5, max_dim=4, max_hq=2, max_batch=1))
def test_backward_matches_central_differences(a):
    """§13: the analytic backward == central differences of sum(out * dout) (max abs <= 2e-8, seed lab)."""
    kw = a["kwargs"]
    if kw.get("scale") is not None:
        kw = dict(kw, scale=float(np.clip(kw["scale"], -1.0, 1.0)))
    q, k, v = (np.clip(x, -3, 3) for x in (a["q"], a["k"], a["v"]))
    dout = np.random.default_rng(3).standard_normal((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))
    analytic = oracles.attention_backward(q, k, v, dout, **kw)
    numeric = oracles.numerical_gradients(lambda q_, k_, v_: oracles.attention(q_, k_, v_, **kw)[0], q, k, v, dout)
    for name, x, y in zip(("dq", "dk", "dv"), analytic, numeric):
        err = np.abs(x - y)
        if err.size and err.max() > GRAD_ATOL:
            idx = np.unravel_index(int(np.argmax(err)), err.shape)
            raise AssertionError(f"{name}: analytic {x[idx]:.10g} vs central difference {y[idx]:.10g} at "
                                 f"{tuple(int(i) for i in idx)}: |err| {err[idx]:.3e} > {GRAD_ATOL:g}; " + _describe(a))


# ---------------------------------------------------------------------------------------------
# streaming and split-KV merge
# ---------------------------------------------------------------------------------------------
@given(a=attention_arrays(), block=st.integers(1, 30))
def test_streaming_equals_dense(a, block):
    """§12: the row-streaming online softmax (m, l, o over key blocks of any size) == the dense oracle."""
    out0, lse0 = oracles.attention(a["q"], a["k"], a["v"], **a["kwargs"])
    out1, lse1 = oracles.streaming_attention(a["q"], a["k"], a["v"], block=block, **a["kwargs"])
    _close("out streaming vs dense", out1, out0, rtol=1e-12 * 10, context=f"block={block}; " + _describe(a))
    _close("lse streaming vs dense", lse1, lse0, rtol=1e-12 * 10, context=f"block={block}; " + _describe(a))


@given(a=attention_arrays(), data=st.data())
def test_merging_any_partition_of_keys_equals_dense(a, data):
    """§14: split the keys into 1-8 arbitrary (not only contiguous) sets, empty ones included, each split
    attending to its keys only; merge_partials of the partials in any order == dense attention.
    Empty splits carry garbage O (NaN) that must be selected out, not multiplied by zero."""
    vis = _explicit_visibility(a)
    kw = _plain_kwargs(a, vis)
    Lk = a["shape"]["Lk"]
    S = data.draw(st.integers(1, 8), label="splits")
    owner = np.array(data.draw(st.lists(st.integers(0, S - 1), min_size=Lk, max_size=Lk), label="owner"), dtype=int)
    outs, lses = [], []
    for sidx in range(S):
        part = vis & (owner == sidx)[None, None, None, :]
        o, l = oracles.attention(a["q"], a["k"], a["v"], **dict(kw, mask=part))
        o = np.where(np.isinf(l)[..., None], np.nan, o)  # an empty split's O is garbage
        outs.append(o)
        lses.append(l)
    order = data.draw(st.permutations(range(S)), label="order")
    event(f"{S} splits, {S - len(set(owner.tolist()))} empty")
    out_m, lse_m = oracles.merge_partials(np.stack([outs[i] for i in order]), np.stack([lses[i] for i in order]))
    out0, lse0 = oracles.attention(a["q"], a["k"], a["v"], **kw)
    ctx = f"S={S}, owner={owner.tolist()}, order={list(order)}; " + _describe(a)
    _close("out merged vs dense", out_m, out0, rtol=1e-11, context=ctx)
    _close("lse merged vs dense", lse_m, lse0, rtol=1e-11, context=ctx)


@given(a=attention_arrays(varlen=False), data=st.data())
def test_split_partials_contiguous_merge(a, data):
    """§14: oracles.split_partials over contiguous boundaries (empty splits allowed) merges back to dense."""
    Lk = a["shape"]["Lk"]
    cuts = sorted(data.draw(st.lists(st.integers(0, Lk), min_size=0, max_size=7), label="cuts"))
    bounds = [0, *cuts, Lk]
    outs, lses = oracles.split_partials(a["q"], a["k"], a["v"], bounds, **a["kwargs"])
    out_m, lse_m = oracles.merge_partials(outs, lses)
    out0, lse0 = oracles.attention(a["q"], a["k"], a["v"], **a["kwargs"])
    _close("out split_partials+merge vs dense", out_m, out0, context=f"bounds={bounds}; " + _describe(a))
    _close("lse split_partials+merge vs dense", lse_m, lse0, context=f"bounds={bounds}; " + _describe(a))


def test_all_empty_partials_merge_to_zero_and_minus_inf():
    """§14: if every split is empty, O = 0 and LSE = -inf (garbage in the partial O is ignored)."""
    outs = np.full((3, 1, 2, 4, 5), np.nan)
    lses = np.full((3, 1, 2, 4), -np.inf)
    out, lse = oracles.merge_partials(outs, lses)
    assert np.all(out == 0.0), f"merge of all-empty partials: out {out.ravel()[:4]} != 0"
    assert np.all(lse == -np.inf), f"merge of all-empty partials: lse {lse.ravel()[:4]} != -inf"


@pytest.mark.parametrize("dist", ["normal", "outliers", "ties", "large_logits"])
def test_sample_values_are_finite_and_shaped(dist):
    """The value recipes used by the strategies give finite FP64 arrays of the requested shape."""
    x = sample_values(np.random.default_rng(0), (2, 3, 5, 4), dist)
    assert x.shape == (2, 3, 5, 4) and np.isfinite(x).all(), f"{dist}: shape {x.shape}, finite {np.isfinite(x).all()}"
