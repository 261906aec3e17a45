"""A smaller case that still fails: ``repro CASE --impl NAME --shrink``.

The catalog's cases are chosen to cover features, not to be minimal, and a kernel engineer wants the smallest input
that shows a bug (the question the harness answers). `shrink` searches greedily: it tries the reductions of
`reductions` in order (one batch entry; the fewest heads that keep the case's GQA ratio class; shorter query and key
lengths, halved, a tile of 64 less, one less; smaller head dims), keeps the first one that still fails, and starts
again from it, until none does or ``max_tries`` calls were made. Whether a case fails is the caller's predicate (the
CLI runs the adapter through the engine and asks for the case's own outcome again: a FAIL stays a FAIL, so a
reduction the adapter declines or the harness cannot run does not count). Every field other than the sizes stays as
it was (the features, the seed, the distribution, a window or chunk); varlen lengths are clamped to the shorter
sequences, and a reduction the case model rejects (`Case.__post_init__`: KV-append lengths, ...) is skipped.

Like Hypothesis's shrinking for the property suite, the result is a local minimum of the order above; the inputs of
a reduced case are its own (drawn from the same seed for its shapes), so a failure that needs particular values
may stop at a larger case than one that needs a shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from attention_conformance.cases.case import Case

__all__ = ["ShrinkResult", "reductions", "shrink", "size"]

#: head dims a reduction tries, smallest first
HEAD_DIMS = (8, 16, 32, 64)


def size(case: Case) -> int:
    """What the search minimises: the score and output elements (B x Hq x Lq x Lk x (d + dv))."""
    return case.B * case.Hq * max(case.Lq, 1) * max(case.Lk, 1) * (case.d + case.dv)


def _lengths(n: int) -> list[int]:
    """Shorter lengths to try for a sequence of ``n``, largest reduction first: 1, halved, a 64-key tile less (the
    tail's remainder kept), one less."""
    out = [1, n // 2, n - 64, n - 1]
    return [m for m in dict.fromkeys(out) if 1 <= m < n]


def _clamp(lengths: tuple[int, ...] | None, B: int, n: int) -> tuple[int, ...] | None:
    return None if lengths is None else tuple(min(s, n) for s in lengths[:B])


def _replace(case: Case, **kw) -> Case | None:
    try:
        return dataclasses.replace(case, **kw)
    except (ValueError, TypeError):
        return None


def reductions(case: Case) -> Iterator[Case]:
    """The cases one reduction smaller than ``case``, in the order `shrink` tries them."""
    if case.B > 1:
        yield _replace(case, B=1, seqlens_q=_clamp(case.seqlens_q, 1, case.Lq),
                       seqlens_k=_clamp(case.seqlens_k, 1, case.Lk),
                       kv_append=None if case.kv_append is None else case.kv_append[:1])
    ratio = case.Hq // case.Hkv
    fewer = (ratio, 1) if ratio > 1 else (1, 1)
    if (case.Hq, case.Hkv) != fewer and ratio > 2:
        yield _replace(case, Hq=2, Hkv=1)  # still GQA, the smallest group
    if (case.Hq, case.Hkv) != fewer:
        yield _replace(case, Hq=fewer[0], Hkv=fewer[1])
    for lq in _lengths(case.Lq):
        yield _replace(case, Lq=lq, seqlens_q=_clamp(case.seqlens_q, case.B, lq))
    for lk in _lengths(case.Lk):
        yield _replace(case, Lk=lk, seqlens_k=_clamp(case.seqlens_k, case.B, lk))
    for d in HEAD_DIMS:
        if d < case.d and case.dv == case.d:
            yield _replace(case, d=d, dv=d)
        elif d < case.d:
            yield _replace(case, d=d)
    for dv in HEAD_DIMS:
        if dv < case.dv and case.dv != case.d:
            yield _replace(case, dv=dv)


@dataclass
class ShrinkResult:
    """The smallest failing case found, the path to it (each accepted case) and the number of cases tried."""

    case: Case
    path: list[Case] = field(default_factory=list)
    tries: int = 0


def shrink(case: Case, fails: Callable[[Case], bool], *, max_tries: int = 200,
           progress: Callable[[str], None] | None = None) -> ShrinkResult:
    """Greedy search for a smaller case for which ``fails`` holds (see the module docstring); ``case`` itself is
    assumed to fail."""
    result = ShrinkResult(case=case, path=[case])
    improved = True
    while improved and result.tries < max_tries:
        improved = False
        for candidate in reductions(result.case):
            if candidate is None or size(candidate) >= size(result.case):
                continue
            if result.tries >= max_tries:
                break
            result.tries += 1
            if fails(candidate):
                result.case = candidate
                result.path.append(candidate)
                improved = True
                if progress is not None:
                    progress(f"still failing: {candidate.id} (size {size(candidate)}, {result.tries} tried)")
                break
    return result
