"""``python -m conformance``: list adapters, run the suite, print a repro, run the mutant catalog.

    python -m conformance list [--device cpu|cuda]
    python -m conformance run [--impl NAME_OR_MODULE:ATTR ...] [--profile ci|full|gpu]
                              [--device cpu|cuda] [--report-dir DIR] [-k EXPR] [--workers N]
                              [--shard K/N] [--expect FILE ...] [--no-expect] [--claims SPEC ...]
    python -m conformance merge REPORT_JSON ... [--report-dir DIR]
    python -m conformance repro CASE_ID [--impl NAME_OR_MODULE:ATTR] [--device cpu|cuda]
    python -m conformance cases [--profile P] [-k EXPR]
    python -m conformance mutants [--profile ci] ...

Exit codes: 0 = no case failed; 1 = some case is FAIL, CRASH or TIMEOUT; 2 = usage or harness error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m conformance",
                                description="Attention-kernel conformance harness (FP64 oracle, explicit bounds).")
    sub = p.add_subparsers(dest="command", required=True)

    ls = sub.add_parser("list", help="built-in adapters, availability here, declared capabilities")
    ls.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ls.add_argument("--impl", nargs="+", action="extend", default=None, help="also list these specs")

    run = sub.add_parser("run", help="run the suite and write report.json / report.md / report.html")
    run.add_argument("--impl", nargs="+", action="extend", default=None, metavar="NAME_OR_MODULE:ATTR",
                     help="adapters to run: built-in names, 'all', or module:attr (default: all available here)")
    run.add_argument("--profile", default="ci", choices=("ci", "full", "gpu"))
    run.add_argument("--device", default=None, choices=("cpu", "cuda"),
                     help="default: $CONFORMANCE_DEVICE or cpu")
    run.add_argument("--report-dir", default=os.path.join("reports", "latest"))
    run.add_argument("-k", dest="keyword", default=None, help="select cases by id: substrings with and/or/not")
    run.add_argument("--workers", type=int, default=1, help="spread cases over N worker processes")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds per call for isolated adapters")
    run.add_argument("--determinism", default="sampled", choices=("none", "sampled", "all"))
    run.add_argument("--progress-every", type=int, default=25)
    run.add_argument("--quiet", action="store_true")
    run.add_argument("--shard", default=None, metavar="K/N",
                     help="run only shard K of N (balanced by estimated cost); join them with `merge`")
    run.add_argument("--expect", action="append", default=[], metavar="FILE",
                     help="an expectations file (TOML) on top of the shipped one: matched failures are KNOWN")
    run.add_argument("--no-expect", action="store_true",
                     help="apply no expectations (not even the shipped file): raw outcomes")
    run.add_argument("--claims", action="append", default=[], metavar="[MODULE:ATTR=]SPEC",
                     help="what plain --impl functions support, e.g. 'dtypes=float16,bfloat16; head_dims=64,128; "
                          "causal=only' (conformance/declared.py)")

    mg = sub.add_parser("merge", help="join the report.json files of `run --shard K/N` into one report")
    mg.add_argument("reports", nargs="+", metavar="REPORT_JSON")
    mg.add_argument("--report-dir", default=os.path.join("reports", "latest"))

    rp = sub.add_parser("repro", help="print a standalone Python snippet reproducing one case")
    rp.add_argument("case_id")
    rp.add_argument("--impl", default="torch-sdpa-math")
    rp.add_argument("--device", default="cpu", choices=("cpu", "cuda"))

    cs = sub.add_parser("cases", help="print the case ids of a profile")
    cs.add_argument("--profile", default="ci", choices=("ci", "full", "gpu"))
    cs.add_argument("-k", dest="keyword", default=None)

    mu = sub.add_parser("mutants", help="run the mutant catalog (property_tests.mutants.cli)", add_help=False)
    mu.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def _cmd_list(args) -> int:
    from conformance.registry import builtin_names, load

    specs = builtin_names() + [s for s in (args.impl or []) if s not in builtin_names()]
    for spec in specs:
        la = load(spec, args.device)
        status = "available" if la.available else f"unavailable: {la.reason}"
        print(f"{spec:24s} {status}")
        if la.adapter is not None:
            try:
                caps = la.adapter.capabilities.to_dict()
            except Exception as exc:
                caps = {"error": repr(exc)}
            claimed = [k for k, v in caps.items() if v is True]
            print(f"{'':24s}   dtypes={caps.get('dtypes')} devices={caps.get('devices')} "
                  f"head_dims={caps.get('head_dims') or 'any'}")
            print(f"{'':24s}   claims: {', '.join(claimed) or '-'}; fp8={caps.get('fp8') or '-'}; "
                  f"isolate={la.isolate}; version={_safe_version(la.adapter)}")
    return 0


def _safe_version(adapter) -> str:
    try:
        return str(adapter.version())
    except Exception as exc:
        return f"? ({type(exc).__name__})"


def _cmd_run(args) -> int:
    from conformance import catalog
    from conformance.engine import Runner, stderr_progress
    from conformance.registry import builtin_names, load_many, resolve_specs
    from conformance.report import build_report, exit_code, write_report

    device = args.device or os.environ.get("CONFORMANCE_DEVICE", "cpu")
    specs, explicit = resolve_specs(args.impl)
    loaded = load_many(specs, device)
    if not explicit:
        loaded = [la for la in loaded if la.available]
    broken = [la for la in loaded if la.adapter is None and la.spec not in builtin_names()]
    if broken:  # a module:attr the user named that cannot be imported or is not an adapter: usage error
        for la in broken:
            print(f"error: --impl {la.spec}: {la.reason}", file=sys.stderr)
        return 2
    missing = [la for la in loaded if not la.available]
    if explicit and missing:  # named with --impl but cannot run here: a CI job must not pass without testing it
        for la in missing:
            print(f"error: --impl {la.spec} is unavailable on {device}: {la.reason} "
                  f"(see `python -m conformance list --device {device}`)", file=sys.stderr)
        return 2
    for la in missing:  # only with --impl all: every built-in is listed, the unavailable ones as NOT_SUPPORTED
        print(f"warning: {la.spec} is unavailable on {device}: {la.reason} (its cases are NOT_SUPPORTED)",
              file=sys.stderr)
    if not loaded:
        print(f"error: no adapter available on {device} (try `python -m conformance list`)", file=sys.stderr)
        return 2
    if args.claims:
        from conformance.declared import unclaimed_targets

        for problem in unclaimed_targets(args.claims, loaded):
            print(f"error: --claims {problem}", file=sys.stderr)
            return 2
    try:
        cases = catalog.select(catalog.cases(args.profile), args.keyword)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cases:
        print(f"error: -k {args.keyword!r} selects no case of profile {args.profile}", file=sys.stderr)
        return 2
    from conformance.expectations import ExpectationError, RunExpectations

    if args.no_expect and args.expect:
        print("error: --expect and --no-expect exclude each other", file=sys.stderr)
        return 2
    try:
        expect = RunExpectations.for_run(args.expect, default=not args.no_expect, device=device, loaded=loaded)
    except ExpectationError as exc:
        print(f"error: --expect: {exc}", file=sys.stderr)
        return 2
    shard_extra: dict = {}
    if args.shard is not None:
        from conformance.shard import ShardError, select

        try:
            cases, shard_extra["shard"] = select(cases, args.shard)
        except ShardError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if not args.quiet:
        print(f"running {len(cases)} cases x {len(loaded)} adapters ({', '.join(la.name for la in loaded)}) "
              f"on {device}, profile {args.profile}", file=sys.stderr)
    t0 = time.perf_counter()
    progress = None if args.quiet else stderr_progress
    command = ["python", "-m", "conformance"] + list(getattr(args, "argv", None) or sys.argv[1:])

    def checkpoint(done):  # a partial report, so a run killed by a time limit still leaves its results
        done = expect.apply(done)
        rep = build_report(done, loaded, profile=args.profile, device=device, wall_seconds=time.perf_counter() - t0,
                           command=command, extra={"workers": args.workers, "partial": True,
                                                   "cases_planned": len(cases), **shard_extra,
                                                   "expectations": expect.summary})
        write_report(args.report_dir, rep, done)

    if args.workers > 1:
        from conformance.parallel import run_parallel

        results = run_parallel(loaded, cases, device, workers=args.workers, timeout=args.timeout,
                               determinism=args.determinism, progress=progress, checkpoint=checkpoint,
                               every=args.progress_every)
    else:
        runner = Runner(loaded, device, timeout=args.timeout, determinism=args.determinism)
        try:
            results = runner.run(cases, progress=progress, every=args.progress_every, checkpoint=checkpoint)
        finally:
            runner.close()
    wall = time.perf_counter() - t0
    results = expect.apply(results)
    for line in expect.warnings():
        print(line, file=sys.stderr)
    rep = build_report(results, loaded, profile=args.profile, device=device, wall_seconds=wall, command=command,
                       extra={"workers": args.workers, "partial": False, "cases_planned": len(cases), **shard_extra,
                              "expectations": expect.summary})
    jp, mp = write_report(args.report_dir, rep, results)
    code = exit_code(results)
    by = rep["summary"]["by_outcome"]
    print(" ".join(f"{k}={v}" for k, v in by.items() if v) + f" in {wall:.1f}s; reports: {jp}, {mp}; exit {code}")
    return code


def _cmd_repro(args) -> int:
    from conformance.catalog import case_by_id
    from conformance.repro import snippet

    try:
        case = case_by_id(args.case_id)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    sys.stdout.write(snippet(case, args.impl, args.device))
    return 0


def _cmd_cases(args) -> int:
    from conformance import catalog

    for c in catalog.select(catalog.cases(args.profile), args.keyword):
        print(c.id)
    return 0


def _cmd_merge(args) -> int:
    import json

    from conformance.report import write_report
    from conformance.shard import ShardError, merge

    loaded = []
    for path in args.reports:
        try:
            with open(path) as f:
                loaded.append((path, json.load(f)))
        except (OSError, ValueError) as exc:
            print(f"error: merge: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    try:
        rep, results = merge(loaded)
    except ShardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    jp, mp = write_report(args.report_dir, rep, results)
    code = rep["summary"]["exit_code"]
    by = rep["summary"]["by_outcome"]
    print(" ".join(f"{k}={v}" for k, v in by.items() if v) + f" from {len(loaded)} shards; reports: {jp}, {mp}; "
          f"exit {code}")
    return code


def _cmd_mutants(argv: list[str]) -> int:
    try:
        mod = importlib.import_module("property_tests.mutants.cli")
    except ImportError as exc:
        print(f"error: the mutant catalog is not available (property_tests.mutants.cli: {exc})", file=sys.stderr)
        return 2
    return int(mod.main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "mutants":
        return _cmd_mutants(argv[1:])
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded in report.json as the command that produced it
    handlers = {"list": _cmd_list, "run": _cmd_run, "repro": _cmd_repro, "cases": _cmd_cases, "merge": _cmd_merge}
    from conformance.declared import ClaimsError, cli_claims

    try:
        with cli_claims(getattr(args, "claims", None) or []):
            return handlers[args.command](args)
    except ClaimsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 2
