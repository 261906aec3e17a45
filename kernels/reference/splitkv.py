"""Split-KV (Flash-Decoding) at tile granularity in NumPy: per-split partials, then the combine step.

The K/V tiles of length ``block_k`` are dealt to ``num_splits`` splits in contiguous runs of
ceil(n_tiles / num_splits) tiles (trailing splits may be empty). Each split runs the FA2 loop over
its own tiles and stores a float32 partial O_s normalised by its own row sum, and LSE_s
(-inf, with O_s = 0, where the split sees no key). The combine (oracles/SEMANTICS.md, split-KV partials):

    M = max_s LSE_s,   LSE = M + log sum_s exp(LSE_s - M),   O = sum_s exp(LSE_s - LSE) O_s

with all-empty rows giving O = 0, LSE = -inf; an empty split (LSE_s = -inf) is selected out, not
multiplied (§14). Precision emulation: kernels/emulate.py.
"""

from __future__ import annotations

import numpy as np

from kernels import emulate
from kernels.reference._common import Problem, tiles

__all__ = ["combine", "forward", "forward_partials", "split_ranges"]


def split_ranges(Lk: int, block_k: int, num_splits: int) -> list[tuple[int, int]]:
    """Key ranges [start, stop) of each split: contiguous runs of whole K/V tiles; empty ranges allowed."""
    if num_splits < 1:
        raise ValueError(f"num_splits={num_splits} must be >= 1")
    n_tiles = len(tiles(Lk, block_k))
    per_split = -(-n_tiles // num_splits)
    ranges = []
    for s in range(num_splits):
        start = min(s * per_split * block_k, Lk)
        stop = min((s + 1) * per_split * block_k, Lk)
        ranges.append((start, stop))
    return ranges


def forward_partials(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None,
                     bias=None, softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64,
                     dtype="bfloat16", num_splits=2):
    """Per-split partials: (outs [S, B, Hq, Lq, dv] float32/float64, lses [S, B, Hq, Lq])."""
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype)
    kv_head = np.arange(p.Hq) // p.group
    K = p.k[:, kv_head]
    V = p.v[:, kv_head]
    ranges = split_ranges(p.Lk, block_k, num_splits)
    outs = np.zeros((len(ranges), p.B, p.Hq, p.Lq, p.dv), dtype=p.acc)
    lses = np.full((len(ranges), p.B, p.Hq, p.Lq), -np.inf, dtype=p.acc)
    with np.errstate(divide="ignore", invalid="ignore"):
        for split, (k0, k1) in enumerate(ranges):
            for r0, r1 in tiles(p.Lq, block_q):
                Qi = p.q[:, :, r0:r1]
                m = np.full((p.B, p.Hq, r1 - r0), -np.inf, dtype=p.acc)
                l = np.zeros((p.B, p.Hq, r1 - r0), dtype=p.acc)
                acc = np.zeros((p.B, p.Hq, r1 - r0, p.dv), dtype=p.acc)
                for c0 in range(k0, k1, block_k):
                    c1 = min(c0 + block_k, k1)
                    vis = p.visible(r0, r1, c0, c1)
                    if not vis.any():
                        continue
                    s = emulate.matmul(Qi, K[:, :, c0:c1].swapaxes(-1, -2), p.dtype)
                    s = s * p.scale
                    if p.softcap is not None:
                        s = p.softcap * np.tanh(s / p.softcap)
                    if p.bias is not None:
                        s = s + p.bias_tile(r0, r1, c0, c1)
                    s = np.where(vis, s, -np.inf)
                    m_new = np.maximum(m, s.max(axis=-1))
                    m_safe = np.where(m_new == -np.inf, 0.0, m_new).astype(p.acc)
                    P = np.exp(s - m_safe[..., None])
                    alpha = np.exp(m - m_safe)
                    l = alpha * l + P.sum(axis=-1)
                    acc = alpha[..., None] * acc
                    acc = acc + emulate.matmul(emulate.round_to(P, p.dtype), V[:, :, c0:c1], p.dtype)
                    m = m_new
                outs[split, :, :, r0:r1] = np.where(l[..., None] > 0, acc / l[..., None], 0.0)
                lses[split, :, :, r0:r1] = np.where(l > 0, m + np.log(l), -np.inf)
    return outs, lses


def combine(outs: np.ndarray, lses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge split partials (the FA3 combine kernel): returns (out [..., Lq, dv], lse [..., Lq])."""
    outs = np.asarray(outs)
    lses = np.asarray(lses)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse_max = lses.max(axis=0)
        lse_max_safe = np.where(lse_max == -np.inf, 0.0, lse_max).astype(lses.dtype)
        weight_sum = np.exp(lses - lse_max_safe).sum(axis=0)
        lse = np.where(weight_sum > 0, lse_max_safe + np.log(weight_sum), -np.inf).astype(lses.dtype)
        lse_safe = np.where(lse == -np.inf, 0.0, lse).astype(lses.dtype)
        scales = np.exp(lses - lse_safe)
        weighted = np.where(lses[..., None] == -np.inf, 0.0, scales[..., None] * outs)
        out = np.sum(weighted, axis=0)
    return out, lse


def forward(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None, bias=None,
            softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64, dtype="bfloat16", num_splits=2):
    """Split-KV forward: `forward_partials` then `combine`; out rounded to ``dtype``, lse float32/float64."""
    outs, lses = forward_partials(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window,
                                  mask=mask, bias=bias, softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                                  block_q=block_q, block_k=block_k, dtype=dtype, num_splits=num_splits)
    out, lse = combine(outs, lses)
    return emulate.round_to(out, dtype), lse
