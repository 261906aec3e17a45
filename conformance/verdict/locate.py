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

__all__ = ["MAX_RANGES", "MAX_STORED_RUNS", "axes_text", "axis_labels", "change_text", "index_ranges", "runs",
           "runs_text", "where_failing", "failing_runs"]

#: the most ranges an axis lists before it says how many more there are
MAX_RANGES = 4
#: the most runs of failing indices per axis report.json keeps (`failing_runs`), for the report's pictures
MAX_STORED_RUNS = 32
#: what the rows of each quantity are (the others: "rows")
_ROWS = {"out": "query rows", "lse": "query rows", "dq": "query rows", "dk": "key rows", "dv": "key rows"}


def runs(indices: np.ndarray) -> list[list[int]]:
    """Sorted unique ``indices`` as inclusive runs ``[[first, last], ...]``."""
    out: list[list[int]] = []
    for i in (int(x) for x in indices):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def axis_labels(name: str, ndim: int) -> list[str]:
    """What each axis of quantity ``name`` holds, in the canonical layout (SEMANTICS.md §1)."""
    return ["batch entries", "heads", _ROWS.get(name, "rows"), "columns"][:ndim]


def _hits(mask: np.ndarray, axis: int) -> np.ndarray:
    other = tuple(a for a in range(mask.ndim) if a != axis)
    return np.flatnonzero(mask.any(axis=other)) if other else np.flatnonzero(mask)


def failing_runs(failing: np.ndarray) -> list[list[list[int]]]:
    """Per axis of the boolean ``failing``, the runs of indices holding a True (all of them; report.json keeps the
    first `MAX_STORED_RUNS` of each)."""
    return [runs(_hits(failing, axis)) for axis in range(failing.ndim)]


def index_ranges(indices: np.ndarray, size: int, limit: int = MAX_RANGES) -> str:
    """``indices`` (sorted, unique, within ``range(size)``) as ``"all 64"``, ``"3"``, ``"0-15, 32-47"`` or
    ``"0-1, 4-5, 8-9, 12-13 (+3 more ranges)"``."""
    return runs_text(runs(indices), size, limit)


def runs_text(found: list[list[int]], size: int, limit: int = MAX_RANGES) -> str:
    """`index_ranges` of the indices whose runs are ``found``."""
    if sum(b - a + 1 for a, b in found) == size:
        return f"all {size}"
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in found[:limit])
    more = len(found) - limit
    return f"{text} of {size}" + (f" (+{more} more range{'s' if more > 1 else ''})" if more > 0 else "")


def axes_text(mask: np.ndarray, labels: list[str] | None = None,
              axis_runs: list[list[list[int]]] | None = None) -> str:
    """For each axis of the boolean ``mask``, the indices holding at least one True, as ranges (``axis 2 16 of 17``,
    or ``labels[i]`` for ``axis i``), joined by commas. ``axis_runs``: its `failing_runs`, when the caller has them
    already."""
    found = failing_runs(mask) if axis_runs is None else axis_runs
    return ", ".join(f"{labels[axis] if labels else f'axis {axis}'} {runs_text(found[axis], mask.shape[axis])}"
                     for axis in range(mask.ndim))


def where_failing(name: str, failing: np.ndarray, compared: int,
                  axis_runs: list[list[list[int]]] | None = None) -> str | None:
    """``failing: 412 of 4160 values, batch entries 0 of 2, heads all 2, query rows 41-64 of 65, columns all 32`` for a
    boolean mask ``failing`` of a 3-d or 4-d quantity; None for other ranks or when nothing fails. ``axis_runs``:
    its `failing_runs`, when the caller has them already."""
    n = int(failing.sum())
    if n == 0 or failing.ndim not in (3, 4):
        return None
    return f"failing: {n} of {compared} values, " + axes_text(failing, axis_labels(name, failing.ndim), axis_runs)


def change_text(name: str, changed: np.ndarray, value_before, value_after) -> str:
    """``k: 64 of 1088 values (shape [1, 2, 17, 32]: axis 0 all 1, ...), first k[0, 0, 16, 0]: 0.53 -> 0.0`` for
    the boolean ``changed`` of an input a call wrote into (at least one True); ``value_before(index)`` /
    ``value_after(index)`` give the element there before and after the call."""
    first = tuple(int(i) for i in np.argwhere(changed)[0])
    return (f"{name}: {int(changed.sum())} of {changed.size} values (shape {list(changed.shape)}: "
            f"{axes_text(changed)}), first {name}{list(first)}: {value_before(first)!r} -> {value_after(first)!r}")
