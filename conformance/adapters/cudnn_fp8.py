"""cuDNN's FP8 attention forward: cudnn-frontend's ``sdpa_fp8`` graph on the cuDNN library torch loads.

How a case maps onto the graph (oracles/SEMANTICS.md):
- §10 FP8: the case's codes (e4m3fn or e5m2) as Q, K, V with their per-tensor descales (``descale_q/k/v``, float32:
  the float64 descales rounded, noted when that changes them); P is scaled by ``scale_s`` = 2^8 (the max offset)
  before cuDNN rounds it to FP8 and ``descale_s`` = 2^-8 undoes it; O comes back as e4m3 codes of ``O * s_o``
  with ``s_o = 256 / max|v|`` (``scale_o``; `ForwardOutput.out_scale`), the output cuDNN writes on Hopper (a bf16 output
  of ``sdpa_fp8`` needs compute capability 10).
- §2 scale: ``attn_scale``; §4 causal: ``use_causal_mask`` (top-left) or ``use_causal_mask_bottom_right``; §9 GQA:
  K and V with Hkv heads; §12 LSE: the graph's ``Stats`` (natural log, [B, Hq, Lq, 1]).
- Q, K, V are handed over as [B, H, L, D] dims with the strides of the case's layout (contiguous or bshd).
- Not expressed here: windows, masks, bias, softcap, varlen, dv != d, other granularities (NOT_SUPPORTED).

`supports` builds the graph for the case's shapes first and declines with cuDNN's own reason when cuDNN refuses it
(``check_support``: head dims, alignments, formats on this GPU); anything cuDNN builds and then computes wrong is a
FAIL. The output buffer sits between guard bands (`adapters.cuda.GuardedBuffer`): a write past it is a FAIL.

The frontend (``pip install nvidia-cudnn-frontend``, the ``cudnn`` extra) is optional: without it the adapter is
unavailable, with the import error as the reason. `adapters.cudnn_fp8_timed` times the same graph.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.base import (
    Adapter,
    Capabilities,
    CaseInputs,
    ForwardOutput,
    capability_reason,
)
from attention_conformance.adapters.cuda import GuardedBuffer
from attention_conformance.cases.case import ALIGNMENTS, Case

__all__ = ["OUTPUT_TOP", "SCALE_S", "CudnnFP8", "SdpaFp8Graph", "cudnn_frontend", "cudnn_handle", "output_scale",
           "sdpa_fp8_graph"]

#: P's scale before cuDNN rounds it to FP8: 2^8, the max offset of SEMANTICS.md §10
SCALE_S = 256.0
#: where the largest |v| lands in the e4m3 output (below its largest value, 448; O's entries are averages of V's)
OUTPUT_TOP = 256.0


def cudnn_frontend() -> Any:
    """The ``cudnn`` module of cudnn-frontend, after torch has loaded its cuDNN library (which the frontend then
    uses); raises ImportError (with the reason) when it does not import here."""
    if torch is None:
        raise ImportError("torch is not importable in this Python environment")
    torch.backends.cudnn.version()
    try:
        import cudnn
    except Exception as e:  # ImportError, or the frontend's own library lookup failing (OSError)
        raise ImportError(f"cudnn-frontend does not import ({type(e).__name__}: {e})") from e
    return cudnn


def output_scale(v_max: float) -> float:
    """``s_o`` for an FP8 output whose entries are bounded by `v_max` (SEMANTICS.md §10): a power of two putting
    `v_max` at or below `OUTPUT_TOP`."""
    if not np.isfinite(v_max) or v_max <= 0:
        return 1.0
    return float(2.0 ** np.floor(np.log2(OUTPUT_TOP / v_max)))


@dataclass
class SdpaFp8Graph:
    """A built ``sdpa_fp8`` graph (`sdpa_fp8_graph`): `bindings` names the tensors of one call, `execute` runs it."""

    cudnn: Any
    graph: Any
    tensors: dict[str, Any]
    o_fp8: bool
    workspace_size: int

    def bindings(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, stats: torch.Tensor,
                 descales: tuple[float, float, float] = (1.0, 1.0, 1.0), scale_o: float = 1.0) -> dict:
        """The graph's tensors for one call: the codes, the output and statistics buffers, float32 scalars for the
        descales of Q, K and V, P's scale `SCALE_S` and its inverse, the output scale, and cuDNN's two amax outputs
        (NaN until it writes them). Made once per call site, so that timed calls allocate nothing."""
        def scalar(x: float) -> torch.Tensor:
            return torch.full((1, 1, 1, 1), float(x), dtype=torch.float32, device=q.device)

        dq, dk, dv = descales
        return dict(q=q, k=k, v=v, o=o, stats=stats, descale_q=scalar(dq), descale_k=scalar(dk), descale_v=scalar(dv),
                    descale_s=scalar(1.0 / SCALE_S), scale_s=scalar(SCALE_S), scale_o=scalar(scale_o),
                    amax_s=scalar(float("nan")), amax_o=scalar(float("nan")))

    def execute(self, data: dict[str, torch.Tensor], workspace: torch.Tensor) -> None:
        """Run the graph on `data` (`bindings`) on torch's current stream."""
        handle = cudnn_handle()
        self.cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        self.graph.execute({self.tensors[name]: t for name, t in data.items()}, workspace, handle=handle)


