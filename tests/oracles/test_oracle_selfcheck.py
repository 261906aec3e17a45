"""`python -m attention_conformance.oracles.selfcheck`: every check passes on the real oracle; a failing check
gives exit 1."""

from __future__ import annotations

import json

from attention_conformance.oracles import selfcheck


def test_selfcheck_passes_and_writes_json(tmp_path, capsys):
    path = tmp_path / "selfcheck.json"
    assert selfcheck.main(["--json", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("PASS")
    report = json.loads(path.read_text())
    assert report["passed"] and set(report["checks"]) == set(selfcheck.CHECKS)
    assert all(c["error"] <= c["bound"] for c in report["checks"].values())


def test_selfcheck_reports_a_failing_check(monkeypatch, capsys):
    monkeypatch.setattr(selfcheck, "CHECKS", {"planted": (lambda: 1.0, 1e-12, "a check that fails")})
    assert selfcheck.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL  planted: error 1.000e+00 <= 1e-12" in out and out.strip().endswith("FAIL")
