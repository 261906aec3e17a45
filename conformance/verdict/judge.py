"""The judge: one pure function turns (case, oracle with its bound, what the adapter's calls returned) into a verdict.

Every entry point calls `judge` and nothing else decides a verdict: the engine (`python -m attention_conformance
run`, pytest ``conformance/``), the property suite (`property_tests.kernel_check.evaluate`), the FP8
offset property (`property_tests.kernel_properties`) and the repro snippets (`conformance.reproduce.snippet`). The
engine keeps iteration, caching and isolation; it hands the judge an `AdapterResults` (every call it
made: forward, backward, a repeated forward for determinism) and the adapter's `Capabilities`.

Checks, in order (each recorded in `Verdict.checks` as "pass" / "fail"):

1. a call that raised: FAIL when the code under test raised (a claimed feature that raises is a
   FAIL), HARNESS_ERROR naming the frame when harness code around it raised (`conformance.cases.calldata`);
2. ``out_dtype`` (the input dtype; FP8 cases may return bf16/fp16/fp32, or FP8 codes with a per-tensor
   output scale, ``ForwardOutput.out_scale``, judged with that output's precision model), ``device``;
3. ``out`` within the per-element bound of conformance/TOLERANCES.md on compared rows (padded query
   rows are not compared, SEMANTICS.md §7); NaN/Inf where the oracle is finite always fails;
4. ``lse`` when declared or returned (SEMANTICS.md §12), first converted from the adapter's declared
   ``Capabilities.lse_base`` / ``lse_layout`` (§21, `conformance.verdict.lse_convention`), with the fully-masked-row
   convention of §8,
   reported by name (``lse_convention:+inf`` etc.): +inf passes only where the adapter's
   `ForwardOutput.lse_convention` declares it, whether the adapter runs in-process or isolated;
5. ``inputs_unchanged`` (every array handed over, page pools and FP8 codes included), ``out_fully_written``
   for adapters that accept an ``out=`` buffer;
6. backward cases: ``dq`` (compared query rows), ``dk``, ``dv`` (compared key rows; SEMANTICS.md §7) (TOLERANCES.md
   §4), ``dsinks`` for sink cases (SEMANTICS.md §18, TOLERANCES.md §4a);
   a call the library itself refused (`CallDeclined`) is NOT_SUPPORTED with its words;
7. ``determinism``: when a repeated forward is given, bit-identical out and LSE;
8. the secondary criterion (TOLERANCES.md §5): QUALITY_WARNING.

Named findings (`FINDING_CLASSES`) are deviations the contract names and grades below FAIL unless
``strict`` (SEMANTICS.md §17): they give the outcome FINDING, are listed in `Verdict.findings` as
``class:quantity`` and counted on their own in every report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from attention_conformance.cases.calldata import AdapterResults, CallDeclined, CallResult
from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import planted_nan
from attention_conformance.verdict import checks, numfmt
from attention_conformance.verdict.bounds import OracleData, forward_tolerance, lse_tolerance
from attention_conformance.verdict.lse_convention import to_contract
from attention_conformance.verdict.outcomes import (
    FAIL,
    FAILING,
    FINDING,
    HARNESS_ERROR,
    NOT_SUPPORTED,
    PASS,
    QUALITY_WARNING,
)
from attention_conformance.verdict.precision import FP8_CASE_OUTPUT_DTYPES, PrecisionModel, precision_model

__all__ = ["FINDING_CLASSES", "OUT_OF_MEMORY", "Verdict", "finding_class", "judge", "ran_out_of_memory"]

#: how a HARNESS_ERROR message for a call that ran out of device memory starts (`running.parallel` re-runs its case
#: alone, once, at the end of a run with several workers)
OUT_OF_MEMORY = "out of device memory"


def ran_out_of_memory(outcome: str, message: str) -> bool:
    """Whether a verdict is the HARNESS_ERROR of a call that ran out of device memory (not the kernel's answer)."""
    return outcome == HARNESS_ERROR and message.startswith(OUT_OF_MEMORY)

#: named finding classes (SEMANTICS.md §17): name -> what it means
FINDING_CLASSES: dict[str, str] = {
    "masked_nan": ("NaN that the case planted at positions a dense mask masks out (padding handed over as "
                   "masked-out keys or fully masked query rows) reached a compared value through 0 x NaN; "
                   "FAIL under --strict or when the adapter claims NaN-safe masking"),
}


def finding_class(finding: str) -> str | None:
    """The named class of a `Verdict.findings` entry (``masked_nan:out`` -> ``masked_nan``), None for a
    convention record such as ``lse_convention:+inf``."""
    name = finding.split(":", 1)[0]
    return name if name in FINDING_CLASSES else None


@dataclass
class Verdict:
    """The judgement of one (adapter, case) pair."""

    outcome: str = PASS
    message: str = ""  # why: every failure (or the warnings, findings, NOT_SUPPORTED reason), one per line
    checks: dict[str, str] = field(default_factory=dict)  # check name -> "pass" | "fail"
    stats: dict[str, dict] = field(default_factory=dict)  # out / lse / dq / dk / dv -> QuantityStats.to_dict()
    findings: list[str] = field(default_factory=list)  # conventions seen and named findings (`finding_class`)
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    tolerance_model: dict[str, Any] = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raised_at: str = ""  # for a call that raised: the frame that raised (`conformance.cases.calldata.raise_site`)
    memory: dict[str, dict] = field(default_factory=dict)  # "forward" / "backward" -> CallResult.memory (CUDA)
    oracle_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING

    @property
    def usage(self) -> float:
        """Worst error / tolerance over every compared quantity (inf when a compared value is non-finite)."""
        worst = 0.0
        for st in self.stats.values():
            worst = max(worst, float("inf") if st.get("nonfinite") else float(st.get("max_ratio") or 0.0))
        return worst

    @property
    def check(self) -> str:
        """The first failing check (e.g. ``out``, ``inputs_unchanged``), else the outcome in lower case."""
        for name, state in self.checks.items():
            if state == "fail":
                return name
        return self.outcome.lower()

    def summary(self) -> dict[str, Any]:
        """What must agree between entry points: outcome, per-check states, findings, first message line."""
        return {"outcome": self.outcome, "checks": dict(self.checks), "findings": sorted(self.findings),
                "message": self.message.strip().splitlines()[0] if self.message.strip() else ""}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dtype_name(x: str | None) -> str | None:
    return None if x is None else str(x).replace("torch.", "")


def _call_error(kind: str, call: CallResult) -> tuple[str, str]:
    """(outcome, message) for a call that raised: the adapter's exception is FAIL, the harness's HARNESS_ERROR,
    the library's own refusal (`CallDeclined`, conformance/cases/calldata.py) NOT_SUPPORTED with its reason."""
    last = call.error.strip().splitlines()[-1] if call.error and call.error.strip() else str(call.error_type)
    if call.error_type == CallDeclined.__name__:
        return NOT_SUPPORTED, f"{kind} declined at call time by the library: {last.split(': ', 1)[-1]}"
    if call.error_origin == "resources":
        return HARNESS_ERROR, (f"{OUT_OF_MEMORY} in {kind}, not a verdict of the kernel (the machine's memory: "
                               f"other processes on the device, or too many workers; rerun the case alone): {last}")
    if call.error_origin == "harness":
        return HARNESS_ERROR, (f"harness error in {kind} (not the adapter's fault): {last}; raised at "
                               f"{call.error_site or 'an unknown frame'}, outside the code under test\n{call.error}")
    if kind == "forward":
        return FAIL, (f"declared capability raised {call.error_type} (adapter claims this case; a claimed feature "
                      f"that raises is a FAIL): {last}; raised at {call.error_site or 'an unknown frame'}\n"
                      f"{call.error}")
    return FAIL, f"{kind} raised {call.error_type}: {last}; raised at {call.error_site or 'an unknown frame'}"


class _Judgement:
    """Accumulates checks, stats, failures, findings and warnings into a `Verdict`; grades planted NaN (§17)."""

    def __init__(self, verdict: Verdict, case: Case, capabilities, strict: bool):
        self.v = verdict
        self.finding_messages: list[str] = []
        self.planted = planted_nan(case)
        self.masked_padded_rows = bool(getattr(capabilities, "padding_as_mask", False) and case.seqlens_q is not None
                                       and any(int(n) < case.Lq for n in case.seqlens_q))
        self.finding_allowed = False
        self.why_fail = ""
        p = self.planted
        if p is None:
            return
        if p.kind == "paged":
            self.why_fail = ("the kernel was given the block table and the sequence lengths and read what they "
                             "exclude: FAIL (SEMANTICS.md §16, §17)")
        elif p.kind == "kv_append":
            self.why_fail = ("the kernel was given cache_seqlens and read cache slots past the new length: FAIL "
                             "(SEMANTICS.md §20, §17)")
        elif not getattr(capabilities, "padding_as_mask", False):
            self.why_fail = "the kernel was given the sequence lengths and read padding: FAIL (SEMANTICS.md §7, §17)"
        elif getattr(capabilities, "nan_safe_masking", False):
            self.why_fail = ("the adapter claims NaN-safe masking (Capabilities.nan_safe_masking), so NaN from "
                             "masked-out positions is a FAIL, not the finding masked_nan (SEMANTICS.md §17)")
        elif strict:
            self.why_fail = "NaN from masked-out positions of a dense mask (masked_nan) is a FAIL under --strict " \
                            "(SEMANTICS.md §17)"
        else:
            self.finding_allowed = True

    def fail(self, check: str, message: str) -> None:
        self.v.checks[check] = "fail"
        self.v.failures.append(message)

    def ok(self, check: str) -> None:
        self.v.checks.setdefault(check, "pass")

    def planted_nan(self, stats: checks.QuantityStats, msg: str) -> str | None:
        """`msg` with what was poisoned and where when the non-finite values can come from planted NaN;
        None when they are the named finding masked_nan instead of a failure (SEMANTICS.md §17)."""
        p = self.planted
        if p is None and stats.nonfinite and self.masked_padded_rows and stats.name in ("dk", "dv"):
            return (f"{msg}; the padded query rows reach this API as fully masked rows (SEMANTICS.md §7, §17), and "
                    "a kernel that returns NaN on fully masked rows (§8 says 0) carries it into dk, dv")
        if p is None or not stats.nonfinite:
            return msg
        name, idx = stats.name, list(stats.nonfinite_index or ())
        batches = stats.nonfinite_batches
        elsewhere = sorted(set(batches) - p.reachable(name))
        if elsewhere:
            return (f"{msg}; no planted NaN can reach {name} of batch entries {elsewhere} (SEMANTICS.md §17), so "
                    "these non-finite values are the kernel's own")
        cell = numfmt.index(idx[:3]).rstrip("]") + ", :]" if len(idx) == 4 else numfmt.index(idx)
        value = numfmt.value(stats.nonfinite_value).replace("nan", "NaN")
        others = f" (non-finite values in batch entries {batches})" if len(batches) > 1 else ""
        note = f"{p.describe(idx[:1])}; {name}{cell} is {value}{others}"
        if self.finding_allowed and stats.max_ratio <= 1.0:
            self.v.checks[name] = "finding"
            self.v.findings.append(f"masked_nan:{name}")
            self.finding_messages.append(
                f"{msg}; {note}: named finding masked_nan (SEMANTICS.md §17: NaN planted at masked-out positions of "
                f"a dense mask reached {name} through 0 x NaN; FAIL under --strict)")
            return None
        return f"{msg}; {note}; {self.why_fail}"

    def lse(self, stats: checks.QuantityStats, msg: str | None) -> None:
        """The `checks.compare_lse` result: NaN there is graded like any value (`planted_nan`), the convention
        messages of SEMANTICS.md §8 fail as they are; no secondary criterion for LSE."""
        self.v.stats["lse"] = stats.to_dict()
        if msg and stats.nonfinite:
            msg = self.planted_nan(stats, msg)
            if msg is None:
                return
        if msg:
            self.fail("lse", msg)
        else:
            self.ok("lse")

    def values(self, stats: checks.QuantityStats, msg: str | None) -> None:
        """One `checks.compare_values` result: its stats, pass/fail/finding, or the secondary-criterion warning."""
        self.v.stats[stats.name] = stats.to_dict()
        if msg is None:
            self.ok(stats.name)
            w = checks.quality_warning(stats)
            if w:
                self.v.warnings.append(w)
            return
        msg = self.planted_nan(stats, msg)
        if msg is not None:
            self.fail(stats.name, msg)


def _name_empty_row(msg: str | None, stats: checks.QuantityStats, od: OracleData) -> str | None:
    """`msg` plus, when its worst element lies on a row with no visible key, a clause saying so (SEMANTICS.md §8):
    a kernel engineer reads "fully masked row" faster than "oracle 0.0"."""
    idx = stats.max_ratio_index if stats.max_ratio_index is not None else stats.max_err_index
    if msg is None or idx is None or len(idx) != 4 or stats.nonfinite:
        return msg
    b, h, i = (int(x) for x in idx[:3])
    if not od.lse_empty[b, h, i]:
        return msg
    return (f"{msg}; out[{b}, {h}, {i}, :] is a row with no visible key, whose output is 0 (SEMANTICS.md §8: "
            "a fully masked row)")


def _forward(j: _Judgement, case: Case, od: OracleData, fwd: CallResult, device: str, capabilities,
             model_adjust: Callable[[PrecisionModel], PrecisionModel] | None) -> None:
    fo = fwd.output
    v = j.v
    v.kernels = list(getattr(fo, "kernels", ()) or ())
    v.notes = list(getattr(fo, "notes", []) or [])
    out_dt = _dtype_name(getattr(fo, "out_dtype", None))
    expected_dt = precision_model(case).out_dtype
    model = od.model
    if out_dt is not None:
        if case.fp8 is not None and out_dt in FP8_CASE_OUTPUT_DTYPES:
            model = precision_model(case, out_dt, getattr(fo, "out_scale", 1.0))
            j.ok("out_dtype")
        elif out_dt != expected_dt:
            j.fail("out_dtype", f"out dtype: the kernel produced {out_dt}, expected {expected_dt} (the input dtype)")
        else:
            j.ok("out_dtype")
    if model_adjust is not None:
        model = model_adjust(model)
    v.tolerance_model = model.to_dict()
    dev = getattr(fo, "out_device", None)
    if dev is not None:
        if str(dev).split(":")[0] == device.split(":")[0]:
            j.ok("device")
        else:
            j.fail("device", f"device: output lived on {dev!r}, the run asked for {device!r}")
    tol = forward_tolerance(od, model)
    stats, msg = checks.compare_values("out", fo.out, od.out, tol, rows=od.valid[..., None], naive=od.naive_out)
    j.values(stats, _name_empty_row(msg, stats, od))
    if capabilities.lse or fo.lse is not None:
        got_lse = fo.lse
        if got_lse is not None:  # the adapter's declared base and layout -> the contract's (SEMANTICS.md §21)
            try:
                got_lse = to_contract(got_lse, case, getattr(capabilities, "lse_base", "e"),
                                      getattr(capabilities, "lse_layout", "bhs"))
            except ValueError as exc:
                got_lse = None
                j.fail("lse", f"lse: {exc}")
        lstats, lmsg, conventions = checks.compare_lse(got_lse, od.lse, lse_tolerance(od, model), od.valid,
                                                       declared=getattr(fo, "lse_convention", "-inf"))
        v.findings.extend(conventions)
        j.lse(lstats, lmsg)
    mutated = sorted(set(fwd.mutated) | set(getattr(fo, "mutated_inputs", ()) or ()))
    if mutated:
        where = {**(getattr(getattr(fo, "mutated_inputs", None), "where", None) or {}),
                 **(getattr(fwd, "mutated_where", None) or {})}
        j.fail("inputs_unchanged", f"inputs changed by the call: {mutated}"
               + "".join(f"; {where[n]}" for n in mutated if n in where))
    else:
        j.ok("inputs_unchanged")
    unwritten = int(getattr(fo, "unwritten", 0) or 0)
    if unwritten:
        j.fail("out_fully_written", f"out= buffer: {unwritten} element(s) still hold the NaN poison after the call")
    elif capabilities.accepts_out:
        j.ok("out_fully_written")


def _backward(j: _Judgement, od: OracleData, bwd: CallResult) -> None:
    bo = bwd.output
    mutated = sorted(set(bwd.mutated) | set(getattr(bo, "mutated_inputs", ()) or ()))
    if mutated:
        j.fail("inputs_unchanged", f"backward changed inputs: {mutated}")
    for k in getattr(bo, "kernels", ()) or ():
        if k not in j.v.kernels:
            j.v.kernels.append(k)
    # padded rows are not compared (SEMANTICS.md §7): query rows of dq, key rows of dk and dv
    rows_of = {"dq": od.valid[..., None], "dk": None if od.valid_k is None else od.valid_k[..., None]}
    rows_of["dv"] = rows_of["dk"]
    names = ("dq", "dk", "dv", "dsinks") if "dsinks" in od.grads else ("dq", "dk", "dv")  # d sinks: §18
    for name in names:
        got = getattr(bo, name, None)  # a missing d sink is a FAIL ("the adapter returned nothing")
        rows = rows_of.get(name)
        j.values(*checks.compare_values(name, got, od.grads[name], od.grad_tol[name], rows=rows,
                                        naive=od.naive_grads.get(name)))


def _determinism(j: _Judgement, fwd: CallResult, again: CallResult) -> None:
    fo = fwd.output
    same = (again.error is None and checks.bitwise_equal(fo.out, again.output.out)
            and checks.bitwise_equal(fo.lse, again.output.lse))
    if same:
        j.ok("determinism")
    else:
        j.fail("determinism", "determinism: declared deterministic, but a second identical forward call gave "
                              "different bits")


def judge(case: Case, oracle: OracleData, result: AdapterResults, *, device: str, capabilities,
          strict: bool = False, model_adjust: Callable[[PrecisionModel], PrecisionModel] | None = None) -> Verdict:
    """The verdict on `result` (every call made for `case`) against `oracle` (see the module docstring).

    `capabilities` is the adapter's `Capabilities` (lse, accepts_out, NaN-safe masking are read);
    `strict` makes every named finding a FAIL; `model_adjust` replaces the precision model after the
    output dtype chose it (the FP8 offset property lowers the P floor, SEMANTICS.md §10).
    Pure: reads its arguments, calls no adapter, changes nothing.
    """
    v = Verdict(oracle_seconds=float(getattr(oracle, "seconds", 0.0) or 0.0))
    v.memory = {k: c.memory for k, c in (("forward", result.forward), ("backward", result.backward))
                if c is not None and c.memory}  # recorded, not judged: the memory family is judged across cases
    j = _Judgement(v, case, capabilities, strict)
    fwd = result.forward
    if fwd.error is not None:
        v.raised_at = fwd.error_site or ""
        v.outcome, v.message = _call_error("forward", fwd)
        v.checks["forward"] = "declined" if v.outcome == NOT_SUPPORTED else "fail"
        return v
    _forward(j, case, oracle, fwd, device, capabilities, model_adjust)
    harness_error = declined = None
    if case.backward:
        bwd = result.backward
        if bwd is None:
            harness_error = "harness error: a backward case was judged without a backward call"
        elif bwd.error is not None:
            outcome, msg = _call_error("backward", bwd)
            v.checks["backward"] = "declined" if outcome == NOT_SUPPORTED else "fail"
            v.raised_at = bwd.error_site or ""
            if outcome == HARNESS_ERROR:
                harness_error = msg
            elif outcome == NOT_SUPPORTED:
                declined = msg
            else:
                v.failures.append(msg)
        else:
            _backward(j, oracle, bwd)
    if result.repeat is not None:
        _determinism(j, fwd, result.repeat)
    if harness_error is not None:
        v.outcome, v.message = HARNESS_ERROR, "\n".join([harness_error, *v.failures])
    elif v.failures:
        v.outcome, v.message = FAIL, "\n".join(v.failures + j.finding_messages)
    elif declined is not None:  # the forward was right; the backward the case needs was refused
        v.outcome, v.message = NOT_SUPPORTED, declined
    elif j.finding_messages:
        v.outcome, v.message = FINDING, "\n".join(j.finding_messages)
    elif v.warnings:
        v.outcome, v.message = QUALITY_WARNING, "\n".join(v.warnings)
    return v

