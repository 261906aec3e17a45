"""The naive same-precision implementation: what a straightforward kernel in the case's formats returns.

Inputs in the case dtype, scores and softmax in the accumulation format (fp32, fp64 for fp64 cases), P rounded to
the input (or FP8) format, PV accumulated in the accumulation format, the output rounded to the output dtype; the
backward likewise (dS rounded like P). Its error against the oracle is the secondary criterion (QUALITY_WARNING
when a kernel's error is more than 2x it, TOLERANCES.md). `conformance.verdict.bounds.compute_oracle` calls these
functions block by block inside its bound pass, with the oracle's visibility of each score (SEMANTICS.md §3-§7):

- `forward_rows`: rows r0:r1 of O for one (batch, query head), the sink in the max and the sum (§18);
- `backward_rows`: those rows' share of dQ, dK, dV, with P taken against the oracle's LSE (§12) and the LSE
  cotangent in dS (``dS = P (dP - D + dlse)``);
- `sink_grad`: one batch's share of d sink for one head.
"""

from __future__ import annotations

import numpy as np

from attention_conformance.cases.inputs import round_to_dtype

__all__ = ["backward_rows", "forward_rows", "sink_grad"]


def _scores(p, b: int, h: int, r0: int, r1: int, q32, k32, vis, acc):
    """Scores [r1 - r0, sk] in the accumulation format, -inf where the oracle sees none; tanh(s / softcap) or None."""
    s32 = (q32[r0:r1] @ k32.T) * acc(p.scale)
    tt = None
    if p.softcap is not None:
        c = acc(p.softcap)
        tt = np.tanh(s32 / c)
        s32 = c * tt
    if p.bias is not None:
        s32 = s32 + p.bias[b, h, r0:r1, :k32.shape[0]].astype(acc)
    return np.where(vis, s32, -np.inf).astype(acc), tt


def forward_rows(p, b: int, h: int, r0: int, r1: int, q32, k32, v32, vis, sink: float, acc, p_dt: str,
                 out_dt: str) -> np.ndarray:
    """Rows r0:r1 of the naive O of (batch b, query head h), in `out_dt` values.

    ``p``: the oracle's validated problem; ``q32`` [sq, d], ``k32`` [sk, d], ``v32`` [sk, dv]: the head's real
    rows in the accumulation format ``acc``; ``vis``: the oracle's visibility [r1 - r0, sk]; ``sink``: the head's
    sink logit (-inf without one)."""
    s32, _ = _scores(p, b, h, r0, r1, q32, k32, vis, acc)
    sk = k32.shape[0]
    m32 = np.max(s32, axis=1, initial=-np.inf) if sk else np.full(r1 - r0, -np.inf, dtype=acc)
    m32 = np.maximum(m32, acc(sink))  # the sink is in the naive max and sum too (§18)
    m32 = np.where(np.isfinite(m32), m32, 0).astype(acc)
    e32 = np.exp(s32 - m32[:, None])
    l32 = e32.sum(axis=1, dtype=acc) + np.exp(acc(sink) - m32)
    with np.errstate(invalid="ignore", divide="ignore"):
        P32 = np.where(l32[:, None] > 0, e32 / l32[:, None], 0).astype(acc)
    Pr = round_to_dtype(P32, p_dt).astype(acc)
    return round_to_dtype(Pr @ v32, out_dt)


def backward_rows(p, b: int, h: int, r0: int, r1: int, q32, k32, v32, do32, vis, L, O, acc, p_dt: str,
                  out_dt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows r0:r1's naive contributions (dQ rows [r1 - r0, d], dK [sk, d], dV [sk, dv]) of (batch b, query head h).

    ``L``: the oracle's LSE of the rows, ``O``: its output rows (rounded to `out_dt` first, as a kernel stores O);
    ``do32``: the head's dout rows in ``acc``; the rest as `forward_rows`."""
    s32, tt = _scores(p, b, h, r0, r1, q32, k32, vis, acc)
    Lf = np.where(np.isfinite(L), L, 0.0)
    L32 = acc(1) * Lf.astype(acc)
    P32 = np.where(vis, np.exp(np.where(vis, s32, L32[:, None]) - L32[:, None]), 0).astype(acc)
    O_r = round_to_dtype(O, out_dt).astype(acc)
    dP32 = do32[r0:r1] @ v32.T
    D32 = (do32[r0:r1] * O_r).sum(axis=1, dtype=acc)
    if p.dlse is not None:
        D32 = (D32 - np.where(np.isfinite(L), p.dlse[b, h, r0:r1], 0.0)).astype(acc)
    dS32 = P32 * (dP32 - D32[:, None])
    if tt is not None:
        dS32 = dS32 * (1 - tt * tt)
    dSr = round_to_dtype(dS32, p_dt).astype(acc)
    Pr = round_to_dtype(P32, p_dt).astype(acc)
    return acc(p.scale) * (dSr @ k32), acc(p.scale) * (dSr.T @ q32[r0:r1]), Pr.T @ do32[r0:r1]


def sink_grad(sink: float, L, O, dO, dl, acc, out_dt: str) -> float:
    """One batch's naive d sink of one head: -sum_i P_sink,i D_i with P_sink in ``acc`` from the oracle's LSE ``L``
    and D from the output rounded to `out_dt` (``dl``: the LSE cotangent rows, zeros without one; §18)."""
    O_r = round_to_dtype(O, out_dt).astype(acc)
    D32 = (dO.astype(acc) * O_r).sum(axis=1, dtype=acc) - dl.astype(acc)
    ps32 = np.exp(acc(sink) - L.astype(acc))
    return float(-np.sum(ps32 * D32, dtype=acc))
