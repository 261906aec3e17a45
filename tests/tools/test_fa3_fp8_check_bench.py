"""fa3_fp8_check_bench.py's table (CPU; made-up rows)."""

from __future__ import annotations

from fa3_fp8_check_bench import markdown


def test_the_fp8_bench_table_carries_cudnn_fp8_or_why_not():
    """fa3_fp8_check_bench's table: cuDNN's FP8 figure and ours over it where it was timed, the reason where not."""
    row = dict(kind="attention", B=4, H=16, N=8192, d=128, causal=False, bf16_tflops=600, fp8_per_tensor_tflops=700,
               fp8_per_head_tflops=700, fp8_per_tile_tflops=650, fp8_over_bf16=1.1, fp8kmajor_per_tensor_tflops=920,
               fp8kmajor_per_head_tflops=910, fp8kmajor_per_tile_tflops=800, fp8kmajor_over_bf16=1.5,
               pack_vt_ms=0.09, fp8kmajor_per_tensor_ms=2.4, cudnn_fp8_tflops=900.0, cudnn_fp8_ms=2.45,
               cudnn_fp8_o="e4m3")
    declined = {k: v for k, v in row.items() if not k.startswith("cudnn_fp8")}
    declined.update(causal=True, cudnn_fp8_declined="cudnn-frontend does not import (ImportError: no cudnn)")
    text = markdown({"gpu": "H200"}, [], [row, declined], "cmd").splitlines()
    assert next(x for x in text if "| False |" in x).endswith("| 0.090 | 900 | 1.02 |")
    assert next(x for x in text if "| True |" in x).endswith("| 0.090 | - | - |")
    assert "cuDNN FP8 not timed: cudnn-frontend does not import (ImportError: no cudnn)" in text
    assert any(x.startswith("cuDNN FP8: ") and x.endswith("e4m3 output.") for x in text)
