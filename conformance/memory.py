"""Peak device memory of one adapter call, and the growth exponent of a kernel's memory in N.

The seeds' whole argument is IO: the naive three-step attention writes and reads the N x N score and
probability matrices (2 GiB per head at N = 16,384 in FP16), a FlashAttention kernel never stores them,
so its memory grows linearly in N. A kernel that *claims* linear memory and silently materialises S or P
(a fallback to a materialising path) computes the right numbers and passes every value check; only its
memory gives it away. This module measures that and judges the claim.

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

The verdict therefore rests on torch's allocator (exact, per process); the driver's rise is recorded and
its exponent reported beside it, as evidence for libraries that allocate outside torch.

Growth (`growth_rows`): the ``memory`` catalog family runs one shape at N, 2N and 4N; the exponent is
the least-squares slope of log(peak) against log(N). An adapter whose `Capabilities.memory` is
``"linear"`` fails when the exponent exceeds `LINEAR_MAX_EXPONENT` (1.5: the midpoint of linear, 1, and
quadratic, 2); an adapter that claims nothing is reported, never failed (`KNOWN_QUADRATIC` names the ones
expected to grow quadratically, such as torch's math backend). Before each measured call of a ``memory`` case
the engine calls the adapter once unmeasured (`needs_warmup`), so one-time workspaces are in the baseline. The
verdict spans three cases, so it is given by ``python -m attention_conformance run`` over a whole run (`apply_growth`,
also across ``--workers``); ``pytest conformance/`` judges each case alone and only records its peaks.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from attention_conformance.verdict.numfmt import mib

__all__ = [
    "FAMILY",
    "KNOWN_QUADRATIC",
    "LINEAR_MAX_EXPONENT",
    "MEMORY_CLAIMS",
    "GrowthRow",
    "MemoryRecord",
    "PeakMemory",
    "apply_growth",
    "claims_of",
    "growth_exponent",
    "growth_failures",
    "growth_rows",
    "series_of",
    "io_bytes",
    "needs_warmup",
    "unsupported_reason",
]

FAMILY = "memory"
MEMORY_CLAIMS = (None, "linear")
#: exponents above this fail an adapter that claims linear memory
LINEAR_MAX_EXPONENT = 1.5
#: adapters that claim nothing about memory and are expected to grow quadratically, with why
KNOWN_QUADRATIC: dict[str, str] = {
    "torch-sdpa-math": "torch's math backend materialises the scores and probabilities (N x N per head); "
                       "it claims nothing about memory, so quadratic growth is expected, not a failure",
}

_DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def unsupported_reason(case: Any, device: str) -> str | None:
    """Why a ``memory`` family case cannot run on `device` (peak memory is measured on CUDA only), else None."""
    if getattr(case, "family", None) == FAMILY and not str(device).startswith("cuda"):
        return (f"the {FAMILY} family measures peak device memory, which is recorded on CUDA only "
                f"(device {device!r})")
    return None


def needs_warmup(case: Any, device: str) -> bool:
    """True for a ``memory`` family case on CUDA: the engine calls the adapter once, unmeasured, before the
    measured call, so one-time allocations (cuBLAS / cuDNN workspaces kept by torch's allocator, lazily loaded
    kernel modules) are in the baseline and not in the smallest N's peak, where they would bias the exponent."""
    return getattr(case, "family", None) == FAMILY and str(device).startswith("cuda")


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


# -- growth ------------------------------------------------------------------------------------------------

