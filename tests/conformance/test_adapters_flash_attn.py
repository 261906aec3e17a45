"""flash-attention adapters without flash-attention: unavailable reasons and the argument translation
(windows §5, varlen packing §7, varlen LSE layouts §12, FA3 FP8 descales §10), tested with plain torch.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from adapter_helpers import BOUND, real_rows, reference

from attention_conformance import oracles
from attention_conformance.adapters.flash_attn import (
    FlashAttn2,
    FlashAttn3,
    FlashAttn4,
    cu_seqlens,
    fa3_descales,
    fa_window,
    pack_varlen,
    unpack_varlen,
    unpack_varlen_lse,
)
from attention_conformance.cases.case import Case, FP8Spec
from attention_conformance.cases.inputs import make_inputs

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("cls,module", [(FlashAttn2, "flash_attn"), (FlashAttn3, "flash_attn_interface"),
                                        (FlashAttn4, "flash_attn.cute")])
def test_unavailable_reasons_name_device_and_module(cls, module):
    adapter = cls()
    reason = adapter.unavailable_reason("cpu")
    assert reason and "runs on CUDA only" in reason
    if adapter.module() is None:
        assert f"{module}" in reason and "not importable" in reason
    case = Case("t", 1, 1, 1, 2, 2, 64, 64)
    assert adapter.supports(case, "cpu") == reason
    if not torch.cuda.is_available():
        assert "needs a CUDA device" in adapter.unavailable_reason("cuda")


def test_window_translation():
    c = Case("t", 1, 1, 1, 4, 8, 16, 16)
    assert fa_window(c) == (-1, -1)
    assert fa_window(c, None) == (None, None)
    assert fa_window(c.replace(window=(3, None))) == (3, -1)
    assert fa_window(c.replace(window=(None, 2)), None) == (None, 2)
    assert fa_window(c.replace(causal=True)) == (-1, 0)
    assert fa_window(c.replace(causal=True, window=(5, 7))) == (5, 0)
    with pytest.raises(ValueError, match="left=-2"):
        fa_window(c.replace(window=(-2, 0)))


def test_varlen_pack_unpack_roundtrip_and_gradients():
    lengths = [3, 0, 5]
    assert cu_seqlens(lengths) == [0, 3, 3, 8]
    x = torch.randn(3, 2, 6, 4, dtype=torch.float64, requires_grad=True)
    packed = pack_varlen(x, lengths)
    assert packed.shape == (8, 2, 4)
    assert torch.equal(packed[3:8], x[2, :, :5].transpose(0, 1))
    back = unpack_varlen(packed, lengths, 6)
    assert back.shape == x.shape
    keep = torch.zeros(3, 1, 6, 1, dtype=torch.bool)
    for b, n in enumerate(lengths):
        keep[b, :, :n] = True
    assert torch.equal(back, torch.where(keep, x, torch.zeros_like(x)))
    (g,) = torch.autograd.grad(back.sum(), x)
    assert torch.equal(g, keep.expand_as(x).to(g.dtype))


def test_varlen_lse_layouts():
    lengths = [2, 3]
    flat = torch.arange(2 * 5, dtype=torch.float32).reshape(2, 5)  # (H, total)
    out = unpack_varlen_lse(flat, lengths, 4)
    assert out.shape == (2, 2, 4)
    assert out[1, :, :3].tolist() == flat[:, 2:5].tolist() and torch.isneginf(out[1, :, 3]).all()
    padded = torch.arange(2 * 2 * 4, dtype=torch.float32).reshape(2, 2, 4)  # (B, H, max_seqlen)
    out2 = unpack_varlen_lse(padded, lengths, 4)
    assert torch.equal(out2[0, :, :2], padded[0, :, :2]) and torch.isneginf(out2[0, :, 2:]).all()
    with pytest.raises(ValueError, match="unexpected varlen LSE shape"):
        unpack_varlen_lse(torch.zeros(5), lengths, 4)


@pytest.mark.fp8
@pytest.mark.parametrize("granularity", ["per_tensor", "per_head"])
def test_fa3_descales_from_the_oracle_quantizer(granularity):
    fp8 = oracles.fp8
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 4, 5, 16)), rng.standard_normal((2, 2, 7, 16)), rng.standard_normal((2, 2, 7, 16))
    quant = fp8.quantize_attention_inputs(q, k, v, granularity=granularity)
    ds, rounded = fa3_descales(quant, 2, 2)
    for name in ("q_descale", "k_descale", "v_descale"):
        assert ds[name].shape == (2, 2) and ds[name].dtype == np.float32
        want = np.broadcast_to(quant[name], (2, 2))
        assert np.allclose(ds[name].astype(np.float64), want, rtol=2.0 ** -24, atol=0.0)
    assert 0.0 <= rounded <= 2.0 ** -24
    with pytest.raises(ValueError, match="shape"):
        fa3_descales({**quant, "q_descale": np.ones((2, 4))}, 2, 2)
    exact, rounded = fa3_descales({"q_descale": np.full((2, 2), 0.5), "k_descale": np.float64(2.0),
                                   "v_descale": np.full((2, 2), 1.0 + 2.0 ** -40)}, 2, 2)
    assert exact["k_descale"].tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert rounded == pytest.approx(2.0 ** -40)


# -- the adapters' call paths, against stand-ins for the flash-attention modules ------------------------
# flash-attention needs CUDA, so these tests give the adapters small plain-torch modules with the same
# signatures and the documented flash-attn semantics (bottom-right causal, windows around the aligned
# diagonal, softcap, GQA, varlen packing, LSE conventions +inf (FA2) / -inf (FA3, FA4)). They check the
# adapter's translation - layouts, packing, windows, descales, LSE handling - against the FP64 oracle;
# the kernels themselves are judged on the GPU.

def _core(q, k, v, scale, causal, window, softcap, unbounded, empty_lse, descales=None):
    """Attention on [B, L, H, D] tensors with flash-attn's semantics; returns (out [B, Lq, H, dv], lse)."""
    B, Lq, H, D = q.shape
    Lk, Hkv = k.shape[1], k.shape[2]
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))
    if descales is not None:  # FA3 FP8: O = softmax(scale dq dk Q8 K8^T) (dv V8), descales (B, Hkv)
        g = H // Hkv
        qf = qf * descales["q_descale"].repeat_interleave(g, 1)[:, :, None, None]
        kf = kf * descales["k_descale"][:, :, None, None]
        vf = vf * descales["v_descale"][:, :, None, None]
    kf, vf = kf.repeat_interleave(H // Hkv, 1), vf.repeat_interleave(H // Hkv, 1)
    scale = D ** -0.5 if scale is None else scale
    s = qf @ kf.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    left, right = window
    if causal:
        right = 0
    i = torch.arange(Lq)[:, None] + (Lk - Lq)
    j = torch.arange(Lk)[None, :]
    keep = torch.ones(Lq, Lk, dtype=torch.bool)
    if right is not None and right != unbounded:
        keep &= j <= i + right
    if left is not None and left != unbounded:
        keep &= j >= i - left
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    empty = torch.isneginf(lse)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(lse), lse)[..., None])
    out = (p @ vf).transpose(1, 2)
    out_dtype = torch.bfloat16 if descales is not None else q.dtype
    return out.to(out_dtype), torch.where(empty, torch.full_like(lse, empty_lse), lse)


