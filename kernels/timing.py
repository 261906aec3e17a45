"""Timing of one call on the GPU, and of several calls in paired alternating rounds (issue 40).

`measure` gives three figures for any callable, each the median of its samples, in one `Timing`:

- **GPU time** (`Timing.gpu_ms`, the headline): how long the GPU works on one call, without the host's launch
  overhead. Method ``cuda_graph``: `Timing.calls_per_sample` calls are captured back to back in one CUDA graph and
  each sample replays the graph between two events, divided by the number of calls. Where the call cannot be
  captured (it raises during capture, synchronizes, allocates outside torch's allocator, or its work runs outside the
  capturing stream, so that the replay does less than half the work of the same calls launched directly) the method
  is ``back_to_back``, and `Timing.fallback_reason` says why: the calls are enqueued one after another between two
  events. Before either, the stream is held busy (`Device.hold`) for longer than enqueueing takes, so that the host's
  time hides behind the queue and the events bracket the GPU's work alone; a sample whose enqueueing outlasted the
  hold is counted in `Timing.host_bound_samples` (its GPU figure may include host time) and lengthens the next hold.
- **host time** (`Timing.host_us`): ``perf_counter`` around one call, the GPU drained before it: what the call costs
  the calling thread (Python, argument checks, launches; all of the GPU time too if the call synchronizes).
  Beside it `Timing.host_queued_us`: the host time of one call issued behind queued GPU work, as a training step
  issues its calls (the first GPU estimate's calls, at least `PROBE_MIN_CALLS` a sample launched back to back behind
  a hold, each call timed alone, the median of them all). Python's cyclic garbage collector is off while `measure`
  runs, as in `timeit`, so that a collection does not land in one call's host time. On an H100 the two differ most
  for calls of several launches: the FA3 backward read 16-86 us from a drained GPU, 13-23 us behind queued work
  (docs/fa3_backward.md, "Host time of a call").
- **wall time** (`Timing.wall_ms`): event, call, event, synchronize; the figure this module gave before issue 40,
  which charges the call's host time to every sample (`cuda_event_times_ms`).

Optionally the L2 cache is flushed before every GPU-timed sample (a write over a buffer twice the size of L2; the
sample is then one call), and the SM clock and board power are read through NVML while each GPU sample runs
(``pynvml`` from nvidia-ml-py; absent, the readings are None and `Timing.telemetry_reason` says why).

`time_round_robin` times several calls in alternating rounds and writes their figures into a row.

Every clock is injected: the GPU side as a `Device` (`TorchCuda` on torch's current device and stream), the host side
as a ``perf_counter``-like function, the readings as a `Telemetry`; tests/kernels/test_timing.py drives the logic on
a simulated device on the CPU.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "Device", "Telemetry", "NoTelemetry", "NvmlTelemetry", "TorchCuda", "Timing", "Method", "CaptureFailed",
    "measure", "release_frames", "host_times_us", "wall_times_ms", "calls_per_sample", "l2_flush_bytes", "spread",
    "round_order", "rounds_row", "round_timing", "time_round_robin", "nvml_telemetry", "cuda_event_times_ms",
    "cuda_event_median_ms",
]

Method = Literal["cuda_graph", "back_to_back"]

#: a GPU sample lasts about this long: calls per sample = ceil(this / time of one call), at most `MAX_CALLS`
TARGET_SAMPLE_MS = 1.0
MAX_CALLS = 100
#: the replayed graph must do at least this fraction of the directly launched calls' GPU time, else its work is
#: taken to run outside the capture and the calls are timed back to back
CAPTURE_CHECK = 0.5
#: samples of the calls launched directly before the graph is captured (`measure`)
PROBES = 3
#: the first GPU estimate launches at least this many calls back to back (one per sample when L2 is flushed), so that
#: its enqueue time gives `Timing.host_queued_us`
PROBE_MIN_CALLS = 4
#: the hold before a sample lasts this many times the time to enqueue the sample, plus `HOLD_MARGIN_MS`, at most
#: `HOLD_CAP_MS`
HOLD_FACTOR = 1.5
HOLD_MARGIN_MS = 0.05
HOLD_CAP_MS = 1000.0
#: L2 flush buffer where the device does not report its L2 size (twice the largest L2 of current GPUs)
DEFAULT_FLUSH_BYTES = 256 << 20


class Telemetry(Protocol):
    """SM clock (MHz) and board power (W) of the timed device, read while a sample runs."""

    #: why the readings are None (None while they are read)
    reason: str | None

    def read(self) -> tuple[float | None, float | None]:
        """(SM clock in MHz, board power in W) now; None where the reading failed."""


class Device(Protocol):
    """The GPU side of the timing: one stream, events on it, and what a sample needs around the call."""

    def synchronize(self) -> None:
        """Wait until all queued work is done."""

    def record(self) -> Any:
        """An event recorded on the stream now (an opaque marker for `elapsed_ms`)."""

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two recorded events, after waiting for `end`."""

    def capture(self, fn: Callable[[], object], calls: int) -> Callable[[], None]:
        """`calls` calls of `fn` captured back to back; the result replays them on the stream. Raises
        `CaptureFailed` with the reason when `fn` cannot be captured."""

    def hold(self, ms: float) -> None:
        """Keep the stream busy for about `ms` milliseconds, at a negligible cost to the host."""

    def flush_l2(self) -> None:
        """Enqueue a write over more memory than the L2 cache holds."""

    def telemetry(self) -> Telemetry:
        """The clock and power readings of this device."""


