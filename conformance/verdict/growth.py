"""Memory growth over a run: the exponent of a kernel's peak device memory in N, and its verdict.

The ``memory`` catalog family measures one shape at N, 2N and 4N (`conformance.running.peak_memory` records each
call's peak); a kernel that claims linear memory and silently materialises the N x N scores or probabilities
(a fallback to a materialising path) passes every value check, and only this growth gives it away.

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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from attention_conformance.verdict.numfmt import mib

__all__ = [
    "FAMILY",
    "KNOWN_QUADRATIC",
    "LINEAR_MAX_EXPONENT",
    "MEMORY_CLAIMS",
    "GrowthRow",
    "apply_growth",
    "claims_of",
    "growth_exponent",
    "growth_failures",
    "growth_rows",
    "series_of",
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
