"""Compare the pytest plugin's verdicts with the CLI's for the same run: ``python tools/compare_front_ends.py
JUNIT_XML REPORT_JSON``.

JUNIT_XML is pytest's ``--junitxml`` of ``pytest -m gpu ... --impl ...`` (each conformance test records its final
outcome as the property ``conformance_outcome``) or, for a session cut off before it wrote one, the ``.outcomes`` file
of ``tools/pytest_stream_failures.py`` (``OUTCOME<TAB>nodeid`` per conformance test); REPORT_JSON is ``python -m
attention_conformance run``'s report.json over the same profile and adapters (either plain or gzip-compressed).
Prints the counts of both, every (case, adapter) both ran whose outcome differs, and exits 1 when one does.
"""

from __future__ import annotations

import gzip
import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

PROPERTY = "conformance_outcome"


def conformance_pair(nodeid: str) -> tuple[str, str] | None:
    """(case id, spec) of a conformance test's name or node id; None for any other test."""
    name = nodeid[nodeid.find("test_case["):] if "::test_case[" in nodeid else nodeid
    if not name.startswith("test_case[") or "::" not in name:
        return None
    case_id, spec = name[len("test_case["):-1].split("::", 1)
    return case_id, spec


def plugin_outcomes(junit: Path) -> dict[tuple[str, str], str]:
    """(case id, spec) -> the final outcome a conformance test recorded (junit XML, or a ``.outcomes`` file)."""
    out = {}
    raw = junit.read_bytes()
    if junit.name.endswith(".outcomes"):
        for line in raw.decode().splitlines():
            outcome, _, nodeid = line.partition("\t")
            pair = conformance_pair(nodeid)
            if pair is not None:
                out[pair] = outcome
        return out
    root = ET.fromstring(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    for tc in root.iter("testcase"):
        pair = conformance_pair(tc.get("name", ""))
        if pair is None:
            continue
        for prop in tc.iter("property"):
            if prop.get("name") == PROPERTY:
                out[pair] = prop.get("value", "")
    return out


def cli_outcomes(report: Path) -> dict[tuple[str, str], str]:
    raw = report.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return {(r["case_id"], r["spec"]): r["outcome"] for r in data["results"]}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    plugin, cli = plugin_outcomes(Path(args[0])), cli_outcomes(Path(args[1]))
    both = sorted(set(plugin) & set(cli))
    for name, got in (("pytest plugin", plugin), ("CLI", cli)):
        counts = Counter(got[p] for p in both)
        print(f"{name}: {len(got)} results, {len(both)} in common: "
              + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    differ = [(p, cli[p], plugin[p]) for p in both if cli[p] != plugin[p]]
    for (case_id, spec), a, b in differ:
        print(f"DIFFER {case_id} on {spec}: CLI {a}, plugin {b}")
    print(f"{len(differ)} of {len(both)} (case, adapter) pairs differ")
    return 1 if differ or not both else 0


if __name__ == "__main__":
    sys.exit(main())
