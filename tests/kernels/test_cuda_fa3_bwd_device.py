"""GPU tests of the FA3 backward (kernels/cuda/fa3_bwd.cu, sm_90a) against the FP64 oracle and the FA2 backward.

Marked ``gpu``; skipped without a Hopper GPU or the kernel library. Each case
(`kernels.check.cases.FA3_BWD_CASES`: fp16 / bf16, d = 64 / 128 and each again at d = 96, tails, causal in both
alignments, fully masked rows, windows, GQA, varlen with NaN padding, softcap, [B, L, H, D] views, Lk = 0) runs both
launchers (and, on five cases, the build with the other GEMM / element-wise overlap setting; the builds with the
other dQ mode (split between the consumers / taken in turns), and at d = 64 with 64-row query tiles) and requires
the conformance judge's verdict on O, LSE, dq, dk, dv against the FP64 oracle (`oracles.attention_backward`) under
the a-priori bounds of conformance/TOLERANCES.md, and dq exactly 0 on rows with no visible key
(`kernels.check.backward.check_backward`); the deterministic launcher must give bit-identical results over two runs,
both launchers judged the same way. The wide builds (d = 192, 256 and (d, dv) = (192, 128), hopper/bwd_wide.cuh) run
`kernels.check.cases.FA3_BWD_WIDE_CASES` (the same features at those head dims) and their own determinism cases
(select with -k wide).
"""

from __future__ import annotations

import pytest
from kernel_helpers import cuda_library_exporting_or_skip, lab_library_or_skip

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.backward,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                       reason="needs a Hopper (sm_90) GPU"),
]


def _lib():
    from attention_conformance.kernels import cuda_lib

    cuda_library_exporting_or_skip("attn_fa3_bwd")
    return cuda_lib


def _cases():
    from attention_conformance.kernels.check.cases import FA3_BWD_CASES

    return FA3_BWD_CASES


@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(12))
def test_fa3_bwd_matches_fp64_oracle(index, launcher):
    _lib()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    cases = _cases()
    assert len(cases) == 12, "keep the parametrisation in step with CASES"
    res = check_case(cases[index], launcher, seed=index)
    assert res["ok"], f"{res['case']} [{launcher}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(12), ids=[f"d96-{i}" for i in range(12)])
def test_fa3_bwd_d96_matches_fp64_oracle(index, launcher):
    """The build of d = 96 (bwd_defaults.cuh: d = 128's tiles, the padding columns zero-filled by TMA) on every case
    of FA3_BWD_CASES, its head dim set to 96 (select with -k d96)."""
    _lib()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    res = check_case(dict(_cases()[index], d=96), launcher, seed=400 + index)
    assert res["ok"], f"{res['case']} [{launcher}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("index", [2, 4, 6, 7, 9])
def test_fa3_bwd_other_overlap_build_matches_fp64_oracle(index):
    _lib()
    lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    res = check_case(_cases()[index], "attn_fa3_bwd", seed=100 + index, variant="atomic_dq_other_overlap")
    assert res["ok"], f"{res['case']} [{res['launcher']}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(12))
def test_fa3_bwd_atomic_dq_build_matches_fp64_oracle(index, launcher):
    _lib()
    lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    res = check_case(_cases()[index], launcher, seed=200 + index, variant="atomic_dq")
    assert res["ok"], f"{res['case']} [{res['launcher']}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("variant", ["rows64", "other_dq_split", "direct_dkv"])
@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(12))
def test_fa3_bwd_other_tile_builds_match_fp64_oracle(index, launcher, variant):
    """The lab's other tile settings: 64-row query tiles (rows64: the shipped build has 128 rows at d = 64, 80 with
    dQ^T = K^T dS^T at d = 96, 128), the dQ mode the shipped build does not run at the case's head dim
    (other_dq_split), dK / dV stored 4 bytes at a time from the accumulators instead of staged through shared memory
    (direct_dkv)."""
    _lib()
    lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    res = check_case(_cases()[index], launcher, seed=300 + index, variant=variant)
    assert res["ok"], f"{res['case']} [{res['launcher']}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 96, 128])
