"""report.json on disk: what `conformance.reporting.report.write_report` writes and every reader loads.

The summary comes first, indented; then ``cases`` (each case's parameters once, keyed by case id, not once per
adapter); then ``results``, one compact result per line, so a diff of two reports shows which verdicts changed.
A stored result has no ``case`` (it is in ``cases``), no field that holds its empty value (`EMPTY_FIELDS`) and its
kernel names are shortened (`short_kernel_name`); `load_report` gives back the dictionary
`conformance.reporting.report.build_report` made, each result's ``case`` and empty fields attached again.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["EMPTY_FIELDS", "KERNEL_NAME_CHARS", "dump_report", "load_report", "short_kernel_name", "stored_result"]

#: a stored kernel name is cut after this many characters (the profiler's own names are cut at 189)
KERNEL_NAME_CHARS = 160


def short_kernel_name(name: str) -> str:
    """A kernel's name as report.json stores it: its signature's parameter list dropped (the template arguments,
    which tell instantiations apart, are kept), then cut to `KERNEL_NAME_CHARS`.

    >>> short_kernel_name("void at::native::vectorized_elementwise_kernel<4, F<float>>(int, F<float>, char**)")
    'void at::native::vectorized_elementwise_kernel<4, F<float>>'
    """
    text = name.strip()
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                if i > 0:
                    text = text[:i].rstrip()
                break
    return text if len(text) <= KERNEL_NAME_CHARS else text[:KERNEL_NAME_CHARS - 3] + "..."


#: the fields a stored result leaves out when they hold this value (a declined case has none of them); `load_report`
#: puts them back. 16,000 NOT_SUPPORTED results of the H200 report (56 adapters) made ~0.5 MB of its gzip.
EMPTY_FIELDS: dict[str, Any] = {"stats": {}, "checks": {}, "findings": [], "warnings": [], "kernels": [], "notes": [],
                                "raised_at": "", "memory": {}, "tolerance_model": {}, "expectation": None,
                                "oracle_seconds": 0.0}


#: timings are stored to this many decimals of a second (0.1 ms): the 17 digits of a float do not compress
SECONDS_DECIMALS = 4


def stored_result(r: dict) -> dict:
    """A result as report.json stores it: short kernel names, its case in the report's ``cases`` table, the fields
    of `EMPTY_FIELDS` that hold their empty value left out, timings to `SECONDS_DECIMALS`, and no repro command for
    a case the adapter declined (nothing ran)."""
    r = {k: v for k, v in r.items() if k != "case" and not (k in EMPTY_FIELDS and v == EMPTY_FIELDS[k])}
    for k in ("seconds", "oracle_seconds"):
        if isinstance(r.get(k), float):
            r[k] = round(r[k], SECONDS_DECIMALS)
    if r.get("outcome") == "NOT_SUPPORTED":
        r.pop("repro", None)
    if r.get("kernels"):
        r["kernels"] = list(dict.fromkeys(short_kernel_name(k) for k in r["kernels"]))
    return r


def load_report(path: str | os.PathLike) -> dict:
    """A report.json as `build_report` made it: each result's ``case`` attached again from the ``cases`` table
    (`write_report` stores every case once, not once per adapter). A gzip-compressed file (``report.json.gz``, as
    reports/ stores them) is read as well."""
    raw = Path(path).read_bytes()
    rep = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    cases = rep.pop("cases", None)
    for r in rep.get("results", []):
        if cases:
            r.setdefault("case", cases.get(r.get("case_id"), {}))
        for k, empty in EMPTY_FIELDS.items():
            if k not in r:
                r[k] = copy.deepcopy(empty)
    return rep



def dump_report(path: str | os.PathLike, rep: dict, default: Callable[[Any], Any] | None = None) -> None:
    """Write `rep` (a `build_report` dictionary) to `path` in the layout of the module docstring."""
    results = rep.get("results", [])
    cases = {r["case_id"]: r["case"] for r in results if r.get("case")}
    head = json.dumps({**{k: v for k, v in rep.items() if k != "results"}, "cases": cases}, default=default,
                      allow_nan=True, indent=1)
    with open(path, "w") as f:
        f.write(head[:-1].rstrip() + ',\n"results": [\n')
        f.write(",\n".join(json.dumps(stored_result(r), default=default, allow_nan=True, separators=(",", ":"))
                            for r in results))
        f.write("\n]}\n")
