"""``run --workers N`` (conformance/running/parallel.py, issue 7): GPU pinning, largest-first order, crash isolation.

The end-to-end comparison of 1 and 2 workers through the CLI is in test_cli.py.
"""

from __future__ import annotations

import os

import pytest

from attention_conformance.adapters.registry import load
from attention_conformance.cases import catalog
from attention_conformance.running import parallel

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = catalog._seeded(catalog._mk("unit", Lq=17, Lk=33, d=16, dtype="float32"))
EMPTY_ROWS = catalog._seeded(catalog._mk("unit", Lq=12, Lk=12, d=16, dtype="float32", mask="full_rows"))
BIG = catalog._seeded(catalog._mk("unit", Lq=65, Lk=129, d=32, dtype="float32"))


@pytest.fixture
def toys_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(HERE)


def test_gpu_for_worker_is_round_robin_over_visible_gpus(monkeypatch):
    assert [parallel.gpu_for_worker(i, ["0", "1"]) for i in range(5)] == ["0", "1", "0", "1", "0"]
    assert parallel.gpu_for_worker(3, []) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert parallel.visible_gpus() == ["2", "5"]
    assert parallel.gpu_for_worker(1) == "5"


def test_cases_are_handed_out_largest_estimated_cost_first(toys_on_path, monkeypatch):
    handed: list[str] = []
    submit = parallel._Worker.submit

    def recording_submit(self, case):
        handed.append(case.id)
        submit(self, case)

    monkeypatch.setattr(parallel._Worker, "submit", recording_submit)
    cases = [SMALL, BIG, EMPTY_ROWS]
    results = parallel.run_parallel([load("engine_toys:IsolatedCorrect")], cases, "cpu", workers=1,
                                    determinism="none")
    costs = {c.id: catalog.estimated_cost(c) for c in cases}
    assert handed[0] == BIG.id and [costs[i] for i in handed] == sorted(costs.values(), reverse=True), handed
    assert [r.case_id for r in results] == [c.id for c in cases], "results must come back in catalog order"
    assert [r.outcome for r in results] == ["PASS"] * 3, [(r.outcome, r.message) for r in results]


def test_a_dying_worker_costs_only_its_case(toys_on_path):
    crashing = load("engine_toys:AbortsInProcessOnEmptyRows")
    assert crashing.available and not crashing.isolate, crashing.reason
    cases = [SMALL, EMPTY_ROWS, BIG]
    results = parallel.run_parallel([crashing], cases, "cpu", workers=2, determinism="none")
    outcomes = {r.case_id: r.outcome for r in results}
    assert outcomes == {SMALL.id: "PASS", EMPTY_ROWS.id: "CRASH", BIG.id: "PASS"}, [
        (r.case_id, r.outcome, r.message) for r in results]
    crash = next(r for r in results if r.outcome == "CRASH")
    assert "died" in crash.message and crash.repro.startswith("python -m attention_conformance repro")


def test_a_long_run_prints_progress_by_time_not_only_by_case_count(toys_on_path, monkeypatch):
    """A case of many adapters that build kernels can take minutes: a progress line comes at least every
    `engine.PROGRESS_SECONDS` (0 here: after every case) even when `every` cases have not finished."""
    from attention_conformance.running import engine

    monkeypatch.setattr(engine, "PROGRESS_SECONDS", 0.0)
    lines: list[str] = []
    parallel.run_parallel([load("engine_toys:IsolatedCorrect")], [SMALL, BIG], "cpu", workers=1,
                          determinism="none", progress=lines.append, every=100)
    assert len(lines) >= 2 and "running on 1 workers" in lines[0] and "ETA" in lines[0], lines
    lines.clear()
    runner = engine.Runner([load("engine_toys:IsolatedCorrect")], "cpu", determinism="none")
    try:
        runner.run([SMALL, BIG, EMPTY_ROWS], progress=lines.append, every=100)
    finally:
        runner.close()
    assert [ln.split("]")[0] for ln in lines] == ["[1/3 cases", "[2/3 cases", "[3/3 cases"], lines


def test_a_call_that_ran_out_of_memory_runs_a_second_time_at_once(toys_on_path, monkeypatch, tmp_path):
    monkeypatch.setenv("TOY_OOM_MARKER", str(tmp_path / "ran-out"))
    results = parallel.run_parallel([load("engine_toys:OutOfMemoryBesideOthers")], [SMALL, EMPTY_ROWS], "cpu",
                                    workers=1, determinism="none")
    assert [r.outcome for r in results] == ["PASS", "PASS"], [(r.outcome, r.message[:200]) for r in results]
    assert any("run a second time" in n and "out of device memory" in n for n in results[1].notes), results[1].notes


