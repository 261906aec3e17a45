"""The conformance engine: run cases on adapters, judge them against the FP64 oracle.

For each case (outer loop, so the oracle result is computed once per run and shared by every
adapter, issue 3 item 8) and each adapter (inner loop):

1. ``adapter.supports(case, device)`` -> NOT_SUPPORTED with its reason;
2. forward (in-process, or in a worker process for ``isolate`` adapters: CRASH / TIMEOUT);
3. checks: output shape/dtype/device, values under the bound (conformance/TOLERANCES.md), NaN/Inf,
   LSE and the empty-row convention, inputs unchanged, out= buffer fully written;
4. backward cases: dQ, dK, dV against `oracles.attention_backward`;
5. bitwise determinism for adapters that declare it (a second forward, compared bit for bit);
6. the secondary criterion (2x the naive same-precision error) -> QUALITY_WARNING.
"""

from __future__ import annotations

import sys
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from conformance import checks
from conformance.case import Case
from conformance.catalog import estimated_cost
from conformance.eta import EtaModel
from conformance.registry import LoadedAdapter
from conformance.tolerance import OracleData, compute_oracle, forward_tolerance, lse_tolerance, precision_model
from conformance.worker import CallResult, WorkerClient, WorkerCrash, WorkerTimeout, call_adapter

__all__ = [
    "OUTCOMES",
    "SEVERITY",
    "CaseResult",
    "OracleCache",
    "Runner",
    "features_of",
    "repro_command",
    "worst",
]

OUTCOMES = ("PASS", "QUALITY_WARNING", "FAIL", "NOT_SUPPORTED", "CRASH", "TIMEOUT", "HARNESS_ERROR")
SEVERITY = {"NOT_SUPPORTED": 0, "PASS": 1, "QUALITY_WARNING": 2, "FAIL": 3, "TIMEOUT": 4, "CRASH": 5,
            "HARNESS_ERROR": 6}
FAILING = ("FAIL", "CRASH", "TIMEOUT")


def worst(outcomes: Sequence[str]) -> str | None:
    return max(outcomes, key=lambda o: SEVERITY[o]) if outcomes else None


def features_of(case: Case) -> list[str]:
    """Feature labels of a case (the columns of the report's adapter x feature matrix)."""
    f = [f"dtype:{case.dtype}"]
    if case.causal:
        f.append(f"causal:{case.alignment}")
    if case.window is not None:
        f.append("window")
    if case.mask:
        f.append("mask")
    if case.bias:
        f.append("bias")
    if case.softcap:
        f.append("softcap")
    if case.Hq != case.Hkv:
        f.append("gqa")
    if case.dv != case.d:
        f.append("dv!=d")
    if case.varlen:
        f.append("varlen")
    if case.layout != "contiguous":
        f.append(f"layout:{case.layout}")
    if case.distribution != "normal":
        f.append("dist:" + case.distribution.split(":")[0])
    if case.backward:
        f.append("backward")
    if case.fp8 is not None:
        f.append("fp8")
    if case.Lq != case.Lk:
        f.append("Lq!=Lk")
    return f


def repro_command(case_id: str, spec: str, device: str = "cpu") -> str:
    dev = "" if device == "cpu" else f" --device {device}"
    return f"python -m conformance repro {case_id} --impl {spec}{dev}"


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
    seconds: float = 0.0
    oracle_seconds: float = 0.0
    tolerance_model: dict[str, Any] = field(default_factory=dict)
    case: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    repro: str = ""
    expectation: dict[str, Any] | None = None  # the expectations entry applied (conformance/expectations.py)

    def to_dict(self) -> dict:
        return asdict(self)


class OracleCache:
    """Inputs and oracle data per case id, computed once per run and shared by all adapters."""

    def __init__(self):
        self._data: dict[str, tuple[Any, OracleData | None, str | None]] = {}
        self.computed = 0

    def get(self, case: Case):
        if case.id not in self._data:
            from conformance.inputs import make_inputs

            try:
                inputs = make_inputs(case)
                od = compute_oracle(case, inputs)
                self._data[case.id] = (inputs, od, None)
            except Exception:
                self._data[case.id] = (None, None, traceback.format_exc(limit=6))
            self.computed += 1
        return self._data[case.id]

    def evict(self, case_id: str) -> None:
        self._data.pop(case_id, None)


def _dtype_name(x: str | None) -> str | None:
    if x is None:
        return None
    return str(x).replace("torch.", "")


