"""No false verdicts: an adapter is offered only what it can express, and the harness never blames it for itself.

- an exception raised by the code under test (the SDPA-signature function, torch's SDPA / flex calls,
  the NumPy reference kernels) is a FAIL for a claimed case; one raised by harness code around it
  (translating the case, preparing tensors, reading the result) is HARNESS_ERROR naming that frame;
- every built-in adapter available on the CPU and every example plug-in (`conformance/examples/*`),
  over every profile (ci, full, gpu on device cpu): `supports` never raises, and on a representative
  subset (the cheapest case of every feature, family and layout; ``CONFORMANCE_HARNESS_ALL=1``: every
  case up to a cost cap) no result is HARNESS_ERROR and no FAIL comes from an exception raised in a
  harness frame.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re

import pytest

import attention_conformance as conformance
import attention_conformance.examples as examples
from attention_conformance.adapters.registry import builtin_names, load
from attention_conformance.adapters.third_party import wrap_sdpa_function
from attention_conformance.cases import catalog
from attention_conformance.examples.good_sdpa import attention as good_attention
from attention_conformance.running.engine import Runner, features_of

ROOT = os.path.dirname(os.path.abspath(conformance.__file__))
EXAMPLES = os.path.dirname(os.path.abspath(examples.__file__))
PROFILES = ("ci", "full", "gpu")
ALL = os.environ.get("CONFORMANCE_HARNESS_ALL") == "1"
COST_CAP = 3e8  # estimated_cost above this (L in the thousands on the CPU) only gets supports() checked


def _example_specs() -> list[str]:
    specs = []
    for mod in pkgutil.iter_modules(examples.__path__):
        module = importlib.import_module(f"attention_conformance.examples.{mod.name}")
        if callable(getattr(module, "attention", None)):
            specs.append(f"attention_conformance.examples.{mod.name}:attention")
    return specs


SPECS = [s for s in builtin_names() if load(s, "cpu").available] + _example_specs()


def _all_cases() -> list:
    seen: dict[str, object] = {}
    for p in PROFILES:
        for c in catalog.cases(p):
            seen.setdefault(c.id, c)
    return list(seen.values())


def _representatives(cases) -> list:
    """The cheapest case of every feature label, family and layout."""
    best: dict[str, object] = {}
    for c in sorted(cases, key=lambda c: (catalog.estimated_cost(c), c.id)):
        for label in (*features_of(c), f"family:{c.family}", f"layout:{c.layout}"):
            best.setdefault(label, c)
    return sorted({c.id: c for c in best.values()}.values(), key=lambda c: c.id)


def _harness_frame(site: str) -> bool:
    """True when `site` (``file:line in function``) is harness code: conformance/, but not its examples."""
    m = re.match(r"^(.*):(\d+) in (.*)$", site or "")
    if not m:
        return False
    path = os.path.abspath(m.group(1))
    return path.startswith(ROOT + os.sep) and not path.startswith(EXAMPLES + os.sep)


def test_the_examples_are_found():
    assert {"attention_conformance.examples.good_sdpa:attention",
            "attention_conformance.examples.broken_sdpa:attention"} <= set(SPECS)
    assert {"torch-sdpa-math", "reference-fa2"} <= set(SPECS)


@pytest.mark.parametrize("spec", SPECS)
def test_supports_never_raises_on_any_profile(spec):
    adapter = load(spec, "cpu").adapter
    for c in _all_cases():
        reason = adapter.supports(c, "cpu")
        assert reason is None or isinstance(reason, str), (spec, c.id)
        if spec.startswith("attention_conformance.examples") and c.layout.startswith("paged"):
            assert reason, (spec, c.id, "a paged case must be declined")


@pytest.mark.parametrize("spec", SPECS)
def test_no_harness_error_and_no_fail_from_a_harness_frame(spec):
    cases = _all_cases()
    cases = [c for c in cases if catalog.estimated_cost(c) <= COST_CAP] if ALL else _representatives(cases)
    la = load(spec, "cpu")
    runner = Runner([la], "cpu", determinism="sampled")
    try:
        results = [runner.run_case(la, c) for c in cases]
    finally:
        runner.close()
    bad = [(r.case_id, r.outcome, r.message.splitlines()[0][:300]) for r in results if r.outcome == "HARNESS_ERROR"]
    assert not bad, bad
    raised = [r for r in results if r.outcome == "FAIL" and r.raised_at]
    ours = [(r.case_id, r.raised_at, r.message.splitlines()[0][:300]) for r in raised if _harness_frame(r.raised_at)]
    assert not ours, ours
    assert sum(r.outcome != "NOT_SUPPORTED" for r in results) > 0


def test_an_exception_of_the_function_is_a_fail_naming_its_frame():
    def raises_on_gqa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if enable_gqa and q.shape[-2] > 6:  # the probe (5 query rows) passes; the case then raises
            raise RuntimeError("kernel fault")
        return good_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    case = next(c for c in catalog.cases("ci") if c.Hq != c.Hkv and c.Lq > 6 and not c.backward
                and c.layout == "contiguous" and c.fp8 is None and c.softcap is None)
    adapter = wrap_sdpa_function(raises_on_gqa, "raises-on-gqa")
    la = load("torch-sdpa-math", "cpu")
    la = type(la)("raises-on-gqa", "raises-on-gqa", adapter, None)
    res = Runner([la], "cpu").run_case(la, case)
    assert res.outcome == "FAIL" and res.checks.get("forward") == "fail", res.message
    assert os.path.basename(__file__) in res.raised_at and "raises_on_gqa" in res.raised_at, res.raised_at


def test_an_exception_of_the_harness_is_harness_error_naming_its_frame(monkeypatch):
    import attention_conformance.adapters.torch_sdpa as ts

    def broken_prepare(*a, **kw):
        raise ValueError("translation bug")

    monkeypatch.setattr(ts, "prepare_sdpa_call", broken_prepare)
    adapter = wrap_sdpa_function(good_attention, "good")
    la = type(load("torch-sdpa-math", "cpu"))("good", "good", adapter, None)
    case = catalog.cases("ci")[0]
    res = Runner([la], "cpu").run_case(la, case)
    assert res.outcome == "HARNESS_ERROR", (res.outcome, res.message)
    assert "broken_prepare" in res.raised_at and "not the adapter's fault" in res.message, res.message
