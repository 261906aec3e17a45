"""A pytest plugin for runs that may be cut off (a device call's time limit): every failed or errored test report
is appended to ``$STREAM_FAILURES`` (default ``failures.txt``) as it arrives, with its node id, phase, the first
lines of its message and the place it was raised (`message_lines`), and the duration of every test's setup and call
(a conformance test decides its verdict while it is set up) and of every teardown that took at least `SLOW_SECONDS` to
the same file's ``.durations`` twin, one line each: ``SECONDS<TAB>OUTCOME<TAB>PHASE<TAB>nodeid<TAB>AT<TAB>WORKER``
(AT: seconds since the session began when the report arrived; WORKER: the pytest-xdist worker, ``-`` without one), so
what ran, where the time went and which worker was busy when are known even when the session never reaches its
summary (`tools/durations_summary.py` reads it). Each conformance test's final outcome (its ``conformance_outcome``
user property, the one junit XML carries) goes to the ``.outcomes`` twin as ``OUTCOME<TAB>nodeid``, which
`tools/compare_front_ends.py` reads in place of the junit XML that an interrupted session may never write (tox -e gpu
on the H100: 9290 of 9340 tests had ended when its limit cut it; the teardown of the workers outlasted tox's grace
and no XML came back). When the session ends or is interrupted, the tests that had started and not ended are appended
to ``.durations`` with the outcome ``running`` and the seconds they had run by then: the stragglers that kept it from
its end.
``PYTHONPATH=tools python -m pytest -p pytest_stream_failures ...``; under pytest-xdist the controller receives the
reports and writes them."""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("STREAM_FAILURES", "failures.txt")
#: a teardown at least this long has its duration written
SLOW_SECONDS = 0.5
_WORKER = False  # an xdist worker: its reports reach the controller, which writes them (else each is written twice)
_BEGAN = time.monotonic()  # the session's start on the controller's clock (pytest_configure)


def pytest_configure(config) -> None:
    global _WORKER, _BEGAN
    _WORKER = hasattr(config, "workerinput")
    _BEGAN = time.monotonic()


def _worker_of(report) -> str:
    """The pytest-xdist worker a report came from (``gw3``; the controller sets ``report.node``), or ``-``."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return str(getattr(gateway, "id", "-"))


#: the user property a conformance test records its final outcome under (`conformance.pytest_plugin.OUTCOME_PROPERTY`)
OUTCOME_PROPERTY = "conformance_outcome"
_STARTED: dict[str, float] = {}  # node id -> when it started (the controller's clock), until its teardown reports


def pytest_runtest_logstart(nodeid, location) -> None:
    if not _WORKER:
        _STARTED[nodeid] = time.monotonic()


def pytest_runtest_logreport(report) -> None:
    if _WORKER:
        return
    if report.when == "teardown":
        _STARTED.pop(report.nodeid, None)
    outcome = next((v for k, v in getattr(report, "user_properties", ()) if k == OUTCOME_PROPERTY), None)
    if outcome is not None and report.when == "setup":  # decided while set up; the call's report carries it again
        with open(_PATH + ".outcomes", "a") as f:
            f.write(f"{outcome}\t{report.nodeid}\n")
    if report.when != "teardown" or report.failed or report.duration >= SLOW_SECONDS:
        with open(_PATH + ".durations", "a") as f:
            f.write(f"{report.duration:.2f}\t{report.outcome}\t{report.when}\t{report.nodeid}\t"
                    f"{time.monotonic() - _BEGAN:.1f}\t{_worker_of(report)}\n")
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


def write_running() -> None:
    """Append the tests that started and have not ended to ``.durations`` (once: the interrupt, then the session's end,
    both call it)."""
    if _WORKER or not _STARTED:
        return
    now = time.monotonic()
    with open(_PATH + ".durations", "a") as f:
        for nodeid, started in sorted(_STARTED.items(), key=lambda kv: kv[1]):
            f.write(f"{now - started:.2f}\trunning\t-\t{nodeid}\t{now - _BEGAN:.1f}\t-\n")
    _STARTED.clear()


def pytest_keyboard_interrupt(excinfo) -> None:
    write_running()


def pytest_sessionfinish(session, exitstatus) -> None:
    write_running()
