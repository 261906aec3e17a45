"""The adapter protocol: how the engine talks to any attention implementation.

An adapter declares `Capabilities`, says why it cannot run a case (`unavailable_reason`,
`supports`), and computes `forward` (and optionally `backward`) on the FP64 inputs the engine made
for the case. The call data (`CaseInputs`, `ForwardOutput`, `BackwardOutput`) live in
`conformance.cases.calldata` and are re-exported here, so ``from conformance.adapters.base import
CaseInputs`` keeps working. The adapter converts those inputs to its own dtype, device and layout (``case.layout``)
and returns float64 NumPy arrays; the engine compares them with the oracle under the tolerance
policy (conformance/TOLERANCES.md). Semantics: oracles/SEMANTICS.md.

Third-party code can subclass `Adapter` and pass ``--impl module:attr`` (attr = an instance or a
zero-argument factory); a plain function with torch SDPA's signature is wrapped by
`conformance.adapters.third_party`.

Rules every adapter follows:
- never modify the arrays in `CaseInputs`; adapters that build their own tensors report any change
  to them in `ForwardOutput.mutated_inputs` (the engine fails the case);
- a case the adapter declares it supports and then raises on is a FAIL, not a skip: decline in
  `supports`, with a reason, instead;
- return exactly ``[B, Hq, Lq, dv]`` for out and ``[B, Hq, Lq]`` for lse (natural log, -inf on
  fully masked rows per SEMANTICS.md §8; other conventions are reported by name, not hidden).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from attention_conformance.cases.calldata import BackwardOutput, CallDeclined, CaseInputs, ForwardOutput
from attention_conformance.cases.case import ALIGNMENTS, LAYOUTS, Case, page_size_of

__all__ = [
    "Adapter",
    "BackwardOutput",
    "CallDeclined",
    "Capabilities",
    "CaseInputs",
    "Exclusion",
    "ForwardOutput",
    "capability_reason",
    "same_mask_either_alignment",
]


@dataclass(frozen=True)
class Exclusion:
    """A combination an adapter declines although it claims each of its parts (e.g. GQA and dv != d, each claimed,
    but not together in its backward): `capability_reason` gives ``reason`` for every case ``applies`` holds for.
    Part of the declaration, so the property strategies never draw what it excludes."""

    reason: str
    applies: Callable[[Case], bool]


@dataclass(frozen=True)
class Capabilities:
    """What an adapter claims. A claimed feature that then fails is a FAIL."""

    dtypes: frozenset[str]
    devices: frozenset[str] = frozenset({"cpu"})
    head_dims: frozenset[int] | None = None  # None = any head dim (within min_head_dim .. max_head_dim)
    #: the bounds of d and dv (with ``head_dims`` None: any head dim between them; None = no upper bound)
    min_head_dim: int = 1
    max_head_dim: int | None = None
    #: head dims (d and dv) the backward takes, a subset of the forward's; None = the forward's
    backward_head_dims: frozenset[int] | None = None
    dv_ne_d: bool = True
    alignments: frozenset[str] = frozenset(ALIGNMENTS)  # causal alignments supported
    noncausal: bool = True  # non-causal cases (False: a causal-only call, e.g. SDPA with a CausalBias attn_mask)
    window: bool = False
    mask: bool = False  # boolean mask
    bias: bool = False  # additive float bias
    softcap: bool = False
    gqa: bool = True
    varlen: bool = False
    #: with varlen: per-sequence query lengths (seqlens_q) too; False: key lengths only (a KV-cache call's
    #: cache_seqlens, flash_attn_with_kvcache)
    query_lengths: bool = True
    custom_scale: bool = True
    layouts: frozenset[str] = frozenset(LAYOUTS)
    lse: bool = False
    backward: bool = False
    fp8: frozenset[str] = frozenset()  # FP8 granularities: per_tensor, per_head, per_tile
    fp8_formats: frozenset[str] = frozenset()  # e4m3fn, e5m2
    #: (tile_q, tile_k) of the per-tile FP8 descales the adapter applies (SEMANTICS.md §10); None = any tile shape
    fp8_tiles: frozenset[tuple[int, int]] | None = None
    deterministic: bool = False  # bitwise identical on repeated calls
    accepts_out: bool = False  # writes into a caller-provided buffer (engine poisons it)
    max_seqlen: int | None = None
    #: Lq and Lk must be multiples of this (kernels without tail handling); None = any length
    seqlen_multiple: int | None = None
    sinks: bool = False  # attention sinks, one logit per query head (SEMANTICS.md §18); with backward: d sinks
    chunk: bool = False  # chunked attention (§19)
    kv_append: bool = False  # KV-cache append at cache_seqlens (§20)
    lse_grad: bool = False  # backward accepts an LSE cotangent dlse (§13, §18)
    lse_base: str = "e"  # the LSE the adapter returns: "e" (natural log) or "2" (FlashInfer), SEMANTICS.md §21
    lse_layout: str = "bhs"  # "bhs" [B, Hq, Lq], "hs_total" [Hq, total_q], "total_h" [total_q, Hq] (§21)
    #: varlen padding reaches the kernel as masked-out positions of a dense mask (padded keys masked, padded
    #: query rows fully masked), not as sequence lengths: SDPA-signature APIs (SEMANTICS.md §17)
    padding_as_mask: bool = False
    #: claims masked-out positions never contribute, even when they hold NaN (SEMANTICS.md §6, §17): NaN from
    #: them is then a FAIL, not the named finding masked_nan
    nan_safe_masking: bool = False
    #: "linear": peak device memory grows as O(N) (no N x N score / probability matrix is stored); judged on
    #: CUDA by the ``memory`` family (conformance/verdict/growth.py), which fails a claim that grows quadratically
    memory: str | None = None
    #: combinations declined although each part is claimed (`Exclusion`)
    excludes: tuple[Exclusion, ...] = ()
    #: the library's own run-time check that may still decline, in its own words, a case this declaration claims
    #: (torch SDPA's dispatcher, cuDNN's check_support, the probes of an SDPA-signature function); None: `supports`
    #: declines nothing the declaration claims, so a claimed case declined anyway is the adapter's contradiction
    #: (the property suite fails it, property_tests/kernel_properties.py)
    library_check: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "excludes":
                out[f.name] = [e.reason for e in value]
            elif isinstance(value, frozenset):
                out[f.name] = [list(x) if isinstance(x, tuple) else x for x in sorted(value)]
            else:
                out[f.name] = value
        return out

    def head_dim_bounds(self, backward: bool = False) -> tuple[frozenset[int] | None, int, int | None]:
        """(the declared set of head dims or None for any, lowest, highest or None) for a forward or a backward."""
        dims = self.backward_head_dims if backward and self.backward_head_dims is not None else self.head_dims
        return dims, self.min_head_dim, self.max_head_dim

    def takes_head_dim(self, d: int, backward: bool = False) -> bool:
        """Whether the declaration claims head dim ``d`` (as d or dv) for a forward, or for a backward."""
        dims, lo, hi = self.head_dim_bounds(backward)
        return (dims is None or d in dims) and d >= lo and (hi is None or d <= hi)


def same_mask_either_alignment(case: Case) -> bool:
    """True when both causal / window alignments give ``case`` the same mask (SEMANTICS.md §4, §5): Lq == Lk with no
    per-sequence lengths (varlen, KV append), where the top-left and the bottom-right diagonal coincide."""
    return case.Lq == case.Lk and not case.varlen and case.kv_append is None


def capability_reason(caps: Capabilities, case: Case, device: str) -> str | None:
    """The first declared capability `case` needs and `caps` lacks, as a sentence; None if none.

    ``device`` may carry an index (``cuda:0``). A causal or windowed case needs its alignment declared unless both
    alignments give it the same mask (`same_mask_either_alignment`)."""
    device = str(device).split(":")[0]
    if device not in caps.devices:
        return f"device {device!r} not in declared devices {sorted(caps.devices)}"
    if case.fp8 is not None:
        if case.fp8.granularity not in caps.fp8:
            return f"FP8 {case.fp8.granularity} scaling not supported (declared: {sorted(caps.fp8) or 'none'})"
        if caps.fp8_formats and case.fp8.format not in caps.fp8_formats:
            return f"FP8 format {case.fp8.format} not supported"
        tile = (case.fp8.tile_q, case.fp8.tile_k)
        if case.fp8.granularity == "per_tile" and caps.fp8_tiles is not None and tile not in caps.fp8_tiles:
            return (f"per-tile descales of {tile[0]} x {tile[1]} rows not supported (declared tile_q x tile_k: "
                    f"{', '.join(f'{q} x {k}' for q, k in sorted(caps.fp8_tiles))})")
    elif case.dtype not in caps.dtypes:
        if not caps.dtypes and caps.fp8:
            return f"FP8-only adapter: dtype {case.dtype} without FP8 settings (Case.fp8 is None)"
        return f"dtype {case.dtype} not in declared dtypes {sorted(caps.dtypes)}"
    if caps.head_dims is not None and (case.d not in caps.head_dims or case.dv not in caps.head_dims):
        return f"head dim d={case.d}, dv={case.dv} not in declared head dims {sorted(caps.head_dims)}"
    if min(case.d, case.dv) < caps.min_head_dim or (caps.max_head_dim is not None
                                                    and max(case.d, case.dv) > caps.max_head_dim):
        top = caps.max_head_dim if caps.max_head_dim is not None else "any"
        return f"head dim d={case.d}, dv={case.dv} outside the declared range {caps.min_head_dim} .. {top}"
    if case.backward and caps.backward and not all(caps.takes_head_dim(x, backward=True) for x in (case.d, case.dv)):
        return (f"backward head dim d={case.d}, dv={case.dv} not in declared backward head dims "
                f"{sorted(caps.backward_head_dims or ())}")
    if case.dv != case.d and not caps.dv_ne_d:
        return f"dv={case.dv} != d={case.d} not supported"
    if (case.causal or case.window is not None) and case.alignment not in caps.alignments \
            and not (caps.alignments and same_mask_either_alignment(case)):
        what = "causal" if case.causal else "window"
        return f"{what} alignment {case.alignment} not supported (declared: {sorted(caps.alignments) or 'none'})"
    if not case.causal and not caps.noncausal:
        return "non-causal attention not supported (causal cases only)"
    if case.window is not None and not caps.window:
        return "sliding window not supported"
    if case.mask is not None and not caps.mask:
        return "boolean mask not supported"
    if case.bias is not None and not caps.bias:
        return "additive bias not supported"
    if case.softcap is not None and not caps.softcap:
        return "softcap not supported"
    if case.Hq != case.Hkv and not caps.gqa:
        return f"GQA/MQA (Hq={case.Hq}, Hkv={case.Hkv}) not supported"
    if case.sinks is not None and not caps.sinks:
        return "attention sinks (one logit per query head, SEMANTICS.md §18) not supported"
    if case.chunk is not None and not caps.chunk:
        return "chunked attention (SEMANTICS.md §19) not supported"
    if case.kv_append is not None and not caps.kv_append:
        return "KV-cache append at cache_seqlens (SEMANTICS.md §20) not supported"
    if case.lse_grad and not caps.lse_grad:
        return "backward with an LSE cotangent (dlse) not supported"
    if case.varlen and not caps.varlen:
        return "varlen / padded sequences not supported"
    if case.seqlens_q is not None and not caps.query_lengths:
        return "per-sequence query lengths (seqlens_q) not supported (key lengths only)"
    if case.scale is not None and not caps.custom_scale:
        return "custom scale not supported"
    if case.layout not in caps.layouts:
        page_size = page_size_of(case.layout)
        if page_size is not None:
            claimed = sorted(x for x in caps.layouts if page_size_of(x) is not None)
            return (f"paged K/V layout {case.layout} (block table, {page_size} keys per page, SEMANTICS.md §16) "
                    f"not supported (declared paged layouts: {claimed or 'none'})")
        return f"input layout {case.layout} not supported"
    if case.backward and not caps.backward:
        return "backward not supported"
    if caps.max_seqlen is not None and max(case.Lq, case.Lk) > caps.max_seqlen:
        return f"sequence length {max(case.Lq, case.Lk)} > declared max {caps.max_seqlen}"
    if caps.seqlen_multiple is not None and (case.Lq % caps.seqlen_multiple or case.Lk % caps.seqlen_multiple):
        return f"Lq={case.Lq}, Lk={case.Lk}: the declared seqlen_multiple is {caps.seqlen_multiple}"
    for e in caps.excludes:
        if e.applies(case):
            return e.reason
    return None


class Adapter(abc.ABC):
    """Base class of every implementation under test."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    capabilities: Capabilities
    #: run in a worker process so a crash or hang costs one case (CUDA adapters)
    isolate: ClassVar[bool] = False
    #: True for adapters that mark their calls into the code under test with `conformance.cases.calldata.under_test`
    #: (the built-in ones): an exception raised outside those calls is then HARNESS_ERROR, not FAIL. False
    #: (third-party adapters): every exception of ``forward`` / ``backward`` is the adapter's.
    marks_code_under_test: ClassVar[bool] = False
    #: True where each new shape (or mask) builds a kernel before it runs (torch.compile, a JIT DSL): seconds per
    #: call instead of milliseconds. The property suite then draws `property_tests.profiles.build_per_shape_examples`
    #: examples per property instead of the profile's count, and says so (the conformance catalog still runs every case)
    builds_per_shape: ClassVar[bool] = False

    def unavailable_reason(self, device: str) -> str | None:
        """None when this adapter can run on `device` here; otherwise why not (shown by `list`)."""
        return None

    def supports(self, case: Case, device: str) -> str | None:
        """None when the adapter claims `case`; otherwise the reason (reported NOT_SUPPORTED)."""
        return capability_reason(self.capabilities, case, device)

    def version(self) -> str:
        return "unknown"

    @abc.abstractmethod
    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        """Compute attention for `case` on `inputs`; return float64 copies of the results."""

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        """Gradients of sum(out * dout) w.r.t. q, k, v (with GQA reduction into dk, dv)."""
        raise NotImplementedError(f"{self.name} declares no backward")
