"""flash-attn-4's ``learnable_sink`` through the adapter, against a plain-torch stand-in (no GPU, no FA4).

The stand-in has FA4's sm90 signatures and its documented sink semantics (SEMANTICS.md §18): the sink
joins every row's softmax denominator, the returned LSE includes it (an empty row: O = 0, LSE = the sink),
and autograd returns the sink's gradient (FA4's ``FlashAttnFunc.backward`` returns ``dsink`` for
``learnable_sink``). The checks: the adapter claims sink and LSE-cotangent cases, hands a float32 (Hq,)
sink, reports an empty row's LSE = sink untranslated, returns d sinks in `BackwardOutput.dsinks` and feeds
``dlse`` to the LSE output, all against the FP64 oracle.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from adapter_helpers import BOUND, real_rows

from attention_conformance import oracles
from attention_conformance.adapters.flash_attn import FlashAttn4
from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import make_inputs

torch = pytest.importorskip("torch")

SEEN: dict = {}  # what the stand-in received in its last call


def _sink_core(q, k, v, scale, causal, window, softcap, sink, seqlen_k=None):
    """Bottom-right causal / window attention on [B, L, H, D] with an optional sink [H]; (out, lse [B, H, L])."""
    B, Lq, H, D = q.shape
    Lk, Hkv = k.shape[1], k.shape[2]
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))
    kf, vf = kf.repeat_interleave(H // Hkv, 1), vf.repeat_interleave(H // Hkv, 1)
    s = qf @ kf.transpose(-1, -2) * (D ** -0.5 if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    left, right = window
    if causal:
        right = 0
    i = torch.arange(Lq)[:, None] + (Lk - Lq)
    j = torch.arange(Lk)[None, :]
    keep = torch.ones(Lq, Lk, dtype=torch.bool)
    if right is not None:
        keep &= j <= i + right
    if left is not None:
        keep &= j >= i - left
    s = s.masked_fill(~keep, float("-inf"))
    if sink is not None:
        col = sink.float()[None, :, None, None].expand(B, H, Lq, 1)
        lse = torch.logsumexp(torch.cat([s, col], -1), -1)
    else:
        lse = torch.logsumexp(s, -1)
    safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    out = (torch.exp(s - safe[..., None]) @ vf).transpose(1, 2)
    return out.to(q.dtype), lse


def _fake_fa4():
    mod = types.ModuleType("fake_flash_attn_cute_sinks")

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(None, None), learnable_sink=None,
                        softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, return_lse=False):
        if learnable_sink is not None:  # the interface's own asserts (flash_attn/cute/interface.py)
            assert learnable_sink.shape == (q.shape[2],)
            assert learnable_sink.dtype in (torch.float16, torch.bfloat16, torch.float32)
        SEEN["learnable_sink"] = learnable_sink
        out, lse = _sink_core(q, k, v, softmax_scale, causal, window_size, softcap, learnable_sink)
        return out, (lse if return_lse else None)

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                               seqused_q=None, seqused_k=None, page_table=None, softmax_scale=None, causal=False,
                               window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1,
                               pack_gqa=None, deterministic=False, return_lse=False):
        SEEN["learnable_sink"] = learnable_sink
        outs, lses = [], []
        for b in range(len(cu_seqlens_q) - 1):
            qs = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
            ks = slice(int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1]))
            o, ls = _sink_core(q[None, qs], k[None, ks], v[None, ks], softmax_scale, causal, window_size, softcap,
                               learnable_sink)
            outs.append(o[0])
            lses.append(ls[0])
        out, lse = torch.cat(outs, 0), torch.cat(lses, 1)  # [total, H, dv], (H, total)
        return out, (lse if return_lse else None)

    mod.flash_attn_func = flash_attn_func
    mod.flash_attn_varlen_func = flash_attn_varlen_func
    return mod


def _adapter(entry=None):
    adapter = FlashAttn4(entry)
    adapter._module = _fake_fa4()
    adapter.unavailable_reason = lambda device: None  # `supports` as on a CUDA device
    return adapter


# causal Lq > Lk: rows 0..Lq-Lk-1 see no key (O = 0, LSE = sink); a large sink; varlen with an empty batch
SINK_FWD = [
    Case("t", 2, 4, 2, 9, 5, 16, 16, dtype="float16", causal=True, sinks="small"),
    Case("t", 1, 2, 1, 6, 6, 16, 16, dtype="bfloat16", causal=True, sinks="large"),
    Case("t", 2, 2, 2, 6, 9, 16, 16, dtype="float16", seqlens_q=(4, 6), seqlens_k=(9, 0), sinks="small"),
]


@pytest.mark.parametrize("case", SINK_FWD, ids=lambda c: c.id)
def test_fa4_forward_passes_learnable_sink_and_keeps_the_sink_lse_of_empty_rows(case):
    adapter = _adapter()
    assert adapter.supports(case, "cuda") is None
    inputs = make_inputs(case)
    want_out, want_lse = oracles.attention(inputs.q, inputs.k, inputs.v, sinks=inputs.sinks, **case.oracle_kwargs)
    fo = adapter.forward(inputs, case, "cpu")
    sink = SEEN["learnable_sink"]
    assert sink is not None and sink.dtype == torch.float32 and tuple(sink.shape) == (case.Hq,)
    assert np.array_equal(sink.detach().double().numpy(), inputs.sinks), "the case's sinks, exactly"
    rows = real_rows(case)
    assert np.abs(fo.out - want_out)[rows].max() <= BOUND[case.dtype]
    assert np.all(np.isfinite(fo.lse[rows])), "a sink makes every real row's LSE finite"
    assert np.abs(fo.lse - want_lse)[rows].max() <= 1e-4 * max(1.0, float(np.abs(inputs.sinks).max()))
    assert fo.lse_convention == "-inf" and not any("untranslated" in n for n in fo.notes), fo.notes
    assert fo.mutated_inputs == ()


def test_fa4_empty_row_lse_is_the_sink_not_minus_inf():
    case = SINK_FWD[0]
    inputs = make_inputs(case)
    fo = _adapter().forward(inputs, case, "cpu")
    n_empty = case.Lq - case.Lk  # bottom-right causal: rows 0 .. n_empty - 1 see no key
    assert n_empty > 0
    got = fo.lse[:, :, :n_empty]
    want = np.broadcast_to(inputs.sinks[None, :, None], got.shape)
    assert np.allclose(got, want, rtol=0, atol=1e-6), (got, want)
    assert np.all(fo.out[:, :, :n_empty] == 0.0)


SINK_BWD = [
    Case("t", 2, 4, 2, 7, 11, 16, 16, dtype="float16", causal=True, sinks="small", backward=True),
    Case("t", 2, 4, 2, 9, 5, 16, 16, dtype="float16", causal=True, sinks="small", backward=True, lse_grad=True),
    Case("t", 2, 2, 2, 6, 9, 16, 16, dtype="float16", seqlens_q=(4, 6), seqlens_k=(9, 3), causal=True,
         sinks="small", backward=True, lse_grad=True),
]


@pytest.mark.backward
@pytest.mark.parametrize("case", SINK_BWD, ids=lambda c: c.id)
def test_fa4_backward_returns_dsinks_and_takes_the_lse_cotangent(case):
    adapter = _adapter()
    assert adapter.supports(case, "cuda") is None
    inputs = make_inputs(case)
    assert (inputs.dlse is not None) == case.lse_grad
    dq, dk, dv, dsinks = oracles.attention_backward(inputs.q, inputs.k, inputs.v, inputs.dout, sinks=inputs.sinks,
                                                    dlse=inputs.dlse, **case.oracle_kwargs)
    bo = adapter.backward(inputs, case, "cpu")
    assert bo.dsinks is not None and bo.dsinks.shape == (case.Hq,)
    scale = max(1.0, float(np.abs(dsinks).max()))
    assert np.abs(bo.dsinks - dsinks).max() <= 2e-2 * scale, (bo.dsinks, dsinks)
    rows = real_rows(case)[..., None]
    assert np.abs(np.where(rows, bo.dq - dq, 0)).max() < 2e-2
    assert np.abs(bo.dk - dk).max() < 2e-2 and np.abs(bo.dv - dv).max() < 2e-2
    assert bo.mutated_inputs == ()


@pytest.mark.backward
def test_fa4_backward_without_the_lse_cotangent_differs_from_with_it():
    """The dlse term changes d sink (flash-attention #1973 class): the adapter must not drop the cotangent."""
    case = SINK_BWD[1]
    inputs = make_inputs(case)
    with_dlse = _adapter().backward(inputs, case, "cpu").dsinks
    no_dlse = _adapter().backward(inputs, case.replace(lse_grad=False), "cpu").dsinks
    assert np.abs(with_dlse - no_dlse).max() > 1e-2, (with_dlse, no_dlse)


def test_fa4_declines_a_sink_case_on_the_paged_backward_but_claims_the_paged_forward():
    paged = Case("t", 2, 4, 2, 3, 150, 16, 16, dtype="float16", seqlens_k=(150, 70), causal=True, layout="paged64",
                 sinks="small")
    assert _adapter().supports(paged, "cuda") is None
    reason = _adapter().supports(paged.replace(backward=True), "cuda")
    assert reason is not None and "page_table" in reason
