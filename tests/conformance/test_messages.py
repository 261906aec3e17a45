"""Messages a person can act on: non-finite values first, enough digits, the smallest failing case first."""

from __future__ import annotations

import numpy as np

from attention_conformance.cases.case import Case
from attention_conformance.reporting.digest import quantity_line
from attention_conformance.reporting.report import build_report, render_markdown
from attention_conformance.running.engine import CaseResult
from attention_conformance.verdict import checks, numfmt


def test_numfmt_round_trips_and_never_prints_numpy_reprs():
    x = np.float64(0.1) + np.float64(2.0**-52)
    assert numfmt.value(x) != numfmt.value(np.float64(0.1)) and float(numfmt.value(x)) == x
    assert numfmt.value(np.float64("nan")) == "nan" and numfmt.value(np.float32("-inf")) == "-inf"
    assert numfmt.approx(None) == "n/a" and numfmt.approx(0.000123456) == "0.000123"
    assert numfmt.index((1, 0, np.int64(2))) == "[1, 0, 2]"


def test_all_nan_says_so_first_and_never_max_error_zero():
    ref = np.ones((2, 3, 4, 5))
    tol = np.full(ref.shape, 1e-3)
    stats, msg = checks.compare_values("out", np.full(ref.shape, np.nan), ref, tol)
    assert msg.startswith("out: all 120 compared values are NaN where the oracle is finite"), msg
    assert "np.float64" not in msg and "max error 0" not in msg
    line = quantity_line("out", stats.to_dict())
    assert line.startswith("out: all 120 compared values are non-finite") and "max error" not in line, line


def test_some_nan_plus_a_bound_violation_reports_both():
    ref = np.zeros((1, 1, 2, 4))
    got = ref.copy()
    got[0, 0, 0, 1] = np.inf
    got[0, 0, 1, 2] = 0.5
    _, msg = checks.compare_values("dq", got, ref, np.full(ref.shape, 1e-3))
    assert msg.startswith("dq: 1 of 8 compared values are +inf"), msg
    assert "first at dq[0, 0, 0, 1]: got inf" in msg and "the finite values: error 0.5 > tolerance 0.001" in msg, msg


def test_float64_values_print_with_enough_digits_to_differ():
    ref = np.full((1, 1, 1, 1), 1.0 / 3.0)
    got = ref + 1e-12
    _, msg = checks.compare_values("out", got, ref, np.full(ref.shape, 1e-14))
    g, o = msg.split("got ")[1].split(", oracle ")
    o = o.split(";")[0]
    assert g != o and float(g) == got.item() and float(o) == ref.item(), msg


def _result(case: Case, outcome: str, adapter: str = "a") -> CaseResult:
    return CaseResult(case_id=case.id, adapter=adapter, spec=adapter, outcome=outcome, family=case.family,
                      features=[f"dtype:{case.dtype}"], message=f"{outcome} here", case=case.to_dict(),
                      repro=f"python -m attention_conformance repro {case.id} --impl {adapter}")


def test_report_names_the_smallest_failing_case_first():
    big = Case(family="f", B=2, Hq=4, Hkv=4, Lq=256, Lk=256, d=64, dv=64, dtype="float16")
    small = Case(family="f", B=1, Hq=1, Hkv=1, Lq=3, Lk=5, d=8, dv=8, dtype="float16")
    results = [_result(big, "FAIL"), _result(small, "FAIL"), _result(big.replace(seed=9), "PASS")]
    rep = build_report(results, [], profile="ci", device="cpu", wall_seconds=1.0)
    rep["adapters"] = [{"name": "a", "available": True, "reason": None}]
    md = render_markdown(rep, results)
    table = md.split("## Smallest failing case per adapter and feature")[1]
    row = next(line for line in table.splitlines() if line.startswith("| a | family:f"))
    assert f"| 2 | `{small.id}`" in row, row
    details = md.split("## Failures")[1]
    assert details.index(small.id) < details.index(big.id)


def test_a_failure_on_a_fully_masked_row_says_so():
    """cuDNN on the H200 returns the unmasked softmax on rows with no visible key: the message must name the row
    as fully masked (SEMANTICS.md §8), not leave the reader with "oracle 0.0"."""
    from attention_conformance.adapters.base import Capabilities
    from attention_conformance.cases.calldata import AdapterResults, CallResult, ForwardOutput
    from attention_conformance.cases.inputs import make_inputs
    from attention_conformance.verdict.bounds import compute_oracle
    from attention_conformance.verdict.judge import judge

    case = Case(family="msg", B=1, Hq=1, Hkv=1, Lq=6, Lk=5, d=8, dv=8, dtype="float32", causal=True,
                alignment="bottom_right", seed=1)  # row 0 is fully masked (c(0) = -1)
    inputs = make_inputs(case)
    od = compute_oracle(case, inputs)
    out = od.out.copy()
    out[0, 0, 0] = inputs.v[0, 0].mean(axis=0) + 1.0
    res = AdapterResults(forward=CallResult(output=ForwardOutput(out=out, lse=od.lse, out_dtype="float32")))
    v = judge(case, od, res, device="cpu", capabilities=Capabilities(dtypes=frozenset({"float32"}), lse=True))
    assert v.outcome == "FAIL", v
    assert "out[0, 0, 0, :] is a row with no visible key" in v.message, v.message
    good = judge(case, od, AdapterResults(forward=CallResult(output=ForwardOutput(out=od.out, lse=od.lse,
                                                                                   out_dtype="float32"))),
                 device="cpu", capabilities=Capabilities(dtypes=frozenset({"float32"}), lse=True))
    assert good.outcome == "PASS", good.message


def test_stored_kernel_names_keep_the_template_and_drop_the_parameters():
    import doctest

    from attention_conformance.reporting import store as report_store

    assert doctest.testmod(report_store).failed == 0
    fa4 = "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensor"
    assert report_store.short_kernel_name(fa4) == fa4  # no parameter list: unchanged (under the length cap)
    long = "void k<" + "x" * 400 + ">(int)"
    assert len(report_store.short_kernel_name(long)) == report_store.KERNEL_NAME_CHARS
    assert report_store.short_kernel_name("pytorch_flash::flash_fwd_kernel<Flash_fwd_traits<128>>(Flash_fwd_params)") \
        == "pytorch_flash::flash_fwd_kernel<Flash_fwd_traits<128>>"
