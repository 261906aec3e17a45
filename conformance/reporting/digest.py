"""What report.md and report.html both say about a run, computed once from report.json's result dicts.

- `quantity_line`: one line per compared quantity, non-finite values first ("out: all 5760 compared
  values are non-finite where the oracle is finite"), never "max error 0" for an all-NaN output;
- `size_of` / `failure_order`: results ordered by outcome severity, then adapter, then case size, so
  each adapter's smallest failing case comes first;
- `smallest_failing`: per adapter and failing feature, the number of failing cases and the smallest one;
  `where_of` where its failing values lie (`conformance.verdict.locate`), or its message's first words;
- `partial_text`: what makes a report partial (a run stopped early, or a joined report missing some results);
- `call_notes`: what the adapter noted about the call (the spelling or entry point it used, what a plain function's
  signature implies: `conformance.adapters.sdpa_signature`), as a failure block shows it;
- `by_case` / `others_line`: what the other adapters that ran a failing case got (``the same case: PASS on
  torch-sdpa-math, reference-fa2``): a kernel's bug fails it alone; `failed_by_all` lists the cases every adapter that
  ran them failed, where the harness (oracle, bound, inputs) is the first suspect;
- `run_line`: when the run was made, its wall time, size and workers (a joined report: each run's);
- `named_findings`: per adapter and named finding class (`conformance.verdict.judge.FINDING_CLASSES`, SEMANTICS.md
  §17), the number of cases and the smallest one.

Numbers print through `conformance.verdict.numfmt`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from attention_conformance.verdict import numfmt
from attention_conformance.verdict.judge import finding_class
from attention_conformance.verdict.outcomes import FAILING, SEVERITY

__all__ = ["by_case", "call_notes", "failed_by_all", "failure_order", "first_located", "memory_table", "named_findings",
           "others_line", "partial_text", "quantity_line", "run_line", "shape_of", "size_of", "smallest_failing",
           "where_of"]


#: the most notes a failure block shows, and the most characters of each
MAX_NOTES, NOTE_CHARS = 4, 600


def call_notes(notes: Iterable[str] | None) -> list[str]:
    """The first `MAX_NOTES` of a result's notes, each cut to `NOTE_CHARS`, duplicates dropped."""
    return [n[:NOTE_CHARS] for n in dict.fromkeys(notes or ())][:MAX_NOTES]


def partial_text(rep: dict) -> str | None:
    """What makes a report partial, in one sentence (None when it is complete): a run that stopped early, or a
    joined report (conformance/reporting/merge.py) some of whose adapters lack results for cases others have."""
    if not rep.get("partial"):
        return None
    missing = rep.get("missing_results") or {}
    done, planned = rep["summary"].get("cases"), rep.get("cases_planned")
    if missing and done == planned:
        per = ", ".join(f"{name} {n}" for name, n in missing.items())
        return (f"{done} cases, but the joined runs lack results for some of them: {per} "
                "(cases added after those adapters' runs, or a run that stopped early).")
    return f"{done} of {planned} cases done (checkpoint of a run still in progress or stopped)."


def quantity_line(name: str, st: Mapping[str, Any]) -> str | None:
    """One line about quantity `name` from its stats dict (`checks.QuantityStats.to_dict`), or None."""
    if not st:
        return None
    compared, bad = int(st.get("compared") or 0), int(st.get("nonfinite") or 0)
    if bad:
        head = (f"{name}: all {bad} compared values are non-finite" if bad == compared else
                f"{name}: {bad} of {compared} compared values are non-finite")
        first = st.get("nonfinite_index")
        where = f", first {name}{numfmt.index(first)} = {numfmt.value(st.get('nonfinite_value'))}" if first else ""
        rest = "" if bad == compared else f"; the finite values: usage {numfmt.approx(st.get('max_ratio'))}"
        return f"{head} where the oracle is finite{where}{rest}"
    if st.get("max_ratio_index") is None:
        return None
    return (f"{name}: max error {numfmt.approx(st.get('max_err'))}, usage {numfmt.approx(st.get('max_ratio'))} "
            f"(error {numfmt.approx(st.get('err_at_max_ratio'))} vs tolerance "
            f"{numfmt.approx(st.get('tol_at_max_ratio'))} at {numfmt.index(st.get('max_ratio_index'))}); naive "
            f"same-precision error {numfmt.approx(st.get('naive_max_err'))}")


