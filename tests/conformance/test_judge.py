"""One judge: the same (case, adapter result) pairs give the same verdict through every entry point.

Entry points (conformance/verdict/judge.py): the engine (`Runner.run_case`, what ``python -m attention_conformance run``
and pytest ``conformance/`` use), the property suite (`property_tests.kernel_check.evaluate`), the repro
snippet (`conformance.reproduce.snippet.snippet`, executed in a subprocess), and the FP8 offset property
(`property_tests.kernel_properties.check_fp8_offset`). The adapters are `engine_toys.OracleToy` and its
variants: correct, +inf LSE declared (in-process and isolated), +inf undeclared, input mutation, raising,
nondeterministic, NaN output, wrong dQ, plus the SDPA-signature example `good_sdpa` (padding as a dense
mask: the named finding masked_nan on planted NaN); the cases: fully masked rows, a GQA backward with
bottom-right causal, FP8, and NaN-padded varlen. Each pair also has an expected outcome, so agreement on
a wrong verdict fails too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zlib

import pytest

from attention_conformance.adapters.registry import load
from attention_conformance.cases.case import Case, FP8Spec
from attention_conformance.property_tests.kernel_check import evaluate
from attention_conformance.property_tests.kernel_properties import check_fp8_offset, offset_model, peaked_inputs
from attention_conformance.reproduce.snippet import snippet
from attention_conformance.running.engine import Runner
from attention_conformance.running.worker import call_adapter, collect_calls
from attention_conformance.verdict.bounds import compute_oracle
from attention_conformance.verdict.judge import judge


def _sampled(**kw) -> Case:
    """A case the engine's "sampled" determinism check includes (so every entry point repeats the call)."""
    for seed in range(1000):
        c = Case(family="judge", seed=seed, **kw)
        if zlib.crc32(c.id.encode()) % 4 == 0:
            return c
    raise AssertionError("no sampled seed")


CASES = {
    "empty_rows": _sampled(B=1, Hq=2, Hkv=2, Lq=8, Lk=9, d=8, dv=8, dtype="float32", mask="full_rows"),
    "backward": _sampled(B=2, Hq=2, Hkv=1, Lq=7, Lk=5, d=8, dv=8, dtype="float16", causal=True,
                         alignment="bottom_right", backward=True),
    "fp8": _sampled(B=1, Hq=1, Hkv=1, Lq=4, Lk=32, d=16, dv=16, dtype="float8_e4m3fn",
                    fp8=FP8Spec(granularity="per_tensor")),
    # NaN planted in padded rows (SEMANTICS.md §17): the toys are told the lengths, the SDPA function gets a mask
    "nan_padding": _sampled(B=2, Hq=2, Hkv=2, Lq=9, Lk=12, d=8, dv=8, dtype="float32", seqlens_q=(9, 5),
                            seqlens_k=(12, 7), distribution="nan_padding"),
}
EMPTY = {"empty_rows", "backward"}  # cases with fully masked rows (where the LSE convention shows)

# spec -> expected (outcome, failing check) per case name; None = PASS everywhere
TOYS: dict[str, dict[str, tuple[str, str]] | None] = {
    "OracleToy": None,
    "OraclePlusInfLse": None,
    "IsolatedOraclePlusInfLse": None,
    "OracleUndeclaredPlusInfLse": {c: ("FAIL", "lse") for c in EMPTY},
    "OracleMutatesK": {c: ("FAIL", "inputs_unchanged") for c in CASES},
    "OracleRaises": {c: ("FAIL", "forward") for c in CASES},
    "OracleNondeterministic": {c: ("FAIL", "determinism") for c in CASES},
    "OracleNaN": {c: ("FAIL", "out") for c in CASES},
    "OracleBadDq": {"backward": ("FAIL", "dq")},
}
# an SDPA-signature function (padding reaches it as a dense mask): the named finding on planted NaN; its fp16
# backward (autograd through float32 scores, dV cast to fp16) is within the bound but over 2x the naive error
SDPA_SPEC = "attention_conformance.examples.good_sdpa:attention"
SDPA_EXPECTED = {"empty_rows": ("PASS", None), "backward": ("QUALITY_WARNING", None), "fp8": ("NOT_SUPPORTED", None),
                 "nan_padding": ("FINDING", "out")}


