"""reports/: one current report per device and one benchmark set, all listed in reports/index.md (written by
tools/report_index.py), no run dump and no code beside them, at most 5 MB tracked; every run writes outside the tracked
files by default (reports/latest/, git-ignored)."""

from __future__ import annotations

import configparser
import shutil
import subprocess

import pytest
import report_index as index

ROOT = index.REPO_ROOT


def _git(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_index_lists_the_current_files():
    assert index.listed_paths(index.INDEX.read_text()) == index.listed_paths(index.render_index()), (
        "reports/index.md is out of date: run `python tools/report_index.py`")


def test_every_tracked_report_file_is_in_the_index():
    tracked = [ROOT / p for p in _git("ls-files", "reports").stdout.splitlines()]
    text = index.INDEX.read_text()
    data = [p for p in tracked if p.suffix in (".json", ".gz", ".md", ".html", ".png", ".svg") and p != index.INDEX]
    unlisted = [str(p.relative_to(ROOT)) for p in data
                if f"({p.relative_to(index.REPORTS_DIR).as_posix()})" not in text]
    assert not unlisted, f"tracked report files that reports/index.md does not link: {unlisted}"


def test_one_current_conformance_report_per_device():
    """One CPU report; on the H200 one report per adapter set (the joined gpu profile, and a run of other adapters
    such as flash-attn-4's entry points): no two current reports of a device are runs of the same adapters."""
    devices: dict[str, list] = {}
    for p in index.data_files():
        if p.name in ("report.json", "report.json.gz"):
            devices.setdefault(p.relative_to(index.REPORTS_DIR).parts[0], []).append(p)
    assert set(devices) <= {"cpu", "gpu"} and "cpu" in devices, devices
    assert len(devices["cpu"]) == 1, devices
    sets = {}
    for p in devices.get("gpu", []):
        names = frozenset(a["name"] for a in index.load_json(p)["adapters"])
        assert names not in sets, f"{p} and {sets[names]} are two current reports of the same adapters {sorted(names)}"
        sets[names] = p


@pytest.mark.parametrize("path", ["reports/latest/report.json", "reports/latest/pytest_bench.json",
                                  "reports/newrun/report.json", "reports/newrun/report.json.gz",
                                  "reports/benchmarks/another.json",
                                  "reports/gpu/rerun/report.html", "reports/benchmarks/out/x.md"])
def test_run_outputs_are_ignored_by_git(path):
    assert _git("check-ignore", "-q", path).returncode == 0, f"{path} would be picked up by `git add`"


def test_default_outputs_are_under_reports_latest():
    from attention_conformance.cli import build_parser

    assert build_parser().parse_args(["run"]).report_dir.replace("\\", "/").startswith("reports/latest")
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    bench = tox["testenv:bench"]["commands"]
    assert "--benchmark-json=reports/latest/" in bench, bench
    src = (index.REPO_ROOT / "tools" / "cuda_fwd_check_bench.py").read_text()
    assert '"reports/latest/benchmarks"' in src


def test_tracked_reports_fit_the_size_limit():
    """Reports, not run dumps: the tracked files under reports/ hold at most 5 MB (a conformance report's JSON is
    kept gzip-compressed, report.json.gz)."""
    tracked = [ROOT / p for p in _git("ls-files", "reports").stdout.splitlines()]
    size = sum(p.stat().st_size for p in tracked if p.is_file())
    assert size <= index.MAX_TRACKED_BYTES, f"tracked reports/ holds {size} bytes > {index.MAX_TRACKED_BYTES}"


def test_reports_hold_no_code():
    """Code lives in the package (conformance/, kernels/, ...) or in tools/ (lab scripts), never beside the data."""
    tracked = _git("ls-files", "reports").stdout.splitlines()
    code = [p for p in tracked if p.endswith((".py", ".sh", ".cu", ".cuh", ".h"))]
    assert not code, f"code under reports/: {code}"


def test_index_rows_read_gzip_reports_and_tables_without_json(tmp_path):
    """render_index on a made-up reports folder: a gzip report with its views, a benchmark JSON with its table, an
    accuracy table alone (its date and command from its text), and anything else under "Other files"."""
    import gzip
    import json

    rep = dict(created="2026-01-02T03:04:05+00:00", profile="ci", device="cpu", wall_seconds=5.0,
               command=["python", "-m", "attention_conformance", "run"], adapters=[{"name": "reference-fa2"}],
               summary={"by_outcome": {"PASS": 3}}, environment={"cpu": "x", "cpu_count": 2})
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "report.json.gz").write_bytes(gzip.compress(json.dumps(rep).encode()))
    (tmp_path / "cpu" / "report.md").write_text("# r\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "b.json").write_text(json.dumps({"env": {"date": "2026-01-01", "gpu": "G"},
                                                                 "command": "python tools/b.py"}))
    (tmp_path / "benchmarks" / "b.md").write_text("- Command: `python tools/b.py --out DIR`\n")
    (tmp_path / "benchmarks" / "t.md").write_text("# T\n\nGenerated by "
                                                  "`python -m attention_conformance.reporting.fp8_accuracy`"
                                                  " (kernels/reference); Date 2026-01-03 10:00 UTC.\n")
    (tmp_path / "notes.md").write_text("x\n")
    text = index.render_index(tmp_path)
    assert "(cpu/report.json.gz) ([md](cpu/report.md))" in text and "PASS 3" in text and "reference-fa2" in text
    assert "(benchmarks/b.json) ([table](benchmarks/b.md)) | 2026-01-01 |" in text
    assert "`python tools/b.py --out DIR`" in text
    assert "(benchmarks/t.md) | 2026-01-03 10:00 UTC |" in text
    assert "`python -m attention_conformance.reporting.fp8_accuracy`" in text
    assert text.split("## Other files")[1].count("- [") == 1 and "(notes.md)" in text


def test_a_pytest_benchmark_json_names_its_gpu_and_versions(tmp_path):
    """`tox -e bench`'s JSON keeps the environment in machine_info's attention_conformance entry (tests/conftest.py:
    running.environment, a dict per GPU): the index row names the GPU, driver and torch from there."""
    import json

    (tmp_path / "benchmarks").mkdir()
    info = dict(python_version="3.12.3", attention_conformance=dict(
        python="3.12.3", torch="2.11.0+cu130", driver="580.159.04",
        gpus=[dict(index=0, name="NVIDIA H100 80GB HBM3", capability="9.0", memory_gib=79.2)]))
    (tmp_path / "benchmarks" / "pytest_bench.json").write_text(json.dumps(
        dict(machine_info=info, datetime="2026-12-05T15:00:14+00:00", benchmarks=[])))
    row = next(line for line in index.render_index(tmp_path).splitlines() if "pytest_bench.json" in line)
    assert "gpu NVIDIA H100 80GB HBM3, driver 580.159.04" in row and "torch 2.11.0+cu130" in row, row
    assert row.count("3.12.3") == 1, row
