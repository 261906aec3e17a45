"""Backward of the FA1, FA2 and FA3 reference kernels against the FP64 oracle (SEMANTICS.md §13).

float64 emulation must match `oracles.attention_backward` to 1e-11 (absolute; gradients ~ 1-10).
In bf16/fp16 (P and dS rounded to the dtype before their matmuls, float32 accumulation, outputs
rounded) the documented bound is max|g - g_ref| <= 16 u (1 + max|g_ref|) per gradient, u the
dtype's unit roundoff; the reference is the oracle on the rounded inputs and rounded dout.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import BWD_KERNELS, SEMANTIC_CASES, UNIT_ROUNDOFF, make_case, repro

from attention_conformance import oracles
from attention_conformance.kernels import emulate


def _grads(kernel, arrays, kw, **knobs):
    mod = BWD_KERNELS[kernel]
    q, k, v, do = arrays["q"], arrays["k"], arrays["v"], arrays["dout"]
    if kernel == "fa1":
        out, lse, l, m = mod.forward(q, k, v, **kw, **knobs, return_stats=True)
        return mod.backward(q, k, v, out, lse, do, **kw, **knobs, l=l, m=m)
    out, lse = mod.forward(q, k, v, **kw, **knobs)
    return mod.backward(q, k, v, out, lse, do, **kw, **knobs)


def _check(kernel, name, got, ref, bound_fn, knobs):
    for label, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = np.asarray(g, dtype=np.float64)
        assert g.shape == r.shape, f"{kernel}/{name}: {label} shape {g.shape} != {r.shape}; {repro(kernel, name)}"
        if g.size == 0:
            continue
        err = np.abs(g - r)
        i = np.unravel_index(np.argmax(err), err.shape)
        bound = bound_fn(r)
        assert err[i] <= bound, (f"{kernel}/{name}: max |{label} - ref| = {err[i]:.3e} at {i} > {bound:.3e} "
                                 f"(kernel {g[i]!r}, oracle {r[i]!r}); knobs {knobs}; {repro(kernel, name)}")


@pytest.mark.backward
@pytest.mark.parametrize("name", list(SEMANTIC_CASES))
@pytest.mark.parametrize("kernel", list(BWD_KERNELS))
def test_backward_float64_matches_oracle(kernel, name):
    arrays, kw, _ = make_case(name, dout=True)
    ref = oracles.attention_backward(arrays["q"], arrays["k"], arrays["v"], arrays["dout"], **kw)
    knobs = {"block_q": 16, "block_k": 8, "dtype": "float64"}
    got = _grads(kernel, arrays, kw, **knobs)
    _check(kernel, name, got, ref, lambda r: 1e-11, knobs)


@pytest.mark.backward
@pytest.mark.parametrize("Lq,Lk", [(1, 1), (17, 15), (33, 17), (5, 0)])
@pytest.mark.parametrize("kernel", list(BWD_KERNELS))
def test_backward_tile_edges(kernel, Lq, Lk):
    arrays, kw, _ = make_case("causal_br_lq_lt_lk", dout=True, Lq=Lq, Lk=Lk, B=1)
    ref = oracles.attention_backward(arrays["q"], arrays["k"], arrays["v"], arrays["dout"], **kw)
    for block_q, block_k in ((16, 16), (4, 7)):
        knobs = {"block_q": block_q, "block_k": block_k, "dtype": "float64"}
        _check(kernel, f"causal Lq={Lq} Lk={Lk}", _grads(kernel, arrays, kw, **knobs), ref, lambda r: 1e-11, knobs)


@pytest.mark.backward
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["plain", "everything", "all_masked_rows"])
@pytest.mark.parametrize("kernel", list(BWD_KERNELS))
def test_backward_low_precision_within_bound(kernel, name, dtype):
    arrays, kw, _ = make_case(name, dout=True)
    rounded = {k: emulate.round_to(v, dtype).astype(np.float64) for k, v in arrays.items()}
    ref = oracles.attention_backward(rounded["q"], rounded["k"], rounded["v"], rounded["dout"], **kw)
    knobs = {"block_q": 16, "block_k": 16, "dtype": dtype}
    got = _grads(kernel, arrays, kw, **knobs)
    u = UNIT_ROUNDOFF[dtype]
    _check(kernel, name, got, ref, lambda r: 16 * u * (1 + np.abs(r).max()), knobs)
    assert np.abs(np.asarray(got[0], np.float64) - ref[0]).max() > 0, f"{kernel}/{name}: no {dtype} error in dq"


@pytest.mark.backward
@pytest.mark.parametrize("kernel", list(BWD_KERNELS))
def test_backward_fully_masked_rows_give_zero_dq(kernel):
    arrays, kw, _ = make_case("all_masked_rows", dout=True)
    dq, dk, dv = _grads(kernel, arrays, kw, block_q=16, block_k=16, dtype="bfloat16")
    rows = ~kw["mask"].any(axis=-1)
    assert np.all(np.asarray(dq)[rows] == 0), f"{kernel}: dq of fully masked rows must be 0 (§8, §13)"
    assert np.isfinite(np.asarray(dk)).all() and np.isfinite(np.asarray(dv)).all(), f"{kernel}: non-finite dk/dv"
