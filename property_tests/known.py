"""Known findings for the kernel properties: the expectations entries (conformance/expectations.py) in force.

A property's failing draw that an entry expects (its adapter, version, device, GPU and case fields match, and its
outcome, symptom and finding match the verdict) is KNOWN: the property does not fail on it and records it
(`kernel_properties.PropertyRun.known`). A failure that no entry expects, or whose symptom differs from what the
entry expects, still fails the property. A passing draw inside an entry's scope is not UNEXPECTED_PASS here: the
draws are random, so a pass among them says nothing about whether the entry is stale (the catalog's cases, judged
by ``python -m attention_conformance run`` and ``pytest conformance/``, say that).

`known_findings` is the property suite's one call that builds the expectations context (device, GPU names,
adapter version, the shipped file and ``--expect`` files); a run-context module shared by every front end replaces
that one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attention_conformance.case import Case
from attention_conformance.expectations import Decision, Expectation, RunContext, RunExpectations, decide
from attention_conformance.judge import Verdict
from attention_conformance.registry import LoadedAdapter

__all__ = ["KnownFindings", "known_findings"]


@dataclass(frozen=True)
class KnownFindings:
    """The expectations entries in force for one adapter on one device, and how they decide a verdict."""

    entries: tuple[Expectation, ...]
    ctx: RunContext
    adapter: str  # the adapter's name
    spec: str  # what --impl named

    def decide(self, case: Case, verdict: Verdict) -> Decision:
        """The outcome of ``verdict`` on ``case`` after the entries (`conformance.expectations.decide`)."""
        return decide(self.entries, case, self.adapter, self.spec, verdict.outcome, verdict.message,
                      verdict.findings, self.ctx)


def known_findings(la: LoadedAdapter, device: str, files: Sequence[str] = (), default: bool = True) -> KnownFindings:
    """The shipped expectations (unless not ``default``) and ``files`` for ``la`` on ``device``: its version, the
    device's GPU names (looked up since there are entries). Raises `ExpectationError` for a malformed file."""
    rx = RunExpectations.for_run(list(files), default=default, device=device, loaded=[la])
    return KnownFindings(tuple(rx.entries), rx.ctx, la.name, la.spec)
