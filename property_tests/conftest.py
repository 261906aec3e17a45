"""pytest configuration of the property suite: Hypothesis profiles and the ``--impl`` option.

Profiles (property_tests/profiles.py): ``ci`` (default), ``dev``, ``thorough``, ``gpu``; choose with
``--hypothesis-profile NAME`` or ``HYPOTHESIS_PROFILE=NAME``. ``--impl`` is the option shared with
``pytest conformance/`` (registered by the root conftest.py); it is registered here only when the
root conftest did not do it already.
"""

from __future__ import annotations

import argparse

import pytest

from property_tests import profiles

profiles.register()


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        parser.addoption("--impl", action="append", default=None,
                         help="adapter name(s) or module:attr to test (default: the reference-* adapters)")
    except (ValueError, argparse.ArgumentError):  # already registered by the root conftest.py
        pass


def pytest_configure(config: pytest.Config) -> None:
    explicit = None
    try:
        explicit = config.getoption("hypothesis_profile")
    except (ValueError, AttributeError):
        explicit = None
    profiles.load(explicit)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """With --hypothesis-show-statistics: examples, worst tolerance usage and event() counts per kernel property
    (these tests build their @given function at run time, so Hypothesis' own statistics do not list them)."""
    try:
        show = config.getoption("hypothesis_show_statistics")
    except (ValueError, AttributeError):
        show = False
    if not show:
        return
    from property_tests.test_kernel_properties import STATS

    if not STATS:
        return
    terminalreporter.section("kernel property statistics")
    for node, (n, usage, events) in STATS.items():
        terminalreporter.write_line(f"{node}: {n} examples, worst tolerance usage {usage:.3g}")
        for label, count in sorted(events.items(), key=lambda kv: -kv[1])[:12]:
            terminalreporter.write_line(f"    {100.0 * count / max(n, 1):5.1f}%  {label}")
