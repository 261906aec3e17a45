"""Adapter-level mutants: a correct kernel behind a buggy adapter layer.

Each function takes a correct `Adapter` and returns one that injects a bug real integrations have had
(upstream issue classes): the caller's input modified in place, a strided (non-contiguous)
tensor read as if it were contiguous, the incoherent-processing rotation applied to Q only.
The wrapped adapter keeps the base adapter's name, capabilities and ``supports``.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from attention_conformance.adapters.base import Adapter, BackwardOutput, CaseInputs, ForwardOutput
from attention_conformance.cases.case import Case

__all__ = ["WRAPPERS", "WrappedAdapter", "bshd_dout_as_contiguous", "causal_mask_bottom_right", "hadamard_q_only",
           "identity", "input_mutated_in_place", "noncontiguous_as_contiguous", "varlen_drops_softcap"]


class WrappedAdapter(Adapter):
    """Delegates everything to ``base`` except what a subclass overrides."""

    def __init__(self, base: Adapter, label: str):
        self.base = base
        self.name = f"{base.name}+{label}"
        self.description = f"mutant: {label} on {base.name}"
        self.capabilities = base.capabilities

    def supports(self, case: Case, device: str) -> str | None:
        return self.base.supports(case, device)

    def unavailable_reason(self, device: str) -> str | None:
        return self.base.unavailable_reason(device)

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        return self.base.forward(inputs, case, device)

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        return self.base.backward(inputs, case, device)


class _InPlace(WrappedAdapter):
    """Folds the softmax scale into the caller's Q buffer (q *= scale) and calls the kernel with scale 1."""

    def _prescale(self, inputs: CaseInputs, case: Case) -> Case:
        scale = case.scale if case.scale is not None else 1.0 / math.sqrt(case.d)
        if inputs.q.flags.writeable:
            inputs.q *= scale  # the bug: the caller's array is changed
        else:
            inputs.q = inputs.q * scale
        return case.replace(scale=1.0)

    def forward(self, inputs, case, device):
        if case.fp8 is not None:
            return self.base.forward(inputs, case, device)
        return self.base.forward(inputs, self._prescale(inputs, case), device)


class _NonContiguous(WrappedAdapter):
    """For a ``bshd`` case (a [B, L, H, D] buffer viewed as [B, H, L, D]) reads the buffer as if it were
    a contiguous [B, H, L, D] tensor, i.e. ignores the strides (flash-attention #355, torch #191937)."""

    @staticmethod
    def _as_contiguous(x: np.ndarray) -> np.ndarray:
        B, H, L, D = x.shape
        buffer = np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # the memory a bshd tensor really has
        return buffer.reshape(B, H, L, D)  # ... read with contiguous [B, H, L, D] strides

    def _mangle(self, inputs: CaseInputs, case: Case) -> CaseInputs:
        if case.layout != "bshd":
            return inputs
        fresh = copy.copy(inputs)
        fresh.q = self._as_contiguous(inputs.q)
        fresh.k = self._as_contiguous(inputs.k)
        fresh.v = self._as_contiguous(inputs.v)
        if inputs.dout is not None:
            fresh.dout = self._as_contiguous(inputs.dout)
        return fresh

    def forward(self, inputs, case, device):
        return self.base.forward(self._mangle(inputs, case), case, device)

    def backward(self, inputs, case, device):
        return self.base.backward(self._mangle(inputs, case), case, device)


