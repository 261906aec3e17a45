"""FP8 cases whose kernel writes O as FP8 codes with a per-tensor output scale (SEMANTICS.md §10, cuDNN's API): the
precision model of that output, and the judge holding such an output to it (CPU; the cudnn-fp8 adapter itself runs on
the H200)."""

from __future__ import annotations

import numpy as np
import pytest

from attention_conformance.adapters.base import Capabilities
from attention_conformance.adapters.cudnn_fp8 import OUTPUT_TOP, output_scale
from attention_conformance.cases import catalog
from attention_conformance.cases.calldata import AdapterResults, CallResult, ForwardOutput
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.oracles.fp8 import round_fp8
from attention_conformance.verdict.bounds import compute_oracle, forward_tolerance
from attention_conformance.verdict.judge import judge
from attention_conformance.verdict.precision import precision_model

CAPS = Capabilities(dtypes=frozenset(), lse=True, fp8=frozenset({"per_tensor"}), fp8_formats=frozenset({"e4m3fn"}))


def _fp8_case():
    return next(c for c in catalog.cases("ci") if c.fp8 is not None and c.fp8.granularity == "per_tensor"
                and c.fp8.format == "e4m3fn" and not c.fp8.incoherent)


def test_an_fp8_output_has_its_format_roundoff_and_a_floor_over_its_scale():
    case = _fp8_case()
    m = precision_model(case, "float8_e4m3fn", 64.0)
    assert (m.u_out, m.floor, m.out_scale) == (2.0**-4, 2.0**-6 / 64.0, 64.0)
    assert m.u_p == 2.0**-4 and m.to_dict()["out_scale"] == 64.0
    assert precision_model(case).floor == 2.0**-126  # bf16 output (the FA3 API), no scale
    with pytest.raises(ValueError, match="FP8 output only"):
        precision_model(case, "bfloat16", 2.0)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="finite and > 0"):
            precision_model(case, "float8_e4m3fn", bad)


def test_output_scale_puts_the_largest_v_at_or_below_the_top_as_a_power_of_two():
    for v_max in (1e-3, 0.37, 1.0, 3.0, 448.0, 1e5):
        s = output_scale(v_max)
        assert np.log2(s) == int(np.log2(s)) and OUTPUT_TOP / 2 < v_max * s <= OUTPUT_TOP
    assert output_scale(0.0) == 1.0 and output_scale(float("nan")) == 1.0


def _judge(case, od, out, out_dtype, out_scale=1.0):
    fo = ForwardOutput(out=out, lse=od.lse, out_dtype=out_dtype, out_scale=out_scale)
    return judge(case, od, AdapterResults(forward=CallResult(output=fo)), device="cpu", capabilities=CAPS)


def test_the_judge_holds_an_fp8_output_to_its_own_model_and_no_looser():
    """The oracle's O rounded to e4m3 codes at the adapter's scale passes as an FP8 output; an error between the bf16
    output's bound and the FP8 output's passes as FP8 and fails as bf16 (the model follows the reported output), and
    one just past the FP8 output's bound fails."""
    case = _fp8_case()
    inputs = make_inputs(case)
    od = compute_oracle(case, inputs)
    s_o = output_scale(float(np.abs(inputs.v).max()))
    o8 = round_fp8(od.out * s_o, "e4m3fn") / s_o
    assert not np.array_equal(o8, od.out)
    ok = _judge(case, od, o8, "float8_e4m3fn", s_o)
    assert ok.outcome == "PASS", ok.message
    assert ok.tolerance_model["out_scale"] == s_o
    tol8 = forward_tolerance(od, precision_model(case, "float8_e4m3fn", s_o))
    tol16 = forward_tolerance(od, precision_model(case, "bfloat16"))
    i = np.unravel_index(np.argmax(tol8 - tol16), tol8.shape)
    assert tol8[i] > 1.1 * tol16[i]
    between, past = od.out.copy(), od.out.copy()
    between[i] += 0.5 * (tol8[i] + tol16[i])
    past[i] += 1.1 * tol8[i]
    assert _judge(case, od, between, "float8_e4m3fn", s_o).outcome in ("PASS", "QUALITY_WARNING")  # within bound
    assert _judge(case, od, between, "bfloat16").outcome == "FAIL"
    assert _judge(case, od, past, "float8_e4m3fn", s_o).outcome == "FAIL"


def test_an_fp8_output_of_a_non_fp8_case_is_an_out_dtype_failure():
    case = next(c for c in catalog.cases("ci") if c.fp8 is None and c.dtype == "bfloat16" and not c.backward)
    od = compute_oracle(case, make_inputs(case))
    caps = Capabilities(dtypes=frozenset({"bfloat16"}), lse=True)
    fo = ForwardOutput(out=od.out, lse=od.lse, out_dtype="float8_e4m3fn", out_scale=4.0)
    v = judge(case, od, AdapterResults(forward=CallResult(output=fo)), device="cpu", capabilities=caps)
    assert v.outcome == "FAIL" and "out dtype" in v.message, v.message
