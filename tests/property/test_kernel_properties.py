"""Kernel properties under pytest: ``pytest tests/property/ [--impl NAME ...] [--hypothesis-profile P]``.

For each adapter selected with ``--impl`` (the option of the installed plugin `conformance.pytest_plugin`; without
it, as the CLI and the conformance tests: every built-in adapter available on the device) and each property kind it
declares (`kernel_properties.properties_for`), Hypothesis draws cases from the adapter's declaration, judges them
against the FP64 oracle under the tolerance policy, targets the worst tolerance usage and replays the pinned bug
examples first. A failure an expectations entry expects (the shipped file and ``--expect FILE``; ``--no-expect``
for raw verdicts) is KNOWN: the property holds and the terminal summary lists it. An adapter unavailable here is
skipped with its reason. A failure prints the shrunk case and a one-line repro command.

On a GPU runner: ``pytest tests/property/test_kernel_properties.py -m gpu --device cuda --impl all`` (each test of a
CUDA device is marked ``gpu``).
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from attention_conformance.property_tests.kernel_properties import STATS, build_property, declaration, properties_for
from attention_conformance.property_tests.profiles import build_per_shape_shards
from attention_conformance.pytest_plugin import conformance_run, conformance_run_or_skip


def pytest_generate_tests(metafunc):
    if "impl_kind" not in metafunc.fixturenames:
        return
    # the conformance tests' run (`conformance.running.run_context`): ``--impl`` by the CLI's rules, without it every
    # built-in adapter available on the device, the expectations in this machine's context
    run, skip = conformance_run_or_skip(metafunc.config)
    if run is None:  # no --impl and nothing available on this device
        metafunc.parametrize("impl_kind", [pytest.param(None, id="no-adapter", marks=skip)])
        return
    device = run.device
    params = []
    for loaded in run.loaded:
        spec = loaded.spec
        if not loaded.available:
            params.append(pytest.param((loaded, None, None), id=f"{spec}-unavailable",
                                       marks=pytest.mark.skip(reason=f"{spec}: {loaded.reason}")))
            continue
        # an adapter that builds a kernel per shape: each property's examples as several tests, side by side under
        # pytest-xdist (property_tests/profiles.py build_per_shape_shards)
        shards = (build_per_shape_shards(settings().max_examples) if getattr(loaded.adapter, "builds_per_shape", False)
                  else 1)
        for kind in properties_for(loaded.adapter, device):
            marks = [getattr(pytest.mark, kind)] if kind in ("fp8", "backward") else []
            if device != "cpu":
                marks.append(pytest.mark.gpu)
            if shards == 1:
                params.append(pytest.param((loaded, kind, None), id=f"{spec}-{kind}", marks=marks))
                continue
            params.extend(pytest.param((loaded, kind, (i, shards)), id=f"{spec}-{kind}-{i + 1}of{shards}", marks=marks)
                          for i in range(shards))
    metafunc.parametrize("impl_kind", params)


def test_kernel_property(impl_kind, request):
    """The adapter agrees with the oracle, within the tolerance policy, on every drawn case it claims, except the
    failures an expectations entry expects (KNOWN, listed in the terminal summary)."""
    from attention_conformance.property_tests.kernel_check import share_gpu
    from attention_conformance.property_tests.known import known_in
    from attention_conformance.pytest_plugin import store_of, worker_pool
    from attention_conformance.running.gpu_share import GpuShare

    loaded, kind, shard = impl_kind
    conformance = conformance_run(request.config)
    device = conformance.device
    store = store_of(request.config)  # pytest-xdist's workers share the GPU (conformance/running/gpu_share.py)
    # the GPU and the worker processes of this process's conformance tests (one per library)
    share_gpu(GpuShare.of_run(store.folder if store is not None else None, device), worker_pool(request.config))
    run = build_property(kind, loaded.adapter, device, adapter_name=loaded.spec, known=known_in(conformance, loaded),
                         shard=shard)
    try:
        run.test()
    finally:
        STATS[request.node.nodeid] = (run.examples_run, run.max_usage, dict(run.events))
        if run.known:
            request.node.user_properties.append(
                ("known", [f"{hit.expectation}: {hit.case.id}: {hit.message}" for hit in run.known[:5]]
                 + ([f"... {len(run.known) - 5} more"] if len(run.known) > 5 else [])))
        if run.budget:
            request.node.user_properties.append(("budget", run.budget))
        if run.declined:
            case, why = run.declined[0]
            request.node.user_properties.append(
                ("declined", f"{len(run.declined)} claimed draw(s) declined by "
                             f"{declaration(loaded.adapter, device).library_check} (rejected), e.g. {case.id}: {why}"))
    assert run.examples_run > 0, f"{loaded.spec} {kind}: no example ran"