def _varlen(q, k, v, cu_q, cu_k, run):
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        o, lse = run(q[None, qs], k[None, ks], v[None, ks])
        outs.append(o[0])
        lses.append(lse[0])
    return torch.cat(outs, 0), torch.cat(lses, 1)  # out [total, H, dv], lse (H, total)


def _fake_fa2():
    mod = types.ModuleType("fake_flash_attn")
    mod.__version__ = "2.8.3"

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
        out, lse = _core(q, k, v, softmax_scale, causal, window_size, softcap, -1, float("inf"))
        return (out, lse, None) if return_attn_probs else out

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                               alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None):
        assert cu_seqlens_q.dtype == torch.int32 and max_seqlen_q == int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
        out, lse = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, lambda a, b, c: _core(
            a, b, c, softmax_scale, causal, window_size, softcap, -1, float("inf")))
        return (out, lse, None) if return_attn_probs else out

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                                softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
        outs, lses = [], []
        for b in range(q.shape[0]):
            n = int(cache_seqlens[b])
            o, lse = _core(q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n], softmax_scale, causal,
                           window_size, softcap, -1, float("inf"))
            outs.append(o)
            lses.append(lse)
        out, lse = torch.cat(outs), torch.cat(lses)
        return (out, lse) if return_softmax_lse else out

    mod.flash_attn_func = flash_attn_func
    mod.flash_attn_varlen_func = flash_attn_varlen_func
    mod.flash_attn_with_kvcache = flash_attn_with_kvcache
    return mod


