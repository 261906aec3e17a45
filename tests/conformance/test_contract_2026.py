"""The 2026 contract in the engine: sinks, MLA, chunks, KV append cases and LSE conventions (SEMANTICS.md §18-§21).

The reference kernels claim the new features (the conformance plugin runs them on every ci case); adapters that
do not claim a feature decline it with a reason that names it; an adapter that declares a base-2 / packed LSE is
converted and passes, one that returns it undeclared fails; a d sink that is missing fails.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from attention_conformance.adapters.base import Adapter, BackwardOutput, ForwardOutput
from attention_conformance.adapters.reference import ReferenceFA2
from attention_conformance.adapters.registry import LoadedAdapter, load
from attention_conformance.cases import catalog
from attention_conformance.cases.case import Case
from attention_conformance.running.engine import Runner

NEW_FAMILIES = ("sinks", "mla", "chunked", "kv_append")
NEW_CI = [c for c in catalog.cases("ci") if c.family in NEW_FAMILIES]


def _run(adapter: Adapter, case: Case):
    runner = Runner([LoadedAdapter(adapter.name, adapter.name, adapter)], "cpu", determinism="none")
    try:
        return runner.run_case(runner.adapters[0], case)
    finally:
        runner.close()


def test_catalog_has_every_new_family_in_every_profile():
    for profile in catalog.PROFILES:
        fams = {c.family for c in catalog.cases(profile)}
        assert set(NEW_FAMILIES) <= fams, (profile, set(NEW_FAMILIES) - fams)
    ci = NEW_CI
    assert {c.sinks for c in ci} >= {"small", "large", "very_negative"}
    assert any(c.sinks and c.mask == "full_rows" for c in ci) and any(c.sinks and c.Hq != c.Hkv for c in ci)
    assert any(c.sinks and c.backward and c.lse_grad for c in ci)
    assert {(c.d, c.dv) for c in ci if c.family == "mla" and c.Hkv == 1} >= {(576, 512), (192, 128)}
    assert any(c.kv_append and c.sinks for c in ci) and any(c.kv_append and c.chunk for c in ci)


@pytest.mark.parametrize("name", ["torch-sdpa-math", "reference-fa3-fp8"])
def test_adapters_that_do_not_claim_a_feature_decline_it_by_name(name):
    la = load(name, "cpu")
    if not la.available:
        pytest.skip(la.reason)
    words = {"sinks": "attention sinks", "kv_append": "KV-cache append"}  # torch-sdpa-math claims chunks
    for case in NEW_CI:
        for field, word in words.items():
            if getattr(case, field) is not None:
                reason = la.adapter.supports(case, "cpu")
                assert reason, f"{name} claims {case.id}"
                if case.fp8 is None and case.dtype in la.adapter.capabilities.dtypes:
                    assert word in reason or "not supported" in reason, reason


class _Base2PackedLse(ReferenceFA2):
    """FA2 reference returning its LSE the FlashInfer way: base 2, packed [Hq, total_q] (SEMANTICS.md §21)."""

    name = "toy-base2-packed"

    def __init__(self, declare: bool):
        super().__init__()
        caps = ReferenceFA2.capabilities
        self.capabilities = dataclasses.replace(caps, lse_base="2", lse_layout="hs_total") if declare else caps

    def forward(self, inputs, case, device) -> ForwardOutput:
        fo = super().forward(inputs, case, device)
        lens = case.seqlens_q or (case.Lq,) * case.B
        packed = np.concatenate([fo.lse[b, :, :n] for b, n in enumerate(lens)], axis=1) / math.log(2.0)
        return dataclasses.replace(fo, lse=packed)


@pytest.mark.parametrize("case", [c for c in catalog.cases("ci") if c.family in ("varlen", "sinks")][:4],
                         ids=lambda c: c.id)
def test_declared_lse_convention_is_converted_undeclared_fails(case):
    ok = _run(_Base2PackedLse(declare=True), case)
    assert ok.outcome == "PASS", ok.message
    bad = _run(_Base2PackedLse(declare=False), case)
    assert bad.outcome == "FAIL" and "lse" in bad.message, bad.message


class _NoDsink(ReferenceFA2):
    name = "toy-no-dsink"

    def backward(self, inputs, case, device) -> BackwardOutput:
        return dataclasses.replace(super().backward(inputs, case, device), dsinks=None)


def test_missing_dsink_fails():
    case = next(c for c in NEW_CI if c.sinks and c.backward)
    assert _run(ReferenceFA2(), case).outcome == "PASS"
    res = _run(_NoDsink(), case)
    assert res.outcome == "FAIL" and "dsinks" in res.message, res.message


def test_existing_case_ids_do_not_change():
    """Late Case fields at their defaults stay out of the id hash: an id from before them still resolves."""
    c = catalog._mk("tile_edges", Lq=65, Lk=65, d=64)
    assert c.key() == tuple((f.name, getattr(c, f.name)) for f in dataclasses.fields(c)
                            if f.compare and f.name not in ("sinks", "chunk", "kv_append", "lse_grad"))
    assert c.replace(sinks="small").id != c.id and "sink-small" in c.replace(sinks="small").id


def test_flex_claims_chunk_and_passes():
    la = load("torch-flex", "cpu")
    if not la.available:
        pytest.skip(la.reason)
    case = next(c for c in NEW_CI if c.family == "chunked" and c.sinks is None and not c.backward)
    res = _run(la.adapter, case)
    assert res.outcome == "PASS", res.message
    sink_case = next(c for c in NEW_CI if c.sinks is not None)
    assert "sinks" in (la.adapter.supports(sink_case, "cpu") or "")


def test_sink_and_chunk_fp8_constraints_match_the_adapters():
    """`features.CONSTRAINTS` keeps sinks and chunks away from FP8 because no built-in adapter claims both; when
    one does, this fails: drop the constraint so the pairs family covers the pair."""
    from attention_conformance.reporting import coverage

    for name, caps in coverage.declared_capabilities():
        assert not (caps.fp8 and (caps.sinks or caps.chunk)), f"{name} claims FP8 with sinks or chunks"


def test_new_features_are_in_the_pair_model_and_labels():
    from attention_conformance.cases import features

    names = [f.name for f in features.PAIRWISE]
    assert "sinks" in names and "chunk" in names
    c = next(c for c in NEW_CI if c.kv_append and c.sinks and c.chunk is None)
    assert {"sinks:small", "kv_append"} <= set(features.labels(c))
    assert any(features.values_of(p)["sinks"] == "on" for p in catalog.cases("ci") if p.family == "pairs")
