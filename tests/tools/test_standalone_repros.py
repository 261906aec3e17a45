"""tools/standalone_repros.py: the smallest failures of a run, each as the file `repro --standalone` writes."""

from __future__ import annotations

import contextlib
import io
import types
from pathlib import Path

import pytest
import standalone_repros as sr  # tools/ (conftest.py puts it on the path)

pytest.importorskip("torch")
_ROOT = Path(__file__).resolve().parents[2]


def _result(spec, outcome, family, lq, case_id):
    return {"spec": spec, "adapter": spec.split("@")[0], "outcome": outcome, "case_id": case_id,
            "case": {"family": family, "B": 1, "Hq": 2, "Lq": lq, "Lk": lq}}


def test_pick_takes_the_smallest_failures_one_family_first():
    results = [_result("a", "FAIL", "window", 64, "w64"), _result("a", "FAIL", "window", 8, "w8"),
               _result("a", "FAIL", "scale", 32, "s32"), _result("a", "PASS", "scale", 1, "p1"),
               _result("a", "FINDING", "nan", 1, "n1"), _result("b@x", "KNOWN", "scale", 4, "k4")]
    picked = [(r["spec"], r["case_id"]) for r in sr.pick(results, 2)]
    assert picked == [("a", "w8"), ("a", "s32"), ("b@x", "k4")]


def test_files_for_the_committed_cpu_report(tmp_path):
    """Over the current CPU report: every listed file is written, imports nothing from this package, and the one of a
    KNOWN failure (torch 2.13's CPU flash kernel on a non-positive scale) exits 1 on this machine."""
    out = tmp_path / "repros"
    assert sr.main([str(_ROOT / "reports" / "cpu"), "--out", str(out), "--device", "cpu", "--per-adapter", "1"]) == 0
    index = (out / "index.md").read_text()
    files = sorted(out.glob("*.py"))
    assert files and all(f"`{f.name}`" in index for f in files)
    known = [f for f in files if f.name.startswith("torch-sdpa-flash--scale")]
    assert known, index
    text = known[0].read_text()
    assert "import attention_conformance" not in text and "from attention_conformance" not in text
    mod = types.ModuleType("repro")
    exec(compile(text, str(known[0]), "exec"), mod.__dict__)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert mod.main() == 1