def _fake_fa3():
    mod = types.ModuleType("fake_flash_attn_interface")

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                        v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                        pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
        ds = None
        if q.dtype == torch.float8_e4m3fn:
            ds = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
            assert all(d.shape == (q.shape[0], k.shape[2]) and d.dtype == torch.float32 for d in ds.values())
        out, lse = _core(q, k, v, softmax_scale, causal, window_size, softcap, -1, float("-inf"), ds)
        return (out, lse) if return_attn_probs else out

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                               seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                               k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                               num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                               return_attn_probs=False):
        out, lse = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, lambda a, b, c: _core(
            a, b, c, softmax_scale, causal, window_size, softcap, -1, float("-inf")))
        return (out, lse) if return_attn_probs else out

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                                cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                                q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                                window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                                scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                                return_softmax_lse=False):
        outs, lses = [], []
        for b in range(q.shape[0]):
            n = int(cache_seqlens[b])
            ds = None
            if q.dtype == torch.float8_e4m3fn:
                ds = dict(q_descale=q_descale[b:b + 1], k_descale=k_descale[b:b + 1], v_descale=v_descale[b:b + 1])
            o, lse = _core(q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n], softmax_scale, causal,
                           window_size, softcap, -1, float("-inf"), ds)
            outs.append(o)
            lses.append(lse)
        out, lse = torch.cat(outs), torch.cat(lses)
        return (out, lse) if return_softmax_lse else out

    mod.flash_attn_func = flash_attn_func
    mod.flash_attn_varlen_func = flash_attn_varlen_func
    mod.flash_attn_with_kvcache = flash_attn_with_kvcache
    return mod


def _fake_fa4():
    mod = types.ModuleType("fake_flash_attn_cute")

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(None, None), learnable_sink=None,
                        softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, return_lse=False):
        assert all(w is None or w >= 0 for w in window_size), f"FA4 windows use None, got {window_size}"
        out, lse = _core(q, k, v, softmax_scale, causal, window_size, softcap, None, float("-inf"))
        return out, (lse if return_lse else None)

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                               seqused_q=None, seqused_k=None, page_table=None, softmax_scale=None, causal=False,
                               window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1,
                               pack_gqa=None, deterministic=False, return_lse=False):
        out, lse = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, lambda a, b, c: _core(
            a, b, c, softmax_scale, causal, window_size, softcap, None, float("-inf")))
        return out, (lse if return_lse else None)

    mod.flash_attn_func = flash_attn_func
    mod.flash_attn_varlen_func = flash_attn_varlen_func
    return mod


FA_CASES = [
    Case("t", 2, 4, 2, 9, 5, 16, 16, dtype="float16", causal=True),  # Lq > Lk: empty rows
    Case("t", 2, 4, 1, 3, 70, 16, 16, dtype="bfloat16", window=(5, 2)),  # decoding-sized: with_kvcache (FA2)
    Case("t", 2, 2, 2, 6, 9, 16, 16, dtype="float16", softcap=3.0, layout="bshd"),
    Case("t", 3, 2, 2, 6, 9, 16, 16, dtype="float16", seqlens_q=(4, 6, 0), seqlens_k=(9, 3, 5), causal=True),
    Case("t", 3, 4, 2, 2, 40, 16, 16, dtype="bfloat16", seqlens_k=(40, 1, 17), causal=True),  # KV-cache decode
    # square: top-left == bottom-right
    Case("t", 3, 2, 1, 7, 7, 16, 16, dtype="bfloat16", layout="kv_broadcast", causal=True, alignment="top_left"),
]


