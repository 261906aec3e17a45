"""Compare two conformance reports of the same case list run with different worker counts (issue 7).

Prints a Markdown block: wall time of each run, the ratio (many workers / one worker), and whether
every (case, adapter) pair got the same outcome. Exit status 1 when outcomes differ.

    python tools/workers_compare.py w1/report.json w2/report.json [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["compare_reports", "main"]


def _outcomes(report: dict) -> dict[tuple[str, str], str]:
    return {(r["case_id"], r["adapter"]): r["outcome"] for r in report["results"]}


def compare_reports(single: dict, multi: dict) -> dict:
    """Wall times, ratio and the outcome differences of two reports (``single`` = the 1-worker run)."""
    a, b = _outcomes(single), _outcomes(multi)
    differ = sorted(
        f"{case} [{adapter}]: {a.get((case, adapter), 'missing')} with {single['workers']} worker(s), "
        f"{b.get((case, adapter), 'missing')} with {multi['workers']}"
        for case, adapter in set(a) | set(b)
        if a.get((case, adapter)) != b.get((case, adapter))
    )
    return {
        "command_single": " ".join(single["command"]),
        "command_multi": " ".join(multi["command"]),
        "workers": [single["workers"], multi["workers"]],
        "wall_seconds": [single["wall_seconds"], multi["wall_seconds"]],
        "ratio": multi["wall_seconds"] / single["wall_seconds"],
        "pairs": len(a),
        "outcomes_equal": not differ,
        "differences": differ,
        "gpus": [g["name"] for g in multi["environment"].get("gpus", [])],
        "by_outcome": multi["summary"]["by_outcome"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("single", type=Path, help="report.json of the 1-worker run")
    ap.add_argument("multi", type=Path, help="report.json of the N-worker run")
    ap.add_argument("--json", type=Path, help="also write the comparison as JSON here")
    args = ap.parse_args(argv)
    cmp = compare_reports(json.loads(args.single.read_text()), json.loads(args.multi.read_text()))
    w1, wn = cmp["workers"]
    t1, tn = cmp["wall_seconds"]
    print(f"- GPUs: {', '.join(cmp['gpus']) or 'none'}")
    print(f"- {cmp['pairs']} (case, adapter) pairs; outcomes {dict(cmp['by_outcome'])}")
    print("\n| workers | wall (s) | ratio to 1 worker |\n|---|---|---|")
    print(f"| {w1} | {t1:.1f} | 1.00 |\n| {wn} | {tn:.1f} | {cmp['ratio']:.2f} |")
    print(f"\nSame outcome for every pair: {'yes' if cmp['outcomes_equal'] else 'NO'}")
    for line in cmp["differences"][:50]:
        print(f"- {line}")
    print(f"\n1 worker: `{cmp['command_single']}`\n\n{wn} workers: `{cmp['command_multi']}`")
    if args.json:
        args.json.write_text(json.dumps(cmp, indent=2) + "\n")
    return 0 if cmp["outcomes_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
