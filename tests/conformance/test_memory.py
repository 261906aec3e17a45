"""Peak memory as a conformance check (running/peak_memory.py, verdict/growth.py): the exponent fit, the FAIL rule, the
engine and report wiring. CPU only: the peaks here are synthetic; the CUDA measurement is in
test_memory_gpu.py."""

from __future__ import annotations

import json

import pytest
from engine_toys import EmulatedKernel

from attention_conformance.adapters.base import Capabilities
from attention_conformance.adapters.registry import LoadedAdapter
from attention_conformance.cases import catalog
from attention_conformance.reporting.report import build_report, write_report
from attention_conformance.running import memory_policy, peak_memory
from attention_conformance.running.engine import CaseResult, Runner
from attention_conformance.running.worker import call_adapter
from attention_conformance.verdict import growth

NS = (1024, 2048, 4096)
MEMORY_CASES = [c for c in catalog.cases("gpu") if c.family == growth.FAMILY]


def _result(adapter: str, case, peak: int, outcome: str = "PASS") -> CaseResult:
    rec = peak_memory.MemoryRecord(device="cuda:0", torch_peak_bytes=peak, torch_reserved_bytes=peak,
                              torch_baseline_bytes=0, io_bytes=peak_memory.io_bytes(case))
    rec.extra_bytes = peak - rec.io_bytes
    return CaseResult(case_id=case.id, adapter=adapter, spec=adapter, outcome=outcome, family=case.family,
                      features=[], case=case.to_dict(), memory={"forward": rec.to_dict()})


def _linear(n: int) -> int:
    return 6 * 4 * n * 64 * 2 + 2**20  # a few N x d tensors plus a constant workspace


def _quadratic(n: int) -> int:
    return _linear(n) + 4 * n * n * 2  # plus one fp16 N x N matrix per head


# -- the fit ----------------------------------------------------------------------------------------------

def test_exponent_of_synthetic_peaks():
    assert growth.growth_exponent(NS, [5 * n for n in NS]) == pytest.approx(1.0)
    assert growth.growth_exponent(NS, [7 * n * n for n in NS]) == pytest.approx(2.0)
    assert 0.8 < growth.growth_exponent(NS, [_linear(n) for n in NS]) <= 1.0
    assert 1.7 < growth.growth_exponent(NS, [_quadratic(n) for n in NS]) < 2.0
    assert growth.growth_exponent(NS, [1, 1, 1]) == pytest.approx(0.0)


def test_memory_doctests_run():
    import doctest

    for module in (growth, peak_memory):
        res = doctest.testmod(module)
        assert res.failed == 0 and res.attempted >= 2, module.__name__


def test_exponent_needs_two_sizes():
    assert growth.growth_exponent([1024], [10]) is None
    assert growth.growth_exponent([1024, 1024], [10, 20]) is None
    assert growth.growth_exponent([1024, 2048], [0, 20]) is None  # a zero peak is no data point


# -- the rule ---------------------------------------------------------------------------------------------

def test_memory_family_is_one_shape_at_n_2n_4n_on_the_gpu_profile_only():
    assert sorted(c.Lk for c in MEMORY_CASES) == [1024, 2048, 4096]
    assert all(c.Lq == c.Lk for c in MEMORY_CASES)
    assert len({(c.B, c.Hq, c.d, c.dtype) for c in MEMORY_CASES}) == 1
    assert not [c for c in catalog.cases("ci") + catalog.cases("full") if c.family == growth.FAMILY]
    assert all("gpu" in catalog.case_marks(c) for c in MEMORY_CASES)


def _rows(peak_fn, adapter="fake", claim="linear"):
    results = [_result(adapter, c, peak_fn(c.Lk)) for c in MEMORY_CASES]
    return results, growth.apply_growth(results, {adapter: claim})


def test_claimed_linear_that_grows_quadratically_fails_with_its_exponent():
    results, rows = _rows(_quadratic)
    (row,) = rows
    assert row.verdict == "FAIL" and row.ns == [1024, 2048, 4096]
    largest = max(results, key=lambda r: r.case["Lk"])
    assert largest.outcome == "FAIL" and largest.checks["memory_growth"] == "fail"
    assert f"N^{row.exponent:.2f}" in largest.message and "claims linear memory" in largest.message
    assert [r.outcome for r in results if r is not largest] == ["PASS", "PASS"]


def test_claimed_linear_that_grows_linearly_passes():
    results, (row,) = _rows(_linear)
    assert row.verdict == "linear" and row.exponent < 1.1
    assert all(r.outcome == "PASS" for r in results)
    assert max(results, key=lambda r: r.case["Lk"]).checks["memory_growth"] == "pass"


def test_math_backend_is_named_known_quadratic_not_failed():
    results, (row,) = _rows(_quadratic, adapter="torch-sdpa-math", claim=None)
    assert row.verdict == "known quadratic" and row.exponent > growth.LINEAR_MAX_EXPONENT
    assert "math backend" in row.message
    assert all(r.outcome == "PASS" for r in results)


def test_unclaimed_quadratic_is_reported_not_failed():
    results, (row,) = _rows(_quadratic, claim=None)
    assert row.verdict == "quadratic" and all(r.outcome == "PASS" for r in results)


