"""pytest configuration shared by the whole test tree: tables a test wants shown in the terminal summary.

A test records a table (the mutant table of ``tests/property/test_mutants.py``) with
``record_property(SUMMARY_KEY, text)``; it is printed in pytest's terminal summary, after the progress lines,
under a section named after the test. This conftest sits at the top of ``tests/`` because pytest-xdist's
controller, which prints the summary, loads only the conftests of the paths it was given (the workers collect
the rest): the reports carry the recorded properties back to it.
"""

from __future__ import annotations

import sys

import pytest

SUMMARY_KEY = "terminal_summary"
_SECTIONS: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == SUMMARY_KEY:
            _SECTIONS.append((report.nodeid, str(value)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    for nodeid, text in _SECTIONS:
        terminalreporter.section(nodeid.rsplit("::", 1)[-1])
        terminalreporter.write_line(text)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """The run's GPUs, driver and library versions (`running.environment`, plus flash-attn-4 and cudnn-frontend where
    installed) in pytest-benchmark's JSON: the header of its table (tools/bench_table.py)."""
    from importlib import metadata

    from attention_conformance.running.environment import environment

    env = dict(environment())
    for dist in ("flash-attn-4", "nvidia-cudnn-frontend"):
        try:
            env[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    machine_info["attention_conformance"] = env


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_commit_info(config: pytest.Config, commit_info: dict) -> None:
    """A run from a copy without git metadata (the device runner's snapshot of a checkout) has pytest-benchmark's
    commit ``unversioned``; where the checkout it was copied from left its commit (tools/checkout_commit.py: the
    carried build/carry/commit), the JSON names that commit instead."""
    tools = str(config.rootpath / "tools")  # a plain script, not installed (tests/tools/conftest.py does the same)
    if tools not in sys.path:
        sys.path.insert(0, tools)
    from checkout_commit import checkout_commit

    described = checkout_commit(config.rootpath) if commit_info.get("id") == "unversioned" else None
    if described is None:
        return
    commit_info["id"] = described.removesuffix("-dirty")
    commit_info["dirty"] = described.endswith("-dirty")
    commit_info["source"] = "build/carry/commit (the copy has no git metadata)"
