"""The score pipeline of one query block (SEMANTICS.md §2, §3, §6) and the block schedule.

For a (batch b, query head h) pair and query rows ``[r0, r1)`` this builds, in FP64,

    s = scale * q k^T                  (§2; evaluated as (scale * q) k^T)
    s = c * tanh(s / c)                if softcap c is set (§3)
    s = s + bias                       if bias is set (§3, §6)
    s = -inf where not visible         visibility of §4, §5, §7, §19 and the boolean mask of §6

over the keys ``[lo, hi)`` that some row of the block can see (`oracles.masking.key_range`): padded
keys and keys outside every row's causal/window range are never read (§7).
Only one ``[rows x Lk]`` block is alive per call (the memory contract of the oracle).
"""

from __future__ import annotations

import numpy as np

from .masking import block_invisible
from .validate import Problem

__all__ = ["BLOCK_ELEMENTS", "row_blocks", "score_block"]

# Target size of one score block in float64 elements (64 MiB): large enough for efficient GEMMs
# (measured on 2 shared cores: 64-256-row blocks cost 3-15x under load, the BLAS threads spin),
# small enough for the 1 GiB budget at L=16384 (512-row blocks).
BLOCK_ELEMENTS = 1 << 23


def row_blocks(sq: int, sk: int, budget: int | None = None) -> list[tuple[int, int]]:
    """Split query rows ``[0, sq)`` into blocks of about ``budget / sk`` rows (at least 8, at most sq)."""
    budget = BLOCK_ELEMENTS if budget is None else budget
    rows = max(8, budget // max(sk, 1))
    rows = min(rows, max(sq, 1))
    return [(r, min(r + rows, sq)) for r in range(0, sq, rows)]


def score_block(
    p: Problem, b: int, h: int, r0: int, r1: int, lo: int, hi: int, qs: np.ndarray, k: np.ndarray,
    *, keep_tanh: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Scores ``[r1 - r0, hi - lo]`` of query head h, batch b, keys ``[lo, hi)``, ``-inf`` where invisible (§3).

    ``qs`` is ``scale * q[b, h]`` and ``k`` is ``k[b, h // group]`` (prepared once per head by the
    caller); ``[lo, hi)`` comes from `oracles.masking.key_range`, so keys outside it (invisible to
    every row of the block, weight exactly 0) are never scored. When ``keep_tanh`` is true and
    softcap is set, also returns ``tanh(r / c)`` before bias and masking, which the backward pass
    needs for ``ds/dr = 1 - tanh^2`` (§13).
    """
    sq, sk = int(p.seqlens_q[b]), int(p.seqlens_k[b])
    s = qs[r0:r1] @ k[lo:hi].T
    t = None
    if p.softcap is not None:
        s /= p.softcap
        np.tanh(s, out=s)
        if keep_tanh:
            t = s.copy()
        s *= p.softcap
    if p.bias is not None:
        s += p.bias[b, h, r0:r1, lo:hi]
    inv = block_invisible(
        r0, r1, lo, hi, sq=sq, sk=sk, causal=p.causal, alignment=p.alignment, window=p.window, chunk=p.chunk
    )
    if p.mask is not None:
        hidden = ~p.mask[b, h, r0:r1, lo:hi]
        inv = hidden if inv is None else (inv | hidden)
    if inv is not None:
        np.copyto(s, -np.inf, where=inv)
    return s, t
