"""FlashAttention-1 at tile granularity in NumPy: forward (Algorithm 1) and backward (Algorithm 4).

Forward loop order: K/V tiles outer, Q tiles inner. The running output O and the statistics l
(row sum) and m (row max) live in full-size "HBM" arrays; every inner step reads O_i, l_i, m_i,
merges the new tile's m~ = rowmax(S), P~ = exp(S - m~), l~ = rowsum(P~), and writes back the
*normalised* O_i = diag(l_new)^-1 (diag(l_i) e^(m_i - m_new) O_i + e^(m~ - m_new) P~ V_j)
(the HBM O is float32, like FA1's ``o_tmp`` buffer). Backward recomputes P = diag(l)^-1 exp(S - m)
from the stored statistics, K/V tiles outer, with D_i = rowsum(dO_i * O_i) formed in the inner loop
and dQ_i read from and written back to HBM at every step.
Sinks (§18): the HBM statistics start at m = sink, l = 1 (`Problem.initial_state`), so the sink is in
every merge; the backward subtracts the LSE cotangent from D_i and returns d sink. Chunks (§19): `Problem.visible`.
Semantics: oracles/SEMANTICS.md §1-§8, §18, §19; precision emulation: kernels/emulate.py.
"""

from __future__ import annotations

import numpy as np

from attention_conformance.kernels import emulate
from attention_conformance.kernels.reference._common import Problem, tiles

__all__ = ["backward", "forward"]


def forward(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None, bias=None,
            softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64, dtype="bfloat16",
            return_stats=False, sinks=None, chunk=None):
    """FA1 forward; returns (out, lse), or (out, lse, l, m) with ``return_stats`` (the stored statistics)."""
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype, sinks=sinks, chunk=chunk)
    kv_head = np.arange(p.Hq) // p.group
    O = np.zeros((p.B, p.Hq, p.Lq, p.dv), dtype=p.acc)
    m, l = p.initial_state(p.Lq)
    with np.errstate(divide="ignore", invalid="ignore"):
        for c0, c1 in tiles(p.Lk, block_k):
            Kj = p.k[:, kv_head, c0:c1]
            Vj = p.v[:, kv_head, c0:c1]
            for r0, r1 in tiles(p.Lq, block_q):
                vis = p.visible(r0, r1, c0, c1)
                if not vis.any():
                    continue
                Qi = p.q[:, :, r0:r1]
                Oi = O[:, :, r0:r1]
                li = l[:, :, r0:r1]
                mi = m[:, :, r0:r1]
                s = emulate.matmul(Qi, Kj.swapaxes(-1, -2), p.dtype)
                s = s * p.scale
                if p.softcap is not None:
                    s = p.softcap * np.tanh(s / p.softcap)
                if p.bias is not None:
                    s = s + p.bias_tile(r0, r1, c0, c1)
                s = np.where(vis, s, -np.inf)
                m_tile = s.max(axis=-1)
                m_tile_safe = np.where(m_tile == -np.inf, 0.0, m_tile).astype(p.acc)
                P = np.exp(s - m_tile_safe[..., None])
                l_tile = P.sum(axis=-1)
                m_new = np.maximum(mi, m_tile)
                m_new_safe = np.where(m_new == -np.inf, 0.0, m_new).astype(p.acc)
                alpha = np.exp(mi - m_new_safe)
                beta = np.exp(m_tile - m_new_safe)
                l_new = alpha * li + beta * l_tile
                PV = emulate.matmul(emulate.round_to(P, p.dtype), Vj, p.dtype)
                numer = (alpha * li)[..., None] * Oi + beta[..., None] * PV
                O[:, :, r0:r1] = np.where(l_new[..., None] > 0, numer / l_new[..., None], 0.0)
                l[:, :, r0:r1] = l_new
                m[:, :, r0:r1] = m_new
        lse = np.where(l > 0, m + np.log(l), -np.inf).astype(p.acc)
    out = emulate.round_to(O, p.dtype)
    if return_stats:
        return out, lse, l, m
    return out, lse


def backward(q, k, v, out, lse, dout, *, scale=None, causal=False, alignment="bottom_right", window=None,
             mask=None, bias=None, softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64,
             dtype="bfloat16", l=None, m=None, sinks=None, chunk=None, dlse=None):
    """FA1 backward by recomputation; returns (dq, dk, dv) rounded to ``dtype`` (and d sinks with ``sinks``).

    Uses the forward's statistics (``l``, ``m``) when given; otherwise m = lse and l = 1, which defines
    the same P = exp(S - lse). ``dlse`` is the LSE cotangent (§13, §18).
    """
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype, sinks=sinks, chunk=chunk)
    O = emulate.round_to(np.asarray(out), p.dtype)
    dO = emulate.round_to(np.asarray(dout), p.dtype)
    O = p.load_q_rows(O)  # padded query rows of out and dO are never read (SEMANTICS.md §7, §13)
    dO = p.load_q_rows(dO)
    dLSE = p.load_dlse(dlse)
    if m is None or l is None:
        m = np.asarray(lse).astype(p.acc)
        l = np.where(m == -np.inf, 0.0, 1.0).astype(p.acc)
    m_safe = np.where(np.asarray(m) == -np.inf, 0.0, m).astype(p.acc)
    l_safe = np.where(np.asarray(l) > 0, l, 1.0).astype(p.acc)
    kv_head = np.arange(p.Hq) // p.group
    dQ = np.zeros((p.B, p.Hq, p.Lq, p.d), dtype=p.acc)
    dK = np.zeros((p.B, p.Hq, p.Lk, p.d), dtype=p.acc)
    dV = np.zeros((p.B, p.Hq, p.Lk, p.dv), dtype=p.acc)
    for c0, c1 in tiles(p.Lk, block_k):
        Kj = p.k[:, kv_head, c0:c1]
        Vj = p.v[:, kv_head, c0:c1]
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
            P = np.exp(s - m_safe[:, :, r0:r1, None]) / l_safe[:, :, r0:r1, None]
            dVj = dVj + emulate.matmul(emulate.round_to(P, p.dtype).swapaxes(-1, -2), dOi, p.dtype)
            dP = emulate.matmul(dOi, Vj.swapaxes(-1, -2), p.dtype)
            Di = np.sum(dOi * O[:, :, r0:r1], axis=-1) - dLSE[:, :, r0:r1]
            dS = P * (dP - Di[..., None])
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
    return (*grads, p.sink_grad(np.asarray(lse).astype(p.acc), np.sum(dO * O, axis=-1) - dLSE))
