"""Pair coverage of a profile: which claimable pairs of feature values meet in at least one case.

A *pair* is two values of two different features of `conformance.cases.features.PAIRWISE` (e.g. window=left
with heads=gqa). It is *claimable* when the two values may meet (no `conformance.cases.features.CONSTRAINTS`
entry forbids them, directly or through a third feature) and the declared `Capabilities` of at least one
built-in adapter (`conformance.adapters.BUILTIN`, on any device it declares, CUDA ones included: the
declarations are static) claim a case holding both: `conformance.adapters.base.capability_reason` is
None for a witness case (the pair completed with plain values, realized like a ``pairs`` case, at every
head dim the adapter declares). A pair is *covered* by a profile when one of its cases holds it and some
built-in adapter's capabilities claim that whole case. `profile_coverage` returns both sets;
`render_matrix` prints the feature x feature matrix of ``python -m attention_conformance cases --coverage``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from attention_conformance.adapters.base import Capabilities, capability_reason
from attention_conformance.cases import covering, features
from attention_conformance.cases.case import Case

__all__ = ["Coverage", "Pair", "declared_capabilities", "claimable_pairs", "case_pairs", "profile_coverage",
           "render_matrix", "pair_text"]

Pair = covering.Pair


@dataclass
class Coverage:
    """The pair coverage of one profile."""

    profile: str
    cases: int
    claimable: set[Pair]
    covered: set[Pair]  # claimable pairs some claimed case holds
    unclaimed_cases: list[str] = field(default_factory=list)  # ids of cases no built-in adapter claims

    @property
    def missing(self) -> list[Pair]:
        order = [f.name for f in features.PAIRWISE]
        return sorted(self.claimable - self.covered, key=lambda p: (order.index(p[0][0]), order.index(p[1][0]), p))

    def summary(self) -> str:
        n, k = len(self.claimable), len(self.covered)
        pct = 100.0 * k / n if n else 100.0
        return (f"pair coverage, profile {self.profile}: {k}/{n} claimable pairs covered ({pct:.1f}%), "
                f"{len(self.missing)} missing; {self.cases} cases, {len(features.PAIRWISE)} features")


def pair_text(p: Pair) -> str:
    (a, x), (b, y) = p
    return f"{a}={x} x {b}={y}"


def _factors() -> list[tuple[str, tuple[str, ...]]]:
    return [(f.name, f.values) for f in features.PAIRWISE]


def _allowed(a: str, x: str, b: str, y: str) -> bool:
    return features.forbidden(a, x, b, y) is None


@functools.lru_cache(maxsize=1)
def declared_capabilities() -> tuple[tuple[str, Capabilities], ...]:
    """(adapter name, capabilities) of every built-in adapter, one entry per distinct declaration.

    Adapters whose capabilities differ by device (``caps_for(device)``, e.g. torch SDPA on CPU vs CUDA)
    contribute one entry per device. An adapter whose module cannot be imported here contributes nothing.
    """
    from attention_conformance.adapters import BUILTIN
    from attention_conformance.adapters.registry import load

    out: list[tuple[str, Capabilities]] = []
    for name in BUILTIN:
        adapter = load(name, "cpu").adapter
        if adapter is None:
            continue
        found: list[Capabilities] = []
        caps_for = getattr(adapter, "caps_for", None)
        if callable(caps_for):
            for device in ("cpu", "cuda"):
                caps = caps_for(device)
                if caps is not None:
                    found.append(caps)
        found.append(adapter.capabilities)
        for caps in dict.fromkeys(found):
            out.append((name, caps))
    return tuple(out)


def _head_dim_variants(case: Case, caps: Capabilities) -> Iterable[Case]:
    """The case, or (for an adapter with fixed head dims) the case at each declared (d, dv) keeping dv vs d."""
    if caps.head_dims is None:
        yield case
        return
    want = features.dv_relation(case.d, case.dv)
    for d in sorted(caps.head_dims):
        for dv in sorted(caps.head_dims):
            if features.dv_relation(d, dv) == want:  # before building the variant: most (d, dv) differ
                yield case.replace(d=d, dv=dv)


def _claims(caps: Capabilities, case: Case, exact: bool) -> bool:
    variants = [case] if exact else _head_dim_variants(case, caps)
    return any(capability_reason(caps, v, dev) is None for v in variants for dev in sorted(caps.devices))


@functools.lru_cache(maxsize=1)
def claimable_pairs() -> frozenset[Pair]:
    """Every pair that may meet and that some built-in adapter's declared capabilities claim together."""
    factors = _factors()
    caps = [c for _, c in declared_capabilities()]
    out = set()
    for pair in covering.reachable_pairs(factors, _allowed):
        (a, x), (b, y) = pair
        row = covering.completion({a: x, b: y}, factors, _allowed)
        assert row is not None  # reachable
        witness = features.realize("witness", row)
        if any(_claims(c, witness, exact=False) for c in caps):
            out.add(pair)
    return frozenset(out)


def case_pairs(case: Case) -> set[Pair]:
    """The pairs of feature values ``case`` holds."""
    return covering.pairs_of(features.values_of(case), [f.name for f in features.PAIRWISE])


def profile_coverage(profile: str, cases: Sequence[Case] | None = None) -> Coverage:
    """Coverage of the claimable pairs by the cases of ``profile`` (or by ``cases``)."""
    from attention_conformance.cases import catalog

    cases = catalog.cases(profile) if cases is None else list(cases)
    caps = [c for _, c in declared_capabilities()]
    claimable = set(claimable_pairs())
    covered: set[Pair] = set()
    unclaimed = []
    for case in cases:
        if not any(_claims(c, case, exact=True) for c in caps):
            unclaimed.append(case.id)
            continue
        covered |= case_pairs(case) & claimable
    return Coverage(profile, len(cases), claimable, covered, unclaimed)


def render_matrix(cov: Coverage, show_missing: int = 1000) -> str:
    """The feature x feature matrix (covered/claimable value pairs per cell), then the missing pairs."""
    names = [f.name for f in features.PAIRWISE]
    cells: dict[tuple[str, str], list[int]] = {}
    for (a, _), (b, _) in cov.claimable:
        cells.setdefault((a, b), [0, 0])[1] += 1
    for (a, _), (b, _) in cov.covered:
        cells[(a, b)][0] += 1
    width = max(len(n) for n in names)
    col = max(7, max(len(n) for n in names[1:]) + 1)
    lines = [cov.summary(), "", " " * (width + 1) + "".join(n.rjust(col) for n in names[1:])]
    for i, a in enumerate(names[:-1]):
        row = []
        for j, b in enumerate(names[1:], start=1):
            if j <= i:
                row.append("".rjust(col))
                continue
            k, n = cells.get((a, b), [0, 0])
            txt = "-" if n == 0 else (f"{k}/{n}" if k < n else f"{n}/{n}")
            row.append(txt.rjust(col))
        lines.append(a.ljust(width + 1) + "".join(row))
    missing = cov.missing
    lines += ["", f"missing claimable pairs ({len(missing)}):" if missing else "missing claimable pairs: none"]
    lines += [f"  {pair_text(p)}" for p in missing[:show_missing]]
    if len(missing) > show_missing:
        lines.append(f"  ... and {len(missing) - show_missing} more")
    if cov.unclaimed_cases:
        lines.append(f"cases no built-in adapter claims (not counted): {len(cov.unclaimed_cases)}")
    return "\n".join(lines)
