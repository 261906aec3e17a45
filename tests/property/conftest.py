"""pytest configuration of the property suite (tests/property/): Hypothesis profiles and summaries.

Profiles (property_tests/profiles.py): ``ci`` (default), ``dev``, ``thorough``, ``gpu``; choose with
``--hypothesis-profile NAME`` or ``HYPOTHESIS_PROFILE=NAME``. ``--impl`` and ``--device`` come from the
installed plugin (`conformance.pytest_plugin`).

Tables a test wants shown (the mutant table) go through ``tests/conftest.py``'s ``SUMMARY_KEY``; the
kernel property statistics of ``--hypothesis-show-statistics`` are gathered in-process, so they are printed
by a run without pytest-xdist only.
"""

from __future__ import annotations

import pytest

from attention_conformance.property_tests import profiles

profiles.register()


def pytest_configure(config: pytest.Config) -> None:
    explicit = None
    try:
        explicit = config.getoption("hypothesis_profile")
    except (ValueError, AttributeError):
        explicit = None
    profiles.load(explicit)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The known findings the kernel properties hit (KNOWN draws) and the claimed draws a library declined, per
    test (from the reports, so under pytest-xdist too); with --hypothesis-show-statistics also the examples, worst
    tolerance usage and event() counts per kernel property (these tests build their @given function at run time,
    so Hypothesis' own statistics do not list them)."""
    lines = []
    for reports in terminalreporter.stats.values():
        for rep in reports:
            props = dict(getattr(rep, "user_properties", ()) or ())
            if getattr(rep, "when", None) != "call" or not ({"known", "declined"} & set(props)):
                continue
            lines.append(f"{rep.nodeid}:")
            lines += [f"    KNOWN {x}" for x in props.get("known", ())]
            if "declined" in props:
                lines.append(f"    {props['declined']}")
    if lines:
        terminalreporter.section("kernel properties: known findings and library declines")
        for line in lines:
            terminalreporter.write_line(line)
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