@pytest.mark.parametrize("cls,fake", [(FlashAttn2, _fake_fa2), (FlashAttn3, _fake_fa3), (FlashAttn4, _fake_fa4)],
                         ids=["fa2", "fa3", "fa4"])
@pytest.mark.parametrize("case", FA_CASES, ids=lambda c: c.id)
def test_flash_attn_call_paths_against_stand_in_modules(cls, fake, case):
    adapter = cls()
    adapter._module = fake()
    inputs = make_inputs(case)
    want_out, want_lse = reference(case, inputs)
    fo = adapter.forward(inputs, case, "cpu")
    rows = real_rows(case)
    assert np.abs(fo.out - want_out)[rows].max() <= BOUND[case.dtype]
    lse_rows = rows & np.isfinite(want_lse)
    assert np.abs(fo.lse[lse_rows] - want_lse[lse_rows]).max() <= 1e-5
    empty = rows & np.isneginf(want_lse)
    if empty.any():  # FA2 keeps its +inf (the engine names it), FA3/FA4 write -inf
        assert np.all(fo.lse[empty] == (np.inf if cls is FlashAttn2 else -np.inf))
        assert fo.lse_convention == ("+inf" if cls is FlashAttn2 else "-inf")
    entry = fo.notes[0]
    if cls is not FlashAttn4 and case.Lq <= 4 and case.seqlens_q is None:
        assert entry.endswith("flash_attn_with_kvcache")
    elif case.varlen:
        assert "varlen" in entry
    assert fo.mutated_inputs == ()


@pytest.mark.backward
@pytest.mark.parametrize("cls,fake", [(FlashAttn2, _fake_fa2), (FlashAttn4, _fake_fa4)], ids=["fa2", "fa4"])
def test_flash_attn_backward_path_against_stand_in_modules(cls, fake):
    case = Case("t", 2, 2, 2, 6, 9, 16, 16, dtype="float16", seqlens_q=(4, 6), seqlens_k=(9, 3), causal=True,
                backward=True)
    adapter = cls()
    adapter._module = fake()
    inputs = make_inputs(case)
    want = oracles.attention_backward(inputs.q, inputs.k, inputs.v, inputs.dout, **case.oracle_kwargs)
    bo = adapter.backward(inputs, case, "cpu")
    rows = real_rows(case)[..., None]
    assert np.abs(np.where(rows, bo.dq - want[0], 0)).max() < 1e-2
    assert np.abs(bo.dk - want[1]).max() < 1e-2 and np.abs(bo.dv - want[2]).max() < 1e-2


@pytest.mark.fp8
def test_fa3_fp8_path_hands_codes_and_float32_descales():
    case = Case("t", 2, 4, 2, 16, 24, 32, 32, dtype="float8_e4m3fn", fp8=FP8Spec(granularity="per_head"))
    adapter = FlashAttn3()
    adapter._module = _fake_fa3()
    inputs = make_inputs(case)
    t = adapter._tensors(inputs, case, "cpu", False)
    assert t.q.dtype == torch.float8_e4m3fn and np.array_equal(t.q.double().numpy(), inputs.fp8["q8"])
    fo = adapter.forward(inputs, case, "cpu")
    assert fo.out_dtype == "bfloat16"
    want, _ = reference(case, inputs)
    assert np.abs(fo.out - want).max() < 0.05  # bf16 output of an exact-in-float32 stand-in


