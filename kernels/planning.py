"""Back-of-envelope tile planning: working set per CTA and CTA counts (teaching model of the seeds).

- `working_set_bytes`: [FA-anim] "资源 · tile 大小不是越大越好": Q/K/V tiles ``in_bytes * d * (B_r + 2 B_c)``,
  score tile ``acc_bytes * B_r * B_c``, output accumulator ``acc_bytes * B_r * d``. A growth model, not
  any kernel's real shared-memory allocation.
- `cta_count`: [FA2-ch] "从头级并行转向序列级并行" and [FA-anim] "并行 · 小 batch 的诊断": one CTA per
  (batch, head, query tile), times the number of KV splits for split-KV kernels.
- `greedy_loads`, `lpt_order`, `fa3_tile_order`: the FA3 forward's tile scheduling (seed on FA3,
  "Causal attention 的負載平衡：最長的工作先排（LPT）"): jobs handed out in a fixed order, each to the worker
  that becomes free first (a persistent CTA taking the next index from a global counter, or the hardware
  handing out CTAs in index order); `fa3_tile_order` is the order kernels/cuda/include/hopper/scheduler.cuh
  enumerates, longest (last, under a causal mask) query tiles first inside each L2 section of heads.
"""

from __future__ import annotations

__all__ = ["working_set_bytes", "num_tiles", "cta_count", "greedy_loads", "lpt_order", "fa3_tile_order"]


def _positive(**kw: int) -> None:
    for name, x in kw.items():
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name} must be an int >= 1; got {x!r}")


def working_set_bytes(B_r: int, B_c: int, d: int, in_bytes: int = 2, acc_bytes: int = 4) -> int:
    """Teaching working set of one CTA: ``in_bytes*d*(B_r + 2*B_c) + acc_bytes*B_r*B_c + acc_bytes*B_r*d``.

    >>> [working_set_bytes(br, 64, 128) // 1024 for br in (32, 64, 128)]
    [64, 96, 160]
    """
    _positive(B_r=B_r, B_c=B_c, d=d, in_bytes=in_bytes, acc_bytes=acc_bytes)
    return in_bytes * d * (B_r + 2 * B_c) + acc_bytes * B_r * B_c + acc_bytes * B_r * d


def num_tiles(length: int, tile: int) -> int:
    """ceil(length / tile): the number of tiles along a sequence, counting a partial tail tile."""
    _positive(tile=tile)
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an int >= 0; got {length!r}")
    return -(-length // tile)


def cta_count(batch: int, heads: int, length: int, tile_q: int, num_splits: int = 1) -> int:
    """CTAs launched when the grid is (batch, heads, query tiles[, KV splits]).

    >>> cta_count(1, 8, 8192, 128), cta_count(8, 32, 2048, 64), cta_count(1, 8, 4096, 128)
    (512, 8192, 256)
    """
    _positive(batch=batch, heads=heads, num_splits=num_splits)
    return batch * heads * num_tiles(length, tile_q) * num_splits


def greedy_loads(costs: list[int], workers: int) -> list[int]:
    """Total work per worker when jobs are handed out in list order, each to the worker free first.

    Ties go to the lowest worker index. The seed's example: two sequences of four causal query tiles
    (costs 1, 2, 3, 4 key tiles) on three SMs, in order, then longest first:

    >>> greedy_loads([1, 2, 3, 4, 1, 2, 3, 4], 3), greedy_loads([4, 4, 3, 3, 2, 2, 1, 1], 3)
    ([9, 5, 6], [7, 7, 6])
    """
    _positive(workers=workers)
    free_at = [0] * workers
    loads = [0] * workers
    for c in costs:
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"costs must be ints >= 0; got {c!r}")
        w = min(range(workers), key=lambda i: (free_at[i], i))
        free_at[w] += c
        loads[w] += c
    return loads


def lpt_order(costs: list[int]) -> list[int]:
    """Indices of `costs` longest first (stable: equal costs keep their order).

    >>> lpt_order([1, 2, 3, 4, 1, 2, 3, 4])
    [3, 7, 2, 6, 1, 5, 0, 4]
    """
    return sorted(range(len(costs)), key=lambda i: -costs[i])


def fa3_tile_order(num_m: int, heads: int, batch: int, section: int) -> list[tuple[int, int, int]]:
    """(query tile, head, batch) for tile index t = 0, 1, ... as the FA3 kernel enumerates them.

    Sections of `section` consecutive (batch, head) pairs (batch-major, head fastest); inside a section the
    query tiles run from the last to the first, the heads of the section fastest. Mirrors
    ``TileOrder::at`` in kernels/cuda/include/hopper/scheduler.cuh.

    >>> fa3_tile_order(2, 1, 2, 2)
    [(1, 0, 0), (1, 0, 1), (0, 0, 0), (0, 0, 1)]
    """
    _positive(num_m=num_m, heads=heads, batch=batch, section=section)
    bh_total = heads * batch
    out = []
    for t in range(num_m * bh_total):
        sec, r = divmod(t, section * num_m)
        g = min(section, bh_total - sec * section)
        bh = sec * section + r % g
        out.append((num_m - 1 - r // g, bh % heads, bh // heads))
    return out