def sdpa_fp8_graph(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, attn_scale: float,
                   alignment: str | None, o_fp8: bool, stats: bool = True) -> SdpaFp8Graph:
    """Build cuDNN's FP8 forward for FP8 tensors shaped [B, H, L, D] (any strides cuDNN takes; K and V may have
    fewer heads than Q), causal with `alignment` ("top_left" / "bottom_right") or not (None), O as e4m3 codes
    (`o_fp8`) or bf16, with the softmax statistics when `stats`. Raises the frontend's exception (its words)
    when cuDNN declines the graph."""
    cudnn = cudnn_frontend()
    fmt = {torch.float8_e4m3fn: cudnn.data_type.FP8_E4M3, torch.float8_e5m2: cudnn.data_type.FP8_E5M2}
    if q.dtype not in fmt or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"sdpa_fp8_graph: q, k, v must share an FP8 dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    f32 = cudnn.data_type.FLOAT
    graph = cudnn.pygraph(io_data_type=fmt[q.dtype], intermediate_data_type=f32, compute_data_type=f32)
    tensors = {name: graph.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), data_type=fmt[q.dtype])
               for name, t in (("q", q), ("k", k), ("v", v))}
    scalars = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    tensors.update({name: graph.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
                    for name in scalars})
    o, st, amax_s, amax_o = graph.sdpa_fp8(*(tensors[n] for n in ("q", "k", "v", *scalars)), generate_stats=stats,
                                           attn_scale=attn_scale, use_causal_mask=alignment == "top_left",
                                           use_causal_mask_bottom_right=alignment == "bottom_right", name="sdpa_fp8")
    B, H, L = q.shape[:3]
    o.set_output(True).set_dim([B, H, L, v.shape[3]]).set_stride([H * L * v.shape[3], L * v.shape[3], v.shape[3], 1])
    o.set_data_type(cudnn.data_type.FP8_E4M3 if o_fp8 else cudnn.data_type.BFLOAT16)
    tensors["o"] = o
    if stats:
        st.set_output(True).set_data_type(f32)
        tensors["stats"] = st
    for name, a in (("amax_s", amax_s), ("amax_o", amax_o)):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
        tensors[name] = a
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return SdpaFp8Graph(cudnn, graph, tensors, o_fp8, int(graph.get_workspace_size()))


@functools.cache
def cudnn_handle() -> Any:
    """This process's cuDNN handle for the graphs here (made once; `SdpaFp8Graph.execute` sets its stream)."""
    return cudnn_frontend().create_handle()


def _fp8_dtype(case: Case) -> torch.dtype:
    return torch.float8_e4m3fn if case.fp8.format == "e4m3fn" else torch.float8_e5m2


