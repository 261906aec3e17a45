"""Back-of-envelope tile planning: working set per CTA and CTA counts (teaching model of the seeds).

- `working_set_bytes`: [FA-anim] "资源 · tile 大小不是越大越好": Q/K/V tiles ``in_bytes * d * (B_r + 2 B_c)``,
  score tile ``acc_bytes * B_r * B_c``, output accumulator ``acc_bytes * B_r * d``. A growth model, not
  any kernel's real shared-memory allocation.
- `cta_count`: [FA2-ch] "从头级并行转向序列级并行" and [FA-anim] "并行 · 小 batch 的诊断": one CTA per
  (batch, head, query tile), times the number of KV splits for split-KV kernels.
"""

from __future__ import annotations

__all__ = ["working_set_bytes", "num_tiles", "cta_count"]


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
