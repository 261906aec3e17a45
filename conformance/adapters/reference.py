"""Adapters for the NumPy reference kernels (kernels/reference): FA1, FA2, FA3, FA3 FP8, split-KV.

Each adapter wraps one kernel module; pass ``kernel_module=`` to build the same adapter on another
module with the same functions (the mutation tests build adapters on mutated copies). Inputs are
used as given (every layout is just a NumPy view here) and never modified; the kernels emulate the
precision of ``case.dtype`` (kernels/emulate.py) and return float64 copies. Semantics: oracles/SEMANTICS.md.
The FP16/BF16 kernels claim sinks with d sink and the LSE cotangent (SEMANTICS.md §18) and chunked masks
(§19); split-KV claims KV-cache append (§20): it is handed the NaN-poisoned cache, the new rows and
``cache_seqlens``, never the appended dense K/V.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from attention_conformance.adapters.base import Adapter, BackwardOutput, Capabilities, CaseInputs, ForwardOutput
from attention_conformance.cases.calldata import under_test
from attention_conformance.cases.case import LAYOUTS, PAGED_LAYOUTS, Case, page_size_of

__all__ = ["ReferenceFA1", "ReferenceFA2", "ReferenceFA3", "ReferenceFA3FP8", "ReferenceSplitKV"]

_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})


def _caps(**changes: Any) -> Capabilities:
    base = dict(dtypes=_DTYPES, devices=frozenset({"cpu"}), window=True, mask=True, bias=True, softcap=True,
                gqa=True, varlen=True, layouts=frozenset(LAYOUTS), lse=True, backward=True, deterministic=True,
                sinks=True, chunk=True, lse_grad=True)
    base.update(changes)
    return Capabilities(**base)


class _Reference(Adapter):
    """Common forward/backward plumbing; subclasses name their kernel module and default knobs."""

    module_name: ClassVar[str] = ""
    default_knobs: ClassVar[dict[str, Any]] = {"block_q": 64, "block_k": 64}
    marks_code_under_test = True  # the kernel module's functions are the code under test (`_kernel`)

    def __init__(self, kernel_module: ModuleType | None = None, **knobs: Any):
        self.kernel = kernel_module if kernel_module is not None else importlib.import_module(self.module_name)
        self.knobs = {**self.default_knobs, **knobs}

    def version(self) -> str:
        return f"{getattr(self.kernel, '__name__', self.module_name)} (numpy {np.__version__})"

    def unavailable_reason(self, device: str) -> str | None:
        """NumPy kernels run on the CPU only: on any other device `list` and `run` say so (not a silent n/s run)."""
        if str(device).split(":")[0] != "cpu":
            return f"{self.name} is a NumPy kernel and runs on the CPU only (asked for device {device!r})"
        return None

    def _kwargs(self, inputs: CaseInputs, case: Case) -> dict[str, Any]:
        kw = dict(case.oracle_kwargs)
        kw.update(mask=inputs.mask, bias=inputs.bias, dtype=case.dtype, **self.knobs)
        if inputs.sinks is not None:
            kw["sinks"] = inputs.sinks
        return kw

    def _kernel(self, fn_name: str, *args: Any, **kw: Any) -> Any:
        """``self.kernel.<fn_name>(*args, **kw)``: the code under test (its exceptions are its own)."""
        from attention_conformance.kernels.emulate import blas_threads

        with under_test(), blas_threads(1):  # many small tile products: one BLAS thread (kernels.emulate)
            return getattr(self.kernel, fn_name)(*args, **kw)

    def _forward_backward(self, inputs: CaseInputs, kw: dict[str, Any]) -> tuple[Any, ...]:
        """(out, lse, dq, dk, dv[, dsinks]): the kernel's forward, then its backward on that forward's outputs."""
        out, lse = self._kernel("forward", inputs.q, inputs.k, inputs.v, **kw)
        grads = self._kernel("backward", inputs.q, inputs.k, inputs.v, out, lse, inputs.dout, dlse=inputs.dlse, **kw)
        return out, lse, *grads

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        out, lse = self._kernel("forward", inputs.q, inputs.k, inputs.v, **self._kwargs(inputs, case))
        return ForwardOutput(out=np.asarray(out, dtype=np.float64), lse=np.asarray(lse, dtype=np.float64),
                             out_dtype=case.dtype, kernels=(f"{self.module_name}.forward",))

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        if inputs.dout is None:
            raise ValueError(f"{self.name}: backward needs inputs.dout (case {case.id})")
        out, lse, dq, dk, dv, *dsinks = self._forward_backward(inputs, self._kwargs(inputs, case))
        fwd = ForwardOutput(out=np.asarray(out, dtype=np.float64), lse=np.asarray(lse, dtype=np.float64),
                            out_dtype=case.dtype)
        return BackwardOutput(dq=np.asarray(dq, dtype=np.float64), dk=np.asarray(dk, dtype=np.float64),
                              dv=np.asarray(dv, dtype=np.float64), out=fwd,
                              dsinks=np.asarray(dsinks[0], dtype=np.float64) if dsinks else None,
                              kernels=(f"{self.module_name}.forward", f"{self.module_name}.backward"))


class ReferenceFA1(_Reference):
    """FA1 Algorithm 1 (K/V outer, Q inner, O/l/m in HBM); backward recomputes P from the stored l, m."""

    name = "reference-fa1"
    description = "NumPy FlashAttention-1 (kernels/reference/fa1.py), emulated precision"
    module_name = "attention_conformance.kernels.reference.fa1"
    capabilities = _caps()

    def _forward_backward(self, inputs: CaseInputs, kw: dict[str, Any]) -> tuple[Any, ...]:
        """As the base, with the forward's row statistics l, m handed to the backward (FA1 stores them)."""
        out, lse, l, m = self._kernel("forward", inputs.q, inputs.k, inputs.v, return_stats=True, **kw)
        grads = self._kernel("backward", inputs.q, inputs.k, inputs.v, out, lse, inputs.dout, l=l, m=m,
                             dlse=inputs.dlse, **kw)
        return out, lse, *grads


