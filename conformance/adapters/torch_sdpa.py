"""torch `scaled_dot_product_attention`, pinned to one backend so that no silent fallback is possible.

Four adapters, one per `torch.nn.attention.SDPBackend`: `SdpaMath`, `SdpaFlash`, `SdpaEfficient`,
`SdpaCudnn`. Each call runs inside ``sdpa_kernel([backend])`` with only that backend enabled: if torch
cannot run the case on it, the call raises instead of quietly using another one.

How a case (oracles/SEMANTICS.md) maps onto the SDPA signature:
- §4 causal: ``is_causal=True`` natively when it means the case's alignment (top-left, or a square,
  non-varlen problem where both alignments coincide) and nothing else restricts the keys; otherwise
  the dense boolean visibility mask of `_torch_common.visibility` (bottom-right §4, windows §5, varlen
  padding §7, the case's own mask §6) is passed as ``attn_mask`` (True = attend).
- §6 additive bias: a float ``attn_mask`` in the query dtype, -inf where a key is not visible.
- §9 GQA: ``enable_gqa=True`` when Hq != Hkv.
- §3 softcap: not expressible (SDPA has no score hook; tanh is not an additive bias) -> NOT_SUPPORTED.
- §13 backward: autograd of sum(out * dout).
- §12 LSE: SDPA returns none publicly. On CPU the flash backend's own op
  ``aten._scaled_dot_product_flash_attention_for_cpu`` (the kernel the pinned backend runs) returns
  it; the adapter calls it a second time for LSE and notes it if that call's output differs bitwise
  from the public call's. Its value on fully masked rows is 0 (§8 convention "0"): mapped to -inf
  on exactly the rows the case's mask empties, with a note; any other value is left for the engine.

Spellings (``torch-sdpa-*@ENTRY``, `conformance.adapters.variants`): ``is_causal`` (flags only), ``bool_mask``
(always a dense boolean mask), ``causal_upper_left`` / ``causal_lower_right`` (``torch.nn.attention.bias``
CausalBias objects; torch runs those as ``is_causal=True`` when they mean it, and for lower-right with
Lq != Lk tries the flash / efficient kernels itself, bypassing ``sdpa_kernel``, else materialises the mask).
`SDPA_SPELLINGS` says what each can carry (a CausalBias: one causal alignment, no chunk, window, mask, bias or
lengths); a variant's capabilities are the backend's less what its spelling cannot carry, and `sdpa_args` is
the call it makes (pure: tests/conformance/test_variant_claims.py reads it back for every claimed case).

`supports` declines with torch's own words: after the declared-capability check it asks torch's
dispatcher (``torch._fused_sdp_choice`` under the same pinning, with tensors of the case's shapes,
dtype, strides, mask and requires_grad) whether the pinned backend accepts the call, and returns the
reasons torch prints (e.g. "Flash attention does not support the is_causal flag when seqlen_q !=
seqlen_k"). Anything torch accepts and then gets wrong is a FAIL. When the real call still ends in the
dispatcher's "No available kernel" (seen on the H200 for the efficient and cuDNN backends with some
bottom-right masks and stride-0 K/V that the dry query accepted), the adapter raises `CallDeclined` with
the reasons torch printed: NOT_SUPPORTED, since the pinned backend computed nothing.

On CUDA the torch profiler records the kernels that ran (`ForwardOutput.kernels`); when the pinned
backend's expected kernel (``pytorch_flash::flash_fwd_kernel``, ``fmha_cutlassF_*``,
``cudnn_generated_fort_native_sdpa_*``) is absent from a non-empty record, a note says so.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.base import (
    Adapter,
    BackwardOutput,
    CallDeclined,
    Capabilities,
    CaseInputs,
    ForwardOutput,
)
from attention_conformance.adapters.variants import (
    Spelling,
    checked_entry_point,
    spelled_capabilities,
    spelling_reason,
    variant_name,
)
from attention_conformance.cases.case import ALIGNMENTS, LAYOUTS, Case

__all__ = ["SDPA_ENTRY_POINTS", "SDPA_SPELLINGS", "SdpaAdapter", "SdpaArgs", "SdpaCall", "SdpaCudnn", "SdpaEfficient",
           "SdpaFlash", "SdpaMath", "prepare_sdpa_call", "sdpa_args", "sdpa_plan"]

_ALL_FLOAT = frozenset({"float64", "float32", "float16", "bfloat16"})
_HALF = frozenset({"float16", "bfloat16"})


def _needs_attn_mask(case: Case) -> bool:
    """True when the case needs a dense attn_mask (anything beyond native top-left causal)."""
    native_causal = case.causal and (case.alignment == "top_left" or case.Lq == case.Lk)
    return (
        case.mask is not None
        or case.bias is not None
        or case.window is not None
        or case.varlen
        or case.chunk is not None
        or (case.causal and not native_causal)
    )


def sdpa_plan(case: Case, mask: np.ndarray | None, bias: np.ndarray | None) -> tuple[bool, np.ndarray | None]:
    """(is_causal, attn_mask) expressing `case` through the SDPA signature.

    attn_mask is None, a bool array (True = attend) or, with a bias, an FP64 additive array with -inf
    where a key is not visible; shape [B, 1 or Hq, Lq, Lk].
    """
    if not _needs_attn_mask(case):
        return case.causal, None
    vis = tc.visibility(case, mask)
    if bias is not None:
        return False, tc.float_mask(vis, tc.neutral_padded_bias(bias, case), case.B, case.Lq, case.Lk)
    return False, vis


#: what a dense boolean attn_mask carries: every visibility rule (§4-§7, §19) and backward, no additive bias
_BOOL_MASK = frozenset({"noncausal", "window", "chunk", "mask", "varlen", "query_lengths", "backward", "dense"})
#: the public spellings of SDPA's masking and what each can carry (`conformance.adapters.variants`); None is the
#: per-case choice of plain ``torch-sdpa-*``. No spelling carries softcap, sinks, paged K/V or a KV append: the
#: signature has no argument for them.
SDPA_SPELLINGS: dict[str | None, Spelling] = {
    None: Spelling("is_causal=True where it means the case (top-left, or square), else a dense attn_mask: boolean, "
                   "or additive with -inf where masked when the case has a bias", _BOOL_MASK | {"bias"}),
    "is_causal": Spelling("is_causal=True or False, attn_mask=None", frozenset({"noncausal", "backward", "dense"}),
                          alignments=frozenset({"top_left"})),
    "bool_mask": Spelling("a dense boolean attn_mask (True = attend), is_causal=False", _BOOL_MASK,
                          dense_argument=True),
    "causal_upper_left": Spelling("attn_mask=torch.nn.attention.bias.causal_upper_left(Lq, Lk)",
                                  frozenset({"backward", "dense"}), alignments=frozenset({"top_left"})),
    "causal_lower_right": Spelling("attn_mask=torch.nn.attention.bias.causal_lower_right(Lq, Lk)",
                                   frozenset({"backward", "dense"}), alignments=frozenset({"bottom_right"})),
}
#: the spellings selectable as ``torch-sdpa-*@ENTRY``
SDPA_ENTRY_POINTS = tuple(e for e in SDPA_SPELLINGS if e is not None)


def _square(case: Case) -> bool:
    return case.Lq == case.Lk and not case.varlen


@dataclass(frozen=True)
class SdpaArgs:
    """The arguments of one ``scaled_dot_product_attention(q, k, v, ...)`` call, before they become tensors."""

    attn_mask: np.ndarray | None  # bool [B, 1 or Hq, Lq, Lk] (True = attend) or FP64 additive (-inf = masked)
    causal_bias: str | None  # "causal_upper_left" / "causal_lower_right": attn_mask is that CausalBias(Lq, Lk)
    is_causal: bool
    scale: float | None
    enable_gqa: bool
    dropout_p: float = 0.0


def sdpa_args(entry: str | None, case: Case, mask: np.ndarray | None, bias: np.ndarray | None) -> SdpaArgs:
    """The call spelling `entry` (None: the per-case choice, `sdpa_plan`) makes for `case`, whose boolean mask
    and additive bias are `mask` and `bias`. Pure (NumPy only): each spelling puts in its arguments what it can
    carry and nothing else, whatever the case; `SDPA_SPELLINGS` is what `supports` lets through."""
    common = dict(scale=case.scale, enable_gqa=case.Hq != case.Hkv)
    if entry is None:
        is_causal, attn_mask = sdpa_plan(case, mask, bias)
        return SdpaArgs(attn_mask, None, is_causal, **common)
    if entry == "is_causal":
        return SdpaArgs(None, None, case.causal, **common)
    if entry == "bool_mask":
        vis = tc.visibility(case, mask)
        return SdpaArgs(np.ones((case.B, 1, case.Lq, case.Lk), dtype=bool) if vis is None else vis, None, False,
                        **common)
    if entry in ("causal_upper_left", "causal_lower_right"):
        return SdpaArgs(None, entry, False, **common)
    raise ValueError(f"unknown SDPA entry point {entry!r}; choose from {list(SDPA_ENTRY_POINTS)}")


def _causal_bias(variant: str, case: Case) -> tuple[object, list[str]]:
    """The CausalBias object of `variant` for the case's lengths, and what torch warned while making it."""
    from torch.nn.attention import bias as attn_bias

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = getattr(attn_bias, variant)(case.Lq, case.Lk)
    return made, [f"torch warned: {w.message}" for w in caught]