def test_fa3_bwd_staged_and_direct_dkv_stores_give_the_same_bits(d, causal):
    """dK / dV into 16-byte aligned tensors (staged through shared memory, DkvStore::kStaged) and into tensors 4 bytes
    off that alignment (the 4-byte stores the same build falls back to) are the same bits; every row of both is
    written (the buffers start as NaN), and the element before the offset view is left as it was."""
    cuda_lib = _lib()
    from attention_conformance.kernels import cuda_bwd_lib

    g = torch.Generator(device="cuda").manual_seed(d)
    B, H, Lq, Lk = 2, 3, 200, 300  # a key tile of 44 rows after two whole ones; query tiles with tails

    def rnd(L: int) -> torch.Tensor:
        return torch.randn(B, H, L, d, device="cuda", generator=g).to(torch.bfloat16)

    q, k, v, dout = rnd(Lq), rnd(Lk), rnd(Lk), rnd(Lq)
    o, lse = torch.empty_like(q), torch.empty(B, H, Lq, device="cuda", dtype=torch.float32)
    cuda_lib.call("attn_fa3_fwd", cuda_lib.fwd_params(q, k, v, o, lse, causal=causal))

    def run(offset: int) -> tuple[torch.Tensor, ...]:
        bufs = [torch.full((k.numel() + offset,), float("nan"), dtype=k.dtype, device="cuda") for _ in range(2)]
        dk, dv = (b[offset:].view_as(k) for b in bufs)
        dq = torch.empty_like(q)
        params = cuda_bwd_lib.bwd_params(q, k, v, o, lse, dout, dq, dk, dv, causal=causal,
                                         **cuda_bwd_lib.bwd_scratch(q, k, v))
        cuda_lib.call("attn_fa3_bwd", params)
        torch.cuda.synchronize()
        return dk, dv, *(b[:offset] for b in bufs)

    staged, direct = run(0), run(2)  # 2 bf16 elements: 4-byte aligned, not 16
    assert direct[0].data_ptr() % 16 != 0
    for name, a, b in (("dk", staged[0], direct[0]), ("dv", staged[1], direct[1])):
        assert not a.isnan().any() and not b.isnan().any(), f"{name}: rows left unwritten"
        assert torch.equal(a, b), f"{name}: staged and 4-byte stores differ (max {float((a - b).abs().max())})"
    assert all(x.isnan().all() for x in direct[2:]), "the element before the view was written"


@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(12))
def test_fa3_bwd_alternate_dq_turns_match_fp64_oracle(index, launcher):
    """d = 64 with the dQ turns on the same tile (lab variant alternate_dq: consumer it % 2 computes the dQ of tile it;
    the shipped build takes them one tile behind, the last tile's after the loop); the cases at their own head dim
    when it is 64, else at d = 64."""
    _lib()
    lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    res = check_case(dict(_cases()[index], d=64), launcher, seed=600 + index, variant="alternate_dq")
    assert res["ok"], f"{res['case']} [{res['launcher']}]: {'; '.join(res['problems'])}"


def test_fa3_bwd_alternate_dq_turns_deterministic_is_bit_identical():
    _lib()
    lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_determinism as determinism_case
    from attention_conformance.kernels.check.cases import FA3_BWD_DETERMINISM_CASES as DET_CASES

    spec = next(c for c in DET_CASES if c["d"] == 64)
    res = determinism_case(spec, seed=7, variant="alternate_dq")
    assert res["identical"], f"{res['case']}: two runs of the deterministic alternate_dq build differ"
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(12))
def test_fa3_bwd_d64_matches_fp64_oracle(index, launcher):
    """The shipped d = 64 build (128-row tiles, the dQ turns one tile behind: consumer it % 2 computes the dQ of tile
    it - 1, the last tile's after the loop) on every case at d = 64."""
    _lib()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    res = check_case(dict(_cases()[index], d=64), launcher, seed=650 + index)
    assert res["ok"], f"{res['case']} [{res['launcher']}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("variant", ["default", "atomic_dq"])
@pytest.mark.parametrize("index", range(2))
def test_fa3_bwd_deterministic_is_bit_identical(index, variant):
    _lib()
    if variant != "default":
        lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_determinism as determinism_case
    from attention_conformance.kernels.check.cases import FA3_BWD_DETERMINISM_CASES as DET_CASES

    res = determinism_case(DET_CASES[index], seed=index, variant=variant)
    assert res["identical"], f"{res['case']}: two runs of attn_fa3_bwd_deterministic differ"
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])}"


def _wide_cases():
    from attention_conformance.kernels.check.cases import FA3_BWD_WIDE_CASES

    return FA3_BWD_WIDE_CASES


@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(16), ids=[f"wide-{i}" for i in range(16)])
def test_fa3_bwd_wide_matches_fp64_oracle(index, launcher):
    """The wide builds (bwd_wide.cuh: d = 192, 256, (192, 128)) on FA3_BWD_WIDE_CASES: causal both alignments, fully
    masked rows, windows, GQA, varlen with NaN padding, softcap, [B, L, H, D] views, Lk = 0."""
    _lib()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    cases = _wide_cases()
    assert len(cases) == 16, "keep the parametrisation in step with FA3_BWD_WIDE_CASES"
    res = check_case(cases[index], launcher, seed=500 + index)
    assert res["ok"], f"{res['case']} [{launcher}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("variant", ["atomic_dq", "wide_dq_float4", "wide_tma_dq_one_do_stage"])
