"""A second, independently written forward: the seeds' row-streaming online softmax (SEMANTICS.md §3-§8, §12).

This path shares only input validation with the dense oracle. It walks each query row over key
tiles of any size ``block``, carrying the running max ``m``, the running sum ``l`` and the
unnormalised numerator ``o`` ([FA-anim] "Online softmax · 一边读，一边合并" and "实现 · 一行的可运行逻辑";
[OS-deriv] "合并两个循环")::

    m, l, o = -inf, 0, 0                    # with a sink (§18): m, l, o = sink, 1, 0 (the sink in the max)
    for each key tile:                      # tail tile checks j < Lk ([FA-anim] "尾块")
        s = where(valid, scores, -inf)
        if not any(valid): continue         # skip fully masked tiles: no -inf - -inf
        m2 = max(m, max(s))
        alpha = exp(m - m2) if l else 0     # alpha = 0 on the first valid tile
        p = exp(s - m2)
        o = alpha * o + p @ V;  l = alpha * l + sum(p);  m = m2
    if l == 0: O, LSE = 0, -inf             # §8
    else: O, LSE = o / l, m + log(l)

Visibility is decided per (i, j) by `visible`, a scalar restatement of §4-§7 written separately
from `oracles.masking` (the chunk test of §19 calls its `chunk_index`, the one statement of that rule).
It is slow (Python per row and tile): use it on small problems.
"""

from __future__ import annotations

import math

import numpy as np

from .masking import chunk_index
from .validate import Problem, validate

__all__ = ["streaming_attention", "visible", "key_tiles", "stream_row"]


def visible(p: Problem, b: int, h: int, i: int, j: int) -> bool:
    """Does query i of (b, h) see key j? Scalar form of SEMANTICS.md §4-§7 plus the boolean mask (§6)."""
    sq, sk = int(p.seqlens_q[b]), int(p.seqlens_k[b])
    if i >= sq or j >= sk:  # §7 padding
        return False
    diag = i + (sk - sq if p.alignment == "bottom_right" else 0)  # §4
    left, right = p.window
    if p.causal and j > diag:
        return False
    if left is not None and j < diag - left:  # §5
        return False
    if right is not None and j > diag + right:
        return False
    if p.chunk is not None and chunk_index(diag, p.chunk) != chunk_index(j, p.chunk):  # §19
        return False
    return p.mask is None or bool(p.mask[b, h, i, j])


def key_tiles(Lk: int, block: int) -> list[tuple[int, int]]:
    """Key tiles ``[start, start + block)``; the last one may reach past Lk (its tail is invalid)."""
    return [(start, start + block) for start in range(0, max(Lk, 1), block)] if Lk > 0 else []


def stream_row(
    s_row: np.ndarray, valid: np.ndarray, v: np.ndarray, block: int, sink: float = -math.inf
) -> tuple[np.ndarray, float]:
    """Online softmax of one row: scores ``s_row`` [Lk] (values at invalid keys are ignored), ``valid``
    [Lk] bool, values ``v`` [Lk, dv]; tiles of ``block`` keys; ``sink`` the row's sink logit (§18: it
    starts the running state as a score with no value, so it is in the running max from the start).
    Returns ``(O [dv], LSE)``."""
    Lk, dv = v.shape
    m, l, o = -math.inf, 0.0, np.zeros(dv)
    if sink > -math.inf:
        m, l = float(sink), 1.0
    for start, stop in key_tiles(Lk, block):
        j = np.arange(start, stop)
        inside = j < Lk  # tail tile: only j < Lk exist
        ok = np.zeros(stop - start, dtype=bool)
        ok[inside] = valid[j[inside]]
        s = np.full(stop - start, -math.inf)
        s[ok] = s_row[j[ok]]
        if not ok.any():
            continue
        m2 = max(m, float(s.max()))
        if m2 == -math.inf:  # every valid score is -inf (bias = -inf): nothing visible yet
            continue
        alpha = math.exp(m - m2) if l else 0.0
        pw = np.exp(s - m2)  # exp(-inf) = 0 at invalid keys
        vt = np.zeros((stop - start, dv))
        vt[ok] = v[j[ok]]  # invalid / out-of-range keys are never read
        o = alpha * o + pw @ vt
        l = alpha * l + float(pw.sum())
        m = m2
    if l == 0:
        return np.zeros(dv), -math.inf
    return o / l, m + math.log(l)


def streaming_attention(
    q,
    k,
    v,
    *,
    block: int = 16,
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
    """Attention by row-streaming online softmax over key tiles of ``block`` keys (any block >= 1).

    Same keywords, shapes and results as `oracles.attention` (up to FP64 rounding); independent
    implementation used to cross-check it.
    """
    if isinstance(block, bool) or not isinstance(block, int | np.integer) or block < 1:
        raise ValueError(f"block must be an int >= 1; got {block!r}")
    p = validate(
        q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
        softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, allow_nonfinite=allow_nonfinite,
        sinks=sinks, chunk=chunk,
    )
    out = np.zeros((p.B, p.Hq, p.Lq, p.dv))
    lse = np.full((p.B, p.Hq, p.Lq), -math.inf)
    for b in range(p.B):
        for h in range(p.Hq):
            kv = h * p.Hkv // p.Hq  # == h // (Hq / Hkv), §9
            kh, vh = p.k[b, kv], p.v[b, kv]
            for i in range(p.Lq):
                valid = np.array([visible(p, b, h, i, j) for j in range(p.Lk)], dtype=bool)
                s_row = np.full(p.Lk, -math.inf)
                for j in np.flatnonzero(valid):
                    x = p.scale * float(np.dot(p.q[b, h, i], kh[j]))  # §2
                    if p.softcap is not None:  # §3
                        x = p.softcap * math.tanh(x / p.softcap)
                    if p.bias is not None:
                        x += float(p.bias[b, h, i, j])
                    s_row[j] = x
                valid &= s_row > -math.inf  # bias = -inf means masked (§6)
                sink = -math.inf if p.sinks is None else float(p.sinks[h])
                out[b, h, i], lse[b, h, i] = stream_row(s_row, valid, vh, block, sink)
    return out, lse
