"""reports/benchmarks/cudnn_fp8.py: cuDNN's FP8 forward as a vendor reference. On the CPU: what it refuses and how it
says so; on a GPU with cudnn-frontend installed: its output against the float64 attention of the dequantized codes."""

from __future__ import annotations

import sys

import pytest
import torch

from attention_conformance.reports.benchmarks.cudnn_fp8 import CudnnFp8Unavailable, cudnn_fp8


def _codes(shape=(1, 2, 256, 128), seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen).to(torch.float8_e4m3fn) for _ in range(3)]


def test_inputs_must_be_contiguous_e4m3_of_one_shape():
    q, k, v = _codes()
    with pytest.raises(ValueError, match="contiguous e4m3"):
        cudnn_fp8(q, k, v.to(torch.bfloat16), False)
    with pytest.raises(ValueError, match=r"\(1, 2, 256, 128\)"):
        cudnn_fp8(q, k[:, :, :128], v, False)


def test_a_missing_frontend_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudnn", None)  # import cudnn raises ImportError
    with pytest.raises(CudnnFp8Unavailable, match="cudnn-frontend does not import"):
        cudnn_fp8(*_codes(), False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_fp8_computes_attention_of_the_codes(causal):
    pytest.importorskip("cudnn", reason="cudnn-frontend is not installed")
    q, k, v = (t.cuda() for t in _codes())
    try:
        c8 = cudnn_fp8(q, k, v, causal)
    except CudnnFp8Unavailable as e:
        pytest.skip(str(e))
    c8.run()
    torch.cuda.synchronize()
    qd, kd, vd = (t.double() for t in (q, k, v))
    s = qd @ kd.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ vd
    err = float((c8.output().double() - ref).norm() / ref.norm())
    # P rounded to e4m3 (3 mantissa bits) gives ~1e-2; a wrong scale, mask or layout gives O(1)
    assert err < 5e-2, f"cuDNN FP8 ({c8.o_dtype} output) relative error {err:.3e}"


def test_the_fp8_bench_table_carries_cudnn_fp8_or_why_not():
    """fa3_fp8_check_bench's table: cuDNN's FP8 figure and ours over it where it was timed, the reason where not."""
    from attention_conformance.reports.benchmarks.fa3_fp8_check_bench import markdown

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
