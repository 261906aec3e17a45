"""``repro --shrink`` (conformance/reproduce/shrink.py): a smaller case that still fails, greedy over one batch entry,
fewer heads, shorter lengths and smaller head dims; every other field kept."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from attention_conformance.cases import catalog
from attention_conformance.cases.case import Case
from attention_conformance.reproduce.shrink import reductions, shrink, size

BASE = Case(family="unit", B=3, Hq=8, Hkv=2, Lq=129, Lk=129, d=64, dv=64, dtype="float16", causal=True, seed=7)


def test_a_tail_tile_bug_shrinks_to_one_key_and_keeps_the_features():
    """A bug that needs Lk % 64 == 1 (a dropped tail tile) ends at Lk = 1, everything else at its smallest."""
    result = shrink(BASE, lambda c: c.Lk % 64 == 1)
    small = result.case
    assert (small.B, small.Lq, small.Lk, small.d) == (1, 1, 1, 8)
    assert small.Hq // small.Hkv == 4 or (small.Hq, small.Hkv) == (2, 1)  # still GQA
    assert small.causal and small.seed == BASE.seed and small.dtype == BASE.dtype
    assert result.path[0] == BASE and all(size(b) < size(a) for a, b in zip(result.path, result.path[1:]))


def test_a_bug_that_needs_gqa_keeps_a_group():
    result = shrink(BASE, lambda c: c.Hq != c.Hkv)
    assert result.case.Hkv == 1 and result.case.Hq == 2


def test_varlen_lengths_follow_the_shorter_sequences():
    case = dataclasses.replace(BASE, B=2, Hq=2, Hkv=2, Lq=40, Lk=80, seqlens_q=(33, 40), seqlens_k=(80, 17))
    shorter = [c for c in reductions(case) if c is not None and c.Lk == 40]
    assert shorter and shorter[0].seqlens_k == (40, 17)
    one = next(c for c in reductions(case) if c is not None and c.B == 1)
    assert one.seqlens_q == (33,) and one.seqlens_k == (80,)


def test_the_search_stops_at_its_budget_and_never_grows_a_case():
    calls = []
    result = shrink(BASE, lambda c: calls.append(c) or True, max_tries=3)
    assert result.tries == 3 == len(calls) and size(result.case) < size(BASE)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "attention_conformance", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_repro_shrink_prints_the_smallest_failing_case_and_its_repro():
    pytest.importorskip("torch")
    case = catalog.select(catalog.cases("ci"), "tile_edges and q129k129 and not causal")[0]
    broken = "attention_conformance.examples.broken_sdpa:attention"
    p = _cli("repro", case.id, "--impl", broken, "--shrink")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "(size 16)" in p.stdout and "B=1 Hq=1 Hkv=1 Lq=1 Lk=1 d=8 dv=8" in p.stdout, p.stdout
    repro = next(line for line in p.stdout.splitlines() if line.startswith("repro: "))
    assert repro.endswith(f"--impl {broken} --run")
    good = _cli("repro", case.id, "--impl", "torch-sdpa-math", "--shrink")
    assert good.returncode == 0 and "nothing to shrink" in good.stdout
    assert _cli("repro", case.id, "--impl", broken, "--shrink", "--run").returncode == 2
