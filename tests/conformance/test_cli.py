"""The CLI end to end: list, run (exit codes, reports, --workers), repro of a broken function."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BROKEN = "attention_conformance.examples.broken_sdpa:attention"


def _cli(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "attention_conformance", *args], capture_output=True, text=True,
                          cwd=ROOT,
                          env=env, timeout=timeout)


def test_list_names_every_builtin(cli):
    from attention_conformance.adapters import BUILTIN

    p = cli("list")
    assert p.returncode == 0, p.stderr
    for name in BUILTIN:
        assert name in p.stdout


def test_usage_errors_exit_2(tmp_path, cli):
    """In process (test_cli_usage.py runs two through the shell)."""
    p = cli("run", "-k", "no-such-case-xyz", "--impl", "reference-fa2", "--report-dir", str(tmp_path))
    assert p.returncode == 2
    assert cli("repro", "no-such-case").returncode == 2
    assert cli("run", "--impl", "no_such_module_xyz:fn", "--report-dir", str(tmp_path)).returncode == 2
    # a built-in named explicitly but unavailable here must not pass silently with every case NOT_SUPPORTED
    p = cli("run", "--impl", "torch-sdpa-efficient", "-k", "tile_edges-b1h2x2-q1k129", "--device", "cpu",
            "--report-dir", str(tmp_path))
    assert p.returncode == 2 and "torch-sdpa-efficient is unavailable" in p.stderr, p.stderr
    assert cli("frobnicate").returncode == 2


def test_broken_function_fails_with_repro_that_reproduces(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    p = _cli("run", "--impl", BROKEN, "-k", "tile_edges and q1k129 or tile_edges-b1h2x2-q64k64", "--report-dir",
             str(tmp_path), "--quiet")
    assert p.returncode == 1, p.stdout + p.stderr
    rep = json.loads((tmp_path / "report.json").read_text())
    failed = [r for r in rep["results"] if r["outcome"] == "FAIL"]
    passed = [r for r in rep["results"] if r["outcome"] == "PASS"]
    assert failed and passed
    assert "repro" in (tmp_path / "report.md").read_text()
    cmd = failed[0]["repro"].split()
    assert cmd[:4] == ["python", "-m", "attention_conformance", "repro"] and cmd[-1] == "--run"
    rerun = _cli(*cmd[3:])  # the report's command re-runs the case: its verdict, exit 1 while it fails
    assert rerun.returncode == 1 and f"FAIL {failed[0]['case_id']}" in rerun.stdout, rerun.stdout + rerun.stderr
    assert _cli("repro", passed[0]["case_id"], "--impl", BROKEN, "--run").returncode == 0
    # without --run: the snippet, to edit and run as a script, is on stdout alone and is the very text --run ran
    # above in a child interpreter (cli.run_python), so its verdicts stand for the script's (taken in this process)
    import attention_conformance.cli as cli_module

    ran: list[str] = []
    monkeypatch.setattr(cli_module, "run_python", lambda text, name: ran.append(text) or 0)
    for case_id in (failed[0]["case_id"], passed[0]["case_id"]):
        assert cli_module.main(["repro", case_id, "--impl", BROKEN]) == 0
        printed = capsys.readouterr().out
        assert cli_module.main(["repro", case_id, "--impl", BROKEN, "--run"]) == 0
        assert printed == ran[-1] and case_id in printed
        compile(printed, "repro.py", "exec")


def test_workers_give_the_same_outcomes(tmp_path, cli):
    pytest.importorskip("torch")
    # the broken function fails on q1k129 (its tail-tile bug), so the comparison covers FAIL as well as PASS
    args = ["--impl", "reference-fa2", BROKEN, "-k", "gqa or masked_rows or tile_edges-b1h2x2-q1k129", "--quiet"]
    one = cli("run", *args, "--report-dir", str(tmp_path / "w1"))  # in process; the two workers' run in a child
    two = _cli("run", *args, "--report-dir", str(tmp_path / "w2"), "--workers", "2")
    assert one.returncode == two.returncode == 1, one.stderr + two.stderr
    a, b = (json.loads((tmp_path / w / "report.json").read_text())["results"] for w in ("w1", "w2"))
    key = lambda rs: [(r["case_id"], r["adapter"], r["outcome"]) for r in rs]
    assert key(a) == key(b) and len(a) > 5
    assert {"PASS", "FAIL"} <= {r["outcome"] for r in a}, key(a)


def test_report_records_the_command_of_an_in_process_call(tmp_path):
    """`main(argv)` called from Python (not the shell) records *its* argv as the command in report.json."""
    from attention_conformance.cli import main

    argv = ["run", "--impl", "reference-fa2", "-k", "tile_edges-b1h2x2-q1k129", "--report-dir", str(tmp_path),
            "--quiet"]
    assert main(argv) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["command"] == ["python", "-m", "attention_conformance", *argv], rep["command"]


@pytest.mark.parametrize("toy,needle", [("ZeroLseOnEmptyRows", "lse: fully masked row"),
                                        ("MutatesQ", "inputs changed by the call")])
def test_repro_reproduces_failures_beyond_out_values(tmp_path, toy, needle, cli, toy_path):
    """A case that FAILs on LSE alone, or on a modified input alone, must also FAIL in its repro snippet (the run and
    the snippet in process, the snippet's script in a child, as a user runs it)."""
    spec = f"engine_toys:{toy}"
    case_id = next(c for c in cli("cases", "-k", "masked_rows and mask-full_rows and f32").stdout.split())
    run = cli("run", "--impl", spec, "-k", case_id, "--report-dir", str(tmp_path), "--quiet")
    assert run.returncode == 1, run.stdout + run.stderr
    snippet = cli("repro", case_id, "--impl", spec)
    script = tmp_path / "repro.py"
    script.write_text(snippet.stdout)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ["PYTHONPATH"]]))
    rep = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert rep.returncode == 1 and needle in rep.stdout, rep.stdout + rep.stderr


