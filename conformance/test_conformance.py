"""The conformance suite under pytest: one test per (case, adapter), parametrized by the installed plugin
`conformance.pytest_plugin` (``pytest --pyargs attention_conformance --impl X --profile ci`` from any directory).

This module ships inside the package so that ``--pyargs`` finds it; the project's own tests are under
the repository's ``tests/``.

Same run context, same decision, same verdicts as ``python -m attention_conformance run``: the fixture
``conformance_result`` (the plugin's) decides the final outcome while the test is set up (NOT_SUPPORTED skips
with the adapter's reason; CRASH / TIMEOUT / HARNESS_ERROR are errors); this test maps the rest. PASS,
QUALITY_WARNING and FINDING (a named finding, SEMANTICS.md §17) pass, the latter two listed one line each in
the terminal summary; KNOWN (a failure an expectations entry expects) is an xfail with the entry's reason and
link; FAIL and UNEXPECTED_PASS fail with the message, the adapter's notes on the call (the spelling it used, what a
plain function's signature implies) and the repro command.
"""

from __future__ import annotations

import pytest

from attention_conformance.reporting.digest import call_notes
from attention_conformance.verdict.outcomes import FAILING, KNOWN


def test_case(conformance_result, conformance_case, conformance_spec):
    result = conformance_result
    if result.outcome == KNOWN:
        pytest.xfail(result.message.splitlines()[0] if result.message else "KNOWN")
    if result.outcome in FAILING:
        notes = "".join(f"note: {n}\n" for n in call_notes(result.notes))
        pytest.fail(f"{result.outcome}: {conformance_spec} on {conformance_case.id}\n{result.message}\n{notes}"
                    f"repro: {result.repro}", pytrace=False)
