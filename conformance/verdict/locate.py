"""Where a quantity's failing values lie: the batches, heads, rows and columns they occupy, in one sentence.

A kernel bug has a shape before it has a size: a tail tile fails the last rows (``query rows 64 of 65``), a
non-square causal alignment the rows above the diagonal shift, a chunk mask the rows from the first chunk boundary
on, a GQA mapping some heads, a split merge some columns, a varlen offset one batch entry. `where_failing` names
the indices along each axis of the canonical layouts (SEMANTICS.md §1: O, dQ [B, Hq, Lq, dv / d]; dK, dV [B, Hkv,
Lk, d / dv]; LSE [B, Hq, Lq]) that hold at least one failing value, as ranges, so the message of a FAIL says where
to look before anyone opens the arrays. Pure: no verdict depends on it (conformance/verdict/checks.py appends it to
the failure message and keeps the count in `QuantityStats.failing`; `axes_text` also says where a call wrote into an
input it was handed, in that input's own layout: conformance/adapters/_torch_common.py `changed`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_RANGES", "axes_text", "change_text", "index_ranges", "where_failing"]

#: the most ranges an axis lists before it says how many more there are
MAX_RANGES = 4
#: what the rows of each quantity are (the others: "rows")
_ROWS = {"out": "query rows", "lse": "query rows", "dq": "query rows", "dk": "key rows", "dv": "key rows"}


def index_ranges(indices: np.ndarray, size: int, limit: int = MAX_RANGES) -> str:
    """``indices`` (sorted, unique, within ``range(size)``) as ``"all 64"``, ``"3"``, ``"0-15, 32-47"`` or
    ``"0-1, 4-5, 8-9, 12-13 (+3 more ranges)"``."""
    idx = [int(i) for i in indices]
    if len(idx) == size:
        return f"all {size}"
    runs: list[tuple[int, int]] = []
    for i in idx:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit])
    more = len(runs) - limit
    return f"{text} of {size}" + (f" (+{more} more range{'s' if more > 1 else ''})" if more > 0 else "")


def axes_text(mask: np.ndarray, labels: list[str] | None = None) -> str:
    """For each axis of the boolean ``mask``, the indices holding at least one True, as ranges (``axis 2 16 of 17``,
    or ``labels[i]`` for ``axis i``), joined by commas."""
    parts = []
    for axis in range(mask.ndim):
        other = tuple(a for a in range(mask.ndim) if a != axis)
        hit = np.flatnonzero(mask.any(axis=other)) if other else np.flatnonzero(mask)
        parts.append(f"{labels[axis] if labels else f'axis {axis}'} {index_ranges(hit, mask.shape[axis])}")
    return ", ".join(parts)


def where_failing(name: str, failing: np.ndarray, compared: int) -> str | None:
    """``failing: 412 of 4160 values, batch entries 0 of 2, heads all 2, query rows 41-64 of 65, columns all 32`` for a
    boolean mask ``failing`` of a 3-d or 4-d quantity; None for other ranks or when nothing fails."""
    n = int(failing.sum())
    if n == 0 or failing.ndim not in (3, 4):
        return None
    labels = ["batch entries", "heads", _ROWS.get(name, "rows"), "columns"][: failing.ndim]
    return f"failing: {n} of {compared} values, " + axes_text(failing, labels)



def change_text(name: str, changed: np.ndarray, value_before, value_after) -> str:
    """``k: 64 of 1088 values (shape [1, 2, 17, 32]: axis 0 all 1, ...), first k[0, 0, 16, 0]: 0.53 -> 0.0`` for
    the boolean ``changed`` of an input a call wrote into (at least one True); ``value_before(index)`` /
    ``value_after(index)`` give the element there before and after the call."""
    first = tuple(int(i) for i in np.argwhere(changed)[0])
    return (f"{name}: {int(changed.sum())} of {changed.size} values (shape {list(changed.shape)}: "
            f"{axes_text(changed)}), first {name}{list(first)}: {value_before(first)!r} -> {value_after(first)!r}")
