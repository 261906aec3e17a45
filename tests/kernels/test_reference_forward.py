"""Forward of every reference kernel against the FP64 oracle (oracles/SEMANTICS.md §1-§9, §12).

With ``dtype="float64"`` the kernels do exact arithmetic in a different order than the oracle, so
they must agree to 1e-12 (absolute, on O ~ 1 and LSE ~ 5). In bf16/fp16 the documented bound is
|O - O_ref| <= 4 u max|V| (u = unit roundoff of the dtype; P is rounded to the dtype before PV, with
error <= u P_j per term, plus the output rounding u |O|), and |LSE - LSE_ref| <= 1e-4 (float32
softmax statistics); the reference for the low-precision runs is the oracle on the rounded inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import KERNELS, SEMANTIC_CASES, UNIT_ROUNDOFF, make_case, repro, run_forward

from attention_conformance import oracles
from attention_conformance.kernels import emulate


def _knobs(kernel: str, block_q: int, block_k: int, dtype: str) -> dict:
    knobs = {"block_q": block_q, "block_k": block_k, "dtype": dtype}
    if kernel == "splitkv":
        knobs["num_splits"] = 3
    return knobs


def _check(kernel, name, out, lse, ref_out, ref_lse, atol_o, atol_lse, **extra):
    where = repro(kernel, name, **extra)
    assert out.shape == ref_out.shape, f"{kernel}/{name}: out shape {out.shape} != {ref_out.shape}; {where}"
    assert lse.shape == ref_lse.shape, f"{kernel}/{name}: lse shape {lse.shape} != {ref_lse.shape}; {where}"
    empty = np.isneginf(ref_lse)
    bad = np.argwhere(np.isneginf(lse) != empty)
    assert bad.size == 0, f"{kernel}/{name}: LSE -inf pattern differs first at {tuple(bad[0])}; {where}"
    assert np.all(out[empty] == 0), f"{kernel}/{name}: fully masked rows must give O = 0 (§8); {where}"
    err = np.abs(out - ref_out)
    i = np.unravel_index(np.argmax(err), err.shape)
    assert err[i] <= atol_o, (f"{kernel}/{name}: max |O - O_ref| = {err[i]:.3e} at {i} > {atol_o:.3e} "
                              f"(kernel {out[i]!r}, oracle {ref_out[i]!r}); {where}")
    if (~empty).any():
        lerr = np.abs(lse[~empty] - ref_lse[~empty]).max()
        assert lerr <= atol_lse, f"{kernel}/{name}: max |LSE - LSE_ref| = {lerr:.3e} > {atol_lse:.1e}; {where}"


@pytest.mark.parametrize("name", list(SEMANTIC_CASES))
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forward_float64_matches_oracle(kernel, name):
    arrays, kw, _ = make_case(name)
    ref_out, ref_lse = oracles.attention(arrays["q"], arrays["k"], arrays["v"], **kw)
    knobs = _knobs(kernel, 16, 16, "float64")
    out, lse = run_forward(kernel, arrays, kw, **knobs)
    _check(kernel, name, out, lse, ref_out, ref_lse, 1e-12, 1e-12, **knobs)


@pytest.mark.parametrize("Lq,Lk", [(1, 1), (1, 33), (15, 16), (16, 16), (17, 15), (33, 17), (32, 64), (5, 0)])
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forward_tile_edges(kernel, Lq, Lk):
    arrays, kw, _ = make_case("causal_br_lq_lt_lk", Lq=Lq, Lk=Lk, B=1)
    ref_out, ref_lse = oracles.attention(arrays["q"], arrays["k"], arrays["v"], **kw)
    for block_q, block_k in ((16, 16), (4, 8), (64, 3)):
        knobs = _knobs(kernel, block_q, block_k, "float64")
        out, lse = run_forward(kernel, arrays, kw, **knobs)
        _check(kernel, f"causal Lq={Lq} Lk={Lk}", out, lse, ref_out, ref_lse, 1e-12, 1e-12, **knobs)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["plain", "causal_br_lq_gt_lk", "everything", "all_masked_rows"])
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forward_low_precision_within_bound(kernel, name, dtype):
    arrays, kw, _ = make_case(name)
    rounded = {k: emulate.round_to(v, dtype).astype(np.float64) for k, v in arrays.items()}
    ref_out, ref_lse = oracles.attention(rounded["q"], rounded["k"], rounded["v"], **kw)
    knobs = _knobs(kernel, 16, 16, dtype)
    out, lse = run_forward(kernel, arrays, kw, **knobs)
    out = np.asarray(out, dtype=np.float64)
    assert np.array_equal(out, emulate.round_to(out, dtype)), f"{kernel}: output not on the {dtype} grid"
    bound = 4 * UNIT_ROUNDOFF[dtype] * np.abs(rounded["v"]).max()
    _check(kernel, name, out, np.asarray(lse, np.float64), ref_out, ref_lse, bound, 1e-4, **knobs)
    # the emulation is real: low precision leaves a visible error
    assert np.abs(out - ref_out).max() > UNIT_ROUNDOFF[dtype] * 1e-2, f"{kernel}/{name}: no {dtype} error at all"


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forward_does_not_modify_inputs(kernel):
    arrays, kw, _ = make_case("everything")
    before = {k: v.copy() for k, v in arrays.items()}
    mask, bias = kw["mask"].copy(), kw["bias"].copy()
    run_forward(kernel, arrays, kw, **_knobs(kernel, 16, 16, "bfloat16"))
    for k, v in arrays.items():
        assert np.array_equal(v, before[k]), f"{kernel}.forward modified input {k}"
    assert np.array_equal(kw["mask"], mask) and np.array_equal(kw["bias"], bias), f"{kernel} modified mask/bias"


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forward_deterministic_and_block_invariant_in_float64(kernel):
    arrays, kw, _ = make_case("everything")
    a = run_forward(kernel, arrays, kw, **_knobs(kernel, 16, 16, "bfloat16"))
    b = run_forward(kernel, arrays, kw, **_knobs(kernel, 16, 16, "bfloat16"))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), f"{kernel}: repeated calls differ"


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_bad_arguments_raise_value_error(kernel):
    arrays, kw, _ = make_case("plain")
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    mod = KERNELS[kernel]
    with pytest.raises(ValueError, match="rank 4"):
        mod.forward(q[0], k, v)
    with pytest.raises(ValueError, match="alignment"):
        mod.forward(q, k, v, causal=True, alignment="middle")
    with pytest.raises(ValueError, match="window"):
        mod.forward(q, k, v, window=(-1, 2))
    with pytest.raises(ValueError, match="softcap"):
        mod.forward(q, k, v, softcap=0.0)
    with pytest.raises(ValueError, match="seqlens_k"):
        mod.forward(q, k, v, seqlens_k=(1, 999))
    with pytest.raises(ValueError, match="Hq"):
        mod.forward(q[:, :1].repeat(3, axis=1), k, v)
    with pytest.raises(ValueError, match="dtype"):
        mod.forward(q, k, v, dtype="float128")
