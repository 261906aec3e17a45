"""The installed pytest plugin (entry point ``pytest11``): ``pytest --pyargs attention_conformance --impl X --profile
ci``.

Loaded by pytest for every run in an environment where this distribution is installed (disable it
with ``-p no:attention_conformance``). It provides:

- options ``--impl NAME_OR_MODULE:ATTR [...]`` (repeatable; ``all`` = every built-in adapter available
  here), ``--profile ci|full|gpu`` (case catalog profile, default ``ci``) and ``--device cpu|cuda``
  (default ``$CONFORMANCE_DEVICE`` or ``cpu``), ``--cases EXPR`` (the conformance cases whose id EXPR
  selects, in the ``-k`` grammar of ``python -m attention_conformance run``; pytest's own ``-k`` still filters test
  ids), ``--expect FILE`` (repeatable) / ``--no-expect`` (expectations, conformance/expectations.py: the
  shipped file applies by default; a KNOWN verdict is an xfail, an UNEXPECTED_PASS a failure, entries that
  matched no test are listed in the terminal summary). Each also has a ``--conformance-`` prefixed name, which
  is the only one registered when another plugin already owns the short name;
- the markers ``gpu``, ``slow``, ``fp8``, ``backward`` the conformance cases carry;
- ``ATTN_KERNELS_NO_BUILD=1``: the CUDA kernel library is never compiled inside a test (`kernels.cuda_lib`);
  build it first (``python -m attention_conformance.kernels.build``), tests that need it skip with that command
  otherwise;
- under pytest-xdist with ``--device cuda``: worker ``gwN`` pinned to one GPU through
  ``CUDA_VISIBLE_DEVICES`` (`conformance.parallel.gpu_for_worker`), and the conformance tests ordered
  largest estimated cost first (other tests keep their places);
- the parametrization of ``conformance/test_conformance.py::test_case`` over (case, adapter) of the
  chosen profile, case-major so the shared oracle cache (one FP64 oracle result per case, shared by
  every adapter) stays small, and its session fixture ``conformance_session``.

The test module ships inside the package (``conformance/test_conformance.py``) because
``pytest --pyargs attention_conformance`` collects the installed package directory; every other test of the
project lives under the repository's ``tests/``.
"""

from __future__ import annotations

import argparse
import os
from collections import OrderedDict
from typing import Any

import pytest

__all__ = ["cases_option", "device_option", "impl_option", "profile_option"]

_DESTS = {"impl": "conformance_impl", "profile": "conformance_profile", "device": "conformance_device",
          "cases": "conformance_cases", "expect": "conformance_expect", "no-expect": "conformance_no_expect"}
_MARKERS = (
    "gpu: needs a CUDA device (skipped cleanly without one)",
    "slow: long-running; excluded from the ci profile",
    "fp8: exercises FP8 paths",
    "backward: exercises gradients",
)


def _add(group: Any, name: str, **kw: Any) -> None:
    """Register ``--NAME`` and ``--conformance-NAME``; only the prefixed one if ``--NAME`` is taken."""
    try:
        group.addoption(f"--{name}", f"--conformance-{name}", dest=_DESTS[name], **kw)
    except (ValueError, argparse.ArgumentError):
        group.addoption(f"--conformance-{name}", dest=_DESTS[name], **kw)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "attention-conformance")
    _add(group, "impl", action="extend", nargs="+", default=None, metavar="NAME_OR_MODULE:ATTR",
         help="adapter(s) under test: built-in names, 'all', or module:attr")
    _add(group, "profile", default="ci", choices=("ci", "full", "gpu"),
         help="conformance case profile (default ci)")
    _add(group, "device", default=None, choices=("cpu", "cuda"),
         help="device for adapters (default $CONFORMANCE_DEVICE or cpu)")
    _add(group, "cases", default=None, metavar="EXPR",
         help="conformance cases whose id EXPR selects (the -k grammar of `python -m attention_conformance run`)")
    _add(group, "expect", action="append", default=[], metavar="FILE",
         help="an expectations file on top of the shipped one (KNOWN verdicts xfail)")
    _add(group, "no-expect", action="store_true", default=False, help="apply no expectations (raw verdicts)")


def impl_option(config: pytest.Config) -> list[str] | None:
    """The raw ``--impl`` values (None when not given)."""
    raw = config.getoption(_DESTS["impl"])
    return list(raw) if raw else None


def profile_option(config: pytest.Config) -> str:
    """The ``--profile`` value (default ``ci``)."""
    return config.getoption(_DESTS["profile"])


def device_option(config: pytest.Config) -> str:
    """``--device``, else ``$CONFORMANCE_DEVICE``, else ``cpu``."""
    return config.getoption(_DESTS["device"]) or os.environ.get("CONFORMANCE_DEVICE", "cpu")


def cases_option(config: pytest.Config) -> str | None:
    """``--cases EXPR``: the conformance cases whose id EXPR selects (`conformance.selection` grammar)."""
    return config.getoption(_DESTS["cases"])


