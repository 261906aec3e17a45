"""Dense FP64 attention forward, one query block at a time (SEMANTICS.md §1-§9, §12).

For every (batch, query head) and block of query rows: scores over the block's reachable keys
(`oracles.masking.key_range`, `oracles.scores.score_block`, §3), then the safe softmax of §12 with
the fully-masked-row convention of §8:

    m = max_j s_j,   P_j = exp(s_j - m),   l = sum_j P_j,   O = (P V) / l,   LSE = m + log l
    rows with no visible key (m = -inf): O = 0, LSE = -inf (§8); padded query rows likewise (§7).

With ``sinks`` the sink logit of each head is folded in once per row at the end (`oracles.sinks.fold_sinks`,
§18); ``chunk`` restricts visibility to the query's chunk (§19, `oracles.masking`).
"""

from __future__ import annotations

import numpy as np

from .masking import key_range
from .scores import row_blocks, score_block
from .sinks import fold_sinks
from .validate import Problem, validate

__all__ = ["attention", "softmax_block"]


def softmax_block(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In place: turn scores ``s`` [rows, sk] into unnormalised weights exp(s - m); return (s, m, l).

    ``m`` is the row max; fully masked rows (m = -inf) are shifted by 0 instead, so that they get
    all-zero weights and ``l = 0`` (§8) instead of ``-inf - -inf = NaN``. (Appending a ones column
    to V to get ``l`` from the PV GEMM was measured slower than this pass: dv + 1 columns cost 25%.)
    """
    if s.shape[1] == 0:
        n = s.shape[0]
        return s, np.full(n, -np.inf), np.zeros(n)
    m = s.max(axis=1)
    shift = np.where(m == -np.inf, 0.0, m)
    s -= shift[:, None]
    np.exp(s, out=s)
    return s, m, s.sum(axis=1)


def _pv_nonfinite(w: np.ndarray, visible: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``w @ v`` where non-finite entries of v count only for visible keys (§6, allow_nonfinite)."""
    bad = ~np.isfinite(v)
    out = w @ np.where(bad, 0.0, v)
    for j, c in np.argwhere(bad):
        out[:, c] += np.where(visible[:, j], w[:, j] * v[j, c], 0.0)
    return out


def _forward(p: Problem, out: np.ndarray, lse: np.ndarray) -> None:
    for b in range(p.B):
        sq, sk = int(p.seqlens_q[b]), int(p.seqlens_k[b])
        if sq == 0:
            continue
        blocks = row_blocks(sq, sk)
        for h in range(p.Hq):
            hk = h // p.group
            qs = p.q[b, h, :sq] * p.scale
            kb = p.k[b, hk]
            vb = p.v[b, hk]
            for r0, r1 in blocks:
                lo, hi = key_range(
                    r0, r1, sq=sq, sk=sk, causal=p.causal, alignment=p.alignment, window=p.window, chunk=p.chunk
                )
                if hi == lo:
                    continue  # every row of the block is fully masked: O = 0, LSE = -inf (§8)
                s, _ = score_block(p, b, h, r0, r1, lo, hi, qs, kb)
                vr = vb[lo:hi]
                v_nonfinite = not np.isfinite(vr).all()
                visible = s > -np.inf if v_nonfinite else None
                w, m, l = softmax_block(s)
                o = _pv_nonfinite(w, visible, vr) if v_nonfinite else w @ vr
                empty = m == -np.inf  # no visible key (§8); otherwise l >= 1 (the max term is exp(0) = 1)
                with np.errstate(divide="ignore", invalid="ignore"):
                    o /= np.where(empty, 1.0, l)[:, None]
                    lse[b, h, r0:r1] = np.where(empty, -np.inf, m + np.log(l))
                o[empty] = 0.0
                out[b, h, r0:r1] = o


def attention(
    q,
    k,
    v,
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
) -> tuple[np.ndarray, np.ndarray]:
    """Exact attention in FP64: returns ``(out [B, Hq, Lq, dv], lse [B, Hq, Lq])`` (SEMANTICS.md).

    q [B, Hq, Lq, d], k [B, Hkv, Lk, d], v [B, Hkv, Lk, dv], any real dtype (§1). ``scale`` defaults
    to 1/sqrt(d) (§2); the score pipeline is scale, softcap, bias, masking (§3); ``causal`` with
    ``alignment`` (§4); ``window=(left, right)``, None entries unbounded (§5); boolean ``mask``
    (True = attend) and additive ``bias`` broadcast to [B, Hq, Lq, Lk] (§6); ``seqlens_q`` /
    ``seqlens_k`` per-batch real lengths (§7); rows with no visible key give O = 0, LSE = -inf (§8);
    query head h reads kv head h // (Hq / Hkv) (§9); LSE is the natural-log logsumexp of the final
    scores (§12); ``sinks`` [Hq]: one sink logit per query head in every row's denominator, LSE includes it,
    a fully masked row gives O = 0 and LSE = the sink (§18); ``chunk``: key j is visible to query i only in
    the same chunk of aligned positions (§19). Bad input raises ValueError (§15). Memory: one [rows x Lk]
    score block at a time.
    """
    p = validate(
        q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
        softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, allow_nonfinite=allow_nonfinite,
        sinks=sinks, chunk=chunk,
    )
    out = np.zeros((p.B, p.Hq, p.Lq, p.dv))
    lse = np.full((p.B, p.Hq, p.Lq), -np.inf)
    if allow_nonfinite:  # IEEE propagation is the documented result (§15): no RuntimeWarnings
        with np.errstate(invalid="ignore", over="ignore"):
            _forward(p, out, lse)
    else:
        _forward(p, out, lse)
    if p.sinks is not None:
        out, lse = fold_sinks(out, lse, p.sinks)
    return out, lse
