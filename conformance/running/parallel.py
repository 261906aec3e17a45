"""``run --workers N``: spread cases over N worker processes, one GPU each, into one report (issue 7).

The parent sorts the cases by their expected seconds through the run's adapters (`conformance.running.schedule`:
a kernel built per shape counts), largest first, and hands each idle worker the next case; a worker
(``python -m attention_conformance.running.parallel``) loads the adapters once, keeps its own oracle cache, runs
every adapter on the case with the same `Runner` as a single-process run, and sends the `CaseResult`s back. Worker i
gets ``CUDA_VISIBLE_DEVICES = gpu_for_worker(i)`` on CUDA runs. A worker that dies costs only the case it was
running (CRASH for each adapter) and is restarted; so is one whose CUDA context a call left unusable
(`conformance.running.cuda_context`), after it has sent that case's results.

Under pytest, the same spreading is pytest-xdist's (``pytest conformance/ -n N --device cuda``): the pytest plugin
(`conformance.pytest_plugin`) pins each xdist worker to a GPU with `gpu_for_worker` and orders the tests largest
first by the same estimate, one (case, adapter) test at a time.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from attention_conformance.cases.case import Case
from attention_conformance.cases.catalog import estimated_cost
from attention_conformance.running import schedule
from attention_conformance.running.eta import EtaModel
from attention_conformance.running.worker import _recv, _send, _worker_channels
from attention_conformance.verdict.judge import ran_out_of_memory
from attention_conformance.verdict.outcomes import counts_line

__all__ = ["THREAD_VARS", "gpu_for_worker", "run_parallel", "share_cores", "share_cores_here", "threads_per_worker",
           "visible_gpus"]


#: a case running this long is named in the progress line
SLOW_CASE_SECONDS = 30.0


def visible_gpus() -> list[str]:
    """GPU ids this process may use, without initialising CUDA (CUDA_VISIBLE_DEVICES or nvidia-smi)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def gpu_for_worker(index: int, gpus: Sequence[str] | None = None) -> str | None:
    gpus = list(visible_gpus() if gpus is None else gpus)
    return gpus[index % len(gpus)] if gpus else None


#: the thread pools a worker's environment sizes (unless set already): OpenMP / BLAS (NumPy's FP64 oracle, torch's
#: CPU ops) and Inductor's compile workers (torch.compile of flex_attention)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS")


