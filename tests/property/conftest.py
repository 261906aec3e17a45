"""pytest configuration of the property suite (tests/property/): Hypothesis profiles and summaries.

Profiles (property_tests/profiles.py): ``ci`` (default), ``dev``, ``thorough``, ``gpu``; choose with
``--hypothesis-profile NAME`` or ``HYPOTHESIS_PROFILE=NAME``. ``--impl`` and ``--device`` come from the
installed plugin (`conformance.pytest_plugin`).

Tables a test wants shown (the mutant table) are recorded with ``record_property(SUMMARY_KEY, text)``
and printed in pytest's terminal summary, after the progress lines (this also works under
pytest-xdist, since the reports carry them back to the controller).
"""

from __future__ import annotations

import pytest

from attention_conformance.property_tests import profiles

profiles.register()

SUMMARY_KEY = "terminal_summary"
_SECTIONS: list[tuple[str, str]] = []


def pytest_configure(config: pytest.Config) -> None:
    explicit = None
    try:
        explicit = config.getoption("hypothesis_profile")
    except (ValueError, AttributeError):
        explicit = None
    profiles.load(explicit)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == SUMMARY_KEY:
            _SECTIONS.append((report.nodeid, str(value)))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Recorded tables (the mutant table); with --hypothesis-show-statistics also the examples, worst
    tolerance usage and event() counts per kernel property (these tests build their @given function at
    run time, so Hypothesis' own statistics do not list them)."""
    for nodeid, text in _SECTIONS:
        terminalreporter.section(nodeid.rsplit("::", 1)[-1])
        terminalreporter.write_line(text)
    try:
        show = config.getoption("hypothesis_show_statistics")
    except (ValueError, AttributeError):
        show = False
    if not show:
        return
    from attention_conformance.property_tests.kernel_properties import STATS

    if not STATS:
        return
    terminalreporter.section("kernel property statistics")
    for node, (n, usage, events) in STATS.items():
        terminalreporter.write_line(f"{node}: {n} examples, worst tolerance usage {usage:.3g}")
        for label, count in sorted(events.items(), key=lambda kv: -kv[1])[:12]:
            terminalreporter.write_line(f"    {100.0 * count / max(n, 1):5.1f}%  {label}")
