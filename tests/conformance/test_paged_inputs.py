"""Paged K/V inputs and capabilities (oracles/SEMANTICS.md §16; conformance/cases/inputs.py `paged_storage`).

Bug class: "paged-KV block table out-of-bounds read" (flash-attention
#2709). A paged case stores K/V in permuted pages behind a block table, with NaN in every page, slot and
table entry a correct kernel does not read. These tests check the storage against the dense K/V the
oracle sees, the poison, determinism, that paging leaves every other input unchanged, that adapters
which do not list a paged layout refuse paged cases with a reason, and that the engine's input-mutation
check covers the page pools.
"""

from __future__ import annotations

import numpy as np
import pytest

from attention_conformance.adapters.base import Adapter, Capabilities, CaseInputs, ForwardOutput, capability_reason
from attention_conformance.adapters.reference import ReferenceFA2, ReferenceSplitKV
from attention_conformance.adapters.registry import BUILTIN, load
from attention_conformance.cases import catalog
from attention_conformance.cases.case import LAYOUTS, PAGED_LAYOUTS, Case, FP8Spec, page_size_of
from attention_conformance.cases.inputs import make_inputs, paged_storage
from attention_conformance.running.worker import call_adapter

PAGED_CI = [c for c in catalog.cases("ci") if c.family == "paged"]
PAGED_FULL = [c for c in catalog.cases("full") if c.family == "paged"]


def _case(**kw) -> Case:
    base = dict(family="paged_test", B=3, Hq=4, Hkv=2, Lq=2, Lk=300, d=16, dv=8, dtype="bfloat16", causal=True,
                seqlens_k=(300, 65, 0), layout="paged64", seed=11)
    base.update(kw)
    return Case(**base)


def test_layout_constants_and_page_size_of():
    """Paged layouts are not in LAYOUTS (so the default capabilities do not claim them); page sizes parse."""
    assert not set(PAGED_LAYOUTS) & set(LAYOUTS), f"PAGED_LAYOUTS {PAGED_LAYOUTS} overlap LAYOUTS {LAYOUTS}"
    assert [page_size_of(x) for x in PAGED_LAYOUTS] == [64, 128, 256]
    assert all(page_size_of(x) is None for x in LAYOUTS)
    assert not set(PAGED_LAYOUTS) & Capabilities(dtypes=frozenset({"float16"})).layouts


def test_existing_case_ids_unchanged():
    """No new Case field: ids (hash over all fields) of existing cases are what they were before paging."""
    pinned = {
        "tile_edges-b1h2x2-q1k1-d64-f16-ddd071",
        "decoding-b3h8x2-q1k300-d64-f16-causal_br-ce33f7",
        "layout-b3h4x1-q1k97-d64-f16-causal_br-kv_broadcast-bc0fc6",
        "nan_padding-b3h2x2-q64k64-d32-bf16-causal_br-nan_padding-05e210",
    }
    ids = {c.id for p in catalog.PROFILES for c in catalog.cases(p)}
    missing = sorted(pinned - ids)
    assert not missing, f"case ids changed (a new Case field or a changed recipe?): {missing} not in any profile"


def test_catalog_paged_family_shape():
    """ci: <= 10 decoding-style paged cases over every page size, with tails, varlen (empty sequences), GQA."""
    assert 1 <= len(PAGED_CI) <= 10, f"ci has {len(PAGED_CI)} paged cases (want 1..10)"
    assert {c.layout for c in PAGED_CI} == set(PAGED_LAYOUTS)
    assert all(c.d in (64, 128) and c.dtype in ("float16", "bfloat16") and 1 <= c.Lq <= 16 for c in PAGED_CI)
    assert any(c.Lk % page_size_of(c.layout) for c in PAGED_CI), "no ci case has a partial last page"
    assert any(c.seqlens_k and 0 in c.seqlens_k for c in PAGED_CI), "no ci case has an empty sequence"
    assert any(c.Hq != c.Hkv for c in PAGED_CI), "no ci case has GQA"
    assert len(PAGED_FULL) > len(PAGED_CI) and any(c.Lk >= 4096 for c in PAGED_FULL)


