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
