"""A pytest plugin for runs that may be cut off (a device call's time limit): every failed or errored test report
is appended to ``$STREAM_FAILURES`` (default ``failures.txt``) as it arrives, with its node id, phase and the first
lines of its message, and every finished test's duration to the same file's ``.durations`` twin, so what ran is
known even when the session never reaches its summary. ``PYTHONPATH=tools python -m pytest -p
pytest_stream_failures ...``; under pytest-xdist the controller receives the reports and writes them."""

from __future__ import annotations

import os

_PATH = os.environ.get("STREAM_FAILURES", "failures.txt")


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" or report.failed:
        with open(_PATH + ".durations", "a") as f:
            f.write(f"{report.duration:.2f}\t{report.outcome}\t{report.when}\t{report.nodeid}\n")
    if not report.failed:
        return
    text = report.longreprtext or ""
    lines = [ln for ln in text.splitlines() if ln.strip()][-40:]
    with open(_PATH, "a") as f:
        f.write(f"=== {report.nodeid} [{report.when}]\n" + "\n".join(lines) + "\n")
