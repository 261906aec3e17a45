"""Which key each query sees: causal alignment, sliding window, varlen padding (SEMANTICS.md §4, §5, §7).

One rule, used by every dense oracle path. For batch b with real lengths ``sq = seqlens_q[b]`` and
``sk = seqlens_k[b]``, query row i and key column j, let the *aligned diagonal* be

    c(i) = i + (sk - sq)   if alignment == "bottom_right"   (§4; flash-attn, cuDNN lower-right)
    c(i) = i               if alignment == "top_left"       (§4; torch is_causal)

Key j is visible to query i iff all of

    i < sq and j < sk                       (§7: padded rows / keys never take part)
    j <= c(i)                 if causal     (§4)
    j >= c(i) - left          if left  is not None   (§5)
    j <= c(i) + right         if right is not None   (§5)
    c(i) // chunk == j // chunk   if chunk is not None  (§19; floor division, so c(i) < 0 sees no key)

so ``causal=True`` with ``window=(left, right)`` is the same as ``causal=False`` with
``window=(left, 0)`` for every ``right >= 0`` (§5). The boolean ``mask`` and ``-inf`` bias entries
(§6) are applied on top of this by the callers.
"""

from __future__ import annotations

import numpy as np

from .validate import ALIGNMENTS, _check_window, check_chunk

__all__ = ["visibility", "block_visibility", "block_invisible", "key_range", "diagonal_offset", "chunk_index"]


def diagonal_offset(sq: int, sk: int, alignment: str) -> int:
    """``c(i) - i`` for a sequence with real lengths sq, sk (§4)."""
    if alignment == "bottom_right":
        return int(sk) - int(sq)
    if alignment == "top_left":
        return 0
    raise ValueError(f"alignment must be one of {ALIGNMENTS} (§4); got {alignment!r}")


def chunk_index(pos, chunk: int):
    """The chunk of aligned position ``pos`` (int or int array): ``floor(pos / chunk)`` (§19).

    Query i is in chunk ``chunk_index(c(i), chunk)``, key j in ``chunk_index(j, chunk)``; the pair is
    visible only when the two agree. Floor division puts a negative ``c(i)`` (bottom-right rows before
    the first key) in chunk -1, which holds no key.
    """
    return pos // chunk


