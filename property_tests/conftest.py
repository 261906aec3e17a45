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
