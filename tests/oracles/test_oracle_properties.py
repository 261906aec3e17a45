"""Randomised cross-checks of the three oracle paths on generated problems (SEMANTICS.md §1-§9, §12, §14).

For each drawn problem: dense `attention` == `streaming_attention` (random key block) == merge of
`split_partials` over random boundaries (any order), and the semantics expressed through the dense
`visibility` mask give the same numbers. Tolerance 1e-12 (FP64 reordering only).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_conformance import oracles

TOL = 1e-12


@st.composite
def problems(draw):
    B = draw(st.integers(1, 2))
    Hkv = draw(st.integers(1, 2))
    G = draw(st.integers(1, 2))
    Lq, Lk = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d, dv = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, Hkv * G, Lq, d))
    k = rng.standard_normal((B, Hkv, Lk, d))
    v = rng.standard_normal((B, Hkv, Lk, dv))
    kw = {
        "causal": draw(st.booleans()),
        "alignment": draw(st.sampled_from(["bottom_right", "top_left"])),
        "scale": draw(st.sampled_from([None, 0.5, -1.3, 3.0])),
        "softcap": draw(st.sampled_from([None, 0.5, 4.0])),
    }
    side = st.one_of(st.none(), st.integers(0, 4))
    if draw(st.booleans()):
        kw["window"] = (draw(side), draw(side))
    if draw(st.booleans()):
        kw["seqlens_q"] = draw(st.lists(st.integers(0, Lq), min_size=B, max_size=B))
        kw["seqlens_k"] = draw(st.lists(st.integers(0, Lk), min_size=B, max_size=B))
    if draw(st.booleans()):
        kw["mask"] = rng.random((B, 1, Lq, Lk)) > 0.3
    if draw(st.booleans()):
        kw["bias"] = np.where(rng.random((Lq, Lk)) > 0.85, -np.inf, rng.standard_normal((Lq, Lk)))
    return q, k, v, kw


def _close(a, b, what):
    (oa, la), (ob, lb) = a, b
    assert np.array_equal(np.isneginf(la), np.isneginf(lb)), f"{what}: -inf LSE pattern differs"
    fin = np.isfinite(la)
    err = max(np.abs(oa - ob).max(initial=0.0), np.abs(la[fin] - lb[fin]).max(initial=0.0))
    assert err <= TOL, f"{what}: max error {err:.3e} > {TOL:g}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.data())
def test_dense_streaming_merge_and_mask_agree(problem, data):
    q, k, v, kw = problem
    Lk = k.shape[2]
    dense = oracles.attention(q, k, v, **kw)
    block = data.draw(st.integers(1, Lk + 1), label="block")
    _close(oracles.streaming_attention(q, k, v, block=block, **kw), dense, f"streaming block={block}")
    cuts = sorted(data.draw(st.lists(st.integers(0, Lk), max_size=3), label="cuts"))
    outs, lses = oracles.split_partials(q, k, v, [0, *cuts, Lk], **kw)
    perm = np.random.default_rng(len(cuts)).permutation(len(outs))
    _close(oracles.merge_partials(outs[perm], lses[perm]), dense, f"merge of splits at {cuts}")
    semantics = {n: kw.pop(n) for n in ("causal", "alignment", "window", "seqlens_q", "seqlens_k") if n in kw}
    vis = oracles.visibility(q.shape[2], Lk, **semantics)
    mask = vis if "mask" not in kw else (vis & kw.pop("mask"))
    _close(oracles.attention(q, k, v, mask=mask, **kw), dense, "explicit visibility mask")
