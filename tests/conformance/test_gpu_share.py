"""The GPU that pytest-xdist's workers share (conformance/running/gpu_share.py, issue 43): a call that ran out of
device memory beside the other workers runs again alone, as the CLI re-runs it alone, so both front ends give the
same verdict. On an 80 GB H100 under tox -e gpu with 8 workers the plugin's retries had run beside the others."""

from __future__ import annotations

import multiprocessing
import os
import time
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from attention_conformance.adapters.registry import load
from attention_conformance.cases import catalog
from attention_conformance.running.engine import Runner
from attention_conformance.running.gpu_share import GpuShare

pytest.importorskip("fcntl")

HERE = os.path.dirname(os.path.abspath(__file__))
EMPTY_ROWS = catalog._seeded(catalog._mk("unit", Lq=12, Lk=12, d=16, dtype="float32", mask="full_rows"))


def _case_in_flight(folder: str, seconds: float, started, ended) -> None:
    share = GpuShare(folder)
    with share.shared():
        started.set()
        time.sleep(seconds)
        ended.value = time.monotonic()


def _case_after(folder: str, go, began) -> None:
    assert go.wait(10)
    with GpuShare(folder).shared():
        began.value = time.monotonic()


@pytest.mark.timeout(60)
def test_alone_waits_for_the_cases_in_flight_and_holds_new_ones_back(tmp_path):
    # both processes forked before this one holds a lock: a child forked while the parent holds one would share the
    # parent's open file and keep the lock after the parent let it go (the harness's workers start by exec, whose
    # files do not carry Python's non-inheritable descriptors)
    ctx = multiprocessing.get_context("fork")
    started, go = ctx.Event(), ctx.Event()
    ended, began = ctx.Value("d", 0.0), ctx.Value("d", 0.0)
    first = ctx.Process(target=_case_in_flight, args=(str(tmp_path), 0.6, started, ended))
    later = ctx.Process(target=_case_after, args=(str(tmp_path), go, began))
    first.start()
    later.start()
    try:
        assert started.wait(10)
        share = GpuShare(tmp_path)
        with share.shared():  # this process's own case, which gives up its hold for the retry alone
            t_ask = time.monotonic()
            with share.alone():
                t_alone = time.monotonic()
                go.set()  # a case that wants to start while this one is alone
                time.sleep(0.4)
                t_done = time.monotonic()
    finally:
        go.set()
        first.join(10)
        later.join(10)
    assert ended.value > t_ask and t_alone >= ended.value  # waited for the case in flight to end
    assert began.value >= t_done  # the later case started only after the call alone
    assert first.exitcode == 0 and later.exitcode == 0


class _RecordingShare:
    def __init__(self):
        self.events: list[str] = []

    @contextmanager
    def alone(self):
        self.events.append("alone")
        yield
        self.events.append("shared again")

    @contextmanager
    def shared(self):
        self.events.append("shared")
        yield
        self.events.append("released")


def test_the_engine_runs_the_second_call_alone(monkeypatch, tmp_path):
    monkeypatch.setenv("TOY_OOM_MARKER", str(tmp_path / "ran-out"))
    monkeypatch.syspath_prepend(HERE)
    share = _RecordingShare()
    runner = Runner([load("engine_toys:OutOfMemoryBesideOthers")], "cpu", determinism="none", share=share)
    calls = []
    verdict = runner.verdict
    monkeypatch.setattr(runner, "verdict", lambda la, case: calls.append(list(share.events)) or verdict(la, case))
    r = runner.run_case(runner.adapters[0], EMPTY_ROWS)
    assert r.outcome == "PASS", r.message
    assert calls == [[], ["alone"]] and share.events == ["alone", "shared again"]
    assert any("run a second time alone" in n and "out of device memory" in n for n in r.notes), r.notes


