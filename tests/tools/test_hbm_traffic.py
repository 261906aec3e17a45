"""tools/hbm_traffic.py on the CPU: the seeds' IO arithmetic, the ncu CSV parser, the marker
segmentation and the table; the script itself skips every implementation cleanly without a GPU."""

from __future__ import annotations

import doctest
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import hbm_traffic as ht
import pytest

MIB = 2**20

CSV = "\n".join([
    "==PROF== Connected to process 123 (/usr/bin/python3)",
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
    '"0","123","python3","h","at::cuda::(anonymous namespace)::spin_kernel(long)","1","7","(1, 1, 1)","(1, 1, 1)",'
    '"0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","0"',
    '"1","123","python3","h","void gemm<128, 64>(Params, int)","1","7","(128, 1, 1)","(64, 1, 1)",'
    '"0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1,048,576"',
    '"1","123","python3","h","void gemm<128, 64>(Params, int)","1","7","(128, 1, 1)","(64, 1, 1)",'
    '"0","9.0","Command line profiler metrics","dram__bytes_write.sum","Mbyte","536.870912"',
    '"1","123","python3","h","void gemm<128, 64>(Params, int)","1","7","(128, 1, 1)","(64, 1, 1)",'
    '"0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","250,000"',
    '"2","123","python3","h","softmax_kernel","1","7","(128, 1, 1)","(64, 1, 1)",'
    '"0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","536870912"',
    '"3","123","python3","h","at::cuda::(anonymous namespace)::spin_kernel(long)","1","7","(1, 1, 1)","(1, 1, 1)",'
    '"0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","0"',
    '"4","123","python3","h","flash_fwd_kernel","1","7","(128, 1, 1)","(64, 1, 1)",'
    '"0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","12582912"',
    "==PROF== Disconnected from process 123",
])


def test_seeds_io_arithmetic():
    """[FA-anim] "算账": N = 16,384, fp16: one N x N matrix 512 MiB; S write + S read + P write + P read = 2 GiB."""
    n = ht.CONFIGS["seeds"]["N"]
    assert n == 16384 and n * n * 2 == 512 * MIB
    assert ht.seeds_intermediate_bytes(n) == 2048 * MIB
    seeds = ht.CONFIGS["seeds"]
    nd = seeds["N"] * seeds["d"] * 2
    assert ht.byte_model("naive", seeds, "fwd") == 2048 * MIB + 4 * nd
    assert ht.byte_model("cuda-fa2", seeds, "fwd") == 4 * nd + 4 * n  # the compulsory N x d traffic
    assert ht.byte_model("naive", seeds, "fwd+bwd") > 5 * ht.byte_model("naive", seeds, "fwd") / 2


def test_flops_convention():
    fa1 = ht.CONFIGS["fa1_paper"]
    assert fa1 == dict(B=64, H=16, N=1024, d=64)
    assert ht.flops(fa1, "fwd") == 4 * 64 * 16 * 1024**2 * 64
    assert ht.flops(fa1, "fwd+bwd") == pytest.approx(3.5 * ht.flops(fa1, "fwd"))


def test_parse_ncu_csv_units_commas_and_quoted_names():
    ks = ht.parse_ncu_csv(CSV)
    assert [k["id"] for k in ks] == [0, 1, 2, 3, 4]
    gemm = ks[1]
    assert gemm["name"] == "void gemm<128, 64>(Params, int)"
    assert gemm["dram__bytes_read.sum"] == 1048576 and gemm["dram__bytes_write.sum"] == pytest.approx(536870912)
    assert gemm["gpu__time_duration.sum"] == pytest.approx(250e-6)
    assert ht.parse_ncu_csv("==PROF== nothing profiled") == []