def threads_per_worker(workers: int) -> int:
    """The cores each of `workers` processes on this machine gets."""
    return max(1, (os.cpu_count() or 1) // max(workers, 1))


def share_cores(env: MutableMapping[str, str], workers: int) -> None:
    """`env` for one of `workers` processes: each thread pool sized to its share of the cores (a variable already
    set is kept). N workers whose pools each take every core oversubscribe the machine N times over."""
    for var in THREAD_VARS:
        env.setdefault(var, str(threads_per_worker(workers)))


def share_cores_here(workers: int) -> Any:
    """This process is one of `workers` (a pytest-xdist worker): `share_cores` on its environment, for what it starts
    and imports later, and the thread pools it has loaded already resized to the same share. Returns threadpoolctl's
    limiter (``restore_original_limits()`` undoes the resizing of the loaded pools)."""
    share_cores(os.environ, workers)
    n = int(os.environ["OMP_NUM_THREADS"]) if os.environ["OMP_NUM_THREADS"].isdigit() else threads_per_worker(workers)
    from threadpoolctl import threadpool_limits

    limiter = threadpool_limits(limits=n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    inductor = sys.modules.get("torch._inductor.config")  # read TORCHINDUCTOR_COMPILE_THREADS when imported
    if inductor is not None and os.environ["TORCHINDUCTOR_COMPILE_THREADS"].isdigit():
        inductor.compile_threads = int(os.environ["TORCHINDUCTOR_COMPILE_THREADS"])
    return limiter


class _Worker:
    def __init__(self, index: int, specs: list[str], device: str, timeout: float, determinism: str,
                 gpu: str | None, workers: int = 1, strict: bool = False):
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.getcwd(), env.get("PYTHONPATH", "")) if p)
        share_cores(env, workers)
        self.index = index
        self.proc = subprocess.Popen([sys.executable, "-m", "attention_conformance.running.parallel"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        _send(self.proc.stdin, {"specs": specs, "device": device, "timeout": timeout, "determinism": determinism,
                                "strict": strict})
        self.case: Case | None = None
        self.started = 0.0

    def submit(self, case: Case) -> None:
        self.case, self.started = case, time.monotonic()
        _send(self.proc.stdin, case.to_dict())

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def stop(self, wait: float = 30.0) -> None:
        """End an idle worker the way its loop ends (its input closed): its engine closes its worker processes
        (`engine.Runner.close`), so their CUDA contexts and cached memory leave the GPU; killed if still there after
        `wait` seconds."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=wait)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self.kill()


def run_parallel(loaded, cases: Sequence[Case], device: str, *, workers: int, timeout: float = 300.0,
                 determinism: str = "sampled", progress: Callable[[str], None] | None = None,
                 checkpoint: Callable[[list], None] | None = None, every: int = 25, strict: bool = False,
                 outcome_of: Callable[[Any], str] | None = None) -> list:
    """Run `cases` on the `loaded` adapters with `workers` processes; raw results in catalog order. Progress lines
    count ``outcome_of(result)`` (as `engine.Runner.run` does: the outcome the final line will report)."""
    from attention_conformance.running.engine import PROGRESS_SECONDS, CaseResult, features_of, repro_command

    specs = [la.spec for la in loaded]
    adapters = [la.adapter for la in loaded if la.available]
    builds = schedule.Builds()  # a build two cases need is charged to the first (catalog order)
    seconds = {c.id: schedule.case_seconds(c, adapters, device, builds) for c in cases}
    order = sorted(cases, key=lambda c: (-seconds[c.id], -estimated_cost(c)))
    gpus = visible_gpus() if device == "cuda" else []
    pool = [_Worker(i, specs, device, timeout, determinism, gpu_for_worker(i, gpus) if gpus else None,
                    workers, strict)
            for i in range(workers)]
    pending = list(order)
    results: dict[str, list[CaseResult]] = {}
    case_limit = timeout * (len(specs) + 1) * 3
    eta_model = EtaModel()  # per-case seconds in one worker; time left ~ remaining work / workers
    t0 = time.perf_counter()
    last_line = time.monotonic()  # a progress line every `every` cases or PROGRESS_SECONDS, whichever comes first

    counts: dict[str, int] = {}  # what the progress lines count: ``outcome_of`` each result, as it arrives

    def count(rs: list) -> None:
        for r in rs:
            shown = outcome_of(r) if outcome_of is not None else r.outcome
            counts[shown] = counts.get(shown, 0) + 1

    def lost(case: Case, outcome: str, message: str) -> list[CaseResult]:
        """One `outcome` result per adapter for a case whose worker did not send its results back."""
        return [CaseResult(case.id, la.name, la.spec, outcome, case.family, features_of(case), message=message,
                           case=case.to_dict(), seed=case.seed, repro=repro_command(case.id, la.spec, device))
                for la in loaded]

    def line() -> None:
        nonlocal last_line
        last_line = time.monotonic()
        if progress is None:
            return
        left = [estimated_cost(c) for c in pending] + [estimated_cost(x.case) for x in pool if x.case is not None]
        busy = [x for x in pool if x.case is not None]
        # a case running for long is named, so a run that seems stuck says on what (a kernel build, a hang)
        slow = ""
        if busy:
            oldest = min(busy, key=lambda x: x.started)
            waited = time.monotonic() - oldest.started
            if waited >= SLOW_CASE_SECONDS:
                slow = f"; longest running: {oldest.case.id} ({waited:.0f}s)"
        progress(f"[{len(results)}/{len(cases)} cases, {len(busy)} running on {workers} workers{slow}] "
                 f"{counts_line(counts)} elapsed {time.perf_counter() - t0:.0f}s "
                 f"ETA {eta_model.remaining(left) / workers:.0f}s")

    def restart(w: _Worker) -> _Worker:
        """Kill `w`; a fresh worker with its index (and GPU) takes its place in the pool and is returned."""
        w.kill()
        nw = _Worker(w.index, specs, device, timeout, determinism, gpu_for_worker(w.index, gpus) if gpus else None,
                     workers, strict)
        pool[pool.index(w)] = nw
        return nw

    def receive(w: _Worker, case: Case, deadline: float, doing: str) -> tuple[list, _Worker, bool]:
        """`w`'s results for `case`, the worker that serves next (`w`, or a fresh one where `w` said its CUDA context
        is unusable, it exits after this reply, or sent nothing back) and whether `w` replied (else the case's
        results are CRASH: only this case is lost)."""
        try:
            reply = _recv(w.proc.stdout.fileno(), deadline)
        except Exception as exc:
            return lost(case, "CRASH", f"CRASH: worker {w.index} died {doing}: {exc}"), restart(w), False
        return reply["results"], (restart(w) if reply.get("context_lost") else w), True

    def rerun_alone(w: _Worker) -> None:
        """Cases a call of which ran out of device memory beside the other workers, once more in a fresh worker
        with the GPU to itself: every other worker is idle by now and is stopped first, with the worker processes
        it holds (each a CUDA context and its cache: idle, 7 run workers with a process per library held ~35 GB of
        an H100, and 6 of 30 cases ran out of memory again); their new results replace the old ones."""
        again = [c for c in cases if any(ran_out_of_memory(r.outcome, r.message) for r in results.get(c.id, []))]
        if not again or workers < 2:
            return
        if progress is not None:
            progress(f"re-running {len(again)} case(s) alone that ran out of device memory beside {workers - 1} "
                     "other workers")
        for x in pool:
            if x is not w:
                x.stop()
        w = restart(w)  # a fresh process: nothing cached from the cases it ran before
        for case in again:
            w.submit(case)
            rs, w, _ = receive(w, case, time.monotonic() + case_limit, "re-running this case alone")
            for r in rs:
                r.notes.append(f"re-run alone: beside {workers - 1} other workers a call of this case ran out of "
                               "device memory (HARNESS_ERROR)")
            results[case.id] = rs
            w.case = None

    try:
        for w in pool:
            if pending:
                w.submit(pending.pop(0))
        while any(w.case is not None for w in pool):
            busy = {w.proc.stdout.fileno(): w for w in pool if w.case is not None}
            ready, _, _ = select.select(list(busy), [], [], 1.0)
            for fd in ready:
                w = busy[fd]
                case, started = w.case, w.started
                results[case.id], w, replied = receive(w, case, time.monotonic() + 60, "running this case")
                count(results[case.id])
                if replied:
                    eta_model.observe(estimated_cost(case), time.monotonic() - started)
                w.case = None
                if pending:
                    w.submit(pending.pop(0))
                if len(results) % every == 0:
                    line()
                    if checkpoint is not None and len(results) < len(cases):
                        checkpoint([r for c in cases for r in results.get(c.id, [])])
            if time.monotonic() - last_line >= PROGRESS_SECONDS:  # long cases: a line at least this often
                line()
            for w in pool:
                if w.case is not None and time.monotonic() - w.started > case_limit:
                    case = w.case
                    results[case.id] = lost(case, "TIMEOUT",
                                            f"TIMEOUT: worker {w.index} exceeded {case_limit:g} s on this case")
                    count(results[case.id])
                    nw = restart(w)
                    if pending:
                        nw.submit(pending.pop(0))
        rerun_alone(pool[0])
    finally:
        for w in pool:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
            w.kill()
    return [r for c in cases for r in results.get(c.id, [])]


def main() -> int:
    out, inp = _worker_channels()
    from attention_conformance.adapters.registry import load_many
    from attention_conformance.running.engine import Runner
    from attention_conformance.running.worker import WorkerCrash

    cfg = _recv(inp, None)
    runner = Runner(load_many(cfg["specs"], cfg["device"]), cfg["device"], timeout=cfg["timeout"],
                    determinism=cfg["determinism"], strict=cfg.get("strict", False))
    try:
        while True:
            try:
                data = _recv(inp, None)
            except WorkerCrash:
                return 0
            case = Case.from_dict(data)
            results = [runner.run_case(la, case) for la in runner.adapters]
            runner.cache.evict(case.id)
            _send(out, {"results": results, "context_lost": runner.context_lost})
            if runner.context_lost is not None:  # a sticky CUDA error: the parent starts a fresh worker
                return 0
    finally:
        runner.close()


if __name__ == "__main__":
    # run from the importable module, so pickled results name it (not __main__)
    from attention_conformance.running.parallel import main as _main

    sys.exit(_main())
