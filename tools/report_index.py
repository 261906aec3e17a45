"""``reports/index.md``: the current report of each device and the current benchmark set, with date, commit,
versions and command (lab tool: it reads the repository's reports/ folder; not installed).

    python tools/report_index.py            # rewrite reports/index.md from the files under reports/
    python tools/report_index.py --check    # exit 1 when index.md does not list exactly the files there

Run outputs are not source: a run writes to ``reports/latest/`` (git-ignored); a report becomes current by being
copied into reports/ and listed here, replacing the one it supersedes (git history keeps the older ones). The report
data files are git-ignored (.gitignore), so a current one is added with ``git add -f``. A conformance report is
kept as ``report.json.gz`` (gzip of the run's report.json) beside its ``report.md`` and ``.png`` (a screenshot of
the page); its ``report.html`` is not tracked (``python -m attention_conformance.reporting.page report.json.gz``
renders it), so that the tracked reports stay small (tests/tools/test_report_index.py: at most
`MAX_TRACKED_BYTES`). The commit column is the last commit that touched the file (for a file not committed yet or
changed since, HEAD: the tree the report was made from).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["INDEX", "MAX_TRACKED_BYTES", "REPORTS_DIR", "REPO_ROOT", "data_files", "listed_paths", "load_json",
           "main", "render_index"]

REPO_ROOT = Path(__file__).resolve().parents[1]
REPORTS_DIR = REPO_ROOT / "reports"
INDEX = REPORTS_DIR / "index.md"
#: the most bytes the tracked files under reports/ may hold together
MAX_TRACKED_BYTES = 5_000_000
_DATA_SUFFIXES = (".json", ".gz", ".md", ".png", ".svg")
_SKIP_DIRS = {"latest", "__pycache__"}
_REPORT_NAMES = ("report.json.gz", "report.json")


def data_files(root: Path = REPORTS_DIR) -> list[Path]:
    """Every report file under ``root`` (not the index itself, nothing under reports/latest/)."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and p.suffix in _DATA_SUFFIXES and p != root / INDEX.name and not (
                set(rel.parts[:-1]) & _SKIP_DIRS):
            out.append(p)
    return out


def load_json(path: Path) -> Any:
    """A JSON file, gzip-compressed when its name ends in .gz."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def _commit(path: Path) -> str:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    if git("status", "--porcelain", "--", str(path)):  # new or changed since its last commit: made from this tree
        return git("rev-parse", "--short", "HEAD") + " (HEAD)"
    return git("log", "-1", "--format=%h %cs", "--", str(path))


def _link(p: Path, root: Path) -> str:
    """The file's repository path in back-quotes, linked relative to index.md."""
    rel = p.relative_to(root).as_posix()
    return f"[`reports/{rel}`]({rel})"


def _siblings(p: Path) -> list[Path]:
    """The .md / .png views of a conformance report (``report.json.gz`` or ``report.json``; its .html is not kept)."""
    stem = p.parent / "report"
    return [stem.with_suffix(s) for s in (".md", ".png") if stem.with_suffix(s).is_file()]


def _env_line(env: dict) -> str:
    gpus = ", ".join(g.get("name", "?") for g in env.get("gpus", [])) or "no GPU"
    parts = [f"{env.get('cpu', '?')} ({env.get('cpu_count', '?')} cores)", gpus]
    if env.get("driver"):
        parts.append(f"driver {env['driver']}")
    parts.append(f"Python {env.get('python', '?')}, torch {env.get('torch', '?')}, numpy {env.get('numpy', '?')}")
    if env.get("cuda"):
        parts.append(f"CUDA {env['cuda']}, cuDNN {env.get('cudnn')}")
    return "; ".join(parts)


def _command_cell(rep: dict) -> str:
    """The run's command; for a report joined by ``merge`` from runs, each run's command, then the merge of them (the
    names of the intermediate JSON files are the merge's arguments, not part of what to reproduce)."""
    cmd = rep.get("command", [])
    runs = [m for m in rep.get("merged_from", []) if m.get("command")]
    if not runs or "shard" in runs[0]:
        return f"`{' '.join(cmd)}`"
    def one(c: list[str]) -> str:
        return "an earlier joined report" if "merge" in c else f"`{' '.join(c)}`"

    merge = [a for a in cmd if not a.endswith(".json")]
    return "; ".join(one(m["command"]) for m in runs) + f"; joined by `{' '.join(merge)}`"


def _conformance_row(path: Path, rep: dict, root: Path) -> list[str]:
    by = rep.get("summary", {}).get("by_outcome", {})
    counts = ", ".join(f"{k} {v}" for k, v in by.items() if v)
    adapters = " ".join(a["name"] for a in rep.get("adapters", []))
    link = _link(path, root)
    views = [f"[{s.suffix[1:]}]({s.relative_to(root).as_posix()})" for s in _siblings(path)]
    if views:
        link += " (" + ", ".join(views) + ")"
    return [link, str(rep.get("created", "?")), _commit(path),
            f"{rep.get('profile')} / {rep.get('device')}: {adapters}; {counts}; {rep.get('wall_seconds', 0):.0f} s",
            _env_line(rep.get("environment", {})), _command_cell(rep)]


def _md_items(md: Path) -> list[str]:
    """The top-level list items and plain lines of a markdown file, continuation lines joined."""
    if not md.is_file():
        return []
    items: list[str] = []
    for line in md.read_text().splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
        elif line.strip() and not line.startswith(("#", "|")):
            items.append(line.strip())
        else:
            items.append("")
    return [i for i in items if i]


