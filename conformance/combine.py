"""Join reports of one profile and device that ran different adapters (or re-ran some cases) into one report.

`conformance.running.shard` joins the N shards of *one* run (same adapters, disjoint cases). A device report is
often assembled from several runs instead: the torch backends and our CUDA kernels in one call, a vendor
library that must be installed first in another, a re-run of a few cases after a fix. `combine` keys every
result by (case id, adapter spec): a later report's result replaces an earlier one's for the same key (the
replaced count is recorded per input in ``merged_from``), results come out in the profile's catalog order,
and the report is ``partial`` when an input was, or when an adapter lacks a result for a case another
input has. The summary is recounted from the joined results (`conformance.report.build_report`).

`reexpect` applies expectations entries again to stored results (the raw outcome of a KNOWN result is
kept in ``expectation.raw_outcome``): triage an existing report with an expectations file written after
the run, without running it again. Both are reached through ``python -m attention_conformance merge``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from attention_conformance.cases.case import Case
from attention_conformance.running.engine import CaseResult
from attention_conformance.running.shard import ShardError, results_of
from attention_conformance.verdict.expectations import Expectation, RunContext, apply

__all__ = ["combine", "reexpect", "run_context"]


def _catalog_order(profile: str) -> dict[str, int]:
    from attention_conformance.cases.catalog import cases

    try:
        return {c.id: i for i, c in enumerate(cases(profile))}
    except (KeyError, ValueError):
        return {}


def combine(reports: Sequence[tuple[str, dict]]) -> tuple[dict, list[CaseResult]]:
    """(report dict, results) joining ``[(path, report.json dict), ...]``; raises `ShardError` naming the file
    when the reports are of different profiles, devices or schema versions."""
    if not reports:
        raise ShardError("merge: no report given")
    first_path, first = reports[0]
    for path, rep in reports[1:]:
        for key in ("profile", "device", "schema_version"):
            if rep.get(key) != first.get(key):
                raise ShardError(f"merge: {path} has {key} {rep.get(key)!r}, {first_path} has {first.get(key)!r}")
    by_key: dict[tuple[str, str], CaseResult] = {}
    adapters: dict[str, dict] = {}
    growth: dict[tuple[str, str], dict] = {}  # (adapter, shape) -> memory_growth row (judged with the claims)
    merged_from = []
    for path, rep in reports:
        for row in rep.get("memory_growth", []):
            growth[(row.get("adapter", ""), row.get("shape", ""))] = row
        replaced = 0
        for r in results_of(rep):
            replaced += (r.case_id, r.spec) in by_key
            by_key[(r.case_id, r.spec)] = r
        for a in rep.get("adapters", []):
            adapters[a.get("spec") or a.get("name")] = a
        merged_from.append({"path": path, "created": rep.get("created"), "command": rep.get("command"),
                            "wall_seconds": rep.get("wall_seconds"), "partial": bool(rep.get("partial")),
                            "results": len(rep.get("results", [])), "replaced": replaced,
                            "adapters": [a.get("spec") for a in rep.get("adapters", [])],
                            "environment": rep.get("environment")})
    order = _catalog_order(first["profile"])
    case_ids = sorted({cid for cid, _ in by_key}, key=lambda c: (order.get(c, len(order)), c))
    specs = list(adapters)
    results = [by_key[(cid, s)] for cid in case_ids for s in specs if (cid, s) in by_key]
    planned = max([len(case_ids)] + [int(r.get("cases_planned") or 0) for _, r in reports])
    missing = {s: sum((cid, s) not in by_key for cid in case_ids) for s in specs}
    partial = any(m["partial"] for m in merged_from) or any(missing.values())

    from attention_conformance.report import build_report

    extra = {"cases_planned": planned, "partial": partial, "merged_from": merged_from,
             "memory_growth": list(growth.values()),
             "cpu_seconds": round(sum(float(r.get("wall_seconds") or 0.0) for _, r in reports), 3)}
    if any(missing.values()):
        extra["missing_results"] = {s: n for s, n in missing.items() if n}
    last = reports[-1][1]
    merged = build_report(results, [], profile=first["profile"], device=first["device"],
                          wall_seconds=sum(float(r.get("wall_seconds") or 0.0) for _, r in reports),
                          command=["python", "-m", "attention_conformance", "merge", *[p for p, _ in reports]],
                          extra=extra)
    merged["adapters"] = list(adapters.values())
    merged["environment"] = last.get("environment", merged["environment"])
    return merged, results


def run_context(rep: dict) -> RunContext:
    """The expectations context of a stored report: its device, GPU names and adapter versions."""
    versions: dict[str, str] = {}
    for a in rep.get("adapters", []):
        if a.get("version") is not None:
            versions[a.get("name", "")] = versions[a.get("spec", a.get("name", ""))] = str(a["version"])
    gpus = tuple(g.get("name", "") for g in (rep.get("environment") or {}).get("gpus", []))
    return RunContext(rep.get("device", "cpu"), gpus, versions)


def _raw(r: CaseResult) -> CaseResult:
    """`r` as the judge gave it: the outcome before any expectation, without the note an entry added."""
    if not r.expectation:
        return r
    r = copy.copy(r)
    r.outcome = r.expectation.get("raw_outcome", r.outcome)
    note = r.expectation.get("note")
    if note is None:  # reports written before the note was stored: it is the message's first line
        note = r.message.partition("\n")[0]
    r.message = r.message.removeprefix(note).removeprefix("\n")
    r.expectation = None
    return r


def reexpect(results: Sequence[CaseResult], entries: Sequence[Expectation], ctx: RunContext
             ) -> tuple[list[CaseResult], dict]:
    """`results` with `entries` applied to their raw outcomes (earlier expectations undone first)."""
    raw = [_raw(r) for r in results]
    return apply(entries, [(Case.from_dict(r.case), r) for r in raw], ctx)
