"""tools/fa3_check_bench.py: a candidate that leaves the CUDA context unusable (an illegal address is sticky) costs its
own row only; the table goes on in a fresh process (``--resume``) from the rows already written."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("attention_conformance.kernels.cuda.lab", reason="kernels.cuda.lab (the lab build's Python side) "
                    "is not in the installed package; run tools' tests from a checkout (pip install -e .)")
bench = pytest.importorskip("fa3_check_bench")
from bench_shapes import row_key  # noqa: E402  (beside the script, after the skip)

ENV = dict(gpu="H200", date="today", driver="x", cuda="13.0", torch="2.11", cudnn=1)


def _row(shape, **extra):
    B, H, N, d, dv, causal = bench.shape_key(shape)
    return dict(B=B, H=H, N=N, d=d, dv=dv, causal=causal, fa3_ms=1.0, fa3_tflops=500.0, **extra)


def test_the_rows_left_and_the_command_that_resumes():
    shapes = [(4, 16, 8192, 64, 64, False), (4, 16, 8192, 64, 64, True), (4, 16, 8192, 96, 96, False)]
    assert bench.remaining_shapes(shapes, [_row(shapes[0])]) == shapes[1:]
    assert bench.remaining_shapes([(4, 16, 8192, 128, True)], [_row((4, 16, 8192, 128, 128, True))]) == []
    assert bench.resume_argv(["--out", "x", "--resume"]) == ["--out", "x", "--resume"]
    assert bench.resume_argv(["--out", "x"]) == ["--out", "x", "--resume"]


def test_a_lost_context_restarts_for_the_rows_left_and_keeps_the_rows_done(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "env_info", lambda: dict(ENV))
    calls: list[list] = []
    lost_at = (4, 16, 8192, 64, 64, True)

    def fake_rows(shapes, variants=(), row_done=None, **kw):
        calls.append(list(shapes))
        rows = []
        for s in shapes:
            extra = {"context_lost": "CUDA error: an illegal memory access was encountered",
                     "xformers_error": "CUDA error"} if s == lost_at else {}
            rows.append(_row(s, **extra))
            row_done(rows)
            if extra:
                raise bench.ContextLost(f"lost in {s}")
        return rows

    class Restarted(Exception):
        pass

    execs = []

    def fake_execv(path, args):
        execs.append(args)
        raise Restarted

    monkeypatch.setattr(bench, "bench_rows", fake_rows)
    monkeypatch.setattr(bench.os, "execv", fake_execv)
    argv = ["--out", str(tmp_path), "--skip-check", "--head-dims", "64,96"]
    with pytest.raises(Restarted):
        bench.main(argv)
    assert execs[0][-len(argv) - 1:] == [*argv, "--resume"]
    written = json.loads((tmp_path / "fa3.json").read_text())["bench"]
    assert [row_key(r) for r in written] == [(4, 16, 8192, 64, 64, False), lost_at]
    md = (tmp_path / "fa3.md").read_text()
    assert "left the CUDA context unusable (CUDA error: an illegal memory access" in md and "xformers: CUDA" in md

    assert bench.main([*argv, "--resume"]) == 0
    assert calls[1] == [(4, 16, 8192, 96, 96, False), (4, 16, 8192, 96, 96, True)]  # the rows left, in order
    final = json.loads((tmp_path / "fa3.json").read_text())["bench"]
    assert [row_key(r)[3:] for r in final] == [(64, 64, False), (64, 64, True), (96, 96, False), (96, 96, True)]


def test_each_lab_build_times_at_the_head_dim_it_is_built_for():
    from attention_conformance.kernels.cuda import lab

    dims = {v: bench.built_head_dim(v) for v in lab.FA3_FWD_VARIANTS}
    assert dims["persistent"] is None and dims["eager_rescale"] is None  # every head dim
    assert dims["d64_two_wg"] == 64 and dims["two_wg"] == 128 and dims["cluster2"] == 128
    assert {v for v, d in dims.items() if d == 96} == {v for v in lab.FA3_FWD_VARIANTS if v.startswith("d96_")} != set()
    assert {v for v, d in dims.items() if d == 192} == {v for v in lab.FA3_FWD_VARIANTS if v.startswith("d192_")} \
        != set()
