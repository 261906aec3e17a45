"""Root pytest configuration: options shared by ``conformance/`` and ``property_tests/``.

- ``--impl NAME_OR_MODULE:ATTR [...]`` (repeatable; ``all`` = every built-in adapter available here):
  the implementations under test. Default: each suite's own default set.
- ``--profile ci|full|gpu``: the conformance case catalog profile (default ``ci``).
- ``--device cpu|cuda``: where adapters run (default ``$CONFORMANCE_DEVICE`` or ``cpu``).
- ``--cases EXPR``: only the conformance cases whose id ``EXPR`` selects, in the ``-k`` grammar of
  ``python -m conformance run`` (`conformance.selection`: names, and/or/not, parentheses). pytest's own
  ``-k`` still filters test ids as usual.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption("--impl", action="extend", nargs="+", default=None, metavar="NAME_OR_MODULE:ATTR",
                    help="adapter(s) under test: built-in names, 'all', or module:attr")
    group.addoption("--profile", default="ci", choices=("ci", "full", "gpu"),
                    help="conformance case profile (default ci)")
    group.addoption("--device", default=None, choices=("cpu", "cuda"),
                    help="device for adapters (default $CONFORMANCE_DEVICE or cpu)")
    group.addoption("--cases", default=None, metavar="EXPR",
                    help="conformance cases whose id EXPR selects (the -k grammar of `python -m conformance run`)")


def pytest_configure(config: pytest.Config) -> None:
    """Check ``--cases`` (a one-line usage error if malformed); under pytest-xdist with --device cuda, pin each
    worker to one GPU (issue 7)."""
    expr = config.getoption("--cases")
    if expr:
        from conformance.selection import SelectorError, parse

        try:
            parse(expr)
        except SelectorError as exc:
            raise pytest.UsageError(f"--cases: {exc}") from None
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    device = config.getoption("--device") or os.environ.get("CONFORMANCE_DEVICE", "cpu")
    if worker and device == "cuda" and "CONFORMANCE_NO_GPU_PINNING" not in os.environ:
        from conformance.parallel import gpu_for_worker

        gpu = gpu_for_worker(int(worker.removeprefix("gw") or 0))
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
