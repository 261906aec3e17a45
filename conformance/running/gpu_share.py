"""One GPU shared by the processes of a run, and a call that must have it to itself (issue 43: one verdict per
(case, adapter), whatever the front end).

A call that runs out of device memory beside other workers is not the kernel's verdict (HARNESS_ERROR,
`verdict.judge.ran_out_of_memory`). The CLI's pool re-runs such a case alone once every other worker is idle
(`running.parallel`); pytest-xdist has no such later pass, so its workers share the GPU through `GpuShare`: every
case runs holding the share (`shared`), and the retry of a call that ran out of memory runs `alone`, after the calls
in flight on the other workers have ended and before any other starts. The verdict of that retry is then what the
CLI's re-run alone gives. The plugin holds the share around every test marked ``gpu`` as well, and a test marked
``gpu_alone`` (one that times the GPU: other workers' kernels stretch its GPU time, their host work its host time)
runs `alone` (`pytest_plugin.pytest_runtest_call`).

Two files in a folder the run's processes share (the oracle store's, `running.oracle_store`) carry it, with
``flock``: ``gpu.lock``, held shared by each running case and exclusively by the call alone, and ``gpu.gate``, which
a process waiting to be alone holds exclusively so that no new case slips in ahead of it (a stream of shared holders
would otherwise keep it waiting for ever). Their names carry the GPUs the process sees (``gpu-1.lock`` for a worker
pinned to GPU 1): the workers of one GPU share it, not those of another. Without ``fcntl`` (not POSIX) both are
no-ops.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["GpuShare", "alone", "shared"]

#: `GpuShare.of_run`'s object for each folder, in this process
_OF_PROCESS: dict[str, GpuShare] = {}


class GpuShare:
    """The run's GPU, shared by its processes through ``folder`` (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str], gpus: str = ""):
        self.folder = Path(folder)
        #: the GPUs this process sees (its ``CUDA_VISIBLE_DEVICES``), in the files' names: workers pinned to other
        #: GPUs (one per GPU, the plugin's default) hold other files, and one alone on its GPU waits for none of them
        self.gpus = re.sub(r"[^A-Za-z0-9-]", "_", gpus)
        self._held: IO[str] | None = None  # this process's shared hold of the lock, while a case runs

    @classmethod
    def of_run(cls, folder: str | os.PathLike[str] | None, device: str) -> GpuShare | None:
        """The share of a run whose processes have the folder `folder` in common (pytest-xdist's workers: the oracle
        store's), on a CUDA device; None for a run of one process (no folder) or on the CPU. One object per folder
        in a process: the plugin's hold around a test, its conformance cases' and the property suite's are the same
        hold, so a retry `alone` inside any of them gives up this process's hold rather than wait for it."""
        if folder is None or not str(device).startswith("cuda"):
            return None
        key = os.fspath(Path(folder))  # one spelling of the folder: the plugin's and a case's name it alike
        share = _OF_PROCESS.get(key)
        if share is None:
            share = _OF_PROCESS[key] = cls(folder, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        return share

    def _open(self, suffix: str) -> IO[str]:
        return open(self.folder / f"gpu{'-' + self.gpus if self.gpus else ''}.{suffix}", "a")

    def _take_shared(self) -> None:
        gate = self._open("gate")
        try:
            fcntl.flock(gate, fcntl.LOCK_SH)  # waits while a process waits to be alone
            held = self._open("lock")
            fcntl.flock(held, fcntl.LOCK_SH)
        finally:
            gate.close()  # closing releases the gate: a later process that wants to be alone may take it
        self._held = held

    def _drop_shared(self) -> None:
        if self._held is not None:
            self._held.close()  # releases the lock
            self._held = None

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the GPU beside the run's other processes while the block runs (a case's calls)."""
        if fcntl is None or self._held is not None:
            yield
            return
        self._take_shared()
        try:
            yield
        finally:
            self._drop_shared()

    @contextmanager
    def alone(self) -> Iterator[None]:
        """Run the block with the GPU to this process alone: no other process's case runs meanwhile. Inside
        `shared`, this process's own hold is given up for the block and taken again after it."""
        if fcntl is None:
            yield
            return
        was_held = self._held is not None
        self._drop_shared()
        gate, lock = self._open("gate"), self._open("lock")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)  # no new case starts from here on
            fcntl.flock(lock, fcntl.LOCK_EX)  # the cases in flight have ended
            yield
        finally:
            lock.close()
            gate.close()
            if was_held:
                self._take_shared()


def shared(share: GpuShare | None) -> AbstractContextManager[None]:
    """`GpuShare.shared` of `share`, or nothing to hold where there is none (one process, or the CPU)."""
    return share.shared() if share is not None else nullcontext()


def alone(share: GpuShare | None) -> AbstractContextManager[None]:
    """`GpuShare.alone` of `share`, or nothing to wait for where there is none (one process, or the CPU)."""
    return share.alone() if share is not None else nullcontext()
