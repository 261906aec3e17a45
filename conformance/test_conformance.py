"""The conformance suite under pytest: one test per (case, adapter), parametrized by the installed plugin
`conformance.pytest_plugin` (``pytest --pyargs attention_conformance --impl X --profile ci`` from any directory).

This module ships inside the package so that ``--pyargs`` finds it; the project's own tests are under
the repository's ``tests/``.

Same engine, same verdicts as ``python -m attention_conformance run``: NOT_SUPPORTED skips with the adapter's
reason, QUALITY_WARNING passes, FAIL / CRASH / TIMEOUT / HARNESS_ERROR fail with the standalone message
and the repro command. FINDING (a named finding, SEMANTICS.md §17) passes; both are listed, one line each,
in the terminal summary's "quality warnings and named findings" section (not as Python warnings).
Expectations (the shipped conformance/expectations.toml, ``--expect FILE``; none with ``--no-expect``):
a failure an entry expects is KNOWN, an xfail with the entry's reason and link; a FINDING an entry
expects passes as before (the entry confirmed); a verdict an entry expects that passes is UNEXPECTED_PASS
and fails the test, asking for the entry to go.
"""

from __future__ import annotations

import pytest

from attention_conformance.expectations import decide
from attention_conformance.outcomes import FAILING, FINDING, KNOWN, QUALITY_WARNING, UNEXPECTED_PASS


def test_case(conformance_session, conformance_case, conformance_spec):
    session = conformance_session
    if session.device == "cuda":
        try:
            import torch

            has_cuda = torch.cuda.is_available()
        except ImportError:
            has_cuda = False
        if not has_cuda:
            pytest.skip("--device cuda but no CUDA device is available")
    la = session.adapter(conformance_spec)
    if not la.available:
        pytest.skip(f"{conformance_spec} unavailable on {session.device}: {la.reason}")
    session.touch(conformance_case.id)
    result = session.runner.run_case(la, conformance_case)
    if result.outcome == "NOT_SUPPORTED":
        pytest.skip(f"NOT_SUPPORTED: {result.message}")
    if result.outcome in (QUALITY_WARNING, FINDING):
        first = result.message.strip().splitlines()[0] if result.message.strip() else ""
        session.notable.append(f"{result.outcome} {conformance_case.id} on {conformance_spec}: {first}")
    decision = decide(session.expectations, conformance_case, la.name, conformance_spec, result.outcome,
                      result.message, result.findings, session.context(la))
    if decision.expectation is not None:
        session.used.add(decision.expectation.label())
    if decision.outcome == KNOWN:
        pytest.xfail(f"{decision.note}\n{result.message.splitlines()[0] if result.message else ''}")
    if decision.outcome == UNEXPECTED_PASS:
        pytest.fail(f"{decision.note}\n{conformance_spec} on {conformance_case.id}", pytrace=False)
    if result.outcome in FAILING:
        pytest.fail(f"{result.outcome}: {conformance_spec} on {conformance_case.id}\n{result.message}\n"
                    f"repro: {result.repro}", pytrace=False)
