"""Outcome names, their severity, which ones fail a run, and how reports show them: one place.

Outcomes of one (adapter, case), in the order reports list them (SEMANTICS.md says what is judged,
conformance/TOLERANCES.md how close is close enough):

- ``PASS``: every check passed within the a-priori bound.
- ``QUALITY_WARNING``: passed, but more than 2x the error of a naive same-precision implementation
  (TOLERANCES.md §5).
- ``FINDING``: the only deviation is a *named finding* whose class is not failing on this run
  (`conformance.verdict.judge.FINDING_CLASSES`; e.g. ``masked_nan``: NaN planted at masked-out positions of a
  dense mask reached the output through 0 x NaN, SEMANTICS.md §6, §7). Never hidden: counted on its
  own and listed in every report. ``--strict`` (or an adapter claiming NaN-safe masking) makes it FAIL.
- ``KNOWN``: a failure matched by an expectations entry (an upstream bug this harness reproduces).
  Not failing, always shown.
- ``FAIL``: a check failed (values, NaN/Inf, LSE, dtype, device, inputs changed, determinism, a claimed
  feature that raised).
- ``UNEXPECTED_PASS``: an expectations entry says it fails, and it passed: failing (the entry is stale).
- ``NOT_SUPPORTED``: the adapter declined the case, with its reason.
- ``CRASH`` / ``TIMEOUT``: the isolated worker process died / did not answer in time.
- ``HARNESS_ERROR``: the harness itself raised (making inputs, the oracle, translating the case,
  reading results); the message names the harness frame. Never the adapter's fault.

`FAILING` is the one definition of "this outcome fails the run" (exit code 1; 2 for HARNESS_ERROR).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = [
    "COLOUR",
    "MARKER",
    "CRASH",
    "FAIL",
    "FAILING",
    "FINDING",
    "HARNESS_ERROR",
    "KNOWN",
    "LEGEND",
    "NOT_FAILING",
    "NOT_SUPPORTED",
    "OUTCOMES",
    "PASS",
    "QUALITY_WARNING",
    "SEVERITY",
    "SHORT",
    "TIMEOUT",
    "UNEXPECTED_PASS",
    "counts_line",
    "exit_code_of",
    "is_failing",
    "worst",
]

PASS = "PASS"
QUALITY_WARNING = "QUALITY_WARNING"
FINDING = "FINDING"
KNOWN = "KNOWN"
FAIL = "FAIL"
UNEXPECTED_PASS = "UNEXPECTED_PASS"
NOT_SUPPORTED = "NOT_SUPPORTED"
CRASH = "CRASH"
TIMEOUT = "TIMEOUT"
HARNESS_ERROR = "HARNESS_ERROR"

#: every outcome, in the order report columns list them
OUTCOMES = (PASS, QUALITY_WARNING, FINDING, KNOWN, FAIL, UNEXPECTED_PASS, NOT_SUPPORTED, CRASH, TIMEOUT,
            HARNESS_ERROR)

#: worst-outcome order (the report matrix shows the most severe outcome of a cell)
SEVERITY = {NOT_SUPPORTED: 0, PASS: 1, QUALITY_WARNING: 2, FINDING: 3, KNOWN: 4, FAIL: 5, UNEXPECTED_PASS: 6,
            TIMEOUT: 7, CRASH: 8, HARNESS_ERROR: 9}

#: the outcomes that fail a run (exit code 1, or 2 when one is HARNESS_ERROR) and a pytest test
FAILING = frozenset({FAIL, UNEXPECTED_PASS, CRASH, TIMEOUT, HARNESS_ERROR})
NOT_FAILING = frozenset(OUTCOMES) - FAILING

#: short labels for table headers and cells (report.md, report.html, progress lines)
SHORT = {PASS: "PASS", QUALITY_WARNING: "WARN", FINDING: "FIND", KNOWN: "KNOWN", FAIL: "FAIL",
         UNEXPECTED_PASS: "XPASS", NOT_SUPPORTED: "n/s", CRASH: "CRASH", TIMEOUT: "TIMEOUT", HARNESS_ERROR: "H-ERR"}

#: background colours of report.html cells
COLOUR = {PASS: "#d8f0d8", QUALITY_WARNING: "#fff2c2", FINDING: "#fde2b8", KNOWN: "#dfe7f5", FAIL: "#f7c6c6",
          UNEXPECTED_PASS: "#f3b0d4", NOT_SUPPORTED: "#eeeeee", CRASH: "#e9a3a3", TIMEOUT: "#f0b48a",
          HARNESS_ERROR: "#c9b3e6"}

#: saturated colour per outcome for chart markers (COLOUR is the light cell background of the same outcome)
MARKER = {PASS: "#2ca02c", QUALITY_WARNING: "#d4a017", FINDING: "#e08214", KNOWN: "#4a6fb5", FAIL: "#d62728",
          UNEXPECTED_PASS: "#c2188f", NOT_SUPPORTED: "#9e9e9e", CRASH: "#8b0000", TIMEOUT: "#e66100",
          HARNESS_ERROR: "#7b3fb5"}

#: one sentence per outcome, for report legends
LEGEND = {
    PASS: "within the a-priori bound of TOLERANCES.md",
    QUALITY_WARNING: "within the bound but > 2x the error of a naive same-precision implementation",
    FINDING: "a named finding (e.g. masked_nan), not failing unless --strict; listed under Named findings",
    KNOWN: "a failure matched by an expectations entry (not failing, always shown)",
    FAIL: "a check failed",
    UNEXPECTED_PASS: "an expected failure passed (the expectations entry is stale; failing)",
    NOT_SUPPORTED: "declined by the adapter",
    CRASH: "the worker process died",
    TIMEOUT: "the call did not finish in time",
    HARNESS_ERROR: "the harness raised (not the adapter's fault)",
}


def counts_line(counts: Mapping[str, int]) -> str:
    """``PASS=3 FAIL=1``: the non-zero counts of ``counts`` (outcome -> number) in report order (progress lines)."""
    return " ".join(f"{k}={counts[k]}" for k in OUTCOMES if counts.get(k))


def worst(outcomes: Iterable[str]) -> str | None:
    """The most severe of `outcomes` (`SEVERITY`), None when there is none."""
    outcomes = list(outcomes)
    return max(outcomes, key=lambda o: SEVERITY[o]) if outcomes else None


def is_failing(outcome: str) -> bool:
    return outcome in FAILING


def exit_code_of(outcomes: Iterable[str]) -> int:
    """0 when nothing failed; 2 when the harness raised; otherwise 1 when some outcome is failing."""
    seen = set(outcomes)
    if HARNESS_ERROR in seen:
        return 2
    return 1 if seen & FAILING else 0
