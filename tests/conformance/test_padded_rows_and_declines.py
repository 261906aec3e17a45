"""Padded gradient rows are not compared, and a library's own refusal is NOT_SUPPORTED, through every judge.

SEMANTICS.md §7: an API told the lengths may leave the padded rows of the buffers it returns unwritten, so the
engine compares neither padded query rows (out, lse, dq) nor padded key rows (dk, dv); a wrong value in the
last valid row still fails. `CallDeclined` (conformance/cases/calldata.py): the library refused the call itself, so
the verdict is NOT_SUPPORTED with its words, from the engine, the property suite and the repro snippet alike.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attention_conformance.adapters.registry import load
from attention_conformance.cases.case import Case
from attention_conformance.property_tests.kernel_check import evaluate
from attention_conformance.reproduce.snippet import snippet
from attention_conformance.running.engine import Runner

VARLEN_BWD = Case(family="judge", seed=5, B=2, Hq=2, Hkv=1, Lq=9, Lk=12, d=8, dv=8, dtype="float32",
                  seqlens_q=(9, 4), seqlens_k=(12, 7), causal=True, alignment="bottom_right", backward=True)


pytestmark = pytest.mark.usefixtures("toy_path")  # tests/conformance/conftest.py: the repro subprocess imports the toys


def _verdicts(toy: str, case: Case) -> tuple[dict, dict, str]:
    spec = f"engine_toys:{toy}"
    la = load(spec)
    assert la.available, la.reason
    runner = Runner([la], "cpu", determinism="none")
    try:
        engine = runner.verdict(la, case).summary()
    finally:
        runner.close()
    prop = evaluate(la.adapter, case, "cpu", spec=spec).summary()
    prop["message"] = prop["message"].removesuffix(f" (case {case.id})")
    proc = subprocess.run([sys.executable, "-c", snippet(case, spec)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    return engine, prop, proc.stdout + proc.stderr


@pytest.mark.parametrize(("toy", "outcome", "check"), [
    ("OracleGarbagePaddedGrads", "PASS", None),
    ("OracleBadPaddedKeyGradAtEdge", "FAIL", "dk"),
    ("OracleDeclines", "NOT_SUPPORTED", "forward"),
    ("OracleDeclinesBackward", "NOT_SUPPORTED", "backward"),
])
def test_same_verdict_everywhere(toy, outcome, check):
    engine, prop, snip = _verdicts(toy, VARLEN_BWD)
    assert engine["outcome"] == outcome, engine
    assert prop == engine
    assert f'"outcome": "{outcome}"' in snip, snip[-2000:]
    if check is not None:
        want = "declined" if outcome == "NOT_SUPPORTED" else "fail"
        assert engine["checks"][check] == want, engine
    if outcome == "NOT_SUPPORTED":
        assert "declined at call time by the library: toy library: no" in engine["message"], engine

