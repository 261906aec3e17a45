"""``report.html``: the conformance report as one self-contained page (no scripts, no external files).

Rendered from the report.json dictionary alone (schema_version 1, see `conformance.reporting.report`), so it
also renders reports written by earlier runs or on other machines:

    python -m attention_conformance.reporting.page reports/latest/report.json [-o report.html] \
        [--bench reports/benchmarks]

Sections: run and environment, summary per adapter, pictures
(`conformance.reporting.charts`), named findings per adapter and class (SEMANTICS.md
§17), the adapter x feature matrix coloured by worst outcome (hover a cell for its counts), the smallest
failing case per adapter and feature, every failure, finding and warning as a collapsible entry (per
adapter, smallest case first; non-finite values first, then the error at the worst element) with the
repro command, and the NOT_SUPPORTED reasons. The content is computed by `conformance.reporting.digest`,
shared with report.md.
"""

from __future__ import annotations

import argparse
import html
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from attention_conformance.reporting.charts import charts_html, load_benchmarks, where_strip
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
from attention_conformance.reporting.store import load_report
from attention_conformance.verdict.judge import FINDING_CLASSES
from attention_conformance.verdict.outcomes import COLOUR, FAILING, LEGEND, OUTCOMES, SHORT, worst

__all__ = ["render_html", "main"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; }
th { background: #f4f4f4; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, monospace; font-size: 12px; }
pre { background: #f7f7f7; padding: 6px; white-space: pre-wrap; }
details { margin: 4px 0; border-left: 4px solid #ccc; padding-left: 8px; }
summary { cursor: pointer; }
.legend span { padding: 2px 6px; margin-right: 6px; }
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A table; cells are pre-rendered HTML (callers escape)."""
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>"]
    out += ["<tr>" + "".join(row) + "</tr>" for row in rows]
    return "\n".join(out) + "</table>"


def _cell(outcome: str | None, text: str, title: str = "") -> str:
    if outcome is None:
        return "<td></td>"
    return f'<td style="background:{COLOUR[outcome]}" title="{_e(title)}">{_e(text)}</td>'


def render_html(rep: dict, benchmarks: dict | None = None) -> str:
    """The whole page for one report.json dictionary (``benchmarks``: `report_charts.load_benchmarks`)."""
    results = rep.get("results", [])
    env = rep.get("environment", {})
    names = [a["name"] for a in rep.get("adapters", [])]
    gpus = ", ".join(g["name"] for g in env.get("gpus", [])) or "none"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Conformance report: {_e(rep.get('profile'))}"
             f" / {_e(rep.get('device'))}</title><style>{_STYLE}</style></head><body>",
             f"<h1>Conformance report (profile <code>{_e(rep.get('profile'))}</code>, device "
             f"<code>{_e(rep.get('device'))}</code>)</h1>"]

    if (why := partial_text(rep)) is not None:
        parts.append(f"<p><b>Partial report</b>: {_e(why)}</p>")
    parts += [f"<p class='note'><b>Note</b>: {_e(n)}</p>" for n in rep.get("notes", [])]
    parts.append(
        "<ul>"
        f"<li>{_e(run_line(rep))}</li>"
        f"<li>command: <code>{_e(' '.join(rep.get('command', [])))}</code></li>"
        f"<li>{_e(env.get('cpu'))} ({_e(env.get('cpu_count'))} cores); GPU: {_e(gpus)}; driver "
        f"{_e(env.get('driver'))}; torch {_e(env.get('torch'))}, CUDA {_e(env.get('cuda'))}, cuDNN "
        f"{_e(env.get('cudnn'))}; numpy {_e(env.get('numpy'))}</li></ul>")
    parts.append('<p class="legend">' + "".join(
        f'<span style="background:{COLOUR[o]}" title="{_e(o)}: {_e(LEGEND[o])}">{SHORT[o]}</span>'
        for o in OUTCOMES) + "</p>")

    # Summary
    rows = []
    for a in rep.get("adapters", []):
        counts = rep["summary"].get("by_adapter", {}).get(a["name"], {})
        avail = "yes" if a.get("available") else f"no: {a.get('reason')}"
        row = [f"<td><b>{_e(a['name'])}</b><br><small>{_e(a.get('version') or '')}</small></td>",
               f"<td>{_e(avail)}</td>"]
        row += [_cell(o, str(counts.get(o, 0))) if counts.get(o) else '<td class="num">0</td>' for o in OUTCOMES]
        row.append(f'<td class="num">{rep["summary"].get("adapter_seconds", {}).get(a["name"], 0.0):.1f}</td>')
        rows.append(row)
    parts += ["<h2>Summary</h2>", _table(["adapter", "available", *(SHORT[o] for o in OUTCOMES), "seconds"], rows)]
    parts.append(charts_html(rep, benchmarks))

    # Named findings
    named = named_findings(results)
    if named:
        classes = sorted({c for by in named.values() for c in by})
        rows = [[f"<td>{_e(a)}</td>", f"<td><code>{_e(c)}</code></td>", f'<td class="num">{n}</td>',
                 f"<td><code>{_e(r['case_id'])}</code> ({_e(shape_of(r))})</td>"]
                for a in sorted(named) for c, (n, r) in sorted(named[a].items())]
        parts += ["<h2>Named findings (SEMANTICS.md §17; FAIL under --strict)</h2>", "<ul>" + "".join(
            f"<li><code>{_e(c)}</code>: {_e(FINDING_CLASSES[c])}</li>" for c in classes) + "</ul>",
            _table(["adapter", "finding", "cases", "smallest case"], rows)]

    # Peak device memory (the memory family, CUDA runs)
    if rep.get("memory_growth"):
        title, intro, header, body = memory_table(rep["memory_growth"])
        parts += [f"<h2>{_e(title)}</h2>", f"<p>{_e(intro)}</p>",
                  _table(header, ([f"<td>{_e(c)}</td>" for c in row] for row in body))]

    # Matrix
    cols: dict[str, None] = {}
    cell: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        cols.setdefault("family:" + r["family"], None)
    for r in results:
        for f in r.get("features", []):
            cols.setdefault(f, None)
        for f in ("family:" + r["family"], *r.get("features", [])):
            cell[(r["adapter"], f)].append(r["outcome"])
    rows = []
    for c in cols:
        row = [f"<td>{_e(c)}</td>"]
        for n in names:
            outs = cell.get((n, c), [])
            w = worst(outs)
            title = ", ".join(f"{SHORT[o]} {outs.count(o)}" for o in OUTCOMES if o in outs)
            row.append(_cell(w, f"{SHORT[w]} {outs.count(w)}/{len(outs)}" if w else "", title))
        rows.append(row)
    parts += ["<h2>Adapter x feature matrix (worst outcome; count of it / cases)</h2>",
              _table(["feature", *(_e(n) for n in names)], rows)]

    parts += _expectations_html(rep)

    # Smallest failing case per adapter and feature
    rows = [[f"<td>{_e(a)}</td>", f"<td>{_e(f)}</td>", f'<td class="num">{n}</td>',
             f"<td><code>{_e(r['case_id'])}</code></td>", f"<td>{_e(shape_of(r))}</td>", f"<td>{_e(where_of(r))}</td>"]
            for a, f, n, r in smallest_failing(results)]
    if rows:
        parts += ["<h2>Smallest failing case per adapter and feature</h2>",
                  _table(["adapter", "feature", "failing", "smallest failing case", "shape", "where it fails"], rows)]

    unanimous = failed_by_all(results)
    if unanimous:
        parts += ["<h2>Cases every adapter that ran them failed (check the harness first: oracle, bound, inputs)</h2>",
                  _table(["case", "adapters"], [[f"<td><code>{_e(c)}</code></td>", f"<td>{_e(', '.join(a))}</td>"]
                                                for c, a in unanimous])]

    # Failures, findings, warnings
    cases = by_case(results)
    bad = failure_order(results)
    parts.append(f"<h2>Failures, findings and warnings ({len(bad)}; per adapter, smallest case first)</h2>")
    if any(r["outcome"] in FAILING for r in bad):
        parts.append("<p>Each repro command re-runs its case; <code>repro CASE --impl NAME --shrink</code> searches "
                     "for a smaller case that still fails.</p>")
    for r in bad:
        stats, states = r.get("stats") or {}, r.get("checks") or {}
        lines = [quantity_line(n, stats[n]) for n in stats if n == "out" or states.get(n) not in (None, "pass")]
        where = "".join(f"<li>{_e(line)}</li>" for line in lines if line)
        parts.append(
            f'<details style="border-color:{COLOUR[r["outcome"]]}"><summary><b>{SHORT[r["outcome"]]}</b> '
            f"<code>{_e(r['adapter'])}</code> on <code>{_e(r['case_id'])}</code> ({_e(shape_of(r))})</summary>"
            f"<ul>{where}<li><pre>{_e(r.get('message', '').strip())}</pre></li>"
            + (f"<li>{strip}</li>" if (strip := where_strip(r)) else "")
            + "".join(f"<li>note: {_e(n)}</li>" for n in call_notes(r.get("notes")))
            + (f"<li>{_e(others)}</li>" if r["outcome"] in FAILING and (others := others_line(r, cases)) else "")
            + f"<li>repro: <code>{_e(r.get('repro', ''))}</code></li></ul></details>")

    # NOT_SUPPORTED reasons
    reasons: dict[tuple[str, str], int] = defaultdict(int)
    for r in results:
        if r["outcome"] == "NOT_SUPPORTED":
            reasons[(r["adapter"], r.get("message", ""))] += 1
    if reasons:
        rows = [[f"<td>{_e(a)}</td>", f"<td>{_e(why[:200])}</td>", f'<td class="num">{n}</td>']
                for (a, why), n in sorted(reasons.items(), key=lambda kv: (kv[0][0], -kv[1]))]
        parts += ["<h2>NOT_SUPPORTED reasons</h2>", _table(["adapter", "reason", "cases"], rows)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _expectations_html(rep: dict) -> list[str]:
    """Every expectations entry the report's verdicts fell under, with reason, link and repro file; unused entries."""
    from attention_conformance.verdict.expectations import report_rows

    summary = rep.get("expectations") or {}
    rows = report_rows(rep.get("results", []))
    if not rows and not summary.get("unused"):
        return []
    out = []
    for row in rows:
        link = f'<a href="{_e(row["link"])}">{_e(row["link"])}</a>' if row["link"] else ""
        if row.get("repro"):
            link += ("<br>" if link else "") + f"repro: <code>{_e(row['repro'])}</code>"
        verdicts = " ".join(_cell(o, f"{SHORT[o]} {n}") for o, n in row["outcomes"].items())
        out.append([f"<td><code>{_e(row['id'])}</code><br><small>{_e(row['source'])}</small></td>",
                    f"<td>{_e(', '.join(row['adapters']))}</td>", f"<td><table><tr>{verdicts}</tr></table></td>",
                    f"<td>{_e(row['reason'])}</td>", f"<td>{link}</td>"])
    out += [[f"<td>{_e(label)}</td>", "<td></td>", "<td>matched no result of this run</td>", "<td></td>",
             "<td></td>"] for label in summary.get("unused", [])]
    files = ", ".join(summary.get("files", [])) or "none"
    header = ["entry", "adapters", "verdicts", "reason", "link, repro"]
    return [f"<h2>Expectations ({_e(files)})</h2>", _table(header, out)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.reporting.page",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="a report.json (or report.json.gz, as reports/ keeps them)")
    ap.add_argument("-o", "--output", type=Path, help="where to write (default: report.html beside the JSON)")
    ap.add_argument("--bench", type=Path, help="a folder of benchmark JSON (e.g. reports/benchmarks) to plot")
    args = ap.parse_args(argv)
    out = args.output or args.report.with_name(args.report.name.removesuffix(".gz").removesuffix(".json") + ".html")
    bench = load_benchmarks(args.bench.glob("*.json")) if args.bench else None
    out.write_text(render_html(load_report(args.report), bench))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
