"""``python -m attention_conformance mutants`` / ``python -m attention_conformance.property_tests.mutants``: the
mutation-score table.

Runs the conformance catalog of ``--profile`` (default ci) and the Hypothesis kernel properties on
every mutant of `property_tests.mutants.catalog`, prints one row per mutant (killed or not, the check
that killed it, the minimal counterexample, time to kill, evaluations) and ends with the line
``mutation score: K/N (P%)``. Exit status 0 only when every mutant is killed within the time limit;
1 otherwise; 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from attention_conformance.cases.selection import SelectorError, select
from attention_conformance.cli import UsageParser, positive_float
from attention_conformance.property_tests.mutants.catalog import MUTANTS
from attention_conformance.property_tests.mutants.runner import ORDERS, STEPS, format_table, run_all, score_line

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    ap = UsageParser(prog="python -m attention_conformance mutants",
                     description="Mutation testing of the conformance harness.")
    ap.add_argument("--profile", default="ci", choices=("ci", "full", "gpu"),
                    help="conformance catalog profile (default ci); ci also bounds Hypothesis")
    ap.add_argument("--hypothesis-profile", default=None,
                    help="Hypothesis profile for the properties (default: 'mutants' for ci, 'dev' otherwise)")
    ap.add_argument("-k", dest="select", default=None,
                    help="only these mutants: names (substrings of the mutant name) with and/or/not, parentheses")
    ap.add_argument("--order", default=",".join(ORDERS),
                    help="check order, comma separated from: pinned, conformance, properties, generated "
                         "(generated = Hypothesis without the pinned examples; default: %(default)s)")
    ap.add_argument("--time-limit", type=positive_float, default=60.0, help="seconds allowed per mutant (default 60)")
    ap.add_argument("--json", default=None, help="also write the results as JSON to this path")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    try:
        mutants = select(MUTANTS, args.select, key=lambda m: m.name)
    except SelectorError as exc:
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for m in mutants:
            where = m.module or f"wrapper {m.wrapper}"
            print(f"{m.name:36s} {m.adapter:18s} {where:28s} {m.bug_class}")
        return 0
    if not mutants:
        print(f"{ap.prog}: error: no mutant matches -k {args.select!r}", file=sys.stderr)
        return 2
    order = [s.strip() for s in args.order.split(",") if s.strip()]
    bad = [s for s in order if s not in STEPS]
    if bad:
        print(f"{ap.prog}: error: --order: unknown step(s) {bad}; expected {list(STEPS)}", file=sys.stderr)
        return 2
    hyp = args.hypothesis_profile or ("mutants" if args.profile == "ci" else "dev")
    t0 = time.perf_counter()

    def progress(r):
        state = "killed" if r.killed else ("ERROR" if r.error else "SURVIVED")
        print(f"  {r.name}: {state} in {r.seconds:.1f}s ({r.check or r.error or '-'})", file=sys.stderr, flush=True)

    results = run_all(mutants, args.profile, hyp_profile=hyp, time_limit=args.time_limit, order=order,
                      progress=progress)
    print(format_table(results))
    slow = max(results, key=lambda r: r.seconds if r.killed else -1.0)
    if slow.killed:
        print(f"slowest kill: {slow.name} in {slow.seconds:.1f}s after {slow.evaluations} evaluation(s) "
              f"({slow.check})")
    print(f"total time: {time.perf_counter() - t0:.1f}s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([r.to_dict() for r in results], fh, indent=1)
    line = score_line(results, args.time_limit)
    print(line)
    return 0 if all(r.killed and r.seconds <= args.time_limit for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
