"""The picture of issue 40's speed bars (tools/ratio_chart.py) is drawn from the current benchmark set: the committed
SVG must equal what the JSON files give, and a changed row must change the picture."""

from __future__ import annotations

import json
import shutil

import ratio_chart as rc


def test_the_svg_matches_the_benchmark_set():
    assert rc.SVG.is_file() and rc.SVG.read_text() == rc.render(), (
        "reports/benchmarks/fa3_ratios.svg differs from the JSON files: run `python tools/ratio_chart.py`")


def test_bars_are_the_other_time_over_ours_in_head_dim_order():
    data = {"bench": [
        {"d": 128, "dv": 128, "causal": True, "fa4_ms": 2.0, "fa3_ms": 1.0},
        {"d": 192, "dv": 128, "causal": False, "fa4_ms": 1.0, "fa3_ms": 2.0},
        {"d": 64, "dv": 64, "causal": False, "fa4_ms": 3.0, "fa3_ms": 3.0},
        {"d": 192, "dv": 192, "causal": False, "fa4_ms": 1.0, "fa3_ms": 1.0},
        {"d": 256, "dv": 256, "causal": False, "fa3_ms": 1.0},  # no FA4 timing: no bar
    ]}
    assert rc.bars(rc.PANELS[0], data) == [("d64", False, 1.0), ("d128", True, 2.0), ("d192", False, 1.0),
                                           ("d192x128", False, 0.5)]


def test_a_changed_row_changes_the_picture(tmp_path):
    for p in rc.PANELS:
        if (rc.BENCH_DIR / p.file).is_file():
            shutil.copyfile(rc.BENCH_DIR / p.file, tmp_path / p.file)
    before = rc.render(tmp_path)
    fwd = json.loads((tmp_path / "fa3_side_by_side.json").read_text())
    row = fwd["bench"][0]
    row["fa3_ms"] = row["fa4_ms"] / 0.5  # ours twice as slow: a red bar at 0.50
    (tmp_path / "fa3_side_by_side.json").write_text(json.dumps(fwd))
    after = rc.render(tmp_path)
    assert before != after and ">0.50<" in after and 'fill="#d62728"' in after


def test_a_missing_table_is_named(tmp_path):
    assert "fa3_side_by_side.json missing" in rc.render(tmp_path)
