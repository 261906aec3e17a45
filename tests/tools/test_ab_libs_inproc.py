"""CPU tests of tools/ab_libs_inproc.py: the rule that picks a build from A/B results, and the table."""

from __future__ import annotations

import ctypes
import json
import math

import pytest
import torch

# tools/ab_libs_inproc.py drives the lab build (kernels.cuda.lab), a checkout's: not in the wheel tox installs
pytest.importorskip("attention_conformance.kernels.cuda.lab", reason="kernels.cuda.lab (the lab build's Python side) "
                    "is not in the installed package; run tools' tests from a checkout (pip install -e .)")
from ab_libs_inproc import fp8_kmajor_params_for, main, markdown, pick  # noqa: E402

from attention_conformance.kernels import cuda_lib


def _rows(rates: dict[str, list[float]]) -> list[dict]:
    rows = []
    for i, causal in enumerate((False, True)):
        row = dict(N=8192, d=128, causal=causal, cudnn_tflops=500.0, cudnn_spread=0.01, fa4_tflops=900.0,
                   fa4_spread=0.02)
        for name, vals in rates.items():
            row.update({f"{name}_tflops": vals[i], f"{name}_spread": 0.03, f"{name}_err": 3e-3})
        rows.append(row)
    return rows


def _write(tmp_path, name, rows):
    path = tmp_path / name / "ab.json"
    path.parent.mkdir()
    path.write_text(json.dumps(dict(rows=rows)))
    return path


def test_pick_takes_the_best_geometric_mean_over_every_row_of_every_order(tmp_path):
    one = _write(tmp_path, "o1", _rows({"A": [600, 500], "B": [630, 490], "C": [606, 505]}))
    two = _write(tmp_path, "o2", _rows({"A": [600, 500], "B": [624, 495], "C": [612, 500]}))
    best, means = pick([one, two], "A", 0.005)
    assert best == "B"
    assert means["A"] == 1.0
    expect = math.exp((math.log(630 / 600) + math.log(490 / 500) + math.log(624 / 600) + math.log(495 / 500)) / 4)
    assert means["B"] == pytest.approx(expect)
    assert "cudnn" not in means and "fa4" not in means, "the references are never candidates"


def test_pick_keeps_the_baseline_unless_a_build_gains_more_than_the_threshold(tmp_path):
    one = _write(tmp_path, "o1", _rows({"A": [600, 500], "B": [603, 501]}))
    assert pick([one], "A", 0.005)[0] == "A"
    assert pick([one], "A", 0.0)[0] == "B"


def test_a_build_that_failed_its_check_is_absent_and_cannot_be_picked(tmp_path):
    rows = _rows({"A": [600, 500]})
    for row in rows:
        row["B_err"] = float("nan")  # rows() times only builds within --max-err: no B_tflops
    assert pick([_write(tmp_path, "o1", rows)], "A", 0.0) == ("A", {"A": 1.0})


def test_markdown_puts_ratios_against_the_first_build_and_names_the_largest_error():
    env = {"gpu": "H200", "torch": "2.x", "fa4": "4.0"}
    text = markdown(env, ["A", "B"], _rows({"A": [600, 500], "B": [630, 490]}))
    line = next(x for x in text.splitlines() if x.startswith("| 8192 | 128 | False"))
    assert "| 600 (3%) | 630 (3%) | 500 (1%) | 900 (2%) | 1.050 | 0.833 | 1.500 |" in line
    assert "A 3.0e-03, B 3.0e-03" in text


def test_pick_mode_prints_the_choice(tmp_path, capsys):
    one = _write(tmp_path, "o1", _rows({"A": [600, 500], "B": [660, 550]}))
    assert main(["--lib", "A=-", "--pick", str(one)]) == 0
    assert capsys.readouterr().out.strip() == "B"


def test_markdown_of_fp8_rows_names_the_largest_difference_from_the_first_build():
    rows = _rows({"A": [800, 700], "B": [820, 690]})
    for row, diff in zip(rows, (0.0, 2e-3), strict=True):
        row["A_diff0"], row["B_diff0"] = 0.0, diff
    text = markdown({"gpu": "H200"}, ["A", "B"], rows)
    assert "Largest absolute difference from `A`'s output: B 2.0e-03." in text
    assert "difference from" not in markdown({"gpu": "H200"}, ["A", "B"], _rows({"A": [1, 1], "B": [1, 1]}))