def release_frames(excs: Sequence[BaseException]) -> None:
    """Clear the local variables of every finished frame in the tracebacks of `excs` and of the exceptions they
    chain to (``__cause__``, ``__context__``), so that what those frames held (the tensors a call made before it
    raised) is freed now, not when a garbage collection finds the cycle exception -> traceback -> frame -> exception.
    Frames still running (the caller's) are left as they are."""
    seen: set[int] = set()
    todo = list(excs)
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        todo.extend((exc.__cause__, exc.__context__))


class CaptureFailed(RuntimeError):
    """The call cannot be captured in a CUDA graph; the message is the reason."""


@dataclass(frozen=True)
class Timing:
    """The figures of one callable (`measure`); times are medians of the samples below."""

    #: GPU time of one call in ms (the headline figure), by `method`
    gpu_ms: float
    #: host time of one call in microseconds (perf_counter around the call, the GPU drained before it)
    host_us: float
    #: wall time of one call in ms (event, call, event, synchronize)
    wall_ms: float
    #: how `gpu_ms` was measured: replay of a captured graph, or calls launched back to back
    method: Method
    #: why the call was not timed by graph replay (None for ``cuda_graph``)
    fallback_reason: str | None
    #: calls per GPU sample (in the graph, or between the events)
    calls_per_sample: int
    gpu_samples_ms: tuple[float, ...]
    host_samples_us: tuple[float, ...]
    wall_samples_ms: tuple[float, ...]
    #: whether L2 was flushed before every GPU-timed sample
    l2_flushed: bool
    #: GPU samples whose enqueueing outlasted the hold before them (their GPU figure may include host time)
    host_bound_samples: int
    #: median SM clock (MHz) and board power (W) read during the GPU samples; None when not read
    sm_clock_mhz: float | None
    power_w: float | None
    #: why the clock or power is None
    telemetry_reason: str | None
    #: host time of one call issued behind queued GPU work, in microseconds (the median of the first GPU estimate's
    #: calls, each timed alone); None where not measured
    host_queued_us: float | None = None

    def describe(self) -> str:
        """One line: the three figures and how the GPU time was measured."""
        how = self.method + (f" ({self.fallback_reason})" if self.fallback_reason else "")
        extra = f", SM {self.sm_clock_mhz:.0f} MHz" if self.sm_clock_mhz is not None else ""
        extra += f", {self.power_w:.0f} W" if self.power_w is not None else ""
        queued = f" ({self.host_queued_us:.1f} us queued)" if self.host_queued_us is not None else ""
        return (f"GPU {self.gpu_ms:.4f} ms by {how}, host {self.host_us:.1f} us{queued}, wall {self.wall_ms:.4f} ms"
                f"{extra}")


