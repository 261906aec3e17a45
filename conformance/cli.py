"""``python -m attention_conformance``: list adapters, run the suite, print a repro, run the mutant catalog.

    python -m attention_conformance list [--device cpu|cuda]
    python -m attention_conformance run [--impl NAME_OR_MODULE:ATTR ...] [--profile ci|full|gpu]
                              [--device cpu|cuda] [--report-dir DIR] [-k EXPR] [--workers N]
                              [--shard K/N] [--expect FILE ...] [--no-expect] [--claims SPEC ...]
    python -m attention_conformance merge REPORT_JSON ... [--report-dir DIR] [--reexpect [--expect FILE ...]]
    python -m attention_conformance repro CASE_ID [--impl NAME_OR_MODULE:ATTR] [--device cpu|cuda]
                              [--standalone [--out FILE]]
    python -m attention_conformance cases [--profile P] [-k EXPR] [--coverage]
    python -m attention_conformance mutants [--profile ci] ...

Exit codes: 0 = no case failed; 1 = some case is FAIL, CRASH or TIMEOUT; 2 = usage or harness error.
Every usage error (a malformed or empty ``-k`` selection, ``--workers`` < 1, ``--timeout`` <= 0, an unknown or
unusable ``--impl``, a bad choice or a missing argument) is one line on stderr, ``error: ...``, no traceback,
exit code 2. ``-k`` is the grammar of `conformance.cases.selection` (names, and/or/not, parentheses; never evaluated).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

from attention_conformance.running.run_context import DETERMINISM, UsageError, check_specs, default_device, one_line

__all__ = ["main", "build_parser", "UsageParser", "UsageError", "positive_int", "positive_float", "one_line"]


class UsageParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (``PROG: error: ...``) and exit code 2."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="python -m attention_conformance",
                    description="Attention-kernel conformance harness (FP64 oracle, explicit bounds).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=UsageParser)

    ls = sub.add_parser("list", help="built-in adapters, availability here, declared capabilities")
    ls.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ls.add_argument("--impl", nargs="+", action="extend", default=None, help="also list these specs")
    ls.add_argument("--claims", action="append", default=[], metavar="[MODULE:ATTR=]SPEC",
                    help="what plain --impl functions support (as for run)")

    run = sub.add_parser("run", help="run the suite and write report.json / report.md / report.html")
    run.add_argument("--impl", nargs="+", action="extend", default=None, metavar="NAME_OR_MODULE:ATTR",
                     help="adapters to run: built-in names, 'all', module:attr or path/to/file.py:attr (default: all "
                          "available here)")
    run.add_argument("--profile", default="ci", choices=("ci", "full", "gpu"))
    run.add_argument("--device", default=None, choices=("cpu", "cuda"),
                     help="default: $CONFORMANCE_DEVICE or cpu")
    run.add_argument("--report-dir", default=os.path.join("reports", "latest"))
    run.add_argument("-k", dest="keyword", default=None,
                     help="select cases by id: names (substrings) with and/or/not and parentheses")
    run.add_argument("--workers", type=positive_int, default=1, help="spread cases over N >= 1 worker processes")
    run.add_argument("--timeout", type=positive_float, default=300.0,
                     help="seconds (> 0) per call for isolated adapters")
    run.add_argument("--determinism", default="sampled", choices=DETERMINISM)
    run.add_argument("--strict", action="store_true",
                     help="named findings (e.g. masked_nan, SEMANTICS.md §17) are FAIL instead of FINDING")
    run.add_argument("--progress-every", type=positive_int, default=25)
    run.add_argument("--quiet", action="store_true")
    run.add_argument("--failed-in", default=None, metavar="REPORT",
                     help="only the cases that failed in REPORT (a report.json[.gz]) for an adapter of this run: "
                          "re-run the failures after a fix, then `merge` the two reports")
    run.add_argument("--shard", default=None, metavar="K/N",
                     help="run only shard K of N (balanced by estimated cost); join them with `merge`")
    run.add_argument("--expect", action="append", default=[], metavar="FILE",
                     help="an expectations file (TOML) on top of the shipped one: matched failures are KNOWN")
    run.add_argument("--no-expect", action="store_true",
                     help="apply no expectations (not even the shipped file): raw outcomes")
    run.add_argument("--claims", action="append", default=[], metavar="[MODULE:ATTR=]SPEC",
                     help="what plain --impl functions support, e.g. 'dtypes=float16,bfloat16; head_dims=64,128; "
                          "causal=only' (conformance/adapters/declared.py)")

    mg = sub.add_parser("merge", help="join the report.json files of `run --shard K/N`, or of runs of one profile "
                                      "with other adapters (a later result for a (case, adapter) replaces an "
                                      "earlier one), into one report")
    mg.add_argument("reports", nargs="+", metavar="REPORT_JSON")
    mg.add_argument("--report-dir", default=os.path.join("reports", "latest"))
    mg.add_argument("--reexpect", action="store_true",
                    help="apply the shipped expectations (and --expect files) again to the raw outcomes")
    mg.add_argument("--expect", action="append", default=[], metavar="FILE",
                    help="with --reexpect: an expectations file on top of the shipped one")
    mg.add_argument("--note", action="append", default=[], metavar="TEXT",
                    help="a note shown at the top of the joined report (e.g. which results a later fix changes)")

    rp = sub.add_parser("repro", help="print a Python snippet reproducing one case through this harness (--run: run "
                                      "it); --standalone: a repro file that needs only torch and the library under "
                                      "test")
    rp.add_argument("case_id", metavar="CASE", help="a case id of the catalog, or a case as JSON (a property "
                    "failure's --case)")
    rp.add_argument("--impl", default="torch-sdpa-math")
    rp.add_argument("--device", default=None, choices=("cpu", "cuda"),
                    help="default: cpu (--standalone: cpu where the adapter runs there, else cuda)")
    rp.add_argument("--standalone", action="store_true",
                    help="write a file that imports nothing from this package: the inputs from the case's seed, "
                         "float64 expected values, the library's call, exit 1 while the defect stands "
                         "(conformance/reproduce/standalone.py)")
    rp.add_argument("--out", default=None, metavar="FILE", help="with --standalone: write the file here, not to stdout")
    rp.add_argument("--shrink", action="store_true",
                    help="search for a smaller case that still fails (one batch entry, fewer heads, shorter lengths, "
                         "smaller head dims: conformance/reproduce/shrink.py) and print it with its repro command; "
                         "exit 1 when the case fails, 0 when it passes")
    rp.add_argument("--run", action="store_true",
                    help="run the snippet (with --standalone, the file) now instead of printing it, and exit with its "
                         "status: 1 while the case fails, 0 when it passes, 2 where it cannot run")

    cs = sub.add_parser("cases", help="print the case ids of a profile")
    cs.add_argument("--profile", default="ci", choices=("ci", "full", "gpu"))
    cs.add_argument("-k", dest="keyword", default=None, help="names (substrings of the id) with and/or/not")
    cs.add_argument("--coverage", action="store_true",
                    help="print the profile's pair coverage matrix (conformance.reporting.coverage) instead of the ids")

    mu = sub.add_parser("mutants", help="run the mutant catalog (property_tests.mutants.cli)", add_help=False)
    mu.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def _select(profile: str, expr: str | None):
    """The cases of ``profile`` that ``-k expr`` selects; `UsageError` if it is malformed or selects none."""
    from attention_conformance.cases import catalog
    from attention_conformance.cases.selection import SelectorError

    try:
        cases = catalog.select(catalog.cases(profile), expr)
    except SelectorError as exc:
        raise UsageError(str(exc)) from None
    if not cases:
        raise UsageError(f"-k {expr!r} selects no case of profile {profile}")
    return cases


def _failed_in(path: str, cases: list, loaded: list, profile: str) -> list:
    """The cases of ``cases`` that failed (`verdict.outcomes.FAILING`; KNOWN is not failing) in the report at
    ``path`` for one of the ``loaded`` adapters, by name or spec; `UsageError` when there is none."""
    from attention_conformance.cases import catalog
    from attention_conformance.reporting.store import load_report
    from attention_conformance.verdict.outcomes import FAILING

    try:
        rep = load_report(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--failed-in {path}: {one_line(exc)}") from None
    ours = {la.name for la in loaded} | {la.spec for la in loaded}
    failed = {r["case_id"] for r in rep.get("results", [])
              if r.get("outcome") in FAILING and (r.get("adapter") in ours or r.get("spec") in ours)}
    chosen = [c for c in cases if c.id in failed]
    if not chosen:
        elsewhere = len(failed - {c.id for c in catalog.cases(profile)})
        why = f"; {elsewhere} of them are not cases of profile {profile}" if elsewhere else ""
        raise UsageError(f"--failed-in {path}: no case of this selection failed there for "
                         f"{', '.join(sorted(la.spec for la in loaded))} ({len(failed)} failed{why})")
    return chosen


def _cmd_list(args) -> int:
    from attention_conformance.adapters.registry import builtin_names, load

    check_specs(list(args.impl or []))
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
            for message in getattr(la.adapter, "import_messages", ()):
                print(f"{'':24s}   logged at import: {message}")
            for note in getattr(la.adapter, "signature_notes", ()):
                print(f"{'':24s}   note: {note}")
            declared = getattr(getattr(la.adapter, "claims", None), "declared", None)
            if callable(declared) and declared():
                print(f"{'':24s}   declared (conformance.claims / --claims): {declared()}")
    return 0


def _safe_version(adapter) -> str:
    try:
        return str(adapter.version())
    except Exception as exc:
        return f"? ({type(exc).__name__})"


def _cmd_run(args) -> int:
    from attention_conformance.reporting.report import build_report, exit_code, write_report
    from attention_conformance.running.engine import stderr_progress
    from attention_conformance.running.run_context import RunSettings, open_run

    device = args.device or default_device()
    cases = _select(args.profile, args.keyword)
    _check_report_dir(args.report_dir)
    settings = RunSettings(device=device, profile=args.profile, strict=args.strict, determinism=args.determinism,
                           timeout=args.timeout, expect_files=tuple(args.expect), default_expect=not args.no_expect)
    run = open_run(settings, args.impl)
    loaded = run.loaded
    for la in run.unavailable:  # only with --impl all: every built-in is listed, the unavailable ones NOT_SUPPORTED
        print(f"warning: {la.spec} is unavailable on {device}: {one_line(la.reason)} (its cases are NOT_SUPPORTED)",
              file=sys.stderr)
    for line in run.adapter_notes():
        print(line, file=sys.stderr)
    if args.claims:
        from attention_conformance.adapters.declared import unclaimed_targets

        problems = unclaimed_targets(args.claims, loaded)
        if problems:
            raise UsageError(f"--claims {problems[0]}")
    if args.failed_in:
        cases = _failed_in(args.failed_in, cases, loaded, args.profile)
    shard_extra: dict = {}
    if args.shard is not None:
        from attention_conformance.running.shard import ShardError, select

        try:
            cases, shard_extra["shard"] = select(cases, args.shard)
        except ShardError as exc:
            raise UsageError(one_line(exc)) from None
    if not args.quiet:
        print(f"running {len(cases)} cases x {len(loaded)} adapters ({', '.join(la.name for la in loaded)}) "
              f"on {device}, profile {args.profile}", file=sys.stderr)
    t0 = time.perf_counter()
    progress = None if args.quiet else stderr_progress
    command = ["python", "-m", "attention_conformance"] + list(getattr(args, "argv", None) or sys.argv[1:])

    def report_of(results, wall, partial):
        return build_report(results, loaded, profile=args.profile, device=device, wall_seconds=wall,
                            command=command, extra={"workers": args.workers, "partial": partial,
                                                    "strict": args.strict, "cases_planned": len(cases),
                                                    **shard_extra, "expectations": run.summary})

    def checkpoint(done):  # a partial report, so a run killed by a time limit still leaves its results
        partial = run.decide(done, record=False)
        write_report(args.report_dir, report_of(partial, time.perf_counter() - t0, True), partial)

    if args.workers > 1:
        from attention_conformance.running.parallel import run_parallel

        raw = run_parallel(loaded, cases, device, workers=args.workers, timeout=args.timeout,
                           determinism=args.determinism, progress=progress, checkpoint=checkpoint,
                           every=args.progress_every, strict=args.strict, outcome_of=run.progress_outcome)
    else:
        runner = run.runner()
        try:
            raw = runner.run(cases, progress=progress, every=args.progress_every, checkpoint=checkpoint,
                             outcome_of=run.progress_outcome)
        finally:
            runner.close()
    wall = time.perf_counter() - t0
    results = run.decide(raw)  # the memory family's growth verdict, then the expectations: one decision
    for line in run.warnings():
        print(line, file=sys.stderr)
    rep = report_of(results, wall, False)
    jp, mp = write_report(args.report_dir, rep, results)
    code = exit_code(results)
    by = rep["summary"]["by_outcome"]
    print(" ".join(f"{k}={v}" for k, v in by.items() if v) + f" in {wall:.1f}s; reports: {jp}, {mp}; exit {code}")
    return code


def _check_report_dir(path: str) -> None:
    """`UsageError` unless ``path`` is (or can become) a writable directory."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--report-dir {path}: exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--report-dir {path}: cannot create it: {one_line(exc)}") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"--report-dir {path}: not writable")


