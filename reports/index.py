"""``reports/index.md``: the current reports (one per device) and benchmark set, with date, commit, versions, command.

    python -m attention_conformance.reports.index            # rewrite reports/index.md from the files under reports/
    python -m attention_conformance.reports.index --check    # exit 1 when index.md does not list exactly the current
    files

Run outputs are not source: a run writes to ``reports/latest/`` (git-ignored); a report becomes current
by being copied here and listed by this index (older runs leave the tree; git history keeps them). The
report data files are git-ignored (.gitignore), so a current one is added with ``git add -f``.
The commit column is the last commit that touched the file (for a file not committed yet, HEAD: the
tree the report was made from).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["INDEX", "REPORTS_DIR", "data_files", "listed_paths", "render_index", "main"]

REPORTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = REPORTS_DIR.parent
INDEX = REPORTS_DIR / "index.md"
_DATA_SUFFIXES = (".json", ".md", ".html", ".png")
_SKIP_DIRS = {"latest", "__pycache__"}


def data_files(root: Path = REPORTS_DIR) -> list[Path]:
    """Every report file under reports/ (not code, not the index itself, not reports/latest/)."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and p.suffix in _DATA_SUFFIXES and p != root / INDEX.name and not (
                set(rel.parts[:-1]) & _SKIP_DIRS):
            out.append(p)
    return out


def _commit(path: Path) -> str:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return git("log", "-1", "--format=%h %cs", "--", str(path)) or (git("rev-parse", "--short", "HEAD") + " (HEAD)")


def _rel(p: Path) -> str:
    return p.relative_to(REPO_ROOT).as_posix()


def _env_line(env: dict) -> str:
    gpus = ", ".join(g.get("name", "?") for g in env.get("gpus", [])) or "no GPU"
    parts = [f"{env.get('cpu', '?')} ({env.get('cpu_count', '?')} cores)", gpus]
    if env.get("driver"):
        parts.append(f"driver {env['driver']}")
    parts.append(f"Python {env.get('python', '?')}, torch {env.get('torch', '?')}, numpy {env.get('numpy', '?')}")
    if env.get("cuda"):
        parts.append(f"CUDA {env['cuda']}, cuDNN {env.get('cudnn')}")
    return "; ".join(parts)


def _conformance_row(path: Path, rep: dict) -> list[str]:
    by = rep.get("summary", {}).get("by_outcome", {})
    counts = ", ".join(f"{k} {v}" for k, v in by.items() if v)
    adapters = " ".join(a["name"] for a in rep.get("adapters", []))
    link = f"[`{_rel(path)}`]({path.relative_to(REPORTS_DIR).as_posix()})"
    siblings = [f"[{s[1:]}]({path.with_suffix(s).relative_to(REPORTS_DIR).as_posix()})"
                for s in (".md", ".html", ".png") if path.with_suffix(s).is_file()]
    if siblings:
        link += " (" + ", ".join(siblings) + ")"
    return [link, str(rep.get("created", "?")),
            _commit(path), f"{rep.get('profile')} / {rep.get('device')}: {adapters}; {counts}; "
            f"{rep.get('wall_seconds', 0):.0f} s", _env_line(rep.get("environment", {})), _command_cell(rep)]


def _command_cell(rep: dict) -> str:
    """The run's command; for a report joined by ``merge`` from runs, each run's command (and the merge)."""
    cmd = f"`{' '.join(rep.get('command', []))}`"
    runs = [m for m in rep.get("merged_from", []) if m.get("command")]
    if not runs or "shard" in runs[0]:
        return cmd
    return "; ".join(f"{m['path']}: `{' '.join(m['command'])}`" for m in runs) + f"; then {cmd}"


def _md_items(md: Path) -> list[str]:
    """The top-level list items of a markdown file, continuation lines joined."""
    if not md.is_file():
        return []
    items: list[str] = []
    for line in md.read_text().splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
        elif not line.strip():
            items.append("")
    return [i for i in items if i]


