"""The conformance engine: run cases on adapters, judge them against the FP64 oracle.

For each case (outer loop, so the oracle result is computed once per run and shared by every
adapter, issue 3 item 8) and each adapter (inner loop):

1. ``adapter.supports(case, device)`` -> NOT_SUPPORTED with its reason;
2. forward (in-process, or in a worker process for ``isolate`` adapters: CRASH / TIMEOUT);
3. backward cases: the backward call; adapters that declare bitwise determinism: a second forward
   (every case with ``determinism="all"``, a fixed quarter of them with ``"sampled"``);
4. the verdict: `conformance.verdict.judge.judge` on every call made (the engine decides nothing itself).

The engine keeps iteration, the oracle cache and isolation; outcome names and severities live in
`conformance.verdict.outcomes` (re-exported here).
"""

from __future__ import annotations

import sys
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from attention_conformance.adapters.registry import LoadedAdapter
from attention_conformance.cases import features
from attention_conformance.cases.calldata import raise_site
from attention_conformance.cases.case import Case
from attention_conformance.cases.catalog import estimated_cost
from attention_conformance.running import gpu_share, memory_policy
from attention_conformance.running.cuda_context import release_cached
from attention_conformance.running.eta import EtaModel
from attention_conformance.running.gpu_share import GpuShare
from attention_conformance.running.oracle_store import OracleStore
from attention_conformance.running.worker import (
    CallResult,
    WorkerCrash,
    WorkerPool,
    WorkerTimeout,
    call_adapter,
    collect_calls,
    worker_key,
)
from attention_conformance.verdict.bounds import OracleData, compute_oracle
from attention_conformance.verdict.judge import Verdict, judge, ran_out_of_memory
from attention_conformance.verdict.outcomes import (
    CRASH,
    FAILING,
    HARNESS_ERROR,
    NOT_SUPPORTED,
    OUTCOMES,
    SEVERITY,
    TIMEOUT,
    counts_line,
    worst,
)

__all__ = [
    "FAILING",
    "OUTCOMES",
    "SEVERITY",
    "CaseResult",
    "OracleCache",
    "Runner",
    "features_of",
    "repro_command",
    "worst",
]


def features_of(case: Case) -> list[str]:
    """Feature labels of a case (the columns of the report's adapter x feature matrix): `conformance.cases.features`."""
    return features.labels(case)


def repro_command(case_id: str, spec: str, device: str = "cpu") -> str:
    """The command that re-runs one (case, adapter) pair and prints its verdict (exit 1 while it fails); without
    ``--run`` it prints the snippet it runs, to edit."""
    dev = "" if device == "cpu" else f" --device {device}"
    return f"python -m attention_conformance repro {case_id} --impl {spec}{dev} --run"


@dataclass
class CaseResult:
    """The verdict of one (adapter, case) pair, as stored in report.json."""

    case_id: str
    adapter: str
    spec: str
    outcome: str
    family: str
    features: list[str]
    message: str = ""  # why (failure messages, NOT_SUPPORTED reason, crash tail)
    stats: dict[str, dict] = field(default_factory=dict)  # out / lse / dq / dk / dv -> QuantityStats
    checks: dict[str, str] = field(default_factory=dict)  # check name -> "pass" | "fail" | "skip"
    findings: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raised_at: str = ""  # for a call that raised: the frame that raised it (file:line in function)
    memory: dict[str, dict] = field(default_factory=dict)  # "forward" / "backward" -> MemoryRecord (CUDA only)
    seconds: float = 0.0
    oracle_seconds: float = 0.0
    tolerance_model: dict[str, Any] = field(default_factory=dict)
    case: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    repro: str = ""
    expectation: dict[str, Any] | None = None  # the expectations entry applied (conformance/verdict/expectations.py)

    def to_dict(self) -> dict:
        return asdict(self)


class OracleCache:
    """Inputs and oracle data per case id, computed once per run and shared by all adapters: in this process, and
    with a `running.oracle_store.OracleStore`, with the run's other processes."""

    def __init__(self, store: OracleStore | None = None):
        self._data: dict[str, tuple[Any, OracleData | None, str | None]] = {}
        self.computed = 0
        self.store = store

    @staticmethod
    def _compute(case: Case) -> tuple[Any, OracleData | None, str | None]:
        from attention_conformance.cases.inputs import make_inputs

        try:
            inputs = make_inputs(case)
            return inputs, compute_oracle(case, inputs), None
        except Exception:
            return None, None, traceback.format_exc(limit=6)

    def get(self, case: Case):
        if case.id not in self._data:
            if self.store is None:
                self._data[case.id] = self._compute(case)
            else:  # a failure is not stored: each process reports its own traceback
                self._data[case.id] = self.store.fetch(f"oracle {case.id}", lambda: self._compute(case),
                                                       keep=lambda entry: entry[2] is None)
            self.computed += 1
        return self._data[case.id]

    def evict(self, case_id: str) -> None:
        self._data.pop(case_id, None)


