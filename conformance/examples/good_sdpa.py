"""A correct attention function with torch SDPA's signature, in plain torch (the harness's "good" example).

``attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)``
on [B, H, L, D] tensors, following oracles/SEMANTICS.md: scale defaults to 1/sqrt(d) (§2); boolean
mask True = attend, float mask added to the scores (§6); ``is_causal`` is top-left (§4, torch's
convention); GQA maps query head h to kv head h // (Hq / Hkv) (§9); a row with no visible key
returns 0 (§8). Scores, softmax and the P.V product are computed in float32 for fp16/bf16 inputs
(float64 for float64 inputs) and the result is cast back to the input dtype. Differentiable
through autograd. Dense: ``P V`` runs over every key, so NaN planted at masked-out keys reaches the
output as 0 x NaN, which the harness reports as the named finding ``masked_nan`` (SEMANTICS.md §17).
"""

from __future__ import annotations

import math

import torch

__all__ = ["attention", "masked_scores"]


def masked_scores(q, k, attn_mask, is_causal: bool, scale: float | None, enable_gqa: bool, acc):
    """Scaled, biased, masked scores in dtype `acc`, K expanded to the query heads."""
    Hq, Hkv = q.shape[-3], k.shape[-3]
    if Hq != Hkv:
        if not enable_gqa:
            raise ValueError(f"q has {Hq} heads and k has {Hkv}; pass enable_gqa=True for GQA/MQA")
        if Hq % Hkv:
            raise ValueError(f"Hq={Hq} is not a multiple of Hkv={Hkv}")
        k = k.repeat_interleave(Hq // Hkv, dim=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.matmul(q.to(acc), k.to(acc).transpose(-1, -2)) * scale
    Lq, Lk = s.shape[-2], s.shape[-1]
    if is_causal:
        if attn_mask is not None:
            raise ValueError("pass either attn_mask or is_causal, not both (as torch SDPA)")
        keep = torch.ones(Lq, Lk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(~attn_mask, -math.inf)
        else:
            s = s + attn_mask.to(acc)
    return s


def _expand_kv(v, Hq: int):
    Hkv = v.shape[-3]
    return v if Hkv == Hq else v.repeat_interleave(Hq // Hkv, dim=-3)


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """softmax(scale * q k^T + mask) v with fully masked rows giving 0; see the module docstring."""
    if dropout_p:
        raise NotImplementedError("this example implements dropout_p=0 only")
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = masked_scores(q, k, attn_mask, is_causal, scale, enable_gqa, acc)
    m = s.amax(dim=-1, keepdim=True)
    empty = torch.isneginf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))  # exp(-inf) = 0 on empty rows
    denom = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(empty, torch.ones_like(denom), denom)
    out = torch.matmul(p, _expand_kv(v, q.shape[-3]).to(acc))
    return out.to(q.dtype)