# -- entry points (NAME@ENTRY): each spelling on the cases it can express ------------------------------
def _gather_pages(cache, table_row, n, page_size):
    """The first ceil(n / page_size) pages of one table row, whole (a TMA-style read: tail slots too)."""
    used = -(-n // page_size)
    if used == 0:
        return cache[:0].reshape(0, *cache.shape[2:])
    return cache[table_row[:used].long()].reshape(used * page_size, *cache.shape[2:])


def _padded_core(q, k, v, seqused_q, seqused_k, page_table, run, empty_lse):
    """Per-batch attention on padded [B, L, H, D] inputs or a paged cache; rows past seqused_q are NaN (their
    output is unspecified), keys are read page-wise *including* the tail slots of the last page and masked
    after the scores, as FA4 documents for TMA page loads (0 x NaN = NaN if a tail slot holds NaN)."""
    B, Lq, H, _ = q.shape
    out = torch.full((B, Lq, H, v.shape[-1]), float("nan"), dtype=q.dtype)
    lse = torch.full((B, H, Lq), empty_lse)
    for b in range(B):
        nq = Lq if seqused_q is None else int(seqused_q[b])
        nk = (k.shape[1] if page_table is None else page_table.shape[1] * k.shape[1]) if seqused_k is None \
            else int(seqused_k[b])
        if page_table is not None:
            kb = _gather_pages(k, page_table[b], nk, k.shape[1])[None]
            vb = _gather_pages(v, page_table[b], nk, v.shape[1])[None]
        else:
            kb, vb = k[b:b + 1], v[b:b + 1]
        o, ls = run(q[b:b + 1, :nq], kb, vb, nk)
        out[b, :nq], lse[b, :, :nq] = o[0], ls[0]
    return out, lse


def _masked_tail_core(softmax_scale, causal, window, softcap, unbounded, empty_lse):
    def run(q, k, v, n):
        # scores over every loaded slot, slots >= n masked; P = 0 there, but P @ V still multiplies their V
        qf, kf, vf = (x.float() for x in (q, k, v))
        o_ref, lse = _core(q, k[:, :n], v[:, :n], softmax_scale, causal, window, softcap, unbounded, empty_lse)
        tail = vf[:, n:].sum(dim=1, keepdim=True).transpose(0, 1)  # NaN there poisons every row, like 0 x NaN
        return (o_ref.float() + 0.0 * tail.sum()).to(q.dtype), lse
    return run


def _fake_fa4_full():
    mod = _fake_fa4()
    packed = mod.flash_attn_varlen_func

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                               seqused_q=None, seqused_k=None, page_table=None, softmax_scale=None, causal=False,
                               window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1,
                               pack_gqa=None, deterministic=False, return_lse=False):
        if cu_seqlens_q is not None:
            assert page_table is None and seqused_q is None
            return packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=softmax_scale,
                          causal=causal, window_size=window_size, softcap=softcap, return_lse=return_lse)
        assert cu_seqlens_k is None, "FA4: page_table / padded q take no cu_seqlens_k here"
        if page_table is not None:
            assert page_table.dtype == torch.int32 and page_table.shape[0] == q.shape[0]
            assert k.dim() == 4 and k.is_contiguous(), "FA4 paged caches are [num_pages, page_size, Hkv, d]"
        run = _masked_tail_core(softmax_scale, causal, window_size, softcap, None, float("-inf"))
        out, lse = _padded_core(q, k, v, seqused_q, seqused_k, page_table, run, float("-inf"))
        return out, (lse if return_lse else None)

    mod.flash_attn_varlen_func = flash_attn_varlen_func
    return mod


def _claims(adapter, case):
    """`supports` on a CUDA device, for an adapter whose module is a CPU stand-in."""
    adapter.unavailable_reason = lambda device: None
    return adapter.supports(case, "cuda")


PAGED = Case("t", 3, 4, 2, 3, 150, 16, 16, dtype="float16", seqlens_k=(150, 70, 1), causal=True, layout="paged64")
VARLEN = Case("t", 3, 2, 2, 6, 9, 16, 16, dtype="float16", seqlens_q=(4, 6, 0), seqlens_k=(9, 3, 5), causal=True)
DENSE = Case("t", 2, 4, 2, 9, 12, 16, 32, dtype="bfloat16", window=(4, 1), layout="bshd")
DENSE_BWD = Case("t", 2, 4, 2, 9, 12, 16, 16, dtype="float16", causal=True, backward=True)
NO_PAGES = "cannot express this case: paged K/V layout paged64"