def pytest_configure(config: pytest.Config) -> None:
    expr = cases_option(config)
    if expr:
        from attention_conformance.selection import SelectorError, parse

        try:
            parse(expr)
        except SelectorError as exc:
            raise pytest.UsageError(f"--cases: {exc}") from None
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    os.environ.setdefault("ATTN_KERNELS_NO_BUILD", "1")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and device_option(config) == "cuda" and "CONFORMANCE_NO_GPU_PINNING" not in os.environ:
        from attention_conformance.parallel import gpu_for_worker

        gpu = gpu_for_worker(int(worker.removeprefix("gw") or 0))
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def _specs(config: pytest.Config) -> list[str]:
    from attention_conformance.registry import DEFAULT_CPU, resolve_specs

    raw = impl_option(config)
    if not raw:
        return list(DEFAULT_CPU)
    specs, _ = resolve_specs(raw)
    return specs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not {"conformance_case", "conformance_spec"} <= set(metafunc.fixturenames):
        return
    from attention_conformance import catalog
    from attention_conformance.selection import SelectorError

    config = metafunc.config
    device = device_option(config)
    specs = _specs(config)
    try:
        cases = catalog.select(catalog.cases(profile_option(config)), cases_option(config))
    except SelectorError as exc:
        raise pytest.UsageError(f"--cases: {exc}") from None
    params = []
    for case in cases:
        marks = [getattr(pytest.mark, m) for m in catalog.case_marks(case)]
        if device == "cuda" and "gpu" not in catalog.case_marks(case):
            marks.append(pytest.mark.gpu)
        for spec in specs:
            params.append(pytest.param(case, spec, id=f"{case.id}::{spec}", marks=marks))
    metafunc.parametrize(("conformance_case", "conformance_spec"), params)


_SESSION = pytest.StashKey["ConformanceSession"]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The passing verdicts a person should still read (QUALITY_WARNING, FINDING: one line each, in a section of
    their own rather than as Python warnings), and the expectations entries that matched no test of this
    session (delete them: they match nothing)."""
    s = config.stash.get(_SESSION, None)
    if s is None:
        return
    if s.notable:
        terminalreporter.section("conformance: quality warnings and named findings (passing)")
        for line in s.notable:
            terminalreporter.write_line(line)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for label in s.unused():
            terminalreporter.write_line(f"warning: expectation {label} matched no test of this session")


def _case_of(item: pytest.Item) -> Any:
    cs = getattr(item, "callspec", None)
    return cs.params.get("conformance_case") if cs is not None else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist: conformance tests largest estimated cost first, in the slots they occupy."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and not getattr(config.option, "numprocesses", None):
        return
    slots = [i for i, item in enumerate(items) if _case_of(item) is not None]
    if not slots:
        return
    from attention_conformance.catalog import estimated_cost

    ordered = sorted((items[i] for i in slots), key=lambda it: (-estimated_cost(_case_of(it)), _case_of(it).id))
    for i, item in zip(slots, ordered):
        items[i] = item


class ConformanceSession:
    """One engine `Runner` per pytest session: loaded adapters, a small window of cached oracles, and the
    expectations (conformance/expectations.py) with the entries some test's verdict fell under."""

    def __init__(self, device: str, expect: list[str] | None = None, default_expect: bool = True):
        from attention_conformance.engine import Runner
        from attention_conformance.expectations import load_files

        self.device = device
        self.runner = Runner([], device)
        self.loaded: dict[str, object] = {}
        self.recent: OrderedDict[str, None] = OrderedDict()
        self.expectations = load_files(expect or [], default=default_expect)
        self.used: set[str] = set()
        #: one line per QUALITY_WARNING / FINDING verdict, shown in the terminal summary
        self.notable: list[str] = []

    def context(self, la: Any) -> Any:
        """The expectations context of one loaded adapter (its version, this session's device and GPUs)."""
        from attention_conformance.expectations import RunExpectations

        return RunExpectations.for_run([], default=False, device=self.device, loaded=[la]).ctx

    def unused(self) -> list[str]:
        """Entries applicable to an adapter of this session under which no test's verdict fell."""
        from attention_conformance.expectations import applicable

        ran = [(la, self.context(la)) for la in self.loaded.values() if getattr(la, "adapter", None) is not None]
        return [e.label() for e in self.expectations if e.label() not in self.used
                and any(applicable(e, la.name, la.spec, ctx) for la, ctx in ran)]

    def adapter(self, spec: str) -> Any:
        if spec not in self.loaded:
            from attention_conformance.registry import load

            self.loaded[spec] = load(spec, self.device)
        return self.loaded[spec]

    def touch(self, case_id: str, keep: int = 4) -> None:
        """Mark ``case_id`` in use; evict the oracle results of cases older than the last ``keep``."""
        self.recent[case_id] = None
        self.recent.move_to_end(case_id)
        while len(self.recent) > keep:
            old, _ = self.recent.popitem(last=False)
            self.runner.cache.evict(old)


@pytest.fixture(scope="session")
def conformance_session(request: pytest.FixtureRequest):
    """The session's `ConformanceSession` (closed at the end of the session)."""
    from attention_conformance.expectations import ExpectationError

    try:
        s = ConformanceSession(device_option(request.config), request.config.getoption(_DESTS["expect"]),
                               not request.config.getoption(_DESTS["no-expect"]))
    except ExpectationError as exc:
        raise pytest.UsageError(f"--expect: {exc}") from None
    request.config.stash[_SESSION] = s
    yield s
    s.runner.close()
