"""Peak device memory of one adapter call.

The seeds' whole argument is IO: the naive three-step attention writes and reads the N x N score and
probability matrices (2 GiB per head at N = 16,384 in FP16), a FlashAttention kernel never stores them,
so its memory grows linearly in N. A kernel that *claims* linear memory and silently materialises S or P
(a fallback to a materialising path) computes the right numbers and passes every value check; only its
memory gives it away. This module measures that (`conformance.verdict.growth` judges the claim).

Measurement (`PeakMemory`, CUDA only; a CPU call records nothing and claims nothing):

- **torch's allocator** (`torch.cuda.reset_peak_memory_stats` before the call, `max_memory_allocated`
  after, both minus ``memory_allocated`` before): exact for every tensor allocated through torch's caching
  allocator in this process - the adapter's uploads of q/k/v (SEMANTICS.md §1 shapes), its outputs, and
  every workspace a torch op, cuBLAS, cuDNN or flash-attn allocates through torch. It cannot see memory
  allocated with ``cudaMalloc`` directly (a library with its own allocator), the CUDA context, module
  code loaded lazily, or other processes.
- **the driver's view**, sampled every ``interval`` seconds on a thread while the call runs: this
  process's device memory through NVML (``nvidia-ml-py``, ``nvmlDeviceGetComputeRunningProcesses``) when
  it lists the process, else the device-wide used memory of ``torch.cuda.mem_get_info``. It sees every
  allocation, torch's or not, but only at the sampling instants (a peak shorter than the interval can be
  missed, so it is a lower bound); it counts the caching allocator's *reserved* pool (which may already
  hold the call's memory: then it sees no rise at all), context and lazy module loading on a first call,
  and, in the device-wide fallback, other processes on the same GPU. ``outside_torch_bytes`` = driver
  rise minus torch's reserved rise estimates what was allocated outside torch.

The verdict (`conformance.verdict.growth`) therefore rests on torch's allocator (exact, per process); the driver's
rise is recorded and its exponent reported beside it, as evidence for libraries that allocate outside torch.

The growth of the peak over N and its verdict: `conformance.verdict.growth`; which cases are measured and how
(CUDA only, after one warm-up call): `conformance.running.memory_policy`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["MemoryRecord", "PeakMemory", "io_bytes"]

_DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def io_bytes(case: Any, kind: str = "forward") -> int:
    """Bytes of a call's inputs and outputs in the case dtype (SEMANTICS.md §1 shapes).

    Forward: q, k, v (and a mask / bias of the full [B, Hq, Lq, Lk] when the case has one) in, out
    [B, Hq, Lq, dv] and an fp32 LSE [B, Hq, Lq] out. Backward adds dout in and dq, dk, dv out.
    """
    if kind not in ("forward", "backward"):
        raise ValueError(f"kind must be 'forward' or 'backward'; got {kind!r}")
    e = _DTYPE_BYTES.get(case.dtype, 2)
    q = case.B * case.Hq * case.Lq * case.d
    k = case.B * case.Hkv * case.Lk * case.d
    v = case.B * case.Hkv * case.Lk * case.dv
    o = case.B * case.Hq * case.Lq * case.dv
    total = e * (q + k + v + o) + 4 * case.B * case.Hq * case.Lq
    if getattr(case, "mask", None):
        total += case.B * case.Hq * case.Lq * case.Lk
    if getattr(case, "bias", None):
        total += e * case.B * case.Hq * case.Lq * case.Lk
    if kind == "backward":
        total += e * (o + q + k + v)
    return int(total)


@dataclass
class MemoryRecord:
    """Peak device memory of one call, in bytes above what was allocated before it."""

    device: str
    torch_peak_bytes: int  # max_memory_allocated during the call - memory_allocated before
    torch_reserved_bytes: int  # max_memory_reserved during the call - memory_reserved before
    torch_baseline_bytes: int  # memory_allocated before the call
    torch_retained_bytes: int = 0  # memory_allocated after - before: what the call left allocated (caches)
    driver_peak_bytes: int | None = None  # sampled rise of the driver's used memory (a lower bound)
    driver_source: str = ""  # "nvml-process" | "mem_get_info-device" | why none
    driver_samples: int = 0
    outside_torch_bytes: int | None = None  # max(0, driver rise - torch reserved rise)
    io_bytes: int | None = None  # inputs + outputs of the call (`io_bytes`)
    extra_bytes: int | None = None  # torch_peak_bytes - io_bytes (may be negative: inputs stayed on the host)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _nvml_process_reader(device_index: int) -> Callable[[], int | None] | None:
    """A reader of this process's device memory through NVML, or None when NVML cannot give it."""
    try:
        import pynvml  # nvidia-ml-py
        import torch

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device_index).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
    except Exception:
        return None
    pid = os.getpid()

    def read() -> int | None:
        try:
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if p.pid == pid and p.usedGpuMemory is not None:
                    return int(p.usedGpuMemory)
        except Exception:
            return None
        return None

    return read if read() is not None else None


