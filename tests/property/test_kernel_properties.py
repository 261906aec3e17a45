"""Kernel properties under pytest: ``pytest tests/property/ [--impl NAME ...] [--hypothesis-profile P]``.

For each adapter selected with ``--impl`` (the option of the installed plugin `conformance.pytest_plugin`; default: the
``reference-*`` adapters) and each property kind it declares (`kernel_properties.properties_for`),
Hypothesis draws cases, judges them against the FP64 oracle under the tolerance policy, targets the
worst tolerance usage and replays the pinned bug examples first. An adapter unavailable here is
skipped with its reason. A failure prints the shrunk case and a one-line repro command.
"""

from __future__ import annotations

import pytest

from attention_conformance.property_tests.kernel_properties import STATS, build_property, properties_for
from attention_conformance.pytest_plugin import device_option, impl_option

DEFAULT_IMPLS = ("reference-fa1", "reference-fa2", "reference-fa3", "reference-fa3-fp8", "reference-splitkv")


def _impls(config) -> list[str]:
    raw = impl_option(config)
    if not raw:
        return list(DEFAULT_IMPLS)
    from attention_conformance.registry import resolve_specs

    specs, _ = resolve_specs(raw)
    return specs


def _device(config) -> str:
    return device_option(config)


def pytest_generate_tests(metafunc):
    if "impl_kind" not in metafunc.fixturenames:
        return
    from attention_conformance.registry import load

    device = _device(metafunc.config)
    params = []
    for spec in _impls(metafunc.config):
        loaded = load(spec, device)
        if not loaded.available:
            params.append(pytest.param((spec, None, None), id=f"{spec}-unavailable",
                                       marks=pytest.mark.skip(reason=f"{spec}: {loaded.reason}")))
            continue
        for kind in properties_for(loaded.adapter, device):
            marks = [getattr(pytest.mark, kind)] if kind in ("fp8", "backward") else []
            if device != "cpu":
                marks.append(pytest.mark.gpu)
            params.append(pytest.param((spec, loaded.adapter, kind), id=f"{spec}-{kind}", marks=marks))
    metafunc.parametrize("impl_kind", params)


def test_kernel_property(impl_kind, request):
    """The adapter agrees with the oracle, within the tolerance policy, on every drawn case it claims."""
    spec, adapter, kind = impl_kind
    run = build_property(kind, adapter, _device(request.config), adapter_name=spec)
    try:
        run.test()
    finally:
        STATS[request.node.nodeid] = (run.examples_run, run.max_usage, dict(run.events))
    assert run.examples_run > 0, f"{spec} {kind}: no example ran"