@pytest.mark.parametrize("entry,case,declines", [
    ("func", DENSE, None), ("func", VARLEN, "cannot express this case: varlen / padded sequences not supported"),
    ("func", PAGED, "cannot express this case: varlen"),  # its seqlens_k first, then its pages
    ("varlen_func", DENSE, None), ("varlen_func", VARLEN, None), ("varlen_func", PAGED, NO_PAGES),
    ("seqused", DENSE, None), ("seqused", VARLEN, None), ("seqused", PAGED, NO_PAGES),
    ("paged", PAGED, None), ("paged", DENSE, "input layout bshd not supported"),
    (None, PAGED.replace(backward=True), "paged K/V is forward only"),  # FA4 itself (Capabilities.excludes)
    (None, PAGED.replace(d=40, dv=40), "multiples of 16"),
    (None, DENSE_BWD.replace(dv=32), "head_dim == head_dim_v"),
    (None, DENSE.replace(d=12, dv=12), "not in declared head dims"),
    ("deterministic", DENSE, None),
], ids=lambda x: x if isinstance(x, str) or x is None else x.id if isinstance(x, Case) else str(x))
def test_fa4_entry_points_express_their_cases_and_decline_the_rest(entry, case, declines):
    adapter = FlashAttn4(entry)
    adapter._module = _fake_fa4_full()
    assert adapter.name == ("flash-attn-4" if entry is None else f"flash-attn-4@{entry}")
    reason = _claims(adapter, case)
    if declines:
        assert reason is not None and declines in reason, reason
        if entry is not None:  # a decline of the spelling names it and its call (FA4_SPELLINGS)
            assert reason.startswith(f"flash-attn-4@{entry} ("), reason
        return
    assert reason is None, reason
    if case.backward:
        return
    inputs = make_inputs(case)
    want_out, want_lse = reference(case, inputs)
    fo = adapter.forward(inputs, case, "cpu")
    rows = real_rows(case)
    assert np.abs(fo.out - want_out)[rows].max() <= BOUND[case.dtype], fo.notes
    lse_rows = rows & np.isfinite(want_lse)
    assert np.abs(fo.lse[lse_rows] - want_lse[lse_rows]).max() <= 1e-5
    spelled = {"func": "flash_attn_func", "varlen_func": "cu_seqlens_q", "seqused": "seqused_q",
               "paged": "page_table", "deterministic": "flash_attn_func", None: ""}[entry]
    assert spelled in fo.notes[0]
    assert fo.mutated_inputs == ()


def test_fa4_paged_call_writes_only_the_documented_tail_and_reports_pool_mutations():
    """The tail slots of each last, partially used page are the ones FA4 reads (its documented precondition):
    the adapter makes them finite, so the stand-in (which reads them like TMA does) is exact; every other
    NaN (decoy pages, unused table entries) stays, and the pools are in the mutation check."""
    adapter = FlashAttn4("paged")
    adapter._module = _fake_fa4_full()
    inputs = make_inputs(PAGED)
    fo = adapter.forward(inputs, PAGED, "cpu")
    want, _ = reference(PAGED, inputs)
    assert np.abs(fo.out - want).max() <= BOUND["float16"]
    assert any("slot(s) past seqused_k" in n for n in fo.notes), fo.notes
    assert set(adapter._paged) == {"paged.k_pool", "paged.v_pool", "paged.block_table"}
    assert torch.isnan(adapter._paged["paged.v_pool"]).any()  # decoy pages keep their NaN
    # without the adapter's zeroing the stand-in gives NaN: the precondition is real in the stand-in
    adapter._finite_tail = lambda k, v, table, lens, ps: (k, v)
    assert np.isnan(adapter.forward(inputs, PAGED, "cpu").out).any()


def test_fa4_version_comes_from_distribution_metadata(monkeypatch):
    import importlib.metadata as md

    adapter = FlashAttn4()
    monkeypatch.setattr(md, "version", lambda name: "4.0.0b36" if name == "flash-attn-4" else "0.0.0")
    assert adapter.version() == "4.0.0b36"


def test_unknown_entry_point_is_refused_with_the_list():
    with pytest.raises(ValueError, match="func, varlen_func|'func', 'varlen_func'"):
        FlashAttn4("nope")


