"""Sharded runs: ``run --shard K/N`` runs one part of a profile, ``merge`` joins the parts into one report.

A CI system that runs N jobs in parallel is the distributed engine; this module only makes the split
deterministic and the join exact:

- `plan(cases, n)` splits a case selection into ``n`` bins balanced by `conformance.cases.catalog.estimated_cost`
  (greedy longest-processing-time: cases by decreasing cost, ties in catalog order, each into the bin with
  the least cost so far, ties to the lowest bin). The same selection gives the same split on every machine.
- `select(cases, spec)` returns shard ``K`` of ``N`` (1-based, ``"2/3"``), in catalog order, and the
  ``shard`` record a shard's report.json carries: the shard, the size and a digest of the whole selection,
  and each of its cases' positions in it.
- `merge(reports)` checks that the reports are the N shards of one selection (same digest, profile, device
  and adapters, every shard once, no case twice) and returns the report one run would have written: the
  results in catalog order, the summary recounted, ``merged_from`` listing the shards.

Adapters judge each case on its own (the oracle is per case, SEMANTICS.md §1 fixes the semantics), so
a case's outcome does not depend on which shard ran it.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence
from dataclasses import fields

from attention_conformance.cases.case import Case
from attention_conformance.cases.catalog import estimated_cost
from attention_conformance.running.engine import CaseResult

__all__ = ["ShardError", "parse_spec", "plan", "selection_digest", "select", "merge", "results_of"]


class ShardError(ValueError):
    """A bad ``--shard`` spec, or reports that are not the shards of one run."""


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


_RESULT_FIELDS = {f.name for f in fields(CaseResult)}


def results_of(rep: dict) -> list[CaseResult]:
    """The `CaseResult`s of a loaded report.json (keys this version does not know are dropped)."""
    return [CaseResult(**{k: v for k, v in r.items() if k in _RESULT_FIELDS}) for r in rep.get("results", [])]


def _strip_shard(command: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in command:
        if skip:
            skip = False
        elif a == "--shard":
            skip = True
        elif not a.startswith("--shard="):
            out.append(a)
    return out


def _merge_expectations(summaries: Sequence[dict]) -> dict:
    """The expectations summary of one run from its shards': counts summed, unused = unused in every shard."""
    used: dict[str, int] = {}
    for sm in summaries:
        for label, n in sm.get("used", {}).items():
            used[label] = used.get(label, 0) + int(n)
    unused = [label for label in summaries[0].get("unused", []) if all(label in sm.get("unused", [])
                                                                       for sm in summaries)]
    return {**summaries[0], "used": used, "unused": unused,
            "known": sum(int(sm.get("known", 0)) for sm in summaries),
            "unexpected_pass": sum(int(sm.get("unexpected_pass", 0)) for sm in summaries)}


def merge(reports: Sequence[tuple[str, dict]]) -> tuple[dict, list[CaseResult]]:
    """Join the shard reports ``[(path, report.json dict), ...]`` into (report dict, results) of one run.

    The summary is recounted from the joined results (`conformance.report.build_report`), the wall time is
    the slowest shard's (``cpu_seconds`` sums them), ``merged_from`` lists each shard's file, time and
    environment; raises `ShardError` naming the file when the reports are not the N shards of one selection.
    """
    if not reports:
        raise ShardError("merge: no report given")
    shards: dict[int, tuple[str, dict]] = {}
    first_path, first = reports[0]
    ref = first.get("shard")
    for path, rep in reports:
        sh = rep.get("shard")
        if not isinstance(sh, dict):
            raise ShardError(f"merge: {path} is not a shard report (it has no 'shard' record; "
                             "run with --shard K/N)")
        if rep.get("partial"):
            raise ShardError(f"merge: {path} is a partial report ({rep.get('summary', {}).get('cases')} of "
                             f"{rep.get('cases_planned')} cases): its shard did not finish")
        for key in ("count", "selection_digest", "selection_cases"):
            if sh.get(key) != ref.get(key):
                raise ShardError(f"merge: {path} is from another split or case selection than {first_path} "
                                 f"(shard {key}: {sh.get(key)!r} vs {ref.get(key)!r})")
        for key in ("profile", "device", "schema_version"):
            if rep.get(key) != first.get(key):
                raise ShardError(f"merge: {path} has {key} {rep.get(key)!r}, {first_path} has {first.get(key)!r}")
        if [a.get("spec") for a in rep.get("adapters", [])] != [a.get("spec") for a in first.get("adapters", [])]:
            raise ShardError(f"merge: {path} ran other adapters than {first_path}")
        if sh["index"] in shards:
            raise ShardError(f"merge: {path} and {shards[sh['index']][0]} are both shard {sh['index']}/{sh['count']}")
        shards[sh["index"]] = (path, rep)
    n = ref["count"]
    missing = [k for k in range(1, n + 1) if k not in shards]
    if missing:
        raise ShardError(f"merge: shard(s) {', '.join(f'{k}/{n}' for k in missing)} missing")

    by_position: dict[int, list[CaseResult]] = {}
    for k in sorted(shards):
        path, rep = shards[k]
        positions = rep["shard"]["positions"]
        per_case: dict[str, list[CaseResult]] = {}
        for r in results_of(rep):
            per_case.setdefault(r.case_id, []).append(r)
        if len(per_case) != len(positions):
            raise ShardError(f"merge: {path} has results for {len(per_case)} cases, its shard record lists "
                             f"{len(positions)}")
        for pos, rs in zip(positions, per_case.values(), strict=True):  # both in catalog order
            if pos in by_position:
                raise ShardError(f"merge: case {rs[0].case_id} appears in two shards")
            by_position[pos] = rs
    if sorted(by_position) != list(range(ref["selection_cases"])):
        raise ShardError(f"merge: the shards cover {len(by_position)} of {ref['selection_cases']} cases")
    results = [r for pos in sorted(by_position) for r in by_position[pos]]

    from attention_conformance.report import build_report

    extra = {k: v for k, v in first.items() if k not in ("results", "summary", "shard", "created", "command",
                                                          "profile", "device", "wall_seconds", "environment",
                                                          "adapters", "schema_version", "expectations")}
    extra["cases_planned"] = ref["selection_cases"]
    extra["cpu_seconds"] = round(sum(float(shards[k][1].get("wall_seconds", 0.0)) for k in shards), 3)
    extra["merged_from"] = [{"path": shards[k][0], "shard": f"{k}/{n}", "created": shards[k][1].get("created"),
                             "wall_seconds": shards[k][1].get("wall_seconds"),
                             "cases": len(shards[k][1]["shard"]["positions"]),
                             "estimated_cost": shards[k][1]["shard"].get("estimated_cost"),
                             "environment": shards[k][1].get("environment")} for k in sorted(shards)]
    summaries = [shards[k][1].get("expectations") for k in sorted(shards)]
    if all(isinstance(x, dict) for x in summaries):
        extra["expectations"] = _merge_expectations(summaries)
    merged = build_report(results, [], profile=first["profile"], device=first["device"],
                          wall_seconds=max(float(shards[k][1].get("wall_seconds", 0.0)) for k in shards),
                          command=_strip_shard(first.get("command") or []), extra=extra)
    merged["adapters"] = first.get("adapters", [])
    merged["environment"] = first.get("environment", merged["environment"])
    return merged, results
