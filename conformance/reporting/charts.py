"""Pictures for ``report.html``: inline SVG drawn from the report.json dictionary (no scripts, no network).

Per adapter:

- a scatter of the tolerance usage (worst error/tolerance over out, LSE, dQ/dK/dV; TOLERANCES.md) of
  every case, log scale, one column per case in catalog order (the same x for every adapter), coloured
  by outcome, with the bound (usage 1) drawn; cases with NaN/Inf where the oracle is finite sit in a
  band above the plot, NOT_SUPPORTED cases in a grey band below it, apart from the measured ones;
- a heat map of the worst usage over (Lq, Lk), lengths grouped in powers of four (``1k-4k`` is
  1024 < L <= 4096), white to blue up to the bound, red where a case failed (FAILING outcomes only), dark grey
  where a failure is expected (KNOWN).

Per failure (the collapsible entries): where its first failing quantity fails, one bar per axis (batch entries,
heads, rows, columns) with the failing indices in red (`where_strip`, from report.json's ``failing_runs``): a tail
tile is a red tick at the end of the rows bar, a GQA bug a few heads, a chunk boundary the rows from it on.

And, when benchmark JSON is given (``reports/benchmarks/*.json``: records with ``N``, ``d`` and
``*_tflops`` keys), TFLOPs/s against N per head dim for every kernel timed, one panel per
(file, kernel, causal).

The marker colours are saturated versions of the report's outcome colours (the table colours are too
pale for dots on white).
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attention_conformance.verdict.outcomes import FAILING, KNOWN, MARKER

__all__ = ["MARKER_COLOURS", "benchmark_series", "case_usage", "charts_html", "load_benchmarks", "where_strip"]

MARKER_COLOURS = MARKER  # one colour per outcome, from conformance/verdict/outcomes.py
_LOW = 1e-6  # usages below this are drawn on the bottom edge
_KNOWN_FILL = "#6f6f6f"  # an expected failure: neither red (failing) nor on the white-to-blue usage scale
_BELOW_BOUND = 0.999  # a cell that failed nothing is coloured as under the bound (red means a failure)
_SERIES_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_DASHES = ("", "6,3", "2,2", "8,3,2,3")
_FONT = 'font-family="system-ui,sans-serif" font-size="11"'


#: where_strip's geometry: label column, bar width, bar height, row pitch (px)
_STRIP_LABEL, _STRIP_W, _STRIP_H, _STRIP_PITCH = 150, 320, 9, 15


def where_strip(result: dict) -> str:
    """An inline SVG of where ``result``'s first failing quantity fails (see the module docstring); "" when no
    compared value failed (a raise, an input changed) or the report predates ``failing_runs``."""
    from attention_conformance.reporting.digest import first_located
    from attention_conformance.verdict.locate import axis_labels

    located = first_located(result)
    if located is None:
        return ""
    name, st = located
    runs, shape = st.get("failing_runs"), st.get("shape")
    if not runs or not shape or len(runs) != len(shape):
        return ""
    labels = axis_labels(name, len(shape))
    h = _STRIP_PITCH * len(shape) + 4
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_STRIP_LABEL + _STRIP_W + 60}" height="{h}" {_FONT} '
           f'role="img" aria-label="{_e(name)}: where it fails">']
    for axis, (label, size, axis_runs) in enumerate(zip(labels, shape, runs)):
        y = 2 + axis * _STRIP_PITCH
        out.append(f'<text x="{_STRIP_LABEL - 6}" y="{y + _STRIP_H}" text-anchor="end">{_e(name)}: {_e(label)}</text>')
        out.append(f'<rect x="{_STRIP_LABEL}" y="{y}" width="{_STRIP_W}" height="{_STRIP_H}" fill="#e8e8e8"/>')
        for a, b in axis_runs:
            x = _STRIP_LABEL + _STRIP_W * a / size
            w = max(1.5, _STRIP_W * (b - a + 1) / size)
            tip = f"{label} {a}" if a == b else f"{label} {a}-{b}"
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{_STRIP_H}" fill="{MARKER["FAIL"]}">'
                       f"<title>{_e(tip)} of {size}</title></rect>")
        out.append(f'<text x="{_STRIP_LABEL + _STRIP_W + 6}" y="{y + _STRIP_H}">{size}</text>')
    out.append("</svg>")
    return "".join(out)


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def case_usage(result: dict) -> tuple[float | None, bool]:
    """(worst finite error/tolerance over the compared tensors or None, whether any element was NaN/Inf)."""
    stats = (result.get("stats") or {}).values()
    ratios = [s["max_ratio"] for s in stats if isinstance(s.get("max_ratio"), (int, float))
              and math.isfinite(s["max_ratio"])]
    nonfinite = any((s.get("nonfinite") or 0) > 0 and not s.get("ok", True) for s in stats)
    return (max(ratios) if ratios else None), nonfinite


def _ylog(u: float, top: float, y0: float, y1: float) -> float:
    """Pixel y of usage u on a log axis from _LOW (y1, bottom) to top (y0)."""
    lo, hi = math.log10(_LOW), math.log10(top)
    return y1 - (math.log10(max(u, _LOW)) - lo) / (hi - lo) * (y1 - y0)


def _scatter(adapter: str, rows: list[tuple[int, dict]], ncases: int) -> str:
    w, h, left, right, top_band, plot_top, plot_bot = 620, 256, 48, 10, 14, 40, 206
    measured = [(i, r, *case_usage(r)) for i, r in rows]
    finite = [u for _, r, u, nf in measured if u is not None and not nf and r["outcome"] != "NOT_SUPPORTED"]
    top = 10 ** math.ceil(math.log10(max([10.0, *finite])))
    xs = lambda i: left + (i + 0.5) / max(ncases, 1) * (w - left - right)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" {_FONT} role="img" '
           f'aria-label="tolerance usage per case, {_e(adapter)}">',
           f'<rect x="{left}" y="{plot_top}" width="{w - left - right}" height="{plot_bot - plot_top}" '
           'fill="#fcfcfc" stroke="#bbb"/>']
    lo_k, hi_k = int(math.log10(_LOW)), int(math.log10(top))
    step = max(1, math.ceil((hi_k - lo_k) / 8))  # at most ~9 labelled decades
    for k in [*range(lo_k, hi_k + 1, step), *([0] if step > 1 else [])]:
        y = _ylog(10.0 ** k, top, plot_top, plot_bot)
        label = f"&#8804;1e{k}" if 10.0 ** k <= _LOW else f"1e{k}"
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    yb = _ylog(1.0, top, plot_top, plot_bot)
    out.append(f'<line x1="{left}" x2="{w - right}" y1="{yb:.1f}" y2="{yb:.1f}" stroke="#d62728" '
               f'stroke-dasharray="5,3"/><text x="{w - right - 2}" y="{yb - 3:.1f}" text-anchor="end" '
               'fill="#d62728">bound (usage 1)</text>')
    band_ns = plot_bot + 22
    out.append(f'<text x="{left - 4}" y="{top_band + 13}" text-anchor="end">NaN</text>'
               f'<text x="{left - 4}" y="{band_ns + 4}" text-anchor="end">n/s</text>'
               f'<text x="{left + (w - left - right) / 2}" y="{h - 4}" text-anchor="middle">case (catalog order, '
               f'{ncases} cases); y: worst error / tolerance, log scale</text>')
    # n/s first, as one path of ticks (their reasons are in the report's NOT_SUPPORTED section; one titled element
    # per declined case made a report of 56 adapters 4 MB of pictures), then PASS, then the outcomes that matter
    declined = [xs(i) for i, r, _, _ in measured if r["outcome"] == "NOT_SUPPORTED"]
    if declined:
        ticks = "".join(f"M{x:.1f} {band_ns - 5}v10" for x in declined)
        out.append(f'<path d="{ticks}" stroke="{MARKER_COLOURS.get("NOT_SUPPORTED", "#000")}"><title>'
                   f"{len(declined)} case{'s' * (len(declined) != 1)} NOT_SUPPORTED (the reasons: the report's "
                   "NOT_SUPPORTED section)</title></path>")
    order = {"PASS": 0}
    for i, r, u, nf in sorted(measured, key=lambda m: order.get(m[1]["outcome"], 1)):
        o = r["outcome"]
        if o == "NOT_SUPPORTED":
            continue
        colour = MARKER_COLOURS.get(o, "#000")
        tip = f"{r['case_id']}: {o}" + (f", usage {u:.3g}" if u is not None else "") + (", NaN/Inf" if nf else "")
        x = xs(i)
        if nf or u is None:
            y = top_band + 10.0
        else:
            y = _ylog(u, top, plot_top, plot_bot)
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" fill="{colour}" fill-opacity="0.8">'
                   f"<title>{_e(tip)}</title></circle>")
    out.append("</svg>")
    return "".join(out)


def _bucket(n: int) -> int:
    """Group of a length, in powers of 4: 0 for 1, k for 4^(k-1) < n <= 4^k."""
    return max(0, math.ceil(math.log(max(n, 1), 4) - 1e-9))


def _short(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _bucket_label(k: int) -> str:
    if k == 0:
        return "1"
    lo, hi = 4 ** (k - 1), 4 ** k
    return f"{lo + 1}-{_short(hi)}" if lo < 1024 else f"{_short(lo)}-{_short(hi)}"


def _heat_colour(u: float) -> str:
    """White-to-blue over usage 1e-6..1 (log), red at or over the bound."""
    if u >= 1.0:
        return "#d62728"
    t = min(1.0, max(0.0, (math.log10(max(u, _LOW)) - math.log10(_LOW)) / -math.log10(_LOW)))
    r, g, b = (int(round(a + (z - a) * t)) for a, z in ((240, 31), (246, 95), (255, 191)))
    return f"#{r:02x}{g:02x}{b:02x}"


def _heatmap(adapter: str, rows: list[tuple[int, dict]]) -> str:
    cells: dict[tuple[int, int], list[tuple[float, bool, bool, bool]]] = defaultdict(list)
    ns: dict[tuple[int, int], int] = defaultdict(int)
    for _, r in rows:
        c = r.get("case") or {}
        if "Lq" not in c or "Lk" not in c:
            continue
        key = (_bucket(int(c["Lq"])), _bucket(int(c["Lk"])))
        if r["outcome"] == "NOT_SUPPORTED":
            ns[key] += 1
            continue
        u, nf = case_usage(r)
        bad = r["outcome"] in FAILING  # a FINDING or KNOWN is drawn by its usage, never as a failure
        cells[key].append((u if u is not None else 0.0, bad, nf and bad, r["outcome"] == KNOWN))
    keys = set(cells) | set(ns)
    if not keys:
        return ""
    qs = sorted({k[0] for k in keys})
    ks = sorted({k[1] for k in keys})
    cw, ch, left, top = 46, 20, 70, 40
    w, h = max(left + cw * len(ks) + 10, 430), top + ch * len(qs) + 44
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" {_FONT} role="img" '
           f'aria-label="worst usage over (Lq, Lk), {_e(adapter)}">',
           f'<text x="{left}" y="12">worst usage by (Lq, Lk): white to blue up to the bound;</text>'
           f'<text x="{left}" y="26">red: a case failed; dark grey: an expected (KNOWN) failure</text>',
           f'<text x="{left + cw * len(ks) / 2}" y="{h - 6}" text-anchor="middle">Lk</text>',
           f'<text x="12" y="{top + ch * len(qs) / 2}" transform="rotate(-90 12 {top + ch * len(qs) / 2})" '
           'text-anchor="middle">Lq</text>']
    for j, kk in enumerate(ks):
        out.append(f'<text x="{left + cw * j + cw / 2}" y="{top + ch * len(qs) + 14}" text-anchor="middle" '
                   f'font-size="9">{_bucket_label(kk)}</text>')
    for i, qq in enumerate(qs):
        y = top + ch * i
        out.append(f'<text x="{left - 4}" y="{y + ch / 2 + 4}" text-anchor="end" font-size="9">'
                   f"{_bucket_label(qq)}</text>")
        for j, kk in enumerate(ks):
            x = left + cw * j
            vals = cells.get((qq, kk))
            if vals:
                worst = max(v[0] for v in vals)
                bad = any(v[1] for v in vals)
                known = not bad and any(v[3] for v in vals)  # an expected failure: its own colour, not red
                fill = "#d62728" if bad else _KNOWN_FILL if known else _heat_colour(min(worst, _BELOW_BOUND))
                label = "0" if worst == 0 else f"{worst:.0e}".replace("e-0", "e-").replace("e+0", "e")
                if bad and worst < 1.0:  # failed for another reason than the bound: say which
                    label = "NaN" if any(v[2] for v in vals) else "fail"
                elif known:
                    label = "known"
                ink = "#fff" if bad or worst > 1e-2 else "#222"
                tip = (f"Lq {_bucket_label(qq)}, Lk {_bucket_label(kk)}: {len(vals)} cases, worst usage {worst:.3g}"
                       + (", failed" if bad else ", known failure (expectations)" if known else "")
                       + (f", {ns[(qq, kk)]} n/s" if ns.get((qq, kk)) else ""))
                out.append(f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="{fill}" stroke="#fff">'
                           f'<title>{_e(tip)}</title></rect><text x="{x + cw / 2}" y="{y + ch / 2 + 4}" '
                           f'text-anchor="middle" font-size="9" fill="{ink}">{label}</text>')
            elif ns.get((qq, kk)):
                out.append(f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="#eee" stroke="#fff">'
                           f"<title>{ns[(qq, kk)]} NOT_SUPPORTED</title></rect>"
                           f'<text x="{x + cw / 2}" y="{y + ch / 2 + 4}" text-anchor="middle" font-size="9" '
                           'fill="#888">n/s</text>')
    out.append("</svg>")
    return "".join(out)


def load_benchmarks(paths: Iterable[Path]) -> dict[str, Any]:
    """{file stem: parsed JSON} of the benchmark files that parse (others are skipped)."""
    out: dict[str, Any] = {}
    for p in sorted(Path(x) for x in paths):
        try:
            out[p.stem] = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    return out


def _records(data: Any) -> list[dict]:
    if isinstance(data, dict):
        for key in ("bench", "results", "records"):
            if isinstance(data.get(key), list):
                return [r for r in data[key] if isinstance(r, dict)]
        return []
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def benchmark_series(benchmarks: dict[str, Any]) -> dict[tuple[str, str, bool], dict[tuple[str, int], list]]:
    """{(file, kernel, causal): {(implementation, d): [(N, TFLOPs/s), ...]}} from records with N, d and
    ``<implementation>_tflops`` keys (records timed at one N contribute a single point)."""
    panels: dict[tuple[str, str, bool], dict[tuple[str, int], list]] = defaultdict(lambda: defaultdict(list))
    for stem, data in benchmarks.items():
        for rec in _records(data):
            if not isinstance(rec.get("N"), (int, float)) or not isinstance(rec.get("d"), (int, float)):
                continue
            kernel = str(rec.get("kernel", stem))
            for key, val in rec.items():
                if key.endswith("_tflops") and isinstance(val, (int, float)) and val > 0:
                    impl = key.removesuffix("_tflops")
                    panels[(stem, kernel, bool(rec.get("causal", False)))][(impl, int(rec["d"]))].append(
                        (int(rec["N"]), float(val)))
    return {k: {s: sorted(v) for s, v in series.items()} for k, series in panels.items()}


def _marker(shape: int, x: float, y: float, colour: str, tip: str) -> str:
    if shape == 1:
        el = f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{colour}">'
        end = "</rect>"
    elif shape == 2:
        d = f"M{x:.1f} {y - 4:.1f} L{x + 4:.1f} {y:.1f} L{x:.1f} {y + 4:.1f} L{x - 4:.1f} {y:.1f} Z"
        el = f'<path d="{d}" fill="{colour}">'
        end = "</path>"
    else:
        el, end = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.8" fill="{colour}">', "</circle>"
    return f"{el}<title>{_e(tip)}</title>{end}"


def _legend_width(labels: Iterable[str]) -> int:
    return 44 + int(6.4 * max((len(x) for x in labels), default=0))


def _bench_panel(title: str, series: dict[tuple[str, int], list], colours: dict[str, str]) -> str:
    """TFLOPs/s against N (log), one line per (implementation, d); bars per head dim when only one N was timed."""
    ns = sorted({n for pts in series.values() for n, _ in pts})
    impls = sorted({i for i, _ in series})
    dims = sorted({d for _, d in series})
    labels = [f"{i} d={d}" for i, d in sorted(series)] if len(ns) > 1 else impls
    left, top, bot = 48, 24, 220
    right = _legend_width(labels)
    w, h = max(300, left + 60 * max(len(ns), len(dims)) + right), 260
    ymax = max(t for pts in series.values() for _, t in pts)
    ymax = 50 * math.ceil(ymax / 50)
    ys = lambda t: bot - t / ymax * (bot - top)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" {_FONT} role="img" '
           f'aria-label="{_e(title)}"><text x="{left}" y="14" font-weight="bold">{_e(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{bot - top}" fill="#fcfcfc" '
           'stroke="#bbb"/>']
    for t in range(0, int(ymax) + 1, 100 if ymax > 300 else 50):
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{ys(t):.1f}" y2="{ys(t):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{ys(t) + 4:.1f}" text-anchor="end">{t}</text>')
    legend = []
    if len(ns) > 1:
        lo, hi = math.log2(ns[0]), math.log2(ns[-1])
        xs = lambda n: left + 12 + (math.log2(n) - lo) / (hi - lo) * (w - left - right - 24)
        for n in ns:
            out.append(f'<text x="{xs(n):.1f}" y="{bot + 14}" text-anchor="middle">{_short(n)}</text>')
        out.append(f'<text x="{left + (w - left - right) / 2}" y="{h - 6}" text-anchor="middle">N (log scale); '
                   "y: TFLOPs/s</text>")
        for (impl, d), pts in sorted(series.items()):
            colour, dash = colours[impl], _DASHES[dims.index(d) % len(_DASHES)]
            style = f'stroke="{colour}" stroke-width="1.6"' + (f' stroke-dasharray="{dash}"' if dash else "")
            path = " ".join(f"{xs(n):.1f},{ys(t):.1f}" for n, t in pts)
            out.append(f'<polyline points="{path}" fill="none" {style}/>')
            shape = dims.index(d) % 3  # circle, square, diamond: one point per head dim is still told apart
            out += [_marker(shape, xs(n), ys(t), colour, f"{impl} d={d} N={n}: {t:.0f} TFLOPs/s") for n, t in pts]
            legend.append((f"{impl} d={d}", style))
    else:
        group = (w - left - right) / len(dims)
        bw = min(18.0, (group - 10) / len(impls))
        for j, d in enumerate(dims):
            x0 = left + group * j + (group - bw * len(impls)) / 2
            out.append(f'<text x="{left + group * (j + 0.5):.1f}" y="{bot + 14}" text-anchor="middle">d={d}</text>')
            for i, impl in enumerate(impls):
                for _, t in series.get((impl, d), []):
                    out.append(f'<rect x="{x0 + bw * i:.1f}" y="{ys(t):.1f}" width="{bw - 2:.1f}" '
                               f'height="{bot - ys(t):.1f}" fill="{colours[impl]}"><title>{_e(impl)} d={d} '
                               f"N={ns[0]}: {t:.0f} TFLOPs/s</title></rect>")
        out.append(f'<text x="{left + (w - left - right) / 2}" y="{h - 6}" text-anchor="middle">head dim, all at '
                   f"N={_short(ns[0])}; y: TFLOPs/s</text>")
        legend = [(impl, f'stroke="{colours[impl]}" stroke-width="6"') for impl in impls]
    for idx, (label, style) in enumerate(legend):
        ly = top + 12 + 14 * idx
        out.append(f'<line x1="{w - right + 8}" x2="{w - right + 30}" y1="{ly - 4}" y2="{ly - 4}" {style}/>'
                   f'<text x="{w - right + 34}" y="{ly}">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def charts_html(rep: dict, benchmarks: dict[str, Any] | None = None) -> str:
    """The "Pictures" section of report.html for one report.json dictionary (and optional benchmark JSON)."""
    results = rep.get("results", [])
    case_index: dict[str, int] = {}
    for r in results:
        case_index.setdefault(r["case_id"], len(case_index))
    by_adapter: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for r in results:
        by_adapter[r["adapter"]].append((case_index[r["case_id"]], r))
    parts = ["<h2>Pictures</h2>",
             "<p>Per adapter: the tolerance usage (worst error / tolerance) of every case, coloured by outcome "
             "(" + ", ".join(f'<span style="color:{c}">&#9679; {_e(o)}</span>' for o, c in MARKER_COLOURS.items())
             + "), NaN/Inf results in the top band, NOT_SUPPORTED cases in the bottom band; and the worst usage "
             "over (Lq, Lk). Hover a point or cell for the case.</p>"]
    idle = []  # adapters every case of which is NOT_SUPPORTED here: nothing to draw
    for a in rep.get("adapters", []):
        rows = by_adapter.get(a["name"], [])
        if not rows:
            continue
        if all(r["outcome"] == "NOT_SUPPORTED" for _, r in rows):
            idle.append(a["name"])
            continue
        parts.append(f'<h3>{_e(a["name"])}</h3><div style="display:flex;flex-wrap:wrap;gap:16px;'
                     f'align-items:flex-start">{_scatter(a["name"], rows, len(case_index))}{_heatmap(a["name"], rows)}'
                     "</div>")
    if idle:
        parts.append("<p>Not drawn, every case NOT_SUPPORTED (not installed or not runnable here; the summary says "
                     "why): " + ", ".join(f"<code>{_e(n)}</code>" for n in idle) + ".</p>")
    panels = benchmark_series(benchmarks or {})
    if panels:
        parts.append("<h3>Benchmarks: TFLOPs/s against N</h3><p>From "
                     + ", ".join(f"<code>{_e(s)}.json</code>" for s in sorted({k[0] for k in panels}))
                     + "; one line per implementation (colour) and head dim (dash), or bars per head dim where "
                     "one N was timed.</p>"
                     '<div style="display:flex;flex-wrap:wrap;gap:12px">')
        impls = sorted({impl for series in panels.values() for impl, _ in series})
        colours = {impl: _SERIES_COLOURS[i % len(_SERIES_COLOURS)] for i, impl in enumerate(impls)}
        for (stem, kernel, causal), series in sorted(panels.items()):
            title = (stem if kernel == stem else f"{stem}: {kernel}") + (", causal" if causal else "")
            parts.append(_bench_panel(title, series, colours))
        parts.append("</div>")
    return "\n".join(parts)
