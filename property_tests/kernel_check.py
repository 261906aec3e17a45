"""Judge one (adapter, case) pair against the FP64 oracle: the engine's verdict, plus one stricter check.

The property suite and the mutant runner call `evaluate`, which runs the engine's own per-case
evaluation (`conformance.engine.Runner.run_case`: NOT_SUPPORTED, forward/backward raising, shape,
dtype, values under the tolerance policy of conformance/TOLERANCES.md, NaN/Inf, LSE, inputs
unchanged, determinism), so a verdict here is the verdict ``python -m conformance run`` would give.

Added here: the engine records ``+inf`` LSE on fully masked rows as a *finding*
(``lse_convention:+inf``, the FA2 CUDA convention, SEMANTICS.md §8); an adapter that returns +inf
while its `ForwardOutput.lse_convention` declares ``"-inf"`` has not mapped the convention as §8
requires, and fails check ``lse_convention``.

Inputs and oracle data are computed once per case id and shared (bounded FIFO cache); every call gets
fresh copies of the inputs, so a kernel that writes into its inputs cannot poison later evaluations.
"""

from __future__ import annotations

import atexit
import time
from dataclasses import dataclass, field

import numpy as np

from conformance.adapters.base import Adapter
from conformance.case import Case
from conformance.engine import OracleCache, Runner
from conformance.registry import LoadedAdapter

__all__ = ["Verdict", "evaluate", "oracle_data", "clear_cache"]

_CACHE_MAX = 1024


@dataclass
class Verdict:
    """Outcome of one (adapter, case) evaluation."""

    outcome: str  # PASS, FAIL, CRASH, NOT_SUPPORTED
    check: str = ""  # the first failing check, e.g. "forward.out", "inputs unchanged"
    usage: float = 0.0  # worst error / tolerance over every compared array
    message: str = ""
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.outcome in ("FAIL", "CRASH", "TIMEOUT", "HARNESS_ERROR")


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


class _Recorder(Adapter):
    """Delegates to ``base`` and remembers the LSE convention its last forward declared."""

    def __init__(self, base: Adapter):
        self.base = base
        self.name = base.name
        self.capabilities = base.capabilities
        self.declared: list[str] = []

    def supports(self, case, device):
        return self.base.supports(case, device)

    def unavailable_reason(self, device):
        return self.base.unavailable_reason(device)

    def forward(self, inputs, case, device):
        fo = self.base.forward(inputs, case, device)
        self.declared.append(getattr(fo, "lse_convention", "-inf"))
        return fo

    def backward(self, inputs, case, device):
        return self.base.backward(inputs, case, device)


def _copy_inputs(inputs):
    import copy

    fresh = copy.copy(inputs)
    for name, arr in inputs.arrays().items():
        if "." not in name:  # "paged.k_pool" etc. live in the dict copied below
            setattr(fresh, name, np.array(arr, copy=True))
    for group in ("fp8", "paged"):
        held = getattr(inputs, group, None)
        if held is not None:
            setattr(fresh, group, {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v)
                                   for k, v in held.items()})
    return fresh


_RUNNERS: dict[tuple[int, str, str], tuple] = {}


def _close_runners() -> None:
    for _, _, runner in _RUNNERS.values():
        runner.close()
    _RUNNERS.clear()


atexit.register(_close_runners)


def _runner_for(adapter: Adapter, device: str, spec: str | None):
    """One engine Runner per adapter object (isolated adapters keep their worker process between cases)."""
    key = (id(adapter), device, spec or adapter.name)
    hit = _RUNNERS.get(key)
    if hit is not None:  # the entry holds a reference to the adapter, so its id cannot be reused meanwhile
        return hit
    isolate = bool(getattr(adapter, "isolate", False))
    rec = adapter if isolate else _Recorder(adapter)
    la = LoadedAdapter(spec or adapter.name, adapter.name, rec, None)
    runner = Runner([la], device, determinism="sampled")
    runner.cache = _CACHE
    if len(_RUNNERS) > 64:
        _close_runners()
    _RUNNERS[key] = (la, rec, runner)
    return la, rec, runner


def _first_failed_check(res) -> str:
    for name, state in res.checks.items():
        if state == "fail":
            return name
    return res.outcome.lower()


def evaluate(adapter: Adapter, case: Case, device: str = "cpu", spec: str | None = None) -> Verdict:
    """Run ``adapter`` on ``case`` through the engine and return the `Verdict` (see the module docstring)."""
    t0 = time.perf_counter()
    la, rec, runner = _runner_for(adapter, device, spec)
    res = runner.run_case(la, case)
    usage = 0.0
    for st in res.stats.values():
        ratio = st.get("max_ratio") or 0.0
        usage = max(usage, float("inf") if st.get("nonfinite") else float(ratio))
    details = {"findings": list(res.findings), "checks": dict(res.checks), "repro": res.repro}
    if res.outcome in ("FAIL", "CRASH", "TIMEOUT", "HARNESS_ERROR"):
        return Verdict(res.outcome, _first_failed_check(res), usage, f"{res.message} (case {case.id})",
                       time.perf_counter() - t0, details)
    declared = rec.declared[-1] if isinstance(rec, _Recorder) and rec.declared else "-inf"
    if "lse_convention:+inf" in res.findings and declared != "+inf":
        return Verdict("FAIL", "lse_convention", float("inf"),
                       f"lse: +inf on fully masked rows while the adapter declares lse_convention={declared!r}; "
                       f"SEMANTICS.md §8 requires -inf or a declared, mapped convention (case {case.id})",
                       time.perf_counter() - t0, details)
    return Verdict(res.outcome, "", usage, res.message, time.perf_counter() - t0, details)
