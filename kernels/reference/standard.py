"""Standard (non-flash) attention with low-precision intermediates: the FP16 baseline of FA3 Table 3.

S = scale * Q K^T is materialised in ``intermediate_dtype`` (float32 products rounded once), the
softmax is evaluated on those rounded scores with every intermediate (exp, row sum, P) rounded to
``intermediate_dtype``, and O = P V is accumulated in float32 and rounded to ``dtype``.
Semantics as oracles/SEMANTICS.md §1-§8 (fully masked rows: O = 0, LSE = -inf).
"""

from __future__ import annotations

import numpy as np

from attention_conformance.kernels import emulate
from attention_conformance.kernels.reference._common import Problem, tiles

__all__ = ["forward"]


def forward(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None, bias=None,
            softcap=None, seqlens_q=None, seqlens_k=None, dtype="float16", intermediate_dtype="float16",
            chunk_q=1024):
    """Dense attention with S and P stored in ``intermediate_dtype``; returns (out, lse).

    Query rows are processed ``chunk_q`` at a time only to bound memory: rows are independent here,
    so the chunking does not change a single bit of the result.
    """
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype)
    inter = emulate.canonical(intermediate_dtype, "intermediate_dtype")
    kv_head = np.arange(p.Hq) // p.group
    out = np.zeros((p.B, p.Hq, p.Lq, p.dv), dtype=p.acc)
    lse = np.full((p.B, p.Hq, p.Lq), -np.inf, dtype=p.acc)
    for r0, r1 in tiles(p.Lq, chunk_q):
        out[:, :, r0:r1], lse[:, :, r0:r1] = _rows(p, inter, kv_head, r0, r1)
    return emulate.round_to(out, p.dtype), lse


def _rows(p: Problem, inter: str, kv_head: np.ndarray, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
    s = emulate.matmul(p.q[:, :, r0:r1], p.k[:, kv_head].swapaxes(-1, -2), p.dtype)
    s = emulate.round_to(s * p.scale, inter)
    if p.softcap is not None:
        s = emulate.round_to(p.softcap * np.tanh(s / p.softcap), inter)
    if p.bias is not None:
        s = emulate.round_to(s + p.bias_tile(r0, r1, 0, p.Lk), inter)
    s = np.where(p.visible(r0, r1, 0, p.Lk), s, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = s.max(axis=-1, initial=-np.inf)
        m_safe = np.where(m == -np.inf, 0.0, m).astype(p.acc)
        e = emulate.round_to(np.exp(s - m_safe[..., None]), inter)
        l = emulate.round_to(e.sum(axis=-1), inter)
        P = emulate.round_to(np.where(l[..., None] > 0, e / l[..., None], 0.0), inter)
        out = emulate.matmul(P, p.v[:, kv_head], p.dtype)
        lse = np.where(l > 0, m + np.log(l), -np.inf).astype(p.acc)
    return out, lse
