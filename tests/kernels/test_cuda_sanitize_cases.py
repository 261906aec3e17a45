"""The compute-sanitizer case set's command line (CPU; the cases themselves need the GPU: `tox -e sanitize`)."""

from __future__ import annotations

import pytest

from attention_conformance.kernels.cuda.sanitize_cases import CASES, main, variant_of


def test_unknown_fa3_variant_is_a_usage_error():
    """``--fa3-variant`` takes a key of `cuda_lib.FA3_VARIANTS`; anything else exits 2 naming the known builds,
    before any device is looked for."""
    pytest.importorskip("torch")
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


def test_a_variant_reaches_only_its_own_launcher():
    """``--fa3-variant`` picks the FA3 forward's build and ``--fp8-variant`` the FP8 forward's; any other launcher named
    beside them runs itself, so its declines stay failures rather than skips."""
    assert variant_of("attn_fa3_fwd", "no_ws", "persistent") == "no_ws"
    assert variant_of("attn_fa3_fp8_fwd", "no_ws", "persistent") == "persistent"
    assert variant_of("attn_fa2_fwd", "no_ws", "persistent") is None
    assert variant_of("attn_fa3_bwd", None, "persistent") is None
