"""Worker processes (conformance/running/worker.py): one per library, shared by its spellings; each spec loaded once
in it."""

from __future__ import annotations

import os

import pytest

from attention_conformance.cases import catalog
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.running.worker import WorkerClient, worker_key

CASE = catalog._seeded(catalog._mk("unit", Lq=9, Lk=12, d=16, dtype="float32"))
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def toys_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(HERE)


def test_spellings_of_a_builtin_share_their_base_worker_and_other_specs_have_their_own():
    assert worker_key("flash-attn-4@paged") == worker_key("flash-attn-4@func") == "flash-attn-4"
    assert worker_key("flash-attn-4") == "flash-attn-4"
    assert worker_key("torch-sdpa-cudnn@causal_lower_right") == "torch-sdpa-cudnn"
    assert worker_key("engine_toys:IsolatedCorrect") == "engine_toys:IsolatedCorrect"
    assert worker_key("my/file.py:fn@x") == "my/file.py:fn@x"  # a path or module spec is never split
    assert worker_key("cuda-fa3", "attn_kernels") == worker_key("cuda-fa1", "attn_kernels") == "attn_kernels"


def test_our_cuda_adapters_share_one_worker_process():
    """Six CUDA adapters of one library in six processes per run worker made 48 more CUDA contexts on the H200 beside
    8 run workers; they share one, as one program loads the library once."""
    from attention_conformance.adapters.registry import builtin_names, load

    cuda = [load(n, "cpu") for n in builtin_names() if n.startswith("cuda-")]
    assert len(cuda) >= 6 and all(la.isolate for la in cuda)
    assert {worker_key(la.spec, getattr(la.adapter, "process_group", None)) for la in cuda} == {"attn_kernels"}


def test_torch_attention_shares_one_worker_process():
    """SDPA's four backends (and their spellings), flex and cuDNN's FP8 graph are torch's: one process per run worker,
    not eight (tox -e gpu on the H100 held 60-odd CUDA contexts of ~620 MiB each, and large cases ran out of memory)."""
    from attention_conformance.adapters.registry import builtin_names, load

    names = [n for n in builtin_names() if n.startswith(("torch-sdpa-", "torch-flex", "cudnn-fp8"))]
    names += ["torch-sdpa-cudnn@causal_lower_right", "torch-sdpa-math@bool_mask"]
    loaded = [load(n, "cpu") for n in names]
    assert len(loaded) >= 7
    keys = {worker_key(la.spec, getattr(la.adapter, "process_group", None)) for la in loaded if la.adapter is not None}
    assert keys == {"torch"}
    assert worker_key("flash-attn-4@paged") == "flash-attn-4"  # another library keeps its own


def test_one_worker_process_serves_several_specs_each_loaded_once(toys_on_path):
    client = WorkerClient("engine_toys:IsolatedCorrect", "cpu", timeout=120)
    try:
        inputs = make_inputs(CASE)
        first = client.call("forward", inputs, CASE)
        pid = client.proc.pid
        other = client.call("forward", inputs, CASE, spec="engine_toys:OracleToy")
        again = client.call("forward", inputs, CASE, spec="engine_toys:IsolatedCorrect")
        assert client.proc.pid == pid and client.restarts == 0
        assert first.error is None and other.error is None and again.error is None, (first.error, other.error)
        assert client._loaded == {"engine_toys:IsolatedCorrect", "engine_toys:OracleToy"}
    finally:
        client.close()


def test_the_conformance_tests_and_the_property_suite_share_a_pool_of_worker_processes(toys_on_path):
    """The pytest plugin hands one `WorkerPool` to its conformance runner and to the property suite
    (`kernel_check.share_gpu`): an isolated adapter runs in one process per pytest-xdist worker, not one per suite and
    adapter (the H100's tox -e gpu held 65 CUDA contexts, ~0.6 GiB each, and its large cases ran out of memory)."""
    from attention_conformance.adapters.registry import load
    from attention_conformance.property_tests import kernel_check
    from attention_conformance.running.engine import Runner
    from attention_conformance.running.worker import WorkerPool

    pool = WorkerPool()
    la = load("engine_toys:IsolatedCorrect", "cpu")
    runner = Runner([la], "cpu", determinism="none", workers=pool)
    try:
        assert runner.run_case(la, CASE).outcome == "PASS"
        key = worker_key(la.spec)
        pid = pool[key].proc.pid
        kernel_check.share_gpu(None, pool)
        assert kernel_check.evaluate(la.adapter, CASE, "cpu", spec=la.spec).outcome == "PASS"
        assert len(pool) == 1 and pool[key].proc.pid == pid and pool[key].restarts == 0
        runner.close()  # a runner leaves a pool it was given to its owner
        assert pool[key].proc is not None
    finally:
        kernel_check.share_gpu(None)
        pool.close()
    assert len(pool) == 0
