"""A call that leaves the CUDA context unusable (conformance/running/cuda_context.py, issue 43): the call is the
adapter's FAIL; no later call runs in that process, so no later case becomes a FAIL the harness caused. Worker
processes are replaced; in-process adapters after it are HARNESS_ERROR. The sticky error is simulated
(engine_toys.BreaksCudaContext): no GPU here."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from attention_conformance.adapters.registry import load
from attention_conformance.cases import catalog
from attention_conformance.running import cuda_context, parallel
from attention_conformance.running.engine import Runner
from attention_conformance.running.worker import worker_key

HERE = os.path.dirname(os.path.abspath(__file__))
A = catalog._seeded(catalog._mk("unit", Lq=17, Lk=33, d=16, dtype="float32"))
B = catalog._seeded(catalog._mk("unit", Lq=9, Lk=12, d=16, dtype="float32"))


@pytest.fixture
def toys(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setattr(cuda_context, "unusable", cuda_context.unusable)  # restored after an in-process toy


def test_the_probe_reports_the_sticky_error_and_nothing_elsewhere(monkeypatch):
    assert cuda_context.unusable("cpu") is None

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    fake = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: True, synchronize=broken))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert cuda_context.unusable("cuda") == "RuntimeError: CUDA error: an illegal memory access was encountered"
    fake.cuda.is_initialized = lambda: False  # CUDA never touched in this process: nothing to break
    assert cuda_context.unusable("cuda") is None


def test_in_process_calls_after_a_lost_context_are_harness_errors_not_verdicts(toys):
    runner = Runner([load("engine_toys:BreaksCudaContext", "cuda"), load("engine_toys:OracleOnAnyDevice", "cuda")],
                    "cuda", determinism="none")
    got = {(r.case_id, r.adapter): r for r in runner.run([A, B])}
    first = got[(A.id, "toy-breaks-cuda-context")]
    assert first.outcome == "FAIL" and "CUDA context of the process that made this call was unusable" in first.message
    for key in ((A.id, "toy-oracle-any-device"), (B.id, "toy-breaks-cuda-context"), (B.id, "toy-oracle-any-device")):
        r = got[key]
        lost = "left unusable by engine_toys:BreaksCudaContext (forward)"
        assert r.outcome == "HARNESS_ERROR" and lost in r.message, (key, r)
    assert runner.context_lost.startswith(f"engine_toys:BreaksCudaContext (forward) on {A.id}")


def test_a_worker_whose_context_is_lost_is_replaced_before_the_next_call(toys):
    runner = Runner([load("engine_toys:IsolatedBreaksCudaContext", "cuda")], "cuda", determinism="none")
    try:
        got = runner.run([A, B])
        assert [r.outcome for r in got] == ["FAIL", "FAIL"], [(r.outcome, r.message[:200]) for r in got]
        assert all("was unusable after it" in r.message for r in got)
        assert runner._workers[worker_key("engine_toys:IsolatedBreaksCudaContext")].restarts == 2
        assert runner.context_lost is None  # the parent's own context was never touched
    finally:
        runner.close()


def test_run_workers_replaces_a_pool_worker_whose_context_is_lost(toys):
    loaded = [load("engine_toys:BreaksCudaContext", "cuda"), load("engine_toys:OracleOnAnyDevice", "cuda")]
    got = parallel.run_parallel(loaded, [A, B], "cuda", workers=1, determinism="none")
    outcomes = {(r.case_id, r.adapter): r.outcome for r in got}
    # each case starts in a fresh pool worker: the breaking toy FAILs on both, the other adapter after it on the
    # same case is a harness error, never a FAIL
    assert outcomes == {(A.id, "toy-breaks-cuda-context"): "FAIL", (A.id, "toy-oracle-any-device"): "HARNESS_ERROR",
                        (B.id, "toy-breaks-cuda-context"): "FAIL", (B.id, "toy-oracle-any-device"): "HARNESS_ERROR"}


def test_a_probe_that_runs_out_of_memory_is_not_a_lost_context(monkeypatch):
    """Beside other workers the device can be full when the probe allocates: that error is of the moment, not sticky
    (an 8-worker tox -e gpu on an 80 GB H100 had lost an xdist worker to it), so the probe releases the cache and
    tries again, and the context stays usable; a sticky error after it is still reported."""
    monkeypatch.setattr(cuda_context, "PROBE_WAIT_SECONDS", 0.0)
    errors = ["CUDA error: out of memory", "CUDA out of memory. Tried to allocate 2.00 MiB"]
    emptied = []

    def synchronize():
        if errors:
            raise RuntimeError(errors.pop(0))

    class Ones:
        def __add__(self, other):
            return self

        def item(self):
            return 2.0

    fake = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: True, synchronize=synchronize,
                                                empty_cache=lambda: emptied.append(1)),
                           ones=lambda *a, **k: Ones())
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert cuda_context.unusable("cuda") is None
    assert not errors and len(emptied) == 2  # the third probe ran; the cache was released after each failed one
    errors.extend(["CUDA error: out of memory"] * cuda_context.PROBE_ATTEMPTS)
    assert cuda_context.unusable("cuda") is None  # never found memory: not a lost context
    errors.extend(["CUDA error: out of memory", "CUDA error: an illegal memory access was encountered"])
    assert cuda_context.unusable("cuda") == "RuntimeError: CUDA error: an illegal memory access was encountered"