def test_a_case_that_ran_out_of_memory_twice_is_rerun_alone_at_the_end(toys_on_path, monkeypatch, tmp_path):
    monkeypatch.setenv("TOY_OOM_MARKER", str(tmp_path / "ran-out"))
    monkeypatch.setenv("TOY_OOM_TIMES", "2")  # the call and its immediate second run
    lines: list[str] = []
    results = parallel.run_parallel([load("engine_toys:OutOfMemoryBesideOthers")], [SMALL, EMPTY_ROWS, BIG], "cpu",
                                    workers=2, determinism="none", progress=lines.append)
    by_case = {r.case_id: r for r in results}
    assert [r.outcome for r in results] == ["PASS"] * 3, [(r.outcome, r.message[:200]) for r in results]
    assert any("re-run alone" in n for n in by_case[EMPTY_ROWS.id].notes), by_case[EMPTY_ROWS.id].notes
    assert not any("re-run alone" in n for n in by_case[SMALL.id].notes)
    assert any("re-running 1 case(s) alone" in line for line in lines), lines


def test_the_other_workers_are_stopped_before_the_rerun_alone(toys_on_path, monkeypatch, tmp_path):
    """Alone means alone: the idle workers (and the worker processes they hold, each a CUDA context) have exited
    when the re-run's first case is handed out."""
    monkeypatch.setenv("TOY_OOM_MARKER", str(tmp_path / "ran-out"))
    monkeypatch.setenv("TOY_OOM_TIMES", "2")
    started: list[parallel._Worker] = []
    init, submit = parallel._Worker.__init__, parallel._Worker.submit
    others_alive: list[list[bool]] = []

    def recording_init(self, *a, **k):
        init(self, *a, **k)
        started.append(self)

    def recording_submit(self, case):
        if case.id == EMPTY_ROWS.id and (tmp_path / "ran-out").exists():
            others_alive.append([x.proc.poll() is None for x in started if x is not self])
        submit(self, case)

    monkeypatch.setattr(parallel._Worker, "__init__", recording_init)
    monkeypatch.setattr(parallel._Worker, "submit", recording_submit)
    lines: list[str] = []
    results = parallel.run_parallel([load("engine_toys:OutOfMemoryBesideOthers")], [SMALL, EMPTY_ROWS, BIG], "cpu",
                                    workers=2, determinism="none", progress=lines.append)
    assert [r.outcome for r in results] == ["PASS"] * 3
    assert any("re-running 1 case(s) alone" in line for line in lines), lines
    assert others_alive and others_alive[-1] and not any(others_alive[-1]), others_alive


def test_out_of_memory_every_time_stays_a_harness_error(toys_on_path, monkeypatch, tmp_path):
    monkeypatch.setenv("TOY_OOM_MARKER", str(tmp_path / "ran-out"))
    monkeypatch.setenv("TOY_OOM_TIMES", "99")
    results = parallel.run_parallel([load("engine_toys:OutOfMemoryBesideOthers")], [SMALL, EMPTY_ROWS], "cpu",
                                    workers=2, determinism="none")
    assert [r.outcome for r in results] == ["PASS", "HARNESS_ERROR"], [(r.outcome, r.message[:200]) for r in results]
    assert results[1].message.startswith("out of device memory"), results[1].message


def test_workers_share_the_cores_and_keep_what_is_set(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    env = {"OMP_NUM_THREADS": "1"}
    parallel.share_cores(env, 8)
    assert env == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
                   "TORCHINDUCTOR_COMPILE_THREADS": "2"}
    assert parallel.threads_per_worker(32) == 1 and parallel.threads_per_worker(1) == 16


def test_an_xdist_worker_resizes_the_pools_it_has_loaded(monkeypatch):
    """The pytest plugin's xdist workers (tox -e gpu: 8 on 16 cores) once ran NumPy's FP64 oracles with every core
    each: the same kernel device test took 2 s alone and 77 s there."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    torch = pytest.importorskip("torch")
    for var in parallel.THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    before = torch.get_num_threads()
    limiter = parallel.share_cores_here(4)
    try:
        assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
        assert all(p["num_threads"] == 1 for p in threadpoolctl.threadpool_info()), threadpoolctl.threadpool_info()
    finally:
        torch.set_num_threads(before)
        limiter.restore_original_limits()


def test_the_progress_line_names_a_case_that_runs_long(toys_on_path, monkeypatch):
    """A run that seems stuck says on what: the progress line names the case running longest once it has run
    `SLOW_CASE_SECONDS` (0 here)."""
    from attention_conformance.running import engine

    monkeypatch.setattr(engine, "PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(parallel, "SLOW_CASE_SECONDS", 0.0)
    lines: list[str] = []
    parallel.run_parallel([load("engine_toys:SlowOnBigCases")], [BIG, SMALL], "cpu", workers=2, determinism="none",
                          progress=lines.append, every=100)
    assert any(f"longest running: {BIG.id} (" in ln for ln in lines), lines
