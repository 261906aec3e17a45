"""Judge one (adapter, case) pair against the FP64 oracle for the property suite: the engine's verdict.

The property suite and the mutant runner call `evaluate`, which runs the engine's own per-case
evaluation (`conformance.running.engine.Runner.settled_verdict`: NOT_SUPPORTED, the calls, in-process or in a worker
for isolated adapters, then `conformance.verdict.judge.judge`; a call that ran out of device memory once more, alone
on the GPU where `share_gpu` gave the run's share), so a verdict here is the verdict ``python -m
attention_conformance run`` gives: the same `conformance.verdict.judge.Verdict`, the same checks and the same LSE
convention rules (SEMANTICS.md §8: +inf on fully masked rows passes where the adapter's
`ForwardOutput.lse_convention` declares it, in-process and isolated alike).

Inputs and oracle data are computed once per case id and shared (bounded FIFO cache); every call gets
fresh copies of the inputs, so a kernel that writes into its inputs cannot poison later evaluations.
"""

from __future__ import annotations

import atexit
import copy

from attention_conformance.adapters.base import Adapter
from attention_conformance.adapters.registry import LoadedAdapter
from attention_conformance.cases.case import Case
from attention_conformance.running import gpu_share
from attention_conformance.running.engine import OracleCache, Runner
from attention_conformance.running.gpu_share import GpuShare
from attention_conformance.running.worker import WorkerPool
from attention_conformance.verdict.judge import Verdict

__all__ = ["Verdict", "evaluate", "oracle_data", "clear_cache", "share_gpu"]

_CACHE_MAX = 1024


class _SharedCache(OracleCache):
    """The engine's oracle cache, shared across evaluations, FIFO-bounded, handing out input copies."""

    def get(self, case: Case):
        data = self._data
        if case.id not in data and len(data) >= _CACHE_MAX:
            data.pop(next(iter(data)))
        inputs, od, err = super().get(case)
        return (None if inputs is None else _copy_inputs(inputs)), od, err


_CACHE = _SharedCache()


def clear_cache() -> None:
    _CACHE._data.clear()


def oracle_data(case: Case):
    """(inputs copy, OracleData, error) for ``case``, computed once per case id (issue 3, item 8)."""
    return _CACHE.get(case)


def _copy_inputs(inputs):
    """A deep copy of `inputs` that keeps the aliasing of the original (an FP8 case's ``k`` is its ``fp8["k"]``),
    so a kernel that writes into one is reported exactly as the engine reports it."""
    return copy.deepcopy(inputs)


_LOADED: dict[tuple[int, str], LoadedAdapter] = {}
_RUNNERS: dict[str, Runner] = {}
_SHARE: GpuShare | None = None
_POOL: WorkerPool | None = None


def share_gpu(share: GpuShare | None, workers: WorkerPool | None = None) -> None:
    """The GPU this process shares with the run's others (pytest-xdist's workers on CUDA, `running.gpu_share`): each
    evaluation on a CUDA device then holds it, and a call that ran out of device memory runs again alone.
    ``workers``: the worker processes of this process's conformance tests (the pytest plugin's `worker_pool`), which
    the isolated adapters' evaluations then share (None: the suite's own, one per library)."""
    global _SHARE, _POOL
    _SHARE = share
    if workers is not _POOL:
        _close_runners()
        _POOL = workers
    for runner in _RUNNERS.values():
        runner.share = share


def _close_runners() -> None:
    for runner in _RUNNERS.values():
        runner.close()  # a shared pool is closed by its owner
    _RUNNERS.clear()


atexit.register(_close_runners)


def _runner_for(adapter: Adapter, device: str, spec: str | None):
    """(the adapter's `LoadedAdapter`, the device's engine Runner): one Runner per device for every adapter, so the
    isolated adapters of one library share one worker process (`running.worker.worker_key`), kept between cases."""
    name = spec or adapter.name
    key = (id(adapter), name)
    la = _LOADED.get(key)
    if la is None:  # an entry holds a reference to its adapter, so no other object takes its id meanwhile
        if len(_LOADED) > 256:
            _LOADED.clear()
        la = _LOADED[key] = LoadedAdapter(name, adapter.name, adapter, None)
    runner = _RUNNERS.get(device)
    if runner is None:
        runner = _RUNNERS[device] = Runner([], device, determinism="sampled", share=_SHARE, workers=_POOL)
        runner.cache = _CACHE
    return la, runner


def evaluate(adapter: Adapter, case: Case, device: str = "cpu", spec: str | None = None) -> Verdict:
    """Run ``adapter`` on ``case`` through the engine and return its `Verdict` (see the module docstring).

    A failing verdict's message ends with the case id, so a property failure names its case.
    """
    la, runner = _runner_for(adapter, device, spec)
    with gpu_share.shared(_SHARE if device.startswith("cuda") else None):
        v = runner.settled_verdict(la, case)
    if v.failed:
        v.message = f"{v.message} (case {case.id})"
    return v
