"""Standalone repro files for a run's smallest failures, written where the run was made (the library installed, the
device there): ``python tools/standalone_repros.py REPORT_DIR [REPORT_DIR ...] --out DIR``.

For every adapter of the reports, its smallest FAIL, KNOWN and FINDING cases (``--per-adapter``, by B * Hq * Lq * Lk,
distinct features first) get the file ``repro --standalone`` writes (`conformance.reproduce.standalone`: torch and
the library only, exit 1 while the defect stands), named ``<adapter>--<case id>.py`` in DIR, and DIR/index.md lists
them with the outcome, the check that failed and the command that wrote each; a case the writer cannot write is
listed with its reason. These are the files an expectations entry points at (``repro = "repros/..."``) and a report
to the library's maintainers attaches; the session on the H200 writes them before its results come back
(tools/device/runner_h200.sh), since FlashInfer and the device are there.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from attention_conformance.cases.case import Case
from attention_conformance.reporting.store import load_report
from attention_conformance.reproduce.inputs import UnwritableCase
from attention_conformance.reproduce.standalone import standalone

OUTCOMES = ("FAIL", "KNOWN", "FINDING")


def _report(folder: Path) -> dict:
    for name in ("report.json", "report.json.gz"):
        if (folder / name).is_file():
            return load_report(folder / name)
    raise SystemExit(f"standalone_repros: no report.json in {folder}")


def _size(case: dict) -> int:
    return int(case["B"]) * int(case["Hq"]) * int(case["Lq"]) * int(case["Lk"])


def pick(results: list[dict], per_adapter: int) -> list[dict]:
    """Per adapter spec, its smallest failing results (FAIL, then KNOWN, then FINDING), one per family first."""
    chosen = []
    by_spec: dict[str, list[dict]] = {}
    for r in results:
        if r.get("outcome") in OUTCOMES and r.get("case"):
            by_spec.setdefault(r.get("spec") or r["adapter"], []).append(r)
    for spec in sorted(by_spec):
        ranked = sorted(by_spec[spec], key=lambda r: (OUTCOMES.index(r["outcome"]), _size(r["case"]), r["case_id"]))
        firsts, rest, families = [], [], set()
        for r in ranked:
            (rest if r["case"].get("family") in families else firsts).append(r)
            families.add(r["case"].get("family"))
        chosen += (firsts + rest)[:per_adapter]
    return chosen


def file_name(spec: str, case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{spec}--{case_id}")[:180] + ".py"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", type=Path, help="folders with a report.json (or report.json.gz)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-adapter", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = [r for folder in args.reports for r in _report(folder).get("results", [])]
    lines = ["# Standalone repro files of the smallest failures", "",
             f"Written by `python tools/standalone_repros.py {' '.join(map(str, args.reports))} --out {args.out}`; "
             "each runs with torch and the library only and exits 1 while the defect stands.", "",
             "| adapter | case | outcome | what failed | file |", "|---|---|---|---|---|"]
    written = 0
    for r in pick(results, args.per_adapter):
        spec, case = r.get("spec") or r["adapter"], Case.from_dict(r["case"])
        what = " ".join(str(r.get("message", "")).split())[:160].replace("|", "/")
        command = shlex.join(["python", "-m", "attention_conformance", "repro", case.id, "--impl", spec, "--device",
                              args.device, "--standalone"])
        try:
            text = standalone(case, spec, args.device, command=command)
        except (UnwritableCase, ValueError) as exc:
            lines.append(f"| {spec} | `{case.id}` | {r['outcome']} | {what} | not written: {exc} |")
            continue
        name = file_name(spec, case.id)
        (args.out / name).write_text(text)
        written += 1
        lines.append(f"| {spec} | `{case.id}` | {r['outcome']} | {what} | `{name}` |")
    (args.out / "index.md").write_text("\n".join(lines) + "\n")
    print(f"standalone_repros: {written} files in {args.out} (index.md lists them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
