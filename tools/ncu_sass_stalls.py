"""Where a kernel's warps stall, from Nsight Compute's per-SASS-instruction source page.

Input: ``ncu -i REPORT --page source --csv --print-source sass > FILE.csv`` (the report taken with ``--set full``,
which samples warp stalls). Output: the stall reasons over all samples, then the instructions with the most
samples, then (``--regions``) the samples between landmark instructions (warpgroup waits ``WARPGROUP.DEPBAR``,
named barriers ``BAR.SYNC``, ``EXIT``): the stages of a consumer loop (its GEMM waits, its element-wise work,
its epilogue) get one line each with their three main reasons.

Run: ``python tools/ncu_sass_stalls.py FILE.csv [--top 40] [--regions]``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Instr", "main", "read_source_page", "regions", "summary"]

LANDMARKS = ("WARPGROUP.DEPBAR", "BAR.SYNC", "EXIT")


@dataclass
class Instr:
    """One SASS instruction of the source page: its index, text, samples (all), executions and stall reasons."""

    index: int
    sass: str
    samples: int
    executed: int
    stalls: Counter = field(default_factory=Counter)


def read_source_page(path: str) -> list[Instr]:
    """The instructions of ``path`` (first line the kernel name, second the column names)."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header = next(r for r in rows if "Source" in r and "Address" in r)
    col = {h: i for i, h in enumerate(header)}
    start = rows.index(header) + 1
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(r: list[str], name: str) -> int:
        v = r[col[name]] if col.get(name, len(r)) < len(r) else ""
        return int(v) if v.strip().lstrip("-").isdigit() else 0

    out = []
    for r in rows[start:]:
        if len(r) < len(header):
            continue
        st = Counter({h[len("stall_"):]: num(r, h) for h in reasons})
        out.append(Instr(len(out), r[col["Source"]].strip(), num(r, "Warp Stall Sampling (All Samples)"),
                         num(r, "Instructions Executed"), +st))
    return out


def _reasons(c: Counter, total: int, n: int = 3) -> str:
    return ", ".join(f"{k} {100 * v / max(total, 1):.0f}%" for k, v in c.most_common(n))


def summary(instrs: list[Instr], top: int = 40) -> list[str]:
    """Stall reasons over all samples, then the ``top`` instructions by samples."""
    total = sum(i.samples for i in instrs)
    agg: Counter = Counter()
    for i in instrs:
        agg.update(i.stalls)
    lines = [f"{len(instrs)} instructions, {total} samples"]
    lines += [f"  {k:20s} {v:10d} {100 * v / max(total, 1):5.1f}%" for k, v in agg.most_common(12)]
    lines.append(f"top {top} instructions (index, share of samples, executions, SASS, main reasons):")
    for i in sorted(instrs, key=lambda x: -x.samples)[:top]:
        lines.append(f"{i.index:6d} {100 * i.samples / max(total, 1):5.2f}% {i.executed:>11d}  {i.sass[:58]:58s} "
                     f"{_reasons(i.stalls, i.samples)}")
    return lines


def regions(instrs: list[Instr]) -> list[str]:
    """Samples per stretch of code between landmark instructions (each landmark closes its stretch)."""
    total = sum(i.samples for i in instrs)
    lines = ["regions (first..last index, share of samples, main reasons, the closing instruction):"]
    start, acc, n = 0, Counter(), 0
    for i in instrs:
        acc.update(i.stalls)
        n += i.samples
        if any(m in i.sass for m in LANDMARKS) or i.index == len(instrs) - 1:
            if n > total / 200:
                lines.append(f"{start:6d}..{i.index:<6d} {100 * n / max(total, 1):5.1f}%  {_reasons(acc, n):48s} "
                             f"{i.sass[:40]}")
            start, acc, n = i.index + 1, Counter(), 0
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--regions", action="store_true")
    args = ap.parse_args(argv)
    try:
        instrs = read_source_page(args.csv)
    except (OSError, StopIteration, KeyError) as e:
        print(f"ncu_sass_stalls: {args.csv}: not an ncu source page ({e!r})", file=sys.stderr)
        return 2
    print("\n".join(summary(instrs, args.top)))
    if args.regions:
        print("\n".join(regions(instrs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
