"""Pair coverage (conformance/reporting/coverage.py) and the feature model and covering design behind the ``pairs``
family."""

from __future__ import annotations

import pytest

from attention_conformance.cases import catalog, covering, features
from attention_conformance.cases.case import PAGED_LAYOUTS, Case
from attention_conformance.reporting import coverage


@pytest.mark.parametrize("profile", catalog.PROFILES)
def test_every_claimable_pair_is_covered(profile):
    """Each profile holds, for every pair of feature values some built-in adapter can claim together, a case
    combining them (that some built-in adapter claims as a whole)."""
    cov = coverage.profile_coverage(profile)
    missing = [coverage.pair_text(p) for p in cov.missing]
    assert not missing, f"{cov.summary()}; missing: {missing[:40]}"
    assert len(cov.claimable) > 500, cov.summary()


def test_the_check_sees_missing_pairs():
    """Without the ``pairs`` family the ci profile misses pairs (softcap x bias among them): the test above can fail."""
    cases = [c for c in catalog.cases("ci") if c.family != "pairs"]
    cov = coverage.profile_coverage("ci", cases)
    missing = set(cov.missing)
    assert (("bias", "on"), ("softcap", "on")) in missing
    assert len(missing) > 100, cov.summary()


def test_claimable_pairs_come_from_declared_capabilities():
    caps = dict(coverage.declared_capabilities())
    assert {"reference-fa2", "cuda-splitkv", "flash-attn-3", "torch-sdpa-math"} <= set(caps)
    claimable = coverage.claimable_pairs()
    assert (("layout", "paged"), ("split_kv", "decode")) in claimable  # reference-splitkv, cuda-splitkv
    assert (("dtype", "float8_e5m2"), ("fp8", "per_tile")) in claimable  # reference-fa3-fp8
    assert (("dtype", "float8_e4m3fn"), ("fp8", "none")) not in claimable  # a constraint
    assert (("fp8", "per_head"), ("backward", "on")) not in claimable  # FP8 is forward only (§10)


def test_paged_backward_constraint_matches_the_adapters():
    """`features.CONSTRAINTS` excludes paged x backward because no built-in adapter runs it (flash-attn's paged
    spellings are forward only); when one does, this fails: drop the constraint so the pairs family covers the
    pair. Adapters whose capabilities list a paged layout and backward must decline a paged backward case."""
    from attention_conformance.adapters.registry import load

    probe = Case("probe", B=1, Hq=2, Hkv=2, Lq=8, Lk=512, d=64, dv=64, dtype="bfloat16", causal=True, layout="paged256",
                 backward=True)
    for name, caps in coverage.declared_capabilities():
        paged = any(layout in caps.layouts for layout in PAGED_LAYOUTS)
        if not (paged and caps.backward):
            continue
        adapter = load(name, "cpu").adapter
        assert adapter is not None, name
        adapter.unavailable_reason = lambda device: None  # judge the claim, not this machine
        assert adapter.supports(probe, "cuda"), f"{name} claims a paged backward: drop the paged x backward constraint"


def test_labels_are_the_report_columns():
    c = Case("x", B=1, Hq=4, Hkv=2, Lq=3, Lk=5, d=32, dv=16, causal=True, alignment="top_left", window=(4, None),
             mask="random", layout="paged64", backward=False, distribution="outliers")
    assert features.labels(c) == ["dtype:float16", "causal:top_left", "window", "mask", "gqa", "dv!=d",
                                  "layout:paged64", "dist:outliers", "Lq!=Lk"]
    v = features.values_of(c)
    assert v["window"] == "left" and v["heads"] == "gqa" and v["dv"] == "lt" and v["layout"] == "paged"
    assert v["split_kv"] == "off" and features.values_of(c.replace(Lq=2, Lk=160))["split_kv"] == "decode"


def test_pairs_family_is_deterministic_and_valid():
    ids = [c.id for c in catalog.cases("ci") if c.family == "pairs"]
    assert ids == [c.id for c in catalog.cases("full") if c.family == "pairs"]
    assert 16 <= len(ids) <= 48, len(ids)
    for c in catalog.cases("ci"):
        if c.family == "pairs":
            v = features.values_of(c)
            assert features.consistent(v), (c.id, v)
            assert c.B * c.Hq * c.Lq * c.Lk <= 2 * 4 * 24 * 100, c.id  # small: the ci profile stays cheap


def test_covering_rows_on_a_toy():
    """Every reachable pair is covered, no row holds a forbidden pair, and an implied conflict is not a target."""
    factors = [("a", ("0", "1", "2")), ("b", ("0", "1")), ("c", ("0", "1")), ("d", ("0", "1", "2"))]

    def allowed(f1, v1, f2, v2):
        bad = {(("a", "2"), ("b", "1")), (("b", "0"), ("c", "1"))}
        return ((f1, v1), (f2, v2)) not in bad and ((f2, v2), (f1, v1)) not in bad

    rows = covering.covering_rows(factors, allowed)
    reach = covering.reachable_pairs(factors, allowed)
    got = set().union(*(covering.pairs_of(r, [n for n, _ in factors]) for r in rows))
    assert reach <= got
    assert all(allowed(a, x, b, y) for r in rows for (a, x), (b, y) in covering.pairs_of(r, "abcd"))
    assert (("a", "2"), ("c", "1")) not in reach  # a=2 forces b=0, which forbids c=1
    assert len(rows) <= 12
    assert rows == covering.covering_rows(factors, allowed)


def test_coverage_matrix_command(capsys):
    from attention_conformance.cli import main

    assert main(["cases", "--profile", "ci", "--coverage"]) == 0
    out = capsys.readouterr().out
    assert "pair coverage, profile ci:" in out and "missing claimable pairs: none" in out
    assert "split_kv" in out.splitlines()[2]
