"""Known findings for the kernel properties: the expectations entries (conformance/verdict/expectations.py) in force.

A property's failing draw that an entry expects (its adapter, version, device, GPU and case fields match, and its
outcome, symptom and finding match the verdict) is KNOWN: the property does not fail on it and records it
(`kernel_properties.PropertyRun.known`). A failure that no entry expects, or whose symptom differs from what the
entry expects, still fails the property. A passing draw inside an entry's scope is not UNEXPECTED_PASS here: the
draws are random, so a pass among them says nothing about whether the entry is stale (the catalog's cases, judged
by ``python -m attention_conformance run`` and ``pytest conformance/``, say that).

The expectations context (device, GPU names, adapter versions, the shipped file and ``--expect`` files) is the
run's, built where every front end builds it (`conformance.running.run_context`): `known_in` reads it off a
`ConformanceRun`, `known_findings` opens one for a single adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attention_conformance.adapters.registry import LoadedAdapter
from attention_conformance.cases.case import Case
from attention_conformance.running.run_context import ConformanceRun, RunSettings
from attention_conformance.verdict.expectations import Decision, Expectation, RunContext, decide
from attention_conformance.verdict.judge import Verdict

__all__ = ["KnownFindings", "known_findings", "known_in"]


@dataclass(frozen=True)
class KnownFindings:
    """The expectations entries in force for one adapter on one device, and how they decide a verdict."""

    entries: tuple[Expectation, ...]
    ctx: RunContext
    adapter: str  # the adapter's name
    spec: str  # what --impl named

    def decide(self, case: Case, verdict: Verdict) -> Decision:
        """The outcome of ``verdict`` on ``case`` after the entries (`conformance.verdict.expectations.decide`)."""
        return decide(self.entries, case, self.adapter, self.spec, verdict.outcome, verdict.message,
                      verdict.findings, self.ctx)


def known_in(run: ConformanceRun, la: LoadedAdapter) -> KnownFindings:
    """The entries of ``run`` (a `run_context.ConformanceRun`: its device, GPU names and versions) for ``la``."""
    return KnownFindings(tuple(run.expectations.entries), run.expectations.ctx, la.name, la.spec)


def known_findings(la: LoadedAdapter, device: str, files: Sequence[str] = (), default: bool = True) -> KnownFindings:
    """The shipped expectations (unless not ``default``) and ``files`` for ``la`` on ``device``, through the run
    context every front end uses. Raises `run_context.UsageError` (naming the file) for a malformed file."""
    run = ConformanceRun(RunSettings(device=device, expect_files=tuple(files), default_expect=default), [la])
    return known_in(run, la)