def _repro_case(text: str):
    """A catalog case id, or a case as JSON (``Case.to_dict``: what a property failure prints, e.g. a drawn or
    pinned example of the property suite); `UsageError` naming what is wrong."""
    from attention_conformance.cases.case import Case
    from attention_conformance.cases.catalog import case_by_id

    if not text.lstrip().startswith("{"):
        try:
            return case_by_id(text)
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
    import json

    try:
        return Case.from_dict(json.loads(text))
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"CASE: not a case id, nor a case as JSON ({type(exc).__name__}: {exc})") from None


def _cmd_repro(args) -> int:
    from attention_conformance.adapters.registry import load
    from attention_conformance.reproduce.snippet import snippet

    case = _repro_case(args.case_id)
    if args.impl == "all":
        raise UsageError("--impl all: repro reproduces one case on one adapter; name one adapter")
    check_specs([args.impl])
    if args.shrink and (args.standalone or args.run):
        raise UsageError("--shrink prints the smallest failing case and its repro command; with --standalone or --run "
                         "run the command it prints")
    if args.out is not None and not args.standalone:
        raise UsageError("--out needs --standalone (the snippet is printed)")
    if args.standalone:  # written here for a device it may not have: the writer checks the adapter's claims itself
        import shlex

        from attention_conformance.reproduce.standalone import UnwritableCase, standalone

        try:
            text = standalone(case, args.impl, args.device, command=" ".join(
                ["python -m attention_conformance", *map(shlex.quote, getattr(args, "argv", None) or sys.argv[1:])]))
        except UnwritableCase as exc:
            raise UsageError(str(exc)) from None
        if args.out is None:
            if args.run:
                return run_python(text, f"repro-{case.id}-standalone")
            sys.stdout.write(text)
            return 0
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
        print(f"wrote {args.out}: `python3 {args.out}` exits 1 while a defect stands, 0 without one, 2 where it "
              "cannot run", file=sys.stderr)
        return run_python(text, f"repro-{case.id}-standalone") if args.run else 0
    args.device = args.device or "cpu"
    la = load(args.impl, args.device)
    if la.adapter is None:
        raise UsageError(f"--impl {args.impl}: {one_line(la.reason)}")
    if not la.available:
        raise UsageError(f"--impl {args.impl} is unavailable on {args.device}: {one_line(la.reason)}")
    try:
        declined = la.adapter.supports(case, args.device)
    except Exception as exc:  # a broken supports() is the adapter's bug; the snippet would raise the same way
        declined = f"supports() raised {type(exc).__name__}: {exc}"
    if declined:
        raise UsageError(f"--impl {args.impl} declines case {case.id} (NOT_SUPPORTED): {one_line(declined)}")
    if args.shrink:
        return _shrink(case, la, args)
    text = snippet(case, args.impl, args.device)
    if args.run:
        return run_python(text, f"repro-{case.id}")
    sys.stdout.write(text)
    return 0


