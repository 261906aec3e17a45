"""cuDNN's FP8 attention forward (cudnn-frontend's ``sdpa_fp8`` graph) as a timed vendor reference for the FA3 FP8
kernel: the same e4m3 codes, per-tensor descales, the same shape, in the same process (``tox -e bench``'s FP8 groups,
tests/kernels/test_cuda_bench.py, and the lab's A/B drivers in tools/).

cuDNN's FP8 forward takes per-tensor descales of Q, K, V and of the rounded probabilities, and a scale for each
(``scale_s``: P is multiplied by it before it is rounded to e4m3, ``descale_s`` undoes it after P V). Here the input
descales are 1 (the codes are the values) and ``scale_s = 2^8``, the max offset of SEMANTICS.md §10 (P in [0, 256]
before rounding, as the FA3 kernel rounds it). The output is requested in bf16, as the FA3 kernel writes it, and
cuDNN's FP8 output with ``scale_o = 1`` where cuDNN declines bf16; `CudnnFp8.o_dtype` says which. The softmax
statistics are generated (the FA3 kernel writes its LSE).

The graph is the conformance adapter's (`adapters.cudnn_fp8.sdpa_fp8_graph`, ``cudnn-fp8``: the same call judged
against the oracle); this module only builds it on given codes and hands back a callable to time. The frontend is an
optional dependency (``pip install nvidia-cudnn-frontend``, the ``cudnn`` extra); it runs on torch's own cuDNN
library. Every failure to build a graph is a `CudnnFp8Unavailable` naming the shape and cuDNN's reason, which the
benchmarks print and record instead of a figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attention_conformance.adapters.cudnn_fp8 import cudnn_frontend, sdpa_fp8_graph

__all__ = ["CudnnFp8", "CudnnFp8Unavailable", "cudnn_fp8"]


class CudnnFp8Unavailable(RuntimeError):
    """cudnn-frontend is missing, or cuDNN declined the graph (the message says which, and for what shape)."""


@dataclass
class CudnnFp8:
    """One built ``sdpa_fp8`` graph: ``run()`` computes ``out`` (and the statistics) from the codes it was built on."""

    run: Callable[[], None]
    out: torch.Tensor
    o_dtype: str
    version: str
    #: why cuDNN declined the bf16 output, where it did ("" otherwise)
    bf16_declined: str = ""

    def output(self) -> torch.Tensor:
        """The output in float32, in the inputs' units (an FP8 output is read back through its scale of 1)."""
        return self.out.float()


def cudnn_fp8(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, causal: bool) -> CudnnFp8:
    """cuDNN's FP8 forward on the e4m3 codes ``q8, k8, v8`` ([B, H, N, d], contiguous, one head per K / V head;
    causal: top-left, as `torch.nn.functional.scaled_dot_product_attention`'s ``is_causal`` on square inputs), with
    per-tensor descales of 1 and ``scale_s`` = `adapters.cudnn_fp8.SCALE_S`. Raises `CudnnFp8Unavailable` with the
    reason when the frontend is missing or cuDNN declines every variant of the graph."""
    shape = f"q/k/v {tuple(q8.shape)} e4m3, causal={causal}"
    if not (q8.shape == k8.shape == v8.shape and all(t.dtype == torch.float8_e4m3fn and t.is_contiguous()
                                                     for t in (q8, k8, v8))):
        raise ValueError(f"cudnn_fp8: q8, k8, v8 must be contiguous e4m3 tensors of one shape, got "
                         f"{[(tuple(t.shape), t.dtype) for t in (q8, k8, v8)]}")
    try:
        cudnn = cudnn_frontend()
    except ImportError as e:
        raise CudnnFp8Unavailable(str(e)) from e
    reasons = []
    for o_fp8 in (False, True):
        try:
            graph = sdpa_fp8_graph(q8, k8, v8, attn_scale=q8.shape[-1] ** -0.5,
                                   alignment="top_left" if causal else None, o_fp8=o_fp8)
            break
        except Exception as e:  # cudnnGraphNotSupportedError and friends: try the FP8 output, then give up
            reasons.append(f"{'e4m3' if o_fp8 else 'bf16'} output: {str(e).splitlines()[0][:300]}")
    else:
        raise CudnnFp8Unavailable(f"cuDNN {torch.backends.cudnn.version()} declines sdpa_fp8 for {shape}: "
                                  + "; ".join(reasons))
    B, H, N, d = q8.shape
    out = torch.empty(B, H, N, d, device=q8.device, dtype=torch.float8_e4m3fn if graph.o_fp8 else torch.bfloat16)
    stats = torch.empty(B, H, N, 1, device=q8.device, dtype=torch.float32)
    data = graph.bindings(q8, k8, v8, out, stats)
    workspace = torch.empty(max(graph.workspace_size, 1), device=q8.device, dtype=torch.uint8)

    def run() -> None:
        graph.execute(data, workspace)

    return CudnnFp8(run, out, "e4m3" if graph.o_fp8 else "bf16", f"frontend {getattr(cudnn, '__version__', '?')}, "
                    f"cuDNN {torch.backends.cudnn.version()}", "; ".join(reasons))