class CudnnFP8(Adapter):
    """cuDNN's FP8 attention forward through cudnn-frontend (see the module docstring)."""

    name = "cudnn-fp8"
    description = ("cuDNN's FP8 attention forward (cudnn-frontend sdpa_fp8 on torch's cuDNN): per-tensor descales, "
                   "P scaled by 2^8 before its FP8 rounding, O as e4m3 codes with an output scale, Stats as LSE")
    isolate: ClassVar[bool] = True
    marks_code_under_test: ClassVar[bool] = True
    process_group: ClassVar[str | None] = tc.TORCH_PROCESS_GROUP
    capabilities = Capabilities(
        dtypes=frozenset(), devices=frozenset({"cuda"}), dv_ne_d=False, alignments=frozenset(ALIGNMENTS),
        gqa=True, custom_scale=True, layouts=frozenset({"contiguous", "bshd"}), lse=True,
        fp8=frozenset({"per_tensor"}), fp8_formats=frozenset({"e4m3fn", "e5m2"}),
        library_check="cuDNN's check_support of the sdpa_fp8 graph built for the case's shapes (head dims, alignments "
                      "and formats on this GPU)",
    )

    def unavailable_reason(self, device: str) -> str | None:
        reason = tc.cuda_unavailable_reason(device, self.name, (9, 0), "cuDNN's FP8 attention: sm90 and newer")
        if reason:
            return reason
        try:
            cudnn_frontend()
        except ImportError as e:
            return str(e)
        return None

    def version(self) -> str:
        try:
            cudnn = cudnn_frontend()
        except ImportError:
            return "unknown"
        return f"cudnn-frontend {getattr(cudnn, '__version__', '?')}, cuDNN {torch.backends.cudnn.version()}"

    def _tensors(self, inputs: CaseInputs, case: Case, device: str):
        fp8 = inputs.fp8
        if fp8 is None:
            raise ValueError(f"FP8 case {case.id} without CaseInputs.fp8")
        return tc.materialize(CaseInputs(q=fp8["q8"], k=fp8["k8"], v=fp8["v8"]), case, device, dtype=_fp8_dtype(case))

    @staticmethod
    def _graph_for(case: Case, m) -> SdpaFp8Graph:
        scale = case.scale if case.scale is not None else case.d ** -0.5  # SEMANTICS.md §2 (cuDNN's default is 1)
        return sdpa_fp8_graph(m.q, m.k, m.v, attn_scale=scale, alignment=case.alignment if case.causal else None,
                              o_fp8=True)

    def supports(self, case: Case, device: str) -> str | None:
        reason = capability_reason(self.capabilities, case, device)
        if reason:
            return reason
        if self.unavailable_reason(device):
            return None  # the engine reports the adapter unavailable
        B, Hq, Hkv, Lq, Lk = case.B, case.Hq, case.Hkv, case.Lq, case.Lk
        shapes = CaseInputs(q=np.zeros((B, Hq, Lq, case.d)), k=np.zeros((B, Hkv, Lk, case.d)),
                            v=np.zeros((B, Hkv, Lk, case.dv)))
        m = tc.materialize(shapes, case, device, dtype=_fp8_dtype(case))
        try:
            self._graph_for(case, m)
        except Exception as e:  # cuDNN's check_support / build refusal, in its words
            return f"cuDNN declines sdpa_fp8 for this case: {str(e).splitlines()[0][:400]}"
        return None

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        m = self._tensors(inputs, case, device)
        fp8 = inputs.fp8
        notes: list[str] = []
        descales = []
        for name in ("q_descale", "k_descale", "v_descale"):
            d64 = float(np.asarray(fp8[name], dtype=np.float64).reshape(-1)[0])
            d32 = float(np.float32(d64))
            descales.append(d32)
            if d32 != d64:
                notes.append(f"{name} rounded to float32 for cuDNN (relative change {abs(d32 / d64 - 1):.1e})")
        v_max = float(np.abs(np.asarray(fp8["v8"], dtype=np.float64)).max(initial=0.0)) * descales[2]
        s_o = output_scale(v_max)
        graph = self._graph_for(case, m)
        o = GuardedBuffer("out", (case.B, case.Hq, case.Lq, case.dv), torch.float8_e4m3fn, device)
        stats = GuardedBuffer("lse", (case.B, case.Hq, case.Lq, 1), torch.float32, device)
        data = graph.bindings(m.q, m.k, m.v, o.view, stats.view, tuple(descales), s_o)
        named = {**m.named(), **{n: data[n] for n in ("descale_q", "descale_k", "descale_v")}}
        before = tc.snapshot(named)
        workspace = torch.empty(max(graph.workspace_size, 1), dtype=torch.uint8, device=device)
        with tc.code_under_test(device):
            graph.execute(data, workspace)
        oob = [r for r in (o.oob_report(), stats.oob_report()) if r]
        if oob:
            raise AssertionError("; ".join(oob))
        out = tc.to_numpy(o.view) / s_o
        lse = tc.to_numpy(stats.view)[..., 0]
        notes.append(f"O written as e4m3 codes of O x {s_o:g} (max|v| = {v_max:.4g}); amax(O) reported by cuDNN "
                     f"{float(data['amax_o'].item()):.4g}")
        return ForwardOutput(out=out, lse=lse, out_dtype="float8_e4m3fn", out_scale=s_o,
                             unwritten=int(np.isnan(out).sum() + np.isnan(lse).sum()),
                             mutated_inputs=tc.changed(before, named), lse_convention="-inf", notes=notes,
                             out_device=str(o.view.device))

