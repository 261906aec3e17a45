"""FlexAttention (`torch.nn.attention.flex_attention`): every semantic of a case through mask_mod / score_mod.

How a case (oracles/SEMANTICS.md) maps onto FlexAttention:
- §4 causal, both alignments, and §5 windows: a ``mask_mod`` on the indices, around the aligned
  diagonal ``c(i) = i + (sk - sq)`` (bottom-right) or ``c(i) = i`` (top-left), with ``sq, sk`` each
  sequence's real lengths (§7 varlen: per-batch length tensors indexed by ``b``; keys ``j >= sk``
  masked; padded query rows fully masked, SEMANTICS.md §17 - the engine does not compare them).
- §19 chunked attention: the same ``mask_mod`` keeps ``floor(c(i) / C) == floor(j / C)``.
- §18 sinks are not claimed: a ``score_mod`` rewrites the scores of existing keys and cannot add a term
  with no value to the denominator; expressing one needs a zero K/V row appended to the inputs with its
  score set to the sink (a different call, with its own Lk), which is not what a flex user's kernel computes.
- §6 boolean mask: the ``mask_mod`` indexes a bool tensor; additive bias: the ``score_mod`` adds a
  tensor entry. §3 order: scale (flex applies ``scale`` before ``score_mod``), softcap
  ``c * tanh(s / c)`` in the ``score_mod``, then bias, then the mask.
- §9 GQA: ``enable_gqa=True``.
- §12 LSE: ``return_aux=AuxRequest(lse=True)`` (``return_lse=True`` on torch builds without
  AuxRequest). FlexAttention computes in base 2 internally and its Python wrapper multiplies by
  ln 2 before returning (torch/nn/attention/flex_attention.py, ``_finalize_outputs``), so the value
  returned is the natural-log LSE the contract asks for; the adapter tests check this against the
  oracle. Fully masked rows (§8): flex returns O = 0 and LSE = -inf (measured on CPU, torch 2.13).
- Backward (§13): autograd through the compiled kernel on CUDA; FlexAttention has no CPU backward
  (torch raises "FlexAttention does not support backward on CPU"), so it is not declared on CPU.

Execution: eager ``flex_attention`` on CPU (torch compiles it with the eager backend internally),
``torch.compile(flex_attention, dynamic=False)`` on CUDA, with dynamo's recompile limit raised so a
long run never silently drops to the unfused path.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.base import (
    Adapter,
    BackwardOutput,
    Capabilities,
    CaseInputs,
    ForwardOutput,
    capability_reason,
)
from attention_conformance.cases.case import ALIGNMENTS, LAYOUTS, Case

__all__ = ["CUDA_MIN_HEAD_DIM", "FlexArgs", "FlexAttention", "flex_args", "flex_mods"]

_CPU_CAPS = Capabilities(
    dtypes=frozenset({"float64", "float32", "float16", "bfloat16"}),
    devices=frozenset({"cpu"}),
    alignments=frozenset(ALIGNMENTS),
    window=True,
    mask=True,
    bias=True,
    softcap=True,
    gqa=True,
    varlen=True,
    layouts=frozenset(LAYOUTS),
    lse=True,
    backward=False,
    padding_as_mask=True,  # varlen reaches flex as a mask_mod over the padded tensors (SEMANTICS.md §17)
    chunk=True,
)
#: the smallest head dim (d and dv) the compiled CUDA kernel lowers (inductor raises NYI below it)
CUDA_MIN_HEAD_DIM = 16

# the CPU claims, less float64 and head dims below CUDA_MIN_HEAD_DIM (torch 2.11 on the H200: LoweringException "NYI:
# embedding dimension of the query, key, and value must be at least 16"), plus the backward only the compiled CUDA
# path has
_CUDA_CAPS = dataclasses.replace(
    _CPU_CAPS,
    dtypes=frozenset({"float32", "float16", "bfloat16"}),
    devices=frozenset({"cuda"}),
    min_head_dim=CUDA_MIN_HEAD_DIM,
    backward=True,
)


def _full(array: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    a = np.asarray(array)
    while a.ndim < 4:
        a = a[None]
    return np.array(np.broadcast_to(a, (shape[0], a.shape[1], shape[2], shape[3])))


@dataclass(frozen=True)
class FlexArgs:
    """The arguments of one ``flex_attention`` call: the block mask's ``mask_mod`` (over ``mask_heads`` heads),
    the ``score_mod``, ``scale`` and ``enable_gqa``."""

    mask_mod: Callable | None
    mask_heads: int
    score_mod: Callable | None
    scale: float | None
    enable_gqa: bool


def flex_args(case: Case, mask: np.ndarray | None, bias: np.ndarray | None, device: str, score_dtype) -> FlexArgs:
    """The call `case` makes (`flex_mods` and the keywords); no kernel runs (the mods are evaluated by torch when
    it builds the block mask and compiles the kernel)."""
    mask_mod, mask_heads, score_mod = flex_mods(case, mask, bias, device, score_dtype)
    return FlexArgs(mask_mod, mask_heads, score_mod, case.scale, case.Hq != case.Hkv)


def flex_mods(case: Case, mask: np.ndarray | None, bias: np.ndarray | None, device: str, score_dtype):
    """(mask_mod or None, mask_heads, score_mod or None) for `case`; see the module docstring."""
    B, Lq, Lk = case.B, case.Lq, case.Lk
    shape = (B, case.Hq, Lq, Lk)
    mask_t = None
    mask_heads = 1
    if mask is not None:
        full = _full(mask.astype(bool), shape)
        mask_heads = full.shape[1]
        mask_t = torch.from_numpy(full).to(device)
    sq_t = sk_t = None
    if case.varlen:
        sq = case.seqlens_q if case.seqlens_q is not None else (Lq,) * B
        sk = case.seqlens_k if case.seqlens_k is not None else (Lk,) * B
        sq_t = torch.tensor(sq, dtype=torch.int64, device=device)
        sk_t = torch.tensor(sk, dtype=torch.int64, device=device)
    bottom_right = case.alignment == "bottom_right"
    left, right = case.window if case.window is not None else (None, None)
    if case.causal:
        right = 0
    structural = case.causal or case.window is not None or case.varlen or case.chunk is not None
    chunk = case.chunk

    mask_mod = None
    if structural or mask_t is not None:

        def mask_mod(b, h, q_idx, kv_idx):
            if sk_t is not None:
                sq_b, sk_b = sq_t[b], sk_t[b]
                keep = kv_idx < sk_b
            else:
                sq_b, sk_b = Lq, Lk
                keep = kv_idx >= 0
            diag = q_idx + (sk_b - sq_b) if bottom_right else q_idx
            if right is not None:
                keep = keep & (kv_idx <= diag + right)
            if left is not None:
                keep = keep & (kv_idx >= diag - left)
            if chunk is not None:  # §19: same chunk of the aligned positions (floor division)
                keep = keep & (torch.div(diag, chunk, rounding_mode="floor")
                               == torch.div(kv_idx, chunk, rounding_mode="floor"))
            if mask_t is not None:
                keep = keep & mask_t[b, h if mask_heads > 1 else 0, q_idx, kv_idx]
            if sq_t is not None:
                keep = keep & (q_idx < sq_b)  # padded query rows are fully masked (SEMANTICS.md §17), not compared
            return keep

    score_mod = None
    cap = case.softcap
    bias_t = None
    bias_heads = 1
    if bias is not None:
        full = _full(tc.neutral_padded_bias(bias, case), shape)
        bias_heads = full.shape[1]
        bias_t = torch.from_numpy(full).to(score_dtype).to(device)
    if cap is not None or bias_t is not None:

        def score_mod(score, b, h, q_idx, kv_idx):
            if cap is not None:
                score = cap * torch.tanh(score / cap)
            if bias_t is not None:
                score = score + bias_t[b, h if bias_heads > 1 else 0, q_idx, kv_idx]
            return score

    return mask_mod, mask_heads, score_mod


class FlexAttention(Adapter):
    """torch FlexAttention: eager on CPU, torch.compile on CUDA."""

    name = "torch-flex"
    description = "torch FlexAttention with mask_mod/score_mod (eager on CPU, torch.compile on CUDA)"
    capabilities = _CPU_CAPS
    marks_code_under_test = True  # torch's flex calls (and autograd through them) are the code under test
    process_group: ClassVar[str | None] = tc.TORCH_PROCESS_GROUP
    _compiled: dict = {}

    def __init__(self) -> None:
        on_cuda = torch is not None and torch.cuda.is_available()
        self.capabilities = _CUDA_CAPS if on_cuda else _CPU_CAPS
        self.isolate = on_cuda  # compiled Triton kernels run in a worker process on CUDA
        self.builds_per_shape = on_cuda  # torch.compile(dynamic=False): one Inductor build per shape and mask

    def version(self) -> str:
        return f"torch {torch.__version__}" if torch is not None else "torch missing"

    def caps_for(self, device: str) -> Capabilities:
        return _CPU_CAPS if device.startswith("cpu") else _CUDA_CAPS

    def unavailable_reason(self, device: str) -> str | None:
        reason = tc.device_unavailable_reason(device)
        if reason:
            return reason
        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError as exc:
            return f"torch.nn.attention.flex_attention is not importable: {exc}"
        if device.startswith("cuda"):
            cc = tc.cuda_capability()
            if cc is not None and cc < (8, 0):
                return f"compiled FlexAttention is only tested by torch on sm80+; this GPU is sm{cc[0]}{cc[1]}"
        return None

    def supports(self, case: Case, device: str) -> str | None:
        return self.unavailable_reason(device) or self.claim_reason(case, device)

    def claim_reason(self, case: Case, device: str) -> str | None:
        """The decline `supports` takes from the declarations alone, without this machine: None means claimed."""
        return capability_reason(self.caps_for(device), case, device)

    # -- the call ---------------------------------------------------------------------------------
    def _function(self, device: str):
        from torch.nn.attention.flex_attention import flex_attention

        if device.startswith("cpu"):
            return flex_attention
        if "cuda" not in self._compiled:
            import torch._dynamo.config as dcfg

            for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                         "accumulated_cache_size_limit"):
                if hasattr(dcfg, knob):
                    setattr(dcfg, knob, max(getattr(dcfg, knob), 100_000))
            FlexAttention._compiled["cuda"] = torch.compile(flex_attention, dynamic=False)
        return self._compiled["cuda"]

    def _run(self, t: tc.Materialized, inputs: CaseInputs, case: Case, device: str):
        import torch.nn.attention.flex_attention as fa_mod

        score_dtype = torch.float64 if case.dtype == "float64" else torch.float32
        a = flex_args(case, inputs.mask, inputs.bias, device, score_dtype)
        block_mask = None
        if a.mask_mod is not None:
            with tc.code_under_test(device):  # torch evaluates the mask into its block structure
                block_mask = fa_mod.create_block_mask(
                    a.mask_mod, case.B, case.Hq if a.mask_heads > 1 else None, case.Lq, case.Lk, device=device)
        with tc.code_under_test(device):
            fn = self._function(device)
        kwargs = dict(score_mod=a.score_mod, block_mask=block_mask, scale=a.scale, enable_gqa=a.enable_gqa)
        aux_request = getattr(fa_mod, "AuxRequest", None)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
            warnings.filterwarnings("ignore", message=".*return_lse is deprecated.*")
            with tc.code_under_test(device):
                if aux_request is not None:
                    out, aux = fn(t.q, t.k, t.v, return_aux=aux_request(lse=True), **kwargs)
                    lse = aux.lse
                else:
                    out, lse = fn(t.q, t.k, t.v, return_lse=True, **kwargs)
        return out, lse, block_mask

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        t = tc.materialize(inputs, case, device)
        handed = {"q": t.q, "k": t.k, "v": t.v}
        before = tc.snapshot(handed)
        with tc.KernelRecorder(device) as rec:
            out, lse, _ = self._run(t, inputs, case, device)
        notes = [rec.error] if rec.error else []
        return ForwardOutput(
            out=tc.to_numpy(out),
            lse=tc.to_numpy(lse),
            out_dtype=tc.dtype_name(out.dtype),
            out_device=str(out.device),
            kernels=rec.names,
            mutated_inputs=tc.changed(before, handed),
            lse_convention="-inf",
            notes=notes,
        )

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        if device.startswith("cpu"):
            raise NotImplementedError("FlexAttention has no CPU backward (torch raises on requires_grad inputs)")
        if inputs.dout is None:
            raise ValueError(f"{self.name}.backward needs inputs.dout (case {case.id})")
        t = tc.materialize(inputs, case, device, requires_grad=True)
        handed = {"q": t.q, "k": t.k, "v": t.v, "dout": t.dout}
        before = tc.snapshot(handed)
        with torch.enable_grad(), tc.KernelRecorder(device) as rec:
            out, lse, _ = self._run(t, inputs, case, device)
            with tc.code_under_test(device):
                grads = torch.autograd.grad(out, (t.q, t.k, t.v), grad_outputs=t.dout)
        return tc.autograd_output(out, grads, rec, tc.changed(before, handed), lse=lse,
                                  notes=[rec.error] if rec.error else [])
