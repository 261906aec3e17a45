"""The seeds' tile working-set and CTA-count tables through kernels.planning."""

from __future__ import annotations

import pytest

from kernels.planning import cta_count, num_tiles, working_set_bytes


def test_tile_working_set_table():
    """[FA-anim] "演算 · tile 资源预算": N=4096, d=128, B_c=64, 16-bit Q/K/V, 32-bit S/O:
    B_r 32 -> 64 -> 128 gives 64 -> 96 -> 160 KiB and 128 -> 64 -> 32 Q tiles."""
    assert [working_set_bytes(br, 64, 128) for br in (32, 64, 128)] == [64 * 1024, 96 * 1024, 160 * 1024]
    assert [num_tiles(4096, br) for br in (32, 64, 128)] == [128, 64, 32]


def test_working_set_formula_terms():
    # 2 d (B_r + 2 B_c) + 4 B_r B_c + 4 B_r d
    assert working_set_bytes(1, 1, 1) == 2 * 3 + 4 + 4
    assert working_set_bytes(16, 32, 64, in_bytes=1, acc_bytes=4) == 64 * (16 + 64) + 4 * 16 * 32 + 4 * 16 * 64


def test_cta_count_table_fa2_chapter():
    """[FA2-ch] 04_schedule.py output: (1, 8, 8192) tiles 64/128/256 -> 1024/512/256; (8, 32, 2048, 64) -> 8192."""
    assert [cta_count(1, 8, 8192, t) for t in (64, 128, 256)] == [1024, 512, 256]
    assert cta_count(8, 32, 2048, 64) == 8192


def test_cta_count_small_batch_diagnosis():
    """[FA-anim] "并行 · 小 batch 的诊断": B=1, H=8, N=4096, B_r=128: 8 tasks by (B, H), 256 with Q tiles."""
    assert cta_count(1, 8, 4096, 4096) == 8
    assert cta_count(1, 8, 4096, 128) == 256


def test_tail_tiles_and_splits():
    assert num_tiles(5, 4) == 2  # N = 5, tile = 4: a partial tail tile
    assert cta_count(1, 1, 5, 4, num_splits=3) == 6


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_planning_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="must be an int >= 1"):
        working_set_bytes(bad, 64, 128)
