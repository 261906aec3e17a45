"""The store the processes of one run share inputs, oracles and the memory family's raw results through
(conformance/running/oracle_store.py): one process computes an entry, the others read it; a failure, an
unpicklable value, a value too large are never stored; under pytest-xdist each case's oracle is made once."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from attention_conformance.cases import catalog
from attention_conformance.running import oracle_store
from attention_conformance.running.engine import OracleCache
from attention_conformance.running.oracle_store import OracleStore


def test_one_process_computes_an_entry_and_another_reads_it(tmp_path):
    mine, theirs = OracleStore(tmp_path), OracleStore(tmp_path)
    value = {"out": np.arange(6.0).reshape(2, 3)}
    assert mine.fetch("oracle x", lambda: value) is value
    got = theirs.fetch("oracle x", lambda: pytest.fail("the entry was stored: no second computation"))
    np.testing.assert_array_equal(got["out"], value["out"])
    assert (mine.computed, mine.loaded, theirs.computed, theirs.loaded) == (1, 0, 0, 1)
    assert not list(tmp_path.glob("*.tmp"))  # written under a temporary name, renamed into place


def test_what_is_not_kept_unpicklable_or_too_large_is_computed_again(tmp_path, monkeypatch):
    store = OracleStore(tmp_path)
    store.fetch("failed", lambda: ("traceback",), keep=lambda v: False)
    assert store.fetch("failed", lambda: ("again",)) == ("again",)
    store.fetch("lambda", lambda: (lambda: 1))  # not picklable: returned, not stored
    assert store.fetch("lambda", lambda: 2) == 2
    monkeypatch.setattr(oracle_store, "MAX_BYTES", 100)
    store.fetch("big", lambda: np.zeros(1000))
    assert store.fetch("big", lambda: "made again") == "made again"
    assert not list(tmp_path.glob("*.tmp"))


def _slow_fetch(folder: str, log: str) -> float:
    def compute():
        with open(log, "a") as fh:
            fh.write("computed\n")
        time.sleep(0.5)
        return np.ones(4)

    return float(OracleStore(folder).fetch("oracle shared", compute).sum())


@pytest.mark.skipif(oracle_store.fcntl is None, reason="no fcntl: the store computes every entry itself")
def test_processes_that_meet_an_entry_together_compute_it_once(tmp_path):
    log = tmp_path / "log"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        got = pool.starmap(_slow_fetch, [(str(tmp_path), str(log))] * 3)
    assert got == [4.0, 4.0, 4.0]
    assert log.read_text().count("computed") == 1


def test_the_oracle_cache_shares_inputs_and_oracle_through_the_store(tmp_path):
    case = next(c for c in catalog.cases("ci") if c.family == "tile_edges")
    first, second = OracleCache(OracleStore(tmp_path)), OracleCache(OracleStore(tmp_path))
    inputs, od, err = first.get(case)
    assert err is None
    inputs2, od2, err2 = second.get(case)
    assert err2 is None and second.store.loaded == 1 and second.store.computed == 0
    np.testing.assert_array_equal(inputs2.q, inputs.q)
    np.testing.assert_array_equal(od2.out, od.out)
    np.testing.assert_array_equal(od2.naive_out, od.naive_out)


def test_under_xdist_each_case_oracle_is_made_once_and_the_store_is_removed(tmp_path):
    """``-n 2 --maxschedchunk 1``: the (case, adapter) tests of a case land on both workers; its oracle is computed
    by one of them (a conftest counts the calls), the verdicts are those of one process, and the store's folder is
    gone at the end."""
    pytest.importorskip("xdist")
    log = tmp_path / "oracles.log"
    store_root = tmp_path / "tmp"
    store_root.mkdir()
    (tmp_path / "conftest.py").write_text(
        "import attention_conformance.running.engine as engine\n"
        "_compute = engine.compute_oracle\n"
        "def _counting(case, inputs):\n"
        f"    with open({str(log)!r}, 'a') as fh:\n"
        "        fh.write(case.id + '\\n')\n"
        "    return _compute(case, inputs)\n"
        "engine.compute_oracle = _counting\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["TMPDIR"] = str(store_root)
    impls = ["torch-sdpa-math", "reference-fa2", "reference-fa1", "attention_conformance.examples.good_sdpa:attention"]
    cases = "tile_edges and (q1k129 or q129k1 or q65k65 or q5k5)"  # 8 cases (2 causal), 32 tests a run
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--pyargs",
            "attention_conformance", "--profile", "ci", "--cases", cases, "--impl", *impls]
    outs = {}
    for name, extra in (("xdist", ["-n", "2", "--maxschedchunk", "1"]), ("one", [])):
        log.unlink(missing_ok=True)
        p = subprocess.run([*args, *extra, "-rA"], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        ids = log.read_text().split()
        assert ids and len(ids) == len(set(ids)), f"{name}: an oracle computed twice"
        outs[name] = sorted(line.split(" ", 1)[1] for line in p.stdout.splitlines()
                            if line.startswith(("PASSED ", "SKIPPED ", "XFAIL ", "FAILED ", "ERROR ")))
    assert outs["xdist"] == outs["one"]
    assert not list(Path(store_root).glob("attention-conformance-store-*"))


def test_the_memory_family_raw_results_are_shared_by_the_workers(tmp_path):
    """Each test of a memory-growth series needs its adapter's raw result on every case of the series: under
    pytest-xdist a worker reads what another ran (`ConformanceSession._raw` through the store)."""
    from types import SimpleNamespace

    from attention_conformance.pytest_plugin import ConformanceSession
    from attention_conformance.verdict import growth

    calls: list[str] = []

    class Runner:
        cache = OracleCache()

        def run_case(self, la, case):
            calls.append(case.id)
            return {"case": case.id, "spec": la.spec}

    run = SimpleNamespace(device="cpu", loaded=[SimpleNamespace(spec="x")], runner=lambda **kw: Runner())
    memory = next(c for c in catalog.cases("gpu") if c.family == growth.FAMILY)
    mine, theirs = (ConformanceSession(run, [memory], OracleStore(tmp_path)) for _ in range(2))
    la = run.loaded[0]
    assert mine._raw(la, memory) == theirs._raw(la, memory) == {"case": memory.id, "spec": "x"}
    assert calls == [memory.id]  # run once, by the first; the second read it
