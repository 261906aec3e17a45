"""CUDA-event timing shared by the benchmark scripts and tests (issue 6: CUDA events after warm-up,
median of >= 20 runs).

Each sample brackets one call with two events recorded on the current stream and waits for the
second, so a sample is the GPU time of that call plus whatever launch latency the call itself has
(no host synchronisation inside the interval).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

__all__ = ["cuda_event_times_ms", "cuda_event_median_ms"]


def cuda_event_times_ms(fn: Callable[[], object], reps: int = 20, warmup: int = 5) -> list[float]:
    """`warmup` untimed calls, a device synchronize, then `reps` samples in milliseconds."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def cuda_event_median_ms(fn: Callable[[], object], reps: int = 20, warmup: int = 5) -> float:
    """Median of `cuda_event_times_ms`."""
    return statistics.median(cuda_event_times_ms(fn, reps, warmup))