def test_segments_and_attribution():
    segs = ht.segments(ht.parse_ncu_csv(CSV))
    assert [[k["name"] for k in s] for s in segs] == [["void gemm<128, 64>(Params, int)", "softmax_kernel"],
                                                      ["flash_fwd_kernel"]]
    log = [dict(config="seeds", impl="naive", status="ran", profiled=True, ms=1.0, **{"pass": "fwd"}),
           dict(config="seeds", impl="cuda-fa3", status="skipped", reason="not built", **{"pass": "fwd"}),
           dict(config="seeds", impl="torch-flash", status="ran", profiled=True, ms=0.5, **{"pass": "fwd"})]
    rows, note = ht.attribute(log, segs)
    assert note == ""
    naive, fa3, flash = rows
    assert naive["source"] == "ncu" and naive["kernels"] == 2
    assert naive["read_bytes"] == 1048576 + 536870912 and naive["write_bytes"] == pytest.approx(536870912)
    assert fa3["status"] == "skipped" and "read_bytes" not in fa3
    assert flash["read_bytes"] == 12582912
    rows, note = ht.attribute(log[:1], segs)  # one profiled measurement, two segments: not attributed
    assert "byte model" in note and rows[0]["source"] == "model"


def test_markdown_table_has_the_anchors():
    log = [dict(config=c, impl="naive", status="ran", profiled=True, ms=2.0, peak_bytes=3 * 2**30, **{"pass": p})
           for c in ht.CONFIGS for p in ht.PASSES]
    rows, _ = ht.attribute(log, [[{"name": "k", "dram__bytes_read.sum": 2e9, "dram__bytes_write.sum": 1e9}]] * 4)
    rep = dict(created="now", command="python tools/hbm_traffic.py --out x", env={},
               per_config={"seeds": {"source": "ncu", "note": ""}}, rows=rows)
    md = ht.render_markdown(rep)
    assert "Bytes: ncu." in md and "2 GiB = 2.147 GB per head" in md and "40.3 GB HBM" in md and "4.4 GB" in md
    assert "| naive | fwd | 137.4 | 2.000 | 1.000 | 3.000 |" in md


def test_doctests_run():
    res = doctest.testmod(ht)
    assert res.failed == 0 and res.attempted >= 4


def test_script_skips_cleanly_without_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test checks the no-GPU path")
    p = subprocess.run([sys.executable, ht.__file__, "--out",
                        str(tmp_path), "--no-ncu",
                        "--configs", "seeds", "--impls", "naive", "cuda-fa1"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    rep = json.loads((tmp_path / "hbm_traffic.json").read_text())
    assert {r["status"] for r in rep["rows"]} == {"skipped"} and len(rep["rows"]) == 4
    assert all(r["reason"] == "no CUDA device" for r in rep["rows"])
    assert "no CUDA device" in (tmp_path / "hbm_traffic.md").read_text()


def test_rebuild_from_an_h200_run(tmp_path):
    """The parser on real ncu output (an H200 run of the seeds config: tests/tools/data, the raw files of the current
    reports/benchmarks/hbm_traffic.json): the naive forward moves the seeds' 2 GiB."""
    data = Path(__file__).resolve().parent / "data"
    (tmp_path / "ncu_seeds.csv").write_bytes(gzip.decompress((data / "ncu_seeds.csv.gz").read_bytes()))
    shutil.copy(data / "hbm_log_seeds.jsonl", tmp_path / "hbm_log_seeds.jsonl")
    rep = json.loads((Path(__file__).resolve().parents[2] / "reports" / "benchmarks" / "hbm_traffic.json").read_text())
    rep["per_config"] = {"seeds": rep["per_config"]["seeds"]}
    (tmp_path / "hbm_traffic.json").write_text(json.dumps(rep))
    rep = ht.rebuild(tmp_path)
    assert rep["env"]["gpu"] == "NVIDIA H200"
    assert rep["method"]["command"].startswith("python ") and "hbm_traffic" in rep["method"]["command"]
    rows = {(r["config"], r["impl"], r["pass"]): r for r in rep["rows"]}
    naive = rows[("seeds", "naive", "fwd")]
    assert naive["source"] == "ncu" and naive["kernels"] == 4
    total = naive["read_bytes"] + naive["write_bytes"]
    assert abs(total - ht.seeds_intermediate_bytes(16384)) < 0.05 * ht.seeds_intermediate_bytes(16384)
    for impl in ("torch-flash", "cudnn", "cuda-fa2"):
        r = rows[("seeds", impl, "fwd")]
        assert r["read_bytes"] + r["write_bytes"] < 0.02e9, impl  # no N x N matrix goes through HBM
        assert 0 < r["kernel_ms"] < r["ms"] * 1.5
