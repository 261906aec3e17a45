"""pytest integration of the conformance suite: ``pytest conformance/ [--impl X ...] [--profile P]``.

Parametrizes `test_conformance.py::test_case` over (case, adapter) of the chosen profile (``--cases EXPR``
selects case ids in the grammar of ``python -m conformance run -k``, `conformance.selection`), case-major
so the shared oracle cache (one FP64 oracle result per case, shared by every adapter) stays small.
Markers per case: fp8, backward, slow, gpu (`conformance.catalog.case_marks`); with ``--device cuda``
every test is marked gpu and skips cleanly when no CUDA device is present. Under pytest-xdist the
tests are ordered largest estimated cost first (issue 7).
"""

from __future__ import annotations

import os
from collections import OrderedDict

import pytest

from conformance.registry import DEFAULT_CPU


def _device(config) -> str:
    return config.getoption("--device") or os.environ.get("CONFORMANCE_DEVICE", "cpu")


def _specs(config) -> list[str]:
    from conformance.registry import resolve_specs

    raw = config.getoption("--impl")
    if not raw:
        return list(DEFAULT_CPU)
    specs, _ = resolve_specs(list(raw))
    return specs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not {"conformance_case", "conformance_spec"} <= set(metafunc.fixturenames):
        return
    from conformance import catalog
    from conformance.selection import SelectorError

    config = metafunc.config
    device = _device(config)
    try:
        cases = catalog.select(catalog.cases(config.getoption("--profile")), config.getoption("--cases"))
    except SelectorError as exc:
        raise pytest.UsageError(f"--cases: {exc}") from None
    specs = _specs(config)
    params = []
    for case in cases:
        marks = [getattr(pytest.mark, m) for m in catalog.case_marks(case)]
        if device == "cuda" and "gpu" not in catalog.case_marks(case):
            marks.append(pytest.mark.gpu)
        for spec in specs:
            params.append(pytest.param(case, spec, id=f"{case.id}::{spec}", marks=marks))
    metafunc.parametrize(("conformance_case", "conformance_spec"), params)


def pytest_collection_modifyitems(config, items) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER") and not getattr(config.option, "numprocesses", None):
        return
    from conformance.catalog import estimated_cost

    def cost(item):
        cs = getattr(item, "callspec", None)
        case = cs.params.get("conformance_case") if cs else None
        return (-estimated_cost(case), case.id) if case is not None else (0.0, "")

    items.sort(key=cost)


class _Session:
    def __init__(self, device: str):
        from conformance.engine import Runner

        self.device = device
        self.runner = Runner([], device)
        self.loaded: dict[str, object] = {}
        self.recent: OrderedDict[str, None] = OrderedDict()

    def adapter(self, spec: str):
        if spec not in self.loaded:
            from conformance.registry import load

            self.loaded[spec] = load(spec, self.device)
        return self.loaded[spec]

    def touch(self, case_id: str, keep: int = 4) -> None:
        self.recent[case_id] = None
        self.recent.move_to_end(case_id)
        while len(self.recent) > keep:
            old, _ = self.recent.popitem(last=False)
            self.runner.cache.evict(old)


@pytest.fixture(scope="session")
def conformance_session(request):
    s = _Session(_device(request.config))
    yield s
    s.runner.close()