def spread(values: Sequence[float]) -> float:
    """(max - min) / median of `values` (0 for a zero median)."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def calls_per_sample(call_ms: float, flush_l2: bool = False) -> int:
    """Calls in one GPU sample for a call of about `call_ms`: enough for `TARGET_SAMPLE_MS` (events resolve about
    half a microsecond), at most `MAX_CALLS`; one when L2 is flushed before every sample (each sample one cold
    call)."""
    if flush_l2:
        return 1
    if call_ms <= 0:
        return MAX_CALLS
    return max(1, min(MAX_CALLS, math.ceil(round(TARGET_SAMPLE_MS / call_ms, 6))))  # round: 1 / 0.2 is 5 calls


def l2_flush_bytes(l2_cache_size: int | None) -> int:
    """Size of the L2 flush buffer: twice the device's L2 (the H200's 60 MB -> 120 MB), or `DEFAULT_FLUSH_BYTES`
    where the size is unknown (None or 0)."""
    return 2 * l2_cache_size if l2_cache_size else DEFAULT_FLUSH_BYTES


def _hold_ms(enqueue_ms: float) -> float:
    return min(HOLD_CAP_MS, HOLD_FACTOR * enqueue_ms + HOLD_MARGIN_MS)


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def host_times_us(fn: Callable[[], object], reps: int, device: Device,
                  host_clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """`reps` host times of one call in microseconds: the device drained, then `host_clock` (seconds) around the
    call alone."""
    out = []
    for _ in range(reps):
        device.synchronize()
        t0 = host_clock()
        fn()
        out.append((host_clock() - t0) * 1e6)
    return out


def wall_times_ms(fn: Callable[[], object], reps: int, device: Device, flush_l2: bool = False) -> list[float]:
    """`reps` wall times of one call in ms: event, call, event, wait for the second event (the L2 flushed and the
    device drained first if `flush_l2`)."""
    out = []
    for _ in range(reps):
        if flush_l2:
            device.flush_l2()
            device.synchronize()
        start = device.record()
        # the start event reaches the GPU now, not with the call's first launch: a driver that batches submissions
        # would otherwise timestamp it after the call's host work (seen on the H200: 0.20 ms for 2 ms of host work
        # before a 0.2 ms kernel, against 2.23 ms in other runs)
        device.synchronize()
        fn()
        end = device.record()
        out.append(device.elapsed_ms(start, end))
    return out


@dataclass
class _GpuSampler:
    """GPU samples of one enqueue function (a graph replay, or `calls` direct calls): flush, hold, event, enqueue,
    event, readings, wait. The hold grows when enqueueing outlasts it."""

    device: Device
    telemetry: Telemetry
    host_clock: Callable[[], float]
    calls: int
    hold_ms: float
    flush_l2: bool
    host_bound: int = 0

    def sample(self, enqueue: Callable[[], object], readings: list[tuple[float | None, float | None]]) -> float:
        if self.flush_l2:
            self.device.flush_l2()
        self.device.hold(self.hold_ms)
        t0 = self.host_clock()
        start = self.device.record()
        enqueue()
        end = self.device.record()
        enqueue_ms = (self.host_clock() - t0) * 1e3
        readings.append(self.telemetry.read())
        ms = self.device.elapsed_ms(start, end) / self.calls
        if enqueue_ms > self.hold_ms:
            self.host_bound += 1
            self.hold_ms = _hold_ms(enqueue_ms)
        return ms


def _median_or_none(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _repeat(fn: Callable[[], object], n: int) -> Callable[[], None]:
    def enqueue() -> None:
        for _ in range(n):
            fn()
    return enqueue


def _repeat_timed(fn: Callable[[], object], n: int, host_clock: Callable[[], float],
                  out_us: list[float]) -> Callable[[], None]:
    """`_repeat`, appending each call's host time (microseconds, `host_clock` around the call alone) to `out_us`."""
    def enqueue() -> None:
        for _ in range(n):
            t0 = host_clock()
            fn()
            out_us.append((host_clock() - t0) * 1e6)
    return enqueue


def _graph(fn: Callable[[], object], n: int, direct_ms: float, device: Device, telemetry: Telemetry,
           host_clock: Callable[[], float], flush_l2: bool) -> tuple[_GpuSampler, Callable[[], object]]:
    """The sampler and the replay of `n` calls of `fn` captured in one graph. Raises `CaptureFailed` where the capture
    fails or the replay does less than `CAPTURE_CHECK` of the GPU time of the calls launched directly (`direct_ms`
    per call), and whatever a failing replay raises."""
    replay = device.capture(fn, n)
    sampler = _GpuSampler(device, telemetry, host_clock, n, HOLD_MARGIN_MS, flush_l2)
    t0 = host_clock()
    replay()  # the first replay, untimed: uploads the graph, and its enqueue time sizes the hold
    device.synchronize()
    sampler.hold_ms = _hold_ms((host_clock() - t0) * 1e3)
    graph_ms = sampler.sample(replay, [])
    if graph_ms < CAPTURE_CHECK * direct_ms:
        raise CaptureFailed(f"the replayed graph takes {graph_ms:.4g} ms per call, the calls launched directly "
                            f"{direct_ms:.4g} ms: part of the call's work runs outside the captured stream")
    return sampler, replay


