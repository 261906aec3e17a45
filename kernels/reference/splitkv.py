"""Split-KV (Flash-Decoding) at tile granularity in NumPy: per-split partials, then the combine step.

The K/V tiles of length ``block_k`` are dealt to ``num_splits`` splits in contiguous runs of
ceil(n_tiles / num_splits) tiles (trailing splits may be empty). Each split runs the FA2 loop over
its own tiles and stores a float32 partial O_s normalised by its own row sum, and LSE_s
(-inf, with O_s = 0, where the split sees no key). The combine (oracles/SEMANTICS.md, split-KV partials):

    M = max_s LSE_s,   LSE = M + log sum_s exp(LSE_s - M),   O = sum_s exp(LSE_s - LSE) O_s

with all-empty rows giving O = 0, LSE = -inf; an empty split (LSE_s = -inf) is selected out, not
multiplied (§14). Precision emulation: kernels/emulate.py.

Paged K/V (``block_table=``, SEMANTICS.md §16): k and v are then page pools [num_pages, Hkv, page_size, D]
and each K/V tile is gathered through the block table as a GPU kernel does (`paged_tile`: per key tile,
look up the page of each page-run, copy its rows); rows past the sequence's real length load as 0 and
neither their slots nor their table entries are read (the bounds check, as for padded rows, §7).

Sinks (§18): the partials are sink-free and `combine` adds the sink once, as one more partial
(O = 0, LSE = sink). Chunks (§19): `Problem.visible`. KV-cache append (§20, `flash_attn_with_kvcache`):
``k_new``, ``v_new`` with ``cache_seqlens`` are written into a copy of the cache at ``cache_seqlens[b]``
(`append_kv`) and the keys attended are those below ``cache_seqlens[b] + Ln``.
"""

from __future__ import annotations

import numpy as np

from attention_conformance.kernels import emulate
from attention_conformance.kernels.reference._common import Problem, tiles

__all__ = ["append_kv", "combine", "forward", "forward_partials", "paged_tile", "split_ranges"]


