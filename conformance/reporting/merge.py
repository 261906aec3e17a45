"""Join stored reports into one report: the shards of one run, or runs over other adapters.

`merge_shards(reports)` checks that the reports are the N shards of one selection (``run --shard K/N``,
`conformance.running.shard`: same digest, profile, device and adapters, every shard once, no case twice) and
returns the report one run would have written: the results in catalog order, the summary recounted,
``merged_from`` listing the shards. Adapters judge each case on its own (the oracle is per case, SEMANTICS.md
§1 fixes the semantics), so a case's outcome does not depend on which shard ran it.

`combine(reports)` joins reports of one profile and device that ran different adapters (or re-ran some cases).
A device report is often assembled from several runs: the torch backends and our CUDA kernels in one call, a
vendor library that must be installed first in another, a re-run of a few cases after a fix. `combine` keys every
result by (case id, adapter spec): a later report's result replaces an earlier one's for the same key (the
replaced count is recorded per input in ``merged_from``, where a joined input stands for its runs), except an
adapter the later run could not load (not installed there: ``available`` false) where an earlier run had it, whose
results and version stay the earlier run's (``kept_from_earlier``); results come out in the profile's catalog
order, and the report is ``partial`` when an input was, or when an adapter lacks a result for a case another
input has. Both recount the summary from the joined results (`conformance.reporting.report.build_report`) and
are reached through ``python -m attention_conformance merge``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from attention_conformance.reporting.report import build_report
from attention_conformance.running.engine import CaseResult

__all__ = ["MergeError", "combine", "merge_shards", "results_of"]


class MergeError(ValueError):
    """Reports that cannot be joined: not the shards of one run, or runs of other profiles or devices."""


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


def merge_shards(reports: Sequence[tuple[str, dict]]) -> tuple[dict, list[CaseResult]]:
    """Join the shard reports ``[(path, report.json dict), ...]`` into (report dict, results) of one run.

    The summary is recounted from the joined results (`conformance.reporting.report.build_report`), the wall time is
    the slowest shard's (``cpu_seconds`` sums them), ``merged_from`` lists each shard's file, time and
    environment; raises `MergeError` naming the file when the reports are not the N shards of one selection.
    """
    if not reports:
        raise MergeError("merge: no report given")
    shards: dict[int, tuple[str, dict]] = {}
    first_path, first = reports[0]
    ref = first.get("shard")
    for path, rep in reports:
        sh = rep.get("shard")
        if not isinstance(sh, dict):
            raise MergeError(f"merge: {path} is not a shard report (it has no 'shard' record; "
                             "run with --shard K/N)")
        if rep.get("partial"):
            raise MergeError(f"merge: {path} is a partial report ({rep.get('summary', {}).get('cases')} of "
                             f"{rep.get('cases_planned')} cases): its shard did not finish")
        for key in ("count", "selection_digest", "selection_cases"):
            if sh.get(key) != ref.get(key):
                raise MergeError(f"merge: {path} is from another split or case selection than {first_path} "
                                 f"(shard {key}: {sh.get(key)!r} vs {ref.get(key)!r})")
        for key in ("profile", "device", "schema_version"):
            if rep.get(key) != first.get(key):
                raise MergeError(f"merge: {path} has {key} {rep.get(key)!r}, {first_path} has {first.get(key)!r}")
        if [a.get("spec") for a in rep.get("adapters", [])] != [a.get("spec") for a in first.get("adapters", [])]:
            raise MergeError(f"merge: {path} ran other adapters than {first_path}")
        if sh["index"] in shards:
            raise MergeError(f"merge: {path} and {shards[sh['index']][0]} are both shard {sh['index']}/{sh['count']}")
        shards[sh["index"]] = (path, rep)
    n = ref["count"]
    missing = [k for k in range(1, n + 1) if k not in shards]
    if missing:
        raise MergeError(f"merge: shard(s) {', '.join(f'{k}/{n}' for k in missing)} missing")

    by_position: dict[int, list[CaseResult]] = {}
    for k in sorted(shards):
        path, rep = shards[k]
        positions = rep["shard"]["positions"]
        per_case: dict[str, list[CaseResult]] = {}
        for r in results_of(rep):
            per_case.setdefault(r.case_id, []).append(r)
        if len(per_case) != len(positions):
            raise MergeError(f"merge: {path} has results for {len(per_case)} cases, its shard record lists "
                             f"{len(positions)}")
        for pos, rs in zip(positions, per_case.values(), strict=True):  # both in catalog order
            if pos in by_position:
                raise MergeError(f"merge: case {rs[0].case_id} appears in two shards")
            by_position[pos] = rs
    if sorted(by_position) != list(range(ref["selection_cases"])):
        raise MergeError(f"merge: the shards cover {len(by_position)} of {ref['selection_cases']} cases")
    results = [r for pos in sorted(by_position) for r in by_position[pos]]

    extra = {k: v for k, v in first.items() if k not in ("results", "summary", "shard", "created", "command",
                                                          "profile", "device", "wall_seconds", "environment",
                                                          "adapters", "schema_version", "expectations")}
    extra["cases_planned"] = ref["selection_cases"]
    extra["cpu_seconds"] = round(sum(float(shards[k][1].get("wall_seconds", 0.0)) for k in shards), 3)
    extra["merged_from"] = [{"path": shards[k][0], "shard": f"{k}/{n}", "created": shards[k][1].get("created"),
                             "wall_seconds": shards[k][1].get("wall_seconds"), "workers": shards[k][1].get("workers"),
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


def _catalog_order(profile: str) -> dict[str, int]:
    from attention_conformance.cases.catalog import cases

    try:
        return {c.id: i for i, c in enumerate(cases(profile))}
    except (KeyError, ValueError):
        return {}


def combine(reports: Sequence[tuple[str, dict]]) -> tuple[dict, list[CaseResult]]:
    """(report dict, results) joining ``[(path, report.json dict), ...]``; raises `MergeError` naming the file
    when the reports are of different profiles, devices or schema versions."""
    if not reports:
        raise MergeError("merge: no report given")
    first_path, first = reports[0]
    for path, rep in reports[1:]:
        for key in ("profile", "device", "schema_version"):
            if rep.get(key) != first.get(key):
                raise MergeError(f"merge: {path} has {key} {rep.get(key)!r}, {first_path} has {first.get(key)!r}")
    by_key: dict[tuple[str, str], CaseResult] = {}
    adapters: dict[str, dict] = {}
    growth: dict[tuple[str, str], dict] = {}  # (adapter, shape) -> memory_growth row (judged with the claims)
    merged_from = []
    for path, rep in reports:
        for row in rep.get("memory_growth", []):
            growth[(row.get("adapter", ""), row.get("shape", ""))] = row
        entries = {a.get("spec") or a.get("name"): a for a in rep.get("adapters", [])}
        # an adapter this run could not load (not installed here) undoes nothing an earlier run that had it said
        unloaded = {spec for spec, a in entries.items()
                    if a.get("available") is False and adapters.get(spec, {}).get("available", False)}
        replaced = 0
        for r in results_of(rep):
            if r.spec in unloaded:
                continue
            replaced += (r.case_id, r.spec) in by_key
            by_key[(r.case_id, r.spec)] = r
        adapters.update((spec, a) for spec, a in entries.items() if spec not in unloaded)
        # a joined report among the inputs: its runs, each with its own command, time and environment
        merged_from.extend(dict(m, path=f"{path}: {m.get('path')}") for m in rep.get("merged_from", []))
        if rep.get("merged_from"):
            merged_from[-1]["replaced"] = merged_from[-1].get("replaced", 0) + replaced
            merged_from[-1]["kept_from_earlier"] = sorted(unloaded)
            continue
        merged_from.append({"path": path, "created": rep.get("created"), "command": rep.get("command"),
                            "wall_seconds": rep.get("wall_seconds"), "workers": rep.get("workers"),
                            "partial": bool(rep.get("partial")),
                            "results": len(rep.get("results", [])), "replaced": replaced,
                            "adapters": [a.get("spec") for a in rep.get("adapters", [])],
                            "kept_from_earlier": sorted(unloaded),
                            "environment": rep.get("environment")})
    order = _catalog_order(first["profile"])
    case_ids = sorted({cid for cid, _ in by_key}, key=lambda c: (order.get(c, len(order)), c))
    specs = list(adapters)
    results = [by_key[(cid, s)] for cid in case_ids for s in specs if (cid, s) in by_key]
    planned = max([len(case_ids)] + [int(r.get("cases_planned") or 0) for _, r in reports])
    missing = {s: sum((cid, s) not in by_key for cid in case_ids) for s in specs}
    partial = any(m["partial"] for m in merged_from) or any(missing.values())

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
