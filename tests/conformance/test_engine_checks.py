"""Checks beyond values, isolation, catalog and inputs, reports (issue 3, items 3, 5, 6, 7, 8)."""

from __future__ import annotations

import html
import json
import math
import os

import numpy as np
import pytest
from engine_toys import EmulatedKernel

from attention_conformance import oracles
from attention_conformance.adapters.registry import LoadedAdapter, load
from attention_conformance.cases import catalog
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.reporting.report import build_report, exit_code, write_report
from attention_conformance.running.engine import Runner

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = catalog._seeded(catalog._mk("unit", Lq=17, Lk=33, d=16, dtype="float32"))
EMPTY_ROWS = catalog._seeded(catalog._mk("unit", Lq=12, Lk=12, d=16, dtype="float32", mask="full_rows"))


def _run(adapter, case, determinism="none", **kw):
    runner = Runner([LoadedAdapter(adapter.name, adapter.name, adapter)], "cpu", determinism=determinism, **kw)
    try:
        return runner.run_case(runner.adapters[0], case)
    finally:
        runner.close()


# -- catalog and inputs ---------------------------------------------------------------------------

def test_catalog_ids_unique_and_sizes():
    sizes = {p: len(catalog.cases(p)) for p in catalog.PROFILES}
    for p in catalog.PROFILES:
        ids = [c.id for c in catalog.cases(p)]
        assert len(ids) == len(set(ids)), p
    assert 150 <= sizes["ci"] <= 300 and sizes["ci"] < sizes["full"] and sizes["ci"] < sizes["gpu"]
    gpu = catalog.cases("gpu")
    assert max(c.Lk for c in gpu) == 16384 and max(c.d for c in gpu if c.family != "mla") == 256
    assert {(c.d, c.dv) for c in gpu if c.family == "mla"} >= {(576, 512), (192, 128)}  # MLA decoding shapes


def test_select_expression():
    cs = catalog.cases("ci")
    fp8 = catalog.select(cs, "fp8")
    assert fp8 and all("fp8" in c.id for c in fp8)
    both = catalog.select(cs, "fp8 and not e5m2")
    assert both and all("e5m2" not in c.id for c in both)
    assert catalog.case_by_id(cs[5].id) == cs[5]


def test_inputs_deterministic_and_representable():
    for case in catalog.cases("ci")[::7]:
        a, b = make_inputs(case), make_inputs(case)
        for name, arr in a.arrays().items():
            assert np.array_equal(arr, b.arrays()[name], equal_nan=True), (case.id, name)
        if case.fp8 is None:
            from attention_conformance.cases.inputs import round_to_dtype

            for name in ("q", "k", "v"):
                arr = getattr(a, name)
                assert np.array_equal(round_to_dtype(arr, case.dtype), arr, equal_nan=True), (case.id, name)


@pytest.mark.parametrize("name,expected", [("online_softmax", 4.966), ("exercise1", 4.0),
                                           ("one_query_two_keys", 5.0), ("split_k", 1.612955)])
def test_worked_examples(name, expected):
    case = next(c for c in catalog.cases("ci") if c.distribution == f"worked:{name}" and c.dtype == "float64")
    inp = make_inputs(case)
    out, _ = oracles.attention(inp.q, inp.k, inp.v, **case.oracle_kwargs)
    assert out[0, 0, 0, 0] == pytest.approx(expected, abs=5e-4)


def test_full_rows_and_varlen_recipes_make_empty_rows():
    inp = make_inputs(EMPTY_ROWS)
    _, lse = oracles.attention(inp.q, inp.k, inp.v, mask=inp.mask, **EMPTY_ROWS.oracle_kwargs)
    assert np.isneginf(lse[0, 0, [0, 6, 11]]).all() and np.isfinite(lse[0, 0, 1])


# -- verdicts -----------------------------------------------------------------------------------------

def test_correct_toy_passes_and_records_stats():
    res = _run(EmulatedKernel(), SMALL)
    assert res.outcome == "PASS", res.message
    st = res.stats["out"]
    assert 0 < st["max_ratio"] <= 1 and st["tol_at_max_ratio"] > 0 and len(st["max_ratio_index"]) == 4
    assert res.checks["inputs_unchanged"] == "pass" and res.checks["lse"] == "pass"
    assert "repro" in res.repro


@pytest.mark.parametrize("behaviour,needle", [
    ("mutate", "inputs changed"), ("nan", "where the oracle is finite"), ("wrong_shape", "shape"),
    ("raise", "raised"),
])
def test_broken_behaviours_fail(behaviour, needle):
    res = _run(EmulatedKernel(behaviour=behaviour), SMALL)
    assert res.outcome == "FAIL" and needle in res.message, res.message


