"""A pytest plugin for runs that may be cut off (a device call's time limit): every failed or errored test report
is appended to ``$STREAM_FAILURES`` (default ``failures.txt``) as it arrives, with its node id, phase, the first
lines of its message and the place it was raised (`message_lines`), and the duration of every test's call and of
every setup that took at least `SETUP_SECONDS` (a conformance test decides its verdict while it is set up) to the same
file's ``.durations`` twin, so what ran and where the time went are known even when the session never reaches its
summary.
``PYTHONPATH=tools python -m pytest -p pytest_stream_failures ...``; under pytest-xdist the controller receives the
reports and writes them."""

from __future__ import annotations

import os

_PATH = os.environ.get("STREAM_FAILURES", "failures.txt")
#: a setup at least this long has its duration written (a conformance test's verdict, a session fixture's start)
SETUP_SECONDS = 0.5
_WORKER = False  # an xdist worker: its reports reach the controller, which writes them (else each is written twice)


def pytest_configure(config) -> None:
    global _WORKER
    _WORKER = hasattr(config, "workerinput")


def pytest_runtest_logreport(report) -> None:
    if _WORKER:
        return
    if report.when == "call" or report.failed or (report.when == "setup" and report.duration >= SETUP_SECONDS):
        with open(_PATH + ".durations", "a") as f:
            f.write(f"{report.duration:.2f}\t{report.outcome}\t{report.when}\t{report.nodeid}\n")
    if not report.failed:
        return
    with open(_PATH, "a") as f:
        f.write(f"=== {report.nodeid} [{report.when}]\n" + "\n".join(message_lines(report.longreprtext or "")) + "\n")


#: error lines kept wherever they fall: the property suite's case and repro command, which a failure that raised
#: inside the call (a traceback of 30 lines first) puts after the head
_NAMED = ("case: ", "repro: ")


def message_lines(text: str, head: int = 30, tail: int = 10) -> list[str]:
    """The lines of a failure worth keeping: its error lines (``E   ...``: the message, which a Hypothesis failure
    follows with 40 lines of the falsifying example) first, at most `head`, then the error lines past those that name
    the case or its repro command (`_NAMED`), then the last `tail` lines (where it was raised); a report without error
    lines keeps its last head + tail lines."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    if not errors:
        return lines[-(head + tail):]
    named = [ln for ln in errors[head:] if ln[1:].lstrip().startswith(_NAMED)]
    rest = [ln for ln in lines[-tail:] if ln not in errors[:head] and ln not in named]
    return errors[:head] + (["..."] if len(errors) > head else []) + named + rest
