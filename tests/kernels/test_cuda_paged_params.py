"""CPU tests of paged K/V in the CUDA kernels' C ABI (attn_params.h v3, still so in v4) and the cuda-splitkv adapter.

Bug class (flash-attention #2709): a paged kernel reading a block-table
entry, page or slot past a sequence's length. These tests need no GPU:
- the three fields are appended at the END of AttnFwdParams in the header and in the ctypes mirror
  (every earlier field keeps its offset, so v2 callers that zero the struct keep working);
- `fwd_params` fills block_table / its batch stride / page_size / the page strides, takes Lk from
  ``seqlen_k`` and refuses inconsistent paged arguments with a message naming them;
- the launchers validate before touching the device: attn_splitkv_fwd refuses a page size that is not
  a multiple of its key tile (naming page_size and kBlockN) and a non-positive page size, and every other
  launcher refuses a block table (naming block_table);
- the cuda-splitkv adapter claims the paged layouts (FA1 / FA2 decline them with a reason), and turns a
  paged case's `CaseInputs.paged` into pools and a table whose addressing reproduces the dense K/V.
The kernel itself is checked on a GPU by tests/kernels/test_cuda_paged_device.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from kernel_helpers import cuda_library_or_skip

from attention_conformance.kernels import build as kbuild
from attention_conformance.kernels import cuda_lib

torch = pytest.importorskip("torch")

PAGED_FIELDS = [("block_table", "const int32_t*"), ("block_table_batch_stride", "int64_t"), ("page_size", "int32_t")]


@pytest.fixture(scope="module")
def lib():
    """The library CI built before pytest (`python -m attention_conformance.kernels.build`); skips with that
    command when absent."""
    return cuda_library_or_skip()


def _header_fwd_fields() -> list[tuple[str, str]]:
    text = (kbuild.CUDA_DIR / "include" / "attn_params.h").read_text()
    body = re.search(r"typedef struct AttnFwdParams \{(.*?)\} AttnFwdParams;", text, re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    fields = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        m = re.match(r"((?:const )?\w+\s*\**)\s*(.*)", decl)
        typ = m.group(1).replace(" ", "")
        for name in m.group(2).split(","):
            fields.append((name.strip(), typ))
    return fields


def test_paged_fields_are_appended_at_the_end_of_the_header_and_the_mirror():
    header = _header_fwd_fields()
    want = [(n, t.replace(" ", "")) for n, t in PAGED_FIELDS]
    at = [n for n, _ in header].index("lse_partial") + 1  # v3 appended them right after the v2 struct's end
    assert header[at:at + 3] == want, f"attn_params.h: AttnFwdParams fields after lse_partial are {header[at:at + 3]}"
    mirror = [n for n, _ in cuda_lib.AttnFwdParams._fields_]
    assert mirror == [n for n, _ in header], (
        f"kernels/cuda_lib.py AttnFwdParams field order {mirror} != attn_params.h {[n for n, _ in header]}")
    assert cuda_lib.ATTN_PARAMS_VERSION >= 3, "adding fields changed sizeof(AttnFwdParams): the ABI version is >= 3"
    # every field before the paged ones keeps its v2 offset (the v2 struct ended at lse_partial, 8 bytes)
    off = {n: getattr(cuda_lib.AttnFwdParams, n).offset for n, _ in cuda_lib.AttnFwdParams._fields_}
    assert off["block_table"] == off["lse_partial"] + 8, off
    assert cuda_lib.AttnFwdParams().block_table is None and cuda_lib.AttnFwdParams().page_size == 0, (
        "a zero-initialised struct must mean 'not paged'")


def _paged_tensors(B=2, Hq=4, Hkv=2, Lq=3, Lk=150, d=64, page_size=64, num_pages=7, dtype=torch.bfloat16):
    q = torch.zeros(B, Hq, Lq, d, dtype=dtype)
    k_pool = torch.zeros(num_pages, Hkv, page_size, d, dtype=dtype)
    v_pool = torch.zeros(num_pages, Hkv, page_size, d, dtype=dtype)
    pages = -(-Lk // page_size)
    table = torch.arange(B * pages, dtype=torch.int32).flip(0).reshape(B, pages).contiguous()
    o = torch.zeros(B, Hq, Lq, d, dtype=dtype)
    lse = torch.zeros(B, Hq, Lq)
    return q, k_pool, v_pool, table, o, lse


def test_fwd_params_fills_paged_fields_and_page_strides():
    q, kp, vp, table, o, lse = _paged_tensors()
    p = cuda_lib.fwd_params(q, kp, vp, o, lse, block_table=table, page_size=64, seqlen_k=150, num_splits=2)
    assert p.block_table == table.data_ptr() and p.page_size == 64
    assert p.block_table_batch_stride == table.stride(0) == 3, (p.block_table_batch_stride, table.stride())
    assert (p.k_batch_stride, p.k_head_stride, p.k_row_stride) == kp.stride()[:3], "k strides must be the pool's"
    assert p.k_batch_stride == 2 * 64 * 64, "k_batch_stride is the page stride (elements between pages)"
    assert (p.v_batch_stride, p.v_head_stride, p.v_row_stride) == vp.stride()[:3]
    assert (p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim) == (2, 4, 2, 3, 150, 64), (
        "batch comes from q, Lk from seqlen_k (not from the pool's page_size axis)")
    assert any(t is table for t in p._keep), "the struct must keep the block table alive"
    dense = cuda_lib.fwd_params(q, torch.zeros(2, 2, 150, 64, dtype=q.dtype), torch.zeros(2, 2, 150, 64,
                                dtype=q.dtype), o, lse)
    assert dense.block_table is None and dense.page_size == 0 and dense.block_table_batch_stride == 0


@pytest.mark.parametrize(
    "change, needle",
    [
        (dict(seqlen_k=None), "seqlen_k"),
        (dict(seqlen_k=193), "seqlen_k=193"),  # 3 pages of 64 hold 192 keys
        (dict(page_size=32), "page_size=32"),  # pools hold 64 keys per page
        (dict(page_size=0), "page_size"),
        (dict(table_dtype=torch.int64), "int32"),
        (dict(table_rows=3), "B=2"),
    ],
)
def test_fwd_params_refuses_inconsistent_paged_arguments(change, needle):
    q, kp, vp, table, o, lse = _paged_tensors()
    kw = dict(block_table=table, page_size=64, seqlen_k=150)
    if "table_dtype" in change:
        kw["block_table"] = table.to(change.pop("table_dtype"))
    if "table_rows" in change:
        kw["block_table"] = torch.zeros(change.pop("table_rows"), 3, dtype=torch.int32)
    kw.update(change)
    with pytest.raises(cuda_lib.KernelError) as ei:
        cuda_lib.fwd_params(q, kp, vp, o, lse, **kw)
    assert needle in ei.value.message, f"fwd_params with {change}: message {ei.value.message!r} lacks {needle!r}"


def test_fwd_params_refuses_page_size_without_block_table():
    q, _, _, _, o, lse = _paged_tensors()
    k = torch.zeros(2, 2, 150, 64, dtype=q.dtype)
    with pytest.raises(cuda_lib.KernelError, match="only meaningful with block_table"):
        cuda_lib.fwd_params(q, k, k, o, lse, page_size=64)


def _call_status(launcher: str, params) -> cuda_lib.KernelError | None:
    try:
        cuda_lib.call(launcher, params, stream=0)
    except cuda_lib.KernelError as e:
        return e
    return None


@pytest.mark.parametrize("d, page_size, block_n", [(64, 96, 64), (128, 32, 64), (256, 16, 32), (128, 100, 64)])
def test_splitkv_refuses_page_size_not_a_multiple_of_its_key_tile(lib, d, page_size, block_n):
    q, kp, vp, table, o, lse = _paged_tensors(d=d, page_size=page_size, Lk=100)
    p = cuda_lib.fwd_params(q, kp, vp, o, lse, block_table=table, page_size=page_size, seqlen_k=100)
    e = _call_status("attn_splitkv_fwd", p)
    assert e is not None and e.status == "ATTN_ERR_UNSUPPORTED", f"d={d} page_size={page_size}: got {e}"
    assert f"page_size={page_size}" in e.message and f"kBlockN={block_n}" in e.message, e.message


def test_splitkv_refuses_nonpositive_page_size_and_negative_table_stride(lib):
    q, kp, vp, table, o, lse = _paged_tensors()
    p = cuda_lib.fwd_params(q, kp, vp, o, lse, block_table=table, page_size=64, seqlen_k=150)
    p.page_size = 0
    e = _call_status("attn_splitkv_fwd", p)
    assert e is not None and e.status == "ATTN_ERR_INVALID" and "page_size=0" in e.message, e
    p.page_size, p.block_table_batch_stride = 64, -3
    e = _call_status("attn_splitkv_fwd", p)
    assert e is not None and e.status == "ATTN_ERR_INVALID" and "block_table_batch_stride=-3" in e.message, e


def test_splitkv_num_splits_accepts_paged_params(lib):
    q, kp, vp, table, o, lse = _paged_tensors()
    p = cuda_lib.fwd_params(q, kp, vp, o, lse, block_table=table, page_size=64, seqlen_k=150, num_splits=3)
    assert cuda_lib.splitkv_num_splits(p, num_sms=132) == 3, "paged params must pass the split-count validation"


@pytest.mark.parametrize("launcher", ["attn_fa2_fwd", "attn_fa1_fwd"])
def test_other_forward_launchers_refuse_a_block_table(lib, launcher):
    q, kp, vp, table, o, lse = _paged_tensors()
    p = cuda_lib.fwd_params(q, kp, vp, o, lse, block_table=table, page_size=64, seqlen_k=150)
    e = _call_status(launcher, p)
    assert e is not None and e.status == "ATTN_ERR_UNSUPPORTED" and "block_table" in e.message, (
        f"{launcher} with a block table: expected ATTN_ERR_UNSUPPORTED naming block_table, got {e}")


@pytest.mark.parametrize("launcher", ["attn_fa2_bwd", "attn_fa1_bwd"])
def test_backward_launchers_refuse_a_block_table(lib, launcher):
    if getattr(lib, launcher, None) is None:
        pytest.skip(f"{launcher} not exported")
    B, Hq, Hkv, L, d = 1, 2, 1, 8, 64
    t = lambda *s: torch.zeros(*s, dtype=torch.bfloat16)  # noqa: E731
    f32 = lambda *s: torch.zeros(*s)  # noqa: E731
    q, k, v, o, do = t(B, Hq, L, d), t(B, Hkv, L, d), t(B, Hkv, L, d), t(B, Hq, L, d), t(B, Hq, L, d)
    table = torch.zeros(1, 1, dtype=torch.int32)
    p = cuda_lib.bwd_params(q, k, v, o, f32(B, Hq, L), do, t(B, Hq, L, d), t(B, Hkv, L, d), t(B, Hkv, L, d),
                            dq_accum=f32(B, Hq, L, d), d_rowsum=f32(B, Hq, L), dk_accum=f32(B, Hq, L, d),
                            dv_accum=f32(B, Hq, L, d))
    p.fwd.block_table, p.fwd.page_size = table.data_ptr(), 64
    e = _call_status(launcher, p)
    assert e is not None and e.status == "ATTN_ERR_UNSUPPORTED" and "block_table" in e.message, (
        f"{launcher} with a block table: expected ATTN_ERR_UNSUPPORTED naming block_table, got {e}")


# -- adapter -------------------------------------------------------------------------------------------------
def _paged_case(layout="paged64", **kw):
    from attention_conformance.cases.case import Case

    base = dict(family="paged_test", B=3, Hq=4, Hkv=2, Lq=2, Lk=300, d=64, dv=64, dtype="bfloat16", causal=True,
                seqlens_k=(300, 65, 0), layout=layout, seed=5)
    base.update(kw)
    return Case(**base)


def test_adapters_claim_paged_layouts_only_for_splitkv():
    from attention_conformance.adapters.cuda import CudaFA1, CudaFA2, CudaSplitKV
    from attention_conformance.cases.case import PAGED_LAYOUTS

    for layout in PAGED_LAYOUTS:
        case = _paged_case(layout)
        assert CudaSplitKV().supports(case, "cuda") is None, f"cuda-splitkv must claim {layout}"
        for cls in (CudaFA1, CudaFA2):
            reason = cls().supports(case, "cuda")
            assert reason and "paged" in reason, f"{cls.name} on {layout}: expected a paged refusal, got {reason!r}"


@pytest.mark.parametrize("layout", ["paged64", "paged256"])
def test_adapter_paged_tensors_address_the_dense_kv(layout):
    """_materialize hands the kernel pools + table whose (table, page, slot) addressing gives the dense K/V."""
    from attention_conformance.adapters.cuda import CudaSplitKV
    from attention_conformance.cases.inputs import make_inputs

    case = _paged_case(layout)
    inputs = make_inputs(case)
    m, kw, named = CudaSplitKV()._materialize(inputs, case, "cpu")
    ps = kw["page_size"]
    assert ps == int(layout[5:]) and kw["seqlen_k"] == case.Lk and kw["block_table"].dtype == torch.int32
    assert set(named) == {"q", "paged.k_pool", "paged.v_pool", "paged.block_table"}, sorted(named)
    assert m.k.shape[1:] == (case.Hkv, ps, case.d) and m.v.shape[1:] == (case.Hkv, ps, case.dv)
    p = cuda_lib.fwd_params(m.q, m.k, m.v, torch.empty(case.B, case.Hq, case.Lq, case.dv, dtype=m.q.dtype),
                            None, **kw)
    assert p.seqlen_k == case.Lk and p.k_batch_stride == m.k.stride(0)
    table = kw["block_table"].numpy()
    kpool = m.k.to(torch.float64).numpy()
    vpool = m.v.to(torch.float64).numpy()
    for b, n in enumerate(case.seqlens_k):
        j = np.arange(n)
        got_k = kpool[table[b, j // ps], :, j % ps].transpose(1, 0, 2)  # [Hkv, n, d]
        got_v = vpool[table[b, j // ps], :, j % ps].transpose(1, 0, 2)
        assert np.array_equal(got_k, inputs.k[b, :, :n]), f"{layout}: batch {b}: paged K != dense K"
        assert np.array_equal(got_v, inputs.v[b, :, :n]), f"{layout}: batch {b}: paged V != dense V"
        # what a correct kernel never reads is poisoned: slots past n of the last real page
        if n % ps:
            assert np.isnan(vpool[table[b, (n - 1) // ps], :, n % ps:]).all(), f"{layout}: batch {b}: no poison"


def test_adapter_paged_case_without_paged_inputs_is_an_error():
    from attention_conformance.adapters.base import CaseInputs
    from attention_conformance.adapters.cuda import CudaSplitKV

    case = _paged_case()
    z = np.zeros((3, 2, 300, 64))
    with pytest.raises(ValueError, match="CaseInputs.paged is None"):
        CudaSplitKV()._materialize(CaseInputs(q=np.zeros((3, 4, 2, 64)), k=z, v=z), case, "cpu")


def test_paged_kv_helper_stores_dense_kv_behind_a_shuffled_poisoned_table():
    """attention_conformance.kernels.cuda.sanitize_cases.paged_kv (used by the sanitizer set and the GPU test) on
    CPU tensors."""
    from attention_conformance.kernels.cuda.sanitize_cases import paged_kv

    B, Hkv, Lk, d, ps = 3, 2, 300, 8, 64
    k = torch.randn(B, Hkv, Lk, d, dtype=torch.float64)
    v = torch.randn(B, Hkv, Lk, d, dtype=torch.float64)
    lens = [300, 64, 0]
    k_pool, v_pool, table = paged_kv(k, v, ps, lens, seed=1, decoys=2)
    assert table.dtype == torch.int32 and tuple(table.shape) == (B, 5), (table.dtype, tuple(table.shape))
    need = [5, 1, 0]
    real = [int(table[b, p]) for b in range(B) for p in range(need[b])]
    assert len(set(real)) == len(real) == 6 and k_pool.shape[0] == 8, (real, tuple(k_pool.shape))
    assert real != list(range(6)), "the real pages must be shuffled, not at their dense positions"
    for b, n in enumerate(lens):
        for j in range(n):
            page, slot = int(table[b, j // ps]), j % ps
            assert torch.equal(k_pool[page, :, slot], k[b, :, j]) and torch.equal(v_pool[page, :, slot], v[b, :, j])
        for p in range(need[b], 5):  # entries past the sequence's pages point at all-NaN decoys
            assert int(table[b, p]) not in real and torch.isnan(v_pool[int(table[b, p])]).all(), (b, p)
    assert torch.isnan(v_pool[int(table[0, 4]), :, 300 - 256:]).all(), "slots past the length must be NaN"