def test_nondeterminism_detected_when_declared():
    res = _run(EmulatedKernel(behaviour="nondeterministic"), SMALL, determinism="all")
    assert res.outcome == "FAIL" and "determinism" in res.message


def test_lse_convention_reported_by_name():
    res = _run(EmulatedKernel(lse_empty=math.inf), EMPTY_ROWS)
    assert res.outcome == "PASS", res.message
    assert "lse_convention:+inf" in res.findings
    res = _run(EmulatedKernel(lse_empty=0.0), EMPTY_ROWS)
    assert res.outcome == "FAIL" and "-inf" in res.message


def test_mapped_finite_lse_convention_keeps_its_name():
    """An adapter that maps its vendor's finite empty-row LSE (torch CPU flash: 0) to -inf is reported by
    that convention's name, not as the contract's -inf (issue 3 item 5: conventions reported by name)."""
    from attention_conformance.verdict import checks

    ref = np.array([[[-np.inf, 0.5, -np.inf]]])
    rows = np.ones(ref.shape, dtype=bool)
    tol = np.full(ref.shape, 1e-6)
    _, msg, findings = checks.compare_lse(ref.copy(), ref, tol, rows, declared="0")
    assert msg is None and findings == ["lse_convention:0"], (msg, findings)
    _, msg, findings = checks.compare_lse(ref.copy(), ref, tol, rows, declared="-inf")
    assert msg is None and findings == ["lse_convention:-inf"], (msg, findings)
    got = np.where(np.isneginf(ref), 0.0, ref)  # unmapped 0 on empty rows is still a FAIL
    _, msg, _ = checks.compare_lse(got, ref, tol, rows, declared="0")
    assert msg is not None and "-inf" in msg, msg


def test_undeclared_plus_inf_lse_convention_fails():
    """+inf on empty rows is a named convention only when declared; otherwise the sign is wrong."""
    res = _run(EmulatedKernel(lse_empty=math.inf, declare_plus_inf=False), EMPTY_ROWS)
    assert res.outcome == "FAIL" and "declares" in res.message, res.message


@pytest.mark.parametrize("unwritten", [0, 3])
def test_out_buffer_left_poisoned_fails(unwritten):
    """An adapter that writes into a NaN-poisoned out= buffer reports how many elements it left unwritten;
    any is a FAIL, even when the values it returns are right (issue 3 item 5)."""
    import dataclasses

    class PoisonedOut(EmulatedKernel):
        name = "toy-out-buffer"
        capabilities = dataclasses.replace(EmulatedKernel.capabilities, accepts_out=True)

        def forward(self, inputs, case, device):
            return dataclasses.replace(super().forward(inputs, case, device), unwritten=unwritten)

    res = _run(PoisonedOut(), SMALL)
    if unwritten == 0:
        assert res.outcome == "PASS" and res.checks["out_fully_written"] == "pass", res.message
    else:
        assert res.outcome == "FAIL" and res.checks["out_fully_written"] == "fail", res.message
        assert "3 element(s) still hold the NaN poison" in res.message, res.message


def test_backward_error_fails():
    case = SMALL.replace(backward=True)
    assert _run(EmulatedKernel(), case).outcome == "PASS"
    res = _run(EmulatedKernel(behaviour="bad_dq"), case)
    assert res.outcome == "FAIL" and res.message.startswith("dq:"), res.message


def test_not_supported_has_reason():
    res = _run(EmulatedKernel(), SMALL.replace(fp8=catalog.FP8Spec(), dtype="float8_e4m3fn"))
    assert res.outcome == "NOT_SUPPORTED" and "FP8" in res.message


def test_oracle_computed_once_per_case():
    a, b = EmulatedKernel(), EmulatedKernel()
    runner = Runner([LoadedAdapter("a", "a", a), LoadedAdapter("b", "b", b)], "cpu", determinism="none")
    results = runner.run([SMALL, EMPTY_ROWS])
    assert runner.cache.computed == 2 and len(results) == 4


# -- isolation --------------------------------------------------------------------------------------

@pytest.fixture
def toys_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))


