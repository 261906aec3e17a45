"""Back-of-envelope tile planning: working set per CTA and CTA counts (teaching model of the seeds).

- `working_set_bytes`: [FA-anim] "资源 · tile 大小不是越大越好": Q/K/V tiles ``in_bytes * d * (B_r + 2 B_c)``,
  score tile ``acc_bytes * B_r * B_c``, output accumulator ``acc_bytes * B_r * d``. A growth model, not
  any kernel's real shared-memory allocation.
- `cta_count`: [FA2-ch] "从头级并行转向序列级并行" and [FA-anim] "并行 · 小 batch 的诊断": one CTA per
  (batch, head, query tile), times the number of KV splits for split-KV kernels.
- `greedy_loads`, `lpt_order`, `fa3_tile_order`: the FA3 kernels' tile scheduling (seed on FA3,
  "Causal attention 的負載平衡：最長的工作先排（LPT）"): jobs handed out in a fixed order, each to the worker
  that becomes free first (a persistent CTA taking the next index from a global counter, or the hardware
  handing out CTAs in index order); `fa3_tile_order` is the order kernels/cuda/include/hopper/scheduler.cuh
  enumerates, longest (last, under a causal mask) query tiles first inside each L2 section of heads; the
  backward takes key tile ``num_m - 1 - m`` of it, so its longest (first) key tiles come first.
- `pipeline_times` / `pipeline_speedup`: [FA-anim] "流水线 · 先算理想上限": n blocks, each loaded then
  computed; serial ``n (load + compute)`` against ideal double buffering ``load + (n - 1) max(load, compute)
  + compute`` (4 blocks of 2 us + 5 us: 28 vs 22 us, 1.27x). The bound an FA3-style producer/consumer
  overlap can reach; fill and drain (the first load, the last compute) are always paid.
- `end_to_end_speedup`: [FA-anim] 练习 3 and [FA2-ch] "资源预算模型": a kernel ``s`` times faster inside a
  ``total`` whose ``part`` it is gives ``total / (total - part + part / s)`` (attention 4 ms of a 10 ms layer,
  2x faster: 1.25x; even an infinitely fast kernel: 1.67x). It assumes the rest is unchanged: measure the
  attention and the whole layer separately (profiler), since overlap and communication change the fraction.
"""

from __future__ import annotations

__all__ = ["working_set_bytes", "num_tiles", "cta_count", "greedy_loads", "lpt_order", "fa3_tile_order",
           "pipeline_times", "pipeline_speedup", "end_to_end_speedup"]


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
    """(tile, head, batch) for tile index t = 0, 1, ... as the FA3 kernels enumerate them.

    Sections of `section` consecutive (batch, head) pairs (batch-major, head fastest; the last section also
    takes the remainder); inside a section the tiles run from the last to the first, the heads of the section
    fastest. Mirrors ``TileOrder::at`` in kernels/cuda/include/hopper/scheduler.cuh.

    >>> fa3_tile_order(2, 1, 2, 2)
    [(1, 0, 0), (1, 0, 1), (0, 0, 0), (0, 0, 1)]
    >>> [h for _, h, _ in fa3_tile_order(1, 5, 1, 2)], [m for m, _, _ in fa3_tile_order(2, 3, 1, 2)]
    ([0, 1, 2, 3, 4], [1, 1, 1, 0, 0, 0])
    """
    _positive(num_m=num_m, heads=heads, batch=batch, section=section)
    bh_total = heads * batch
    last = max(bh_total // section - 1, 0)
    out = []
    for t in range(num_m * bh_total):
        sec = min(t // (section * num_m), last)
        r = t - sec * section * num_m
        g = section if sec < last else bh_total - sec * section
        bh = sec * section + r % g
        out.append((num_m - 1 - r // g, bh % heads, bh // heads))
    return out


def _time(**kw: float) -> None:
    for name, x in kw.items():
        if isinstance(x, bool) or not isinstance(x, int | float) or not x >= 0:
            raise ValueError(f"{name} must be a number >= 0; got {x!r}")


def pipeline_times(n_blocks: int, load: float, compute: float) -> tuple[float, float]:
    """(serial, ideally overlapped) time of `n_blocks` blocks, each loaded (`load`) then computed (`compute`).

    Serial: ``n (load + compute)``. Ideal double buffering: the first load, then each block's compute
    overlapping the next block's load, then the last compute: ``load + (n - 1) max(load, compute) + compute``.

    >>> pipeline_times(4, 2, 5)
    (28, 22)
    >>> pipeline_times(4, 5, 2)  # load-bound: the loads set the pace
    (28, 22)
    >>> pipeline_times(1, 2, 5)  # one block: nothing to overlap
    (7, 7)
    """
    _positive(n_blocks=n_blocks)
    _time(load=load, compute=compute)
    return n_blocks * (load + compute), load + (n_blocks - 1) * max(load, compute) + compute


def pipeline_speedup(n_blocks: int, load: float, compute: float) -> float:
    """Serial over ideally overlapped time (`pipeline_times`): the most overlap can give.

    >>> round(pipeline_speedup(4, 2, 5), 2)
    1.27
    >>> round(pipeline_speedup(10**6, 5, 5), 3)  # equal stages, many blocks: approaches 2
    2.0
    """
    serial, overlapped = pipeline_times(n_blocks, load, compute)
    return serial / overlapped if overlapped > 0 else 1.0


def end_to_end_speedup(total: float, part: float, part_speedup: float) -> float:
    """Whole-run speedup when `part` of `total` runs `part_speedup` times faster and the rest is unchanged.

    >>> end_to_end_speedup(10.0, 4.0, 2.0)  # attention 4 ms of a 10 ms layer, a 2x faster kernel
    1.25
    >>> round(end_to_end_speedup(10.0, 4.0, float("inf")), 3)  # the ceiling: the other 6 ms remain
    1.667
    >>> end_to_end_speedup(1.0, 0.4, 2.0)  # the same as a fraction: 40 % of the time
    1.25
    """
    _time(total=total, part=part)
    if total <= 0 or part > total:
        raise ValueError(f"need 0 < total and part <= total; got total={total!r}, part={part!r}")
    if isinstance(part_speedup, bool) or not isinstance(part_speedup, int | float) or not part_speedup > 0:
        raise ValueError(f"part_speedup must be a number > 0; got {part_speedup!r}")
    return total / (total - part + part / part_speedup)