class _HadamardQOnly(WrappedAdapter):
    """Incoherent processing applied to Q only: K's rotation is undone (K requantized unrotated), so the
    kernel computes (Q M) K^T instead of (Q M)(K M)^T (SEMANTICS.md §11)."""

    def forward(self, inputs, case, device):
        f = inputs.fp8
        if case.fp8 is None or f is None or not f.get("incoherent"):
            return self.base.forward(inputs, case, device)
        from attention_conformance.oracles import fp8 as fp8mod

        signs = np.asarray(f["signs"], dtype=np.float64)
        d = inputs.k.shape[-1]
        k_plain = fp8mod.fwht(np.asarray(f["k"]) * signs) / math.sqrt(d)  # x M^T with M = H diag(s) / sqrt(d)
        k8, kd = fp8mod.quantize(k_plain, format=f["format"], granularity=f["granularity"], group=1,
                                 tile=f["tile_k"], name="k")
        fresh = copy.copy(inputs)
        fresh.fp8 = dict(f, k8=k8, k_descale=kd, k=fp8mod.dequantize(k8, kd, tile=f["tile_k"]))
        fresh.k = np.asarray(fresh.fp8["k"])
        return self.base.forward(fresh, case, device)


class _VarlenDropsSoftcap(WrappedAdapter):
    """The varlen (packed sequences) entry point takes no softcap argument, so softcap is silently dropped for
    varlen calls; dense calls get it (SEMANTICS.md §3, §7). Lives in softcap x varlen only."""

    @staticmethod
    def _case(case: Case) -> Case:
        return case.replace(softcap=None) if case.varlen and case.softcap is not None else case

    def forward(self, inputs, case, device):
        return self.base.forward(inputs, self._case(case), device)

    def backward(self, inputs, case, device):
        return self.base.backward(inputs, self._case(case), device)


class _BshdDoutAsContiguous(WrappedAdapter):
    """The backward reads dO of a ``bshd`` case as a contiguous [B, H, L, D] tensor (q, k, v are handled right):
    the gradient of a transposed output is non-contiguous and its strides are ignored. Lives in bshd x backward."""

    def backward(self, inputs, case, device):
        if case.layout != "bshd" or inputs.dout is None:
            return self.base.backward(inputs, case, device)
        fresh = copy.copy(inputs)
        fresh.dout = _NonContiguous._as_contiguous(inputs.dout)
        return self.base.backward(fresh, case, device)


class _CausalMaskBottomRight(WrappedAdapter):
    """With a boolean mask *and* causal, the adapter folds the causal rule into the mask with the default
    bottom-right alignment, ignoring a requested top-left one (SEMANTICS.md §4, §6). Lives in
    causal=top_left x mask."""

    @staticmethod
    def _case(case: Case) -> Case:
        if case.causal and case.alignment == "top_left" and case.mask is not None:
            return case.replace(alignment="bottom_right")
        return case

    def forward(self, inputs, case, device):
        return self.base.forward(inputs, self._case(case), device)

    def backward(self, inputs, case, device):
        return self.base.backward(inputs, self._case(case), device)


def varlen_drops_softcap(base: Adapter) -> Adapter:
    return _VarlenDropsSoftcap(base, "varlen_drops_softcap")


def bshd_dout_as_contiguous(base: Adapter) -> Adapter:
    return _BshdDoutAsContiguous(base, "bshd_dout_as_contiguous")


def causal_mask_bottom_right(base: Adapter) -> Adapter:
    return _CausalMaskBottomRight(base, "causal_mask_bottom_right")


def input_mutated_in_place(base: Adapter) -> Adapter:
    return _InPlace(base, "input_mutated_in_place")


def noncontiguous_as_contiguous(base: Adapter) -> Adapter:
    return _NonContiguous(base, "noncontiguous_as_contiguous")


def hadamard_q_only(base: Adapter) -> Adapter:
    return _HadamardQOnly(base, "hadamard_q_only")


def identity(base: Adapter) -> Adapter:
    """No bug: the control run (the correct adapter must survive every check)."""
    return base


WRAPPERS = {
    "identity": identity,
    "input_mutated_in_place": input_mutated_in_place,
    "noncontiguous_as_contiguous": noncontiguous_as_contiguous,
    "hadamard_q_only": hadamard_q_only,
    "varlen_drops_softcap": varlen_drops_softcap,
    "bshd_dout_as_contiguous": bshd_dout_as_contiguous,
    "causal_mask_bottom_right": causal_mask_bottom_right,
}