def _check_storage(case: Case, inputs: CaseInputs) -> None:
    pg = inputs.paged
    assert pg is not None, f"{case.id}: make_inputs left CaseInputs.paged unset for layout {case.layout}"
    P = page_size_of(case.layout)
    kp, vp, table = pg["k_pool"], pg["v_pool"], pg["block_table"]
    pps = -(-case.Lk // P)
    assert pg["page_size"] == P
    assert table.dtype == np.int32 and table.shape == (case.B, pps), (
        f"{case.id}: block_table {table.dtype} {table.shape}, expected int32 {(case.B, pps)}")
    assert kp.dtype == vp.dtype == np.float64
    assert kp.shape[1:] == (case.Hkv, P, case.d) and vp.shape[1:] == (case.Hkv, P, case.dv) and len(kp) == len(vp)
    assert ((table >= 0) & (table < len(kp))).all(), f"{case.id}: table entries outside [0, {len(kp)})"
    lens = [case.Lk if case.seqlens_k is None else case.seqlens_k[b] for b in range(case.B)]
    used = []
    for b in range(case.B):
        need = -(-lens[b] // P)
        for p in range(pps):
            page_k, page_v = kp[table[b, p]], vp[table[b, p]]
            if p >= need:
                assert np.isnan(page_k).all() and np.isnan(page_v).all(), (
                    f"{case.id}: table[{b}, {p}] = {table[b, p]} is past the {need} used pages of batch {b} "
                    f"(seqlens_k {lens[b]}) but its page is not all NaN (decoy)")
                continue
            used.append(int(table[b, p]))
            j0, j1 = p * P, min((p + 1) * P, lens[b])
            np.testing.assert_array_equal(page_k[:, : j1 - j0], inputs.k[b, :, j0:j1],
                                          err_msg=f"{case.id}: k keys {j0}..{j1} of batch {b} via page {table[b, p]}")
            np.testing.assert_array_equal(page_v[:, : j1 - j0], inputs.v[b, :, j0:j1],
                                          err_msg=f"{case.id}: v keys {j0}..{j1} of batch {b} via page {table[b, p]}")
            assert np.isnan(page_k[:, j1 - j0:]).all() and np.isnan(page_v[:, j1 - j0:]).all(), (
                f"{case.id}: slots past seqlens_k[{b}] = {lens[b]} in page {table[b, p]} are not NaN")
    assert len(set(used)) == len(used), f"{case.id}: a real page is shared: {sorted(used)}"
    decoys = sorted(set(range(len(kp))) - set(used))
    assert len(decoys) >= 2, f"{case.id}: only {len(decoys)} decoy pages"
    assert np.isnan(kp[decoys]).all() and np.isnan(vp[decoys]).all(), f"{case.id}: decoy pages not all NaN"
    if used:
        dense = [b * pps + p for b in range(case.B) for p in range(-(-lens[b] // P))]
        assert used != list(range(len(used))) and used != dense, f"{case.id}: page order is the identity {used}"


@pytest.mark.parametrize("case", PAGED_CI + [_case(), _case(layout="paged128", Lk=128, seqlens_k=None, B=1),
                                             _case(seqlens_k=(0, 0, 0))], ids=lambda c: c.id)
def test_pool_and_table_hold_the_dense_kv_and_poison_the_rest(case):
    _check_storage(case, make_inputs(case))


def test_paged_inputs_deterministic_and_dense_inputs_unchanged():
    """Same case -> same bits (pools and table included); the dense arrays equal the contiguous twin's."""
    case = _case()
    a, b = make_inputs(case), make_inputs(case)
    names = sorted(a.arrays())
    assert {"paged.k_pool", "paged.v_pool", "paged.block_table"} <= set(names), names
    for n in names:
        assert a.arrays()[n].tobytes() == b.arrays()[n].tobytes(), f"make_inputs({case.id}) not deterministic in {n}"
    twin = make_inputs(case.replace(layout="contiguous"))
    assert twin.paged is None
    for n in ("q", "k", "v"):
        assert getattr(a, n).tobytes() == getattr(twin, n).tobytes(), f"paging changed the dense {n}"
    other = make_inputs(case.replace(seed=12))
    assert not np.array_equal(other.paged["block_table"], a.paged["block_table"]), "page order ignores the seed"


def test_paged_storage_refuses_fp8_and_dense_layouts():
    q = np.zeros((1, 1, 1, 8))
    with pytest.raises(ValueError, match="FP8"):
        paged_storage(_case(B=1, Hq=1, Hkv=1, d=8, dv=8, seqlens_k=None, dtype="float8_e4m3fn", fp8=FP8Spec()),
                      q, q)
    with pytest.raises(ValueError, match="not paged"):
        paged_storage(_case(layout="contiguous"), q, q)


def test_capability_reason_names_the_paged_layout():
    case = _case()
    reason = capability_reason(Capabilities(dtypes=frozenset({"bfloat16"}), varlen=True), case, "cpu")
    assert reason is not None and "paged K/V layout paged64" in reason, reason
    assert "declared paged layouts: none" in reason, reason
    caps = Capabilities(dtypes=frozenset({"bfloat16"}), varlen=True, layouts=frozenset({"contiguous", "paged128"}))
    reason = capability_reason(caps, case, "cpu")
    assert reason is not None and "['paged128']" in reason, reason
    assert capability_reason(caps, case.replace(layout="paged128"), "cpu") is None
    assert ReferenceFA2().supports(case, "cpu") is not None
    assert ReferenceSplitKV().supports(case, "cpu") is None


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_builtin_adapters_claim_paged_cases_only_when_declared(name):
    """An adapter that does not list a paged layout refuses paged cases on every device it declares."""
    la = load(name, "cpu")
    if la.adapter is None:
        pytest.skip(f"{name} not loadable here: {la.reason}")
    caps = la.adapter.capabilities
    for case in PAGED_CI:
        if case.layout in caps.layouts:
            continue
        for device in sorted(caps.devices):
            reason = la.adapter.supports(case, device)
            assert reason is not None, (f"{name} does not declare layout {case.layout} (layouts "
                                        f"{sorted(caps.layouts)}) but supports {case.id} on {device}")


class _WritesPool(Adapter):
    name = "writes-pool"
    capabilities = Capabilities(dtypes=frozenset({"bfloat16"}), varlen=True, layouts=frozenset(PAGED_LAYOUTS))

    def forward(self, inputs, case, device):
        inputs.paged["k_pool"][0, 0, 0, 0] = 0.5  # the bug: writes into the caller's page pool
        return ForwardOutput(out=np.zeros((case.B, case.Hq, case.Lq, case.dv)))


def test_input_mutation_check_covers_the_page_pool():
    case = _case()
    res = call_adapter(_WritesPool(), "forward", make_inputs(case), case, "cpu")
    assert res.error is None, res.error
    assert res.mutated == ["paged.k_pool"], f"mutation check reported {res.mutated}, expected ['paged.k_pool']"