def test_row_checks_every_build_and_times_only_those_within_the_bound(monkeypatch):
    """`_row` (shared by the BF16 and FP8 tables) on the CPU with the launcher, cuDNN and the timer replaced: a build
    whose output misses the reference is reported and not timed; ``_diff0`` is taken against the first build."""
    import ab_libs_inproc as ab
    import torch

    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    ref = torch.softmax(q @ k.transpose(-1, -2) / 2, -1) @ v
    monkeypatch.setattr(ab, "sdpa_fn", lambda backend, q, k, v, causal: lambda: ref)
    offsets = {"good": 0.0, "near": 1e-4, "bad": 1.0}

    def call(launcher, params, lib):
        params["o"].copy_(ref + offsets[lib])

    def call_variant(params, variant, lib):  # NAME=PATH@VARIANT: the library's variant build, not the launcher
        assert variant == "persistent"
        params["o"].copy_(ref + offsets[lib])

    monkeypatch.setattr(ab.cuda_lib, "call", call)
    monkeypatch.setattr(ab.lab, "call_fa3_fwd", call_variant)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    timed = []
    monkeypatch.setattr(ab, "time_round_robin", lambda row, cands, flops, rounds: timed.extend(n for n, _ in cands))
    builds = {name: ab.Build(name) for name in offsets} | {"near@persistent": ab.Build("near", "persistent")}
    row = ab._row(builds, "attn_x", lambda o, lse: {"o": o}, q, k, v, False, 1, 1e-2, True, [("ref", None)],
                  format="e4m3fn")
    assert timed == ["good", "near", "near@persistent", "cudnn", "ref"]
    assert row["near@persistent_diff0"] == pytest.approx(1e-4, rel=1e-2)
    assert row["bad_err"] > 0.1 and row["good_err"] == 0.0
    assert row["near_diff0"] == pytest.approx(1e-4, rel=1e-2) and row["good_diff0"] == 0.0
    assert (row["B"], row["H"], row["N"], row["d"], row["format"]) == (1, 2, 8, 4, "e4m3fn")


