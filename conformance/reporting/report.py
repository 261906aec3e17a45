"""Reports: ``report.json`` (versioned schema), ``report.md`` and ``report.html`` (issue 3, item 7).

report.json, ``"schema_version": 1``::

    {
      "schema_version": 1,
      "created": ISO time, "command": argv, "profile": ..., "device": ..., "wall_seconds": ...,
      "environment": {python, platform, cpu, cpu_count, numpy, torch, cuda, cudnn, gpus: [...], driver},
      "adapters": [{name, spec, available, reason, version, description, isolate, capabilities}],
      "summary": {"total": n, "by_outcome": {...}, "by_adapter": {name: {...}}, "exit_code": 0|1},
      "results": [CaseResult.to_dict(): case_id, adapter, outcome, message, stats{out,lse,dq,dk,dv:
                  max_err, max_err_index, tol_at_max_err, max_ratio, ...}, checks, findings, kernels,
                  memory {forward, backward: peak bytes of the call on CUDA, conformance/running/peak_memory.py},
                  tolerance_model, case (all fields), seed, repro],
      "memory_growth": [GrowthRow.to_dict(): adapter, shape, claim, ns, peak_bytes, extra_bytes,
                        driver_bytes, exponent, driver_exponent, verdict, message]
    }

report.md: a summary table, the named findings per adapter and class (SEMANTICS.md §17), the adapter
x feature matrix of worst outcomes, conventions seen (LSE) and kernels that ran, the smallest failing
case per adapter and feature, then every failure, finding and warning (per adapter, smallest case
first) with its message and repro command (`conformance.reporting.digest`, shared with report.html).
``summary.findings_by_class`` counts the named findings per adapter and class.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attention_conformance.adapters.registry import LoadedAdapter
from attention_conformance.reporting.digest import (
    by_case,
    call_notes,
    failed_by_all,
    failure_order,
    memory_table,
    named_findings,
    others_line,
    partial_text,
    quantity_line,
    run_line,
    shape_of,
    smallest_failing,
    where_of,
)
from attention_conformance.reporting.page import render_html
from attention_conformance.reporting.store import dump_report
from attention_conformance.running.engine import CaseResult
from attention_conformance.running.environment import environment
from attention_conformance.verdict import growth
from attention_conformance.verdict.judge import FINDING_CLASSES, finding_class
from attention_conformance.verdict.outcomes import FAILING, LEGEND, OUTCOMES, SHORT, exit_code_of, worst

__all__ = ["SCHEMA_VERSION", "environment", "adapter_info", "build_report", "write_report",
           "rebuild_report", "render_markdown",
           "exit_code"]

SCHEMA_VERSION = 1


def adapter_info(la: LoadedAdapter) -> dict:
    info = {"name": la.name, "spec": la.spec, "available": la.available, "reason": la.reason,
            "version": None, "description": None, "isolate": la.isolate, "capabilities": None}
    if la.adapter is not None:
        try:
            info["version"] = la.adapter.version()
        except Exception as exc:
            info["version"] = f"version() raised {type(exc).__name__}: {exc}"
        info["description"] = getattr(la.adapter, "description", "")
        try:
            info["capabilities"] = la.adapter.capabilities.to_dict()
        except Exception as exc:
            info["capabilities"] = {"error": f"{type(exc).__name__}: {exc}"}
    return info


def exit_code(results: Sequence[CaseResult]) -> int:
    """0 when nothing failed; 2 for a harness error; otherwise 1 for any failing outcome (`verdict.outcomes`)."""
    return exit_code_of(r.outcome for r in results)


def build_report(results: Sequence[CaseResult], adapters: Sequence[LoadedAdapter], *, profile: str, device: str,
                 wall_seconds: float, command: Sequence[str] | None = None, extra: dict | None = None) -> dict:
    by_outcome = {o: 0 for o in OUTCOMES}
    by_adapter: dict[str, dict[str, int]] = defaultdict(lambda: {o: 0 for o in OUTCOMES})
    seconds: dict[str, float] = defaultdict(float)
    for r in results:
        by_outcome[r.outcome] += 1
        by_adapter[r.adapter][r.outcome] += 1
        seconds[r.adapter] += r.seconds
    rep = {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": list(command or sys.argv),
        "profile": profile,
        "device": device,
        "wall_seconds": round(wall_seconds, 3),
        "environment": environment(),
        "adapters": [adapter_info(la) for la in adapters],
        "summary": {
            "total": len(results),
            "cases": len({r.case_id for r in results}),
            "by_outcome": by_outcome,
            "by_adapter": {k: dict(v) for k, v in by_adapter.items()},
            "adapter_seconds": {k: round(v, 3) for k, v in seconds.items()},
            "findings_by_class": {a: {c: n for c, (n, _) in by.items()}
                                  for a, by in named_findings([r.to_dict() for r in results]).items()},
            "exit_code": exit_code(results),
        },
        "results": [r.to_dict() for r in results],
        "memory_growth": [row.to_dict() for row in growth.growth_rows(results, growth.claims_of(adapters))],
    }
    if extra:
        rep.update(extra)
    return rep


#: the keys `build_report` computes from the results (the rest of a report is carried over by `rebuild_report`)
_COUNTED = ("results", "summary", "created", "schema_version")


def rebuild_report(rep: dict, results: Sequence[CaseResult], **updates: Any) -> dict:
    """`rep` (a `build_report` dictionary, e.g. loaded or joined) for `results`: summary and results recounted,
    every other key (environment, adapters, memory growth, provenance) kept, `updates` replacing keys."""
    extra = {k: v for k, v in rep.items() if k not in _COUNTED} | updates
    return build_report(results, [], profile=extra.pop("profile"), device=extra.pop("device"),
                        wall_seconds=extra.pop("wall_seconds"), command=extra.pop("command", None) or [],
                        extra=extra)


def _feature_columns(results: Sequence[CaseResult]) -> list[str]:
    cols: dict[str, None] = {}
    for r in results:
        cols.setdefault("family:" + r.family, None)
    for r in results:
        for f in r.features:
            cols.setdefault(f, None)
    return list(cols)


def render_markdown(rep: dict, results: Sequence[CaseResult], max_failures: int = 200) -> str:
    lines = [f"# Conformance report (profile `{rep['profile']}`, device `{rep['device']}`)", ""]
    if (why := partial_text(rep)) is not None:
        lines += [f"**Partial report**: {why}", ""]
    lines += [f"**Note**: {n}" for n in rep.get("notes", [])] + ([""] if rep.get("notes") else [])
    env = rep["environment"]
    gpus = ", ".join(g["name"] for g in env.get("gpus", [])) or "none"
    lines += [f"- {run_line(rep)}",
              f"- environment: {env['cpu']} ({env['cpu_count']} cores); GPU: {gpus}; driver {env.get('driver')}; "
              f"torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}; numpy {env['numpy']}",
              "- outcomes: " + "; ".join(f"{SHORT[o]} = {o}: {LEGEND[o]}" if SHORT[o] != o else f"{o}: {LEGEND[o]}"
                                         for o in OUTCOMES), ""]
    lines += ["## Summary", "", "| adapter | available | " + " | ".join(SHORT[o] for o in OUTCOMES) +
              " | seconds |", "|---|---|" + "---|" * len(OUTCOMES) + "---|"]
    for a in rep["adapters"]:
        counts = rep["summary"]["by_adapter"].get(a["name"], {})
        avail = "yes" if a["available"] else f"no: {str(a['reason'])[:80]}"
        secs = rep["summary"]["adapter_seconds"].get(a["name"], 0.0)
        lines.append(f"| {a['name']} | {avail} | " + " | ".join(str(counts.get(o, 0)) for o in OUTCOMES)
                     + f" | {secs:.1f} |")
    lines.append("")

    dicts = [r.to_dict() for r in results]
    named = named_findings(dicts)
    if named:
        lines += ["## Named findings (SEMANTICS.md §17; FAIL under --strict)", ""]
        for cls in sorted({c for by in named.values() for c in by}):
            lines.append(f"- `{cls}`: {FINDING_CLASSES[cls]}")
        lines += ["", "| adapter | finding | cases | smallest case |", "|---|---|---|---|"]
        for adapter in sorted(named):
            for cls, (n, r) in sorted(named[adapter].items()):
                lines.append(f"| {adapter} | {cls} | {n} | `{r['case_id']}` ({shape_of(r)}) |")
        lines.append("")

    cols = _feature_columns(results)
    cell: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        cell[(r.adapter, "family:" + r.family)].append(r.outcome)
        for f in r.features:
            cell[(r.adapter, f)].append(r.outcome)
    names = [a["name"] for a in rep["adapters"]]
    lines += ["## Adapter x feature matrix (worst outcome; count of that outcome / cases)", ""]
    lines.append("| feature | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for c in cols:
        row = []
        for n in names:
            outs = cell.get((n, c), [])
            w = worst(outs)
            row.append("" if w is None else f"{SHORT[w]} {outs.count(w)}/{len(outs)}")
        lines.append(f"| {c} | " + " | ".join(row) + " |")
    lines.append("")

    findings: dict[str, set[str]] = defaultdict(set)
    kernels: dict[str, set[str]] = defaultdict(set)
    for r in results:
        findings[r.adapter].update(f for f in r.findings if finding_class(f) is None)
        kernels[r.adapter].update(r.kernels)
    if any(findings.values()) or any(kernels.values()):
        lines += ["## Findings", ""]
        for n in names:
            if findings.get(n):
                lines.append(f"- **{n}** conventions: " + ", ".join(sorted(findings[n])))
            if kernels.get(n):
                ks = sorted({_short_kernel(k) for k in kernels[n] if _is_attention_kernel(k)})
                rest = len({k for k in kernels[n] if not _is_attention_kernel(k)})
                lines.append(f"- **{n}** attention / GEMM kernels observed (profiler): "
                             + (", ".join(f"`{k}`" for k in ks[:16]) or "none")
                             + (f" (+{len(ks) - 16} more)" if len(ks) > 16 else "")
                             + f"; plus {rest} copy / elementwise / reduction kernels (names in report.json)")
        lines.append("")

    lines += _expectation_lines(rep, results)
    lines += _memory_section(rep.get("memory_growth") or [])

    rows = smallest_failing(dicts)
    if rows:
        lines += ["## Smallest failing case per adapter and feature", "",
                  "| adapter | feature | failing | smallest failing case | shape | where it fails |",
                  "|---|---|---|---|---|---|"]
        for adapter, feature, n, r in rows:
            where = where_of(r).replace("|", "/")
            lines.append(f"| {adapter} | {feature} | {n} | `{r['case_id']}` | {shape_of(r)} | {where} |")
        lines.append("")

    unanimous = failed_by_all(dicts)
    if unanimous:
        lines += ["## Cases every adapter that ran them failed (check the harness first: oracle, bound, inputs)", "",
                  "| case | adapters |", "|---|---|"]
        lines += [f"| `{case}` | {', '.join(adapters)} |" for case, adapters in unanimous] + [""]

    cases = by_case(dicts)
    bad = failure_order(dicts)
    lines += [f"## Failures, findings and warnings ({len(bad)}; per adapter, smallest case first)", ""]
    if any(r["outcome"] in FAILING for r in bad):
        lines += ["Each repro command re-runs its case; `repro CASE --impl NAME --shrink` searches for a smaller case "
                  "that still fails.", ""]
    for r in bad[:max_failures]:
        lines.append(f"### {r['outcome']}: `{r['adapter']}` on `{r['case_id']}`")
        lines.append("")
        for line in _quantity_lines(r):
            lines.append(f"- {line}")
        msg = r["message"].strip().splitlines()
        if msg:
            lines.append("- " + msg[0][:600])
            for m in msg[1:4]:
                lines.append("  " + m[:600])
        lines += [f"- note: {n}" for n in call_notes(r.get("notes"))]
        if r["outcome"] in FAILING and (others := others_line(r, cases)):
            lines.append(f"- {others}")
        lines.append(f"- repro: `{r['repro']}`")
        lines.append("")
    if len(bad) > max_failures:
        lines.append(f"... {len(bad) - max_failures} more in report.json")
    ns = [r for r in results if r.outcome == "NOT_SUPPORTED"]
    if ns:
        reasons: dict[tuple[str, str], int] = defaultdict(int)
        for r in ns:
            reasons[(r.adapter, r.message.split(":")[0] if r.message.startswith("adapter unavailable") else
                     r.message)] += 1
        lines += ["## NOT_SUPPORTED reasons", "", "| adapter | reason | cases |", "|---|---|---|"]
        for (a, why), n in sorted(reasons.items(), key=lambda kv: (kv[0][0], -kv[1])):
            lines.append(f"| {a} | {why[:160]} | {n} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _expectation_lines(rep: dict, results: Sequence[CaseResult]) -> list[str]:
    """The expectations section: every entry verdicts fell under (KNOWN / UNEXPECTED_PASS / other), with its
    reason, link and repro file, and the entries that matched nothing (conformance/verdict/expectations.py)."""
    from attention_conformance.verdict.expectations import report_rows

    summary = rep.get("expectations") or {}
    rows = report_rows(r.to_dict() for r in results)
    if not rows and not summary.get("unused"):
        return []
    lines = [f"## Expectations ({', '.join(summary.get('files', [])) or 'none'})", "",
             "| entry | adapters | verdicts | reason | link, repro |", "|---|---|---|---|---|"]
    for row in rows:
        verdicts = ", ".join(f"{SHORT[o]} {n}" for o, n in row["outcomes"].items())
        repro = f"repro: `{row['repro']}`" if row.get("repro") else ""
        links = "<br>".join(x for x in (row["link"], repro) if x)
        lines.append(f"| `{row['id']}` ({row['source']}) | {', '.join(row['adapters'])} | {verdicts} | "
                     f"{row['reason'][:600]} | {links} |")
    for label in summary.get("unused", []):
        lines.append(f"| {label} | | matched no result of this run | | |")
    return lines + [""]


def _memory_section(rows: Sequence[dict]) -> list[str]:
    """The ``memory`` family table (`report_digest.memory_table`) as markdown."""
    if not rows:
        return []
    title, intro, header, body = memory_table(rows)
    return [f"## {title}", "", intro, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in body), ""]


def write_report(report_dir: str | os.PathLike, rep: dict, results: Sequence[CaseResult]) -> tuple[Path, Path]:
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    jp, mp = d / "report.json", d / "report.md"
    dump_report(jp, rep, default=_json_default)
    mp.write_text(render_markdown(rep, results))
    (d / "report.html").write_text(render_html(json.loads(json.dumps(rep, default=_json_default))))
    return jp, mp


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, frozenset | set | tuple):
        return sorted(o) if isinstance(o, frozenset | set) else list(o)
    return str(o)


def _quantity_lines(r: dict) -> list[str]:
    """`quantity_line` for out, then for every other quantity whose check did not pass."""
    stats, states = r.get("stats") or {}, r.get("checks") or {}
    names = [n for n in stats if n == "out" or states.get(n) not in (None, "pass")]
    return [line for n in names if (line := quantity_line(n, stats[n])) is not None]


def _short_kernel(name: str, width: int = 90) -> str:
    """A kernel name without its argument list, cut to `width` characters (report.json keeps it whole)."""
    short = name.split("(")[0] if not name.startswith("void ") else name[5:].split("(")[0]
    return short if len(short) <= width else short[: width - 3] + "..."


_ATTENTION_WORDS = ("flash", "fmha", "sdpa", "attention", "attn", "triton", "gemm", "cutlass", "cudnn", "xmma")


def _is_attention_kernel(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in _ATTENTION_WORDS)
