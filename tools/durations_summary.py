"""Where a pytest session's time went, from the ``.durations`` file `tools/pytest_stream_failures.py` streams (also for
a session cut off before its summary): ``python tools/durations_summary.py failures.txt.durations [--top N]``.

Prints the worker-seconds per test file (per adapter for the conformance tests, whose verdict is decided while they
are set up), each pytest-xdist worker's busy seconds against the span it reported in (busy / span: how much of the
run it spent in tests; the rest is waiting: for the controller, for the GPU held alone, for a shared oracle), the
longest tests, and the tests still running when the session ended. Lines of the older four-column form (no arrival
time, no worker) count in the totals and the longest tests only.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from compare_front_ends import conformance_pair  # a neighbour in tools/, the folder a script runs from

__all__ = ["Row", "group_of", "main", "read", "summary"]


@dataclass(frozen=True)
class Row:
    seconds: float
    outcome: str
    phase: str
    nodeid: str
    at: float | None  # seconds since the session began when the report arrived
    worker: str | None


def read(path: Path) -> list[Row]:
    rows = []
    for line in path.read_text().splitlines():
        cols = line.split("\t")
        if len(cols) < 4:
            continue
        at = float(cols[4]) if len(cols) > 5 else None
        worker = cols[5] if len(cols) > 5 and cols[5] != "-" else None
        rows.append(Row(float(cols[0]), cols[1], cols[2], cols[3], at, worker))
    return rows


def group_of(nodeid: str) -> str:
    """The test file, or ``conformance: ADAPTER`` for a conformance test (``test_case[CASE::SPEC]``)."""
    pair = conformance_pair(nodeid)
    return f"conformance: {pair[1]}" if pair is not None else nodeid.split("::", 1)[0]


def summary(rows: list[Row], top: int = 15) -> str:
    done = [r for r in rows if r.outcome != "running"]
    out = [f"{sum(r.seconds for r in done):.0f} worker-seconds in {len(done)} reports"]
    by_group: dict[str, list[float]] = defaultdict(list)
    for r in done:
        by_group[group_of(r.nodeid)].append(r.seconds)
    out.append("\nworker-seconds by test file (conformance tests by adapter):")
    for name, secs in sorted(by_group.items(), key=lambda kv: -sum(kv[1]))[:top]:
        out.append(f"  {sum(secs):8.1f} s  {len(secs):5d} reports  {name}")
    timed = [r for r in done if r.at is not None and r.worker is not None]
    if timed:
        out.append("\nworkers (busy: the reported durations; span: its first report's start to its last report):")
        by_worker: dict[str, list[Row]] = defaultdict(list)
        for r in timed:
            by_worker[r.worker].append(r)
        for worker, rs in sorted(by_worker.items()):
            busy = sum(r.seconds for r in rs)
            start = min(r.at - r.seconds for r in rs)
            end = max(r.at for r in rs)
            span = max(end - start, 1e-9)
            out.append(f"  {worker:6s} busy {busy:7.1f} s of {span:7.1f} s ({100 * busy / span:3.0f}%), "
                       f"last report at {end:.0f} s")
    out.append(f"\nlongest {top}:")
    for r in sorted(done, key=lambda r: -r.seconds)[:top]:
        out.append(f"  {r.seconds:8.1f} s  {r.phase:8s} {r.outcome:7s} {r.nodeid}")
    running = [r for r in rows if r.outcome == "running"]
    if running:
        out.append(f"\nstill running at the end ({len(running)}):")
        out.extend(f"  {r.seconds:8.1f} s  {r.nodeid}" for r in sorted(running, key=lambda r: -r.seconds))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("durations", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    if not args.durations.is_file():
        print(f"durations_summary: {args.durations}: no such file", file=sys.stderr)
        return 2
    print(summary(read(args.durations), args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
