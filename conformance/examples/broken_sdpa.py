"""A deliberately broken SDPA-signature function: a tail-tile bug of the kind real kernels have had.

It streams the keys in tiles of ``TILE = 64`` with the online softmax (running max m, sum l and
output o, rescaled by alpha = exp(m_old - m_new): FA2-style, [FA-anim] online softmax), exactly as a
tiled kernel does, and computes the number of key tiles with an off-by-one ceiling division::

    n_tiles = (Lk + TILE - 2) // TILE        # should be (Lk + TILE - 1) // TILE

which equals the right count except when ``Lk % 64 == 1``: then the last tile - a single key - is
never visited (Lk = 1, 65, 129, 257 ...). Rows then miss one key of the softmax, and with Lk = 1 a
row sees no key at all and returns 0. Everything else (masks, GQA, scale, causal, fully masked rows,
backward through autograd) is correct, so only tile-edge lengths expose it: the harness must find
it and print a repro. Used by ``python -m attention_conformance run --impl
attention_conformance.examples.broken_sdpa:attention``.
"""

from __future__ import annotations

import math

import torch

from attention_conformance.examples.good_sdpa import _expand_kv, masked_scores

__all__ = ["TILE", "attention", "n_key_tiles"]

TILE = 64


def n_key_tiles(Lk: int) -> int:
    """The buggy tile count (see the module docstring)."""
    return (Lk + TILE - 2) // TILE


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Tiled online-softmax attention with the tail-tile bug of the module docstring."""
    if dropout_p:
        raise NotImplementedError("this example implements dropout_p=0 only")
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = masked_scores(q, k, attn_mask, is_causal, scale, enable_gqa, acc)
    vv = _expand_kv(v, q.shape[-3]).to(acc)
    shape = s.shape[:-1] + (1,)
    m = torch.full(shape, -math.inf, dtype=acc, device=q.device)
    l = torch.zeros(shape, dtype=acc, device=q.device)
    o = torch.zeros(s.shape[:-1] + (v.shape[-1],), dtype=acc, device=q.device)
    for t in range(n_key_tiles(s.shape[-1])):
        blk = s[..., t * TILE:(t + 1) * TILE]
        m_new = torch.maximum(m, blk.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - safe)  # exp(-inf) = 0 on the first visible tile
        p = torch.exp(blk - safe)
        l = alpha * l + p.sum(dim=-1, keepdim=True)
        o = alpha * o + torch.matmul(p, vv[..., t * TILE:(t + 1) * TILE, :])
        m = m_new
    out = o / torch.where(l == 0, torch.ones_like(l), l)
    return out.to(q.dtype)
