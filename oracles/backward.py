"""Analytic FP64 attention backward, one query block at a time (SEMANTICS.md §13).

Per (batch, query head, block of query rows) the scores are recomputed over the block's reachable
keys (`oracles.masking.key_range`, `oracles.scores`), P is
rebuilt exactly as in the forward pass (§12), and

    dP = dout V^T,  D = rowsum(dout * out),  dS = P * (dP - D),  dR = dS * (1 - tanh^2) [softcap]
    dq = scale * dR K,   dk += scale * dR^T q,   dv += P^T dout

with dk, dv summed over the query heads of each kv head (GQA, §9). Fully masked and padded rows
have P = 0, hence dq = 0 and no contribution (§7, §8).
"""

from __future__ import annotations

import numpy as np

from .forward import softmax_block
from .masking import key_range
from .scores import row_blocks, score_block
from .validate import validate

__all__ = ["attention_backward"]


def attention_backward(
    q,
    k,
    v,
    dout,
    *,
    scale=None,
    causal=False,
    alignment="bottom_right",
    window=None,
    mask=None,
    bias=None,
    softcap=None,
    seqlens_q=None,
    seqlens_k=None,
    allow_nonfinite=False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients ``(dq, dk, dv)`` of ``sum(out * dout)`` for `oracles.attention` with the same keywords.

    Shapes: dq like q, dk like k, dv like v, all float64 (§13). ``scale``, ``mask`` and ``bias``
    are constants. Validation as in §15 (dout must be [B, Hq, Lq, dv]). Memory: a few
    [rows x Lk] blocks (scores/P and dP) at a time per (batch, head).
    """
    p = validate(
        q, k, v, dout, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
        softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, allow_nonfinite=allow_nonfinite,
    )
    dq = np.zeros(p.q.shape)
    dk = np.zeros(p.k.shape)
    dv = np.zeros(p.v.shape)
    for b in range(p.B):
        sq, sk = int(p.seqlens_q[b]), int(p.seqlens_k[b])
        if sq == 0 or sk == 0:
            continue
        blocks = row_blocks(sq, sk, budget=None)
        for h in range(p.Hq):
            hk = h // p.group
            qb = p.q[b, h, :sq]
            qs = qb * p.scale
            kh = p.k[b, hk]
            do = p.dout[b, h, :sq]
            for r0, r1 in blocks:
                lo, hi = key_range(r0, r1, sq=sq, sk=sk, causal=p.causal, alignment=p.alignment, window=p.window)
                if hi == lo:
                    continue  # fully masked rows: dq = 0, no contribution (§8)
                kb, vb = kh[lo:hi], p.v[b, hk, lo:hi]
                s, t = score_block(p, b, h, r0, r1, lo, hi, qs, kh, keep_tanh=True)
                w, _, l = softmax_block(s)
                empty = l == 0
                w /= np.where(empty, 1.0, l)[:, None]  # P, zero rows where fully masked (§8)
                dob = do[r0:r1]
                o = w @ vb
                dsum = np.einsum("ij,ij->i", dob, o)  # D = rowsum(dout * out)
                dp = dob @ vb.T
                dp -= dsum[:, None]
                dp *= w  # dS = P * (dP - D)
                if t is not None:
                    np.square(t, out=t)
                    np.subtract(1.0, t, out=t)
                    dp *= t  # dR = dS * (1 - tanh^2(r / c))
                dq[b, h, r0:r1] = p.scale * (dp @ kb)
                dk[b, hk, lo:hi] += p.scale * (dp.T @ qb[r0:r1])
                dv[b, hk, lo:hi] += w.T @ dob
    return dq, dk, dv