class Runner:
    """Runs cases on loaded adapters. ``timeout`` applies to isolated (worker) adapters; ``store`` shares the
    oracle cache's entries with the run's other processes (`running.oracle_store`)."""

    def __init__(self, adapters: Sequence[LoadedAdapter], device: str = "cpu", *, timeout: float = 300.0,
                 determinism: str = "sampled", worker_env: dict[str, str] | None = None, strict: bool = False,
                 store: OracleStore | None = None, share: GpuShare | None = None,
                 workers: WorkerPool | None = None):
        self.adapters = list(adapters)
        #: the GPU this process shares with the run's other processes (pytest-xdist's workers): a call that ran
        #: out of device memory runs again alone on it (`GpuShare.alone`); None = nothing to wait for
        self.share = share
        self.strict = strict  # named findings are FAIL (SEMANTICS.md §17)
        self.device = device
        self.timeout = timeout
        self.determinism = determinism
        self.cache = OracleCache(store)
        #: the worker processes of isolated adapters: ``workers`` where another runner of this process shares them
        #: (it then closes them), else this runner's own
        self._workers = workers if workers is not None else WorkerPool()
        self._own_workers = workers is None
        self.worker_env = worker_env or {}
        #: set when an in-process call left this process's CUDA context unusable (`running.cuda_context`): which
        #: call, and the error; the in-process calls after it are HARNESS_ERROR, not verdicts
        self.context_lost: str | None = None

    # -- calling ----------------------------------------------------------------------------------
    def _call(self, la: LoadedAdapter, kind: str, inputs, case: Case) -> CallResult:
        if not la.isolate:
            result = call_adapter(la.adapter, kind, inputs, case, self.device)
            if result.context_lost is not None and self.context_lost is None:
                self.context_lost = f"{la.spec} ({kind}) on {case.id}: {result.context_lost}"
            return result
        key = worker_key(la.spec, getattr(la.adapter, "process_group", None))
        client = self._workers.client(key, la.spec, self.device, self.timeout, self.worker_env)
        return client.call(kind, inputs, case, spec=la.spec)

    def close(self) -> None:
        """Stop this runner's worker processes (a shared pool's owner closes it)."""
        if self._own_workers:
            self._workers.close()

    # -- one case ---------------------------------------------------------------------------------
    def run_case(self, la: LoadedAdapter, case: Case) -> CaseResult:
        """The `CaseResult` of `la` on `case` (the verdict of `settled_verdict`, with the case's identity)."""
        v = self.settled_verdict(la, case)
        return CaseResult(case_id=case.id, adapter=la.name, spec=la.spec, outcome=v.outcome, family=case.family,
                          features=features_of(case), message=v.message, stats=v.stats, checks=v.checks,
                          findings=v.findings, warnings=v.warnings, kernels=v.kernels, notes=v.notes, memory=v.memory,
                          raised_at=v.raised_at, seconds=v.seconds, oracle_seconds=v.oracle_seconds,
                          tolerance_model=v.tolerance_model,
                          case=case.to_dict(), seed=case.seed, repro=repro_command(case.id, la.spec, self.device))

    def settled_verdict(self, la: LoadedAdapter, case: Case) -> Verdict:
        """`verdict`, the GPU's idle cached blocks released after it, and a call that ran out of device memory run
        once more: the device was full at that moment (other workers' memory), so the second run has this process's
        cache released, and the GPU to itself where the run's processes share it (`share`: pytest-xdist's workers,
        which have no later pass that re-runs a case alone, as `running.parallel` has). The conformance cases
        (`run_case`) and the property suite's examples (`property_tests.kernel_check`) both decide through it."""
        v = self.verdict(la, case)
        if v.outcome != NOT_SUPPORTED:
            release_cached(self.device)  # workers share the GPU: no idle cached blocks between calls
        if ran_out_of_memory(v.outcome, v.message) and (la.isolate or not self.context_lost):
            first = v.message.strip().splitlines()[0]
            with gpu_share.alone(self.share):
                v = self.verdict(la, case)
                release_cached(self.device)
            alone = " alone (every other process's case ended first)" if self.share is not None else ""
            v.notes.append(f"run a second time{alone}: the first run was a HARNESS_ERROR ({first[:200]})")
        return v

    def verdict(self, la: LoadedAdapter, case: Case) -> Verdict:
        """NOT_SUPPORTED, CRASH / TIMEOUT (isolated adapters), HARNESS_ERROR, or `judge` on every call made."""
        t0 = time.perf_counter()
        try:
            v = self._verdict(la, case)
        except (WorkerCrash, WorkerTimeout) as exc:
            outcome = TIMEOUT if isinstance(exc, WorkerTimeout) else CRASH
            v = Verdict(outcome=outcome, message=f"{outcome}: {exc}")
        except Exception as exc:
            site = raise_site(exc)
            v = Verdict(outcome=HARNESS_ERROR, raised_at=site,
                        message=f"harness error: {type(exc).__name__}: {exc}; raised at {site}\n"
                                + traceback.format_exc(limit=8))
        v.seconds = time.perf_counter() - t0
        return v

    def _verdict(self, la: LoadedAdapter, case: Case) -> Verdict:
        if not la.available:
            return Verdict(outcome=NOT_SUPPORTED, message=f"adapter unavailable: {la.reason}")
        reason = la.adapter.supports(case, self.device) or memory_policy.unsupported_reason(case, self.device)
        if reason is not None:
            return Verdict(outcome=NOT_SUPPORTED, message=reason)
        if self.context_lost is not None and not la.isolate and self.device.startswith("cuda"):
            return Verdict(outcome=HARNESS_ERROR, message=(
                f"harness error: not run: this process's CUDA context was left unusable by {self.context_lost}; "
                f"no in-process call can run after it (run --workers restarts the worker; or rerun: "
                f"{repro_command(case.id, la.spec, self.device)})"))
        inputs, od, err = self.cache.get(case)
        if err is not None:
            return Verdict(outcome=HARNESS_ERROR, message=f"oracle / inputs failed for {case.id}:\n{err}")
        caps = la.adapter.capabilities
        if memory_policy.needs_warmup(case, self.device):  # one-time workspaces fall into the measured call's baseline
            self._call(la, "forward", inputs, case)
        results = collect_calls(lambda kind: self._call(la, kind, inputs, case), case,
                                repeat=caps.deterministic and self._check_determinism(case))
        return judge(case, od, results, device=self.device, capabilities=caps, strict=self.strict)

    def _check_determinism(self, case: Case) -> bool:
        if self.determinism == "all":
            return True
        if self.determinism == "none":
            return False
        return zlib.crc32(case.id.encode()) % 4 == 0

    # -- a suite ---------------------------------------------------------------------------------
    def run(self, cases: Sequence[Case], progress: Callable[[str], None] | None = None,
            every: int = 25, checkpoint: Callable[[list[CaseResult]], None] | None = None,
            outcome_of: Callable[[CaseResult], str] | None = None) -> list[CaseResult]:
        """Case-major loop; one progress line (counts, ETA) every ``every`` cases or `PROGRESS_SECONDS`, whichever
        comes first, and one ``checkpoint(results)`` every ``every`` cases.

        The progress counts are of ``outcome_of(result)`` (default: the raw outcome); a front end passes the
        outcome its final line will report (`run_context.ConformanceRun.progress_outcome`: a failure an
        expectations entry expects counts as KNOWN). The results returned are the raw ones."""
        results: list[CaseResult] = []
        counts: dict[str, int] = {}
        costs = [estimated_cost(c) for c in cases]
        eta_model = EtaModel()
        t0 = last = time.perf_counter()
        for i, case in enumerate(cases, 1):
            t_case = time.perf_counter()
            for la in self.adapters:
                r = self.run_case(la, case)
                results.append(r)
                shown = outcome_of(r) if outcome_of is not None else r.outcome
                counts[shown] = counts.get(shown, 0) + 1
            self.cache.evict(case.id)
            eta_model.observe(costs[i - 1], time.perf_counter() - t_case)
            now = time.perf_counter()
            if progress is not None and (i % every == 0 or i == len(cases) or now - last >= PROGRESS_SECONDS):
                last = now
                el = now - t0
                eta = eta_model.remaining(costs[i:])
                progress(f"[{i}/{len(cases)} cases] {counts_line(counts)} elapsed {el:.0f}s ETA {eta:.0f}s")
            if checkpoint is not None and i % every == 0 and i < len(cases):
                checkpoint(results)
        return results


#: the longest a run goes without a progress line (a case of many adapters that build kernels can take minutes)
PROGRESS_SECONDS = 60.0


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)



