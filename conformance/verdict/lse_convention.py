"""LSE conventions (SEMANTICS.md §21): convert what an adapter returns to the contract's natural-log [B, Hq, Lq].

An adapter declares its convention in `Capabilities` (``lse_base``: ``"e"`` or ``"2"``; ``lse_layout``:
``"bhs"`` [B, Hq, Lq], ``"hs_total"`` [Hq, total_q] or ``"total_h"`` [total_q, Hq] with the rows of every
sequence packed one after another, ``cu_seqlens_q`` style) and returns the LSE as its kernel wrote it; the
judge converts with `to_contract` before comparing. Empty-row conventions (-inf / +inf, §8) are judged
separately, by name. The conversion is exact up to one rounding (the product by ln 2).
"""

from __future__ import annotations

import math

import numpy as np

from attention_conformance.cases.case import Case

__all__ = ["LSE_BASES", "LSE_LAYOUTS", "packed_lengths", "to_contract"]

LSE_BASES = ("e", "2")
LSE_LAYOUTS = ("bhs", "hs_total", "total_h")


def packed_lengths(case: Case) -> list[int]:
    """Query rows per sequence in a packed layout: ``seqlens_q`` (varlen) or ``Lq`` for every batch."""
    if case.seqlens_q is not None:
        return [int(n) for n in case.seqlens_q]
    return [case.Lq] * case.B


def to_contract(lse, case: Case, base: str = "e", layout: str = "bhs") -> np.ndarray:
    """The adapter's LSE as the contract's: float64 [B, Hq, Lq], natural log; padded rows of a packed layout -inf.

    ValueError (one line, naming ``lse_base`` / ``lse_layout`` and the shapes) for an unknown convention or an
    LSE whose shape does not match the declared layout.
    """
    if base not in LSE_BASES:
        raise ValueError(f"lse_base={base!r} is not a known LSE base {LSE_BASES} (SEMANTICS.md §21)")
    if layout not in LSE_LAYOUTS:
        raise ValueError(f"lse_layout={layout!r} is not a known LSE layout {LSE_LAYOUTS} (SEMANTICS.md §21)")
    x = np.asarray(lse, dtype=np.float64)
    B, H, Lq = case.B, case.Hq, case.Lq
    if layout == "bhs":
        if x.shape != (B, H, Lq):
            raise ValueError(f"lse of shape {list(x.shape)} does not match lse_layout='bhs' [B, Hq, Lq] = "
                             f"{[B, H, Lq]} (SEMANTICS.md §21)")
        out = x.copy()
    else:
        lens = packed_lengths(case)
        total = sum(lens)
        want = (H, total) if layout == "hs_total" else (total, H)
        if x.shape != want:
            name = "[Hq, total_q]" if layout == "hs_total" else "[total_q, Hq]"
            raise ValueError(f"lse of shape {list(x.shape)} does not match lse_layout={layout!r} {name} = "
                             f"{list(want)} (total_q = sum of the query lengths {lens}, SEMANTICS.md §21)")
        rows = x if layout == "hs_total" else x.T
        out = np.full((B, H, Lq), -np.inf)
        start = 0
        for b, n in enumerate(lens):
            out[b, :, :n] = rows[:, start:start + n]
            start += n
    if base == "2":
        out = out * math.log(2.0)
    return out
