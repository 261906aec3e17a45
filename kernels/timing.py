"""CUDA-event timing shared by the benchmark scripts and tests (issue 6: CUDA events after warm-up,
median of >= 20 runs).

Each sample brackets one call with two events recorded on the current stream and waits for the
second, so a sample is the GPU time of that call plus whatever launch latency the call itself has
(no host synchronisation inside the interval).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

__all__ = ["cuda_event_times_ms", "cuda_event_median_ms", "time_round_robin"]


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


def time_round_robin(row: dict, cands: Sequence[tuple[str, Callable[[], object]]], flops: float, rounds: int = 3,
                     timer: Callable[[Callable[[], object]], float] | None = None) -> None:
    """Time every (name, fn) of `cands` in turn, `rounds` times, so that clock drift during a run affects every
    candidate alike; odd rounds go through `cands` backwards, so that no candidate always follows the same one (a
    candidate timed right after a power-hungry one can start at a lower clock: on the H200 one kernel timed first,
    after flash-attn-4, read 2-6% below the same kernel timed third in the same rounds, NOTES_FA3.md session 15).
    Each round's sample is ``timer(fn)`` (default: the median of 25 `cuda_event_times_ms` samples after 5 warm-up
    calls). Writes ``row[name + "_ms"]`` (the median of the rounds), ``_tflops`` (from `flops`)
    and ``_spread`` ((max - min) / median); a candidate that raises gets ``row[name + "_error"]`` (its first
    line) and is not timed again."""
    timer = timer or (lambda fn: statistics.median(cuda_event_times_ms(fn, 25, 5)))
    meds: dict[str, list[float]] = {name: [] for name, _ in cands}
    for r in range(rounds):
        for name, fn in cands if r % 2 == 0 else cands[::-1]:
            if name + "_error" in row:
                continue
            try:
                meds[name].append(timer(fn))
            except Exception as e:  # a backend refused the shape
                row[name + "_error"] = str(e).splitlines()[0][:200]
    for name, ms in meds.items():
        if ms:
            med = statistics.median(ms)
            row[name + "_ms"] = med
            row[name + "_tflops"] = flops / med / 1e9
            row[name + "_spread"] = (max(ms) - min(ms)) / med
