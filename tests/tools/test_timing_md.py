"""tools/timing_md.py: which timer a benchmark set was measured by, read from its rows."""

from timing_md import by_gpu_time


def test_a_set_with_a_method_per_candidate_is_gpu_time():
    assert by_gpu_time([{"d": 64, "fa3_ms": 1.0, "fa3_method": "cuda_graph"}])
    assert by_gpu_time([{"d": 64}, {"d": 128, "ours_method": "back_to_back"}])


def test_a_set_without_methods_is_the_wall_timer():
    assert not by_gpu_time([{"d": 64, "ours_ms": 1.0, "ratio_vs_flash": 1.2}])
    assert not by_gpu_time([])
