"""Whether this process's CUDA context can still run work after a call failed (issue 43: no FAIL the harness causes).

A kernel that reads or writes out of bounds, executes an illegal instruction or trips a device-side assert leaves
the CUDA context of its process in a sticky error state: every later CUDA call of that process fails with the same
error. The call that did it is the adapter's FAIL (SEMANTICS.md §17: an error of the code under test); the calls
after it, on other cases and other adapters, would be FAILs the harness caused. So after every call that raised on
a CUDA device the harness asks `unusable`, and the process that made the call stops making calls: a worker process
(`running.worker`, `running.parallel`) exits and is restarted before the next call; the calls of in-process adapters
that would follow in the same process are HARNESS_ERROR with the reason (`running.engine.Runner`).

The probe synchronizes the device and runs one tiny kernel through torch; it needs torch with CUDA initialised (an
adapter that never touched CUDA cannot have broken it) and costs microseconds, only after a failed call. A probe
that runs out of device memory is not a lost context: an allocation that fails is an error of that moment, not a
sticky one, and beside N workers the device can be full while the call's own memory is being released (on an
80 GB H100 under `tox -e gpu` with 8 workers, one such probe had made an xdist worker's every later call a
HARNESS_ERROR); the probe releases this process's cached blocks and tries again, and a context whose probe
never finds memory counts as usable.

`release_cached` hands the blocks torch's caching allocator keeps after a call back to the device: N worker
processes share one GPU, and the blocks one worker keeps idle from its largest case are memory the others' next
call may need (the H200's 8-worker gpu profile: calls of small FP8 cases ran out of device memory).
"""

from __future__ import annotations

import sys
import time

__all__ = ["out_of_memory", "release_cached", "unusable"]

#: probes of a context whose probe ran out of device memory, and the wait before the next one (times the attempt)
PROBE_ATTEMPTS = 3
PROBE_WAIT_SECONDS = 0.5


def unusable(device: str) -> str | None:
    """Why the CUDA context of this process cannot run another call (the error a probe gets), or None."""
    if not device.startswith("cuda"):
        return None
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    for attempt in range(PROBE_ATTEMPTS):
        try:
            torch.cuda.synchronize()
            x = torch.ones(1, device=device)
            if float((x + x).item()) != 2.0:
                return "a probe kernel computed 1 + 1 != 2"
            return None
        except Exception as exc:  # the sticky error, as CUDA reports it to the next call
            if not out_of_memory(exc):
                return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
            # the device is full right now (the other workers' memory): not sticky, the probe's own allocation
            # failed; the context is judged once the probe can allocate, or usable when it never can
            release_cached(device)
            time.sleep(PROBE_WAIT_SECONDS * (attempt + 1))
    return None


#: what the device runtime and libraries say when an allocation fails (torch, the CUDA runtime, cuBLAS, cuDNN)
_OOM_WORDS = ("out of memory", "cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the device running out of memory (``torch.OutOfMemoryError``, or an error that says so):
    the machine's state (other processes on the GPU, too many workers), not the kernel's answer, and an error of
    that moment, which leaves the context usable, unlike the sticky errors."""
    if type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return any(word in text for word in _OOM_WORDS)


def release_cached(device: str) -> None:
    """Return the idle blocks of torch's caching allocator to the device (CUDA, torch initialised; else nothing)."""
    if not device.startswith("cuda"):
        return
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    try:
        torch.cuda.empty_cache()
    except Exception:  # a context left unusable by the call: `unusable` reports it, this changes nothing
        pass
