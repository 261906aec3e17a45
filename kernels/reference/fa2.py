"""FlashAttention-2 at tile granularity in NumPy: forward (Algorithm 1) and backward (Algorithm 2).

Forward: Q tiles outer, K/V tiles inner; the accumulator O stays unnormalised (rescaled by
alpha = exp(m_old - m_new) when the running max grows) and is divided by l once at the end;
LSE = m + log(l) is stored for the backward. Backward: K/V tiles outer, Q tiles inner,
D = rowsum(dO * O) computed once, P recomputed from the LSE, dS = P * (dP - D), dQ accumulated
across K/V tiles. Sinks (§18): the running max and sum start at (sink, 1) (`Problem.initial_state`);
the backward folds the LSE cotangent into D (D = rowsum(dO * O) - dlse) and returns d sink. Chunked
masks (§19) are part of `Problem.visible`. Semantics: oracles/SEMANTICS.md §1-§8, §18, §19; precision
emulation: kernels/emulate.py (operands in ``dtype``, float32 products, P and dS rounded to ``dtype``
before their matmuls).
Vectorised over batch and heads; one operation per line so single-line mutants stay meaningful.
"""

from __future__ import annotations

import numpy as np

from attention_conformance.kernels import emulate
from attention_conformance.kernels.reference._common import Problem, tiles

__all__ = ["backward", "forward"]


def forward(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None, bias=None,
            softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64, dtype="bfloat16", sinks=None,
            chunk=None):
    """FA2 forward; returns (out [B, Hq, Lq, dv] rounded to ``dtype``, lse [B, Hq, Lq] float32/float64)."""
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype, sinks=sinks, chunk=chunk)
    kv_head = np.arange(p.Hq) // p.group
    K = p.k[:, kv_head]
    V = p.v[:, kv_head]
    out = np.zeros((p.B, p.Hq, p.Lq, p.dv), dtype=p.acc)
    lse = np.full((p.B, p.Hq, p.Lq), -np.inf, dtype=p.acc)
    with np.errstate(divide="ignore", invalid="ignore"):
        for r0, r1 in tiles(p.Lq, block_q):
            Qi = p.q[:, :, r0:r1]
            m, l = p.initial_state(r1 - r0)
            acc = np.zeros((p.B, p.Hq, r1 - r0, p.dv), dtype=p.acc)
            for c0, c1 in tiles(p.Lk, block_k):
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
            out[:, :, r0:r1] = np.where(l[..., None] > 0, acc / l[..., None], 0.0)
            lse[:, :, r0:r1] = np.where(l > 0, m + np.log(l), -np.inf)
    return emulate.round_to(out, p.dtype), lse


def backward(q, k, v, out, lse, dout, *, scale=None, causal=False, alignment="bottom_right", window=None,
             mask=None, bias=None, softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64,
             dtype="bfloat16", sinks=None, chunk=None, dlse=None):
    """FA2 backward (Algorithm 2); returns (dq, dk, dv) rounded to ``dtype``, dk/dv reduced over GQA groups,
    and d sinks [Hq] (float32/float64) as a fourth value when ``sinks`` is given. ``dlse`` is the LSE cotangent."""
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype, sinks=sinks, chunk=chunk)
    O = emulate.round_to(np.asarray(out), p.dtype)
    dO = emulate.round_to(np.asarray(dout), p.dtype)
    O = p.load_q_rows(O)  # padded query rows of out and dO are never read (SEMANTICS.md §7, §13)
    dO = p.load_q_rows(dO)
    L = np.asarray(lse).astype(p.acc)
    L_safe = np.where(L == -np.inf, 0.0, L).astype(p.acc)
    kv_head = np.arange(p.Hq) // p.group
    K = p.k[:, kv_head]
    V = p.v[:, kv_head]
    D_out = np.sum(dO * O, axis=-1)
    D = D_out - p.load_dlse(dlse)
    dQ = np.zeros((p.B, p.Hq, p.Lq, p.d), dtype=p.acc)
    dK = np.zeros((p.B, p.Hq, p.Lk, p.d), dtype=p.acc)
    dV = np.zeros((p.B, p.Hq, p.Lk, p.dv), dtype=p.acc)
    for c0, c1 in tiles(p.Lk, block_k):
        Kj = K[:, :, c0:c1]
        Vj = V[:, :, c0:c1]
        dKj = np.zeros((p.B, p.Hq, c1 - c0, p.d), dtype=p.acc)
        dVj = np.zeros((p.B, p.Hq, c1 - c0, p.dv), dtype=p.acc)
        for r0, r1 in tiles(p.Lq, block_q):
            vis = p.visible(r0, r1, c0, c1)
            if not vis.any():
                continue
            Qi = p.q[:, :, r0:r1]
            dOi = dO[:, :, r0:r1]
            s = emulate.matmul(Qi, Kj.swapaxes(-1, -2), p.dtype)
            s = s * p.scale
            if p.softcap is not None:
                t = np.tanh(s / p.softcap)
                s = p.softcap * t
            if p.bias is not None:
                s = s + p.bias_tile(r0, r1, c0, c1)
            s = np.where(vis, s, -np.inf)
            P = np.exp(s - L_safe[:, :, r0:r1, None])
            dVj = dVj + emulate.matmul(emulate.round_to(P, p.dtype).swapaxes(-1, -2), dOi, p.dtype)
            dP = emulate.matmul(dOi, Vj.swapaxes(-1, -2), p.dtype)
            dS = P * (dP - D[:, :, r0:r1, None])
            if p.softcap is not None:
                dS = dS * (1.0 - t * t)
            dS = emulate.round_to(dS, p.dtype)
            dQ[:, :, r0:r1] = dQ[:, :, r0:r1] + emulate.matmul(dS, Kj, p.dtype) * p.scale
            dKj = dKj + emulate.matmul(dS.swapaxes(-1, -2), Qi, p.dtype) * p.scale
        dK[:, :, c0:c1] = dKj
        dV[:, :, c0:c1] = dVj
    dK = dK.reshape(p.B, p.Hkv, p.group, p.Lk, p.d).sum(axis=2)
    dV = dV.reshape(p.B, p.Hkv, p.group, p.Lk, p.dv).sum(axis=2)
    grads = emulate.round_to(dQ, p.dtype), emulate.round_to(dK, p.dtype), emulate.round_to(dV, p.dtype)
    if p.sinks is None:
        return grads
    return (*grads, p.sink_grad(L, D))