class Runner:
    """Runs cases on loaded adapters. ``timeout`` applies to isolated (worker) adapters."""

    def __init__(self, adapters: Sequence[LoadedAdapter], device: str = "cpu", *, timeout: float = 300.0,
                 determinism: str = "sampled", worker_env: dict[str, str] | None = None):
        self.adapters = list(adapters)
        self.device = device
        self.timeout = timeout
        self.determinism = determinism
        self.cache = OracleCache()
        self._workers: dict[str, WorkerClient] = {}
        self.worker_env = worker_env or {}

    # -- calling ----------------------------------------------------------------------------------
    def _call(self, la: LoadedAdapter, kind: str, inputs, case: Case) -> CallResult:
        if not la.isolate:
            return call_adapter(la.adapter, kind, inputs, case, self.device)
        client = self._workers.get(la.spec)
        if client is None:
            client = self._workers[la.spec] = WorkerClient(la.spec, self.device, self.timeout, self.worker_env)
        return client.call(kind, inputs, case)

    def close(self) -> None:
        for c in self._workers.values():
            c.close()
        self._workers.clear()

    # -- one case ---------------------------------------------------------------------------------
    def run_case(self, la: LoadedAdapter, case: Case) -> CaseResult:
        res = CaseResult(case_id=case.id, adapter=la.name, spec=la.spec, outcome="PASS", family=case.family,
                         features=features_of(case), case=case.to_dict(), seed=case.seed,
                         repro=repro_command(case.id, la.spec, self.device))
        t0 = time.perf_counter()
        try:
            self._run_case(la, case, res)
        except (WorkerCrash, WorkerTimeout) as exc:
            res.outcome = "TIMEOUT" if isinstance(exc, WorkerTimeout) else "CRASH"
            res.message = f"{res.outcome}: {exc}"
        except Exception:
            res.outcome = "HARNESS_ERROR"
            res.message = "harness error:\n" + traceback.format_exc(limit=8)
        res.seconds = time.perf_counter() - t0
        return res

    def _run_case(self, la: LoadedAdapter, case: Case, res: CaseResult) -> None:
        if not la.available:
            res.outcome, res.message = "NOT_SUPPORTED", f"adapter unavailable: {la.reason}"
            return
        reason = la.adapter.supports(case, self.device)
        if reason is not None:
            res.outcome, res.message = "NOT_SUPPORTED", reason
            return
        inputs, od, err = self.cache.get(case)
        if err is not None:
            res.outcome, res.message = "HARNESS_ERROR", f"oracle / inputs failed for {case.id}:\n{err}"
            return
        res.oracle_seconds = od.seconds
        caps = la.adapter.capabilities
        failures: list[str] = []
        warnings: list[str] = []

        fwd = self._call(la, "forward", inputs, case)
        if fwd.error is not None:
            res.outcome = "FAIL"
            res.checks["forward"] = "fail"
            last = fwd.error.strip().splitlines()[-1]
            res.message = (f"declared capability raised {fwd.error_type} (adapter claims this case; a claimed "
                           f"feature that raises is a FAIL): {last}\n{fwd.error}")
            return
        fo = fwd.output
        res.kernels = list(getattr(fo, "kernels", ()) or ())
        res.notes = list(getattr(fo, "notes", []) or [])
        self._check_forward(la, case, inputs, od, fwd, failures, warnings, res)

        if case.backward:
            bwd = self._call(la, "backward", inputs, case)
            if bwd.error is not None:
                failures.append(f"backward raised {bwd.error_type}: {bwd.error.strip().splitlines()[-1]}")
                res.checks["backward"] = "fail"
            else:
                self._check_backward(case, od, bwd, failures, warnings, res)

        if caps.deterministic and self._check_determinism(case):
            again = self._call(la, "forward", inputs, case)
            same = again.error is None and checks.bitwise_equal(fo.out, again.output.out) and \
                checks.bitwise_equal(fo.lse, again.output.lse)
            res.checks["determinism"] = "pass" if same else "fail"
            if not same:
                failures.append("determinism: declared deterministic, but a second identical forward call "
                                "gave different bits")

        if failures:
            res.outcome = "FAIL"
            res.message = "\n".join(failures)
        elif warnings:
            res.outcome = "QUALITY_WARNING"
            res.message = "\n".join(warnings)
        res.warnings = warnings

    def _check_determinism(self, case: Case) -> bool:
        if self.determinism == "all":
            return True
        if self.determinism == "none":
            return False
        return zlib.crc32(case.id.encode()) % 4 == 0

    @staticmethod
    def _record_values(name: str, stats, msg: str | None, failures, warnings, res) -> None:
        """Store one `checks.compare_values` result: its stats, pass/fail, and the failure message,
        or else the secondary-criterion quality warning when there is one."""
        res.stats[name] = stats.to_dict()
        res.checks[name] = "pass" if msg is None else "fail"
        if msg:
            failures.append(msg)
        else:
            w = checks.quality_warning(stats)
            if w:
                warnings.append(w)

    def _check_forward(self, la, case, inputs, od: OracleData, fwd: CallResult, failures, warnings, res) -> None:
        fo = fwd.output
        caps = la.adapter.capabilities
        out_dt = _dtype_name(getattr(fo, "out_dtype", None))
        expected_dt = precision_model(case).out_dtype
        model = od.model
        if out_dt is not None:
            if case.fp8 is not None and out_dt in ("bfloat16", "float16", "float32"):
                model = precision_model(case, out_dt)
                res.checks["out_dtype"] = "pass"
            elif out_dt != expected_dt:
                failures.append(f"out dtype: the kernel produced {out_dt}, expected {expected_dt} (the input dtype)")
                res.checks["out_dtype"] = "fail"
            else:
                res.checks["out_dtype"] = "pass"
        res.tolerance_model = model.to_dict()
        dev = getattr(fo, "out_device", None)
        if dev is not None:
            ok = str(dev).split(":")[0] == self.device
            res.checks["device"] = "pass" if ok else "fail"
            if not ok:
                failures.append(f"device: output lived on {dev!r}, the run asked for {self.device!r}")
        tol = forward_tolerance(od, model)
        stats, msg = checks.compare_values("out", fo.out, od.out, tol, rows=od.valid[..., None], naive=od.naive_out)
        self._record_values("out", stats, msg, failures, warnings, res)
        if caps.lse or fo.lse is not None:
            lstats, lmsg, findings = checks.compare_lse(fo.lse, od.lse, lse_tolerance(od, model), od.valid,
                                                        declared=getattr(fo, "lse_convention", "-inf"))
            res.stats["lse"] = lstats.to_dict()
            res.findings.extend(findings)
            res.checks["lse"] = "pass" if lmsg is None else "fail"
            if lmsg:
                failures.append(lmsg)
        mutated = list(fwd.mutated) + list(getattr(fo, "mutated_inputs", ()) or ())
        res.checks["inputs_unchanged"] = "pass" if not mutated else "fail"
        if mutated:
            failures.append(f"inputs changed by the call: {sorted(set(mutated))}")
        unwritten = int(getattr(fo, "unwritten", 0) or 0)
        if caps.accepts_out:
            res.checks["out_fully_written"] = "pass" if unwritten == 0 else "fail"
        if unwritten:
            failures.append(f"out= buffer: {unwritten} element(s) still hold the NaN poison after the call")

    def _check_backward(self, case, od: OracleData, bwd: CallResult, failures, warnings, res) -> None:
        bo = bwd.output
        mutated = list(bwd.mutated) + list(getattr(bo, "mutated_inputs", ()) or ())
        if mutated:
            failures.append(f"backward changed inputs: {sorted(set(mutated))}")
            res.checks["inputs_unchanged"] = "fail"
        for k in getattr(bo, "kernels", ()) or ():
            if k not in res.kernels:
                res.kernels.append(k)
        rows_q = od.valid[..., None]
        for name, got in (("dq", bo.dq), ("dk", bo.dk), ("dv", bo.dv)):
            rows = rows_q if name == "dq" else None
            stats, msg = checks.compare_values(name, got, od.grads[name], od.grad_tol[name], rows=rows,
                                               naive=od.naive_grads.get(name))
            self._record_values(name, stats, msg, failures, warnings, res)

    # -- a suite ---------------------------------------------------------------------------------
    def run(self, cases: Sequence[Case], progress: Callable[[str], None] | None = None,
            every: int = 25, checkpoint: Callable[[list[CaseResult]], None] | None = None) -> list[CaseResult]:
        """Case-major loop; one progress line (counts, ETA) and one ``checkpoint(results)`` every ``every`` cases."""
        results: list[CaseResult] = []
        counts: dict[str, int] = {}
        costs = [estimated_cost(c) for c in cases]
        eta_model = EtaModel()
        t0 = time.perf_counter()
        for i, case in enumerate(cases, 1):
            t_case = time.perf_counter()
            for la in self.adapters:
                r = self.run_case(la, case)
                results.append(r)
                counts[r.outcome] = counts.get(r.outcome, 0) + 1
            self.cache.evict(case.id)
            eta_model.observe(costs[i - 1], time.perf_counter() - t_case)
            if progress is not None and (i % every == 0 or i == len(cases)):
                el = time.perf_counter() - t0
                eta = eta_model.remaining(costs[i:])
                summary = " ".join(f"{k}={counts[k]}" for k in OUTCOMES if counts.get(k))
                progress(f"[{i}/{len(cases)} cases] {summary} elapsed {el:.0f}s ETA {eta:.0f}s")
            if checkpoint is not None and i % every == 0 and i < len(cases):
                checkpoint(results)
        return results


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)



