"""The seeds' tile working-set and CTA-count tables through kernels.planning."""

from __future__ import annotations

import doctest

import pytest

import kernels.planning
from attention_conformance.kernels.planning import (
    cta_count,
    end_to_end_speedup,
    num_tiles,
    pipeline_speedup,
    pipeline_times,
    working_set_bytes,
)


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


def test_pipeline_bound_seed_example():
    """[FA-anim] "流水线 · 先算理想上限": 4 blocks, 2 us load, 5 us compute: serial 4 x (2 + 5) = 28 us,
    ideal double buffering 2 + 4 x 5 = 22 us, 28 / 22 = 1.27x."""
    assert pipeline_times(4, 2, 5) == (28, 22)
    assert pipeline_speedup(4, 2, 5) == pytest.approx(28 / 22) and round(28 / 22, 2) == 1.27


def test_pipeline_bound_limits():
    assert pipeline_times(3, 0, 5) == (15, 15)  # nothing to hide
    assert pipeline_times(8, 1.5, 1.5) == (24.0, 13.5)
    assert pipeline_speedup(10**6, 3, 3) == pytest.approx(2.0, rel=1e-5)  # at most 2x for two stages
    with pytest.raises(ValueError, match="load must be a number >= 0"):
        pipeline_times(4, -1, 5)
    with pytest.raises(ValueError, match="n_blocks must be an int >= 1"):
        pipeline_times(0, 2, 5)


def test_end_to_end_speedup_exercise_3():
    """[FA-anim] 练习 3: a 10 ms layer, attention 4 ms, a 2x faster kernel: 10 / (6 + 2) = 1.25x;
    [FA2-ch]: attention 40 % of training time, 2x kernel: about 1.25x."""
    assert end_to_end_speedup(10, 4, 2) == 1.25
    assert end_to_end_speedup(1.0, 0.4, 2.0) == pytest.approx(1.25)
    assert end_to_end_speedup(10, 4, float("inf")) == pytest.approx(10 / 6)
    assert end_to_end_speedup(10, 0, 100) == 1.0
    for bad in ((10, 11, 2), (0, 0, 2), (10, 4, 0)):
        with pytest.raises(ValueError):
            end_to_end_speedup(*bad)


def test_planning_doctests_run():
    """The seeds' numbers in kernels/planning.py's docstrings are executed (pytest does not collect doctests)."""
    res = doctest.testmod(kernels.planning)
    assert res.failed == 0 and res.attempted >= 10