class ReferenceFA2(_Reference):
    """FA2: Q outer, K/V inner, one division at the end; backward Algorithm 2."""

    name = "reference-fa2"
    description = "NumPy FlashAttention-2 (kernels/reference/fa2.py), emulated precision"
    module_name = "attention_conformance.kernels.reference.fa2"
    capabilities = _caps()


class ReferenceFA3(_Reference):
    """FA3 FP16/BF16 numerics: FA2 tiling with exp2-based float32 softmax, 128 x 128 forward tiles."""

    name = "reference-fa3"
    description = "NumPy FlashAttention-3 FP16/BF16 numerics (kernels/reference/fa3.py), emulated precision"
    module_name = "attention_conformance.kernels.reference.fa3"
    default_knobs = {"block_q": 128, "block_k": 128}
    capabilities = _caps()


class ReferenceSplitKV(_Reference):
    """Flash-Decoding: ``num_splits`` partials (default 3, so splits are uneven) and the combine step.

    Claims the paged layouts too (SEMANTICS.md §16): for those it hands the kernel the page pools and the
    block table of ``CaseInputs.paged``, never the dense K/V, so every key it uses went through the table.
    KV-append cases (§20) get the poisoned cache, the new rows and ``cache_seqlens`` of ``CaseInputs.kv_append``.
    """

    name = "reference-splitkv"
    description = "NumPy split-KV / Flash-Decoding (kernels/reference/splitkv.py), emulated precision"
    module_name = "attention_conformance.kernels.reference.splitkv"
    default_knobs = {"block_q": 64, "block_k": 32, "num_splits": 3}
    capabilities = _caps(backward=False, layouts=frozenset(LAYOUTS) | frozenset(PAGED_LAYOUTS), lse_grad=False,
                         kv_append=True)

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        page_size = page_size_of(case.layout)
        if case.kv_append is not None:
            if inputs.kv_append is None:
                raise ValueError(f"{self.name}: case {case.id} is a KV-append case but inputs.kv_append is missing "
                                 f"(conformance.cases.inputs.make_inputs builds it)")
            kv = inputs.kv_append
            kw = self._kwargs(inputs, case)
            kw["seqlens_k"] = None  # the kernel derives the lengths from cache_seqlens (§20)
            out, lse = self._kernel("forward", inputs.q, kv["k_cache"], kv["v_cache"], k_new=kv["k_new"],
                                    v_new=kv["v_new"], cache_seqlens=kv["cache_seqlens"], **kw)
            return ForwardOutput(out=np.asarray(out, dtype=np.float64), lse=np.asarray(lse, dtype=np.float64),
                                 out_dtype=case.dtype, kernels=(f"{self.module_name}.forward[kv_append]",))
        if page_size is None:
            return super().forward(inputs, case, device)
        paged = inputs.paged
        if paged is None or int(paged["page_size"]) != page_size:
            got = None if paged is None else paged.get("page_size")
            raise ValueError(f"{self.name}: case {case.id} has layout {case.layout} but inputs.paged is "
                             f"{'missing' if paged is None else f'for page_size {got}'} "
                             f"(conformance.cases.inputs.make_inputs builds it)")
        out, lse = self._kernel("forward", inputs.q, paged["k_pool"], paged["v_pool"],
                                block_table=paged["block_table"], page_size=page_size, seqlen_k=case.Lk,
                                **self._kwargs(inputs, case))
        return ForwardOutput(out=np.asarray(out, dtype=np.float64), lse=np.asarray(lse, dtype=np.float64),
                             out_dtype=case.dtype, kernels=(f"{self.module_name}.forward[paged]",))


class ReferenceFA3FP8(_Reference):
    """FA3 FP8 forward on the engine's quantized inputs (``CaseInputs.fp8``, SEMANTICS.md §10-§11)."""

    name = "reference-fa3-fp8"
    description = "NumPy FlashAttention-3 FP8 forward (kernels/reference/fa3.py:forward_fp8), BF16 output"
    module_name = "attention_conformance.kernels.reference.fa3"
    default_knobs = {"out_dtype": "bfloat16"}
    capabilities = _caps(dtypes=frozenset(), backward=False, fp8=frozenset({"per_tensor", "per_head", "per_tile"}),
                         sinks=False, chunk=False, lse_grad=False,
                         fp8_formats=frozenset({"e4m3fn", "e5m2"}))

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        qi = inputs.fp8_codes(case.fp8)
        kw = dict(case.oracle_kwargs)
        kw.update(mask=inputs.mask, bias=inputs.bias, **self.knobs)
        out, lse = self._kernel("forward_fp8", qi["q8"], qi["k8"], qi["v8"], qi["q_descale"], qi["k_descale"],
                                qi["v_descale"], format=qi["format"], block_q=qi["tile_q"], block_k=qi["tile_k"],
                                **kw)
        return ForwardOutput(out=np.asarray(out, dtype=np.float64), lse=np.asarray(lse, dtype=np.float64),
                             out_dtype=self.knobs["out_dtype"], kernels=(f"{self.module_name}.forward_fp8",))

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        raise NotImplementedError(f"{self.name} is forward only (as FA3's FP8 path)")