def measure(fn: Callable[[], object], *, reps: int = 25, warmup: int = 5, flush_l2: bool = False,
            calls: int | None = None, device: Device | None = None, telemetry: Telemetry | None = None,
            host_clock: Callable[[], float] = time.perf_counter) -> Timing:
    """GPU, host and wall time of one call of `fn` (see the module docstring), each the median of `reps` samples
    after `warmup` untimed calls.

    `calls`: calls per GPU sample (default `calls_per_sample` of a first estimate). `flush_l2`: flush L2 before every
    wall and GPU sample (a GPU sample is then one call, unless `calls` says otherwise). `device` (default
    `TorchCuda.current()`), `telemetry` (default the device's) and `host_clock` (seconds) are the clocks.
    """
    if reps < 1:
        raise ValueError(f"measure: reps must be >= 1, got {reps}")
    # as timeit does: no cyclic garbage collection inside the timed calls (a collection the calls of other candidates
    # set up would otherwise land in this one's host samples); the caller's setting is restored on the way out
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _measure(fn, reps, warmup, flush_l2, calls, device, telemetry, host_clock)
    finally:
        if gc_was_enabled:
            gc.enable()


def _measure(fn: Callable[[], object], reps: int, warmup: int, flush_l2: bool, calls: int | None,
             device: Device | None, telemetry: Telemetry | None, host_clock: Callable[[], float]) -> Timing:
    device = device if device is not None else TorchCuda.current()
    telemetry = telemetry if telemetry is not None else device.telemetry()
    for _ in range(warmup):
        fn()
    device.synchronize()
    host = host_times_us(fn, reps, device, host_clock)
    wall = wall_times_ms(fn, reps, device, flush_l2)
    host_ms = statistics.median(host) / 1e3

    # a first GPU estimate from calls launched back to back, the least of `PROBES` samples (host time that leaks
    # into a sample only adds to it): it sizes the samples and checks the graph; its enqueue time per call is the
    # host time of a call issued behind queued work
    n = calls or calls_per_sample(statistics.median(wall), flush_l2)
    m = n if flush_l2 else max(n, PROBE_MIN_CALLS)
    probe = _GpuSampler(device, telemetry, host_clock, m, _hold_ms(m * host_ms), flush_l2)
    queued_us: list[float] = []
    direct_ms = min(probe.sample(_repeat_timed(fn, m, host_clock, queued_us), []) for _ in range(PROBES))
    host_queued_us = statistics.median(queued_us)
    n = calls or calls_per_sample(direct_ms, flush_l2)

    method: Method = "cuda_graph"
    reason: str | None = None
    try:
        sampler, enqueue = _graph(fn, n, direct_ms, device, telemetry, host_clock, flush_l2)
    except Exception as exc:  # CaptureFailed, or a replay that failed
        method = "back_to_back"
        reason = ((str(exc).strip().splitlines() or [""])[0][:300] if isinstance(exc, CaptureFailed)
                  else f"graph replay failed: {_reason(exc)}")
        sampler = _GpuSampler(device, telemetry, host_clock, n, _hold_ms(n * host_ms), flush_l2)
        enqueue = _repeat(fn, n)
    readings: list[tuple[float | None, float | None]] = []
    gpu = [sampler.sample(enqueue, readings) for _ in range(reps)]
    return Timing(
        gpu_ms=statistics.median(gpu), host_us=statistics.median(host), wall_ms=statistics.median(wall),
        method=method, fallback_reason=reason, calls_per_sample=n, gpu_samples_ms=tuple(gpu),
        host_samples_us=tuple(host), wall_samples_ms=tuple(wall), l2_flushed=flush_l2,
        host_bound_samples=sampler.host_bound, sm_clock_mhz=_median_or_none([c for c, _ in readings]),
        power_w=_median_or_none([p for _, p in readings]), telemetry_reason=telemetry.reason,
        host_queued_us=host_queued_us,
    )


