"""Run the checks of the harness against each mutant and record what killed it.

For every mutant (`catalog.MUTANTS`) the runner builds the buggy adapter (`build_adapter`), then runs
the checks cheap-first and stops at the first one that fails (the default order; ``--order`` picks
others, e.g. ``generated`` alone to measure what Hypothesis finds with no help):

1. ``pinned``: the property suite's pinned ``@example`` cases (`kernel_properties.PINNED`, tiny shapes,
   one per bug found so far) that the adapter claims, judged by the engine;
2. ``conformance:<profile>``: the engine's catalog cases of the profile that the adapter claims,
   cheapest first (`conformance.cases.catalog.estimated_cost`), each judged by the engine
   (`property_tests.kernel_check.evaluate`);
3. ``property:<kind>``: the Hypothesis kernel properties the adapter declares
   (`property_tests.kernel_properties`), derandomized, shrinking on failure (``properties`` replays the
   pinned examples first, ``generated`` does not).

A mutant is *killed* when a check reports FAIL, CRASH or TIMEOUT; the result records the check, the
minimal counterexample (catalog case, or the Hypothesis-shrunk case), the evaluations it took and the
time. Every mutant must be killed within ``time_limit`` seconds (60 s in the ci profile).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hypothesis import settings

from attention_conformance.adapters.base import Adapter
from attention_conformance.cases.case import Case
from attention_conformance.property_tests import profiles
from attention_conformance.property_tests.kernel_check import evaluate
from attention_conformance.property_tests.kernel_properties import PropertyFailure, build_property, properties_for
from attention_conformance.property_tests.mutants.apply import check_applies, load_module, load_with
from attention_conformance.property_tests.mutants.catalog import MUTANTS, Mutant
from attention_conformance.property_tests.mutants.wrappers import WRAPPERS

__all__ = ["KillResult", "build_adapter", "run_mutant", "run_all", "format_table", "score_line", "ORDERS", "STEPS"]

ORDERS = ("pinned", "conformance", "properties")
STEPS = ("pinned", "conformance", "properties", "generated")


@dataclass
class KillResult:
    """What happened to one mutant."""

    name: str
    bug_class: str
    killed: bool
    check: str = ""  # "conformance:ci" or "property:<kind>"
    failed_check: str = ""  # the engine check that failed (out, lse, dq, inputs_unchanged, ...)
    counterexample: str = ""  # case id and shape
    seconds: float = 0.0
    evaluations: int = 0  # cases evaluated until the kill (catalog cases + Hypothesis examples)
    message: str = ""
    error: str = ""  # harness error: the patch does not apply, the adapter cannot be built

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def build_adapter(mutant: Mutant) -> Adapter:
    """The reference adapter of ``mutant.adapter`` built on the mutated kernel (or wrapped by the bug)."""
    from attention_conformance.adapters.registry import load

    loaded = load(mutant.adapter)
    if loaded.adapter is None:
        raise RuntimeError(f"{mutant.name}: base adapter {mutant.adapter} unavailable: {loaded.reason}")
    base_cls = type(loaded.adapter)
    if mutant.wrapper:
        return WRAPPERS[mutant.wrapper](base_cls())
    label = f"mutant_{mutant.name}"
    check_applies(mutant.module, mutant.edits, mutant.name)
    patched = load_module(mutant.module, mutant.edits, label)
    target = getattr(base_cls, "module_name", "")
    if not target or target == mutant.module:
        kernel = patched
    else:
        kernel = load_with(target, {mutant.module: patched}, label)
    return base_cls(kernel_module=kernel)


def _shape(case: Case) -> str:
    s = f"B{case.B} H{case.Hq}/{case.Hkv} Lq{case.Lq} Lk{case.Lk} d{case.d}"
    return s + (f" dv{case.dv}" if case.dv != case.d else "")


def _conformance(adapter: Adapter, profile: str, deadline: float, res: KillResult) -> bool:
    from attention_conformance.cases.catalog import cases, estimated_cost

    todo = sorted((c for c in cases(profile) if adapter.supports(c, "cpu") is None), key=estimated_cost)
    for case in todo:
        if time.perf_counter() > deadline:
            return False
        res.evaluations += 1
        v = evaluate(adapter, case)
        if v.failed:
            res.killed, res.check, res.failed_check = True, f"conformance:{profile}", v.check
            res.counterexample = f"{case.id} ({_shape(case)})"
            res.message = v.message.strip().splitlines()[0] if v.message else v.outcome
            return True
    return False


def _pinned(adapter: Adapter, deadline: float, res: KillResult) -> bool:
    from attention_conformance.property_tests.kernel_properties import PINNED

    for kind in properties_for(adapter):
        for case in PINNED.get(kind, ()):
            if time.perf_counter() > deadline:
                return False
            if adapter.supports(case, "cpu") is not None:
                continue
            res.evaluations += 1
            v = evaluate(adapter, case)
            if v.failed:
                res.killed, res.check, res.failed_check = True, f"property:{kind}:pinned", v.check
                res.counterexample = f"{case.id} ({_shape(case)})"
                res.message = v.message.strip().splitlines()[0] if v.message else v.outcome
                return True
    return False


def _properties(adapter: Adapter, hyp_profile: str, deadline: float, res: KillResult, pinned: bool = True) -> bool:
    profiles.register()
    base = settings.get_profile(hyp_profile)
    for kind in properties_for(adapter):
        if time.perf_counter() > deadline:
            return False
        run = build_property(kind, adapter, adapter_name=adapter.name, pinned=pinned,
                             settings_obj=settings(base, report_multiple_bugs=False))
        try:
            run.test()
        except PropertyFailure as exc:
            case, verdict = (exc.case, exc.verdict) if run.last_failure is None else run.last_failure
            res.evaluations += run.examples_run
            res.killed, res.check, res.failed_check = True, f"property:{kind}", verdict.check
            res.counterexample = f"{case.id} ({_shape(case)})"
            res.message = verdict.message.strip().splitlines()[0] if verdict.message else verdict.outcome
            return True
        except BaseException as exc:  # Hypothesis may wrap the failure (ExceptionGroup) or report flakiness
            if isinstance(exc, KeyboardInterrupt):
                raise
            res.evaluations += run.examples_run
            if run.last_failure is not None:
                case, verdict = run.last_failure
                res.killed, res.check, res.failed_check = True, f"property:{kind}", verdict.check
                res.counterexample = f"{case.id} ({_shape(case)})"
                res.message = f"{type(exc).__name__}: {verdict.message.strip().splitlines()[0]}"
                return True
            res.error = f"property:{kind} raised {type(exc).__name__}: {exc}"
            return False
        res.evaluations += run.examples_run
    return False


def run_mutant(mutant: Mutant, profile: str = "ci", *, hyp_profile: str = "mutants", time_limit: float = 60.0,
               order: Sequence[str] = ORDERS) -> KillResult:
    """Build ``mutant`` and run the checks in ``order`` until one kills it (or ``time_limit`` passes)."""
    res = KillResult(mutant.name, mutant.bug_class, False)
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    try:
        adapter = build_adapter(mutant)
    except Exception as exc:
        res.error = f"cannot build: {type(exc).__name__}: {exc}"
        res.seconds = time.perf_counter() - t0
        return res
    for step in order:
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
        if step == "pinned" and _pinned(adapter, deadline, res):
            break
        if step == "conformance" and _conformance(adapter, profile, deadline, res):
            break
        if step in ("properties", "generated") and _properties(adapter, hyp_profile, deadline, res,
                                                               pinned=step == "properties"):
            break
    res.seconds = time.perf_counter() - t0
    if res.killed and res.seconds > time_limit:
        res.message = f"killed after {res.seconds:.1f} s > limit {time_limit:g} s; " + res.message
    return res


def run_all(mutants: Sequence[Mutant] = MUTANTS, profile: str = "ci", *, hyp_profile: str = "mutants",
            time_limit: float = 60.0, order: Sequence[str] = ORDERS,
            progress: Callable[[KillResult], None] | None = None) -> list[KillResult]:
    """`run_mutant` for every mutant, in catalog order."""
    out = []
    for m in mutants:
        r = run_mutant(m, profile, hyp_profile=hyp_profile, time_limit=time_limit, order=order)
        if progress is not None:
            progress(r)
        out.append(r)
    return out


def score_line(results: Sequence[KillResult], time_limit: float = 60.0) -> str:
    """``mutation score: K/N (P%)``; a kill slower than ``time_limit`` does not count."""
    k = sum(1 for r in results if r.killed and r.seconds <= time_limit)
    n = len(results)
    pct = 100.0 * k / n if n else 0.0
    return f"mutation score: {k}/{n} ({pct:.0f}%)"


def format_table(results: Sequence[KillResult]) -> str:
    """A fixed-width table: mutant, killed, check, failed engine check, counterexample, time, evaluations."""
    head = ("mutant", "killed", "killed by", "check", "minimal counterexample", "time", "evals")
    rows = []
    for r in results:
        killed = "yes" if r.killed else ("ERROR" if r.error else "NO")
        cex = r.counterexample or (r.error or r.message)[:90]
        rows.append((r.name, killed, r.check or "-", r.failed_check or "-", cex, f"{r.seconds:.1f}s",
                     str(r.evaluations)))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    widths[4] = min(widths[4], 100)
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c[:w].ljust(w) for c, w in zip(row, widths)))
    return "\n".join(lines)
