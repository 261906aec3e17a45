"""The lazy rescale of the CUDA FA3 forward (kernels/cuda/include/hopper/softmax.cuh kMaxStale), modelled by
kernels/reference/fa3.py ``forward(max_stale=8)``: a row keeps its running maximum until a key tile's exceeds it by more
than 2^8 in P. Exact in real arithmetic, so against the FP64 oracle it must do as well as the eager rescale, also on
scores that grow from key tile to key tile (the maximum moves in some tiles and not in others) and on rows that see
no key in their first tiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_conformance import oracles
from attention_conformance.kernels.reference import fa3

# bf16: inputs and P rounded to 2^-8 relative, the output too: the FP16/BF16 forward's bound in cuda_fwd_check_bench
TOL = 1.2e-2


def _rel(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-300))


@st.composite
def problems(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lq, lk, d = draw(st.integers(1, 40)), draw(st.integers(1, 200)), draw(st.sampled_from([8, 16]))
    q = rng.standard_normal((1, 2, lq, d))
    k = rng.standard_normal((1, 1, lk, d))
    v = rng.standard_normal((1, 1, lk, d))
    # scores that rise along the keys by `step` log2 units per key tile of 16, around the kernel's threshold of 8
    step = draw(st.sampled_from([0.0, 2.0, 7.9, 8.1, 20.0]))
    gain = draw(st.sampled_from([1.0, 4.0]))
    q[..., 0], k[..., 0] = gain * np.sqrt(d), step / gain * np.log(2) * (np.arange(lk) // 16)
    causal = draw(st.booleans())
    return dict(q=q, k=k, v=v, causal=causal, alignment=draw(st.sampled_from(["bottom_right", "top_left"])))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_lazy_rescale_is_exact_in_float64(case):
    """No rounding anywhere (dtype float64): the lazy model equals the oracle to float64 accuracy."""
    ref_o, ref_lse = oracles.attention(**case)
    o, lse = fa3.forward(**case, block_q=16, block_k=16, dtype="float64", max_stale=8.0)
    assert _rel(o, ref_o) <= 1e-10
    assert np.array_equal(np.isinf(lse), np.isinf(ref_lse))
    fin = np.isfinite(ref_lse)
    assert np.abs(lse[fin] - ref_lse[fin]).max(initial=0.0) <= 1e-10


@settings(max_examples=60, deadline=None)
@given(problems())
def test_lazy_rescale_in_bf16_differs_from_the_eager_one_by_p_rounding(case):
    """bf16: P is rounded at another scale (2^-8 relative each way) and the output is rounded; the row sums use the
    unrounded P, so the LSE agrees to float32 accuracy."""
    kw = dict(block_q=16, block_k=16, dtype="bfloat16")
    lazy_o, lazy_lse = fa3.forward(**case, max_stale=8.0, **kw)
    eager_o, eager_lse = fa3.forward(**case, **kw)
    assert _rel(lazy_o, eager_o) <= TOL
    assert np.array_equal(np.isinf(lazy_lse), np.isinf(eager_lse))
    fin = np.isfinite(eager_lse)
    assert np.all(np.abs(lazy_lse[fin] - eager_lse[fin]) <= 1e-5 * np.maximum(1.0, np.abs(eager_lse[fin])))


def test_lazy_rescale_keeps_the_maximum_and_bounds_p():
    """Scores rising by 4 log2 units a key tile: the lazy maximum moves every other tile, so it is stale by up to 8 and
    P reaches 2^4 to 2^8 (the eager model keeps P <= 1); the float64 result still matches the oracle."""
    lk, d = 96, 16
    q = np.zeros((1, 1, 1, d))
    k = np.zeros((1, 1, lk, d))
    q[..., 0], k[..., 0] = np.sqrt(d), 4.0 * np.log(2) * (np.arange(lk) // 16)
    v = np.random.default_rng(0).standard_normal((1, 1, lk, d))
    ref_o, ref_lse = oracles.attention(q, k, v)
    o, lse = fa3.forward(q, k, v, block_q=16, block_k=16, dtype="float64", max_stale=8.0)
    assert _rel(o, ref_o) <= 1e-12 and abs(lse[0, 0, 0] - ref_lse[0, 0, 0]) <= 1e-12


def test_max_stale_rejects_a_negative_or_nan_value():
    q = k = v = np.zeros((1, 1, 4, 8))
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="max_stale"):
            fa3.forward(q, k, v, max_stale=bad)
