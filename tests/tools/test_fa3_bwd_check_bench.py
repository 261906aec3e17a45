"""tools/fa3_bwd_check_bench.py: the table of each row against the set it replaces (``--previous``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("attention_conformance.kernels.cuda.lab", reason="kernels.cuda.lab (the lab build's Python side) "
                    "is not in the installed package; run tools' tests from a checkout (pip install -e .)")
bench = pytest.importorskip("fa3_bwd_check_bench")


def _row(d, causal, tflops, fa3_ms, fa4_ms):
    return dict(B=4, H=16, N=8192, d=d, dv=d, causal=causal, bwd_fa3_tflops=tflops, bwd_fa3_method="cuda_graph",
                fwdbwd_fa3_ms=fa3_ms, fwdbwd_fa4_ms=fa4_ms)


def test_change_table_gives_each_row_then_and_now():
    prev = [_row(64, False, 500.0, 10.0, 9.0), _row(128, True, 600.0, 5.0, 5.0)]
    now = [_row(64, False, 510.0, 10.0, 9.5), _row(128, True, 594.0, 5.0, 4.9), _row(256, False, 400.0, 1.0, 1.0)]
    lines = bench.change_table(now, prev, dict(gpu="NVIDIA H200", date="yesterday"), "NVIDIA H100")
    text = "\n".join(lines)
    assert "(yesterday, NVIDIA H200), by GPU time as this one" in text
    assert "the card (NVIDIA H200 then, NVIDIA H100 now)" in text
    assert "| B4 H16 N8192 d64 | False | 500 | 510 | +2.0% | 0.90 | 0.95 | +0.05 |" in lines
    assert "| B4 H16 N8192 d128 | True | 600 | 594 | -1.0% | 1.00 | 0.98 | -0.02 |" in lines
    assert not any("d256" in line for line in lines)  # a row the previous set lacks has nothing to compare


def test_markdown_adds_the_change_table_only_with_a_previous_set():
    env = dict(gpu="NVIDIA H100", date="today", driver="x", cuda="13.0", torch="2.11", cudnn=1)
    rows = [dict(_row(64, False, 510.0, 10.0, 9.5), bwd_fa3_ms=1.0)]
    assert "Against the set" not in bench.markdown(env, [], [], rows, "cmd")
    md = bench.markdown(env, [], [], rows, "cmd", [_row(64, False, 500.0, 10.0, 9.0)], dict(gpu="NVIDIA H100"))
    assert "## Against the set this one replaces" in md and "the run (clocks, power)" in md


def test_join_writes_one_table_from_parts_measured_apart(tmp_path):
    env = dict(gpu="NVIDIA H200", date="today", driver="x", cuda="13.0", torch="2.11", cudnn=1)
    parts = [dict(env=env, command="part one", bench=[dict(_row(64, False, 500.0, 10.0, 9.0), bwd_fa3_ms=1.0)]),
             dict(env=dict(env, date="later"), command="part two",
                  bench=[dict(_row(192, True, 400.0, 8.0, 7.0), bwd_fa3_ms=2.0)])]
    files = []
    for i, p in enumerate(parts):
        files.append(tmp_path / f"p{i}.json")
        files[-1].write_text(bench.json.dumps(p))
    assert bench.main(["--join", *map(str, files), "--out", str(tmp_path / "t")]) == 0
    joined = bench.json.loads((tmp_path / "t" / "fa3_bwd.json").read_text())
    assert [r["d"] for r in joined["bench"]] == [64, 192]
    assert joined["env"]["date"] == "today" and joined["command"] == "part one and part two"
    md = (tmp_path / "t" / "fa3_bwd.md").read_text()
    assert "| B4 H16 N8192 d64 | False | 500 |" in md and "| B4 H16 N8192 d192 | True | 400 |" in md
