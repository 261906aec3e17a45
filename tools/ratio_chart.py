"""Where each of issue 40's speed bars stands, as one picture drawn from the current benchmark set (lab tool; not
installed).

    python tools/ratio_chart.py           # write reports/benchmarks/fa3_ratios.svg
    python tools/ratio_chart.py --check   # exit 1 when the SVG differs from what the JSON files give

Three panels, one bar per row of each table (B = 4, H = 16, N = 8192; non-causal and causal), each the other's GPU
time over ours (> 1: ours is faster), drawn from 1.0 up or down, green where the row meets its bar, red where not:

- the FA3 forward beside flash-attn-4 (``fa3_side_by_side.json``: ``fa4_ms / fa3_ms``; bar 1.0, goal 1.05);
- the FA3 forward + backward beside flash-attn-4 (``fa3_bwd_side_by_side.json``: ``fwdbwd_fa4_ms / fwdbwd_fa3_ms``;
  bar 0.95, goal 1.0);
- the FA3 FP8 forward (V k-major, per-tensor scales) beside cuDNN's FP8 forward (``fa3_fp8_side_by_side.json``:
  ``cudnn_fp8_ms / fp8kmajor_per_tensor_ms``; bar 1.0).

Each panel names the card and date of its table (they can differ: a table is replaced by the run that supersedes it).
No plotting library: the SVG is text, so the check compares it byte for byte.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_shapes import dims_label  # tools/, beside this script

__all__ = ["PANELS", "Panel", "bars", "render", "main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO_ROOT / "reports" / "benchmarks"
SVG = BENCH_DIR / "fa3_ratios.svg"


@dataclass(frozen=True)
class Panel:
    """One panel: a table of the benchmark set, the row list in its JSON, the two timings of the ratio (the other's,
    ours), the bar a row must reach and the goal above it."""

    title: str
    file: str
    rows_key: str
    other: str
    ours: str
    bar: float
    goal: float | None


PANELS = (
    Panel("FA3 forward vs flash-attn-4", "fa3_side_by_side.json", "bench", "fa4_ms", "fa3_ms", 1.0, 1.05),
    Panel("FA3 forward + backward vs flash-attn-4", "fa3_bwd_side_by_side.json", "bench",
          "fwdbwd_fa4_ms", "fwdbwd_fa3_ms", 0.95, 1.0),
    Panel("FA3 FP8 forward (V k-major, per tensor) vs cuDNN FP8", "fa3_fp8_side_by_side.json", "rows",
          "cudnn_fp8_ms", "fp8kmajor_per_tensor_ms", 1.0, None),
)


def bars(panel: Panel, data: dict[str, Any]) -> list[tuple[str, bool, float]]:
    """(head-dim label, causal, ratio) of every row of `data` that has both timings, ordered by d, then dv from the
    largest (d192 before d192x128), the non-causal row first."""
    rows = [r for r in data.get(panel.rows_key, [])
            if r.get("kind", "attention") == "attention" and r.get(panel.other) and r.get(panel.ours)]
    rows.sort(key=lambda r: (r["d"], -r.get("dv", r["d"]), bool(r["causal"])))
    return [("d" + dims_label(r), bool(r["causal"]), r[panel.other] / r[panel.ours]) for r in rows]


def _panel_svg(panel: Panel, data: dict[str, Any], y0: int, width: int, height: int) -> list[str]:
    env = data.get("env", {})
    got = bars(panel, data)
    head = (f'<text x="10" y="{y0 + 16}" font-size="13" font-weight="bold">{panel.title}</text>'
            f'<text x="10" y="{y0 + 31}" fill="#555">{env.get("gpu", "?")}, {env.get("date", "?")}; '
            f'reports/benchmarks/{panel.file}; bar {panel.bar:.2f}'
            + (f", goal {panel.goal:.2f}" if panel.goal else "") + "</text>")
    if not got:
        return [head, f'<text x="10" y="{y0 + 60}">no rows with both timings</text>']
    ratios = [r for _, _, r in got] + [panel.bar] + ([panel.goal] if panel.goal else [])
    span = max(0.2, max(abs(r - 1.0) for r in ratios) + 0.05)
    top, bottom, left = y0 + 45, y0 + height - 30, 50
    step = (width - left - 10) / len(got)

    def py(r: float) -> float:
        return top + (1.0 + span - r) / (2 * span) * (bottom - top)

    out = [head]
    for tick in (1.0 - span, 1.0 - span / 2, 1.0, 1.0 + span / 2, 1.0 + span):
        out.append(f'<text x="{left - 6}" y="{py(tick) + 4:.1f}" text-anchor="end" fill="#555">{tick:.2f}</text>')
    out.append(f'<line x1="{left}" y1="{py(1.0):.1f}" x2="{width - 10}" y2="{py(1.0):.1f}" stroke="black"/>')
    for level, dash, name in ((panel.bar, "6,3", "bar"), (panel.goal, "2,3", "goal")):
        if level is not None and level != 1.0:
            out.append(f'<line x1="{left}" y1="{py(level):.1f}" x2="{width - 10}" y2="{py(level):.1f}" '
                       f'stroke="#444" stroke-dasharray="{dash}"/>'
                       f'<text x="{width - 12}" y="{py(level) - 3:.1f}" text-anchor="end" fill="#444">'
                       f'{name} {level:.2f}</text>')
    for i, (label, causal, ratio) in enumerate(got):
        x = left + i * step + step * 0.15
        w = step * 0.7
        y1, y2 = sorted((py(ratio), py(1.0)))
        color = "#2a9d4b" if ratio >= panel.bar else "#d62728"
        opacity = "0.55" if causal else "1"
        out.append(f'<rect x="{x:.1f}" y="{y1:.1f}" width="{w:.1f}" height="{max(y2 - y1, 0.5):.1f}" '
                   f'fill="{color}" fill-opacity="{opacity}"><title>{label}{" causal" if causal else ""}: '
                   f'{ratio:.3f}</title></rect>')
        ty = py(ratio) - 4 if ratio >= 1.0 else py(ratio) + 12
        out.append(f'<text x="{x + w / 2:.1f}" y="{ty:.1f}" text-anchor="middle">{ratio:.2f}</text>')
        out.append(f'<text x="{x + w / 2:.1f}" y="{bottom + 14}" text-anchor="middle">{label}</text>'
                   f'<text x="{x + w / 2:.1f}" y="{bottom + 26}" text-anchor="middle" fill="#555">'
                   f'{"causal" if causal else "full"}</text>')
    return out


def render(bench_dir: Path = BENCH_DIR, width: int = 960, height: int = 250) -> str:
    """The SVG text for the JSON files in `bench_dir` (a panel whose file is missing says so)."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height * len(PANELS) + 30}" '
           'font-family="sans-serif" font-size="11">',
           "<title>FA3 speed ratios by GPU time (other's time over ours; B=4 H=16 N=8192)</title>",
           f'<rect width="{width}" height="{height * len(PANELS) + 30}" fill="white"/>']
    for i, panel in enumerate(PANELS):
        path = bench_dir / panel.file
        y0 = i * height
        if not path.is_file():
            out.append(f'<text x="10" y="{y0 + 16}">{panel.title}: {panel.file} missing</text>')
            continue
        out += _panel_svg(panel, json.loads(path.read_text()), y0, width, height)
    out.append(f'<text x="10" y="{height * len(PANELS) + 20}" fill="#555">GPU time per call (kernels/timing.py), '
               "alternating rounds in one process; green: meets the bar, red: misses it; pale: causal. "
               "python tools/ratio_chart.py</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/ratio_chart.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the SVG differs from the JSON files' picture")
    ap.add_argument("--out", type=Path, default=SVG, help=f"where to write (default {SVG.relative_to(REPO_ROOT)})")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            print(f"{args.out} is out of date: run `python tools/ratio_chart.py`", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
