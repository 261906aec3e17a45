"""Expectations applied again to stored results: ``python -m attention_conformance merge --reexpect``.

`reexpect` applies expectations entries again to stored results (the raw outcome of a KNOWN result is
kept in ``expectation.raw_outcome``): triage an existing report with an expectations file written after
the run, without running it again. `run_context` is the expectations context a stored report holds.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from attention_conformance.cases.case import Case
from attention_conformance.running.engine import CaseResult
from attention_conformance.verdict.expectations import Expectation, RunContext, apply

__all__ = ["reexpect", "run_context"]


def run_context(rep: dict) -> RunContext:
    """The expectations context of a stored report: its device, GPU names and adapter versions."""
    versions: dict[str, str] = {}
    for a in rep.get("adapters", []):
        if a.get("version") is not None:
            versions[a.get("name", "")] = versions[a.get("spec", a.get("name", ""))] = str(a["version"])
    gpus = tuple(g.get("name", "") for g in (rep.get("environment") or {}).get("gpus", []))
    return RunContext(rep.get("device", "cpu"), gpus, versions)


def _raw(r: CaseResult) -> CaseResult:
    """`r` as the judge gave it: the outcome before any expectation, without the note an entry added."""
    if not r.expectation:
        return r
    r = copy.copy(r)
    r.outcome = r.expectation.get("raw_outcome", r.outcome)
    note = r.expectation.get("note")
    if note is None:  # reports written before the note was stored: it is the message's first line
        note = r.message.partition("\n")[0]
    r.message = r.message.removeprefix(note).removeprefix("\n")
    r.expectation = None
    return r


def reexpect(results: Sequence[CaseResult], entries: Sequence[Expectation], ctx: RunContext
             ) -> tuple[list[CaseResult], dict]:
    """`results` with `entries` applied to their raw outcomes (earlier expectations undone first)."""
    raw = [_raw(r) for r in results]
    return apply(entries, [(Case.from_dict(r.case), r) for r in raw], ctx)
