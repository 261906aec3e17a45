"""tools/compare_front_ends.py: the plugin's recorded outcomes (junit XML) against the CLI's report.json."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "tools" / "compare_front_ends.py"
_spec = importlib.util.spec_from_file_location("compare_front_ends", _PATH)
cfe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cfe)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="test_conformance" name="test_case[c1::a]"><properties>
<property name="conformance_outcome" value="PASS"/></properties></testcase>
<testcase classname="test_conformance" name="test_case[c2::a]"><properties>
<property name="conformance_outcome" value="KNOWN"/></properties><skipped type="pytest.xfail" message="x"/></testcase>
<testcase classname="tests.x" name="test_other"/>
</testsuite></testsuites>"""


def _report(tmp_path: Path, outcomes: dict, compress: bool) -> Path:
    data = json.dumps({"results": [{"case_id": c, "spec": s, "outcome": o} for (c, s), o in outcomes.items()]})
    p = tmp_path / ("report.json.gz" if compress else "report.json")
    p.write_bytes(gzip.compress(data.encode()) if compress else data.encode())
    return p


def test_agreeing_runs_exit_0(tmp_path, capsys):
    (tmp_path / "j.xml").write_text(JUNIT)
    rep = _report(tmp_path, {("c1", "a"): "PASS", ("c2", "a"): "KNOWN", ("c3", "a"): "FAIL"}, compress=True)
    assert cfe.main([str(tmp_path / "j.xml"), str(rep)]) == 0
    assert "0 of 2 (case, adapter) pairs differ" in capsys.readouterr().out


def test_a_different_outcome_is_named_and_exits_1(tmp_path, capsys):
    (tmp_path / "j.xml.gz").write_bytes(gzip.compress(JUNIT.encode()))  # as runner_h200.sh session-collect keeps it
    rep = _report(tmp_path, {("c1", "a"): "PASS", ("c2", "a"): "FAIL"}, compress=False)
    assert cfe.main([str(tmp_path / "j.xml.gz"), str(rep)]) == 1
    assert "DIFFER c2 on a: CLI FAIL, plugin KNOWN" in capsys.readouterr().out


def test_the_h200_comparison_end_to_end_on_cpu_adapters(tmp_path, capsys):
    """The comparison the H200 session makes, on CPU adapters: the plugin under pytest-xdist (as `tox -e gpu` runs
    it) writing junit XML, the CLI writing its report, this tool finding every pair the same (PASS, FAIL, FINDING,
    KNOWN and NOT_SUPPORTED among them: the broken example's tail-tile FAILs, torch's NaN-padding FINDINGs and the
    CPU flash kernel's non-positive-scale KNOWNs under the shipped expectations, FP8 cases declined)."""
    import os
    import subprocess
    import sys

    import pytest

    pytest.importorskip("xdist")
    pytest.importorskip("torch")
    impls = ["torch-sdpa-math", "torch-sdpa-flash", "attention_conformance.examples.broken_sdpa:attention"]
    selection = "tile_edges or nan_padding or (scale and q45k45) or (fp8 and q64k96)"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    junit = tmp_path / "junit.xml"
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--pyargs",
                        "attention_conformance", "--impl", *impls, "--profile", "ci", "--cases", selection,
                        f"--junitxml={junit}"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and junit.is_file(), (p.stdout + p.stderr)[-2000:]  # the broken function FAILs
    q = subprocess.run([sys.executable, "-m", "attention_conformance", "run", "--impl", *impls, "--profile", "ci",
                        "-k", selection, "--report-dir", str(tmp_path / "cli"), "--quiet"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert q.returncode == 1, (q.stdout + q.stderr)[-2000:]
    outcomes = {r["outcome"] for r in json.loads((tmp_path / "cli" / "report.json").read_text())["results"]}
    assert {"PASS", "FAIL", "FINDING", "KNOWN", "NOT_SUPPORTED"} <= outcomes, outcomes
    rc = cfe.main([str(junit), str(tmp_path / "cli" / "report.json")])
    said = capsys.readouterr().out
    assert rc == 0 and "\n0 of " in "\n" + said.split("CLI:", 1)[1], said[-2000:]


def test_the_stream_plugins_outcomes_file_serves_when_no_junit_xml_was_written(tmp_path, capsys):
    """tox -e gpu cut off at its limit wrote no junit XML; the outcomes streamed as the tests ended stand in for it."""
    lines = ["PASS\tconformance/test_conformance.py::test_case[c1::a]",
             "KNOWN\tconformance/test_conformance.py::test_case[c2::a@x]"]
    (tmp_path / "failures.txt.outcomes").write_text("\n".join(lines) + "\n")
    rep = _report(tmp_path, {("c1", "a"): "PASS", ("c2", "a@x"): "FAIL"}, compress=True)
    assert cfe.plugin_outcomes(tmp_path / "failures.txt.outcomes") == {("c1", "a"): "PASS", ("c2", "a@x"): "KNOWN"}
    assert cfe.main([str(tmp_path / "failures.txt.outcomes"), str(rep)]) == 1
    assert "DIFFER c2 on a@x: CLI FAIL, plugin KNOWN" in capsys.readouterr().out
