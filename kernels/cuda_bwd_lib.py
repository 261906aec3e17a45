"""Python side of the FA1 forward/backward and FA2 backward launchers (kernels/cuda/fa1.cu, fa2_bwd.cu).

Thin helpers over `kernels.cuda_lib` (which owns the ctypes mirror and the library loader) that
allocate outputs and the scratch buffers the backward launchers need (attn_params.h):

- ``dq_accum`` fp32 [B, Hq, Lq, d]: zeroed by the launcher's preprocess kernel, so ``torch.empty``;
- ``d_rowsum`` fp32 [B, Hq, Lq]: D = rowsum(dO * O), written by the preprocess kernel;
- ``dk_accum`` / ``dv_accum`` fp32 [B, Hq, Lk, d]: only for GQA (Hq != Hkv), fully overwritten by
  the main kernel and summed over each query-head group into dk / dv.

Semantics (mask, alignment, window, varlen, fully masked rows) are oracles/SEMANTICS.md's; the
keyword arguments are `kernels.cuda_lib.fwd_params`'s.
"""

from __future__ import annotations

from typing import Any

from kernels import cuda_lib

__all__ = ["BWD_LAUNCHERS", "backward", "bwd_params", "bwd_scratch", "fa1_forward"]

BWD_LAUNCHERS = ("attn_fa1_bwd", "attn_fa2_bwd")


def bwd_scratch(q: Any, k: Any) -> dict[str, Any]:
    """The scratch tensors `backward` passes for q [B, Hq, Lq, d] and k [B, Hkv, Lk, d] (see module doc)."""
    import torch

    B, Hq, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    f32 = dict(dtype=torch.float32, device=q.device)
    out = {"dq_accum": torch.empty(B, Hq, Lq, d, **f32), "d_rowsum": torch.empty(B, Hq, Lq, **f32)}
    if Hq != Hkv:
        out["dk_accum"] = torch.empty(B, Hq, Lk, d, **f32)
        out["dv_accum"] = torch.empty(B, Hq, Lk, d, **f32)
    return out


def fa1_forward(q: Any, k: Any, v: Any, **fwd_kwargs: Any) -> tuple[Any, Any]:
    """Run ``attn_fa1_fwd``; returns (o [B, Hq, Lq, d] in q's dtype, lse fp32 [B, Hq, Lq]).

    Padded varlen rows (i >= seqlens_q[b]) are left as allocated (``torch.empty``): the kernel does
    not write them (attn_params.h).
    """
    import torch

    B, Hq, Lq, _ = q.shape
    o = torch.empty(B, Hq, Lq, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Hq, Lq, dtype=torch.float32, device=q.device)
    cuda_lib.call("attn_fa1_fwd", cuda_lib.fwd_params(q, k, v, o, lse, **fwd_kwargs))
    return o, lse


def backward(
    launcher: str, q: Any, k: Any, v: Any, o: Any, lse: Any, dout: Any, **fwd_kwargs: Any
) -> tuple[Any, Any, Any]:
    """Run ``launcher`` ("attn_fa1_bwd" or "attn_fa2_bwd"); returns (dq, dk, dv) in q's dtype.

    ``o`` and ``lse`` are the forward's outputs (LSE natural log, -inf on fully masked rows).
    """
    import torch

    if launcher not in BWD_LAUNCHERS:
        raise ValueError(f"launcher={launcher!r}: expected one of {BWD_LAUNCHERS}")
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    params = bwd_params(q, k, v, o, lse, dout, dq, dk, dv, **bwd_scratch(q, k), **fwd_kwargs)
    cuda_lib.call(launcher, params)
    return dq, dk, dv


def bwd_params(
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    lse: Any,
    dout: Any,
    dq: Any,
    dk: Any,
    dv: Any,
    *,
    dq_accum: Any = None,
    d_rowsum: Any = None,
    dk_accum: Any = None,
    dv_accum: Any = None,
    **fwd_kwargs: Any,
) -> cuda_lib.AttnBwdParams:
    """`cuda_lib.AttnBwdParams` for the given tensors; keeps every referenced tensor alive in ``_keep``.

    (Assigning a ctypes struct to a field copies it, so the forward half's ``_keep`` list is kept
    on the outer struct here.)
    """
    fwd = cuda_lib.fwd_params(q, k, v, o, lse, **fwd_kwargs)
    p = cuda_lib.AttnBwdParams()
    p.fwd = fwd
    p.dout, p.dq, p.dk, p.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    p.do_batch_stride, p.do_head_stride, p.do_row_stride = dout.stride(0), dout.stride(1), dout.stride(2)
    p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride = dq.stride(0), dq.stride(1), dq.stride(2)
    p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride = dk.stride(0), dk.stride(1), dk.stride(2)
    p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride = dv.stride(0), dv.stride(1), dv.stride(2)
    ptr = lambda t: None if t is None else t.data_ptr()
    p.dq_accum, p.d_rowsum, p.dk_accum, p.dv_accum = ptr(dq_accum), ptr(d_rowsum), ptr(dk_accum), ptr(dv_accum)
    p._keep = list(fwd._keep) + [dout, dq, dk, dv, dq_accum, d_rowsum, dk_accum, dv_accum]
    return p
