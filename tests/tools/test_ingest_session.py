"""tools/ingest_session.py: a session's results made current (junit counts, the joined GPU report, the benchmarks)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import ingest_session as ingest  # tools/ (conftest.py puts it on the path)

_ROOT = Path(__file__).resolve().parents[2]

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="271.5">
<testcase classname="a" name="ok"/>
<testcase classname="a" name="bad"><failure message="x"/></testcase>
<testcase classname="a" name="broken"><error message="x"/></testcase>
<testcase classname="a" name="skip"><skipped type="pytest.skip" message="cpu"/></testcase>
<testcase classname="a" name="known"><skipped type="pytest.xfail" message="KNOWN"/></testcase>
</testsuite></testsuites>"""


def test_junit_counts_read_plain_and_gzip(tmp_path):
    plain = tmp_path / "j.xml"
    plain.write_text(JUNIT)
    packed = tmp_path / "j.xml.gz"
    packed.write_bytes(gzip.compress(JUNIT.encode()))
    for path in (plain, packed):
        c = ingest.junit_counts(path)
        assert (c["passed"], c["failed"], c["error"], c["skipped"], c["xfailed"], c["seconds"]) == (1, 1, 1, 1, 1, 272)


# pytest-benchmark JSON of tox -e bench: a GPU-timed benchmark; the CPU oracle's (what a machine without a GPU runs)
GPU_BENCH = {"benchmarks": [{"name": "test_fwd_8k_d128[full-ours]", "extra_info": {"gpu_ms": 1.5, "host_us": 7.0}}]}
CPU_ONLY_BENCH = {"benchmarks": [{"name": "test_bench_oracle_forward_vs_gemms", "extra_info": {"ratio": 3.1}}]}


def test_each_benchmark_replaces_its_current_file(tmp_path):
    session = tmp_path / "session"
    for b in ingest.BENCHES:
        if b.table:  # its .md is made from the JSON, not brought back
            (session / b.folder).mkdir(parents=True)
            (session / b.folder / f"{b.stem}.json").write_text(json.dumps(GPU_BENCH))
            continue
        (session / b.folder).mkdir(parents=True)
        (session / b.folder / f"{b.stem}.md").write_text("table")
        (session / b.folder / f"{b.stem}.json").write_text("{}")
    (session / "fa3" / "fa3_curves.svg").write_text("<svg/>")  # not part of the benchmark set
    pairs = ingest.bench_copies(session, root=tmp_path)
    assert len(pairs) == 2 * len(ingest.BENCHES) - sum(b.table for b in ingest.BENCHES)
    names = sorted(dst.name for _, dst in pairs)
    assert "fa3_side_by_side.md" in names and "fa3_bwd_side_by_side.json" in names and "cuda_fwd.md" in names
    assert all(dst.parent == tmp_path / "reports" / "benchmarks" for _, dst in pairs)
    # the current benchmark set names every destination (no new run dump beside it)
    current = {p.stem for p in (_ROOT / "reports" / "benchmarks").glob("*.json")}
    assert {b.current for b in ingest.BENCHES} - current <= {"fa3_bwd_side_by_side"}


def test_the_joined_report_replaces_reports_gpu_and_its_satellites(tmp_path, monkeypatch):
    """The session's reports joined into reports/gpu (re-judged, page rendered, data gzip'd), the folders of the
    reports it supersedes removed; here with the committed CPU report standing in for a session's CLI run."""
    session = tmp_path / "session"
    (session / "cli_all").mkdir(parents=True)
    (session / "cli_all" / "report.json.gz").write_bytes((_ROOT / "reports" / "cpu" / "report.json.gz").read_bytes())
    gpu = tmp_path / "reports" / "gpu"
    (gpu / "fa4_spellings").mkdir(parents=True)
    (gpu / "fa4_spellings" / "report.md").write_text("old")
    (tmp_path / "reports" / "benchmarks").mkdir()
    shots = []
    monkeypatch.setattr(ingest, "screenshot", lambda html, png, dry: shots.append((html, png)))
    reports = ingest.conformance_reports(session)
    assert reports == [session / "cli_all" / "report.json.gz"]
    ingest.join_gpu_report(reports, "joined for a test", tmp_path, dry=False)
    assert not (gpu / "fa4_spellings").exists()
    assert {p.name for p in gpu.iterdir()} == {"report.md", "report.json.gz"}  # and the screenshot, faked here
    data = json.loads(gzip.decompress((gpu / "report.json.gz").read_bytes()))
    assert data["results"] and "joined for a test" in (gpu / "report.md").read_text()
    assert [png for _, png in shots] == [gpu / "report.png"] and shots[0][0].name == "report.html"