def _md_command(md: Path) -> str:
    """The longest back-ticked command of the 'Reproduce' / 'Command' / 'Generated by' line of a table."""
    for item in _md_items(md):
        if re.match(r"(Reproduce|Command|Generated by)", item):
            cmds = [c for c in re.findall(r"`([^`]+)`", item) if "python" in c or "bash" in c]
            if cmds:
                return max(cmds, key=len)
    return ""


def _md_date(md: Path) -> str:
    for item in _md_items(md):
        m = re.search(r"(?:Date:? |created |, |; )(\d{4}-\d\d-\d\d( \d\d:\d\d(:\d\d)?( UTC)?)?)", item)
        if m:
            return m.group(1)
    return ""


def _bench_row(path: Path, root: Path) -> list[str]:
    """One benchmark: a JSON with its Markdown table, or a table alone (FA3 Table 3's accuracy tables)."""
    md = path.with_suffix(".md")
    data = load_json(path) if path.suffix == ".json" else {}
    data = data if isinstance(data, dict) else {}
    env = data.get("env") or data.get("machine_info") or {}
    if isinstance(env.get("attention_conformance"), dict):  # pytest-benchmark's machine_info: tests/conftest.py's entry
        ours = env["attention_conformance"]
        gpus = ", ".join(g.get("name", "?") for g in ours.get("gpus") or [] if isinstance(g, dict))
        env = {**ours, "gpu": gpus or None, "python_version": None if ours.get("python") else env.get("python_version")}
    date = env.get("date") or data.get("datetime") or _md_date(md) or "?"
    versions = ", ".join(f"{k} {env[k]}" for k in ("gpu", "driver", "cuda", "torch", "cudnn", "python",
                                                    "python_version") if env.get(k))
    if "gpus" in data:
        versions = versions or ", ".join(data["gpus"])
    method = data.get("method") if isinstance(data.get("method"), dict) else {}
    command = method.get("command") or data.get("command_multi") or _md_command(md)
    link = _link(path, root)
    if path.suffix == ".json" and md.is_file():
        link += f" ([table]({md.relative_to(root).as_posix()}))"
    return [link, str(date), _commit(path), versions or "-", f"`{command}`" if command else "-"]


def _svg_title(path: Path) -> str:
    """The first <title> of an SVG (what the chart shows), or its file name."""
    m = re.search(r"<title>([^<]+)</title>", path.read_text())
    return m.group(1) if m else path.name


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)]


def render_index(root: Path = REPORTS_DIR) -> str:
    """The text of index.md for the files under ``root``."""
    files = data_files(root)
    conf = [p for p in files if p.name in _REPORT_NAMES]
    bench_json = [p for p in files if p.suffix == ".json" and p.parent.name == "benchmarks"]
    bench_md = [p for p in files if p.suffix == ".md" and p.parent.name == "benchmarks"
                and not p.with_suffix(".json").is_file()]
    bench = sorted(bench_json + bench_md)
    lines = ["# Current reports", "",
             "Generated by `python tools/report_index.py` from the files below: one current conformance report per",
             "device and the current benchmark set. A run writes to `reports/latest/` (git-ignored); a file here is",
             "replaced by the run that supersedes it, and older runs are in git history.", "",
             "To make a conformance run current: render its page first",
             "(`python -m attention_conformance.reporting.page reports/latest/report.json "
             "--bench reports/benchmarks`),",
             "copy report.md (and a .png screenshot of the page) to `reports/<cpu|gpu>/`, store the JSON as",
             "`gzip -9 -n -c reports/latest/report.json > reports/<cpu|gpu>/report.json.gz`, then run",
             "`python tools/report_index.py` and `python tools/readme_figures.py`, and `git add -f` the files",
             "(report data is git-ignored so that no run lands in the tree by accident).", "",
             "## Conformance reports", ""]
    lines += _table(["report (png: a screenshot of the html)", "created", "commit",
                     "profile / device: adapters; outcomes; wall", "machine and versions", "command"],
                    [_conformance_row(p, load_json(p), root) for p in conf])
    lines += ["", "## Benchmarks", ""]
    lines += _table(["data", "date", "commit", "versions", "command"], [_bench_row(p, root) for p in bench])
    charts = [p for p in files if p.suffix == ".svg" and p.parent.name == "benchmarks"]
    if charts:
        lines += ["", "## Charts (drawn from the benchmark set above)", ""]
        lines += [f"- {_link(p, root)}: {_svg_title(p)}" for p in charts]
    listed = {*conf, *bench, *charts, *(s for p in conf for s in _siblings(p)),
              *(p.with_suffix(".md") for p in bench_json)}
    other = [p for p in files if p not in listed]
    if other:
        lines += ["", "## Other files", ""]
        lines += [f"- {_link(p, root)}" for p in other]
    return "\n".join(lines) + "\n"


def listed_paths(text: str) -> list[str]:
    """Repository paths an index.md lists (its back-ticked ``reports/...`` names)."""
    return sorted(p for p in set(re.findall(r"`(reports/[\w./-]+)`", text)) if not p.startswith("reports/latest"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/report_index.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when index.md lists other files than those here")
    args = ap.parse_args(argv)
    if args.check:
        want = listed_paths(render_index())
        have = listed_paths(INDEX.read_text()) if INDEX.is_file() else []
        if want != have:
            print(f"reports/index.md is out of date: run `python tools/report_index.py` "
                  f"(missing {sorted(set(want) - set(have))}, extra {sorted(set(have) - set(want))})", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(render_index())
    print(INDEX)
    return 0


if __name__ == "__main__":
    sys.exit(main())
