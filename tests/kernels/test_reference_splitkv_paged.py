"""Split-KV reference on a paged K/V cache (oracles/SEMANTICS.md §16, §14; kernels/reference/splitkv.py).

The paged path gathers each K/V tile through the block table (`splitkv.paged_tile`). It must give the
same bits as the dense path on the same logical K/V (paging is storage only), for any block size (tiles
that straddle pages included), number of splits, dtype and masking; it must never read a table entry past
a sequence's last page nor a slot past its length (flash-attention #2709); the reference-splitkv adapter
must PASS every paged catalog case, and each paged mutant of `property_tests.mutants.catalog` must FAIL one.
"""

from __future__ import annotations

import numpy as np
import pytest

from attention_conformance.adapters.registry import LoadedAdapter, load
from attention_conformance.cases import catalog
from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.kernels.reference import splitkv
from attention_conformance.property_tests.mutants.catalog import MUTANTS
from attention_conformance.property_tests.mutants.runner import build_adapter
from attention_conformance.running.engine import Runner

PAGED_CI = [c for c in catalog.cases("ci") if c.family == "paged"]
PAGED_MORE = [c for c in catalog.cases("full") if c.family == "paged" and c not in PAGED_CI]
PAGED_MUTANTS = [m for m in MUTANTS if m.name.startswith("paged_")]


def _case(**kw) -> Case:
    base = dict(family="paged_test", B=3, Hq=4, Hkv=2, Lq=5, Lk=300, d=16, dv=8, dtype="bfloat16", causal=True,
                seqlens_k=(300, 65, 0), layout="paged64", seed=3)
    base.update(kw)
    return Case(**base)


def _both(case: Case, **knobs):
    """(dense (out, lse), paged (out, lse), inputs) of splitkv.forward on one case's inputs."""
    inputs = make_inputs(case)
    kw = dict(case.oracle_kwargs, mask=inputs.mask, bias=inputs.bias, dtype=case.dtype, **knobs)
    dense = splitkv.forward(inputs.q, inputs.k, inputs.v, **kw)
    pg = inputs.paged
    paged = splitkv.forward(inputs.q, pg["k_pool"], pg["v_pool"], block_table=pg["block_table"],
                            page_size=pg["page_size"], seqlen_k=case.Lk, **kw)
    return dense, paged, inputs


@pytest.mark.parametrize("block_k,num_splits", [(32, 3), (48, 2), (100, 1), (64, 7), (256, 2)])
@pytest.mark.parametrize("case", [
    _case(),
    _case(dtype="float64", causal=False, seqlens_k=(1, 299, 128), layout="paged128"),
    _case(dtype="float16", window=(40, 0), Hq=4, Hkv=1, layout="paged256", seqlens_k=None),
    _case(alignment="top_left", seqlens_q=(5, 2, 0), mask="random", softcap=3.0, layout="paged64"),
], ids=lambda c: c.id if isinstance(c, Case) else None)
def test_paged_path_is_bit_identical_to_dense(case, block_k, num_splits):
    (do, dl), (po, pl), _ = _both(case, block_q=4, block_k=block_k, num_splits=num_splits)
    assert not np.isnan(po).any(), f"{case.id} block_k={block_k}: NaN in the paged output (a poisoned slot was read)"
    assert po.tobytes() == do.tobytes(), (f"{case.id} block_k={block_k} num_splits={num_splits}: paged out differs "
                                          f"from dense by {np.nanmax(np.abs(po - do)):.3e}")
    assert pl.tobytes() == dl.tobytes(), f"{case.id} block_k={block_k}: paged LSE differs from dense"