def test_session_collects_one_file_unpacked_beside_itself(tmp_path):
    """session-collect brings the session back as one session.tar.gz (a device call returns at most 8 files)."""
    import tarfile

    src = tmp_path / "src" / "session"
    (src / "cli_all").mkdir(parents=True)
    (src / "steps").write_text("cli: exit 0 in 300 s\n")
    (src / "cli_all" / "report.json.gz").write_bytes(b"x")
    packed = tmp_path / "out" / "session.tar.gz"
    packed.parent.mkdir()
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(src, arcname="session")
    got = ingest.unpacked(packed)
    assert got == packed.parent / "session" and (got / "steps").read_text().startswith("cli: exit 0")
    assert ingest.conformance_reports(got) == [got / "cli_all" / "report.json.gz"]
    assert ingest.unpacked(got) == got  # a folder is taken as it is


def test_onto_current_joins_the_session_on_top_of_the_current_gpu_report(tmp_path, capsys):
    """A session without FlashInfer or xformers: ``--onto-current`` puts the current GPU report first in the join
    (merge keeps the results of an adapter a later run could not load), so their results stay; without the flag the
    session's reports alone make the report."""
    session = tmp_path / "session"
    (session / "cli_all").mkdir(parents=True)
    (session / "cli_all" / "report.json.gz").write_bytes((_ROOT / "reports" / "cpu" / "report.json.gz").read_bytes())
    current = "reports/gpu/report.json.gz"  # relative to the checkout: the report's command names no machine path
    for flags, first in ((["--onto-current"], current), ([], str(session / "cli_all" / "report.json.gz"))):
        assert ingest.main([*flags, "--dry-run", str(session)]) == 0
        merge = next(line for line in capsys.readouterr().out.splitlines() if " merge " in line)
        assert merge.split(" merge ", 1)[1].startswith(first + " ")


def test_a_bench_run_without_gpu_figures_keeps_the_current_table(tmp_path, capsys, monkeypatch):
    """tox -e bench where every GPU benchmark skipped (no GPU seen, a library missing) brings back the CPU oracle's
    benchmark alone: neither its JSON nor a table made from it replaces the current pytest_bench files."""
    bench = next(b for b in ingest.BENCHES if b.table)
    session = tmp_path / "session"
    (session / bench.folder).mkdir(parents=True)
    (session / bench.folder / f"{bench.stem}.json").write_text(json.dumps(CPU_ONLY_BENCH))
    assert ingest.without_gpu_figures(bench, session) and ingest.bench_copies(session, root=tmp_path) == []
    (session / bench.folder / f"{bench.stem}.json").write_text(json.dumps(GPU_BENCH))
    assert not ingest.without_gpu_figures(bench, session)
    assert [dst.name for _, dst in ingest.bench_copies(session, root=tmp_path)] == [f"{bench.current}.json"]
    (session / bench.folder / f"{bench.stem}.json").write_text(json.dumps(CPU_ONLY_BENCH))
    monkeypatch.setattr(ingest, "ROOT", tmp_path)
    monkeypatch.setattr(ingest, "run", lambda cmd, dry: 0)  # the chart, index and README are not this test's
    assert ingest.main([str(session)]) == 0
    assert "has no GPU-timed benchmark" in capsys.readouterr().out
    assert not (tmp_path / "reports" / "benchmarks").exists()
