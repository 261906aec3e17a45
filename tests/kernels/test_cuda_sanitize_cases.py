"""The compute-sanitizer case set's command lines (CPU; the cases themselves need the GPU: `tox -e sanitize`, and the
lab's variant builds through kernels/cuda/lab/sanitize.py)."""

from __future__ import annotations

import pytest
from kernel_helpers import lab_module_or_skip

from attention_conformance.kernels.cuda.sanitize_cases import CASES


def test_unknown_lab_variant_is_a_usage_error():
    """The lab's sanitize run takes a variant name of the lab's tables; anything else exits 2 naming the known
    builds, before any library or device is looked for."""
    lab_module_or_skip()
    from attention_conformance.kernels.cuda.lab.sanitize import main

    with pytest.raises(SystemExit) as e:
        main(["--fa3-variant", "fastest"])
    assert e.value.code == 2


def test_cases_reach_past_one_wave_of_ctas():
    """The FA3 forward and the FP8 forward (V k-major) each have a case with more work tiles than the H200's 132
    SMs, so that a persistent build's CTAs take several (counted with the largest CTA tile, 192 rows: a lower
    bound)."""
    for launcher in ("attn_fa3_fwd", "attn_fa3_fp8_fwd"):
        most = max(s["B"] * s["Hq"] * -(-s["Lq"] // 192) for name, s in CASES if name == launcher and
                   (launcher == "attn_fa3_fwd" or s.get("vt")))
        assert most > 132, launcher


def test_a_lab_variant_runs_only_its_own_launcher(monkeypatch):
    """The lab runner sends the variant's launcher to the lab build and every other launcher of a case (the FA2
    forward a backward case runs first) to the shipped one, whose declines stay failures."""
    from attention_conformance.kernels import cuda_lib

    lab = lab_module_or_skip()
    from attention_conformance.kernels.cuda.lab.sanitize import runner_for

    seen = []
    monkeypatch.setattr(cuda_lib, "call", lambda name, p: seen.append(("shipped", name)))
    monkeypatch.setattr(lab, "call_fa3_fwd", lambda p, v: seen.append(("lab", v)))
    monkeypatch.setattr(lab, "call_fa3_bwd", lambda p, v, deterministic: seen.append(("lab", v, deterministic)))
    runner_for("fa3_variant", "no_ws")("attn_fa3_fwd", None)
    runner_for("fa3_variant", "no_ws")("attn_fa2_fwd", None)
    runner_for("fa3_bwd_variant", "rows64")("attn_fa3_bwd_deterministic", None)
    assert seen == [("lab", "no_ws"), ("shipped", "attn_fa2_fwd"), ("lab", "rows64", True)]
