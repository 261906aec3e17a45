"""reports/: one current report per device and one benchmark set, all listed in reports/index.md; every run
writes outside the tracked files by default (reports/latest/, git-ignored)."""

from __future__ import annotations

import configparser
import shutil
import subprocess

import pytest

from attention_conformance.reports import index

ROOT = index.REPO_ROOT


def _git(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_index_lists_the_current_files():
    assert index.listed_paths(index.INDEX.read_text()) == index.listed_paths(index.render_index()), (
        "reports/index.md is out of date: run `python -m attention_conformance.reports.index`")


def test_every_tracked_report_file_is_in_the_index():
    tracked = [ROOT / p for p in _git("ls-files", "reports").stdout.splitlines()]
    text = index.INDEX.read_text()
    data = [p for p in tracked if p.suffix in (".json", ".md", ".html", ".png") and p != index.INDEX]
    unlisted = [str(p.relative_to(ROOT)) for p in data
                if f"({p.relative_to(index.REPORTS_DIR).as_posix()})" not in text]
    assert not unlisted, f"tracked report files that reports/index.md does not link: {unlisted}"


def test_one_current_conformance_report_per_device():
    """One CPU report; on the H200, until one run with every GPU adapter replaces them, one report per adapter set
    (SDPA backends + flex, our CUDA kernels, flash-attn-4, the sink cases of this session's CUDA kernels): no two
    current reports of a device are runs of the same adapters (the stale duplicates this rule removed)."""
    import json

    devices: dict[str, list] = {}
    for p in index.data_files():
        if p.name == "report.json":
            devices.setdefault(p.relative_to(index.REPORTS_DIR).parts[0], []).append(p)
    assert set(devices) <= {"cpu", "gpu"} and "cpu" in devices, devices
    assert len(devices["cpu"]) == 1, devices
    sets = {}
    for p in devices.get("gpu", []):
        names = frozenset(a["name"] for a in json.loads(p.read_text())["adapters"])
        assert names not in sets, f"{p} and {sets[names]} are two current reports of the same adapters {sorted(names)}"
        sets[names] = p


@pytest.mark.parametrize("path", ["reports/latest/report.json", "reports/latest/pytest_bench.json",
                                  "reports/newrun/report.json", "reports/benchmarks/another.json",
                                  "reports/gpu/run2/report.html", "reports/benchmarks/out/x.md"])
def test_run_outputs_are_ignored_by_git(path):
    assert _git("check-ignore", "-q", path).returncode == 0, f"{path} would be picked up by `git add`"


def test_default_outputs_are_under_reports_latest():
    from attention_conformance.cli import build_parser

    assert build_parser().parse_args(["run"]).report_dir.replace("\\", "/").startswith("reports/latest")
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    bench = tox["testenv:bench"]["commands"]
    assert "--benchmark-json=reports/latest/" in bench, bench
    src = (index.REPORTS_DIR / "benchmarks" / "cuda_fwd_check_bench.py").read_text()
    assert '"reports/latest/benchmarks"' in src