def test_unused_table_entries_are_never_read():
    """Entries past each sequence's last page point outside the pool: reading one would raise IndexError."""
    case = _case(Lk=200, seqlens_k=(64, 65, 0))
    inputs = make_inputs(case)
    pg = dict(inputs.paged)
    table = pg["block_table"].copy()
    for b, n in enumerate(case.seqlens_k):
        table[b, -(-n // 64):] = len(pg["k_pool"]) + 1000
    kw = dict(case.oracle_kwargs, dtype=case.dtype, block_k=32, num_splits=3)
    out, lse = splitkv.forward(inputs.q, pg["k_pool"], pg["v_pool"], block_table=table, page_size=64,
                               seqlen_k=case.Lk, **kw)
    ref, _ = splitkv.forward(inputs.q, inputs.k, inputs.v, **kw)
    assert out.tobytes() == ref.tobytes()


def test_the_table_is_what_is_read():
    """Control: swapping two used table entries changes the output (the kernel follows the table)."""
    case = _case(seqlens_k=None, Lk=256)
    inputs = make_inputs(case)
    pg = inputs.paged
    table = pg["block_table"].copy()
    table[0, [0, 1]] = table[0, [1, 0]]
    kw = dict(case.oracle_kwargs, dtype=case.dtype, block_k=32)
    a, _ = splitkv.forward(inputs.q, pg["k_pool"], pg["v_pool"], block_table=pg["block_table"], page_size=64,
                           seqlen_k=case.Lk, **kw)
    b, _ = splitkv.forward(inputs.q, pg["k_pool"], pg["v_pool"], block_table=table, page_size=64,
                           seqlen_k=case.Lk, **kw)
    assert not np.array_equal(a[0], b[0]) and np.array_equal(a[1:], b[1:])


def test_paged_argument_errors_name_the_argument():
    inputs = make_inputs(_case())
    pg = inputs.paged
    with pytest.raises(ValueError, match="seqlen_k"):
        splitkv.forward(inputs.q, pg["k_pool"], pg["v_pool"], block_table=pg["block_table"], page_size=64)
    with pytest.raises(ValueError, match="page_size=128"):
        splitkv.forward(inputs.q, pg["k_pool"], pg["v_pool"], block_table=pg["block_table"], page_size=128,
                        seqlen_k=300)
    with pytest.raises(ValueError, match="covers fewer"):
        splitkv.forward(inputs.q, pg["k_pool"], pg["v_pool"], block_table=pg["block_table"][:, :2], page_size=64,
                        seqlen_k=300)


def _run(adapter, case):
    runner = Runner([LoadedAdapter(adapter.name, adapter.name, adapter)], "cpu", determinism="all")
    try:
        return runner.run_case(runner.adapters[0], case)
    finally:
        runner.close()


@pytest.mark.parametrize("case", PAGED_CI, ids=lambda c: c.id)
def test_reference_splitkv_passes_paged_ci_cases(case):
    res = _run(load("reference-splitkv").adapter, case)
    assert res.outcome == "PASS", f"reference-splitkv on {case.id}: {res.outcome}\n{res.message}\nrepro: {res.repro}"
    assert res.kernels == ["attention_conformance.kernels.reference.splitkv.forward[paged]"], res.kernels


@pytest.mark.slow
@pytest.mark.parametrize("case", PAGED_MORE, ids=lambda c: c.id)
def test_reference_splitkv_passes_paged_full_cases(case):
    res = _run(load("reference-splitkv").adapter, case)
    assert res.outcome == "PASS", f"reference-splitkv on {case.id}: {res.outcome}\n{res.message}\nrepro: {res.repro}"


@pytest.mark.parametrize("mutant", PAGED_MUTANTS, ids=lambda m: m.name)
def test_each_paged_mutant_fails_a_paged_ci_case(mutant):
    """Each planted paged bug gives FAIL on some ci paged case, with NaN or a wrong value in `out`."""
    adapter = build_adapter(mutant)
    outcomes = {}
    for case in PAGED_CI:
        res = _run(adapter, case)
        outcomes[case.id] = res.outcome
        if res.outcome == "FAIL":
            assert res.checks.get("out") == "fail", f"{mutant.name} on {case.id}: {res.message}"
            return
    pytest.fail(f"paged mutant {mutant.name} ({mutant.bug_class}) survived every paged ci case: {outcomes}")


def test_at_least_two_paged_mutants():
    assert len(PAGED_MUTANTS) >= 2, [m.name for m in PAGED_MUTANTS]