def _md_command(md: Path) -> str:
    """The longest back-ticked command of the 'Reproduce' / 'Command' item of the report's markdown."""
    for item in _md_items(md):
        if re.match(r"(Reproduce|Command)", item):
            cmds = [c for c in re.findall(r"`([^`]+)`", item) if "python" in c or "bash" in c]
            if cmds:
                return max(cmds, key=len)
    return ""


def _md_date(md: Path) -> str:
    for item in _md_items(md):
        m = re.match(r"Date:? (\d{4}-\d\d-\d\d( \d\d:\d\d( UTC)?)?)", item)
        if m:
            return m.group(1)
    return ""


def _bench_row(path: Path, data: Any) -> list[str]:
    data = data if isinstance(data, dict) else {}
    env = data.get("env") or data.get("machine_info") or {}
    date = env.get("date") or data.get("datetime") or _md_date(path.with_suffix(".md")) or "?"
    versions = ", ".join(f"{k} {env[k]}" for k in ("gpu", "driver", "cuda", "torch", "cudnn", "python",
                                                    "python_version") if env.get(k))
    if "gpus" in data:
        versions = versions or ", ".join(data["gpus"])
    method = data.get("method") if isinstance(data.get("method"), dict) else {}
    command = method.get("command") or data.get("command_multi") or _md_command(path.with_suffix(".md"))
    md = path.with_suffix(".md")
    link = f"[`{_rel(path)}`]({path.relative_to(REPORTS_DIR).as_posix()})"
    if md.is_file():
        link += f" ([table]({md.relative_to(REPORTS_DIR).as_posix()}))"
    return [link, str(date), _commit(path), versions or "-", f"`{command}`" if command else "-"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)]


def render_index(root: Path = REPORTS_DIR) -> str:
    """The text of index.md for the files under ``root``."""
    files = data_files(root)
    conf = [p for p in files if p.name == "report.json"]
    bench = [p for p in files if p.suffix == ".json" and p.parent.name == "benchmarks"]
    lines = ["# Current reports", "",
             "Generated by `python -m attention_conformance.reports.index` from the files below; one current",
             "report per device and one benchmark set. A run writes to `reports/latest/` (git-ignored); older runs",
             "are in git history.", "",
             "To make a run current: copy its report.json/.md to `reports/<cpu|gpu>/` (replacing the old one), then",
             "`python -m attention_conformance.report_html reports/<device>/report.json --bench reports/benchmarks`,",
             "`python -m attention_conformance.reports.index`,",
             "`python -m attention_conformance.reports.readme_figures`,",
             "and `git add -f` the files (report data is git-ignored so that no run lands in the tree by accident).",
             "",
             "## Conformance reports", ""]
    lines += _table(["report (png: a screenshot of the html)", "created", "commit",
                     "profile / device: adapters; outcomes; wall", "machine and versions", "command"],
                    [_conformance_row(p, json.loads(p.read_text())) for p in conf])
    lines += ["", "## Benchmarks", ""]
    lines += _table(["data", "date", "commit", "versions", "command"],
                    [_bench_row(p, json.loads(p.read_text())) for p in bench])
    listed = {*conf, *bench, *(p.with_suffix(s) for p in conf for s in (".md", ".html", ".png")),
              *(p.with_suffix(".md") for p in bench)}
    other = [p for p in files if p not in listed]
    if other:
        lines += ["", "## Other files", ""]
        lines += [f"- [`{_rel(p)}`]({p.relative_to(root).as_posix()})" for p in other]
    return "\n".join(lines) + "\n"


def listed_paths(text: str) -> list[str]:
    """Repository paths an index.md lists (its back-ticked ``reports/...`` names)."""
    return sorted(p for p in set(re.findall(r"`(reports/[\w./-]+)`", text)) if not p.startswith("reports/latest"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.reports.index",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when index.md lists other files than those here")
    args = ap.parse_args(argv)
    if args.check:
        want = listed_paths(render_index())
        have = listed_paths(INDEX.read_text()) if INDEX.is_file() else []
        if want != have:
            print(f"reports/index.md is out of date: run `python -m attention_conformance.reports.index` "
                  f"(missing {sorted(set(want) - set(have))}, extra {sorted(set(have) - set(want))})", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(render_index())
    print(INDEX)
    return 0


if __name__ == "__main__":
    sys.exit(main())
