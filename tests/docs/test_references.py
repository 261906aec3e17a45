"""Every reference the code and docs make resolves: ``SEMANTICS.md §N`` names a heading of oracles/SEMANTICS.md,
a cited repository path exists, and nothing cites a file outside the repository as if it were in it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEMANTICS = ROOT / "oracles" / "SEMANTICS.md"
TEXT_SUFFIXES = {".py", ".md", ".cu", ".cuh", ".h", ".toml", ".ini", ".sh", ".txt", ".cfg"}
SKIP_PARTS = {".git", ".venv", ".tox", "build", "__pycache__", ".hypothesis", ".ruff_cache", "latest"}

#: ``SEMANTICS.md §7``, ``SEMANTICS §7, §13``, ``SEMANTICS.md's §10-§11``, ``SEMANTICS.md §4/§5/§7``
CITATION = re.compile(r"SEMANTICS(?:\.md)?[^§\n]{0,12}?((?:§ ?\d+)(?:(?:\s*(?:,|/|-|–|and)\s*)§ ?\d+)*)")
#: a repository path: a top-level folder of this repository, then a file or folder name
REPO_PATH = re.compile(r"(?<![\w/.-])((?:oracles|kernels|conformance|property_tests|reports|tests|\.ci)/[\w./-]*\w)")
#: tests that name paths which must not exist (ignored-output and resolution checks)
NONEXISTENT_BY_DESIGN = {"tests/docs/test_references.py", "tests/tools/test_report_index.py"}
#: research notes and team files that are not part of the repository must not be cited as paths
EXTERNAL = re.compile(r"ANCHORS\.md|PAGED_SPEC\.md|/work/(?:team|shared|helpers|main)\b")


def _files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
        paths = [ROOT / p for p in out.stdout.splitlines()]
    except (OSError, subprocess.SubprocessError):
        paths = [p for p in ROOT.rglob("*") if p.is_file()]
    return [p for p in paths if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name == "run")
            and not (set(p.relative_to(ROOT).parts) & SKIP_PARTS)]


def _headings() -> set[int]:
    return {int(m.group(1)) for m in re.finditer(r"^## (\d+)\. ", SEMANTICS.read_text(), re.M)}


def _cited_sections(text: str) -> list[tuple[int, str]]:
    """(line, citation) for each section number a ``SEMANTICS.md §...`` citation names; ranges expanded."""
    out = []
    for m in CITATION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        nums = [int(n) for n in re.findall(r"\d+", m.group(1))]
        spans = re.findall(r"§ ?(\d+)\s*[-–]\s*§ ?(\d+)", m.group(1))
        for a, b in spans:
            nums += list(range(int(a), int(b) + 1))
        out += [(line, f"§{n}") for n in sorted(set(nums))]
    return out


def _exists(cited: str) -> bool:
    """A cited path exists, allowing ``path.py::test`` and ``module/file.attr`` (a dotted name after a file)."""
    cited = cited.split("::")[0].rstrip(".")
    candidate = cited
    while candidate:
        if (ROOT / candidate).exists() or (ROOT / (candidate + ".py")).exists():
            return True
        if "." not in candidate.rsplit("/", 1)[-1]:
            return False
        candidate = candidate.rsplit(".", 1)[0]
    return False


def test_semantics_has_numbered_sections():
    heads = _headings()
    assert heads and heads == set(range(1, max(heads) + 1)), f"SEMANTICS.md sections are not 1..N: {sorted(heads)}"


def test_every_semantics_citation_names_an_existing_section():
    heads = _headings()
    bad = []
    for p in _files():
        for line, sec in _cited_sections(p.read_text(errors="replace")):
            if int(sec[1:]) not in heads:
                bad.append(f"{p.relative_to(ROOT)}:{line}: {sec}")
    assert not bad, f"SEMANTICS.md has sections {sorted(heads)}; these citations name others: {bad}"


def test_citation_parser_reads_lists_and_ranges():
    got = _cited_sections("see SEMANTICS.md §3-§5, §12 and SEMANTICS §9/§10")
    assert [s for _, s in got] == ["§3", "§4", "§5", "§12", "§9", "§10"]


def test_cited_repository_paths_exist():
    missing = []
    for p in _files():
        if p.relative_to(ROOT).as_posix() in NONEXISTENT_BY_DESIGN:
            continue
        text = p.read_text(errors="replace")
        for m in REPO_PATH.finditer(text):
            cited = m.group(1)
            if cited.startswith("reports/latest") or "DIR" in cited or "*" in cited:
                continue  # run outputs and placeholders, not files of the repository
            if not _exists(cited):
                missing.append(f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {cited}")
    assert not missing, f"cited paths that do not exist: {missing}"


def test_no_citation_of_files_outside_the_repository():
    bad = []
    for p in _files():
        if p == Path(__file__).resolve() or p.name == "report.md":
            continue  # report.md: a run's output (tracebacks name the paths of the machine it ran on)
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if EXTERNAL.search(line):
                bad.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not bad, f"citations of files that are not in the repository: {bad}"


@pytest.mark.parametrize("text, ok", [("kernels/emulate.py", True), ("kernels/emulate.round_to", True),
                                      ("tests/kernels/test_emulate.py::test_x", True), ("kernels/nope.py", False)])
def test_path_resolution(text, ok):
    assert _exists(text) is ok
