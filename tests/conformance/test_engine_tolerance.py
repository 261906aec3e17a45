"""The tolerance policy in both directions (conformance/TOLERANCES.md).

Correct implementations never fail across a sweep (the naive same-precision emulation on every ci
case; an FA-style tiled kernel with fp32 accumulators; torch's math backend at fp16/bf16/fp32), and
precision bugs do fail (bf16 accumulators over thousands of keys, P rounded to FP8 in a bf16 kernel,
scores rounded to bf16 with large logits).
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_toys import EmulatedKernel

from attention_conformance.adapters.registry import LoadedAdapter
from attention_conformance.cases import catalog
from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import make_inputs, round_to_dtype
from attention_conformance.running.engine import Runner
from attention_conformance.verdict.bounds import compute_oracle, forward_tolerance
from attention_conformance.verdict.precision import gamma, precision_model, unit_roundoff


def _run(adapter, case):
    runner = Runner([LoadedAdapter("toy", "toy", adapter)], "cpu", determinism="none")
    return runner.run_case(runner.adapters[0], case)


def test_unit_roundoffs_and_gamma():
    assert unit_roundoff("float16") == 2.0**-11
    assert unit_roundoff("bfloat16") == 2.0**-8
    assert unit_roundoff("float32") == 2.0**-24
    assert unit_roundoff("float8_e4m3fn") == 2.0**-4
    assert gamma(4) == 4.0 and gamma(10000) == pytest.approx(500.0)
    m = precision_model(catalog.cases("ci")[0].replace(dtype="bfloat16"))
    assert (m.u_out, m.u_p, m.u_s) == (2.0**-8, 2.0**-8, 2.0**-24)


def test_naive_same_precision_never_fails_on_ci_sweep():
    worst = 0.0
    for case in catalog.cases("ci"):
        od = compute_oracle(case, make_inputs(case))
        tol = forward_tolerance(od)
        ratio = np.where(od.valid[..., None], np.abs(od.naive_out - od.out) / tol, 0.0).max(initial=0.0)
        worst = max(worst, ratio)
        assert ratio <= 1.0, f"naive same-precision kernel exceeds the bound on {case.id}: usage {ratio:.3g}"
        for name, ref in od.grads.items():
            r = (np.abs(od.naive_grads[name] - ref) / od.grad_tol[name]).max()
            assert r <= 1.0, f"naive backward {name} exceeds the bound on {case.id}: usage {r:.3g}"
    assert worst > 0.05, f"bound suspiciously loose: the worst usage over the sweep is only {worst:.3g}"


SWEEP = [c for c in catalog.cases("ci") if c.family in ("tile_edges", "distribution", "accumulation", "scale",
                                                         "softcap", "masked_rows", "worked")
         and c.fp8 is None and not c.backward and c.Lk <= 4096][::2]


@pytest.mark.parametrize("case", SWEEP, ids=lambda c: c.id)
def test_tiled_fp32_accumulating_kernel_passes(case):
    res = _run(EmulatedKernel(), case)
    assert res.outcome in ("PASS", "QUALITY_WARNING"), res.message


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_torch_math_backend_passes(dtype):
    pytest.importorskip("torch")
    from attention_conformance.adapters.registry import load

    la = load("torch-sdpa-math", "cpu")
    if not la.available:
        pytest.skip(la.reason)
    runner = Runner([la], "cpu", determinism="none")
    cases = [c.replace(dtype=dtype) for c in catalog.cases("ci")
             if c.family in ("tile_edges", "distribution", "scale", "gqa", "dtype") and c.fp8 is None][::3]
    for case in cases:
        res = runner.run_case(la, case)
        assert res.outcome in ("PASS", "QUALITY_WARNING", "NOT_SUPPORTED"), f"{case.id}: {res.message}"


def _accum_case(dtype="bfloat16"):
    return catalog._seeded(catalog._mk("accumulation", B=1, Hq=1, Hkv=1, Lq=8, Lk=4096, d=64,
                                       distribution="uniform", dtype=dtype))


def test_bf16_accumulators_over_4096_keys_fail():
    case = _accum_case()
    assert _run(EmulatedKernel(), case).outcome == "PASS"
    res = _run(EmulatedKernel(acc="bfloat16"), case)
    assert res.outcome == "FAIL", res.message
    assert res.stats["out"]["max_ratio"] > 2


def test_fp8_p_in_bf16_kernel_fails():
    case = catalog._seeded(catalog._mk("distribution", Lq=65, Lk=129, d=64, dtype="bfloat16"))
    assert _run(EmulatedKernel(), case).outcome == "PASS"
    res = _run(EmulatedKernel(p_fmt="float8_e4m3fn"), case)
    assert res.outcome == "FAIL", res.message


def test_bf16_scores_with_large_logits_fail():
    case = catalog._seeded(catalog._mk("distribution", Lq=65, Lk=129, d=64, dtype="bfloat16",
                                       distribution="large_logits"))
    assert _run(EmulatedKernel(), case).outcome == "PASS"
    res = _run(EmulatedKernel(score_fmt="bfloat16"), case)
    assert res.outcome == "FAIL", res.message


def test_a_kernel_that_flushes_tiny_probabilities_to_zero_passes():
    """FlashAttention's kernels take exp as ``ex2.approx.ftz.f32``: a probability below 2^-126 is 0 (TOLERANCES.md
    §1 `p_flush`). The case the H100 found (cuda-fa2's backward: out 0 against -1.9e-38, dQ -0.0 against -5.9e-37):
    bf16, large logits, a negative scale and a sink, where 121 of 257 rows have P < 2^-126. An exact kernel but for
    that flush is within every bound; one that drops a P above it is not."""
    case = Case(family="hyp-bwd", B=1, Hq=1, Hkv=1, Lq=257, Lk=1, d=128, dv=128, dtype="bfloat16", scale=-1.5,
                distribution="large_logits", backward=True, seed=1, sinks="small")
    inputs = make_inputs(case)
    od = compute_oracle(case, inputs)
    q, k, v, dout = (np.asarray(x, np.float64)[0, 0] for x in (inputs.q, inputs.k, inputs.v, inputs.dout))
    p = np.exp((q @ k.T)[:, 0] * case.scale - od.lse[0, 0])  # one key: P of each row
    flushed = p < 2.0**-126
    assert 0 < flushed.sum() < len(p) and (p[flushed] > 0).any()

    def kernel(p_kept):
        out = round_to_dtype(p_kept[:, None] * v[0], "bfloat16")
        ds = p_kept * (dout @ v[0] - (dout * od.out[0, 0]).sum(axis=1))  # dS = P (dP - D), §13
        return out, round_to_dtype(case.scale * ds[:, None] * k[0], "bfloat16")

    out, dq = kernel(np.where(flushed, 0.0, p))
    assert (np.abs(out - od.out[0, 0]) <= forward_tolerance(od)[0, 0]).all()
    assert (np.abs(dq - od.grads["dq"][0, 0]) <= od.grad_tol["dq"][0, 0]).all()
    # the allowance is for P below 2^-126 only: dropping the smallest P above it fails
    above = np.flatnonzero(~flushed & (p < 1e-30))
    assert above.size, p[~flushed].min()
    i = above[np.argmin(p[above])]
    out, dq = kernel(np.where(flushed | (np.arange(len(p)) == i), 0.0, p))
    assert (np.abs(out - od.out[0, 0]) > forward_tolerance(od)[0, 0])[i].any()