def _effective_window(causal: bool, window: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
    """§5: causal is the window (left, min(right, 0))."""
    left, right = window
    if causal:
        right = 0 if right is None else min(right, 0)
    return left, right


def key_range(
    row_start: int, row_stop: int, *, sq: int, sk: int, causal: bool, alignment: str, window, chunk: int | None = None
) -> tuple[int, int]:
    """Keys ``[lo, hi)`` that any query row in ``[row_start, row_stop)`` can see by §4, §5, §7, §19.

    Keys outside this range are invisible to every row of the block, so the oracle need not score
    them (their weight is exactly 0). ``hi <= lo`` means the whole block is fully masked (§8).
    """
    left, right = _effective_window(causal, window)
    off = diagonal_offset(sq, sk, alignment)
    lo = 0 if left is None else max(0, row_start + off - left)
    hi = sk if right is None else min(sk, row_stop - 1 + off + right + 1)
    if chunk is not None and row_stop > row_start:
        lo = max(lo, chunk_index(row_start + off, chunk) * chunk)
        hi = min(hi, (chunk_index(row_stop - 1 + off, chunk) + 1) * chunk)
    return lo, max(lo, hi)


def block_invisible(
    row_start: int,
    row_stop: int,
    col_start: int,
    col_stop: int,
    *,
    sq: int,
    sk: int,
    causal: bool,
    alignment: str,
    window: tuple[int | None, int | None],
    chunk: int | None = None,
) -> np.ndarray | None:
    """True where query i in ``[row_start, row_stop)`` may *not* see key j in ``[col_start, col_stop)``
    (§4, §5, §7, §19), as a bool array ``[rows, cols]``; ``None`` when every pair is visible."""
    left, right = _effective_window(causal, window)
    c = np.arange(row_start, row_stop, dtype=np.int64)[:, None] + diagonal_offset(sq, sk, alignment)
    j = np.arange(col_start, col_stop, dtype=np.int64)[None, :]
    inv = None
    if right is not None and col_stop - 1 > row_start + diagonal_offset(sq, sk, alignment) + right:
        inv = j > c + right
    if left is not None and col_start < row_stop - 1 + diagonal_offset(sq, sk, alignment) - left:
        far = j < c - left
        inv = far if inv is None else (inv | far)
    if chunk is not None:
        other = chunk_index(c, chunk) != chunk_index(j, chunk)
        inv = other if inv is None else (inv | other)
    pad_rows, pad_cols = row_stop > sq, col_stop > sk
    if pad_rows or pad_cols:
        inv = np.zeros((row_stop - row_start, col_stop - col_start), bool) if inv is None else inv
        if pad_cols:
            inv[:, max(sk - col_start, 0) :] = True
        if pad_rows:
            inv[max(sq - row_start, 0) :, :] = True
    return inv


def block_visibility(
    row_start: int,
    row_stop: int,
    Lk: int,
    *,
    sq: int,
    sk: int,
    causal: bool,
    alignment: str,
    window: tuple[int | None, int | None],
    chunk: int | None = None,
) -> np.ndarray | None:
    """Visibility of rows ``[row_start, row_stop)`` against keys ``[0, Lk)`` of one sequence (§4, §5, §7, §19).

    Returns a bool array ``[row_stop - row_start, Lk]``, or ``None`` when every entry is visible.
    """
    inv = block_invisible(
        row_start, row_stop, 0, Lk, sq=sq, sk=sk, causal=causal, alignment=alignment, window=window, chunk=chunk
    )
    return None if inv is None else ~inv


def visibility(
    Lq: int,
    Lk: int,
    causal: bool = False,
    alignment: str = "bottom_right",
    window=None,
    seqlens_q=None,
    seqlens_k=None,
    chunk=None,
) -> np.ndarray:
    """Dense boolean visibility (True = attend) for the given semantics (§4, §5, §7, §19).

    Returns shape ``[Lq, Lk]`` when both ``seqlens_q`` and ``seqlens_k`` are ``None``, otherwise
    ``[B, 1, Lq, Lk]`` (B = the seqlens length); both broadcast to ``[B, Hq, Lq, Lk]`` and can be
    passed as ``mask=`` to `oracles.attention` with ``causal=False, window=None`` to express the same
    semantics explicitly. Padded query rows (i >= seqlens_q[b]) are all False.
    """
    win = _check_window(window, f"Lq={Lq}, Lk={Lk}")
    chunk = check_chunk(chunk, f"Lq={Lq}, Lk={Lk}")
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS} (§4); got {alignment!r}")
    if seqlens_q is None and seqlens_k is None:
        vis = block_visibility(0, Lq, Lk, sq=Lq, sk=Lk, causal=causal, alignment=alignment, window=win, chunk=chunk)
        return np.ones((Lq, Lk), dtype=bool) if vis is None else vis
    B = len(seqlens_q if seqlens_q is not None else seqlens_k)
    sqs = [Lq] * B if seqlens_q is None else [int(x) for x in seqlens_q]
    sks = [Lk] * B if seqlens_k is None else [int(x) for x in seqlens_k]
    if len(sqs) != B or len(sks) != B:
        raise ValueError(f"seqlens_q and seqlens_k must have the same length; got {len(sqs)} and {len(sks)} (§7)")
    out = np.ones((B, 1, Lq, Lk), dtype=bool)
    for b in range(B):
        if not (0 <= sqs[b] <= Lq and 0 <= sks[b] <= Lk):
            raise ValueError(f"seqlens out of range at batch {b}: sq={sqs[b]} (Lq={Lq}), sk={sks[b]} (Lk={Lk}) (§7)")
        vis = block_visibility(0, Lq, Lk, sq=sqs[b], sk=sks[b], causal=causal, alignment=alignment, window=win,
                               chunk=chunk)
        if vis is not None:
            out[b, 0] = vis
    return out
