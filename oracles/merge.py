"""Split-KV partials and their merge: the Flash-Decoding / FA3 combine contract (SEMANTICS.md §14).

`split_partials` computes, for a contiguous partition of the keys, each split's output normalised
by its own sum and its LSE. `merge_partials` combines any set of such partials, in any order:

    LSE = M + log sum_s exp(LSE_s - M),  M = max_s LSE_s;   O = sum_s exp(LSE_s - LSE) O_s

Splits with LSE_s = -inf contribute nothing, whatever O_s holds; all-empty gives O = 0, LSE = -inf.

Sinks (§18) join the merge once, not once per split: the partials are sink-free, and
``merge_partials(..., sinks=)`` adds one extra partial ``(O = 0, LSE = sink_h)`` per row
(`oracles.sinks.fold_sinks`), so all-empty rows give O = 0, LSE = sink_h.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .forward import attention
from .sinks import fold_sinks
from .validate import validate

__all__ = ["merge_partials", "split_partials"]


def merge_partials(outs, lses, sinks=None) -> tuple[np.ndarray, np.ndarray]:
    """Merge split-KV partials ``outs [S, ..., Lq, dv]``, ``lses [S, ..., Lq]`` into ``(out, lse)`` (§14).

    The leading axis enumerates splits (any order; S >= 1). ``lses`` may hold ``-inf`` (empty split)
    but not NaN or ``+inf`` (ValueError). ``sinks`` [Hq] (§18; the head axis of ``lses`` is the second
    last) are folded in once, after the splits. Returns float64 ``out [..., Lq, dv]``, ``lse [..., Lq]``.
    """
    o = np.asarray(outs, dtype=np.float64)
    lse = np.asarray(lses, dtype=np.float64)
    if o.ndim < 2 or lse.shape != o.shape[:-1] or o.shape[0] < 1:
        raise ValueError(
            f"merge_partials: outs must be [S, ..., Lq, dv] and lses [S, ..., Lq] with S >= 1 (§14); "
            f"got outs.shape={o.shape}, lses.shape={lse.shape}"
        )
    if np.isnan(lse).any() or np.isposinf(lse).any():
        bad = tuple(int(i) for i in np.argwhere(np.isnan(lse) | np.isposinf(lse))[0])
        raise ValueError(
            f"merge_partials: lses has {lse[bad]} at index {bad}; only finite values and -inf (empty split) "
            f"are allowed (§14, §8: map a +inf 'empty' convention to -inf first); lses.shape={lse.shape}"
        )
    m = lse.max(axis=0)
    empty = m == -np.inf  # every split empty for this row
    shift = np.where(empty, 0.0, m)
    w = np.exp(lse - shift)  # 0 for empty splits
    total = w.sum(axis=0)
    with np.errstate(divide="ignore"):
        lse_out = np.where(empty, -np.inf, shift + np.log(np.where(empty, 1.0, total)))
    w /= np.where(empty, 1.0, total)
    present = (lse > -np.inf)[..., None]
    out = np.where(present, w[..., None] * np.where(present, o, 0.0), 0.0).sum(axis=0)
    if sinks is not None:
        return fold_sinks(out, lse_out, sinks)
    return out, lse_out


def split_partials(q, k, v, boundaries: Sequence[int], **kw) -> tuple[np.ndarray, np.ndarray]:
    """Partials of a contiguous key partition (§14): ``(outs [S, B, Hq, Lq, dv], lses [S, B, Hq, Lq])``.

    ``boundaries`` are the edges ``0 = b_0 <= b_1 <= ... <= b_S = Lk``; split s covers keys
    ``[b_s, b_{s+1})`` (empty splits allowed). Every other rule (causal, window, mask, bias, varlen)
    uses the global key index. ``kw`` are the keywords of `oracles.attention` except ``sinks``: partials
    are sink-free and the sink joins `merge_partials` once (§18), so ``sinks=`` here is a ValueError.
    """
    p = validate(q, k, v, **{n: x for n, x in kw.items() if n != "mask"})
    if kw.get("sinks") is not None:
        raise ValueError(
            "sinks: split partials are sink-free; pass sinks= to merge_partials, which adds the sink once (§18); "
            f"q.shape={p.q.shape}, k.shape={p.k.shape}, v.shape={p.v.shape}"
        )
    edges = [int(x) for x in boundaries]
    if len(edges) < 2 or edges[0] != 0 or edges[-1] != p.Lk or any(a > b for a, b in zip(edges, edges[1:])):
        raise ValueError(
            f"boundaries must be non-decreasing edges from 0 to Lk={p.Lk} (§14); got {list(boundaries)}; "
            f"q.shape={p.q.shape}, k.shape={p.k.shape}, v.shape={p.v.shape}"
        )
    user_mask = kw.pop("mask", None)
    outs, lses = [], []
    for a, b in zip(edges, edges[1:]):
        in_split = np.zeros(p.Lk, dtype=bool)
        in_split[a:b] = True
        mask = in_split if user_mask is None else (np.asarray(user_mask) & in_split)
        o, lse = attention(q, k, v, mask=mask, **kw)
        outs.append(o)
        lses.append(lse)
    return np.stack(outs), np.stack(lses)
