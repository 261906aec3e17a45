"""power_probe's value classes, table and argument checks (CPU; the timing itself needs the H200)."""

from __future__ import annotations

import power_probe
import pytest
import torch


def _inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, 64, 128, generator=gen, dtype=torch.bfloat16) for _ in range(3)]


def test_value_classes_change_only_what_they_say():
    t = _inputs()
    cls = power_probe.VALUE_CLASSES
    assert all(a is b for a, b in zip(cls["randn"][1](t), t))
    q, k, v = cls["kv_half_zero"][1](t)
    assert torch.equal(q, t[0]) and not k[..., 64:].any() and not v[..., 64:].any()
    assert torch.equal(k[..., :64], t[1][..., :64]) and torch.equal(v[..., :64], t[2][..., :64])
    q, k, v = cls["kv_sparse"][1](t)
    zero = (k == 0).float().mean().item()
    assert torch.equal(q, t[0]) and 0.4 < zero < 0.6
    assert torch.equal(k[k != 0], t[1][k != 0])
    assert all(not x.any() for x in cls["zeros"][1](t))
    assert all(torch.allclose(a.float(), 0.01 * b.float(), rtol=1e-2) for a, b in zip(cls["scaled_0.01"][1](t), t))


def test_markdown_reports_speed_clock_and_ratio_to_randn():
    row = {"d": 128, "ours:randn_tflops": 650.0, "ours:randn_mhz": 1665.0, "ours:randn_watts": 690.0,
           "ours:zeros_tflops": 760.0, "ours:zeros_mhz": 1905.0, "ours:zeros_watts": 477.0,
           "cudnn:randn_tflops": 600.0, "cudnn:randn_mhz": 1665.0, "cudnn:randn_watts": 689.0}
    md = power_probe.markdown({"gpu": "H200"}, "attn_fa3_fwd", ["randn", "zeros"], [row])
    assert "| 128 | randn | 650 | 1665 / 690 | 1.000 | 600 | 1665 / 689 | 1.000 |" in md
    assert "| 128 | zeros | 760 | 1905 / 477 | 1.169 | - | - | - |" in md
    assert "`zeros` Q, K, V zero" in md


@pytest.mark.parametrize("args", [["--d", "96"], ["--d", "x"], ["--classes", "zeros,randn"],
                                  ["--classes", "randn,nope"], ["--launcher", "attn_fa2_fwd"], ["--rounds", "0"]])
def test_usage_errors_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        power_probe.main(args)
    assert e.value.code == 2
    assert "power_probe" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_a_gpu_exits_2(capsys):
    assert power_probe.main(["--d", "128"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