def _mask_tensor(attn_mask: np.ndarray | None, dtype, device: str):
    if attn_mask is None:
        return None
    if attn_mask.dtype == bool:
        return torch.from_numpy(np.array(attn_mask, dtype=bool)).to(device)
    return torch.from_numpy(np.array(attn_mask, dtype=np.float64)).to(dtype).to(device)


@dataclass
class SdpaCall:
    """One call through the SDPA signature, prepared the same way by every SDPA-signature adapter.

    `handed` is everything the kernel receives (the mutation check compares it with `before`).
    """

    t: tc.Materialized
    args: SdpaArgs  # the call's arguments (`sdpa_args`)
    attn_mask: np.ndarray | None  # the visibility the call means, for the empty-row and LSE bookkeeping
    mask_t: object  # args.attn_mask as a tensor on the device, or None
    is_causal: bool  # the public call's is_causal
    handed: dict
    before: dict
    #: what the public call passes as attn_mask: mask_t, or a torch.nn.attention.bias.CausalBias
    call_mask: object = None
    #: the (attn_mask, is_causal) the backend's own aten op gets for the LSE: what a CausalBias runs
    lse_mask_t: object = None
    lse_is_causal: bool = False
    notes: list[str] = field(default_factory=list)

    def mutated(self) -> tuple[str, ...]:
        return tc.changed(self.before, self.handed)


