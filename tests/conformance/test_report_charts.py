"""The pictures of report.html (conformance/reporting/charts.py): inline SVG only, one scatter and one heat map
per adapter with every case placed by its outcome, and TFLOPs/s against N from the benchmark JSON."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from attention_conformance.reporting.charts import benchmark_series, case_usage, charts_html, load_benchmarks
from attention_conformance.reporting.page import render_html
from attention_conformance.reporting.store import load_report

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def _result(case_id, adapter, outcome, ratio=None, nonfinite=0, lq=8, lk=8):
    stats = {} if ratio is None else {"out": {"max_ratio": ratio, "nonfinite": nonfinite, "ok": outcome == "PASS"}}
    return {"case_id": case_id, "adapter": adapter, "outcome": outcome, "stats": stats,
            "case": {"Lq": lq, "Lk": lk}, "family": "t", "features": []}


def _report(results):
    names = sorted({r["adapter"] for r in results})
    return {"adapters": [{"name": n} for n in names], "results": results}


def test_case_usage_is_the_worst_finite_ratio_and_flags_nan():
    r = {"stats": {"out": {"max_ratio": 0.25, "nonfinite": 0, "ok": True},
                   "lse": {"max_ratio": 0.5, "nonfinite": 3, "ok": False}}}
    assert case_usage(r) == (0.5, True)
    assert case_usage({"stats": {}}) == (None, False)


def test_every_case_is_drawn_with_its_outcome():
    results = [_result("a", "x", "PASS", 1e-3), _result("b", "x", "FAIL", 7.0, lq=33, lk=47),
               _result("c", "x", "NOT_SUPPORTED"), _result("d", "x", "FAIL", 0.1, nonfinite=5)]
    page = charts_html(_report(results))
    assert page.count("<svg") == 2  # one scatter, one heat map
    for cid, outcome in (("a", "PASS"), ("b", "FAIL"), ("d", "FAIL")):
        assert f"<title>{cid}: {outcome}" in page, cid
    assert "<title>1 case NOT_SUPPORTED" in page  # the declined cases: one path of ticks in the bottom band
    assert "d: FAIL, usage 0.1, NaN/Inf" in page
    # the failing case at (33, 47) makes the (17-64, 17-64) cell red
    cell = re.search(r'<rect[^>]*fill="([^"]+)"[^>]*><title>Lq 17-64, Lk 17-64: 1 cases, worst usage 7', page)
    assert cell and cell.group(1) == "#d62728", "the failed (Lq, Lk) group is not drawn red"


def test_findings_and_known_failures_are_not_drawn_as_failures():
    """A FINDING (NaN where a dense mask masks out, not failing) and a KNOWN failure (an expectations entry expects it,
    over the bound) are never red: the FINDING cell by its usage, the KNOWN one in its own colour; a FAIL still red."""
    results = [_result("f", "x", "FINDING", 0.3, nonfinite=4, lq=33, lk=47),
               _result("k", "x", "KNOWN", 5.0, nonfinite=2, lq=300, lk=300),
               _result("bad", "x", "FAIL", 2.0, lq=3, lk=3)]
    page = charts_html(_report(results))

    def fill(cell: str) -> str:
        found = re.search(r'<rect[^>]*fill="([^"]+)"[^>]*><title>' + re.escape(cell), page)
        assert found, cell
        return found.group(1)

    assert fill("Lq 17-64, Lk 17-64: 1 cases") != "#d62728"
    assert fill("Lq 257-1k, Lk 257-1k: 1 cases") not in ("#d62728",) and "known failure (expectations)" in page
    assert fill("Lq 2-4, Lk 2-4: 1 cases") == "#d62728"


def test_higher_usage_is_drawn_higher():
    page = charts_html(_report([_result("lo", "x", "PASS", 1e-4), _result("hi", "x", "PASS", 0.5)]))
    ys = {m.group(2): float(m.group(1)) for m in re.finditer(r'cy="([\d.]+)"[^>]*><title>(\w+): PASS', page)}
    assert ys["hi"] < ys["lo"], ys


def test_benchmark_series_reads_the_committed_json():
    bench = load_benchmarks((REPORTS / "benchmarks").glob("*.json"))
    panels = benchmark_series(bench)
    fwd = json.loads((REPORTS / "benchmarks" / "cuda_fwd.json").read_text())["bench"]
    want = sorted((r["N"], r["ours_tflops"]) for r in fwd if r.get("kernel") == "fa2_fwd" and r["d"] == 128
                  and not r["causal"])
    assert panels[("cuda_fwd", "fa2_fwd", False)][("ours", 128)] == want
    assert len(want) >= 3, "the forward benchmark should sweep N"


def test_report_page_is_self_contained(tmp_path):
    committed = tmp_path / "report.json"  # the current CPU report, stored gzip-compressed (reports/index.md)
    committed.write_bytes(gzip.decompress((REPORTS / "cpu" / "report.json.gz").read_bytes()))
    rep = load_report(committed)  # each result with its case again (Lq, Lk of the heat map)
    page = render_html(rep, load_benchmarks((REPORTS / "benchmarks").glob("*.json")))
    # nothing loaded from the network (no scripts, images, style sheets, fonts); hyperlinks to upstream issues
    # (an expectations entry's link) are plain <a href>, which load nothing
    assert "<script" not in page and not re.search(r'src="https?:|<link[^>]*href="https?:|url\(https?:', page)
    assert page.count("<svg") >= 2 * len([a for a in rep["adapters"] if a.get("available")])
    assert "Benchmarks: TFLOPs/s against N" in page


def test_an_adapter_that_ran_nothing_is_named_not_drawn():
    results = [_result("a", "x", "PASS", 1e-3), _result("a", "idle", "NOT_SUPPORTED"),
               _result("b", "idle", "NOT_SUPPORTED")]
    page = charts_html(_report(results))
    assert page.count("<svg") == 2 and "<h3>idle</h3>" not in page
    assert "every case NOT_SUPPORTED" in page and "<code>idle</code>" in page