def size_of(r: Mapping[str, Any]) -> float:
    """The size of a result's case: the catalog's cost estimate (B Hq Lq Lk (d + dv), times 3 for backward)."""
    c = r.get("case") or {}
    try:
        work = float(c["B"]) * float(c["Hq"]) * float(c["Lq"]) * float(c["Lk"]) * (float(c["d"]) + float(c["dv"]))
    except (KeyError, TypeError, ValueError):
        return float("inf")
    return work * (3.0 if c.get("backward") else 1.0)


def shape_of(r: Mapping[str, Any]) -> str:
    """``B=1 Hq=2 Hkv=2 Lq=127 Lk=65 d=64 float16`` for a result's case."""
    c = r.get("case") or {}
    keys = ("B", "Hq", "Hkv", "Lq", "Lk", "d")
    dv = f" dv={c['dv']}" if c.get("dv") not in (None, c.get("d")) else ""
    return " ".join(f"{k}={c.get(k)}" for k in keys) + dv + f" {c.get('dtype')}" + (" bwd" if c.get("backward") else "")


def failure_order(results: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Results at or above QUALITY_WARNING severity: most severe first, then by adapter, smallest case first."""
    bad = [r for r in results if SEVERITY[r["outcome"]] >= SEVERITY["QUALITY_WARNING"]]
    return sorted(bad, key=lambda r: (-SEVERITY[r["outcome"]], r["adapter"], size_of(r), r["case_id"]))


def smallest_failing(results: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, int, Mapping[str, Any]]]:
    """(adapter, feature, failing cases, smallest failing result) per adapter and feature with a failing outcome;
    features are the case's family and its feature labels (`conformance.running.engine.features_of`)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in results:
        if r["outcome"] not in FAILING:
            continue
        for f in ("family:" + r["family"], *r.get("features", [])):
            groups[(r["adapter"], f)].append(r)
    rows = []
    for (adapter, feature), rs in groups.items():
        smallest = min(rs, key=lambda r: (size_of(r), r["case_id"]))
        rows.append((adapter, feature, len(rs), smallest))
    return sorted(rows, key=lambda row: (row[0], size_of(row[3]), row[1]))


#: the quantities in the order a failure's location is taken from
_QUANTITIES = ("out", "lse", "dq", "dk", "dv")


def first_located(r: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(name, stats) of result ``r``'s first quantity (out, lse, dq, dk, dv, then the others) whose failing values
    were located (`conformance.verdict.locate`), or None."""
    stats = r.get("stats") or {}
    for name in (*_QUANTITIES, *sorted(set(stats) - set(_QUANTITIES))):
        if (stats.get(name) or {}).get("where"):
            return name, stats[name]
    return None


def where_of(r: Mapping[str, Any], limit: int = 120) -> str:
    """Where result ``r``'s failing values lie, for its first failing quantity (``out: query rows 64 of 65, ...``:
    the batch entries, heads, rows and columns holding one); a failure of no compared value (a raise, an input
    changed) gives its message's first ``limit`` characters."""
    located = first_located(r)
    if located is not None:
        return f"{located[0]}: {located[1]['where'].removeprefix('failing: ')}"
    first = (r.get("message") or "").strip().splitlines()
    return " ".join(first[0].split())[:limit] if first else ""


#: the most adapters `others_line` names per outcome before it counts the rest
MAX_NAMED = 6


def by_case(results: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """{case id: {adapter: outcome}} over the results that ran (NOT_SUPPORTED left out)."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for r in results:
        if r["outcome"] != "NOT_SUPPORTED":
            out[r["case_id"]][r["adapter"]] = r["outcome"]
    return out


def others_line(r: Mapping[str, Any], cases: Mapping[str, Mapping[str, str]]) -> str | None:
    """``the same case: PASS on a, b; FAIL on c`` for the other adapters that ran ``r``'s case; None when none did."""
    seen: dict[str, list[str]] = defaultdict(list)
    for adapter, outcome in sorted(cases.get(r["case_id"], {}).items()):
        if adapter != r["adapter"]:
            seen[outcome].append(adapter)
    if not seen:
        return None
    parts = []
    for outcome in sorted(seen, key=lambda o: SEVERITY[o]):
        names = seen[outcome]
        more = f" (+{len(names) - MAX_NAMED} more)" if len(names) > MAX_NAMED else ""
        parts.append(f"{outcome} on {', '.join(names[:MAX_NAMED])}{more}")
    return "the same case: " + "; ".join(parts)


def failed_by_all(results: Iterable[Mapping[str, Any]], minimum: int = 3) -> list[tuple[str, list[str]]]:
    """(case id, adapters) of each case that at least ``minimum`` adapters ran and every one of them failed."""
    return [(case, sorted(outcomes)) for case, outcomes in sorted(by_case(results).items())
            if len(outcomes) >= minimum and all(o in FAILING for o in outcomes.values())]


def named_findings(results: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, tuple[int, Mapping[str, Any]]]]:
    """{adapter: {finding class: (cases, smallest result)}} over every result that names a finding class."""
    seen: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        for cls in sorted({finding_class(f) for f in r.get("findings", [])} - {None}):
            seen[r["adapter"]][cls].append(r)
    return {a: {c: (len(rs), min(rs, key=lambda r: (size_of(r), r["case_id"]))) for c, rs in by.items()}
            for a, by in seen.items()}


def memory_table(rows: Iterable[Mapping[str, Any]]) -> tuple[str, str, list[str], list[list[str]]]:
    """The ``memory`` family (report.json ``memory_growth``, conformance/verdict/growth.py) as (title, intro, header,
    rows): peak device memory per N (torch allocator; beyond inputs and outputs in parentheses), the fitted
    exponent per adapter and its verdict."""
    from attention_conformance.verdict import growth
    from attention_conformance.verdict.numfmt import mib

    def exp(x: Any) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    intro = (f"Peak above the allocation before the call, torch allocator, MiB (beyond inputs and outputs); exponent "
             f"= log-log slope over N; an adapter claiming linear memory fails above {growth.LINEAR_MAX_EXPONENT}; "
             "driver exponent: the same fit on the driver's sampled rise (\"no rise\": the call's memory came from "
             "torch's already reserved pool; memory allocated outside torch shows there).")
    header = ["adapter", "claim", "shape", "peak MiB per N (beyond I/O)", "exponent", "driver exponent", "verdict"]
    body = []
    for r in rows:
        per_n = "; ".join(f"{n}: {mib(p)} ({mib(x)})" for n, p, x in zip(r["ns"], r["peak_bytes"], r["extra_bytes"]))
        drv = exp(r["driver_exponent"])
        if r["driver_exponent"] is None and r["driver_bytes"] and all(b == 0 for b in r["driver_bytes"]):
            drv = "no rise"  # everything came from torch's already reserved pool
        body.append([str(r["adapter"]), str(r["claim"] or "-"), str(r["shape"]), per_n, exp(r["exponent"]), drv,
                     str(r["verdict"])])
    return "Peak device memory (family `memory`, CUDA)", intro, header, body


def run_line(rep: Mapping[str, Any]) -> str:
    """``created ..., wall time 246.0 s, 396 cases x 22 adapters, workers 8``; for a report joined from several runs
    or shards (``merged_from``, conformance/reporting/merge.py) each one's wall time and workers, not one figure for
    all."""
    size = f"{rep['summary'].get('cases', '?')} cases x {len(rep.get('adapters', []))} adapters"
    runs = rep.get("merged_from") or []
    if len(runs) < 2:
        return (f"created {rep.get('created')}, wall time {float(rep.get('wall_seconds') or 0):.1f} s, {size}, "
                f"workers {rep.get('workers', 1)}")
    walls = ", ".join(f"{float(r.get('wall_seconds') or 0):.0f}" for r in runs)
    workers = ", ".join(str(r.get("workers", "?")) for r in runs)
    return (f"created {rep.get('created')}, joined from {len(runs)} runs (wall times {walls} s; workers {workers}), "
            f"{size}")
