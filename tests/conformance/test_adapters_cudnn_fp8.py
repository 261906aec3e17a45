"""The cudnn-fp8 adapter on the CPU: what it claims, why it is unavailable here, what it declines before asking cuDNN
(the adapter itself is judged on the H200: reports/gpu and reports/benchmarks/fa3_fp8/run21_cudnn_fp8.md)."""

from __future__ import annotations

import sys

import pytest

from attention_conformance import catalog
from attention_conformance.adapters.cudnn_fp8 import CudnnFP8, cudnn_frontend
from attention_conformance.case import FP8Spec
from attention_conformance.registry import load


def _fp8_case(**match):
    return next(c for c in catalog.cases("full") if c.fp8 is not None
                and all(getattr(c, k) == v if k != "granularity" else c.fp8.granularity == v for k, v in match.items()))


def test_registered_and_claims_per_tensor_fp8_forward_only():
    a = load("cudnn-fp8")
    caps = a.adapter.capabilities
    assert isinstance(a.adapter, CudnnFP8)
    assert caps.dtypes == frozenset() and caps.fp8 == frozenset({"per_tensor"}) and not caps.backward
    assert caps.lse and not caps.window and not caps.varlen and caps.devices == frozenset({"cuda"})


def test_unavailable_without_cuda_or_frontend(monkeypatch):
    assert "cudnn-fp8 runs on CUDA devices only" in CudnnFP8().unavailable_reason("cpu")
    monkeypatch.setitem(sys.modules, "cudnn", None)
    with pytest.raises(ImportError, match="cudnn-frontend does not import"):
        cudnn_frontend()


def test_declines_what_it_does_not_pass_to_cudnn_before_asking_it():
    """Other granularities and windows (masks, bias, softcap, varlen likewise) by the declared capabilities, before
    cuDNN is asked, so the reasons hold on a machine without it."""
    a = CudnnFP8()
    for gran in ("per_head", "per_tile"):
        reason = a.supports(_fp8_case(granularity=gran), "cuda")
        assert reason and gran in reason, reason
    windowed = next(c for c in catalog.cases("full") if c.fp8 is not None and c.window is not None)
    reason = a.supports(windowed.replace(fp8=FP8Spec(windowed.fp8.format, "per_tensor")), "cuda")
    assert reason and "window" in reason, reason
