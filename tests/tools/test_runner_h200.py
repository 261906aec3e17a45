"""tools/device/runner_h200.sh: its bench and gpu-tests stages run what ``tox -e bench`` and ``tox -e gpu`` run."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest_args(line: str) -> list[str]:
    """A pytest command line's arguments after ``-m pytest``, without the JSON file's path (each names its own) and
    tox's ``{posargs}`` (what a caller adds)."""
    words = shlex.split(line)
    args = words[words.index("pytest") + 1:]
    return [w for w in args if not w.startswith("--benchmark-json=") and w != "{posargs}"]


def _commands(env: str, function: str) -> tuple[str, str]:
    """(tox.ini [testenv:ENV]'s pytest command line, the body of runner_h200.sh's FUNCTION with its continuation lines
    joined)."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    tox_line = next(c for c in tox[f"testenv:{env}"]["commands"].splitlines() if "-m pytest" in c)
    runner = (ROOT / "tools" / "device" / "runner_h200.sh").read_text()
    body = re.search(rf"^{function}\(\) \{{\n(.*?)^\}}", runner, re.S | re.M)
    assert body, f"runner_h200.sh has no {function} function"
    return tox_line, body.group(1).replace("\\\n", " ")


def test_the_bench_stage_runs_tox_bench_pytest_command():
    """``bench_suite`` (the runner's ``bench`` stage, for a call without tox) and tox.ini's [testenv:bench] select and
    time the same benchmarks: a mark or option added to one and not the other fails here."""
    tox_line, body = _commands("bench", "bench_suite")
    runner_line = next(c for c in body.splitlines() if "-m pytest" in c)
    assert _pytest_args(runner_line) == _pytest_args(tox_line) != []


def test_the_gpu_tests_stage_runs_tox_gpu_pytest_command():
    """``gpu_suite`` (the runner's ``gpu-tests`` stage, for a call without tox) selects what tox.ini's [testenv:gpu]
    selects: the same marker, device, profile and adapters (its worker count, the junit XML and the outcome stream
    are the runner's own)."""
    tox_line, body = _commands("gpu", "gpu_suite")
    runner_args = shlex.split(body.split("-m pytest", 1)[1])
    tox_args = shlex.split(tox_line.split("-m pytest", 1)[1])
    selection = [a for a in tox_args if not a.startswith("{")]  # tox's -n {env:...} and {posargs} are the caller's
    selection = selection[:selection.index("-n")]
    assert runner_args[:len(selection)] == selection != [], (runner_args, selection)


def test_every_step_of_the_benchmark_suite_has_its_one_limit():
    """The suite (tox_bench, bench_suite) runs as a step only through bench_step, under BENCH_S: its JSON comes back
    whole or not at all, and when it grew to 504 s (an H100, 2026-12-07) one of its three steps had been raised and
    two still cut it at 300 s."""
    runner = (ROOT / "tools" / "device" / "runner_h200.sh").read_text()
    direct = re.findall(r"^\s*(?:else )?step .*\b(?:tox_bench|bench_suite)\b.*$", runner, re.M)
    assert direct == [], direct  # not as a step of its own, with a limit of its own
    body = re.search(r"^bench_step\(\) \{\n\s*(.*)\n\}$", runner, re.M)
    assert body and body.group(1) == 'step "$1" "$2" "$BENCH_S" "$3" "$1/bench"', body
    uses = re.findall(r"\bbench_step \S+ \S+ (tox_bench|bench_suite)\b", runner)
    assert sorted(uses) == ["bench_suite", "tox_bench", "tox_bench"], uses  # session_bench, benches, _bwd_table
    default = re.search(r"^BENCH_S=\$\{BENCH_S:-(\d+)\}$", runner, re.M)
    assert default and int(default.group(1)) > 504, "BENCH_S's default is below the suite's measured 504 s"