def test_standalone_run_exits_as_the_file_does():
    """``repro --standalone --run`` runs the maintainers' file at once: exit 1 on the shipped CPU flash finding (the
    NaN of `torch-cpu-flash-causal-nonpositive-scale`), 0 through the math backend on the same case."""
    pytest.importorskip("torch")
    case = "scale-b1h2x2-q45k45-d64-f16-causal_br-641e56"
    flash = _cli("repro", case, "--impl", "torch-sdpa-flash", "--standalone", "--run")
    assert flash.returncode == 1 and "DEFECT" in flash.stdout, flash.stdout + flash.stderr
    math = _cli("repro", case, "--impl", "torch-sdpa-math", "--standalone", "--run")
    assert math.returncode == 0 and "no defect" in math.stdout, math.stdout + math.stderr


def test_failed_in_reruns_only_the_failures_of_a_report(tmp_path, cli):
    """``run --failed-in REPORT`` selects the cases that failed there for an adapter of this run (the loop after a
    fix: re-run the failures, then merge); none for another adapter is a usage error."""
    pytest.importorskip("torch")
    first = tmp_path / "first"
    p = cli("run", "--impl", BROKEN, "-k", "tile_edges", "--report-dir", str(first), "--quiet")
    assert p.returncode == 1, p.stderr
    failed = {r["case_id"] for r in json.loads((first / "report.json").read_text())["results"]
              if r["outcome"] == "FAIL"}
    again = tmp_path / "again"
    p = cli("run", "--impl", BROKEN, "--failed-in", str(first / "report.json"), "--report-dir", str(again), "--quiet")
    rerun = {r["case_id"] for r in json.loads((again / "report.json").read_text())["results"]}
    assert p.returncode == 1 and rerun == failed, (p.stderr, rerun ^ failed)
    p = cli("run", "--impl", "torch-sdpa-math", "--failed-in", str(first / "report.json"), "--report-dir",
            str(tmp_path / "none"))
    assert p.returncode == 2 and "no case of this selection failed there for torch-sdpa-math" in p.stderr, p.stderr
    p = cli("run", "--impl", BROKEN, "--failed-in", str(tmp_path / "missing.json"), "--report-dir", str(tmp_path))
    assert p.returncode == 2 and "--failed-in" in p.stderr, p.stderr
