"""Python side of the FA1 forward/backward, FA2 and FA3 backward launchers (kernels/cuda/fa1.cu, fa2_bwd.cu,
fa3_bwd.cu).

Thin helpers over `kernels.cuda_lib` (which owns the ctypes mirror and the library loader) that
allocate outputs and the scratch buffers the backward launchers need (attn_params.h):

- ``dq_accum`` fp32 [B, Hq, Lq, d]: zeroed by the launcher's preprocess kernel, so ``torch.empty``;
- ``d_rowsum`` fp32 [B, Hq, Lq]: D = rowsum(dO * O), written by the preprocess kernel;
- ``dk_accum`` fp32 [B, Hq, Lk, d] / ``dv_accum`` fp32 [B, Hq, Lk, dv]: only for GQA (Hq != Hkv), fully overwritten
  by the main kernel and summed over each query-head group into dk / dv.

Semantics (mask, alignment, window, varlen, fully masked rows) are oracles/SEMANTICS.md's; the
keyword arguments are `kernels.cuda_lib.fwd_params`'s. ``bwd_params`` is `kernels.cuda_lib.bwd_params`,
re-exported here for the callers of this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attention_conformance.kernels import cuda_lib
from attention_conformance.kernels.cuda_lib import bwd_params  # re-exported: the one builder of `AttnBwdParams`

__all__ = ["BWD_LAUNCHERS", "backward", "bwd_params", "bwd_scratch", "fa1_forward"]

BWD_LAUNCHERS = ("attn_fa1_bwd", "attn_fa2_bwd", "attn_fa3_bwd", "attn_fa3_bwd_deterministic")


def bwd_scratch(q: Any, k: Any, v: Any = None) -> dict[str, Any]:
    """The scratch tensors `backward` passes for q [B, Hq, Lq, d], k [B, Hkv, Lk, d] and v [B, Hkv, Lk, dv] (None:
    dv = d) (see module doc)."""
    import torch

    B, Hq, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    dv = d if v is None else v.shape[-1]
    f32 = dict(dtype=torch.float32, device=q.device)
    out = {"dq_accum": torch.empty(B, Hq, Lq, d, **f32), "d_rowsum": torch.empty(B, Hq, Lq, **f32)}
    if Hq != Hkv:
        out["dk_accum"] = torch.empty(B, Hq, Lk, d, **f32)
        out["dv_accum"] = torch.empty(B, Hq, Lk, dv, **f32)
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
    launcher: str, q: Any, k: Any, v: Any, o: Any, lse: Any, dout: Any, *,
    call: Callable[[str, Any], None] | None = None, **fwd_kwargs: Any
) -> tuple[Any, Any, Any]:
    """Run ``launcher`` (one of `BWD_LAUNCHERS`); returns (dq, dk, dv) in q's dtype.

    ``o`` and ``lse`` are the forward's outputs (LSE natural log, -inf on fully masked rows). ``call(launcher,
    params)`` makes the call (default `cuda_lib.call`; a lab build's named variant, e.g.
    ``kernels.cuda.lab.call_fa3_bwd``, takes the same params).
    """
    import torch

    if launcher not in BWD_LAUNCHERS:
        raise ValueError(f"launcher={launcher!r}: expected one of {BWD_LAUNCHERS}")
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    params = bwd_params(q, k, v, o, lse, dout, dq, dk, dv, **bwd_scratch(q, k, v), **fwd_kwargs)
    (call or cuda_lib.call)(launcher, params)
    return dq, dk, dv