def split_ranges(Lk: int, block_k: int, num_splits: int) -> list[tuple[int, int]]:
    """Key ranges [start, stop) of each split: contiguous runs of whole K/V tiles; empty ranges allowed."""
    if num_splits < 1:
        raise ValueError(f"num_splits={num_splits} must be >= 1")
    n_tiles = len(tiles(Lk, block_k))
    per_split = -(-n_tiles // num_splits)
    ranges = []
    for s in range(num_splits):
        start = min(s * per_split * block_k, Lk)
        stop = min((s + 1) * per_split * block_k, Lk)
        ranges.append((start, stop))
    return ranges


def paged_tile(pool: np.ndarray, block_table: np.ndarray, page_size: int, len_k: np.ndarray, c0: int,
               c1: int) -> np.ndarray:
    """Key rows [c0, c1) of every sequence, [B, H, c1 - c0, D], read through the block table (SEMANTICS.md §16).

    Row j of batch b is ``pool[block_table[b, j // page_size], :, j % page_size]``. The table is read as the C
    ABI passes it (flat, with a batch stride). Rows ``j >= len_k[b]`` load as 0 and are not touched: the loop
    over the tile's page-runs stops at the sequence's real length, so no slot past it and no table entry past
    its last page is read (flash-attention #2709 read one).
    """
    B = block_table.shape[0]
    table = np.ascontiguousarray(block_table).reshape(-1)
    table_stride = block_table.shape[1]  # block_table_batch_stride
    tile = np.zeros((B, pool.shape[1], c1 - c0, pool.shape[3]), dtype=pool.dtype)
    for b in range(B):
        stop = min(c1, int(len_k[b]))
        j = c0
        while j < stop:
            page, offset = j // page_size, j % page_size
            phys = int(table[b * table_stride + page])
            run = min(stop - j, page_size - offset)
            tile[b, :, j - c0:j - c0 + run] = pool[phys, :, offset:offset + run]
            j += run
    return tile


def append_kv(k_cache, v_cache, k_new, v_new, cache_seqlens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decode step's cache write (§20): copies of the caches with row t of ``k_new`` / ``v_new`` at slot
    ``cache_seqlens[b] + t``, and the new lengths ``cache_seqlens + Ln`` (the kernel then reads no slot past them)."""
    k = np.array(k_cache, copy=True)
    v = np.array(v_cache, copy=True)
    k_new, v_new = np.asarray(k_new), np.asarray(v_new)
    lens = np.asarray(cache_seqlens, dtype=np.int64).reshape(-1)
    Ln = k_new.shape[2]
    if lens.shape != (k.shape[0],) or (lens < 0).any() or (lens + Ln > k.shape[2]).any():
        raise ValueError(f"cache_seqlens={lens.tolist()} must hold B={k.shape[0]} lengths with "
                         f"cache_seqlens + Ln <= Lc (Ln={Ln}, k_cache {k.shape})")
    for b in range(k.shape[0]):
        k[b, :, lens[b]:lens[b] + Ln] = k_new[b]
        v[b, :, lens[b]:lens[b] + Ln] = v_new[b]
    return k, v, lens + Ln


def _paged_problem(q, k_pool, v_pool, block_table, page_size, seqlen_k, **kw):
    """`Problem` of a paged call (shapes, visibility, seqlens) and the pools rounded to the kernel dtype.

    The dense K/V handed to `Problem` are zeros of the logical shape: every K/V value the paged kernel
    uses comes from the pools, through `paged_tile`.
    """
    q = np.asarray(q)
    k_pool, v_pool = np.asarray(k_pool), np.asarray(v_pool)
    table = np.asarray(block_table)
    if seqlen_k is None:
        raise ValueError("paged K/V: seqlen_k (the logical key length Lk) is required with block_table")
    if k_pool.ndim != 4 or v_pool.ndim != 4 or k_pool.shape[:3] != v_pool.shape[:3]:
        raise ValueError(f"paged K/V: k_pool {k_pool.shape} and v_pool {v_pool.shape} must be "
                         f"[num_pages, Hkv, page_size, D] with the same first three dimensions")
    if k_pool.shape[2] != page_size or table.ndim != 2 or table.shape[0] != q.shape[0]:
        raise ValueError(f"paged K/V: page_size={page_size}, k_pool {k_pool.shape}, block_table {table.shape}, "
                         f"q {q.shape}: need pools [num_pages, Hkv, page_size, D] and a table [B, pages_per_seq]")
    if table.shape[1] * page_size < seqlen_k:
        raise ValueError(f"paged K/V: block_table {table.shape} x page_size {page_size} covers fewer than "
                         f"seqlen_k={seqlen_k} keys")
    B, Hkv = q.shape[0], k_pool.shape[1]
    k0 = np.broadcast_to(np.zeros((), dtype=np.float64), (B, Hkv, seqlen_k, k_pool.shape[3]))
    v0 = np.broadcast_to(np.zeros((), dtype=np.float64), (B, Hkv, seqlen_k, v_pool.shape[3]))
    p = Problem(q, k0, v0, **kw)
    return p, emulate.round_to(k_pool, p.dtype), emulate.round_to(v_pool, p.dtype), table


def forward_partials(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None,
                     bias=None, softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64,
                     dtype="bfloat16", num_splits=2, block_table=None, page_size=None, seqlen_k=None, chunk=None):
    """Per-split partials: (outs [S, B, Hq, Lq, dv] float32/float64, lses [S, B, Hq, Lq]).

    With ``block_table`` (int [B, pages_per_seq]), k and v are page pools [num_pages, Hkv, page_size, D] and
    ``seqlen_k`` is the logical key length Lk (SEMANTICS.md §16); K/V tiles are read through the table.
    """
    kw = dict(scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
              softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype, chunk=chunk)
    if block_table is None:
        p = Problem(q, k, v, **kw)
    else:
        p, k_pool, v_pool, table = _paged_problem(q, k, v, block_table, page_size, seqlen_k, **kw)
    kv_head = np.arange(p.Hq) // p.group
    if block_table is None:
        K = p.k[:, kv_head]
        V = p.v[:, kv_head]

    def kv_tile(c0: int, c1: int) -> tuple[np.ndarray, np.ndarray]:
        if block_table is None:
            return K[:, :, c0:c1], V[:, :, c0:c1]
        return (paged_tile(k_pool, table, page_size, p.len_k, c0, c1)[:, kv_head],
                paged_tile(v_pool, table, page_size, p.len_k, c0, c1)[:, kv_head])

    ranges = split_ranges(p.Lk, block_k, num_splits)
    outs = np.zeros((len(ranges), p.B, p.Hq, p.Lq, p.dv), dtype=p.acc)
    lses = np.full((len(ranges), p.B, p.Hq, p.Lq), -np.inf, dtype=p.acc)
    with np.errstate(divide="ignore", invalid="ignore"):
        for split, (k0, k1) in enumerate(ranges):
            for r0, r1 in tiles(p.Lq, block_q):
                Qi = p.q[:, :, r0:r1]
                m = np.full((p.B, p.Hq, r1 - r0), -np.inf, dtype=p.acc)
                l = np.zeros((p.B, p.Hq, r1 - r0), dtype=p.acc)
                acc = np.zeros((p.B, p.Hq, r1 - r0, p.dv), dtype=p.acc)
                for c0 in range(k0, k1, block_k):
                    c1 = min(c0 + block_k, k1)
                    vis = p.visible(r0, r1, c0, c1)
                    if not vis.any():
                        continue
                    Kj, Vj = kv_tile(c0, c1)
                    s = emulate.matmul(Qi, Kj.swapaxes(-1, -2), p.dtype)
                    s = s * p.scale
                    if p.softcap is not None:
                        s = p.softcap * np.tanh(s / p.softcap)
                    if p.bias is not None:
                        s = s + p.bias_tile(r0, r1, c0, c1)
                    s = np.where(vis, s, -np.inf)
                    m_new = np.maximum(m, s.max(axis=-1))
                    m_safe = np.where(m_new == -np.inf, 0.0, m_new).astype(p.acc)
                    P = np.exp(s - m_safe[..., None])
                    alpha = np.exp(m - m_safe)
                    l = alpha * l + P.sum(axis=-1)
                    acc = alpha[..., None] * acc
                    acc = acc + emulate.matmul(emulate.round_to(P, p.dtype), Vj, p.dtype)
                    m = m_new
                outs[split, :, :, r0:r1] = np.where(l[..., None] > 0, acc / l[..., None], 0.0)
                lses[split, :, :, r0:r1] = np.where(l > 0, m + np.log(l), -np.inf)
    return outs, lses


def combine(outs: np.ndarray, lses: np.ndarray, sinks=None) -> tuple[np.ndarray, np.ndarray]:
    """Merge split partials (the FA3 combine kernel): returns (out [..., Lq, dv], lse [..., Lq]).

    ``sinks`` [Hq] (the head axis of ``lses`` is the second last) join once, as the partial (0, sink) (§18)."""
    outs = np.asarray(outs)
    lses = np.asarray(lses)
    if sinks is not None:
        sink_lse = np.broadcast_to(np.asarray(sinks, dtype=lses.dtype)[:, None], lses.shape[1:])
        lses = np.concatenate([lses, sink_lse[None]])
        outs = np.concatenate([outs, np.zeros((1, *outs.shape[1:]), dtype=outs.dtype)])
    with np.errstate(divide="ignore", invalid="ignore"):
        lse_max = lses.max(axis=0)
        lse_max_safe = np.where(lse_max == -np.inf, 0.0, lse_max).astype(lses.dtype)
        weight_sum = np.exp(lses - lse_max_safe).sum(axis=0)
        lse = np.where(weight_sum > 0, lse_max_safe + np.log(weight_sum), -np.inf).astype(lses.dtype)
        lse_safe = np.where(lse == -np.inf, 0.0, lse).astype(lses.dtype)
        scales = np.exp(lses - lse_safe)
        weighted = np.where(lses[..., None] == -np.inf, 0.0, scales[..., None] * outs)
        out = np.sum(weighted, axis=0)
    return out, lse


def forward(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None, bias=None,
            softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=64, dtype="bfloat16", num_splits=2,
            block_table=None, page_size=None, seqlen_k=None, sinks=None, chunk=None, k_new=None, v_new=None,
            cache_seqlens=None):
    """Split-KV forward: `forward_partials` then `combine`; out rounded to ``dtype``, lse float32/float64.

    Paged K/V (SEMANTICS.md §16): pass the pools as k, v with ``block_table``, ``page_size`` and ``seqlen_k``.
    KV append (§20): pass the caches as k, v with ``k_new``, ``v_new``, ``cache_seqlens`` (then ``seqlens_k``
    must be None: the lengths are ``cache_seqlens + Ln``). Sinks (§18) join the combine once.
    """
    if k_new is not None:
        if seqlens_k is not None or block_table is not None:
            raise ValueError("KV append: seqlens_k and block_table must be None (the lengths are cache_seqlens + Ln)")
        k, v, seqlens_k = append_kv(k, v, k_new, v_new, cache_seqlens)
    outs, lses = forward_partials(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window,
                                  mask=mask, bias=bias, softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k,
                                  block_q=block_q, block_k=block_k, dtype=dtype, num_splits=num_splits,
                                  block_table=block_table, page_size=page_size, seqlen_k=seqlen_k, chunk=chunk)
    if sinks is not None and np.shape(sinks) != (np.shape(q)[1],):
        raise ValueError(f"sinks shape {np.shape(sinks)} must be [Hq] = ({np.shape(q)[1]},)")
    out, lse = combine(outs, lses, sinks)
    return emulate.round_to(out, dtype), lse
