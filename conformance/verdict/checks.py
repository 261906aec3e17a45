"""Checks of one adapter result against the oracle: values, LSE, gradients, and everything beyond values.

Each check returns a `QuantityStats` (for value comparisons) and/or a failure message that stands
alone: it names the quantity, the shape, the index, the error, the tolerance there, and the case.
Semantics: SEMANTICS.md §8 (fully masked rows), §12 (LSE), §13 (backward); the bounds:
conformance/TOLERANCES.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from attention_conformance.verdict import numfmt
from attention_conformance.verdict.locate import MAX_STORED_RUNS, change_text, failing_runs, where_failing

__all__ = [
    "QuantityStats",
    "compare_values",
    "compare_lse",
    "bitwise_equal",
    "changed_arrays",
    "array_change",
    "quality_warning",
    "QUALITY_FACTOR",
    "QUALITY_MIN_USAGE",
]

#: secondary criterion: an error more than this times the naive same-precision error is a warning
QUALITY_FACTOR = 2.0
#: ... but only when the error also uses at least this fraction of the bound somewhere (noise floor)
QUALITY_MIN_USAGE = 0.25


@dataclass
class QuantityStats:
    """Error statistics of one output quantity (out, lse, dq, dk, dv)."""

    name: str
    shape: tuple[int, ...]
    compared: int = 0
    max_err: float = 0.0
    max_err_index: tuple[int, ...] | None = None
    tol_at_max_err: float | None = None
    max_ratio: float = 0.0  # usage ratio: max over elements of error / tolerance
    max_ratio_index: tuple[int, ...] | None = None
    err_at_max_ratio: float | None = None
    tol_at_max_ratio: float | None = None
    got_at_max_ratio: float | None = None
    ref_at_max_ratio: float | None = None
    naive_max_err: float | None = None
    nonfinite: int = 0  # compared elements that are NaN/Inf where the oracle is finite
    nonfinite_index: tuple[int, ...] | None = None  # the first of them
    nonfinite_batches: list[int] = field(default_factory=list)  # batch entries (axis 0) holding them
    nonfinite_value: float | None = None  # the value at nonfinite_index (nan, inf or -inf)
    failing: int = 0  # compared elements over their bound or non-finite where the oracle is finite
    where: str | None = None  # where those lie (`locate.where_failing`)
    #: the same per axis as runs [[first, last], ...] (`locate.failing_runs`; 3-d and 4-d quantities), for pictures
    failing_runs: list | None = None
    ok: bool = True

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("shape", "max_err_index", "max_ratio_index", "nonfinite_index"):
            if d[key] is not None:
                d[key] = [int(x) for x in d[key]]
        return d


def _idx(flat: int, shape) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape))


def _nonfinite_sentence(name: str, got: np.ndarray, ref: np.ndarray, bad: np.ndarray, compared: int) -> str:
    """``out: all 5760 compared values are NaN ...`` / ``out: 12 of 5760 compared values are non-finite ...``."""
    n = int(bad.sum())
    vals = got[bad]
    nan, pinf = int(np.isnan(vals).sum()), int(np.isposinf(vals).sum())
    ninf = n - nan - pinf
    kinds = [f"{c} {w}" for c, w in ((nan, "NaN"), (pinf, "+inf"), (ninf, "-inf")) if c]
    k = _idx(int(np.argmax(bad)), bad.shape)
    first = f"first at {name}{numfmt.index(k)}: got {numfmt.value(got[k])}, oracle {numfmt.value(ref[k])}"
    if n == compared:
        what = "NaN" if nan == n else "+inf" if pinf == n else "-inf" if ninf == n else "non-finite (" + \
            ", ".join(kinds) + ")"
        head = f"{name}: all {n} compared values are {what} where the oracle is finite"
    elif len(kinds) == 1:
        head = f"{name}: {n} of {compared} compared values are {kinds[0].split(' ')[1]} where the oracle is finite"
    else:
        head = (f"{name}: {n} of {compared} compared values are non-finite ({', '.join(kinds)}) where the oracle "
                "is finite")
    return f"{head}; {first} (shape {list(ref.shape)})"


def _bound_sentence(stats: QuantityStats, shape) -> str:
    return (f"error {numfmt.approx(stats.err_at_max_ratio)} > tolerance {numfmt.approx(stats.tol_at_max_ratio)} "
            f"(usage {numfmt.approx(stats.max_ratio)}) at index {numfmt.index(stats.max_ratio_index)} of shape "
            f"{list(shape)}: got {numfmt.value(stats.got_at_max_ratio)}, oracle "
            f"{numfmt.value(stats.ref_at_max_ratio)}; max abs error {numfmt.approx(stats.max_err)} at "
            f"{numfmt.index(stats.max_err_index)}")


def compare_values(
    name: str, got: np.ndarray | None, ref: np.ndarray, tol: np.ndarray, rows: np.ndarray | None = None,
    naive: np.ndarray | None = None,
) -> tuple[QuantityStats, str | None]:
    """Compare ``got`` with the oracle's ``ref`` element-wise under ``tol``.

    ``rows`` (bool, broadcastable to ref) selects the compared elements (padded query rows are not
    compared, SEMANTICS.md §7). NaN/Inf where the oracle is finite always fails; the message then says
    so first ("all 5760 compared values are NaN"), then what the finite values do. Values print with
    `conformance.verdict.numfmt.value` (round-trip repr), so got and oracle never print alike when they differ.
    """
    stats = QuantityStats(name=name, shape=tuple(ref.shape))
    if got is None:
        stats.ok = False
        return stats, f"{name}: the adapter returned nothing (expected shape {list(ref.shape)})"
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        stats.ok = False
        return stats, f"{name}: shape {list(got.shape)} != expected {list(ref.shape)}"
    sel = np.ones(ref.shape, dtype=bool) if rows is None else np.broadcast_to(rows, ref.shape)
    stats.compared = int(sel.sum())
    bad = sel & np.isfinite(ref) & ~np.isfinite(got)
    _add_nonfinite(stats, got, bad)
    with np.errstate(invalid="ignore"):
        err = np.where(sel & np.isfinite(got), np.abs(got - ref), 0.0)
        ratio = np.where(sel & np.isfinite(got), err / tol, 0.0)
    if naive is not None:
        stats.naive_max_err = float(np.where(sel, np.abs(naive - ref), 0.0).max(initial=0.0))
    if err.size:
        i = int(np.argmax(err))
        stats.max_err = float(err.flat[i])
        stats.max_err_index = _idx(i, err.shape)
        stats.tol_at_max_err = float(tol.flat[i])
        j = int(np.argmax(ratio))
        stats.max_ratio = float(ratio.flat[j])
        stats.max_ratio_index = _idx(j, ratio.shape)
        stats.err_at_max_ratio = float(err.flat[j])
        stats.tol_at_max_ratio = float(tol.flat[j])
        stats.got_at_max_ratio = float(got.flat[j])
        stats.ref_at_max_ratio = float(ref.flat[j])
    parts = []
    if stats.nonfinite:
        parts.append(_nonfinite_sentence(name, got, ref, bad, stats.compared))
    if stats.max_ratio > 1.0:
        parts.append(("the finite values: " if parts else f"{name}: ") + _bound_sentence(stats, ref.shape))
    elif parts and stats.compared > stats.nonfinite:
        parts.append(f"the finite values are within the bound (usage {numfmt.approx(stats.max_ratio)})")
    if parts:
        stats.ok = False
        failing = bad | (ratio > 1.0)
        stats.failing = int(failing.sum())
        found = failing_runs(failing) if failing.ndim in (3, 4) else None  # one pass: the text and the picture
        stats.where = where = where_failing(name, failing, stats.compared, found)
        if where is not None:
            stats.failing_runs = [r[:MAX_STORED_RUNS] for r in found]
        return stats, "; ".join(parts + ([where] if where else []))
    return stats, None


def compare_lse(
    got: np.ndarray | None, ref: np.ndarray, tol: np.ndarray, rows: np.ndarray, declared: str = "-inf"
) -> tuple[QuantityStats, str | None, list[str]]:
    """LSE check (SEMANTICS.md §12) plus the fully-masked-row convention (§8), reported by name.

    Rows where the oracle LSE is -inf must be -inf; +inf there is the FA2 convention and is recorded
    as the finding ``lse_convention:+inf`` (not a failure) *when the adapter declares it*
    (`ForwardOutput.lse_convention == "+inf"`); an adapter that declares -inf and writes +inf has its
    sign wrong and fails, as does any other value. An adapter that wrote a finite convention and mapped
    it to -inf itself (``declared`` = that value, e.g. ``"0"``) is reported as ``lse_convention:0``.
    """
    findings: list[str] = []
    if got is None:
        return QuantityStats(name="lse", shape=tuple(ref.shape), ok=False), "lse: declared but not returned", findings
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        st = QuantityStats(name="lse", shape=tuple(ref.shape), ok=False)
        return st, f"lse: shape {list(got.shape)} != expected {list(ref.shape)}", findings
    empty = rows & np.isneginf(ref)
    finite_rows = rows & np.isfinite(ref)
    msg = None
    nan_empty = None  # fully masked rows whose LSE is NaN, where every wrong one is: counted as non-finite below
    if empty.any():
        g = got[empty]
        if np.isposinf(g).all():
            findings.append("lse_convention:+inf")
            if declared != "+inf":
                k = tuple(int(i) for i in np.argwhere(empty)[0])
                msg = (f"lse: fully masked row {list(k)} has LSE = +inf but the adapter declares the "
                       f"{declared!r} convention (SEMANTICS.md §8: -inf; +inf only where declared, as FA2 does)")
        elif np.isneginf(g).all():
            # a finite vendor convention the adapter mapped to -inf (e.g. "0", torch's CPU flash op) keeps its name
            findings.append("lse_convention:-inf" if declared in ("-inf", "+inf") else f"lse_convention:{declared}")
        else:
            bad = empty & ~np.isneginf(got) & ~np.isposinf(got)
            if not bad.any():
                findings.append("lse_convention:mixed")
            else:
                k = tuple(int(i) for i in np.argwhere(bad)[0])
                msg = (f"lse: fully masked row {list(k)} must have LSE = -inf (SEMANTICS.md §8); got "
                       f"{numfmt.value(got[k])} (shape {list(ref.shape)})")
                if np.isnan(got[bad]).all():
                    nan_empty = bad
        if declared == "+inf" and "lse_convention:+inf" not in findings and msg is None:
            findings.append("lse_convention:declared_+inf_but_-inf_seen")
    safe_ref = np.where(np.isfinite(ref), ref, 0.0)
    stats, msg2 = compare_values("lse", np.where(finite_rows, got, 0.0), safe_ref, tol, rows=finite_rows)
    if msg is not None:
        stats.ok = False
    if nan_empty is not None:
        # NaN is graded like NaN anywhere (the judge asks whether planted NaN could reach it, SEMANTICS.md §17):
        # a keyless row of a padded sequence sees only masked-out padding, where a case may have planted NaN
        _add_nonfinite(stats, got, nan_empty)
    return stats, msg or msg2, findings


def _add_nonfinite(stats: QuantityStats, got: np.ndarray, bad: np.ndarray) -> None:
    """Count the NaN / Inf elements ``bad`` of ``got`` among `stats`'s non-finite ones: `compare_values`' compared
    elements, and `compare_lse`'s NaN on rows with no visible key after them (the index and value of the first kept,
    the batch entries joined)."""
    n = int(bad.sum())
    if n == 0:
        return
    if stats.nonfinite_index is None:
        stats.nonfinite_index = _idx(int(np.argmax(bad)), bad.shape)
        stats.nonfinite_value = float(got[stats.nonfinite_index])
    stats.nonfinite += n
    stats.failing += n
    if bad.ndim >= 1:
        batches = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))
        stats.nonfinite_batches = sorted(set(stats.nonfinite_batches) | {int(b) for b in batches})


def quality_warning(stats: QuantityStats) -> str | None:
    """Secondary criterion: worse than 2x the naive same-precision implementation (TOLERANCES.md §5)."""
    if stats.naive_max_err is None or not stats.ok:
        return None
    if stats.max_err > QUALITY_FACTOR * stats.naive_max_err and stats.max_ratio >= QUALITY_MIN_USAGE:
        return (f"{stats.name}: max error {numfmt.approx(stats.max_err)} > {QUALITY_FACTOR:g} x the naive "
                f"same-precision implementation's {numfmt.approx(stats.naive_max_err)} (bound usage "
                f"{numfmt.approx(stats.max_ratio)})")
    return None


def bitwise_equal(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """True when both are None or have identical bits (NaN payloads included)."""
    if a is None or b is None:
        return a is None and b is None
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def changed_arrays(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> list[str]:
    """Names of arrays whose bits changed between two snapshots (the input-mutation check)."""
    changed = [n for n, a in before.items() if n not in after or not bitwise_equal(a, after[n])]
    return changed + [n for n in after if n not in before]


def array_change(name: str, before: np.ndarray, after: np.ndarray | None) -> str:
    """Which values of array ``name`` changed between two snapshots and where (``q: 3 of 96 values (shape [1, 2, 3,
    16]: axis 0 all 1, ...), first q[0, 0, 2, 0]: 0.5 -> 0.0``), bit for bit (a NaN left in place is no change)."""
    if after is None:
        return f"{name}: no longer there"
    a, b = np.ascontiguousarray(before), np.ascontiguousarray(after)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{name}: {list(a.shape)} {a.dtype} became {list(b.shape)} {b.dtype}"
    if a.ndim == 0 or a.dtype.itemsize not in (1, 2, 4, 8):
        return f"{name}: changed"
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return change_text(name, a.view(bits) != b.view(bits), lambda i: a[i].item(), lambda i: b[i].item())