class NoTelemetry:
    """No readings; `reason` says why."""

    def __init__(self, reason: str):
        self.reason: str | None = reason

    def read(self) -> tuple[float | None, float | None]:
        return None, None


class NvmlTelemetry:
    """SM clock and board power of one device through NVML (``pynvml``). A reading that fails is None, and `reason`
    keeps the first failure. The board power is the driver's figure (on Hopper an average over about a second)."""

    def __init__(self, nvml: Any, handle: Any):
        self._nvml, self._handle = nvml, handle
        self.reason: str | None = None

    def _get(self, what: str, read: Callable[[], float]) -> float | None:
        try:
            return read()
        except Exception as exc:  # pynvml.NVMLError: not supported on this device, ...
            self.reason = self.reason or f"NVML {what}: {_reason(exc)}"
            return None

    def read(self) -> tuple[float | None, float | None]:
        nvml, h = self._nvml, self._handle
        clock = self._get("SM clock", lambda: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)))
        power = self._get("power", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
        return clock, power


def nvml_telemetry(uuid: str) -> Telemetry:
    """`NvmlTelemetry` of the device with CUDA UUID `uuid` (with or without NVML's ``GPU-`` / ``MIG-`` prefix), or
    `NoTelemetry` with the reason (nvidia-ml-py not installed, NVML not loadable, no such device)."""
    try:
        import pynvml
    except ImportError as exc:
        return NoTelemetry(f"pynvml not importable (pip install nvidia-ml-py): {_reason(exc)}")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, driver not loaded
        return NoTelemetry(f"NVML init failed: {_reason(exc)}")
    names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
    errors = []
    for name in names:
        try:
            return NvmlTelemetry(pynvml, pynvml.nvmlDeviceGetHandleByUUID(name.encode()))
        except Exception as exc:  # NVMLError_NotFound
            errors.append(f"{name}: {_reason(exc)}")
    return NoTelemetry("NVML has no device of this UUID (" + "; ".join(errors) + ")")


class TorchCuda:
    """`Device` on torch's current CUDA device and stream (one instance per device: `current`).

    The hold is ``torch.cuda._sleep`` (a one-thread kernel spinning on the SM clock), its cycles per millisecond
    measured against events once; the L2 flush zeroes a buffer of `l2_flush_bytes`; a capture warms the call up once
    on a side stream and captures it there (torch's recipe), in CUDA's global capture mode, so that a call that
    synchronizes or allocates outside torch's allocator fails the capture.
    """

    _instances: dict[int, TorchCuda] = {}

    #: cycles spun to measure the hold's cycles per millisecond (about 1 ms on an H200)
    CALIBRATION_CYCLES = 2_000_000

    def __init__(self, index: int):
        import torch

        self._torch = torch
        self.index = index
        self._cycles_per_ms: float | None = None
        self._flush: Any = None
        self._telemetry: Telemetry | None = None

    @classmethod
    def current(cls) -> TorchCuda:
        """The instance of torch's current CUDA device."""
        import torch

        index = torch.cuda.current_device()
        if index not in cls._instances:
            cls._instances[index] = cls(index)
        return cls._instances[index]

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def record(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return start.elapsed_time(end)

    def capture(self, fn: Callable[[], object], calls: int) -> Callable[[], None]:
        torch = self._torch
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        raised: list[BaseException] = []

        def calls_of_fn() -> None:
            for _ in range(calls):
                try:
                    fn()
                except BaseException as exc:
                    raised.append(exc)
                    raise

        generators = list(torch.cuda.default_generators)
        states = [g.clone_state() for g in generators]  # each one's state before the capture marks it capturing
        stream = torch.cuda.current_stream()
        # the capture's memory pool named here, not asked of the graph: CUDAGraph.pool() raises for a capture that
        # did not end ("without a preceding successful capture"), and the undo below needs the id exactly then
        pool = torch.cuda.graph_pool_handle()
        try:
            side.wait_stream(stream)
            with torch.cuda.stream(side):
                fn()
            stream.wait_stream(side)
            with torch.cuda.graph(graph, pool=pool, stream=side):
                calls_of_fn()
        except Exception as exc:
            # the capture ended (its end released nothing wrong) when the call's own exception came through the end
            # of the capture unchanged; a capture the call invalidated fails at its end with another error
            ended = bool(raised) and exc is raised[-1]
            reason = f"capture failed: {_reason(raised[0] if raised else exc)}"
            # torch.cuda.graph's exit leaves the capture's stream current when the capture's end raises
            torch.cuda.set_stream(stream)
            # the tensors the call made while capturing live on in its frames, which the exceptions' tracebacks keep
            # (in reference cycles: until a collection): they are freed here, so that the pool below can be released
            release_frames([*raised, exc])
            raised.clear()
            del exc
            self._undo_capture(graph, generators, states, None if ended else pool)
            raise CaptureFailed(reason) from None
        return graph.replay

    def _undo_capture(self, graph: Any, generators: list, states: list, pool: Any) -> None:
        """What a capture that failed leaves behind, undone (measured on the H200 and an H100, torch 2.11): the CUDA
        generators stay marked capturing, so that the next ``torch.randn`` raises "Offset increment outside graph
        capture"; and a capture whose end failed (`pool`: its memory pool, None where the end succeeded) stays
        registered with the caching allocator, because ``CUDAGraph::capture_end`` ends the stream's capture before it
        ends the allocator's and the first raises: while a capture is registered, ``empty_cache`` releases no block of
        any pool (~17 GB held per failed capture of a forward+backward, until later allocations ran out of memory; a
        failed capture of a call that allocates 256 MiB kept 516 MiB reserved), and ``graph.reset`` releases the pool
        only of a capture that ended. The generators get their states from before the capture back, the allocator's
        capture is ended and the pool released by its id (``graph.pool()`` raises for a capture that did not end);
        each step is best effort (private torch API), the capture's own error is what is reported. The pool's blocks
        go back to the device once the tensors in them are freed: `capture` has released the failed call's frames
        before this, and a collection here frees what other cycles hold."""
        torch = self._torch
        try:
            torch.cuda.synchronize()
        except Exception:  # the failure left an error to collect; the capture's reason is the first one
            pass
        for gen, state in zip(generators, states, strict=True):
            try:
                gen.graphsafe_set_state(state)
            except Exception:
                pass
        for undo in ("_cuda_endAllocateToPool", "_cuda_releasePool") if pool is not None else ():
            try:  # stop routing allocations to the pool, then drop it
                getattr(torch._C, undo)(self.index, pool)
            except Exception:  # not this torch's API, or a capture that failed before it began allocating
                pass
        try:
            graph.reset()
        except Exception:
            pass
        gc.collect()  # what else of the capture a reference cycle holds
        torch.cuda.empty_cache()

    def hold(self, ms: float) -> None:
        if ms > 0:
            self._torch.cuda._sleep(max(1, int(ms * self._sleep_cycles_per_ms())))

    def _sleep_cycles_per_ms(self) -> float:
        if self._cycles_per_ms is None:
            torch = self._torch
            torch.cuda._sleep(1000)
            start = self.record()
            torch.cuda._sleep(self.CALIBRATION_CYCLES)
            end = self.record()
            self._cycles_per_ms = self.CALIBRATION_CYCLES / max(self.elapsed_ms(start, end), 1e-3)
        return self._cycles_per_ms

    def flush_l2(self) -> None:
        if self._flush is None:
            torch = self._torch
            size = l2_flush_bytes(getattr(torch.cuda.get_device_properties(self.index), "L2_cache_size", None))
            self._flush = torch.empty(size // 4, dtype=torch.int32, device=f"cuda:{self.index}")
        self._flush.zero_()

    def telemetry(self) -> Telemetry:
        if self._telemetry is None:
            uuid = getattr(self._torch.cuda.get_device_properties(self.index), "uuid", None)
            self._telemetry = (nvml_telemetry(str(uuid)) if uuid is not None
                               else NoTelemetry("torch does not report this device's UUID"))
        return self._telemetry


def round_order(cands: Sequence[tuple[str, Callable[[], object]]], round_index: int,
                ) -> Sequence[tuple[str, Callable[[], object]]]:
    """The candidates in the order round `round_index` times them: even rounds as given, odd rounds backwards."""
    return cands if round_index % 2 == 0 else cands[::-1]


def rounds_row(name: str, results: Sequence[Timing | float], flops: float) -> dict[str, Any]:
    """The row entries of one candidate from its rounds' results (a `Timing`, or a time in ms from a timer that gives
    only that): ``name + "_ms"`` the median GPU time of the rounds, ``_tflops`` from `flops`, ``_spread`` of the
    rounds' GPU times; for `Timing` results also ``_host_us``, ``_host_queued_us`` (where measured) and ``_wall_ms``
    (medians), ``_method`` (the methods
    of the rounds, joined by "+" where they differ), ``_fallback_reason`` (where a round fell back), and
    ``_sm_clock_mhz`` / ``_power_w`` (medians, where read)."""
    ms = [r.gpu_ms if isinstance(r, Timing) else float(r) for r in results]
    med = statistics.median(ms)
    row: dict[str, Any] = {name + "_ms": med, name + "_tflops": flops / med / 1e9, name + "_spread": spread(ms)}
    timings = [r for r in results if isinstance(r, Timing)]
    if timings:
        row[name + "_host_us"] = statistics.median(t.host_us for t in timings)
        queued = _median_or_none([t.host_queued_us for t in timings])
        if queued is not None:
            row[name + "_host_queued_us"] = queued
        row[name + "_wall_ms"] = statistics.median(t.wall_ms for t in timings)
        row[name + "_method"] = "+".join(sorted({t.method for t in timings}))
        reasons = sorted({t.fallback_reason for t in timings if t.fallback_reason})
        if reasons:
            row[name + "_fallback_reason"] = "; ".join(reasons)
        for key, values in (("_sm_clock_mhz", [t.sm_clock_mhz for t in timings]),
                            ("_power_w", [t.power_w for t in timings])):
            value = _median_or_none(values)
            if value is not None:
                row[name + key] = value
    return row


def round_timing(fn: Callable[[], object]) -> Timing:
    """One round's timing of a candidate in `time_round_robin` (its default timer): `measure` with 25 samples after 5
    warm-up calls."""
    return measure(fn, reps=25, warmup=5)


def time_round_robin(row: dict, cands: Sequence[tuple[str, Callable[[], object]]], flops: float, rounds: int = 3,
                     timer: Callable[[Callable[[], object]], Timing | float] | None = None) -> None:
    """Time every (name, fn) of `cands` in turn, `rounds` times, so that clock drift during a run affects every
    candidate alike; odd rounds go through `cands` backwards (`round_order`), so that no candidate always follows
    the same one (a candidate timed right after a power-hungry one can start at a lower clock: on the H200 one
    kernel timed first, after flash-attn-4, read 2-6% below the same kernel timed third in the same rounds).

    Each round's result is ``timer(fn)``: a `Timing` (default: `round_timing`) or a
    time in ms. Writes `rounds_row`'s entries: ``row[name + "_ms"]`` (the median GPU time of the rounds),
    ``_tflops``, ``_spread``, ``_host_us``, ``_wall_ms``, ``_method``, ...; a candidate that raises gets
    ``row[name + "_error"]`` (its first line) and is not timed again."""
    timer = timer or round_timing
    results: dict[str, list[Timing | float]] = {name: [] for name, _ in cands}
    for r in range(rounds):
        for name, fn in round_order(cands, r):
            if name + "_error" in row:
                continue
            try:
                results[name].append(timer(fn))
            except Exception as e:  # a backend refused the shape
                row[name + "_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    for name, got in results.items():
        if got:
            row.update(rounds_row(name, got, flops))


def cuda_event_times_ms(fn: Callable[[], object], reps: int = 20, warmup: int = 5,
                        device: Device | None = None) -> list[float]:
    """Wall times (`wall_times_ms`: event, call, event, synchronize) of `reps` calls after `warmup` untimed calls
    and a synchronize: the timer before issue 40, kept for the scripts that report it as such."""
    device = device if device is not None else TorchCuda.current()
    for _ in range(warmup):
        fn()
    device.synchronize()
    return wall_times_ms(fn, reps, device)


def cuda_event_median_ms(fn: Callable[[], object], reps: int = 20, warmup: int = 5,
                         device: Device | None = None) -> float:
    """Median of `cuda_event_times_ms` (a wall time)."""
    return statistics.median(cuda_event_times_ms(fn, reps, warmup, device))