def growth_exponent(ns: Sequence[float], peaks: Sequence[float]) -> float | None:
    """Least-squares slope of log(peak) against log(n); None with fewer than two usable points.

    >>> round(growth_exponent([1024, 2048, 4096], [3 * n for n in (1024, 2048, 4096)]), 6)
    1.0
    >>> round(growth_exponent([1024, 2048, 4096], [n * n + 500 * n for n in (1024, 2048, 4096)]), 2)
    1.8
    """
    pts = [(math.log(n), math.log(p)) for n, p in zip(ns, peaks) if n and n > 0 and p and p > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    return sxy / sxx


@dataclass
class GrowthRow:
    """One adapter's memory growth over the ``memory`` family's N, 2N, 4N (one shape)."""

    adapter: str
    shape: str  # the shape with N left out, e.g. "b1h4x4-d64-f16"
    claim: str | None
    ns: list[int] = field(default_factory=list)
    case_ids: list[str] = field(default_factory=list)
    peak_bytes: list[int] = field(default_factory=list)  # torch allocator, per N
    extra_bytes: list[int | None] = field(default_factory=list)  # beyond inputs and outputs
    driver_bytes: list[int | None] = field(default_factory=list)
    exponent: float | None = None
    driver_exponent: float | None = None
    verdict: str = ""  # "linear" | "quadratic" | "known quadratic" | "FAIL" | "insufficient data"
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _shape_key(case: Mapping[str, Any]) -> str:
    dt = str(case.get("dtype", "")).replace("float", "f")
    causal = "-causal" if case.get("causal") else ""
    return f"b{case.get('B')}h{case.get('Hq')}x{case.get('Hkv')}-d{case.get('d')}-{dt}{causal}"


def series_of(case: Any, cases: Sequence[Any]) -> list[Any]:
    """The cases of ``cases`` whose growth is judged together with ``case`` (the ``memory`` family's N, 2N, 4N of
    one shape, `growth_rows`' grouping), in the order given; ``[case]`` for a case of another family."""
    if case.family != FAMILY:
        return [case]
    key = _shape_key(case.to_dict())
    series = [c for c in cases if c.family == FAMILY and _shape_key(c.to_dict()) == key]
    return series if any(c.id == case.id for c in series) else [*series, case]


def growth_rows(results: Sequence[Any], claims: Mapping[str, str | None]) -> list[GrowthRow]:
    """Group the ``memory`` family results by (adapter, shape), fit the exponents and give each a verdict.

    ``results`` are `CaseResult`-like objects (attributes ``family``, ``adapter``, ``case`` as a dict,
    ``case_id``, ``memory``: ``{"forward": MemoryRecord.to_dict()}``); ``claims`` maps an adapter name
    to its `Capabilities.memory`. Results without a memory record (not run, CPU, failed) are left out.
    """
    groups: dict[tuple[str, str], GrowthRow] = {}
    for r in results:
        if getattr(r, "family", None) != FAMILY:
            continue
        rec = (getattr(r, "memory", None) or {}).get("forward")
        if not rec or rec.get("torch_peak_bytes") is None:
            continue
        key = (r.adapter, _shape_key(r.case))
        row = groups.setdefault(key, GrowthRow(adapter=r.adapter, shape=key[1], claim=claims.get(r.adapter)))
        row.ns.append(int(r.case.get("Lk")))
        row.case_ids.append(r.case_id)
        row.peak_bytes.append(int(rec["torch_peak_bytes"]))
        row.extra_bytes.append(rec.get("extra_bytes"))
        row.driver_bytes.append(rec.get("driver_peak_bytes"))
    rows = []
    for row in groups.values():
        order = sorted(range(len(row.ns)), key=lambda i: row.ns[i])
        for name in ("ns", "case_ids", "peak_bytes", "extra_bytes", "driver_bytes"):
            setattr(row, name, [getattr(row, name)[i] for i in order])
        row.exponent = growth_exponent(row.ns, row.peak_bytes)
        if all(b is not None for b in row.driver_bytes):
            row.driver_exponent = growth_exponent(row.ns, row.driver_bytes)
        _judge(row)
        rows.append(row)
    rows.sort(key=lambda r: (r.shape, r.adapter))
    return rows


def _judge(row: GrowthRow) -> None:
    peaks = ", ".join(f"N={n}: {mib(p)} MiB" for n, p in zip(row.ns, row.peak_bytes))
    if row.exponent is None:
        row.verdict = "insufficient data"
        row.message = f"memory growth: fewer than two measured sizes ({peaks or 'none'})"
        return
    grows = "quadratically" if row.exponent > LINEAR_MAX_EXPONENT else "linearly"
    fitted = (f"peak device memory (torch allocator) grows as N^{row.exponent:.2f} over N = "
              f"{', '.join(map(str, row.ns))} ({peaks})")
    if row.exponent <= LINEAR_MAX_EXPONENT:
        row.verdict = "linear"
        row.message = f"memory: {fitted}: {grows}"
    elif row.claim == "linear":
        row.verdict = "FAIL"
        row.message = (f"memory: the adapter claims linear memory (Capabilities.memory='linear'), but its {fitted}: "
                       f"exponent {row.exponent:.2f} > {LINEAR_MAX_EXPONENT}, it materialises an N x N "
                       "intermediate (a fallback to a materialising path?)")
    elif row.adapter in KNOWN_QUADRATIC:
        row.verdict = "known quadratic"
        row.message = f"memory: {fitted}: {KNOWN_QUADRATIC[row.adapter]}"
    else:
        row.verdict = "quadratic"
        row.message = f"memory: {fitted}: quadratic; the adapter claims nothing about memory, so this is not a FAIL"
    if row.driver_exponent is not None and row.driver_exponent > LINEAR_MAX_EXPONENT >= row.exponent:
        row.message += (f"; the driver's view grows as N^{row.driver_exponent:.2f}: memory allocated outside "
                        "torch's allocator may grow quadratically")


def growth_failures(rows: Sequence[GrowthRow]) -> dict[tuple[str, str], str]:
    """(adapter, case id of the largest N) -> FAIL message, for every row whose verdict is FAIL."""
    return {(r.adapter, r.case_ids[-1]): r.message for r in rows if r.verdict == "FAIL" and r.case_ids}


def claims_of(adapters: Sequence[Any]) -> dict[str, str | None]:
    """Adapter name -> `Capabilities.memory` of loaded adapters (`registry.LoadedAdapter`), None when unclaimed."""
    out: dict[str, str | None] = {}
    for la in adapters:
        caps = getattr(getattr(la, "adapter", None), "capabilities", None)
        out[la.name] = getattr(caps, "memory", None)
    return out


def apply_growth(results: Sequence[Any], claims: Mapping[str, str | None]) -> list[GrowthRow]:
    """Judge memory growth over a whole run and write the verdict into the largest-N result of each row.

    A FAIL row turns that result's outcome PASS / QUALITY_WARNING into FAIL (its message first) and sets
    ``checks["memory_growth"] = "fail"``; other judged rows set it to "pass". Every judged row's message is
    added to that result's notes. Calling it twice changes nothing more. Returns the rows.
    """
    rows = growth_rows(results, claims)
    by_key = {(r.adapter, r.case_id): r for r in results}
    for row in rows:
        target = by_key.get((row.adapter, row.case_ids[-1])) if row.case_ids else None
        if target is None or row.message in target.notes:
            continue
        target.notes.append(row.message)
        if row.verdict == "FAIL":
            target.checks["memory_growth"] = "fail"
            if target.outcome in ("PASS", "QUALITY_WARNING"):
                target.outcome = "FAIL"
                target.message = row.message + ("\n" + target.message if target.message else "")
            elif target.outcome == "FAIL":
                target.message = (target.message + "\n" + row.message).strip()
        elif row.verdict != "insufficient data":
            target.checks["memory_growth"] = "pass"
    return rows