def prepare_sdpa_call(inputs: CaseInputs, case: Case, device: str, *, backward: bool = False,
                      entry: str | None = None) -> SdpaCall:
    """Tensors in the case's layout, the arguments `sdpa_args` gives spelling `entry` (None: `sdpa_plan`), and a
    snapshot of them. With a ``causal_*`` spelling `call_mask` is the CausalBias object the public call gets and
    the LSE op gets what torch runs for it (``is_causal=True`` when it means top-left, else its dense mask)."""
    args = sdpa_args(entry, case, inputs.mask, inputs.bias)
    t = tc.materialize(inputs, case, device, requires_grad=backward)
    mask_t = _mask_tensor(args.attn_mask, t.q.dtype, device)
    attn_mask, call_mask, notes = args.attn_mask, mask_t, []
    lse_mask_t, lse_is_causal = mask_t, args.is_causal
    if args.causal_bias is not None:
        call_mask, notes = _causal_bias(args.causal_bias, case)
        attn_mask = tc.visibility(case, None)  # the rows the alignment empties
        if _square(case) or args.causal_bias == "causal_upper_left":
            lse_mask_t, lse_is_causal = None, True
        else:
            lse_mask_t = _mask_tensor(attn_mask, t.q.dtype, device)
    handed = {"q": t.q, "k": t.k, "v": t.v, "attn_mask": mask_t}
    if backward:
        handed["dout"] = t.dout
    return SdpaCall(t, args, attn_mask, mask_t, args.is_causal, handed, tc.snapshot(handed), call_mask, lse_mask_t,
                    lse_is_causal, notes)


