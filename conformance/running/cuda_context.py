"""Whether this process's CUDA context can still run work after a call failed (issue 43: no FAIL the harness causes).

A kernel that reads or writes out of bounds, executes an illegal instruction or trips a device-side assert leaves
the CUDA context of its process in a sticky error state: every later CUDA call of that process fails with the same
error. The call that did it is the adapter's FAIL (SEMANTICS.md §17: an error of the code under test); the calls
after it, on other cases and other adapters, would be FAILs the harness caused. So after every call that raised on
a CUDA device the harness asks `unusable`, and the process that made the call stops making calls: a worker process
(`running.worker`, `running.parallel`) exits and is restarted before the next call; the calls of in-process adapters
that would follow in the same process are HARNESS_ERROR with the reason (`running.engine.Runner`).

The probe synchronizes the device and runs one tiny kernel through torch; it needs torch with CUDA initialised (an
adapter that never touched CUDA cannot have broken it) and costs microseconds, only after a failed call.

`release_cached` hands the blocks torch's caching allocator keeps after a call back to the device: N worker
processes share one GPU, and the blocks one worker keeps idle from its largest case are memory the others' next
call may need (the H200's 8-worker gpu profile: calls of small FP8 cases ran out of device memory).
"""

from __future__ import annotations

import sys

__all__ = ["release_cached", "unusable"]


def unusable(device: str) -> str | None:
    """Why the CUDA context of this process cannot run another call (the error a probe gets), or None."""
    if not device.startswith("cuda"):
        return None
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
        x = torch.ones(1, device=device)
        if float((x + x).item()) != 2.0:
            return "a probe kernel computed 1 + 1 != 2"
    except Exception as exc:  # the sticky error, as CUDA reports it to the next call
        return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
    return None


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
