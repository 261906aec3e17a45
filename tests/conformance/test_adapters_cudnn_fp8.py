"""The cudnn-fp8 adapter on the CPU: what it claims, why it is unavailable here, what it declines before asking cuDNN
(the adapter itself is judged on the H200: reports/gpu)."""

from __future__ import annotations

import sys

import pytest

from attention_conformance.adapters.cudnn_fp8 import CudnnFP8, cudnn_frontend
from attention_conformance.adapters.registry import load
from attention_conformance.cases import catalog
from attention_conformance.cases.case import FP8Spec


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


def test_bindings_name_every_graph_tensor_and_execute_hands_them_over(monkeypatch):
    """`SdpaFp8Graph.bindings` / `execute` with the frontend stood in for: every tensor of the graph gets its data
    (descales, P's scale 2^8 and its inverse, the output scale), on torch's current stream and the process's handle."""
    import torch

    from attention_conformance.adapters import cudnn_fp8 as cf

    calls = {}

    class Frontend:
        @staticmethod
        def set_stream(handle, stream):
            calls["stream"] = (handle, stream)

    class Graph:
        @staticmethod
        def execute(mapping, workspace, handle):
            calls["execute"] = (mapping, workspace, handle)

    names = ("q", "k", "v", "o", "stats", "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o",
             "amax_s", "amax_o")
    g = cf.SdpaFp8Graph(Frontend, Graph, {n: f"<{n}>" for n in names}, True, 0)
    q, k, v = (torch.zeros(1, 2, 4, 16) for _ in range(3))
    o, stats = torch.zeros(1, 2, 4, 16), torch.zeros(1, 2, 4, 1)
    data = g.bindings(q, k, v, o, stats, (0.5, 0.25, 2.0), 64.0)
    assert set(data) == set(names)
    got = {n: float(data[n]) for n in names if n.startswith(("descale", "scale"))}
    assert got == dict(descale_q=0.5, descale_k=0.25, descale_v=2.0, descale_s=1 / cf.SCALE_S, scale_s=cf.SCALE_S,
                       scale_o=64.0)
    assert data["q"] is q and data["o"] is o and data["stats"] is stats
    monkeypatch.setattr(cf, "cudnn_handle", lambda: "<handle>")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("S", (), {"cuda_stream": 7})())
    g.execute(data, "<workspace>")
    mapping, workspace, handle = calls["execute"]
    assert mapping == {f"<{n}>": data[n] for n in names} and workspace == "<workspace>" and handle == "<handle>"
    assert calls["stream"] == ("<handle>", 7)