def _mem_get_info_reader(device_index: int) -> Callable[[], int | None]:
    import torch

    def read() -> int | None:
        try:
            free, total = torch.cuda.mem_get_info(device_index)
        except Exception:
            return None
        return int(total - free)

    return read


_READERS: dict[int, tuple[str, Callable[[], int | None]]] = {}


def _driver_reader(device_index: int) -> tuple[str, Callable[[], int | None]]:
    if device_index not in _READERS:
        nvml = _nvml_process_reader(device_index)
        _READERS[device_index] = (("nvml-process", nvml) if nvml is not None
                                  else ("mem_get_info-device", _mem_get_info_reader(device_index)))
    return _READERS[device_index]


class PeakMemory:
    """Context manager measuring one call's peak device memory on CUDA; ``record`` is None elsewhere.

    >>> with PeakMemory("cpu") as pm:
    ...     _ = sum(range(10))
    >>> pm.record is None
    True
    """

    def __init__(self, device: str, *, interval: float = 0.001, sample_driver: bool = True):
        self.device = str(device)
        self.interval = interval
        self.sample_driver = sample_driver
        self.record: MemoryRecord | None = None
        self.error: str | None = None
        self._active = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._driver_max: int | None = None
        self._samples = 0

    def _index(self) -> int:
        import torch

        dev = torch.device(self.device)
        return dev.index if dev.index is not None else torch.cuda.current_device()

    def __enter__(self) -> PeakMemory:
        if not self.device.startswith("cuda"):
            return self
        try:
            import torch

            if not torch.cuda.is_available():
                return self
            self._idx = self._index()
            torch.cuda.synchronize(self._idx)
            self._alloc0 = torch.cuda.memory_allocated(self._idx)
            self._reserved0 = torch.cuda.memory_reserved(self._idx)
            torch.cuda.reset_peak_memory_stats(self._idx)
            self._active = True
        except Exception as exc:  # a broken CUDA state: measure nothing, never fail the call for it
            self.error = f"{type(exc).__name__}: {exc}"
            return self
        if self.sample_driver:
            self._source, read = _driver_reader(self._idx)
            self._driver0 = read()
            if self._driver0 is not None:
                self._driver_max = self._driver0
                self._thread = threading.Thread(target=self._poll, args=(read,), daemon=True)
                self._thread.start()
        return self

    def _poll(self, read: Callable[[], int | None]) -> None:
        while not self._stop.is_set():
            used = read()
            if used is not None:
                self._samples += 1
                if self._driver_max is None or used > self._driver_max:
                    self._driver_max = used
            self._stop.wait(self.interval)

    def __exit__(self, *exc_info) -> None:
        if not self._active:
            return
        import torch

        try:
            torch.cuda.synchronize(self._idx)
        except Exception as exc:  # the call left the device broken; the caller reports that
            self.error = f"{type(exc).__name__}: {exc}"
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        try:
            peak = torch.cuda.max_memory_allocated(self._idx) - self._alloc0
            reserved = torch.cuda.max_memory_reserved(self._idx) - self._reserved0
            retained = torch.cuda.memory_allocated(self._idx) - self._alloc0
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        rec = MemoryRecord(device=self.device, torch_peak_bytes=int(peak), torch_reserved_bytes=int(reserved),
                           torch_baseline_bytes=int(self._alloc0), torch_retained_bytes=int(retained))
        if self._thread is not None and self._driver_max is not None:
            rise = max(0, self._driver_max - self._driver0)
            rec.driver_peak_bytes = int(rise)
            rec.driver_source = self._source
            rec.driver_samples = self._samples
            rec.outside_torch_bytes = int(max(0, rise - max(0, reserved)))
        else:
            rec.driver_source = "not sampled"
        self.record = rec
