"""The FP64 oracle against an mpmath evaluation at 50 significant digits (SEMANTICS.md §2-§9, §12).

The reference below is written from SEMANTICS.md directly, scalar by scalar, sharing no code with
`oracles`. Errors are relative: for out, |out - ref| / sum_j P_j |v_j| (the natural scale of a
convex combination, immune to cancellation); for LSE, |lse - ref| / max(1, |ref|). Bound: 1e-13.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from oracle_helpers import case_repr, rand_qkv, scalar_visible

from attention_conformance import oracles

mpmath.mp.dps = 50
TOL = 1e-13


def _mp(x) -> mpmath.mpf:
    """The exact value of a float64 as an mpf."""
    return mpmath.mpf(float(x))


def mp_attention(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None,
                 bias=None, softcap=None, seqlens_q=None, seqlens_k=None, sinks=None, chunk=None):
    """Scalar mpmath attention: returns (out, lse) as nested lists of mpf (None for lse = -inf).

    ``sinks`` (SEMANTICS.md §18): the head's sink logit is one more term of the row's sum, with no value."""
    B, Hq, Lq, d = q.shape
    Hkv, Lk, dv = k.shape[1], k.shape[2], v.shape[3]
    sc = mpmath.mpf(1) / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
    mask = None if mask is None else np.broadcast_to(mask, (B, Hq, Lq, Lk))
    bias = None if bias is None else np.broadcast_to(bias, (B, Hq, Lq, Lk))
    out = np.zeros((B, Hq, Lq, dv), dtype=object)
    lse = np.empty((B, Hq, Lq), dtype=object)
    scl = np.zeros((B, Hq, Lq, dv), dtype=object)
    for b in range(B):
        sq = Lq if seqlens_q is None else seqlens_q[b]
        sk = Lk if seqlens_k is None else seqlens_k[b]
        for h in range(Hq):
            g = h // (Hq // Hkv)
            for i in range(Lq):
                scores = {}
                for j in range(Lk):
                    if not scalar_visible(i, j, sq, sk, causal, alignment, window, chunk):
                        continue
                    if mask is not None and not mask[b, h, i, j]:
                        continue
                    s = sc * mpmath.fsum(_mp(a) * _mp(c) for a, c in zip(q[b, h, i], k[b, g, j]))
                    if softcap is not None:
                        s = softcap * mpmath.tanh(s / softcap)
                    if bias is not None:
                        s += _mp(bias[b, h, i, j])
                    scores[j] = s
                sink = [] if sinks is None else [mpmath.exp(_mp(sinks[h]))]
                if not scores and not sink:
                    lse[b, h, i] = None
                    continue
                total = mpmath.fsum([mpmath.exp(s) for s in scores.values()] + sink)
                lse[b, h, i] = mpmath.log(total)
                for c in range(dv):
                    terms = [mpmath.exp(s) / total * _mp(v[b, g, j, c]) for j, s in scores.items()]
                    out[b, h, i, c] = mpmath.fsum(terms)
                    scl[b, h, i, c] = mpmath.fsum(abs(t) for t in terms) if terms else mpmath.mpf(1)
    return out, lse, scl


_rng = np.random.default_rng(7)
CASES = {
    "plain": {},
    "causal_bottom_right": {"causal": True},
    "causal_top_left": {"causal": True, "alignment": "top_left"},
    "window": {"window": (1, 1)},
    "causal_window": {"causal": True, "window": (2, None)},
    "softcap": {"softcap": 0.9, "scale": 2.0},
    "negative_scale": {"scale": -0.8},
    "bias": {"bias": _rng.standard_normal((1, 2, 3, 4))},
    "mask_with_empty_row": {"mask": np.array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1]], bool)},
    "varlen": {"seqlens_q": [2], "seqlens_k": [3], "causal": True},
    "large_logits": {"scale": 25.0},
    "sinks": {"sinks": np.array([0.7, -1.3])},
    "sinks_large": {"sinks": np.array([40.0, 600.0])},
    "sinks_very_negative": {"sinks": np.array([-50.0, -1e4])},
    "sinks_empty_row": {"sinks": np.array([0.5, -2.0]),
                        "mask": np.array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1]], bool)},
    "sinks_varlen_no_keys": {"sinks": np.array([1.5, 0.0]), "seqlens_q": [3], "seqlens_k": [0]},
    "chunk": {"chunk": 2},
    "chunk_causal": {"chunk": 2, "causal": True},
    "chunk_top_left_window": {"chunk": 3, "causal": True, "alignment": "top_left", "window": (1, None)},
    "chunk_sinks": {"chunk": 3, "sinks": np.array([0.2, 2.0])},
}


@pytest.mark.parametrize("name", list(CASES))
def test_oracle_matches_mpmath(name):
    shape = dict(B=1, Hq=2, Hkv=1, Lq=3, Lk=4, d=3, dv=2, seed=11)
    q, k, v = rand_qkv(**shape)
    kw = CASES[name]
    out, lse = oracles.attention(q, k, v, **kw)
    ref_out, ref_lse, scl = mp_attention(q, k, v, **kw)
    repro = case_repr(shape, kw)
    for idx in np.ndindex(lse.shape):
        r = ref_lse[idx]
        if r is None:
            assert lse[idx] == -np.inf, f"lse{idx} = {lse[idx]}, expected -inf (fully masked, §8); {repro}"
            assert np.all(out[idx] == 0), f"out{idx} = {out[idx]}, expected 0 (§8); {repro}"
            continue
        err = abs(mpmath.mpf(float(lse[idx])) - r) / max(1, abs(r))
        assert err <= TOL, f"lse{idx}: relative error {float(err):.3e} > {TOL}; {repro}"
        for c in range(out.shape[-1]):
            e = abs(mpmath.mpf(float(out[idx + (c,)])) - ref_out[idx + (c,)]) / scl[idx + (c,)]
            assert e <= TOL, f"out{idx + (c,)}: relative error {float(e):.3e} > {TOL}; {repro}"


def test_streaming_matches_mpmath():
    q, k, v = rand_qkv(B=1, Hq=2, Hkv=1, Lq=3, Lk=4, d=3, dv=2, seed=12)
    out, lse = oracles.streaming_attention(q, k, v, block=3, causal=True)
    ref_out, ref_lse, scl = mp_attention(q, k, v, causal=True)
    for idx in np.ndindex(out.shape):
        e = abs(mpmath.mpf(float(out[idx])) - ref_out[idx]) / scl[idx]
        assert e <= TOL, f"streaming out{idx}: relative error {float(e):.3e} > {TOL}"
