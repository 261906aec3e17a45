"""Analytic FP64 attention backward, one query block at a time (SEMANTICS.md §13).

Per (batch, query head, block of query rows) the scores are recomputed over the block's reachable
keys (`oracles.masking.key_range`, `oracles.scores`), P is
rebuilt exactly as in the forward pass (§12), and

    dP = dout V^T,  D = rowsum(dout * out),  dS = P * (dP - D),  dR = dS * (1 - tanh^2) [softcap]
    dq = scale * dR K,   dk += scale * dR^T q,   dv += P^T dout

with dk, dv summed over the query heads of each kv head (GQA, §9). Fully masked and padded rows
have P = 0, hence dq = 0 and no contribution (§7, §8).

With an LSE cotangent ``dlse`` (the LSE is an output with a gradient) ``dS = P * (dP - D + dlse)``; with
sinks (§18) P is taken against the LSE that includes the sink, and the sink's gradient is

    dsink_h = sum_{b, i real rows} P_sink,i (dlse_i - D_i),   P_sink,i = exp(sink_h - LSE'_i)

(a fully masked row has P_sink = 1 and D = 0, so it adds its dlse_i).
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
    sinks=None,
    chunk=None,
    dlse=None,
) -> tuple[np.ndarray, ...]:
    """Gradients ``(dq, dk, dv)`` of ``sum(out * dout) + sum(lse * dlse)`` for `oracles.attention`.

    Same keywords as the forward; ``dlse`` [B, Hq, Lq] is the LSE's cotangent (``None`` = 0; entries of
    padded rows, and of rows whose LSE is -inf, are ignored). With ``sinks`` [Hq] the result is
    ``(dq, dk, dv, dsinks)``, ``dsinks`` [Hq] summed over batch and query rows (§18). Shapes: dq like q,
    dk like k, dv like v, all float64 (§13). ``scale``, ``mask`` and ``bias`` are constants. Validation as
    in §15. Memory: a few [rows x Lk] blocks (scores/P and dP) at a time per (batch, head).
    """
    p = validate(
        q, k, v, dout, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
        softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, allow_nonfinite=allow_nonfinite,
        sinks=sinks, chunk=chunk, dlse=dlse,
    )
    dq = np.zeros(p.q.shape)
    dk = np.zeros(p.k.shape)
    dv = np.zeros(p.v.shape)
    dsinks = None if p.sinks is None else np.zeros(p.Hq)
    for b in range(p.B):
        sq, sk = int(p.seqlens_q[b]), int(p.seqlens_k[b])
        if sq == 0:
            continue
        blocks = row_blocks(sq, sk, budget=None)
        for h in range(p.Hq):
            hk = h // p.group
            qb = p.q[b, h, :sq]
            qs = qb * p.scale
            kh = p.k[b, hk]
            do = p.dout[b, h, :sq]
            dlse_h = np.zeros(sq) if p.dlse is None else p.dlse[b, h, :sq]
            # per real row: P_sink and D; rows no block reaches keep the empty-row values 1 and 0 (§18)
            p_sink = np.full(sq, 0.0 if p.sinks is None or p.sinks[h] == -np.inf else 1.0)
            d_rows = np.zeros(sq)
            for r0, r1 in blocks:
                lo, hi = key_range(
                    r0, r1, sq=sq, sk=sk, causal=p.causal, alignment=p.alignment, window=p.window, chunk=p.chunk
                )
                if hi == lo:
                    continue  # fully masked rows: dq = 0, no contribution (§8)
                kb, vb = kh[lo:hi], p.v[b, hk, lo:hi]
                s, t = score_block(p, b, h, r0, r1, lo, hi, qs, kh, keep_tanh=True)
                w, m, l = softmax_block(s)
                empty = l == 0
                w /= np.where(empty, 1.0, l)[:, None]  # P, zero rows where fully masked (§8)
                if p.sinks is not None:
                    w, p_sink[r0:r1] = _with_sink(w, m, l, empty, float(p.sinks[h]))
                dob = do[r0:r1]
                o = w @ vb
                dsum = np.einsum("ij,ij->i", dob, o)  # D = rowsum(dout * out)
                d_rows[r0:r1] = dsum
                dp = dob @ vb.T
                dp -= (dsum - np.where(empty, 0.0, dlse_h[r0:r1]))[:, None]
                dp *= w  # dS = P * (dP - D + dlse)
                if t is not None:
                    np.square(t, out=t)
                    np.subtract(1.0, t, out=t)
                    dp *= t  # dR = dS * (1 - tanh^2(r / c))
                dq[b, h, r0:r1] = p.scale * (dp @ kb)
                dk[b, hk, lo:hi] += p.scale * (dp.T @ qb[r0:r1])
                dv[b, hk, lo:hi] += w.T @ dob
            if dsinks is not None:
                dsinks[h] += float(np.sum(p_sink * (dlse_h - d_rows)))
    if dsinks is not None:
        return dq, dk, dv, dsinks
    return dq, dk, dv


def _with_sink(w: np.ndarray, m: np.ndarray, l: np.ndarray, empty: np.ndarray, sink: float):
    """P against the LSE that includes the sink, and P_sink per row (§18), from the sink-free P ``w``.

    ``m``, ``l`` are the block's row max and sum of exp(s - m); the sink-free LSE is ``m + log l``.
    """
    with np.errstate(divide="ignore"):
        lse0 = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, l)))
    lse1 = np.logaddexp(lse0, sink)
    if sink == -np.inf:
        return w, np.zeros_like(lse0)
    factor = np.where(empty, 0.0, np.exp(np.where(empty, 0.0, lse0 - lse1)))
    return w * factor[:, None], np.exp(sink - lse1)