def test_crash_and_hang_are_isolated(toys_on_path):
    crash, hang, ok = load("engine_toys:Aborting"), load("engine_toys:Hanging"), load("engine_toys:IsolatedCorrect")
    assert crash.available and crash.isolate, crash.reason
    runner = Runner([crash, hang, ok], "cpu", timeout=4, determinism="none")
    try:
        results = runner.run([SMALL])
        results += [runner.run_case(crash, EMPTY_ROWS), runner.run_case(ok, EMPTY_ROWS)]
    finally:
        runner.close()
    outcomes = [(r.adapter, r.outcome) for r in results]
    assert outcomes == [("toy-abort", "CRASH"), ("toy-hang", "TIMEOUT"), ("toy-isolated", "PASS"),
                        ("toy-abort", "CRASH"), ("toy-isolated", "PASS")], outcomes
    assert "exit code" in results[0].message
    assert exit_code(results) == 1


# -- reports ------------------------------------------------------------------------------------------

def test_report_files(tmp_path):
    la = LoadedAdapter("toy", "toy", EmulatedKernel())
    results = Runner([la], "cpu").run([SMALL, EMPTY_ROWS])
    results += Runner([LoadedAdapter("bad", "bad", EmulatedKernel(behaviour="nan"))], "cpu").run([SMALL])
    rep = build_report(results, [la], profile="ci", device="cpu", wall_seconds=1.0)
    jp, mp = write_report(tmp_path, rep, results)
    data = json.loads(jp.read_text())
    assert data["schema_version"] == 1 and data["summary"]["exit_code"] == 1
    assert {"python", "cpu", "torch", "cuda", "cudnn", "gpus", "driver"} <= set(data["environment"])
    r0 = data["results"][0]
    assert {"outcome", "stats", "seed", "repro", "tolerance_model"} <= set(r0)
    assert data["cases"][r0["case_id"]] == results[0].case  # each case stored once (conformance/reporting/store.py)
    from attention_conformance.reporting.store import load_report

    assert [r["case"] for r in load_report(jp)["results"]] == [r.case for r in results]
    # empty fields are not stored, and come back on loading: the loaded results are the built ones
    from attention_conformance.reporting.store import EMPTY_FIELDS

    assert any(set(EMPTY_FIELDS) - set(r) for r in data["results"]), "every stored result kept its empty fields"
    built = json.loads(json.dumps(rep["results"], default=str))
    stored_as = {"kernels", "seconds", "oracle_seconds"}  # shortened names, timings to 0.1 ms
    assert [{k: v for k, v in r.items() if k not in stored_as} for r in load_report(jp)["results"]] == [
        {k: v for k, v in r.items() if k not in stored_as} for r in built]
    md = mp.read_text()
    assert "Adapter x feature matrix" in md and "FAIL" in md and "python -m attention_conformance repro" in md
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    fail = next(r for r in data["results"] if r["outcome"] == "FAIL")
    assert html.escape(fail["repro"], quote=True) in page and "<b>FAIL</b>" in page
    assert "<script" not in page  # self-contained and inert


def test_report_html_escapes_adapter_text():
    from attention_conformance.reporting.page import render_html

    rep = {"profile": "ci", "device": "cpu", "summary": {"cases": 1, "by_adapter": {}}, "environment": {},
           "adapters": [{"name": "<img src=x>", "available": False, "reason": "a & b"}],
           "results": [{"case_id": "c<1>", "adapter": "<img src=x>", "outcome": "FAIL", "family": "f",
                        "features": [], "message": "<script>alert(1)</script>", "repro": "x"}]}
    page = render_html(rep)
    assert "<img src=x>" not in page and "<script>" not in page and "&lt;script&gt;" in page


def test_progress_and_checkpoints():
    lines, snaps = [], []
    runner = Runner([LoadedAdapter("toy", "toy", EmulatedKernel())], "cpu", determinism="none")
    cases = [SMALL, EMPTY_ROWS, SMALL.replace(seed=7)]
    results = runner.run(cases, progress=lines.append, every=1, checkpoint=lambda rs: snaps.append(len(rs)))
    assert len(results) == 3 and snaps == [1, 2]
    assert lines[-1].startswith("[3/3 cases] PASS=3") and "ETA" in lines[0]


def test_a_harness_side_input_changed_in_place_is_located():
    """An adapter object that writes into the engine's own input arrays (``inputs.q[..., 0] += 1``): the message
    says which values changed, in the case's layout (`checks.array_change`)."""
    res = _run(EmulatedKernel(behaviour="mutate"), SMALL)
    B, H, L = SMALL.B, SMALL.Hq, SMALL.Lq
    assert (f"q: {B * H * L} of {B * H * L * SMALL.d} values (shape [{B}, {H}, {L}, {SMALL.d}]: axis 0 all {B}, axis 1 "
            f"all {H}, axis 2 all {L}, axis 3 0 of {SMALL.d}), first q[0, 0, 0, 0]: ") in res.message, res.message