def _shrink(case, la, args) -> int:
    """`repro --shrink`: the smallest failing case `reproduce.shrink` finds for ``la``, with its repro command."""
    import json
    import shlex

    from attention_conformance.reproduce.shrink import shrink, size
    from attention_conformance.running.engine import Runner

    runner = Runner([la], args.device, determinism="none")
    try:
        first = runner.verdict(la, case)
        if not first.failed:
            print(f"{case.id}: {first.outcome} on {args.impl}; nothing to shrink")
            return 0
        # the same outcome as the case's own (a FAIL stays a FAIL): a reduction the harness cannot run (HARNESS_ERROR)
        # or the adapter declines (NOT_SUPPORTED) is no smaller example of this failure
        result = shrink(case, lambda c: runner.verdict(la, c).outcome == first.outcome,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
        last = runner.verdict(la, result.case) if result.case is not case else first
    finally:
        runner.close()
    small = result.case
    payload = json.dumps(small.to_dict(), separators=(",", ":"), default=list)
    dev = "" if args.device == "cpu" else f" --device {args.device}"
    print(f"{case.id} (size {size(case)}) shrinks to {small.id} (size {size(small)}): {len(result.path) - 1} "
          f"reduction(s) kept of {result.tries} tried")
    print(f"  B={small.B} Hq={small.Hq} Hkv={small.Hkv} Lq={small.Lq} Lk={small.Lk} d={small.d} dv={small.dv} "
          f"{small.dtype}; {last.outcome}: {(last.message.strip().splitlines() or [''])[0][:400]}")
    print(f"case: {payload}")
    print(f"repro: python -m attention_conformance repro {shlex.quote(payload)} --impl {shlex.quote(args.impl)}{dev} "
          "--run")
    return 1


def run_python(text: str, name: str) -> int:
    """Run the Python source ``text`` in a child interpreter (a crash or a lost CUDA context ends only the child),
    its output on this terminal; its exit status (1 for a child killed by a signal)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:120] + ".py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        sys.stdout.flush()
        rc = subprocess.run([sys.executable, path]).returncode
    return rc if 0 <= rc < 256 else 1


def _cmd_cases(args) -> int:
    cases = _select(args.profile, args.keyword)
    if args.coverage:
        from attention_conformance.reporting.coverage import profile_coverage, render_matrix

        print(render_matrix(profile_coverage(args.profile, cases)))
        return 0
    for c in cases:
        print(c.id)
    return 0


def _cmd_merge(args) -> int:
    from attention_conformance.reporting.merge import MergeError, combine, merge_shards
    from attention_conformance.reporting.reexpect import reexpect, run_context
    from attention_conformance.reporting.report import rebuild_report, write_report
    from attention_conformance.reporting.store import load_report
    from attention_conformance.verdict.expectations import ExpectationError, load_files

    loaded = []
    for path in args.reports:
        try:
            loaded.append((path, load_report(path)))
        except (OSError, ValueError) as exc:
            raise UsageError(f"merge: cannot read {path}: {one_line(exc)}") from None
    _check_report_dir(args.report_dir)
    if args.expect and not args.reexpect:
        raise UsageError("merge: --expect needs --reexpect")
    shards = all(isinstance(rep.get("shard"), dict) for _, rep in loaded)
    if not shards and any(isinstance(rep.get("shard"), dict) for _, rep in loaded):
        raise UsageError("merge: the reports mix shards of a run (--shard K/N) with whole runs; merge the shards "
                         "first, then join the result with the other runs")
    try:
        rep, results = merge_shards(loaded) if shards else combine(loaded)
    except MergeError as exc:
        raise UsageError(one_line(exc)) from None
    if args.reexpect:
        try:
            entries = load_files(args.expect, default=True)
        except ExpectationError as exc:
            raise UsageError(f"--expect: {one_line(exc)}") from None
        results, summary = reexpect(results, entries, run_context(rep))
        rep = rebuild_report(rep, results, expectations=summary)
    if args.note:
        rep["notes"] = [*rep.get("notes", []), *args.note]
    jp, mp = write_report(args.report_dir, rep, results)
    code = rep["summary"]["exit_code"]
    by = rep["summary"]["by_outcome"]
    print(" ".join(f"{k}={v}" for k, v in by.items() if v) + f" from {len(loaded)} "
          f"{'shards' if shards else 'reports'}; reports: {jp}, {mp}; exit {code}")
    return code


def _cmd_mutants(argv: list[str]) -> int:
    try:
        mod = importlib.import_module("attention_conformance.property_tests.mutants.cli")
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
    from attention_conformance.adapters.declared import ClaimsError, cli_claims

    try:
        with cli_claims(getattr(args, "claims", None) or []):
            return handlers[args.command](args)
    except (UsageError, ClaimsError) as exc:
        print(f"python -m attention_conformance {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `cases | head`: the reader left; not an error of the command
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 2