def _torch_reasons(caught) -> list[str]:
    """The reasons torch's SDPA dispatcher printed as warnings ("... not used because: <reason>")."""
    said = [str(w.message).split(" (Triggered internally")[0].strip() for w in caught]
    return [s for s in said if s and not s.endswith("kernel not used because:")]


def _empty_view(shape: tuple[int, ...], dtype, device: str, layout: str, requires_grad: bool):
    """An uninitialised [B, H, L, D] tensor with the strides `layout` gives (for dispatcher queries)."""
    B, H, L, D = shape
    if layout == "bshd":
        return torch.empty((B, L, H, D), dtype=dtype, device=device).requires_grad_(requires_grad).transpose(1, 2)
    if layout == "kv_broadcast":
        return torch.empty((1, H, L, D), dtype=dtype, device=device).requires_grad_(requires_grad).expand(shape)
    return torch.empty(shape, dtype=dtype, device=device).requires_grad_(requires_grad)


class SdpaAdapter(Adapter):
    """Base of the four pinned-backend adapters; subclasses set `backend_name` and the capability tables."""

    backend_name: ClassVar[str] = ""  # SDPBackend member name
    #: substrings of the CUDA kernel names the pinned backend launches (forward, backward)
    expected_kernels: ClassVar[tuple[tuple[str, ...], tuple[str, ...]]] = ((), ())
    cpu_reason: ClassVar[str | None] = None  # why the backend has no CPU implementation, if it has none
    cpu_caps: ClassVar[Capabilities | None] = None
    cuda_caps: ClassVar[Capabilities | None] = None
    #: LSE value the CPU op writes on fully masked rows (SEMANTICS.md §8 names conventions)
    cpu_lse_convention: ClassVar[str] = "-inf"
    marks_code_under_test = True  # torch's SDPA calls (and autograd through them) are the code under test
    process_group: ClassVar[str | None] = tc.TORCH_PROCESS_GROUP

    entry_points: ClassVar[tuple[str, ...]] = SDPA_ENTRY_POINTS

    def __init__(self, entry_point: str | None = None) -> None:
        self.entry_point = checked_entry_point(type(self), entry_point)
        self.name = variant_name(type(self).name, entry_point)
        on_cuda = torch is not None and torch.cuda.is_available()
        caps = (self.cuda_caps if on_cuda else self.cpu_caps) or self.cuda_caps or self.cpu_caps
        self.capabilities = spelled_capabilities(caps, self.spelling)
        self.isolate = on_cuda  # a CUDA fault (illegal address, abort) must cost one case, not the run

    # -- availability -----------------------------------------------------------------------------
    @property
    def backend(self):
        from torch.nn.attention import SDPBackend

        return getattr(SDPBackend, self.backend_name)

    def version(self) -> str:
        return f"torch {torch.__version__}" if torch is not None else "torch missing"

    @property
    def spelling(self) -> Spelling:
        """What this adapter's spelling can carry (`SDPA_SPELLINGS`; None: the per-case choice)."""
        return SDPA_SPELLINGS[self.entry_point]

    def backend_caps(self, device: str) -> Capabilities | None:
        """What the pinned backend claims on `device`, whatever the spelling (None: no implementation there)."""
        return self.cpu_caps if device.startswith("cpu") else self.cuda_caps

    def caps_for(self, device: str) -> Capabilities | None:
        """What this variant claims on `device`: the backend's claims less what its spelling cannot carry."""
        return spelled_capabilities(self.backend_caps(device), self.spelling)

    def unavailable_reason(self, device: str) -> str | None:
        reason = tc.device_unavailable_reason(device)
        if reason:
            return reason
        if device.startswith("cpu") and self.cpu_reason:
            return self.cpu_reason
        if self.caps_for(device) is None:
            return f"torch SDPA {self.backend_name} has no implementation on {device}"
        return self._device_reason(device)

    def _device_reason(self, device: str) -> str | None:
        return None

    def supports(self, case: Case, device: str) -> str | None:
        return self.unavailable_reason(device) or self.claim_reason(case, device) or self._torch_refusal(case, device)

    def claim_reason(self, case: Case, device: str) -> str | None:
        """The decline `supports` takes from the declarations alone (the backend's capabilities on `device` and
        what the spelling carries), without this machine or torch's dispatcher: None means claimed."""
        caps = self.backend_caps(device)
        if caps is None:
            return f"torch SDPA {self.backend_name} has no implementation on {device}"
        label = f"SDPA spelling {self.entry_point}" if self.entry_point else "SDPA's per-case spelling"
        return spelling_reason(label, self.spelling, caps, case, device)

    def _query_spelling(self, case: Case, device: str) -> tuple[str | None, bool] | None:
        """(mask kind None/"bool"/"float", is_causal) of the call torch's dispatcher sees for this case and
        spelling; None when the spelling bypasses the dispatcher's backend choice (see `_torch_refusal`)."""
        entry = self.entry_point
        if entry is None:
            kind = ("float" if case.bias is not None else "bool") if _needs_attn_mask(case) else None
            return kind, (case.causal if kind is None else False)
        if entry == "is_causal":
            return None, case.causal
        if entry == "bool_mask":
            return "bool", False
        if entry == "causal_upper_left" or _square(case):
            return None, True  # CausalBias runs is_causal=True
        # causal_lower_right, Lq != Lk: CausalBias itself tries the flash then the efficient kernel (no
        # sdpa_kernel pinning), else it materialises the mask through the pinned backend
        if device.startswith("cuda"):
            from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention

            dtype = tc.torch_dtype(case.dtype)
            q = _empty_view((case.B, case.Hq, case.Lq, case.d), dtype, device, "contiguous", case.backward)
            k = _empty_view((case.B, case.Hkv, case.Lk, case.d), dtype, device, "contiguous", case.backward)
            v = _empty_view((case.B, case.Hkv, case.Lk, case.dv), dtype, device, "contiguous", case.backward)
            params = SDPAParams(q, k, v, None, 0.0, False, case.Hq != case.Hkv)
            if can_use_flash_attention(params) or can_use_efficient_attention(params):
                return None
        return "bool", False

    def _torch_refusal(self, case: Case, device: str) -> str | None:
        """torch's own reasons for refusing the pinned backend on this case's call, or None."""
        from torch.nn.attention import sdpa_kernel

        dtype = tc.torch_dtype(case.dtype)
        grad = case.backward
        q_layout = "contiguous" if case.layout == "kv_broadcast" else case.layout
        q = _empty_view((case.B, case.Hq, case.Lq, case.d), dtype, device, q_layout, grad)
        k = _empty_view((case.B, case.Hkv, case.Lk, case.d), dtype, device, case.layout, grad)
        v = _empty_view((case.B, case.Hkv, case.Lk, case.dv), dtype, device, case.layout, grad)
        spelled = self._query_spelling(case, device)
        if spelled is None:
            return None
        kind, is_causal = spelled
        mask = None
        if kind is not None:
            mask_dtype = dtype if kind == "float" else torch.bool
            mask = torch.zeros((case.B, 1, case.Lq, case.Lk), dtype=mask_dtype, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([self.backend]):
                    choice = torch._fused_sdp_choice(q, k, v, mask, 0.0, is_causal, scale=case.scale,
                                                     enable_gqa=case.Hq != case.Hkv)
                error = None
            except RuntimeError as exc:
                choice, error = None, str(exc).strip()
        if choice == int(self.backend):
            return None
        said = _torch_reasons(caught)
        if error:
            said.append(error)
        return f"torch refuses SDPA {self.backend_name} for this call: " + ("; ".join(said) or f"choice={choice}")

    # -- the call ---------------------------------------------------------------------------------
    def _call(self, c: SdpaCall):
        """The public call with the arguments `sdpa_args` made (``c.args``; its mask as ``c.call_mask``)."""
        from torch.nn.attention import sdpa_kernel

        a = c.args
        kwargs = dict(attn_mask=c.call_mask, dropout_p=a.dropout_p, is_causal=a.is_causal, scale=a.scale)
        if a.enable_gqa:
            kwargs["enable_gqa"] = True
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([self.backend]), tc.code_under_test(c.t.q.device):
                    return torch.nn.functional.scaled_dot_product_attention(c.t.q, c.t.k, c.t.v, **kwargs)
            except RuntimeError as exc:
                if "No available kernel" not in str(exc):
                    raise
                said = "; ".join(_torch_reasons(caught)) or "no reason printed"
        # torch's dispatcher checked the real tensors and refused the pinned backend: it computed nothing
        raise CallDeclined(f"torch SDPA {self.backend_name} refused the call (No available kernel), although its "
                           f"dispatcher query in supports() accepted these shapes; torch said: {said}")

    def _kernel_notes(self, rec: tc.KernelRecorder, which: int) -> list[str]:
        notes = []
        if rec.error:
            notes.append(rec.error)
        if rec.active and not rec.error and not rec.names:
            notes.append("the profiler captured no CUDA kernel for this call")
        expected = self.expected_kernels[which]
        if expected:
            note = tc.missing_kernel_note(rec.names, expected, f"pinned SDPA {self.backend_name}")
            if note:
                notes.append(note)
        elif rec.names:  # math: a fused attention kernel would mean the pinning did not hold
            fused = [n for n in rec.names if any(s in n for s in _FUSED_MARKERS)]
            if fused:
                notes.append(f"pinned SDPA MATH but fused attention kernels ran: {fused[:4]}")
        return notes

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        c = prepare_sdpa_call(inputs, case, device, entry=self.entry_point)
        with tc.KernelRecorder(device) as rec:
            out = self._call(c)
        mutated = c.mutated()
        notes = self._spelling_notes(c) + self._kernel_notes(rec, 0)
        lse, convention = self._lse(c.t, c.lse_mask_t, c.attn_mask, c.lse_is_causal, case, out, device, notes)
        return ForwardOutput(
            out=tc.to_numpy(out),
            lse=lse,
            out_dtype=tc.dtype_name(out.dtype),
            out_device=str(out.device),
            kernels=rec.names,
            mutated_inputs=mutated,
            lse_convention=convention,
            notes=notes,
        )

    # -- LSE through the backend's own (private) op ----------------------------------------------------
    def _lse_op(self, q, k, v, fmask, is_causal: bool, case: Case, device: str):
        """(out, lse [B, Hq, >= Lq]) from the backend's aten op, or None when it has none on `device`."""
        return None

    def _lse(self, t: tc.Materialized, mask_t, attn_mask, is_causal: bool, case: Case, out, device: str,
             notes: list[str]) -> tuple[np.ndarray | None, str]:
        """LSE from a second call of the pinned backend's aten op on the same tensors (SEMANTICS.md §12).

        Where the capabilities declare LSE (CPU flash) it is returned, with a note if that call's output
        differs from the public call's; where they do not (CUDA), it is returned only when the op's output
        equals the public output bitwise - proof that it is the same computation - and otherwise withheld
        with a note. Empty-row conventions go through `translate_empty_lse`.
        """
        declared = self.capabilities_lse(device)
        fmask = mask_t
        if mask_t is not None and mask_t.dtype == torch.bool:
            fmask = torch.zeros(mask_t.shape, dtype=t.q.dtype, device=mask_t.device).masked_fill(~mask_t, -math.inf)
        try:
            with tc.code_under_test(device):
                got = self._lse_op(t.q, t.k, t.v, fmask, is_causal, case, device)
        except Exception as exc:
            if declared:
                raise
            notes.append(f"LSE not reported: the backend's aten op raised {type(exc).__name__}: "
                         f"{str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}")
            return None, "-inf"
        if got is None:
            return None, "-inf"
        out2, lse_t = got
        lse_t = lse_t.reshape(lse_t.shape[0], lse_t.shape[1], -1)[..., : case.Lq]
        if not torch.equal(out2, out):
            diff = (out2.double() - out.double()).abs().nan_to_num(float("inf")).max().item()
            what = "reported anyway (declared)" if declared else "not reported"
            notes.append(f"LSE {what}: the backend's aten op called again gave an output that differs from the "
                         f"public SDPA call's (max |diff| {diff:.3g})")
            if not declared:
                return None, "-inf"
        lse = tc.to_numpy(lse_t)
        empty = tc.empty_rows(attn_mask, (case.B, case.Hq, case.Lq))
        lse, convention, note = tc.translate_empty_lse(lse, empty, self.lse_convention_for(device))
        if note:
            notes.append(note)
        return lse, convention

    def lse_convention_for(self, device: str) -> str:
        return self.cpu_lse_convention if device.startswith("cpu") else "-inf"

    def capabilities_lse(self, device: str) -> bool:
        caps = self.caps_for(device)
        return bool(caps and caps.lse)

    @staticmethod
    def _repeat_kv(k, v, case: Case):
        if case.Hq == case.Hkv:
            return k, v
        g = case.Hq // case.Hkv
        return k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        if inputs.dout is None:
            raise ValueError(f"{self.name}.backward needs inputs.dout (case {case.id})")
        c = prepare_sdpa_call(inputs, case, device, backward=True, entry=self.entry_point)
        with torch.enable_grad(), tc.KernelRecorder(device) as rec:
            out = self._call(c)
            with tc.code_under_test(device):
                grads = torch.autograd.grad(out, (c.t.q, c.t.k, c.t.v), grad_outputs=c.t.dout)
        return tc.autograd_output(out, grads, rec, c.mutated(),
                                  notes=self._spelling_notes(c) + self._kernel_notes(rec, 1))

    def _spelling_notes(self, c: SdpaCall) -> list[str]:
        if self.entry_point is None:
            return []
        if c.args.causal_bias is not None:
            return [f"spelling: attn_mask=torch.nn.attention.bias.{c.args.causal_bias}(Lq, Lk)"] + c.notes
        if self.entry_point == "bool_mask":
            return ["spelling: dense boolean attn_mask (True = attend), is_causal=False"]
        return [f"spelling: is_causal={c.is_causal}, attn_mask=None"]


# kernel-name fragments of the fused SDPA backends on CUDA (as the torch profiler names them)
_FUSED_MARKERS = ("flash_fwd", "flash_bwd", "fmha_cutlass", "cudnn_generated", "fort_native_sdpa")


def _caps(**kw) -> Capabilities:
    base = dict(dtypes=_ALL_FLOAT, devices=frozenset({"cpu"}), alignments=frozenset(ALIGNMENTS), window=True,
                mask=True, bias=True, softcap=False, gqa=True, varlen=True, custom_scale=True,
                layouts=frozenset(LAYOUTS), lse=False, backward=True, deterministic=False, padding_as_mask=True,
                library_check="torch SDPA's dispatcher for the pinned backend (its reasons, `_torch_refusal`; "
                              "'No available kernel' at the call)")
    base.update(kw)
    base.setdefault("chunk", base["window"])  # chunks go through the same dense attn_mask as windows (§19)
    return Capabilities(**base)


class SdpaMath(SdpaAdapter):
    """SDPA pinned to the MATH backend (separate matmul and softmax operators)."""

    name = "torch-sdpa-math"
    description = "torch SDPA, MATH backend only (sdpa_kernel pinned): explicit matmul + softmax"
    backend_name = "MATH"
    expected_kernels = ((), ())
    cpu_caps = _caps()
    cuda_caps = _caps(devices=frozenset({"cuda"}))


class SdpaFlash(SdpaAdapter):
    """SDPA pinned to FLASH_ATTENTION: the CPU flash kernel on CPU, the vendored FA2 on CUDA."""

    name = "torch-sdpa-flash"
    description = "torch SDPA, FLASH_ATTENTION backend only (CPU flash kernel / vendored FlashAttention-2 on CUDA)"
    backend_name = "FLASH_ATTENTION"
    expected_kernels = (("flash_fwd",), ("flash_bwd",))
    # the CPU flash kernel: any float dtype, masks as additive float masks, dv must equal d, exposes LSE
    cpu_caps = _caps(dv_ne_d=False, lse=True)
    # the CUDA FA2: fp16/bf16, head dim a multiple of 8 up to 256, dv == d, no attn_mask at all,
    # is_causal only for Lq == Lk (torch refuses non-square causal: FA2 would align it bottom-right)
    # (the head-dim limits are left to torch's dispatcher check in `supports`, which words them itself)
    cuda_caps = _caps(devices=frozenset({"cuda"}), dtypes=_HALF, dv_ne_d=False, alignments=frozenset({"top_left"}),
                      window=False, mask=False, bias=False, varlen=False, memory="linear")
    cpu_lse_convention = "0"

    def _device_reason(self, device: str) -> str | None:
        if device.startswith("cuda"):
            cc = tc.cuda_capability()
            if cc is not None and cc < (8, 0):
                return f"torch's flash backend needs sm80 or newer; this GPU is sm{cc[0]}{cc[1]}"
        return None

    def _lse_op(self, q, k, v, fmask, is_causal: bool, case: Case, device: str):
        if device.startswith("cpu"):  # returns (out, logsumexp [B, H, Lq] fp32); no GQA, masks as floats
            k, v = self._repeat_kv(k, v, case)
            res = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal,
                                                                              attn_mask=fmask, scale=case.scale)
            return res[0], res[1]
        # CUDA FA2: (out, logsumexp [B, H, Lq], ...); GQA native, never a mask on this backend
        res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, False, scale=case.scale)
        return res[0], res[1]


