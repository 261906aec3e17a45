"""reports/fa3_overlap.py: the FA3 ablation's measured softmax/GEMM overlap gain beside the pipeline bound."""

from __future__ import annotations

import doctest
import json

from attention_conformance.kernels.planning import pipeline_times
from attention_conformance.reports import fa3_overlap


def test_doctests_run():
    res = doctest.testmod(fa3_overlap)
    assert res.attempted >= 3 and res.failed == 0


def test_bound_is_the_seeds_pipeline_with_softmax_as_the_load_stage():
    gemm, soft, bound = fa3_overlap.overlap_bound(8192, 128)
    serial, overlapped = pipeline_times(64, soft, gemm)
    assert bound == serial / overlapped
    assert 1.0 < bound < 1.0 + soft / gemm  # never more than the hidden stage's share


def test_committed_ablation_rows_and_the_markdown(tmp_path):
    data = json.loads(fa3_overlap.DEFAULT_JSON.read_text())
    rows = fa3_overlap.overlap_rows(data)
    assert [r["causal"] for r in rows] == [False, True]
    for r in rows:
        assert 1.0 < r["measured_gain"] < r["bound"], r  # the kernel gains, and not more than the model allows
    out = tmp_path / "o.md"
    assert fa3_overlap.main(["--out", str(out)]) == 0
    text = out.read_text()
    assert "| 8192, 128 | no | 577 | 500 | 1.154x | 1.484x |" in text


def test_unusable_json_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"ablation": []}')
    assert fa3_overlap.main(["--json", str(bad)]) == 2
    assert fa3_overlap.main(["--json", str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.count("error:") == 2
