"""GPU tests of paged K/V in attn_splitkv_fwd (attn_params.h v3, oracles/SEMANTICS.md §16).

Bug class (flash-attention #2709): a paged kernel reading a block-table
entry, page or pool slot past a sequence's length. Each case stores random K/V in a shuffled page pool
(`kernels.cuda.sanitize_cases.paged_kv`): NaN in the decoy pages, in every slot at or past a sequence's
length, and table entries past a sequence's pages pointing at decoys. Checks per case:
- the paged kernel equals the same kernel on the dense K/V with the same split count (bitwise expected;
  at most 1e-6 absolute tolerated), so paging changes addressing only;
- the conformance judge passes it against the FP64 oracle under the a-priori bounds of conformance/TOLERANCES.md
  (`kernels.check.verdict`), fully masked rows O = 0 / LSE = -inf (SEMANTICS.md §8) included; padded rows
  unwritten (§7), guard bands intact, inputs unchanged;
- the poison is live: asking the kernel for one key more than a sequence really has (legal for the
  kernel, wrong for the data) puts NaN into that sequence's rows, so a read past the end cannot hide;
- the cuda-splitkv adapter runs paged catalog-style cases (`conformance.cases.inputs.make_inputs`) against
  the float64 oracle, judged by the conformance judge.
Marked ``gpu``; skipped without CUDA or without the kernel library.

Run: python -m pytest -q -p no:cacheprovider tests/kernels/test_cuda_paged_device.py
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

BF, HF = torch.bfloat16, torch.float16

# (spec, real key lengths per batch entry, real query lengths or None)
CASES = [
    # decoding, GQA 4, one sequence of length 1, one empty, several splits
    (dict(B=4, Hq=32, Hkv=8, Lq=1, Lk=2000, d=128, dtype=BF, page_size=64, num_splits=5, causal=True),
     [2000, 1, 0, 777], None),
    # speculative decoding rows, causal bottom-right, auto split count, page 128
    (dict(B=4, Hq=8, Hkv=2, Lq=16, Lk=500, d=64, dtype=HF, page_size=128, num_splits=0, causal=True),
     [500, 130, 64, 0], None),
    # d = 256 (key tile 32), page 256, softcap (prescale variant), window, lengths around a page boundary
    (dict(B=3, Hq=4, Hkv=2, Lq=4, Lk=1000, d=256, dtype=BF, page_size=256, num_splits=3, softcap=5.0,
          window=(300, 0)), [1000, 255, 257], None),
    # top-left causal, varlen queries too, page 256 over d = 128 (4 key tiles per page)
    (dict(B=3, Hq=8, Hkv=8, Lq=8, Lk=700, d=128, dtype=BF, page_size=256, num_splits=2, causal=True,
          alignment="top_left"), [700, 300, 5], [8, 3, 0]),
    # more splits than key tiles: empty splits; single page per sequence
    (dict(B=3, Hq=4, Hkv=1, Lq=2, Lk=64, d=64, dtype=HF, page_size=64, num_splits=16), [64, 63, 1], None),
    # page 64 over d = 256 (2 key tiles per page), non-causal
    (dict(B=2, Hq=6, Hkv=3, Lq=3, Lk=333, d=256, dtype=HF, page_size=64, num_splits=4), [333, 40], None),
]


def _lib_or_skip():
    from attention_conformance.kernels import cuda_lib

    try:
        return cuda_lib.library()
    except cuda_lib.LibraryUnavailable as e:
        pytest.skip(str(e))


def _setup(spec: dict, lens: list[int], lens_q: list[int] | None, seed: int):
    from attention_conformance.kernels.cuda.sanitize_cases import paged_kv

    B, Hq, Hkv, Lq, Lk, d, dtype = (spec[n] for n in ("B", "Hq", "Hkv", "Lq", "Lk", "d", "dtype"))
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, Hq, Lq, d, device="cuda", generator=g).to(dtype)
    k = torch.randn(B, Hkv, Lk, d, device="cuda", generator=g).to(dtype)
    v = torch.randn(B, Hkv, Lk, d, device="cuda", generator=g).to(dtype)
    k_pool, v_pool, table = paged_kv(k, v, spec["page_size"], lens, seed=seed, decoys=3)
    sk = torch.tensor(lens, dtype=torch.int32, device="cuda")
    sq = None if lens_q is None else torch.tensor(lens_q, dtype=torch.int32, device="cuda")
    return q, k, v, k_pool, v_pool, table, sq, sk


def _run(q, k, v, *, seqlens_q, seqlens_k, num_splits, paged=None, **sem):
    """One attn_splitkv_fwd call on guarded, NaN-poisoned outputs; returns (o, lse, guards intact)."""
    from attention_conformance.kernels import cuda_lib
    from attention_conformance.kernels.check.guard import guard_ok, guarded

    B, Hq, Lq, _ = q.shape
    obuf, o = guarded((B, Hq, Lq, v.shape[-1]), q.dtype, "cuda")
    lbuf, lse = guarded((B, Hq, Lq), torch.float32, "cuda")
    p = cuda_lib.fwd_params(q, k, v, o, lse, seqlens_q=seqlens_q, seqlens_k=seqlens_k, num_splits=num_splits,
                            **sem, **(paged or {}))
    cuda_lib.call("attn_splitkv_fwd", p)
    torch.cuda.synchronize()
    return o, lse, guard_ok(obuf) and guard_ok(lbuf)


def _same_bits(a, b) -> bool:
    """Bitwise equality (the pools hold NaN, and NaN != NaN under torch.equal)."""
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _sem(spec: dict) -> dict:
    return dict(scale=1.0 / math.sqrt(spec["d"]), causal=spec.get("causal", False),
                alignment=spec.get("alignment", "bottom_right"), window=spec.get("window"),
                softcap=spec.get("softcap"))


@pytest.mark.parametrize("spec, lens, lens_q", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_paged_splitkv_equals_dense_and_float64_reference(spec, lens, lens_q):
    from attention_conformance.cases.calldata import CaseInputs
    from attention_conformance.kernels import cuda_lib
    from attention_conformance.kernels.check.verdict import (
        device_case,
        dtype_name,
        judge_outputs,
        oracle,
        passed,
        real_rows,
        to_numpy,
    )

    _lib_or_skip()
    q, k, v, k_pool, v_pool, table, sq, sk = _setup(spec, lens, lens_q, seed=len(lens) * 7 + spec["d"])
    ps, sem = spec["page_size"], _sem(spec)
    snap = [t.clone() for t in (q, k_pool, v_pool, table)]
    paged = dict(block_table=table, page_size=ps, seqlen_k=spec["Lk"])
    name = f"{spec} lens_k={lens} lens_q={lens_q}"

    # the same split count on both sides (auto may differ: the paged kernel's occupancy is its own)
    splits = spec["num_splits"]
    if splits == 0:
        o_tmp = torch.empty_like(q)
        splits = cuda_lib.splitkv_num_splits(cuda_lib.fwd_params(q, k, v, o_tmp, None, seqlens_k=sk))
    o_d, lse_d, guards_d = _run(q, k, v, seqlens_q=sq, seqlens_k=sk, num_splits=splits, **sem)
    o_p, lse_p, guards_p = _run(q, k_pool, v_pool, seqlens_q=sq, seqlens_k=sk, num_splits=splits, paged=paged, **sem)
    assert guards_d and guards_p, f"{name}: guard band changed (out-of-bounds write)"
    assert all(_same_bits(a, b) for a, b in zip(snap, (q, k_pool, v_pool, table))), f"{name}: inputs mutated"

    valid = torch.from_numpy(real_rows(spec["B"], spec["Hq"], spec["Lq"], lens_q)).to(q.device)
    # padded query rows stay unwritten (NaN poison), real rows are all written
    assert torch.isnan(o_p.double()[~valid]).all(), f"{name}: padded rows written"
    ov = o_p.double()[valid]
    assert not torch.isnan(ov).any(), (
        f"{name}: {int(torch.isnan(ov).any(-1).sum())} real rows NaN: a poisoned page, slot or table entry was read")

    # paged == dense, same kernel, same splits
    od, ld, lp = o_d.double()[valid], lse_d.double()[valid], lse_p.double()[valid]
    bitwise = torch.equal(od, ov) and torch.equal(ld, lp)
    fin = torch.isfinite(ld)
    assert torch.equal(torch.isinf(ld), torch.isinf(lp)), f"{name}: -inf LSE rows differ paged vs dense"
    diff_o = (od - ov).abs().max().item() if ov.numel() else 0.0
    diff_l = (ld[fin] - lp[fin]).abs().max().item() if fin.any() else 0.0
    assert bitwise or max(diff_o, diff_l) <= 1e-6, (
        f"{name}: paged vs dense differ (max |o| {diff_o:.3e}, max |lse| {diff_l:.3e}) with num_splits={splits}")

    # paged vs the FP64 oracle, judged (values, LSE, fully masked rows O = 0 / LSE = -inf)
    case = device_case(B=spec["B"], Hq=spec["Hq"], Hkv=spec["Hkv"], Lq=spec["Lq"], Lk=spec["Lk"], d=spec["d"],
                       dtype=spec["dtype"], scale=sem["scale"], causal=sem["causal"], alignment=sem["alignment"],
                       window=sem["window"], softcap=sem["softcap"], seqlens_q=lens_q, seqlens_k=lens,
                       layout=f"paged{ps}")
    verdict = judge_outputs(case, oracle(case, CaseInputs(q=to_numpy(q), k=to_numpy(k), v=to_numpy(v))), o_p, lse_p,
                            out_dtype=dtype_name(spec["dtype"]))
    assert passed(verdict), f"{name}: {verdict.message}"


@pytest.mark.parametrize("what", ["slot", "table_entry"])
def test_poison_is_observable(what):
    """Control: a read one key past a sequence's end really yields NaN (the checks above can fail).

    The kernel is told that batch 1 holds one key more than was stored: with len % page_size != 0 that
    key is a poisoned slot of its last page; with len % page_size == 0 it lies on the next table entry,
    which points at a decoy page. Batch 0 (told the truth) must stay finite.
    """
    _lib_or_skip()
    ps = 64
    lens = [300, 100 if what == "slot" else 128]
    spec = dict(B=2, Hq=4, Hkv=2, Lq=1, Lk=300, d=128, dtype=BF, page_size=ps)
    q, _, _, k_pool, v_pool, table, _, sk = _setup(spec, lens, None, seed=3)
    told = sk.clone()
    told[1] += 1
    o, _, ok = _run(q, k_pool, v_pool, seqlens_q=None, seqlens_k=told, num_splits=2,
                    paged=dict(block_table=table, page_size=ps, seqlen_k=300), **_sem(spec))
    assert ok, "guard band changed"
    assert torch.isfinite(o[0].float()).all(), "batch 0 (true length) must be finite"
    assert torch.isnan(o[1].float()).any(), (
        f"reading key {lens[1]} of batch 1 ({what}) gave no NaN: the poison does not reach the output, so the "
        "paged checks could not detect an out-of-bounds read")


def test_adapter_runs_paged_cases_against_the_oracle():
    """cuda-splitkv end to end on paged cases built by conformance.cases.inputs (CaseInputs.paged), judged by the
    conformance judge against the FP64 oracle (the a-priori bounds of conformance/TOLERANCES.md)."""
    import numpy as np

    from attention_conformance.adapters.cuda import CudaSplitKV
    from attention_conformance.cases.calldata import AdapterResults, CallResult
    from attention_conformance.cases.case import Case
    from attention_conformance.cases.inputs import make_inputs
    from attention_conformance.kernels.check.verdict import passed, real_rows
    from attention_conformance.verdict.bounds import compute_oracle
    from attention_conformance.verdict.judge import judge

    _lib_or_skip()
    adapter = CudaSplitKV()
    reason = adapter.unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)
    cases = [
        Case(family="paged_dev", B=3, Hq=8, Hkv=2, Lq=1, Lk=1000, d=64, dv=64, dtype="bfloat16", causal=True,
             seqlens_k=(1000, 65, 0), layout="paged64", seed=1),
        Case(family="paged_dev", B=2, Hq=4, Hkv=4, Lq=4, Lk=600, d=128, dv=128, dtype="float16", causal=True,
             layout="paged128", seed=2),
        Case(family="paged_dev", B=2, Hq=4, Hkv=2, Lq=16, Lk=700, d=256, dv=256, dtype="bfloat16",
             window=(200, 0), seqlens_k=(700, 256), layout="paged256", seed=3),
    ]
    for case in cases:
        assert adapter.supports(case, "cuda") is None, f"{case.id}: {adapter.supports(case, 'cuda')}"
        inputs = make_inputs(case)
        res = adapter.forward(inputs, case, "cuda")
        valid = real_rows(case.B, case.Hq, case.Lq, case.seqlens_q)
        assert res.unwritten == 0 and not res.mutated_inputs, f"{case.id}: {res.unwritten} unwritten, {res.notes}"
        assert np.isfinite(res.out[valid]).all(), f"{case.id}: non-finite output: a poisoned page/slot/entry was read"
        verdict = judge(case, compute_oracle(case, inputs), AdapterResults(forward=CallResult(output=res)),
                        device="cuda", capabilities=adapter.capabilities)
        assert passed(verdict), f"{case.id}: {verdict.message} ({res.notes})"
