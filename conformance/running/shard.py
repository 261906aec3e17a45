"""Sharded runs: ``run --shard K/N`` runs one part of a profile (``merge`` joins the parts: reporting.merge).

A CI system that runs N jobs in parallel is the distributed engine; this module only makes the split
deterministic (the join, `conformance.reporting.merge.merge_shards`, is exact):

- `plan(cases, n)` splits a case selection into ``n`` bins balanced by `conformance.cases.catalog.estimated_cost`
  (greedy longest-processing-time: cases by decreasing cost, ties in catalog order, each into the bin with
  the least cost so far, ties to the lowest bin). The same selection gives the same split on every machine.
- `select(cases, spec)` returns shard ``K`` of ``N`` (1-based, ``"2/3"``), in catalog order, and the
  ``shard`` record a shard's report.json carries: the shard, the size and a digest of the whole selection,
  and each of its cases' positions in it.

Adapters judge each case on its own (the oracle is per case, SEMANTICS.md §1 fixes the semantics), so
a case's outcome does not depend on which shard ran it.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence

from attention_conformance.cases.case import Case
from attention_conformance.cases.catalog import estimated_cost

__all__ = ["ShardError", "parse_spec", "plan", "selection_digest", "select"]


class ShardError(ValueError):
    """A bad ``--shard`` spec."""


def parse_spec(spec: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 1 <= K <= N."""
    k_s, sep, n_s = str(spec).partition("/")
    try:
        k, n = int(k_s), int(n_s)
    except ValueError:
        k = n = 0
    if not sep or n < 1 or not 1 <= k <= n:
        raise ShardError(f"--shard {spec!r}: expected K/N with 1 <= K <= N, e.g. 1/4")
    return k, n


def plan(cases: Sequence[Case], n: int) -> list[list[int]]:
    """Positions (into `cases`) of each of the ``n`` bins, each bin in catalog order (greedy LPT)."""
    if n < 1:
        raise ShardError(f"shard count must be >= 1, got {n}")
    order = sorted(range(len(cases)), key=lambda i: (-estimated_cost(cases[i]), i))
    heap = [(0.0, b) for b in range(n)]  # (load, bin): the least-loaded bin, ties to the lowest index
    bins: list[list[int]] = [[] for _ in range(n)]
    for i in order:
        load, b = heapq.heappop(heap)
        bins[b].append(i)
        heapq.heappush(heap, (load + estimated_cost(cases[i]), b))
    return [sorted(b) for b in bins]


def selection_digest(cases: Sequence[Case]) -> str:
    """sha256 of the selection's case ids in order: shards of one selection share it."""
    h = hashlib.sha256()
    for c in cases:
        h.update(c.id.encode())
        h.update(b"\n")
    return h.hexdigest()


def select(cases: Sequence[Case], spec: str) -> tuple[list[Case], dict]:
    """Shard ``K/N`` of `cases` (catalog order) and the ``shard`` record for its report."""
    k, n = parse_spec(spec)
    positions = plan(cases, n)[k - 1]
    mine = [cases[i] for i in positions]
    record = {"index": k, "count": n, "selection_cases": len(cases), "selection_digest": selection_digest(cases),
              "positions": positions, "estimated_cost": sum(estimated_cost(c) for c in mine)}
    return mine, record