@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(16), ids=[f"wide-{i}" for i in range(16)])
def test_fa3_bwd_wide_lab_builds_match_fp64_oracle(index, launcher, variant):
    """The lab's wide builds: dQ added by float2 atomics with dO in the Q ring (atomic_dq: the d = 256 build before),
    by float4 atomics (wide_dq_float4: two lanes swap halves so that each adds four columns of one row; rows past the
    real length skipped by the lane that holds them), and through one buffer per consumer and the TMA reduce-add with
    dO in one stage (wide_tma_dq_one_do_stage, shipped at d = 256: consumer 1 runs dV first and releases dO; not built
    at d = dv = 192)."""
    _lib()
    lab = lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_backward as check_case

    spec = _wide_cases()[index]
    if variant not in lab.fa3_bwd_wide_variants(spec["d"], spec.get("dv", spec["d"])):
        pytest.skip(f"{variant} has no build at d = {spec['d']}, dv = {spec.get('dv', spec['d'])}")
    res = check_case(spec, launcher, seed=700 + index, variant=variant)
    assert res["ok"], f"{res['case']} [{res['launcher']}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("index", range(3), ids=["wide-256", "wide-192", "wide-192x128"])
def test_fa3_bwd_wide_deterministic_is_bit_identical(index):
    _lib()
    from attention_conformance.kernels.check.backward import check_determinism as determinism_case
    from attention_conformance.kernels.check.cases import FA3_BWD_WIDE_DETERMINISM_CASES as DET_CASES

    res = determinism_case(DET_CASES[index], seed=600 + index)
    assert res["identical"], f"{res['case']}: two runs of attn_fa3_bwd_deterministic differ"
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("variant", ["default", "shared_keys64"])
@pytest.mark.parametrize("dv", [192, 128])
@pytest.mark.parametrize("launcher", ["attn_fa3_bwd", "attn_fa3_bwd_deterministic"])
@pytest.mark.parametrize("index", range(16), ids=[f"wide-{i}" for i in range(16)])
def test_fa3_bwd_d192_builds_match_fp64_oracle(index, launcher, dv, variant):
    """d = 192 (dv = 192 and 128) on every FA3_BWD_WIDE_CASES case: the shipped build (hopper/bwd_sliced.cuh: 96-key
    tiles shared by three consumers, each owning 32 keys for S / dP and a 64-column slice of dK^T, dV^T and dQ; at
    dv = 128 consumer 2 holds no dV slice), the lab's shared_keys64 (hopper/bwd_wide.cuh's 64-key tiling, the shipped
    build before): causal both alignments, fully masked rows, windows, GQA, varlen with NaN padding, softcap,
    [B, L, H, D] views, Lk = 0."""
    _lib()
    if variant != "default":
        lab = lab_library_or_skip()
        if variant not in lab.fa3_bwd_wide_variants(192, dv):
            pytest.skip(f"{variant} has no build at d = 192, dv = {dv}")
    from attention_conformance.kernels.check.backward import check_backward as check_case

    spec = _wide_cases()[index] | {"d": 192, "dv": dv}
    res = check_case(spec, launcher, seed=800 + index + dv, variant=variant)
    assert res["ok"], f"{res['case']} [{res['launcher']}]: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("variant", ["shared_keys64"])
def test_fa3_bwd_d192_lab_deterministic_is_bit_identical(variant):
    """The lab's d = dv = 192 build shared_keys64 (the 64-key wide tiling), deterministic: two runs give the same
    bits."""
    _lib()
    lab_library_or_skip()
    from attention_conformance.kernels.check.backward import check_determinism as determinism_case
    from attention_conformance.kernels.check.cases import FA3_BWD_WIDE_DETERMINISM_CASES as DET_CASES

    spec = next(c for c in DET_CASES if c["d"] == 192 and c.get("dv", 192) == 192)
    res = determinism_case(spec, seed=17, variant=variant)
    assert res["identical"], f"{res['case']}: two runs of the deterministic {variant} build differ"
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])}"


@pytest.mark.parametrize(("d", "dv"), [(256, 128), (160, 160), (128, 64)])
def test_fa3_bwd_rejects_head_dims_it_has_no_build_for(d, dv):
    cuda_lib = _lib()
    from attention_conformance.kernels import cuda_bwd_lib

    q = torch.randn(1, 1, 64, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 1, 64, dv, device="cuda", dtype=torch.bfloat16)
    lse = torch.zeros(1, 1, 64, device="cuda")
    with pytest.raises(cuda_lib.KernelUnsupported, match=f"head_dim={d}, head_dim_v={dv}"):
        cuda_bwd_lib.backward("attn_fa3_bwd", q, q, v, v, lse, v)