def test_the_plugin_runs_each_case_holding_the_share_on_cuda(tmp_path):
    from attention_conformance.pytest_plugin import ConformanceSession
    from attention_conformance.running.oracle_store import OracleStore

    made = {}

    def runner(**kw):
        made.update(kw)
        return SimpleNamespace(run_case=lambda la, case: "result", cache=SimpleNamespace(evict=lambda _: None),
                               close=lambda: None)

    run = SimpleNamespace(device="cuda", loaded=[], runner=runner)
    session = ConformanceSession(run, [], OracleStore(tmp_path))
    assert isinstance(made["share"], GpuShare) and made["share"] is session.share
    session.share = _RecordingShare()
    assert session._run_case(None, EMPTY_ROWS) == "result" and session.share.events == ["shared", "released"]
    for device, store in (("cpu", OracleStore(tmp_path)), ("cuda", None)):  # one process, or nothing on a GPU
        made.clear()
        ConformanceSession(SimpleNamespace(device=device, loaded=[], runner=runner), [], store)
        assert made["share"] is None


def test_the_property_suite_retries_alone_through_the_same_rule(monkeypatch, tmp_path):
    """The property suite's examples decide through `Runner.settled_verdict` too: a call that ran out of device memory
    runs again, alone on the share `kernel_check.share_gpu` gave (the H100's tox -e gpu had property failures that
    were only this)."""
    from attention_conformance.property_tests import kernel_check

    monkeypatch.setenv("TOY_OOM_MARKER", str(tmp_path / "ran-out"))
    monkeypatch.syspath_prepend(HERE)
    share = _RecordingShare()
    kernel_check.share_gpu(share)
    try:
        toy = load("engine_toys:OutOfMemoryBesideOthers").adapter
        v = kernel_check.evaluate(toy, EMPTY_ROWS, "cpu")  # on the CPU: no shared hold, the retry alone all the same
    finally:
        kernel_check.share_gpu(None)
    assert v.outcome == "PASS", v.message
    assert share.events == ["alone", "shared again"]
    assert any("run a second time alone" in n for n in v.notes), v.notes


def test_one_share_per_folder_in_a_process(tmp_path):
    """The plugin's hold around a test, its conformance cases' and the property suite's are one object: a retry
    alone inside a case gives up the hold the plugin took for the test instead of waiting for it (for ever)."""
    share = GpuShare.of_run(tmp_path, "cuda")
    assert share is GpuShare.of_run(str(tmp_path), "cuda:0") and share is not GpuShare.of_run(tmp_path / "x", "cuda")
    assert share is GpuShare.of_run(f"{tmp_path}/", "cuda")
    assert GpuShare.of_run(tmp_path, "cpu") is None and GpuShare.of_run(None, "cuda") is None
    with share.shared(), GpuShare.of_run(tmp_path, "cuda").shared(), share.alone():
        pass  # would block on this process's own shared hold if the two were separate objects


def test_workers_of_another_gpu_do_not_wait(tmp_path, monkeypatch):
    """Each GPU has its own files: a process alone on GPU 0 waits for no case on GPU 1, and for one on GPU 0."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    mine = GpuShare.of_run(tmp_path / "pinned", "cuda")
    assert mine.gpus == "0"
    # forked before any lock is held (a child forked while its parent holds one keeps it: see the first test)
    ctx = multiprocessing.get_context("fork")
    go, alone = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_alone_on, args=(str(tmp_path), "0", go, alone))
    p.start()
    try:
        with GpuShare(tmp_path, "1").shared():
            with GpuShare(tmp_path, "0").alone():  # returns at once: nothing held on GPU 0
                pass
            with GpuShare(tmp_path, "0").shared():
                go.set()
                time.sleep(0.5)
                assert not alone.is_set(), "alone on GPU 0 while a case held it"
            assert alone.wait(10), "still waiting on GPU 0 once its case ended (held back by GPU 1's?)"
    finally:
        p.join(10)


def _alone_on(folder: str, gpus: str, go, alone) -> None:
    assert go.wait(10)
    with GpuShare(folder, gpus).alone():
        alone.set()
