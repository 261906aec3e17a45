"""One verdict per (case, adapter), whatever the front end: ``python -m attention_conformance run`` and the pytest
plugin over the same selection give the same final outcome for every pair.

Both run in this process (so the machine's environment can be faked: this machine "has" an H200, and an
expectations file with ``gpu`` and ``devices`` fields applies through it), on CPU adapters: torch's math
backend (the shipped ``masked_nan`` entry makes its NaN-padding verdicts FINDING), a reference kernel, and the
broken example function (a planted tail-tile bug: FAIL, and KNOWN where our entry expects it). The plugin's
final outcome is the user property each conformance test records (`pytest_plugin.OUTCOME_PROPERTY`).
"""

from __future__ import annotations

import json

import pytest

from attention_conformance import cli
from attention_conformance.pytest_plugin import OUTCOME_PROPERTY
from attention_conformance.reporting import report
from attention_conformance.running import environment
from attention_conformance.verdict.outcomes import FINDING, KNOWN, NOT_SUPPORTED, PASS, UNEXPECTED_PASS

IMPLS = ["torch-sdpa-math", "reference-fa2", "attention_conformance.examples.broken_sdpa:attention"]
CASES = "worked or tile_edges or nan_padding or (fp8 and q64k96)"
EXPECT = """
schema = 1

[[expectation]]
id = "broken-tail-on-h200"
adapters = ["*broken_sdpa*"]
devices = ["cpu"]
gpu = "H200"
cases = "tile_edges"
outcome = "FAIL"
reason = "the planted tail-tile bug, expected on this (faked) H200 machine"

[[expectation]]
id = "reference-fa2-expected-to-fail-on-h200"
adapters = ["reference-fa2"]
gpu = "H200"
cases = "worked"
outcome = "FAIL"
reason = "a stale entry: the reference kernel passes, so its verdicts are UNEXPECTED_PASS"

[[expectation]]
id = "math-on-an-a100-only"
adapters = ["torch-sdpa-math"]
gpu = "A100"
cases = "worked"
outcome = "FAIL"
reason = "inapplicable here: this machine has no A100, so nothing changes"
"""


@pytest.fixture
def h200_machine(monkeypatch):
    """`environment.environment` says this machine has one NVIDIA H200 (the expectations' GPU lookup reads it, and
    the reports record it)."""
    real = environment.environment

    def fake(*args, **kwargs):
        env = dict(real(*args, **kwargs))
        env["gpus"] = [{"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771}]
        return env

    monkeypatch.setattr(environment, "environment", fake)
    monkeypatch.setattr(report, "environment", fake)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv("CONFORMANCE_DEVICE", "cpu")


class _Outcomes:
    """A pytest plugin object collecting each conformance test's recorded final outcome."""

    def __init__(self) -> None:
        self.by_pair: dict[tuple[str, str], str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == OUTCOME_PROPERTY:
                case_id, spec = report.nodeid.split("[", 1)[1].rstrip("]").split("::", 1)
                self.by_pair[(case_id, spec)] = value


def test_cli_and_plugin_give_the_same_outcome_for_every_pair(tmp_path, h200_machine, monkeypatch):
    expect = tmp_path / "ours.toml"
    expect.write_text(EXPECT)
    out = tmp_path / "cli"
    code = cli.main(["run", "--impl", *IMPLS, "--profile", "ci", "-k", CASES, "--expect", str(expect),
                     "--report-dir", str(out), "--quiet"])
    rep = json.loads((out / "report.json").read_text())
    by_cli = {(r["case_id"], r["spec"]): r["outcome"] for r in rep["results"]}

    monkeypatch.chdir(tmp_path)  # no repository conftest or pyproject: the plugin as a user runs it
    seen = _Outcomes()
    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--pyargs", "attention_conformance",
                      "--impl", *IMPLS, "--profile", "ci", "--cases", CASES, "--expect", str(expect)],
                     plugins=[seen])

    assert by_cli and set(seen.by_pair) == set(by_cli), set(by_cli) ^ set(seen.by_pair)
    differ = {pair: (by_cli[pair], seen.by_pair[pair]) for pair in by_cli if by_cli[pair] != seen.by_pair[pair]}
    assert not differ, f"(cli, plugin) outcomes differ: {differ}"
    counts = {o: list(by_cli.values()).count(o) for o in set(by_cli.values())}
    # the selection exercises every mapping the comparison is about
    assert counts.get(KNOWN) and counts.get(UNEXPECTED_PASS) and counts.get(FINDING) and counts.get(PASS), counts
    assert counts.get(NOT_SUPPORTED), counts
    assert code == 1 and rc == pytest.ExitCode.TESTS_FAILED  # the UNEXPECTED_PASS verdicts fail both
    broken = [o for (c, s), o in by_cli.items() if "broken_sdpa" in s and c.startswith("tile_edges")]
    assert KNOWN in broken and "FAIL" not in broken, broken


def test_strictness_is_the_same_rule_in_both_front_ends(tmp_path, h200_machine, monkeypatch):
    """``run --strict`` and the plugin's ``--conformance-strict`` (pytest owns ``--strict``): the named finding
    masked_nan is FAIL in both, for the same pairs."""
    out = tmp_path / "cli"
    cli.main(["run", "--impl", "torch-sdpa-math", "--profile", "ci", "-k", "nan_padding", "--strict",
              "--report-dir", str(out), "--quiet"])
    rep = json.loads((out / "report.json").read_text())
    by_cli = {(r["case_id"], r["spec"]): r["outcome"] for r in rep["results"]}
    monkeypatch.chdir(tmp_path)
    seen = _Outcomes()
    pytest.main(["-q", "-p", "no:cacheprovider", "--pyargs", "attention_conformance", "--impl", "torch-sdpa-math",
                 "--profile", "ci", "--cases", "nan_padding", "--conformance-strict"], plugins=[seen])
    assert by_cli and seen.by_pair == by_cli
    assert "FAIL" in by_cli.values() and FINDING not in by_cli.values(), by_cli


@pytest.mark.parametrize("workers", ["1", "2"])
def test_progress_lines_count_the_final_outcomes(tmp_path, capsys, workers):
    """The progress lines count what the final line reports: torch 2.13's CPU flash failures the shipped entry
    expects are KNOWN in both, never FAIL (serial and worker-process runs)."""
    code = cli.main(["run", "--impl", "torch-sdpa-flash", "--profile", "ci", "-k", "scale and q45k45",
                     "--workers", workers, "--progress-every", "1", "--report-dir", str(tmp_path)])
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("[")]
    assert code == 0 and progress, err
    assert "KNOWN=" in progress[-1] and "FAIL=" not in "".join(progress), progress
