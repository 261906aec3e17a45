"""Make an H200 session's results the current ones: ``python tools/ingest_session.py SESSION_DIR``.

SESSION_DIR is what ``tools/device/runner_h200.sh session-collect`` brought back (``$OUT/session.tar.gz``, one file
since a device call returns at most 8, unpacked beside itself into ``session/``; or that folder: ``steps``, the step
logs, ``gpu_junit.xml.gz``, ``cli_all/``, ``cli_variants/``, ``cli_flashinfer/``, ``cli_xformers/``, ``fa3/``,
``fp8/``, ``bwd/``, ``fwd/``).
In order:

1. prints the pipeline's steps (exit status and seconds of each) and tox -e gpu's counts from its junit XML;
2. compares the plugin's verdicts with the CLI's (``tools/compare_front_ends.py``) where both are there;
3. joins the conformance reports the session holds into ``reports/gpu/`` (``python -m attention_conformance merge
   --reexpect``: re-judged by the shipped expectations; ``--onto-current``: on top of the current GPU report, so that
   a session without FlashInfer or xformers keeps their results), renders its page beside the benchmark set and a PNG
   screenshot of it (headless chromium, where installed), and removes the folders of reports it supersedes
   (``reports/gpu/*/``);
4. copies each benchmark's table and data over the current file it replaces in ``reports/benchmarks/`` (`BENCHES`;
   ``tox -e bench``'s JSON with its table made by ``tools/bench_table.py``, a column against the JSON it replaces,
   unless no benchmark in it was GPU-timed);
5. redraws the bars' picture (``tools/ratio_chart.py``), regenerates ``reports/index.md`` and the README's figure
   blocks (``tools/report_index.py``, ``tools/readme_figures.py``).

Nothing is committed: review ``git status`` / ``git diff`` and ``git add -f`` the report files (report data is
git-ignored so that no run lands in the tree by accident). ``--dry-run`` prints what would be written.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import bench_table  # tools/, beside this script (a script's folder is first on sys.path)

ROOT = Path(__file__).resolve().parent.parent
#: the conformance reports a session may hold, joined in this order into the one GPU report
CONFORMANCE = ("cli_all", "cli_variants", "cli_flashinfer", "cli_xformers")


@dataclass(frozen=True)
class Bench:
    """A benchmark's output in the session (folder, file stem) and the current file it replaces; ``table``: its .md is
    made here from the JSON (pytest-benchmark's, by tools/bench_table.py) instead of coming with it."""

    folder: str
    stem: str
    current: str
    table: bool = False


#: every benchmark of the session pipeline and the current file of reports/benchmarks/ it supersedes
BENCHES = (
    Bench("bench", "pytest_bench", "pytest_bench", table=True),
    Bench("fa3", "fa3", "fa3_side_by_side"),
    Bench("fp8", "fa3_fp8", "fa3_fp8_side_by_side"),
    Bench("bwd", "fa3_bwd", "fa3_bwd_side_by_side"),
    Bench("fwd", "cuda_fwd", "cuda_fwd"),
)


def junit_counts(path: Path) -> Counter:
    """passed / failed / error / skipped / xfailed counts of a (gzip-compressed or plain) junit XML."""
    raw = path.read_bytes()
    root = ET.fromstring(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    counts: Counter = Counter()
    for tc in root.iter("testcase"):
        kinds = [child.tag for child in tc if child.tag in ("failure", "error", "skipped")]
        if not kinds:
            counts["passed"] += 1
        elif "skipped" in kinds and any(c.get("type") == "pytest.xfail" for c in tc if c.tag == "skipped"):
            counts["xfailed"] += 1
        else:
            counts[{"failure": "failed", "error": "error", "skipped": "skipped"}[kinds[0]]] += 1
    for suite in root.iter("testsuite"):
        if suite.get("time"):
            counts["seconds"] += round(float(suite.get("time", 0)))
    return counts


def without_gpu_figures(b: Bench, session: Path) -> bool:
    """Whether ``b`` is tox -e bench's pytest-benchmark JSON with no GPU-timed benchmark (``extra_info`` ``gpu_ms``):
    a run whose GPU benchmarks all skipped (no GPU seen, a library missing) times only the CPU oracle, and must not
    replace the current table with an empty one."""
    src = session / b.folder / f"{b.stem}.json"
    if not (b.table and src.is_file()):
        return False
    data = json.loads(src.read_text())
    return not any("gpu_ms" in x.get("extra_info", {}) for x in data.get("benchmarks", []))


def bench_copies(session: Path, root: Path = ROOT) -> list[tuple[Path, Path]]:
    """(source, destination) of every benchmark file the session brought back: its .md and .json over the current
    (not a pytest-benchmark JSON `without_gpu_figures`)."""
    pairs = []
    for b in BENCHES:
        if without_gpu_figures(b, session):
            continue
        for ext in (".md", ".json"):
            src = session / b.folder / f"{b.stem}{ext}"
            if src.is_file():
                pairs.append((src, root / "reports" / "benchmarks" / f"{b.current}{ext}"))
    return pairs


def conformance_reports(session: Path) -> list[Path]:
    found = []
    for name in CONFORMANCE:
        for candidate in (session / name / "report.json.gz", session / name / "report.json"):
            if candidate.is_file():
                found.append(candidate)
                break
    return found


def run(cmd: list[str], dry: bool) -> int:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    return 0 if dry else subprocess.call([str(c) for c in cmd], cwd=ROOT)


def screenshot(html: Path, png: Path, dry: bool) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print(f"no chromium: {png} not made (apt install chromium)")
        return
    run([browser, "--headless", "--no-sandbox", "--hide-scrollbars", "--window-size=1400,2200",
         f"--screenshot={png}", html.as_uri()], dry)


def join_gpu_report(reports: list[Path], note: str | None, root: Path, dry: bool) -> None:
    """reports/gpu/ := the join of ``reports``, re-judged: its report.md, gzip'd data and a screenshot of its page
    (the page itself is not kept: `python -m attention_conformance.reporting.page` renders it from the data)."""
    gpu = root / "reports" / "gpu"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cmd = [sys.executable, "-m", "attention_conformance", "merge", *reports, "--reexpect", "--report-dir", out]
        if note:
            cmd += ["--note", note]
        if run(cmd, dry):
            raise SystemExit("merge failed: reports/gpu left as it was")
        run([sys.executable, "-m", "attention_conformance.reporting.page", out / "report.json", "--bench",
             root / "reports" / "benchmarks"], dry)
        if dry:
            print(f"would replace {gpu}/report.* and remove {sorted(p.name for p in gpu.glob('*/'))}")
            return
        for sub in [p for p in gpu.iterdir() if p.is_dir()]:
            shutil.rmtree(sub)  # the satellite reports (e.g. fa4_spellings/): the joined report supersedes them
        shutil.copyfile(out / "report.md", gpu / "report.md")
        (gpu / "report.html").unlink(missing_ok=True)  # not kept: the JSON renders it (tools/report_index.py)
        with open(out / "report.json", "rb") as src, gzip.GzipFile(gpu / "report.json.gz", "wb", 9, mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        screenshot(out / "report.html", gpu / "report.png", dry)


def unpacked(path: Path) -> Path:
    """The session folder of ``path``: session-collect's ``session.tar.gz`` unpacked beside itself, or ``path``."""
    if path.is_file() and path.name.endswith(".tar.gz"):
        import tarfile

        with tarfile.open(path) as tar:
            tar.extractall(path.parent, filter="data")
        return path.parent / "session"
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/ingest_session.py", description=__doc__.splitlines()[0])
    ap.add_argument("session", type=Path, help="what session-collect brought back ($OUT/session.tar.gz, or the folder "
                                               "it holds)")
    ap.add_argument("--note", help="a note at the top of the joined GPU report")
    ap.add_argument("--onto-current", action="store_true",
                    help="join the session's reports on top of the current reports/gpu/report.json.gz: a session "
                         "without a vendor library keeps the current report's results of it (merge keeps an adapter "
                         "a later run could not load); without it the session's reports alone make the GPU report")
    ap.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")
    args = ap.parse_args(argv)
    session = unpacked(args.session)
    if not session.is_dir():
        ap.error(f"SESSION {session}: not a folder (nor session-collect's session.tar.gz)")
    if (session / "steps").is_file():
        print("== steps\n" + (session / "steps").read_text())
    junit = next((p for p in (session / "gpu_junit.xml.gz", session / "gpu_junit.xml") if p.is_file()), None)
    reports = conformance_reports(session)
    if junit is not None:
        print("== tox -e gpu (junit):", dict(junit_counts(junit)))
    elif (session / "failures.txt.outcomes").is_file():  # cut off before pytest wrote its junit XML
        junit = session / "failures.txt.outcomes"
        print("== tox -e gpu: no junit XML; the outcomes streamed as the tests ended stand in for it")
    if (session / "failures.txt.durations").is_file():  # where tox -e gpu's time went, stragglers included
        print("== tox -e gpu's time (tools/durations_summary.py)")
        subprocess.call([sys.executable, str(ROOT / "tools" / "durations_summary.py"),
                         str(session / "failures.txt.durations")])
    if junit is not None:
        cli_all = next((r for r in reports if r.parent.name == "cli_all"), None)
        if cli_all is not None:
            print("== the plugin's verdicts against the CLI's")
            subprocess.call([sys.executable, str(ROOT / "tools" / "compare_front_ends.py"), str(junit), str(cli_all)])
    if reports:
        current = Path("reports", "gpu", "report.json.gz")  # as the merge command names it (run from ROOT)
        if args.onto_current and (ROOT / current).is_file():
            reports = [current, *reports]
        print("== the GPU report from", ", ".join(str(r) for r in reports))
        join_gpu_report(reports, args.note, ROOT, args.dry_run)
    kept_out = [b for b in BENCHES if without_gpu_figures(b, session)]
    for b in kept_out:
        print(f"== {session / b.folder / b.stem}.json has no GPU-timed benchmark (each GPU benchmark skipped): "
              f"reports/benchmarks/{b.current}.* kept")
    replaced = {b.current: json.loads(path.read_text()) for b in BENCHES  # what each table's *vs previous* reads
                if b.table and (path := ROOT / "reports" / "benchmarks" / f"{b.current}.json").is_file()}
    for src, dst in bench_copies(session):
        print(f"== {src} -> {dst.relative_to(ROOT)}")
        if not args.dry_run:
            shutil.copyfile(src, dst)
    for b in BENCHES:
        src = session / b.folder / f"{b.stem}.json"
        if b.table and src.is_file() and b not in kept_out:
            md = ROOT / "reports" / "benchmarks" / f"{b.current}.md"
            print(f"== {md.relative_to(ROOT)} from {src} (tools/bench_table.py)")
            if not args.dry_run:
                md.write_text(bench_table.markdown(json.loads(src.read_text()), replaced.get(b.current)))
    run([sys.executable, "tools/ratio_chart.py"], args.dry_run)  # the bars' picture, before the index lists it
    run([sys.executable, "tools/report_index.py"], args.dry_run)
    run([sys.executable, "tools/readme_figures.py"], args.dry_run)
    repros = session / "repros" / "index.md"
    if repros.is_file():  # tools/standalone_repros.py, written on the H200: each finding's entry points at one
        print(f"== standalone repro files of the smallest failures: {repros} (copy the one an expectations entry "
              "names to conformance/repros/)")
    print("now: git status; git add -f reports/ README.md; the closing note takes the counts above")
    return 0


if __name__ == "__main__":
    sys.exit(main())
