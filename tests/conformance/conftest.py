"""Fixtures shared by the conformance tests."""

from __future__ import annotations

import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def toy_path():
    """tests/conformance on PYTHONPATH, so that isolated workers and repro-snippet subprocesses import the
    toy adapters (engine_toys.py) by module name."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, old) if p)
    yield
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old