def _snippet_verdicts(pairs: list[tuple[str, Case]]) -> dict[tuple[str, str], tuple[int, dict]]:
    """Run every repro snippet in one fresh interpreter; (spec, case id) -> (exit code, VERDICT json)."""
    sources = {f"{spec}|{case.id}": snippet(case, spec) for spec, case in pairs}
    driver = textwrap.dedent("""
        import contextlib, io, json, sys
        sources = json.loads(sys.stdin.read())
        out = {}
        for key, src in sources.items():
            buf = io.StringIO()
            code = 0
            with contextlib.redirect_stdout(buf):
                try:
                    exec(compile(src, key, "exec"), {"__name__": "__main__"})
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else 1
            line = [x for x in buf.getvalue().splitlines() if x.startswith("VERDICT ")]
            out[key] = [code, json.loads(line[-1][8:]) if line else None, buf.getvalue()[-2000:]]
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", driver], input=json.dumps(sources), capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {tuple(k.split("|", 1)): (v[0], v[1]) for k, v in got.items()}


def _expected(toy: str, case_name: str) -> tuple[str, str | None]:
    if toy == SDPA_SPEC:
        return SDPA_EXPECTED[case_name]
    table = TOYS[toy] or {}
    return table.get(case_name, ("PASS", None))


def test_same_verdict_through_engine_property_suite_and_repro(toy_path):
    pairs = [(f"engine_toys:{toy}", case) for toy in TOYS for case in CASES.values()]
    pairs += [(SDPA_SPEC, case) for case in CASES.values()]
    snippets = _snippet_verdicts(pairs)
    names = {c.id: n for n, c in CASES.items()}
    for spec, case in pairs:
        la = load(spec)
        assert la.available, la.reason
        runner = Runner([la], "cpu", determinism="sampled")
        try:
            engine = runner.verdict(la, case).summary()
        finally:
            runner.close()
        prop = evaluate(la.adapter, case, "cpu", spec=spec)
        code, snip = snippets[(spec, case.id)]
        where = f"{spec} on {case.id}"
        if engine["outcome"] == "NOT_SUPPORTED":  # the snippet says so and exits 0 without a VERDICT line
            assert code == 0 and snip is None, where
            assert prop.outcome == "NOT_SUPPORTED", where
            assert _expected(spec if spec == SDPA_SPEC else spec.split(":")[1], names[case.id])[0] == "NOT_SUPPORTED"
            continue
        assert snip is not None, where
        prop_summary = prop.summary()
        prop_summary["message"] = prop_summary["message"].removesuffix(f" (case {case.id})")
        assert engine == prop_summary, f"engine vs kernel_check.evaluate: {where}"
        assert engine == snip, f"engine vs repro snippet: {where}"
        assert code == (1 if engine["outcome"] == "FAIL" else 0), where
        outcome, check = _expected(spec if spec == SDPA_SPEC else spec.split(":")[1], names[case.id])
        assert engine["outcome"] == outcome, (where, engine)
        if check is not None:
            assert engine["checks"].get(check) == ("finding" if outcome == "FINDING" else "fail"), (where, engine)
        if "PlusInf" in spec and names[case.id] in EMPTY and outcome == "PASS":
            assert "lse_convention:+inf" in engine["findings"], (where, engine)


@pytest.mark.parametrize("toy", ["OracleToy", "OraclePlusInfLse", "IsolatedOraclePlusInfLse", "OracleMutatesK",
                                 "OracleRaises", "OracleNaN"])
def test_fp8_offset_property_judges_like_the_engine(toy, toy_path):
    """`check_fp8_offset` on peaked rows gives the engine's verdict on the same inputs (its bound is lower,
    so the toys return the oracle's own answer: only the non-value checks and NaN can differ)."""
    spec = f"engine_toys:{toy}"
    la = load(spec)
    case = Case(family="hyp-fp8-peaked", B=1, Hq=1, Hkv=1, Lq=2, Lk=1025, d=16, dv=16, dtype="float8_e4m3fn",
                fp8=FP8Spec(granularity="per_tensor"), seed=3)
    peak, seed = 7.3, 11
    prop = check_fp8_offset(la.adapter, case, peak, seed, "cpu")
    runner = Runner([la], "cpu", determinism="none")
    inputs = peaked_inputs(case, peak, seed)
    runner.cache._data[case.id] = (inputs, compute_oracle(case, inputs), None)
    try:
        engine = runner.verdict(la, case)
    finally:
        runner.close()
    a, b = prop.summary(), engine.summary()
    assert (a["outcome"], a["checks"], a["findings"]) == (b["outcome"], b["checks"], b["findings"]), (a, b)
    assert a["outcome"] == _expected(toy, "fp8")[0], a
    # and the property's own bound is what the judge used
    inputs = peaked_inputs(case, peak, seed)
    od = compute_oracle(case, inputs)
    res = collect_calls(lambda kind: call_adapter(la.adapter, kind, inputs, case, "cpu"), case, repeat=False)
    direct = judge(case, od, res, device="cpu", capabilities=la.adapter.capabilities, model_adjust=offset_model)
    if toy != "OracleRaises":
        assert direct.tolerance_model["eta_p"] == pytest.approx(od.model.eta_p * 2.0**-8)
    assert direct.summary()["outcome"] == a["outcome"]


@pytest.mark.parametrize("message", ["CUDA out of memory. Tried to allocate 2.00 GiB",
                                     "CUDA error: cudaErrorMemoryAllocation"])
def test_out_of_device_memory_is_a_harness_error_not_a_fail(message):
    """A kernel that raises because the device ran out of memory (another process on the GPU, too many workers)
    says nothing about its answer: HARNESS_ERROR with the reason, never FAIL; any other exception it raises stays
    FAIL."""
    from attention_conformance.cases.calldata import under_test

    base = load("reference-fa2").adapter

    class Starved(type(base)):
        def forward(self, inputs, case, device):
            with under_test():
                raise RuntimeError(message)

    class Wrong(type(base)):
        def forward(self, inputs, case, device):
            with under_test():
                raise RuntimeError("an illegal instruction was encountered")

    from attention_conformance.cases.inputs import make_inputs

    case = Case(family="judge", B=1, Hq=2, Hkv=2, Lq=8, Lk=9, d=8, dv=8, dtype="float32")
    inputs = make_inputs(case)
    od = compute_oracle(case, inputs)
    outcomes = {}
    for adapter in (Starved(), Wrong()):
        res = collect_calls(lambda kind, a=adapter: call_adapter(a, kind, inputs, case, "cpu"), case, repeat=False)
        outcomes[type(adapter).__name__] = judge(case, od, res, device="cpu", capabilities=base.capabilities)
    assert outcomes["Starved"].outcome == "HARNESS_ERROR", outcomes["Starved"].message
    assert "out of device memory" in outcomes["Starved"].message and "not a verdict" in outcomes["Starved"].message
    assert outcomes["Wrong"].outcome == "FAIL"
