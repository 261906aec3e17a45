"""A deterministic pairwise covering design (greedy, AETG-style) under pairwise constraints.

`covering_rows(factors, allowed)` returns rows (one value per factor) such that every *reachable* pair
of values of two factors occurs in at least one row, where a pair is reachable when some full row
holds it and every two values of that row are ``allowed`` together. Rows are built one at a time: a
few candidate rows start from different uncovered pairs and visit the other factors in different
orders, each factor taking the value that covers the most uncovered pairs and keeps the row completable;
the candidate covering the most pairs is kept. No random numbers: the same factors give the same rows on
every machine. The conformance catalog's ``pairs`` family is built with it over
`conformance.cases.features.PAIRWISE` and `conformance.cases.features.CONSTRAINTS`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

__all__ = ["Pair", "covering_rows", "pairs_of", "completion", "reachable_pairs"]

#: ((factor, value), (factor, value)) with the first factor earlier in the factor order
Pair = tuple[tuple[str, str], tuple[str, str]]
Allowed = Callable[[str, str, str, str], bool]


def pairs_of(row: Mapping[str, str], order: Sequence[str]) -> set[Pair]:
    """Every pair of values the (partial) row holds, factors in ``order``."""
    names = [n for n in order if n in row]
    return {((a, row[a]), (b, row[b])) for i, a in enumerate(names) for b in names[i + 1:]}


def completion(partial: Mapping[str, str], factors: Sequence[tuple[str, Sequence[str]]],
               allowed: Allowed) -> dict[str, str] | None:
    """A full row extending ``partial`` with every two values allowed together (earliest values first), or None."""
    return _complete(partial, factors, _conflicts(allowed, _frozen(factors)))


_Conflicts = Mapping[tuple[str, str], frozenset[tuple[str, str]]]


class _Table(NamedTuple):
    every: _Conflicts  #: (a, x) -> the (b, y) with not allowed(a, x, b, y)
    later: _Conflicts  #: the same, b after a by name only


def _frozen(factors: Sequence[tuple[str, Sequence[str]]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((n, tuple(vals)) for n, vals in factors)


@functools.lru_cache(maxsize=8)
def _conflicts(allowed: Allowed, factors: tuple[tuple[str, tuple[str, ...]], ...]) -> _Table:
    """For each (factor, value), the values of the other factors that ``allowed(factor, value, other, value)``
    rejects: every question `completion` asks, answered once and in the same argument order, so that testing a value
    against a row's is one set operation instead of a call per pair (the catalog's design, built in every process
    that lists cases: 0.50 -> 0.25 s, the same rows)."""
    every = {(a, x): frozenset((b, y) for b, vb in factors if b != a for y in vb if not allowed(a, x, b, y))
             for a, va in factors for x in va}
    return _Table(every, {k: frozenset(p for p in bad if k[0] < p[0]) for k, bad in every.items()})


def _complete(partial: Mapping[str, str], factors: Sequence[tuple[str, Sequence[str]]],
              conflicts: _Table) -> dict[str, str] | None:
    """`completion` with the conflicts tabled."""
    row = dict(partial)
    held = row.items()
    # two fixed values asked about once, the factor earlier by name first (as `allowed(a, va, b, vb)` with a < b)
    if any(not conflicts.later[p].isdisjoint(held) for p in held):
        return None
    # each open factor's values allowed with the fixed ones, then a search over the open factors only
    todo = [(n, [v for v in vals if conflicts.every[(n, v)].isdisjoint(held)]) for n, vals in factors if n not in row]
    if any(not vals for _, vals in todo):
        return None
    chosen: list[tuple[str, str]] = []

    def extend(i: int) -> bool:
        if i == len(todo):
            return True
        name, vals = todo[i]
        for v in vals:
            if conflicts.every[(name, v)].isdisjoint(chosen):
                chosen.append((name, v))
                if extend(i + 1):
                    return True
                chosen.pop()
        return False

    if not extend(0):
        return None
    row.update(chosen)
    return row


def reachable_pairs(factors: Sequence[tuple[str, Sequence[str]]], allowed: Allowed) -> set[Pair]:
    """Every pair of values of two factors that some full, allowed row holds."""
    names = [n for n, _ in factors]
    conflicts = _conflicts(allowed, _frozen(factors))
    out: set[Pair] = set()
    for i, (a, va) in enumerate(factors):
        for b, vb in factors[i + 1:]:
            for x in va:
                for y in vb:
                    if allowed(a, x, b, y) and _complete({a: x, b: y}, factors, conflicts) is not None:
                        out.add(((a, x), (b, y)))
    assert all(names.index(p[0][0]) < names.index(p[1][0]) for p in out)
    return out


def covering_rows(factors: Sequence[tuple[str, Sequence[str]]], allowed: Allowed, candidates: int = 6,
                  must: set[Pair] | None = None) -> list[dict[str, str]]:
    """Rows covering every pair of ``must`` (default: every reachable pair), greedily, deterministically."""
    order = [n for n, _ in factors]
    values = dict(factors)
    targets = set(reachable_pairs(factors, allowed) if must is None else must)
    conflicts = _conflicts(allowed, _frozen(factors))
    memo: dict[frozenset, bool] = {}

    def completable(row: Mapping[str, str]) -> bool:
        key = frozenset(row.items())
        if key not in memo:
            memo[key] = _complete(row, factors, conflicts) is not None
        return memo[key]

    rows: list[dict[str, str]] = []
    while targets:
        ranked = sorted(targets, key=lambda p: (order.index(p[0][0]), order.index(p[1][0]), p))
        load = {n: 0 for n in order}
        for (a, _), (b, _) in targets:
            load[a] += 1
            load[b] += 1
        visit = sorted(order, key=lambda n: (-load[n], order.index(n)))
        best: dict[str, str] | None = None
        best_gain = -1
        for c in range(max(1, min(candidates, len(ranked)))):
            (a, x), (b, y) = ranked[c * len(ranked) // max(1, min(candidates, len(ranked)))]
            row = {a: x, b: y}
            if not completable(row):
                continue
            rest = [n for n in visit[c % len(visit):] + visit[:c % len(visit)] if n not in row]
            for name in rest:
                choice, choice_gain = None, -1
                for v in values[name]:
                    if not completable(dict(row, **{name: v})):
                        continue
                    gain = sum(1 for other, ov in row.items()
                               if _key(order, name, v, other, ov) in targets)
                    if gain > choice_gain:
                        choice, choice_gain = v, gain
                assert choice is not None  # the row was completable before this factor
                row[name] = choice
            gain = len(pairs_of(row, order) & targets)
            if gain > best_gain:
                best, best_gain = row, gain
        if best is None or best_gain <= 0:
            raise ValueError(f"covering_rows: {len(targets)} target pairs cannot be covered, e.g. {ranked[0]}")
        rows.append({n: best[n] for n in order})
        targets -= pairs_of(best, order)
    return rows


def _key(order: Sequence[str], f1: str, v1: str, f2: str, v2: str) -> Pair:
    return ((f1, v1), (f2, v2)) if order.index(f1) < order.index(f2) else ((f2, v2), (f1, v1))
