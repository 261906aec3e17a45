"""Isolation: run an adapter's calls in a worker process (issue 3, item 6; issue 7).

The parent (`WorkerClient`) starts ``python -m attention_conformance.running.worker`` and speaks length-prefixed
pickles over its stdin/stdout. An illegal memory access, abort or segfault kills only the worker:
the parent sees EOF and reports CRASH (with the tail of the worker's stderr); a call that takes
longer than ``timeout`` seconds is killed and reported TIMEOUT. The next call starts a fresh worker,
and the run goes on. ``env`` (e.g. ``CUDA_VISIBLE_DEVICES``) pins a worker to one GPU.

`call_adapter` is the single place where an adapter is invoked, in-process or in a worker: it
snapshots every input array (page pools, block tables and FP8 codes included), calls forward/backward,
reports which inputs changed, records who raised an exception (`conformance.cases.calldata`: the code
under test, or the harness around it), notes a float32 call made with float32 matmuls allowed to round below float32
(`conformance.running.matmul_precision`) and, on CUDA, the call's peak device memory
(`conformance.running.peak_memory.PeakMemory`: torch's allocator plus the driver's view). `collect_calls` is the one
sequence of calls made for a case (forward, backward for backward cases, a repeated forward for
determinism); the engine and the repro snippets both use it, so `conformance.verdict.judge.judge` sees the same
calls from either.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from attention_conformance.cases.calldata import AdapterResults, CallResult, raise_site, raised_under_test
from attention_conformance.running import cuda_context

__all__ = ["CallResult", "call_adapter", "collect_calls", "worker_key", "WorkerClient", "WorkerCrash", "WorkerPool",
           "WorkerTimeout"]


class WorkerCrash(RuntimeError):
    pass


class WorkerTimeout(RuntimeError):
    pass


def _snapshot(inputs) -> dict[str, np.ndarray]:
    snap = {n: np.array(a, copy=True) for n, a in inputs.arrays().items()}
    if inputs.fp8:
        for n, a in inputs.fp8.items():
            if isinstance(a, np.ndarray):
                snap[f"fp8.{n}"] = np.array(a, copy=True)
    return snap


def call_adapter(adapter, kind: str, inputs, case, device: str) -> CallResult:
    """Call ``adapter.forward`` or ``adapter.backward``; never raises for adapter errors."""
    from attention_conformance.running.peak_memory import PeakMemory, io_bytes
    from attention_conformance.verdict.checks import array_change, changed_arrays

    before = _snapshot(inputs)
    t0 = time.perf_counter()
    res = CallResult()
    with PeakMemory(device) as pm:
        try:
            fn = adapter.forward if kind == "forward" else adapter.backward
            res.output = fn(inputs, case, device)
        except Exception as exc:  # for the judge: the adapter's exception is FAIL, the harness's HARNESS_ERROR
            res.error = traceback.format_exc(limit=8)
            res.error_type = type(exc).__name__
            res.error_site = raise_site(exc)
            ours = bool(getattr(adapter, "marks_code_under_test", False))
            if cuda_context.out_of_memory(exc):
                res.error_origin = "resources"
            else:
                res.error_origin = "adapter" if (raised_under_test(exc) or not ours) else "harness"
            res.context_lost = cuda_context.unusable(device)
            if res.context_lost is not None:
                res.error += (f"\n[harness] the CUDA context of the process that made this call was unusable after it "
                              f"({res.context_lost}): that process makes no more calls")
    res.seconds = time.perf_counter() - t0
    if case.dtype == "float32" and res.output is not None and isinstance(getattr(res.output, "notes", None), list):
        from attention_conformance.running.matmul_precision import reduced_float32_matmul

        reduced = reduced_float32_matmul()
        if reduced:
            res.output.notes.append(reduced)
    if pm.record is not None:
        pm.record.io_bytes = io_bytes(case, kind)
        pm.record.extra_bytes = pm.record.torch_peak_bytes - pm.record.io_bytes
        res.memory = pm.record.to_dict()
    after = _snapshot(inputs)
    res.mutated = changed_arrays(before, after)
    res.mutated_where = {n: array_change(n, before[n], after.get(n)) for n in res.mutated if n in before}
    return res


def collect_calls(call: Callable[[str], CallResult], case, *, repeat: bool) -> AdapterResults:
    """The calls made for `case`: ``call("forward")``; if it did not raise, ``call("backward")`` for a
    backward case and, when `repeat`, a second ``call("forward")`` (bitwise determinism)."""
    results = AdapterResults(forward=call("forward"))
    if results.forward.error is None:
        if case.backward:
            results.backward = call("backward")
        if repeat:
            results.repeat = call("forward")
    return results


# -- wire format -----------------------------------------------------------------------------------

def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    stream.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout()
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise WorkerTimeout()
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise WorkerCrash("worker closed its pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(fd: int, deadline: float | None):
    (n,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    return pickle.loads(_read_exact(fd, n, deadline))


# -- parent side ---------------------------------------------------------------------------------

def worker_key(spec: str, group: str | None = None) -> str:
    """The worker process a spec runs in: one per library, so a built-in adapter's spellings (``NAME@ENTRY``) share
    their base's, and adapters that name one ``process_group`` share one (our CUDA kernels: one library; torch's SDPA
    backends, flex and cuDNN's FP8 graph: torch's); any other spec (``module:attr``, a file path) has its own."""
    if group:
        return group
    if "@" in spec and ":" not in spec:
        return spec.split("@", 1)[0]
    return spec


class WorkerClient:
    """One worker process for the spellings of one library (`worker_key`: ``flash-attn-4`` and every
    ``flash-attn-4@ENTRY`` share one, as they share a process in a user's program, and with it the library's kernels
    built or loaded once); each spec is loaded in it on its first call. Restarted after a crash, a timeout, or a call
    that left its CUDA context unusable (`running.cuda_context`)."""

    def __init__(self, spec: str, device: str, timeout: float = 300.0, env: dict[str, str] | None = None):
        self.spec = spec  # the first spec it served (names it in messages)
        self.device = device
        self.timeout = timeout
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self._stderr = None
        self._loaded: set[str] = set()  # specs loaded in the current process
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ)
        env.update(self.env)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.getcwd(), env.get("PYTHONPATH", "")) if p)
        self._stderr = tempfile.TemporaryFile()
        self._loaded = set()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attention_conformance.running.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, env=env, start_new_session=True,
        )

    def _load(self, spec: str) -> None:
        assert self.proc is not None
        _send(self.proc.stdin, {"op": "load", "spec": spec, "device": self.device})
        reply = _recv(self.proc.stdout.fileno(), time.monotonic() + max(self.timeout, 120.0))
        if reply.get("error"):
            self.close()
            raise RuntimeError(f"worker could not load {spec}: {reply['error']}")
        self._loaded.add(spec)

    def stderr_tail(self, n: int = 2000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(size - n, 0))
            return self._stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None

    def call(self, kind: str, inputs, case, timeout: float | None = None, spec: str | None = None) -> CallResult:
        """Run one call of `spec` (default: the first spec served) in the worker. Raises WorkerCrash / WorkerTimeout
        (the worker is then gone)."""
        spec = spec or self.spec
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.restarts += 1
            self._start()
        assert self.proc is not None
        if spec not in self._loaded:
            self._load(spec)
        limit = self.timeout if timeout is None else timeout
        try:
            _send(self.proc.stdin, {"op": "call", "spec": spec, "kind": kind, "case": case.to_dict(),
                                    "inputs": inputs})
            reply = _recv(self.proc.stdout.fileno(), time.monotonic() + limit)
        except WorkerTimeout:
            self.close()
            raise WorkerTimeout(f"no answer within {limit:g} s") from None
        except (WorkerCrash, BrokenPipeError, EOFError, pickle.UnpicklingError) as exc:
            code = self.proc.wait(timeout=30) if self.proc else None
            tail = self.stderr_tail()
            self.proc = None
            raise WorkerCrash(f"worker died (exit code {code}): {exc}; stderr tail:\n{tail}") from None
        result = reply["result"]
        if result.context_lost is not None:  # the worker exits after this reply: the next call starts a fresh one
            self.close()
            self.restarts += 1
        return result


class WorkerPool:
    """The worker processes of one process's runs, one per `worker_key`: the engine `Runner`s that share a pool share
    the processes (the pytest plugin's conformance tests and the property suite in one pytest-xdist worker: one
    process per library there, not one per adapter and suite; each holds a CUDA context, about 0.6 GiB, and on the
    H100 tox -e gpu's 8 workers had 65 of them on the card, where the large cases then ran out of memory). A client
    keeps the device, timeout and environment of the runner that started it."""

    def __init__(self) -> None:
        self._clients: dict[str, WorkerClient] = {}

    def client(self, key: str, spec: str, device: str, timeout: float, env: dict[str, str] | None) -> WorkerClient:
        """The pool's client for `key`, started for `spec` on first use."""
        c = self._clients.get(key)
        if c is None:
            c = self._clients[key] = WorkerClient(spec, device, timeout, env)
        return c

    def __getitem__(self, key: str) -> WorkerClient:
        return self._clients[key]

    def __len__(self) -> int:
        return len(self._clients)

    def close(self) -> None:
        """Stop every process (a later call starts a fresh client)."""
        for c in self._clients.values():
            c.close()
        self._clients.clear()


# -- worker side ---------------------------------------------------------------------------------

def _worker_channels() -> tuple[Any, int]:
    """(reply stream, request fd) of a worker process: the real stdout becomes the reply channel and
    fd 1 is pointed at stderr, so prints from adapters cannot corrupt the replies."""
    out_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(out_fd, "wb"), sys.stdin.buffer.fileno()


def main() -> int:
    """Worker loop: the real stdout carries replies only; prints from adapters go to stderr."""
    out, inp = _worker_channels()
    from attention_conformance.adapters.registry import load
    from attention_conformance.cases.case import Case

    adapters: dict[str, Any] = {}  # spec -> adapter, each loaded once
    device = "cpu"
    while True:
        try:
            msg = _recv(inp, None)
        except WorkerCrash:
            return 0
        if msg["op"] == "load":
            device = msg["device"]
            loaded = load(msg["spec"], device)
            if loaded.adapter is None:
                _send(out, {"error": loaded.reason})
                continue
            adapters[msg["spec"]] = loaded.adapter
            _send(out, {"ok": True, "name": loaded.name})
        elif msg["op"] == "call":
            case = Case.from_dict(msg["case"])
            result = call_adapter(adapters[msg["spec"]], msg["kind"], msg["inputs"], case, device)
            try:
                _send(out, {"result": result})
            except Exception:  # an output that does not pickle
                _send(out, {"result": CallResult(error=traceback.format_exc(limit=4), error_type="PicklingError")})
            if result.context_lost is not None:  # a sticky CUDA error: no later call can run in this process
                return 0
            del result
            # this process's idle cached blocks back to the device: the run's other processes share it (8 workers
            # with an isolated process per library each: 64 CUDA processes on the H200, and calls ran out of memory)
            cuda_context.release_cached(device)
        elif msg["op"] == "exit":
            return 0


if __name__ == "__main__":
    # run from the importable module, so pickled results name it (not __main__)
    from attention_conformance.running.worker import main as _main

    sys.exit(_main())
