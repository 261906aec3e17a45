"""Case-side helpers of the adapters whose entry points each express part of the contract (FlashInfer, xformers).

A spelling of a vendor API (a function, a wrapper class, an ``attn_bias`` type) can say some cases in several
equivalent ways and others not at all. What lives here is about the *case*, never about one library:

- `sequence_lengths`: each sequence's query and key lengths (SEMANTICS.md §7).
- `equivalent_cases`: the forms of a case that describe the same attention (§4, §5): with every sequence square,
  top-left and bottom-right alignment are one mask (causal and windows); a causal mask that hides no key (one query
  row per sequence, bottom-right) is no mask. A spelling claims a case when it can express one of them.
- `kv_splits`: the key ranges of a split-KV call (§14).
- `mask_varies_over_heads`: whether a case's mask recipe differs between heads (APIs with one pattern for all heads).
- `union_capabilities`: what a per-case adapter claims when it picks, per case, among spellings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from attention_conformance.adapters.base import Capabilities
from attention_conformance.case import Case

__all__ = [
    "causal_hides_nothing",
    "equivalent_cases",
    "kv_splits",
    "mask_varies_over_heads",
    "sequence_lengths",
    "union_capabilities",
]


def sequence_lengths(case: Case) -> tuple[list[int], list[int]]:
    """(query lengths, key lengths) of each sequence (``seqlens_*``, else Lq / Lk for every batch entry)."""
    sq = [int(n) for n in case.seqlens_q] if case.seqlens_q is not None else [case.Lq] * case.B
    sk = [min(int(n), case.Lk) for n in case.seqlens_k] if case.seqlens_k is not None else [case.Lk] * case.B
    return sq, sk


def causal_hides_nothing(case: Case, alignment: str) -> bool:
    """True when a causal mask of `alignment` keeps every key of every query row (SEMANTICS.md §4): bottom-right with
    at most one query per sequence, top-left with at most one key."""
    sq, sk = sequence_lengths(case)
    if alignment == "bottom_right":
        return all(n <= 1 for n in sq)
    return all(n <= 1 for n in sk)


def equivalent_cases(case: Case) -> list[Case]:
    """`case` and the other forms of it that mean the same attention, in that order (see the module docstring)."""
    out = [case]
    if not case.causal and case.window is None:
        return out
    sq, sk = sequence_lengths(case)
    if all(a == b for a, b in zip(sq, sk, strict=True)):
        flipped = "top_left" if case.alignment == "bottom_right" else "bottom_right"
        out.append(case.replace(alignment=flipped))
    if case.causal and causal_hides_nothing(case, case.alignment):
        window = case.window
        if window is not None:  # causal forces right = 0; with every key left of the diagonal that bound is vacuous
            window = (window[0], None)
        out.append(case.replace(causal=False, window=window))
    return out


def kv_splits(n: int) -> list[tuple[int, int]]:
    """Three uneven, non-empty key ranges covering [0, n) (one range [0, n) when n < 3)."""
    if n < 3:
        return [(0, n)]
    cuts = [0, max(1, n // 5), max(2, (3 * n) // 5), n]
    return [(cuts[i], cuts[i + 1]) for i in range(3)]


def mask_varies_over_heads(case: Case) -> bool:
    """Whether the case's mask recipe gives each head its own pattern (the recipe's own output shape says so)."""
    if case.mask is None:
        return False
    from attention_conformance.inputs import make_mask

    tiny = case.replace(B=1, Lq=1, Lk=1, seqlens_q=None, seqlens_k=None, kv_append=None)
    return make_mask(tiny, np.random.default_rng(0)).shape[1] > 1


def union_capabilities(caps: Iterable[Capabilities]) -> Capabilities:
    """A capability set claiming what any of `caps` claims: sets joined, flags or-ed; a field the spellings
    disagree on is left at None where None means "no claim" (``memory``), otherwise ValueError."""
    caps = list(caps)
    if not caps:
        raise ValueError("union_capabilities of no capability sets")
    merged = {}
    for f in dataclasses.fields(Capabilities):
        values = [getattr(c, f.name) for c in caps]
        if any(v is None for v in values) and f.name == "head_dims":
            merged[f.name] = None  # one spelling takes any head dim
        elif isinstance(values[0], frozenset):
            merged[f.name] = frozenset().union(*values)
        elif isinstance(values[0], bool):
            merged[f.name] = any(values)
        elif len(set(values)) == 1:
            merged[f.name] = values[0]
        elif f.default is None:
            merged[f.name] = None
        else:
            raise ValueError(f"spellings disagree on Capabilities.{f.name}: {sorted(set(map(str, values)))}")
    return Capabilities(**merged)
