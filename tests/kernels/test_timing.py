"""kernels/timing.py: its logic on the CPU through a simulated GPU, and on a GPU (marked ``gpu``) the issue-40 check
that host work before a kernel is charged to the wall time and not to the GPU time.

The simulated GPU (`SimGpu`) has a host clock and one stream: an item of work starts when the host has enqueued it
and the item before it has finished; an event's time is when the stream reaches it; a capture records the kernels
of the calls (their host work still runs) and a replay enqueues them back to back at once. Calls are fake callables
that spend host time and enqueue kernels on it, so every figure of `measure` has an exact expected value.
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import pytest

from attention_conformance.kernels.timing import (
    DEFAULT_FLUSH_BYTES,
    MAX_CALLS,
    CaptureFailed,
    NoTelemetry,
    Timing,
    calls_per_sample,
    cuda_event_median_ms,
    cuda_event_times_ms,
    l2_flush_bytes,
    measure,
    nvml_telemetry,
    round_order,
    rounds_row,
    spread,
    time_round_robin,
)

LAUNCH_MS = 0.005  # host time of one launch (kernel, event, graph replay) on the simulated GPU


class FixedTelemetry:
    """Readings that cycle through `clocks` and `powers`."""

    reason = None

    def __init__(self, clocks=(1980.0,), powers=(650.0,)):
        self.clocks, self.powers, self.reads = list(clocks), list(powers), 0

    def read(self):
        self.reads += 1
        return self.clocks[self.reads % len(self.clocks)], self.powers[self.reads % len(self.powers)]


class SimGpu:
    """A `Device` whose stream and host clock are simulated (times in ms)."""

    def __init__(self):
        self.host = 0.0  # host clock
        self.tail = 0.0  # when the stream's last item finishes
        self.captured: list[float] | None = None  # kernels recorded by a capture in progress
        self.flushes = 0
        self.holds: list[float] = []

    # host side of the fake calls
    def perf_counter(self) -> float:
        return self.host / 1e3

    def host_work(self, ms: float) -> None:
        self.host += ms

    def kernel(self, ms: float) -> None:
        self.host += LAUNCH_MS
        if self.captured is not None:
            self.captured.append(ms)
        else:
            self.tail = max(self.tail, self.host) + ms

    def kernel_elsewhere(self, ms: float) -> None:
        """A kernel launched on a stream of its own that a capture does not see (it runs at once)."""
        self.host += LAUNCH_MS
        self.tail = max(self.tail, self.host) + ms

    # Device
    def synchronize(self) -> None:
        if self.captured is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        self.host = max(self.host, self.tail)

    def record(self) -> float:
        self.host += LAUNCH_MS
        self.tail = max(self.tail, self.host)
        return self.tail

    def elapsed_ms(self, start: float, end: float) -> float:
        self.host = max(self.host, end)
        return end - start

    def capture(self, fn, calls):
        self.captured = []
        try:
            for _ in range(calls):
                fn()
        except Exception as exc:
            raise CaptureFailed(f"capture failed: {exc}") from exc
        finally:
            kernels, self.captured = self.captured, None

        def replay():
            self.host += LAUNCH_MS
            start = max(self.tail, self.host)
            self.tail = start + sum(kernels)

        return replay

    def hold(self, ms: float) -> None:
        self.holds.append(ms)
        self.kernel(ms)

    def flush_l2(self) -> None:
        self.flushes += 1
        self.kernel(0.03)

    def telemetry(self):
        return FixedTelemetry()


def _call(sim: SimGpu, host_ms: float, kernels: list[float], elsewhere: bool = False):
    def call():
        sim.host_work(host_ms)
        for k in kernels:
            (sim.kernel_elsewhere if elsewhere else sim.kernel)(k)
    return call


def _measure(sim: SimGpu, fn, **kw) -> Timing:
    return measure(fn, device=sim, host_clock=sim.perf_counter, **{"reps": 5, "warmup": 1, **kw})


def test_statistics():
    assert spread([2.0, 1.0, 4.0]) == (4.0 - 1.0) / 2.0
    assert spread([0.0, 0.0]) == 0.0
    assert calls_per_sample(0.2) == 5 and calls_per_sample(0.3) == 4 and calls_per_sample(5.0) == 1
    assert calls_per_sample(1e-6) == MAX_CALLS and calls_per_sample(0.0) == MAX_CALLS
    assert calls_per_sample(0.001, flush_l2=True) == 1
    assert l2_flush_bytes(60 << 20) == 120 << 20 and l2_flush_bytes(None) == l2_flush_bytes(0) == DEFAULT_FLUSH_BYTES


def test_host_work_is_charged_to_host_and_wall_time_not_to_gpu_time():
    """The issue-40 case on the simulated GPU: 2 ms of host work before a 0.2 ms kernel."""
    sim = SimGpu()
    t = _measure(sim, _call(sim, 2.0, [0.2]))
    assert t.method == "cuda_graph" and t.fallback_reason is None
    assert t.gpu_ms == pytest.approx(0.2)
    assert t.host_us == pytest.approx((2.0 + LAUNCH_MS) * 1e3)
    assert t.host_queued_us == pytest.approx((2.0 + LAUNCH_MS) * 1e3)  # behind queued work too: host work is not hidden
    assert t.wall_ms == pytest.approx(2.2 + LAUNCH_MS)  # the start event, the host work, the kernel's launch
    assert t.calls_per_sample == 5 and t.host_bound_samples == 0
    assert len(t.gpu_samples_ms) == len(t.host_samples_us) == len(t.wall_samples_ms) == 5
    assert t.sm_clock_mhz == 1980.0 and t.power_w == 650.0 and t.telemetry_reason is None
    assert "cuda_graph" in t.describe() and "host 2005.0 us" in t.describe()


def test_queued_host_time_is_the_median_call_not_a_sample_s_mean():
    """One call in four does 1 ms of host work (a collection, a cache miss): the host time behind queued work is the
    median of the calls timed alone, the common call's, not a four-call sample's mean (0.25 ms more)."""
    sim = SimGpu()
    count = [0]

    def call():
        count[0] += 1
        sim.host_work(1.0 if count[0] % 4 == 0 else 0.01)
        sim.kernel(2.0)

    t = _measure(sim, call, calls=1)
    assert t.host_queued_us == pytest.approx((0.01 + LAUNCH_MS) * 1e3)


def test_measure_pauses_the_garbage_collector_and_restores_it():
    import gc

    sim = SimGpu()
    seen = []

    def call():
        seen.append(gc.isenabled())
        sim.kernel(0.2)

    assert gc.isenabled()
    _measure(sim, call)
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        _measure(sim, call)
        assert not gc.isenabled()  # the caller's setting, not switched on behind its back
    finally:
        gc.enable()


def test_short_calls_are_sampled_several_at_a_time():
    sim = SimGpu()
    t = _measure(sim, _call(sim, 0.0, [0.01, 0.02]))  # two kernels, 30 us in all
    assert t.calls_per_sample == 34 and t.gpu_ms == pytest.approx(0.03)
    assert _measure(sim, _call(sim, 0.0, [0.03]), calls=3).calls_per_sample == 3


def test_a_call_that_cannot_be_captured_is_timed_back_to_back_with_the_reason():
    """It refuses the capture (as a call that allocates outside torch's allocator would): back-to-back calls behind a
    hold still hide its 2 ms of host time."""
    sim = SimGpu()

    def call():
        if sim.captured is not None:
            raise RuntimeError("operation not permitted when stream is capturing\ndetails")
        sim.host_work(2.0)
        sim.kernel(0.2)

    t = _measure(sim, call)
    assert t.method == "back_to_back"
    assert t.fallback_reason == "capture failed: operation not permitted when stream is capturing"
    assert t.gpu_ms == pytest.approx(0.2) and t.host_bound_samples == 0
    assert min(sim.holds) > 2.0  # every hold outlasts the enqueueing of a sample


def test_a_call_that_synchronizes_falls_back_and_its_samples_are_marked_host_bound():
    sim = SimGpu()

    def call():
        sim.host_work(1.0)
        sim.kernel(0.2)
        sim.synchronize()

    t = _measure(sim, call)
    assert t.method == "back_to_back" and "when stream is capturing" in t.fallback_reason
    # each call waits for the one before it: no hold can hide the host time of the calls after a sample's first, and
    # the samples say so
    assert t.host_bound_samples > 0 and t.calls_per_sample > 1 and t.gpu_ms > 2 * 0.2


def test_a_graph_that_misses_the_call_s_work_falls_back():
    """The call launches on a stream the capture does not see: the replay is empty, the calls take 0.2 ms."""
    sim = SimGpu()
    t = _measure(sim, _call(sim, 0.1, [0.2], elsewhere=True))
    assert t.method == "back_to_back" and "outside the captured stream" in t.fallback_reason
    assert t.gpu_ms == pytest.approx(0.2)


def test_a_replay_that_raises_falls_back():
    sim = SimGpu()

    def broken_capture(fn, calls):
        def replay():
            raise RuntimeError("cudaErrorGraphExecUpdateFailure")
        return replay

    sim.capture = broken_capture
    t = _measure(sim, _call(sim, 0.0, [0.5]))
    assert t.method == "back_to_back"
    assert t.fallback_reason == "graph replay failed: RuntimeError: cudaErrorGraphExecUpdateFailure"


def test_l2_flush_before_every_sample_is_not_charged():
    sim = SimGpu()
    t = _measure(sim, _call(sim, 0.0, [0.01]), flush_l2=True)
    assert t.l2_flushed and t.calls_per_sample == 1 and t.gpu_ms == pytest.approx(0.01)
    # before every wall sample, every probe, the graph's check sample and every GPU sample
    assert sim.flushes == 5 + 3 + 1 + 5
    assert t.wall_ms == pytest.approx(0.01 + LAUNCH_MS)


def test_telemetry_medians_and_reasons():
    sim = SimGpu()
    t = _measure(sim, _call(sim, 0.0, [1.0]), telemetry=FixedTelemetry(clocks=(1500.0, 1980.0, 1700.0)))
    assert t.sm_clock_mhz == 1700.0 and t.power_w == 650.0
    t = _measure(sim, _call(sim, 0.0, [1.0]), telemetry=NoTelemetry("no NVML here"))
    assert t.sm_clock_mhz is None and t.power_w is None and t.telemetry_reason == "no NVML here"


def test_nvml_telemetry_without_pynvml_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    tel = nvml_telemetry("58b5f2f9-0000-0000-0000-000000000000")
    assert tel.read() == (None, None) and "nvidia-ml-py" in tel.reason


def test_wall_timer_brackets_each_call():
    """cuda_event_times_ms keeps the former timer: warm-up, synchronize, event, call, event, wait."""
    sim = SimGpu()
    durations = iter([9.0, 1.0, 3.0, 2.0])  # one warm-up call, then three timed ones
    times = cuda_event_times_ms(lambda: sim.kernel(next(durations)), reps=3, warmup=1, device=sim)
    assert times == pytest.approx([1.0 + LAUNCH_MS, 3.0 + LAUNCH_MS, 2.0 + LAUNCH_MS])
    durations = iter([5.0, 1.0, 4.0, 2.0])
    assert cuda_event_median_ms(lambda: sim.kernel(next(durations)), reps=4, warmup=0, device=sim) == \
        pytest.approx(3.0 + LAUNCH_MS)


def _timing(gpu_ms: float, method="cuda_graph", reason=None, clock=None, queued=None) -> Timing:
    return Timing(gpu_ms=gpu_ms, host_us=gpu_ms * 100, wall_ms=gpu_ms + 0.5, method=method, fallback_reason=reason,
                  calls_per_sample=1, gpu_samples_ms=(gpu_ms,), host_samples_us=(), wall_samples_ms=(),
                  l2_flushed=False, host_bound_samples=0, sm_clock_mhz=clock, power_w=None,
                  telemetry_reason="no NVML", host_queued_us=queued)


def test_round_order_reverses_odd_rounds():
    cands = [("a", None), ("b", None), ("c", None)]
    assert [n for n, _ in round_order(cands, 0)] == ["a", "b", "c"]
    assert [n for n, _ in round_order(cands, 1)] == ["c", "b", "a"]
    assert [n for n, _ in round_order(cands, 2)] == ["a", "b", "c"]


def test_rounds_row_from_timings():
    row = rounds_row("x", [_timing(3.0, clock=1900.0), _timing(1.0, clock=1700.0),
                           _timing(2.0, "back_to_back", "capture failed: no", clock=1800.0)], flops=2e12)
    assert row == {"x_ms": 2.0, "x_tflops": 2e12 / 2.0 / 1e9, "x_spread": 1.0, "x_host_us": 200.0, "x_wall_ms": 2.5,
                   "x_method": "back_to_back+cuda_graph", "x_fallback_reason": "capture failed: no",
                   "x_sm_clock_mhz": 1800.0}
    # the host time behind queued work: the median of the rounds that measured it
    row = rounds_row("x", [_timing(1.0, queued=30.0), _timing(1.0), _timing(1.0, queued=10.0),
                           _timing(1.0, queued=20.0)], flops=1.0)
    assert row["x_host_queued_us"] == 20.0


def test_round_robin_interleaves_candidates_and_keeps_the_median_of_rounds():
    order: list[str] = []
    samples = {"a": iter([3.0, 1.0, 2.0]), "b": iter([4.0, 4.0, 8.0])}

    def refuses():
        raise RuntimeError("no kernel for this shape\nsecond line")

    def timer(fn):
        name = fn()
        order.append(name)
        return _timing(next(samples[name]))

    row: dict = {}
    time_round_robin(row, [("a", lambda: "a"), ("b", lambda: "b"), ("c", refuses)], flops=2e12, rounds=3, timer=timer)
    # in turn, odd rounds backwards (no candidate always follows the same one); a refusing candidate is not timed again
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert row["a_ms"] == 2.0 and row["a_tflops"] == 2e12 / 2.0 / 1e9 and row["a_spread"] == (3.0 - 1.0) / 2.0
    assert row["a_host_us"] == 200.0 and row["a_wall_ms"] == 2.5 and row["a_method"] == "cuda_graph"
    assert row["b_ms"] == 4.0 and row["b_spread"] == 1.0
    assert row["c_error"] == "no kernel for this shape" and "c_ms" not in row


def test_round_robin_takes_a_timer_of_milliseconds():
    """The scripts' own timers return a time in ms: only _ms, _tflops and _spread then."""
    times = iter([2.0, 4.0, 3.0])
    row: dict = {}
    time_round_robin(row, [("a", lambda: None)], flops=1e12, rounds=3, timer=lambda fn: next(times))
    assert row == {"a_ms": 3.0, "a_tflops": 1e12 / 3.0 / 1e9, "a_spread": 2.0 / 3.0}


def test_round_robin_default_timer_is_measure(monkeypatch):
    from attention_conformance.kernels import timing

    seen = []
    monkeypatch.setattr(timing, "measure", lambda fn, **kw: seen.append(kw) or _timing(1.0))
    row: dict = {}
    time_round_robin(row, [("a", lambda: None)], flops=1e12, rounds=2)
    assert seen == [{"reps": 25, "warmup": 5}] * 2 and row["a_method"] == "cuda_graph"


# --- on a GPU ---------------------------------------------------------------------------------------------------

def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


#: the host work before the kernel in the GPU-time tests (issue: 2 ms of host work, then a 0.2 ms kernel)
HOST_WORK_MS = 2.0


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _sleep_cycles(torch, ms: float) -> int:
    """Cycles of ``torch.cuda._sleep`` that take `ms` on this GPU, measured against events (median of 5)."""
    probe = 2_000_000
    times = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return int(probe * ms / sorted(times[1:])[2])


def _host_then_kernel(torch, refuse_capture: bool = False, cycles: int | None = None):
    cycles = _sleep_cycles(torch, 0.2) if cycles is None else cycles

    def call():
        if refuse_capture and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("this call refuses to be captured")
        _busy_wait(HOST_WORK_MS / 1e3)
        torch.cuda._sleep(cycles)

    return call


def _charged_as_the_kernel_alone(torch, refuse_capture: bool = False, **kw):
    """`measure` of the host-work-then-kernel call, its bounds and the slowest wall time of the kernel alone: the
    same kernel alone, measured the same way just before and just after it, each within 25%. The tests that use it are
    marked ``gpu_alone``: under pytest-xdist on CUDA no other worker's test runs meanwhile (tox -e gpu's command with 8
    workers on an H100 read the 0.2 ms kernel as 0.74 ms of GPU time beside them, the other workers' kernels in its
    time slices). A process outside the run may still share the GPU, so the reference is taken in the same
    conditions as the measurement, not assumed, and is only held to what keeps the test able to fail: the kernel ran
    (at least half its calibrated 0.2 ms) and the band stays clear of the 2 ms of host work a timer that charged it
    would add. Sharing only adds time, so the band's floor is the fastest single sample of the kernel alone (an H100
    beside other workers: references with medians 0.2835 and 0.4807 ms, then the measurement 0.2016 ms)."""
    cycles = _sleep_cycles(torch, 0.2)
    alone = [measure(lambda: torch.cuda._sleep(cycles), **kw)]
    t = measure(_host_then_kernel(torch, refuse_capture, cycles), **kw)
    alone.append(measure(lambda: torch.cuda._sleep(cycles), **kw))
    fastest = min(min(a.gpu_samples_ms) for a in alone)
    lo, hi = 0.75 * fastest, 1.25 * max(a.gpu_ms for a in alone)
    assert 0.5 * 0.2 <= fastest and hi < HOST_WORK_MS, f"the 0.2 ms kernel alone took {[a.describe() for a in alone]}"
    return t, lo, hi, max(a.wall_ms for a in alone)


def _beside_alone(t, lo: float, hi: float) -> str:
    """A measurement beside the band the kernel alone gave (`_charged_as_the_kernel_alone`)."""
    return f"{t.describe()}; the kernel alone: fastest {lo / 0.75:.4f}, median up to {hi / 1.25:.4f} ms"


@pytest.mark.gpu
@pytest.mark.gpu_alone
def test_gpu_host_work_before_a_kernel_is_not_gpu_time():
    """2 ms of host work, then a 0.2 ms kernel: ~0.2 ms of GPU time (within 25%), ~2.2 ms of wall time.

    On a quiet host the wall time is ~2.2 ms; on a busy one (before ``gpu_alone``: tox -e gpu's 8 workers beside
    Inductor's compile workers) the 2 ms busy wait itself stretches (measured on the H200: host 5.55 ms, wall 5.69 ms,
    GPU 0.199 ms), so the wall time is bounded by the host time measured in the same call of `measure`."""
    torch = _torch_cuda()
    t, lo, hi, alone_wall_ms = _charged_as_the_kernel_alone(torch, reps=15, warmup=3)
    assert t.method == "cuda_graph", t.describe()
    assert lo <= t.gpu_ms <= hi, _beside_alone(t, lo, hi)
    # the host work is host time (under load the thread also waits its turn), behind queued work as well
    assert t.host_us >= HOST_WORK_MS * 1e3, t.describe()
    assert t.host_queued_us is not None and t.host_queued_us >= HOST_WORK_MS * 1e3, t.describe()
    # wall = host work + kernel, the kernel's part as long as the wall time of the kernel alone in the same conditions
    # (under other workers' kernels a wall sample's kernel waits its turn: an H100 with 4 workers read wall 2.90 ms
    # for host 2.01 ms and a GPU time of 0.196 ms)
    host_ms = t.host_us / 1e3
    assert 0.95 * (HOST_WORK_MS + 0.2) <= t.wall_ms <= 1.25 * (host_ms + max(0.2, alone_wall_ms)), \
        f"{_beside_alone(t, lo, hi)}; its wall time alone up to {alone_wall_ms:.4f} ms"
    assert (t.sm_clock_mhz is None) == (t.telemetry_reason is not None), t.describe()


@pytest.mark.gpu
@pytest.mark.gpu_alone
def test_gpu_back_to_back_fallback_hides_the_host_time_too():
    torch = _torch_cuda()
    t, lo, hi, _ = _charged_as_the_kernel_alone(torch, refuse_capture=True, reps=10, warmup=2)
    assert t.method == "back_to_back" and "refuses to be captured" in t.fallback_reason, t.describe()
    assert lo <= t.gpu_ms <= hi, _beside_alone(t, lo, hi)
    # a sample whose enqueueing outlasted the hold (the thread descheduled under load: measured once in 10 on the
    # H200 under tox -e gpu) is counted and lengthens the next hold; the median stays a hidden-host sample
    assert t.host_bound_samples < len(t.gpu_samples_ms) / 2, t.describe()


@pytest.mark.gpu
@pytest.mark.gpu_alone
def test_gpu_l2_flush_is_not_charged():
    torch = _torch_cuda()
    t, lo, hi, _ = _charged_as_the_kernel_alone(torch, reps=10, warmup=2, flush_l2=True)
    assert t.l2_flushed and t.calls_per_sample == 1
    assert lo <= t.gpu_ms <= hi, _beside_alone(t, lo, hi)


@pytest.mark.gpu
def test_gpu_a_failed_capture_leaves_the_generator_and_the_memory_as_they_were():
    """A capture that fails inside (here: a call that allocates 256 MiB, draws random numbers, then synchronizes)
    must leave no trace: on the H200 one such failure made every later ``torch.randn`` raise "Offset increment
    outside graph capture" and kept its private pool reserved (~17 GB per torch forward+backward) until an
    allocation ran out of memory; on an H100 the call's 256 MiB stayed reserved twice over (its block in the capture's
    pool and the warm-up's on the side stream): the allocator still counted the failed capture as under way, and
    releases no block while one is (`test_a_failed_capture_is_ended_and_its_pool_released_by_the_id_given_it`)."""
    torch = _torch_cuda()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    reserved = torch.cuda.memory_reserved()

    def allocates_then_syncs():
        x = torch.randn(64 * 2**20, device="cuda")  # 256 MiB in float32, from the capture's pool when captured
        if torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize()  # not allowed while capturing: the capture fails
        return x.sum()

    stream = torch.cuda.current_stream()
    t = measure(allocates_then_syncs, reps=3, warmup=1)
    assert t.method == "back_to_back" and t.fallback_reason, t.describe()
    # torch.cuda.graph's exit skips restoring the stream when the capture's end raises
    assert torch.cuda.current_stream() == stream
    torch.randn(16, device="cuda")  # raised "Offset increment outside graph capture" before the undo
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    # what stays reserved, should it: each segment's pool (0: the default one), stream, size and allocated MiB
    segments = [(str(s.get("segment_pool_id")), s.get("stream"), s["total_size"] >> 20, s["allocated_size"] >> 20)
                for s in torch.cuda.memory_snapshot()]
    assert torch.cuda.memory_reserved() - reserved < 2**28, (reserved, torch.cuda.memory_reserved(), segments)


def test_release_frames_frees_what_a_failed_call_held_without_a_collection():
    """A call that raises while capturing keeps its tensors in its frame, which the exception's traceback keeps, in a
    reference cycle when the exception is stored (the capture's `raised` list): freed only by a collection. The frames
    are cleared instead (TorchCuda.capture on a failed capture), so its private pool can be released at once."""
    import gc
    import weakref

    from attention_conformance.kernels.timing import release_frames

    class Block:  # stands for a tensor in the capture's pool
        pass

    alive: list[weakref.ref] = []
    raised: list[BaseException] = []

    def call() -> None:
        x = Block()
        alive.append(weakref.ref(x))
        raise RuntimeError("operation not permitted when stream is capturing")

    def calls() -> None:
        try:
            call()
        except RuntimeError as exc:
            raised.append(exc)  # the cycle: exc -> traceback -> this frame -> raised -> exc
            raise ValueError("the capture's end failed") from exc

    gc.disable()
    try:
        try:
            calls()
        except ValueError as outer:
            caught = outer
        assert alive[0]() is not None
        release_frames([caught])  # reaches the call's frame through __cause__
        del caught
        assert alive[0]() is None  # freed without gc.collect()
    finally:
        gc.enable()


class _FakeCaptureTorch:
    """torch as TorchCuda.capture uses it, with torch 2.11's behaviour on a failed capture (aten/src/ATen/cuda/
    CUDAGraph.cpp): ``capture_end`` ends the stream's capture first, which raises for a capture the call invalidated,
    so the allocator's capture is never ended; ``CUDAGraph.pool()`` raises for a capture that did not end. Records the
    allocator calls the undo makes."""

    POOL = (0, 7)

    def __init__(self, end_fails: bool):
        import types
        from contextlib import nullcontext

        fake = self
        self.calls: list[tuple] = []
        self.capturing = False

        class Graph:
            def pool(self):
                raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")

            def reset(self):
                fake.calls.append(("reset",))

        class Capture:
            def __init__(self, graph, pool=None, stream=None):
                fake.calls.append(("capture_begin", pool))

            def __enter__(self):
                fake.capturing = True

            def __exit__(self, *exc):
                fake.capturing = False
                if end_fails:
                    raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

        class Generator:
            state = "before"

            def clone_state(self):
                return self.state

            def graphsafe_set_state(self, state):
                fake.calls.append(("generator", state))

        class Stream:
            def wait_stream(self, other):
                pass

        stream = Stream()
        self.cuda = types.SimpleNamespace(
            CUDAGraph=Graph, Stream=Stream, graph=Capture, graph_pool_handle=lambda: self.POOL,
            default_generators=[Generator()], current_stream=lambda: stream, stream=lambda s: nullcontext(),
            set_stream=lambda s: self.calls.append(("set_stream", s is stream)),
            synchronize=lambda: None, empty_cache=lambda: self.calls.append(("empty_cache",)))
        self._C = types.SimpleNamespace(
            _cuda_endAllocateToPool=lambda dev, pool: self.calls.append(("endAllocateToPool", dev, pool)),
            _cuda_releasePool=lambda dev, pool: self.calls.append(("releasePool", dev, pool)))


@pytest.mark.parametrize("end_fails", [True, False])
def test_a_failed_capture_is_ended_and_its_pool_released_by_the_id_given_it(end_fails):
    """Where the capture's end fails (the call invalidated it: a synchronize while capturing), the allocator still
    counts the capture as under way, and while it does ``empty_cache`` releases nothing (on an H100 a failed capture of
    a call that allocates 256 MiB kept 516 MiB reserved): the undo ends it and releases its pool by the id the capture
    was given (``graph.pool()`` raises then). Where the end succeeded and only the call raised, ``graph.reset``
    releases the pool and the undo leaves the allocator alone."""
    from attention_conformance.kernels.timing import TorchCuda

    fake = _FakeCaptureTorch(end_fails)
    device = TorchCuda.__new__(TorchCuda)
    device._torch, device.index = fake, 3

    def call():
        if fake.capturing:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    with pytest.raises(CaptureFailed, match="operation not permitted when stream is capturing"):
        device.capture(call, calls=2)
    assert ("capture_begin", fake.POOL) in fake.calls
    undo = [c for c in fake.calls if c[0] in ("endAllocateToPool", "releasePool")]
    assert undo == ([("endAllocateToPool", 3, fake.POOL), ("releasePool", 3, fake.POOL)] if end_fails else [])
    assert ("set_stream", True) in fake.calls and ("generator", "before") in fake.calls
    assert fake.calls[-1] == ("empty_cache",) and ("reset",) in fake.calls


#: what a test that times the GPU calls (by name, in its own body)
_TIMERS = frozenset({"measure", "time_round_robin", "round_timing", "perf_counter", "_charged_as_the_kernel_alone"})
#: gpu tests that call one of them and time nothing, with the reason
_TIMES_NOTHING = {
    "test_gpu_a_failed_capture_leaves_the_generator_and_the_memory_as_they_were":
        "its measure is of a call that cannot be captured, for the state the failed capture leaves",
}


def _marks(nodes) -> set[str]:
    """The names of the ``pytest.mark.NAME`` among decorator (or pytestmark) expressions."""
    out = set()
    for node in nodes:
        f = node.func if isinstance(node, ast.Call) else node
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and f.value.attr == "mark":
            out.add(f.attr)
    return out


def test_every_gpu_test_that_times_the_gpu_is_marked_gpu_alone():
    """A test marked gpu that times the GPU (calls `measure`, `time_round_robin` or a perf counter) is marked
    gpu_alone too, so that under pytest-xdist on CUDA it has the GPU to itself (conformance/pytest_plugin.py
    `pytest_runtest_call`): beside 8 workers a timed 0.2 ms kernel read 0.74 ms on an H100."""
    root = Path(__file__).resolve().parents[1]
    found, missing = [], []
    for path in sorted(root.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                module |= _marks(node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value])
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                continue
            marks = _marks(node.decorator_list) | module
            names = {getattr(n, "id", None) or getattr(n, "attr", None) for n in ast.walk(node)}
            if "gpu" in marks and names & _TIMERS and node.name not in _TIMES_NOTHING:
                found.append(node.name)
                if "gpu_alone" not in marks:
                    missing.append(f"{path.relative_to(root)}::{node.name}")
    assert not missing, f"gpu tests that time the GPU without the gpu_alone marker: {missing}"
    assert "test_host_time_of_a_bound_call" in found and "test_gpu_l2_flush_is_not_charged" in found, found
