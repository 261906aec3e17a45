"""Generated shapes and semantics: every reference kernel equals the FP64 oracle in float64 emulation.

Hypothesis draws batch, heads (GQA ratio), lengths around tile edges, block sizes, causal alignment,
windows, softcap and varlen lengths (oracles/SEMANTICS.md §3-§9); forward must match to 1e-12 and,
for FA1/FA2/FA3, backward to 1e-11. A failure prints the drawn example, which is its own repro.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_conformance import oracles
from attention_conformance.kernels.reference import fa1, fa2, fa3, splitkv


@st.composite
def problems(draw):
    B = draw(st.integers(1, 2))
    Hkv = draw(st.integers(1, 2))
    Hq = Hkv * draw(st.sampled_from([1, 2, 3]))
    Lq = draw(st.integers(0, 40))
    Lk = draw(st.integers(0, 40))
    d = draw(st.sampled_from([1, 4, 8]))
    dv = draw(st.sampled_from([d, 3]))
    kw = {"causal": draw(st.booleans()), "alignment": draw(st.sampled_from(["bottom_right", "top_left"]))}
    if draw(st.booleans()):
        kw["window"] = (draw(st.none() | st.integers(0, 12)), draw(st.none() | st.integers(0, 12)))
    if draw(st.booleans()):
        kw["softcap"] = draw(st.floats(0.5, 20.0))
    if draw(st.booleans()):
        kw["seqlens_q"] = tuple(draw(st.integers(0, Lq)) for _ in range(B))
        kw["seqlens_k"] = tuple(draw(st.integers(0, Lk)) for _ in range(B))
    knobs = {"block_q": draw(st.integers(1, 20)), "block_k": draw(st.integers(1, 20))}
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    arrays = (rng.standard_normal((B, Hq, Lq, d)) * 2, rng.standard_normal((B, Hkv, Lk, d)) * 2,
              rng.standard_normal((B, Hkv, Lk, dv)), rng.standard_normal((B, Hq, Lq, dv)))
    return arrays, kw, knobs


@pytest.mark.parametrize("kernel", [fa1, fa2, fa3, splitkv], ids=["fa1", "fa2", "fa3", "splitkv"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(), num_splits=st.integers(1, 6))
def test_generated_problems_match_oracle(kernel, problem, num_splits):
    (q, k, v, dout), kw, knobs = problem
    extra = {"num_splits": num_splits} if kernel is splitkv else {}
    ref_out, ref_lse = oracles.attention(q, k, v, **kw)
    out, lse = kernel.forward(q, k, v, **kw, **knobs, **extra, dtype="float64")
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), f"{kernel.__name__}: -inf LSE pattern differs"
    if out.size:
        assert np.abs(out - ref_out).max() <= 1e-12, f"{kernel.__name__}: |O - O_ref| {np.abs(out - ref_out).max():.3e}"
    fin = np.isfinite(ref_lse)
    if fin.any():
        assert np.abs(lse[fin] - ref_lse[fin]).max() <= 1e-12, f"{kernel.__name__}: LSE differs"
    if kernel is splitkv:
        return
    grads = kernel.backward(q, k, v, out, lse, dout, **kw, **knobs, dtype="float64")
    for label, g, r in zip(("dq", "dk", "dv"), grads, oracles.attention_backward(q, k, v, dout, **kw)):
        if g.size:
            assert np.abs(g - r).max() <= 1e-11, f"{kernel.__name__}: {label} differs by {np.abs(g - r).max():.3e}"