class SdpaEfficient(SdpaAdapter):
    """SDPA pinned to EFFICIENT_ATTENTION (xFormers/CUTLASS memory-efficient kernels; CUDA only)."""

    name = "torch-sdpa-efficient"
    description = "torch SDPA, EFFICIENT_ATTENTION backend only (CUTLASS memory-efficient kernels, CUDA)"
    backend_name = "EFFICIENT_ATTENTION"
    expected_kernels = (("fmha_cutlassF",), ("fmha_cutlassB",))
    cpu_reason = "torch SDPA's EFFICIENT_ATTENTION backend has no CPU implementation (CUDA only)"
    cuda_caps = _caps(devices=frozenset({"cuda"}), dtypes=frozenset({"float32", "float16", "bfloat16"}),
                      memory="linear")

    def _lse_op(self, q, k, v, fmask, is_causal: bool, case: Case, device: str):
        # (out, log_sumexp [B, H, ceil(Lq / 32) * 32], seed, offset); no native GQA
        k, v = self._repeat_kv(k, v, case)
        res = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, fmask, True, 0.0, is_causal,
                                                                     scale=case.scale)
        return res[0], res[1]


class SdpaCudnn(SdpaAdapter):
    """SDPA pinned to CUDNN_ATTENTION (cuDNN fused flash attention; CUDA only)."""

    name = "torch-sdpa-cudnn"
    description = "torch SDPA, CUDNN_ATTENTION backend only (cuDNN fused attention, CUDA)"
    backend_name = "CUDNN_ATTENTION"
    expected_kernels = (("cudnn", "fort_native_sdpa"), ("cudnn", "fort_native_sdpa"))
    cpu_reason = "torch SDPA's CUDNN_ATTENTION backend has no CPU implementation (CUDA + cuDNN only)"
    # shape limits: torch's dispatcher check
    cuda_caps = _caps(devices=frozenset({"cuda"}), dtypes=_HALF, memory="linear")

    def _lse_op(self, q, k, v, fmask, is_causal: bool, case: Case, device: str):
        # (out, logsumexp [B, H, Lq] or [B, H, Lq, 1], ...); K/V expanded to Hq heads for the second call
        k, v = self._repeat_kv(k, v, case)
        res = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, fmask, True, 0.0, is_causal, False,
                                                                 scale=case.scale)
        return res[0], res[1]

    def _device_reason(self, device: str) -> str | None:
        if device.startswith("cuda") and not torch.backends.cudnn.is_available():
            return "cuDNN is not available to this torch build"
        return None
