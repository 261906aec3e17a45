"""tools/fa3_overlap.py: the FA3 ablation's measured softmax/GEMM overlap gain beside the pipeline bound."""

from __future__ import annotations

import doctest
import json

import fa3_overlap

from attention_conformance.kernels.planning import pipeline_times


def test_doctests_run():
    res = doctest.testmod(fa3_overlap)
    assert res.attempted >= 3 and res.failed == 0


def test_bound_is_the_seeds_pipeline_with_softmax_as_the_load_stage():
    gemm, soft, bound = fa3_overlap.overlap_bound(8192, 128)
    serial, overlapped = pipeline_times(64, soft, gemm)
    assert bound == serial / overlapped
    assert 1.0 < bound < 1.0 + soft / gemm  # never more than the hidden stage's share


#: the d = 128 ablation rows of an H200 run of `fa3_check_bench.py --ablation` (B=4, H=16, N=8192, bf16)
ABLATION = {"ablation": [
    {"variant": "full", "B": 4, "H": 16, "N": 8192, "d": 128, "causal": False, "fa3_ms": 3.81344, "fa3_tflops": 576.65},
    {"variant": "no_overlap", "B": 4, "H": 16, "N": 8192, "d": 128, "causal": False, "fa3_ms": 4.40198,
     "fa3_tflops": 499.55},
    {"variant": "full", "B": 4, "H": 16, "N": 8192, "d": 128, "causal": True, "fa3_ms": 1.99494, "fa3_tflops": 551.15},
    {"variant": "no_overlap", "B": 4, "H": 16, "N": 8192, "d": 128, "causal": True, "fa3_ms": 2.38794,
     "fa3_tflops": 460.44},
]}


def test_ablation_rows_and_the_markdown(tmp_path):
    rows = fa3_overlap.overlap_rows(ABLATION)
    assert [r["causal"] for r in rows] == [False, True]
    for r in rows:
        assert 1.0 < r["measured_gain"] < r["bound"], r  # the kernel gains, and not more than the model allows
    src, out = tmp_path / "fa3.json", tmp_path / "o.md"
    src.write_text(json.dumps(ABLATION))
    assert fa3_overlap.main(["--json", str(src), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| 8192, 128 | no | 577 | 500 | 1.154x | 1.484x |" in text


def test_unusable_json_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"ablation": []}')
    assert fa3_overlap.main(["--json", str(bad)]) == 2
    assert fa3_overlap.main(["--json", str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.count("error:") == 2
