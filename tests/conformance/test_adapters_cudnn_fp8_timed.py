"""conformance/adapters/cudnn_fp8_timed.py: cuDNN's FP8 forward as a timed vendor reference. On the CPU: what it
refuses and how it says so; on a GPU with cudnn-frontend: its output against the float64 attention of the codes."""

from __future__ import annotations

import sys

import pytest
import torch

from attention_conformance.adapters.cudnn_fp8_timed import CudnnFp8Unavailable, cudnn_fp8


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