def test_apply_growth_twice_changes_nothing_more():
    results, _ = _rows(_quadratic)
    before = [(r.outcome, r.message, list(r.notes)) for r in results]
    growth.apply_growth(results, {"fake": "linear"})
    assert [(r.outcome, r.message, list(r.notes)) for r in results] == before


def test_results_without_memory_records_are_left_out():
    results = [_result("fake", c, _quadratic(c.Lk)) for c in MEMORY_CASES]
    for r in results[:2]:
        r.memory = {}
    (row,) = growth.growth_rows(results, {"fake": "linear"})
    assert row.verdict == "insufficient data"
    assert growth.growth_failures([row]) == {}


def test_io_bytes_counts_inputs_and_outputs():
    c = MEMORY_CASES[0]
    nd = c.B * c.Hq * c.Lq * c.d
    assert peak_memory.io_bytes(c) == 4 * nd * 2 + 4 * c.B * c.Hq * c.Lq
    assert peak_memory.io_bytes(c, "backward") == peak_memory.io_bytes(c) + 4 * nd * 2
    with pytest.raises(ValueError, match="kind"):
        peak_memory.io_bytes(c, "sideways")


# -- wiring -----------------------------------------------------------------------------------------------

def test_capability_flag_defaults_to_no_claim():
    assert Capabilities(dtypes=frozenset({"float16"})).memory is None
    assert Capabilities(dtypes=frozenset({"float16"}), memory="linear").to_dict()["memory"] == "linear"


def test_builtin_claims():
    from attention_conformance.adapters.cuda import CudaFA1, CudaFA2, CudaFA3, CudaSplitKV
    from attention_conformance.adapters.flash_attn import FlashAttn2, FlashAttn4
    from attention_conformance.adapters.torch_sdpa import SdpaCudnn, SdpaEfficient, SdpaFlash, SdpaMath

    for cls in (CudaFA1, CudaFA2, CudaFA3, CudaSplitKV, FlashAttn2, FlashAttn4):
        assert cls.capabilities.memory == "linear", cls.name
    for cls in (SdpaFlash, SdpaEfficient, SdpaCudnn):
        assert cls.cuda_caps.memory == "linear", cls.name
    assert SdpaMath.cuda_caps.memory is None and SdpaMath.name in growth.KNOWN_QUADRATIC


def test_cpu_call_records_no_memory_and_memory_cases_are_not_supported_on_cpu():
    small = catalog._seeded(catalog._mk("unit", Lq=9, Lk=9, d=16, dtype="float32"))
    from attention_conformance.cases.inputs import make_inputs

    res = call_adapter(EmulatedKernel(), "forward", make_inputs(small), small, "cpu")
    assert res.error is None and res.memory is None
    toy = EmulatedKernel()
    runner = Runner([LoadedAdapter(toy.name, toy.name, toy)], "cpu", determinism="none")
    r = runner.run_case(runner.adapters[0], MEMORY_CASES[0])
    assert r.outcome == "NOT_SUPPORTED" and "CUDA only" in r.message and toy.calls == 0
    assert memory_policy.unsupported_reason(MEMORY_CASES[0], "cuda:0") is None
    assert memory_policy.unsupported_reason(small, "cpu") is None


def test_peak_memory_on_cpu_records_nothing():
    with peak_memory.PeakMemory("cpu") as pm:
        pass
    assert pm.record is None and pm.error is None


def test_report_has_peak_bytes_per_case_and_exponent_per_adapter(tmp_path):
    class Linear(EmulatedKernel):
        name = "toy-linear"
        capabilities = Capabilities(dtypes=frozenset({"float16"}), devices=frozenset({"cuda"}), memory="linear")

    adapters = [LoadedAdapter("toy-linear", "toy-linear", Linear()),
                LoadedAdapter("torch-sdpa-math", "torch-sdpa-math", EmulatedKernel())]
    results = [_result("toy-linear", c, _quadratic(c.Lk)) for c in MEMORY_CASES]
    results += [_result("torch-sdpa-math", c, _quadratic(c.Lk)) for c in MEMORY_CASES]
    growth.apply_growth(results, growth.claims_of(adapters))
    rep = build_report(results, adapters, profile="gpu", device="cuda", wall_seconds=1.0)
    jp, mp = write_report(tmp_path, rep, results)
    data = json.loads(jp.read_text())
    assert data["summary"]["by_outcome"]["FAIL"] == 1
    rows = {g["adapter"]: g for g in data["memory_growth"]}
    assert rows["toy-linear"]["verdict"] == "FAIL" and rows["torch-sdpa-math"]["verdict"] == "known quadratic"
    assert rows["toy-linear"]["peak_bytes"] == [_quadratic(n) for n in NS]
    assert all(r["memory"]["forward"]["torch_peak_bytes"] > 0 for r in data["results"])
    md = mp.read_text()
    assert "## Peak device memory" in md
    table = md.split("## Peak device memory", 1)[1]
    line = next(x for x in table.splitlines() if x.startswith("| toy-linear |"))
    assert f"{rows['toy-linear']['exponent']:.2f}" in line and "FAIL" in line
    page = (tmp_path / "report.html").read_text()
    assert "Peak device memory" in page
    row = page.split("Peak device memory", 1)[1].split("<tr><td>toy-linear</td>", 1)[1].split("</tr>", 1)[0]
    assert f"{rows['toy-linear']['exponent']:.2f}" in row and "FAIL" in row