@pytest.mark.parametrize("cls,fake,kw", [(FlashAttn2, _fake_fa2, "block_table"), (FlashAttn3, _fake_fa3, "page_table")],
                         ids=["fa2", "fa3"])
def test_fa23_with_kvcache_paged_spelling(cls, fake, kw):
    mod = fake()
    dense = mod.flash_attn_with_kvcache

    def with_kvcache(q, k_cache, v_cache, cache_seqlens=None, **kwargs):
        table = kwargs.pop(kw, None)
        assert table is not None and table.dtype == torch.int32
        page = k_cache.shape[1]
        ks = torch.stack([_gather_pages(k_cache, table[b], table.shape[1] * page, page) for b in range(q.shape[0])])
        vs = torch.stack([_gather_pages(v_cache, table[b], table.shape[1] * page, page) for b in range(q.shape[0])])
        return dense(q, ks, vs, cache_seqlens=cache_seqlens, **kwargs)

    mod.flash_attn_with_kvcache = with_kvcache
    case = PAGED.replace(layout="paged256", Lk=300, seqlens_k=(300, 70, 1))
    adapter = cls("with_kvcache_paged")
    adapter._module = mod
    assert _claims(adapter, case) is None
    inputs = make_inputs(case)
    fo = adapter.forward(inputs, case, "cpu")
    want, _ = reference(case, inputs)
    assert np.abs(fo.out - want).max() <= BOUND["float16"]
    assert fo.notes[0].endswith("flash_attn_with_kvcache")
    if cls is FlashAttn2:  # FA2's block_table takes pages of a multiple of 256 keys
        assert "declared paged layouts: ['paged256']" in _claims(cls("with_kvcache_paged"), PAGED)
    assert "forward only" in _claims(cls("with_kvcache"), DENSE_BWD)
    assert "(declared paged layouts: none)" in _claims(cls("with_kvcache"), PAGED.replace(
        layout="paged256", Lk=300, seqlens_k=(300, 70, 1)))
    assert "seqlens_q" in _claims(cls("with_kvcache"), VARLEN)  # cache_seqlens: key lengths only


def test_fa4_declares_bitwise_determinism_only_in_its_deterministic_spelling():
    """Only ``flash-attn-4@deterministic`` passes ``deterministic=True`` to FA4, so only it may claim it."""
    calls = []
    mod = _fake_fa4_full()
    plain = mod.flash_attn_func

    def spy(*args, **kw):
        calls.append(kw.get("deterministic", False))
        return plain(*args, **kw)

    mod.flash_attn_func = spy
    for entry, claimed in ((None, False), ("func", False), ("deterministic", True)):
        adapter = FlashAttn4(entry)
        adapter._module = mod
        assert adapter.capabilities.deterministic is claimed
        adapter.forward(make_inputs(DENSE), DENSE, "cpu")
        assert calls[-1] is claimed
    assert FlashAttn4.capabilities.deterministic is False  # the class's claims are not changed by an instance


def test_fa4_notes_a_kernel_record_without_its_sm90_kernel(monkeypatch):
    """On CUDA the record must show FA4's sm90 forward kernel; a record of other kernels only gets a note."""
    from attention_conformance.adapters import _torch_common as tc

    class Recorder(tc.KernelRecorder):
        def __exit__(self, *exc):
            self.names = ("void at::native::elementwise_kernel<...>",)

    monkeypatch.setattr(tc, "KernelRecorder", Recorder)
    adapter = FlashAttn4()
    adapter._module = _fake_fa4_full()
    fo = adapter.forward(make_inputs(DENSE), DENSE, "cpu")
    assert any("FlashAttentionForwardSm90" in n for n in fo.notes), fo.notes
    Recorder.__exit__ = lambda self, *exc: setattr(self, "names", ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90"
                                                                   "FlashAttentionForwardSm90_object_at_",))
    fo = adapter.forward(make_inputs(DENSE), DENSE, "cpu")
    assert not any("none of the captured" in n for n in fo.notes), fo.notes