def test_lib_variant_must_name_an_fa3_forward_build():
    """``--lib NAME=PATH@VARIANT`` takes a key of `lab.FA3_FWD_VARIANTS` with the FA3 forward launcher, one of
    `fa3_fp8_check_bench.KMAJOR_VARIANTS` with the FP8 one, none with any other: anything else is a usage error
    (exit 2) naming the argument, before any library is opened."""
    for argv in (["--lib", "A=a.so@nope"], ["--lib", "A=a.so@two_wg", "--launcher", "attn_fa2_fwd"],
                 ["--lib", "A=a.so@no_ws", "--launcher", "attn_fa3_fp8_fwd"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2


def test_markdown_title_names_the_launcher_timed():
    rows = _rows({"A": [600, 500]})
    bwd = markdown({"gpu": "H200", "torch": "2.x", "fa4": "-", "launcher": "attn_fa3_bwd"}, ["A"], rows)
    assert bwd.startswith("# In-process A/B of attn_fa3_bwd (H200, torch 2.x, fa4 -)")
    assert markdown({"gpu": "H200"}, ["A"], rows).startswith("# In-process A/B of attn_fa3_fwd (H200")


def test_a_build_that_declines_a_row_is_reported_and_not_timed(monkeypatch):
    """`_row` on the CPU (the launchers, cuDNN and the timer stood in for): a variant build raising KernelUnsupported is
    recorded as declining the row with its reason, and only the builds that ran are timed; any other kernel error
    still propagates (it fails the A/B)."""
    import ab_libs_inproc as ab
    import torch

    from attention_conformance.kernels import cuda_lib

    q = k = v = torch.randn(1, 2, 8, 16)
    monkeypatch.setattr(ab, "sdpa_fn", lambda backend, q, k, v, causal: (lambda: q.clone()))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def fake_variant(params, variant, lib=None):
        if variant == "cluster2":
            raise cuda_lib.KernelUnsupported("attn_fa3_fwd_variant", 1, "variant cluster2 is built for no causal mask")
        if variant == "broken":
            raise cuda_lib.KernelError("attn_fa3_fwd_variant", 3, "an illegal memory access")
        params[0].copy_(q)

    monkeypatch.setattr(ab.lab, "call_fa3_fwd", fake_variant)
    timed: list[str] = []
    monkeypatch.setattr(ab, "time_round_robin", lambda row, cands, work, rounds: timed.extend(n for n, _ in cands))
    libs = {"A": ab.Build(None, "one_cta_per_tile"), "A@cluster2": ab.Build(None, "cluster2")}
    row = ab._row(libs, "attn_fa3_fwd", lambda o, lse: (o, lse), q, k, v, True, 1, 2e-2, False, [])
    assert timed == ["A", "cudnn"]
    assert row["A_err"] == 0.0 and math.isnan(row["A@cluster2_err"])
    assert "cluster2 is built for no causal mask" in row["A@cluster2_declined"]
    with pytest.raises(cuda_lib.KernelError, match="illegal memory access"):
        ab._row({"B": ab.Build(None, "broken")}, "attn_fa3_fwd", lambda o, lse: (o, lse), q, k, v, True, 1, 2e-2,
                False, [])


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_kmajor_params_for(causal):
    """The FP8 benchmarks' params (fp8_rows, power_probe): V packed k-major once by pack_vt_reference, per-tensor
    descales of 1, the mask as asked; each call of params_for makes params for its own o and lse."""
    gen = torch.Generator().manual_seed(0)
    q8, k8, v8 = (torch.randn(1, 2, 40, 64, generator=gen).to(torch.float8_e4m3fn) for _ in range(3))
    params_for = fp8_kmajor_params_for(q8, k8, v8, causal)
    o = [torch.empty(1, 2, 40, 64, dtype=torch.bfloat16) for _ in range(2)]
    lse = [torch.empty(1, 2, 40) for _ in range(2)]
    p0, p1 = params_for(o[0], lse[0]), params_for(o[1], lse[1])
    assert (p0.fwd.o, p1.fwd.o) == (o[0].data_ptr(), o[1].data_ptr())
    assert p0.fwd.v == p1.fwd.v  # packed once
    want = cuda_lib.pack_vt_reference(v8.view(torch.uint8).numpy())  # [B, Hkv, d, vt_keys], contiguous
    assert want.shape[3] == p0.vt_keys
    assert ctypes.string_at(p0.fwd.v, want.nbytes) == want.tobytes()  # params_for keeps its V alive
    assert p0.v_layout == cuda_lib.FP8_V_LAYOUT_CODES["kmajor"]
    assert p0.granularity == cuda_lib.FP8_GRANULARITY_CODES["per_tensor"]
    assert bool(p0.fwd.causal) == causal



def test_checked_references_are_timed_only_within_the_bound(monkeypatch):
    """`_row`'s checked references (cuDNN's FP8 forward in fp8_rows): each runs once, its output is checked against the
    cuDNN reference like a build's (``_err``), and only one within the bound joins the timed candidates."""
    import ab_libs_inproc as ab

    q = k = v = torch.randn(1, 2, 8, 16)
    monkeypatch.setattr(ab, "sdpa_fn", lambda backend, q, k, v, causal: (lambda: q.clone()))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    timed: list[str] = []
    monkeypatch.setattr(ab, "time_round_robin", lambda row, cands, work, rounds: timed.extend(n for n, _ in cands))
    ran: list[str] = []
    checked = [("close", lambda: ran.append("close"), lambda: q * 1.01),
               ("far", lambda: ran.append("far"), lambda: q * 2.0)]
    row = ab._row({}, "attn_fa3_fp8_fwd", lambda o, lse: (o, lse), q, k, v, False, 1, 0.1, True, [], checked)
    assert ran == ["close", "far"]
    assert row["close_err"] == pytest.approx(0.01, rel=1e-3) and row["far_err"] == pytest.approx(1.0, rel=1e-3)
    assert timed == ["cudnn", "close"]
    text = markdown({"gpu": "H200"}, ["A"], [dict(row, A_tflops=900.0, A_spread=0.0, A_err=0.0,
                                                   close_tflops=1.0, close_spread=0.0)])
    assert "A 0.0e+00" in text


def test_markdown_names_cudnn_fp8_and_why_it_declined(tmp_path):
    rows = _rows({"A": [900, 800]})
    rows[0].update(cudnn_fp8_tflops=1000.0, cudnn_fp8_spread=0.01, cudnn_fp8_err=2e-2, cudnn_fp8_o="bf16",
                   cudnn_fp8_version="frontend 1.14.0, cuDNN 91900")
    rows[1]["cudnn_fp8_declined"] = "cuDNN 91900 declines sdpa_fp8 for q/k/v (4, 16, 8192, 128) e4m3, causal=True"
    text = markdown({"gpu": "H200"}, ["A"], rows)
    header = next(x for x in text.splitlines() if x.startswith("| N "))
    assert header.startswith("| N | d | causal | A | cudnn | cudnn_fp8 | fa4 | cudnn/A | cudnn_fp8/A | fa4/A |")
    assert "cudnn_fp8 2.0e-02" in text
    assert "cudnn_fp8 at d = 128, causal=True: cuDNN 91900 declines" in text
    assert "cudnn_fp8: frontend 1.14.0, cuDNN 91900, bf16 output" in text
    assert set(pick([_write(tmp_path, "o1", rows)], "A", 0.0)[1]) == {"A"}, "a reference is never picked"
