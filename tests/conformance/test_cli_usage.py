"""Every usage error of ``python -m attention_conformance``: one ``error:`` line on stderr, no traceback, exit code 2.

Run in process through `conformance.cli.main` (argparse errors raise SystemExit(2)), plus two through a real
subprocess so the shell-visible exit code and stderr are checked end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASE = "tile_edges-b1h2x2-q1k129"


def _case_id() -> str:
    from attention_conformance.cases import catalog

    return catalog.select(catalog.cases("ci"), CASE)[0].id


USAGE = {
    "k_evaluated_text": (["run", "-k", "__import__('os')"], "bad -k expression"),
    "k_unbalanced_run": (["run", "-k", "(causal and"], "bad -k expression '(causal and'"),
    "k_unbalanced_cases": (["cases", "-k", "(causal and"], "bad -k expression '(causal and'"),
    "k_selects_nothing_run": (["run", "-k", "no-such-case-xyz", "--impl", "reference-fa2"], "selects no case"),
    "k_selects_nothing_cases": (["cases", "-k", "no-such-case-xyz"], "selects no case"),
    "workers_0": (["run", "--workers", "0"], "argument --workers: must be >= 1, got 0"),
    "workers_negative": (["run", "--workers", "-3"], "argument --workers: must be >= 1"),
    "workers_not_int": (["run", "--workers", "two"], "argument --workers: expected an integer"),
    "timeout_0": (["run", "--timeout", "0"], "argument --timeout: must be a finite number > 0"),
    "timeout_negative": (["run", "--timeout", "-1"], "argument --timeout: must be a finite number > 0"),
    "timeout_nan": (["run", "--timeout", "nan"], "argument --timeout"),
    "progress_every_0": (["run", "--progress-every", "0"], "argument --progress-every"),
    "impl_typo_run": (["run", "--impl", "torch-sdpa-mth", "-k", CASE], "did you mean torch-sdpa-math?"),
    "impl_typo_list": (["list", "--impl", "reference-fa22"], "did you mean reference-fa2?"),
    "impl_unknown_entry_point": (["run", "--impl", "torch-sdpa-math@bogus", "-k", CASE],
                                 "unknown entry point 'bogus' of torch-sdpa-math"),
    "impl_variant_typo": (["run", "--impl", "torch-sdpa-mth@is_causal", "-k", CASE], "did you mean torch-sdpa-math?"),
    "impl_typo_in_a_comma_list": (["run", "--impl", "reference-fa2,reference-fa9", "-k", CASE], "reference-fa9"),
    "impl_unimportable": (["run", "--impl", "no_such_module_xyz:fn", "-k", CASE], "--impl no_such_module_xyz:fn"),
    "impl_unavailable": (["run", "--impl", "torch-sdpa-efficient", "-k", CASE, "--device", "cpu"],
                         "torch-sdpa-efficient is unavailable on cpu"),
    "report_dir_is_file": (["run", "--impl", "reference-fa2", "-k", CASE, "--report-dir", __file__],
                           "is not a directory"),
    "profile_choice": (["run", "--profile", "huge"], "invalid choice: 'huge'"),
    "unknown_command": (["frobnicate"], "invalid choice: 'frobnicate'"),
    "no_command": ([], "required: command"),
    "repro_unknown_case": (["repro", "no-such-case"], "no case with id 'no-such-case'"),
    "repro_no_case": (["repro"], "required: CASE"),
    "repro_impl_typo": (["repro", "@CASE", "--impl", "torch-sdpa-mathh"], "did you mean torch-sdpa-math?"),
    "repro_impl_unimportable": (["repro", "@CASE", "--impl", "no_such_module_xyz:fn"], "no_such_module_xyz"),
    "repro_impl_unavailable": (["repro", "@CASE", "--impl", "cuda-fa2"], "cuda-fa2 is unavailable on cpu"),
    "repro_impl_declines": (["repro", "@CASE", "--impl", "reference-fa3-fp8"], "declines case"),
    "repro_impl_all": (["repro", "@CASE", "--impl", "all"], "--impl all"),
    "mutants_k": (["mutants", "-k", "(fa2"], "bad -k expression"),
    "mutants_k_nothing": (["mutants", "-k", "no_such_mutant"], "no mutant matches"),
    "mutants_order": (["mutants", "--order", "pinned,bogus"], "unknown step"),
    "mutants_time_limit": (["mutants", "--time-limit", "0"], "argument --time-limit"),
}


@pytest.mark.parametrize("name", sorted(USAGE))
def test_usage_error_is_one_line_exit_2(name, cli, tmp_path, monkeypatch):
    argv, needle = USAGE[name]
    argv = [_case_id() if a == "@CASE" else a for a in argv]
    if argv and argv[0] == "run" and "--report-dir" not in argv:
        argv += ["--report-dir", str(tmp_path / "rep")]
    code, out, err = cli(*argv)
    lines = err.strip().splitlines()
    assert code == 2, (name, code, err)
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    assert needle in lines[0], lines[0]
    assert out == "", out


def test_unknown_impl_without_close_match_lists_the_builtins(cli):
    code, _, err = cli("list", "--impl", "qqqqqq")
    assert code == 2 and "did you mean" not in err
    from attention_conformance.adapters import BUILTIN

    assert all(name in err for name in BUILTIN), err


def test_good_arguments_still_work(cli, tmp_path):
    """The checks reject only what they should: valid values pass and the case runs."""
    code, _, err = cli("run", "--impl", "reference-fa2,reference-fa1", "-k", CASE, "--workers", "1", "--timeout",
                       "0.5", "--report-dir", str(tmp_path), "--quiet")
    assert code == 0, err
    code, out, err = cli("repro", _case_id(), "--impl", "reference-fa2")
    assert code == 0 and "Case.from_dict" in out, err


@pytest.mark.parametrize("argv", [["cases", "-k", "__import__('os')"], ["run", "--timeout", "-1"]])
def test_usage_errors_from_the_shell(argv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "attention_conformance", *argv], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr


def test_pytest_cases_option_is_the_same_grammar(tmp_path):
    """``pytest conformance/ --cases EXPR``: a malformed EXPR is pytest's one-line usage error, a good one selects."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    base = [sys.executable, "-m", "pytest", "conformance/test_conformance.py", "-p", "no:cacheprovider", "-q",
            "--impl", "reference-fa2"]
    bad = subprocess.run(base + ["--cases", "(causal and"], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=300)
    assert bad.returncode == 4 and "--cases: bad -k expression" in bad.stderr and "Traceback" not in bad.stderr, (
        bad.stdout + bad.stderr)
    good = subprocess.run(base + ["--cases", f"{CASE} and not bwd", "--collect-only"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "1 test collected" in good.stdout or "1 tests collected" in good.stdout, good.stdout
