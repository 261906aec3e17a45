"""xformers (``pip install xformers``, 0.0.35): ``memory_efficient_attention``, what diffusion and many training
stacks call, through each ``attn_bias`` spelling and each ``op=`` it offers on Hopper.

Spellings (``xformers@ENTRY``, `conformance.adapters.variants`):

- one per ``attn_bias`` (`BIASES`, the one table of what each expresses): ``no_bias`` (``attn_bias=None``),
  ``LowerTriangularMask`` (causal, top-left), ``LowerTriangularFromBottomRightMask`` (causal, bottom-right),
  ``LowerTriangularFromBottomRightLocalAttentionMask`` (bottom-right causal with a left window), the block-diagonal
  biases over sequences packed along one batch row (``BlockDiagonalMask``, ``BlockDiagonalCausalMask`` (top-left per
  block), ``BlockDiagonalCausalFromBottomRightMask``, ``BlockDiagonalCausalLocalAttentionMask`` (top-left, left
  window), ``BlockDiagonalCausalWithOffsetPaddedKeysMask`` (bottom-right, keys left in per-sequence slots of
  ``kv_padding`` with their lengths, NaN padding included)) and ``tensor`` (a dense additive bias
  [B, Hq, Lq, Lk]: the case's bias, -inf where a key is not visible: masks, windows, chunks, either alignment,
  padding as masked positions (SEMANTICS.md §17)); the dispatcher picks the operator.
- one per operator (``cutlass``, ``flash``, ``flash3``, ``triton_splitk``): ``op=(FwOp, BwOp)`` (forward only for
  ``triton_splitk``), the bias picked per case among those the operator lists.
- ``partial``: split-KV (§14): ``memory_efficient_attention_partial`` on three uneven key splits, merged by
  ``merge_attentions`` (its LSE is returned: natural log, [B, Hq, Lq]).

Without ``@`` the bias is picked per case (`BIASES` order: the structured biases first, ``tensor`` last) and the
dispatcher picks the operator.

Layout: BMHK, views ``x.transpose(1, 2)`` of the case's [B, H, L, D] tensors (their strides as the case's layout
makes them; the block-diagonal spellings pack copies); GQA/MQA (§9) as BMGHK, K/V expanded over each group with
stride 0 (xformers' documented way). A window ``(left, 0)`` (or ``(left, right)`` with causal) is
``window_size = left + 1`` of the local-attention biases. Backward (§13): autograd through
``memory_efficient_attention``. xformers has no soft cap and no sinks.

Declared support comes from the installed library: each operator's ``SUPPORTED_DTYPES``, ``SUPPORTED_MAX_K``,
``SUPPORTED_ATTN_BIAS_TYPES``, ``SUPPORTS_DIFFERENT_VALUE_EMBED``, ``SUPPORTS_BMGHK``, ``SUPPORTS_CUSTOM_SCALE``,
``SUPPORTS_PARTIAL`` (`op_capabilities`); `supports` then asks xformers about the case's actual tensors and bias: the
operator's ``not_supported_reasons`` or the dispatcher (``No operator found ...``), and declines in its words.
The operator the dispatcher picks is recorded first in ``ForwardOutput.kernels`` (``xformers:<op NAME>``), then the
CUDA kernels the profiler saw. Without the library the adapter claims nothing; with a build whose C++/CUDA extensions do
not load beside this torch it is unavailable, with xformers' reason (`cpp_library_reason`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.base import (
    BackwardOutput,
    CallDeclined,
    Capabilities,
    CaseInputs,
    Exclusion,
    ForwardOutput,
    capability_reason,
)
from attention_conformance.adapters.spelling import (
    LibraryAdapter,
    equivalent_cases,
    first_claim,
    kv_splits,
    sequence_lengths,
    union_capabilities,
)
from attention_conformance.cases.case import ALIGNMENTS, LAYOUTS, Case

__all__ = ["BIASES", "HIDDEN_NOTE", "LIBRARY_CHECK", "OPS", "BiasRefused", "BiasSpelling", "Translated", "Xformers",
           "cpp_library_reason", "flash_attn_without_fa2", "importing_xformers", "op_capabilities", "translate",
           "window_size"]

DISTRIBUTION = "xformers"


@dataclass(frozen=True)
class BiasSpelling:
    """One ``attn_bias`` of xformers and what it can express (the only place its limits are written).

    ``cls``: the class in ``xformers.ops.fmha.attn_bias`` (None: ``attn_bias=None``; "Tensor": a dense tensor);
    ``alignment``: the causal alignment built into the bias (None: not causal); ``window``: a left window on top
    of the causal mask (local attention); ``blocks``: sequences packed along one batch row with their lengths;
    ``padded_keys``: keys stay in per-sequence slots of ``kv_padding`` (their lengths told).
    """

    cls: str | None
    alignment: str | None = None
    window: bool = False
    blocks: bool = False
    padded_keys: bool = False

    @property
    def dense(self) -> bool:
        return self.cls == "Tensor"

    def capabilities(self) -> dict[str, Any]:
        """The `Capabilities` fields this bias decides (a causal bias says no non-causal case; a local-attention
        bias needs a finite left window)."""
        needs_window = (Exclusion(f"{self.cls} takes a finite window_size (a left window); this case has none",
                                  lambda c: c.window is None or c.window[0] is None),) if self.window else ()
        return dict(
            alignments=frozenset(ALIGNMENTS) if self.dense else frozenset({self.alignment} - {None}),
            noncausal=self.alignment is None, window=self.window or self.dense, mask=self.dense, bias=self.dense,
            chunk=self.dense, varlen=self.blocks or self.dense, padding_as_mask=self.dense,
            layouts=frozenset({"contiguous"}) if self.blocks else frozenset(LAYOUTS),
            memory=None if self.dense else "linear", excludes=needs_window,
        )


BIASES: dict[str, BiasSpelling] = {
    "no_bias": BiasSpelling(None),
    "LowerTriangularMask": BiasSpelling("LowerTriangularMask", "top_left"),
    "LowerTriangularFromBottomRightMask": BiasSpelling("LowerTriangularFromBottomRightMask", "bottom_right"),
    "LowerTriangularFromBottomRightLocalAttentionMask": BiasSpelling(
        "LowerTriangularFromBottomRightLocalAttentionMask", "bottom_right", window=True),
    "BlockDiagonalMask": BiasSpelling("BlockDiagonalMask", blocks=True),
    "BlockDiagonalCausalMask": BiasSpelling("BlockDiagonalCausalMask", "top_left", blocks=True),
    "BlockDiagonalCausalFromBottomRightMask": BiasSpelling("BlockDiagonalCausalFromBottomRightMask", "bottom_right",
                                                           blocks=True),
    "BlockDiagonalCausalWithOffsetPaddedKeysMask": BiasSpelling(
        "BlockDiagonalCausalWithOffsetPaddedKeysMask", "bottom_right", blocks=True, padded_keys=True),
    "BlockDiagonalCausalLocalAttentionMask": BiasSpelling("BlockDiagonalCausalLocalAttentionMask", "top_left",
                                                          window=True, blocks=True),
    "tensor": BiasSpelling("Tensor"),
}

#: operator entry points: module of ``xformers.ops.fmha`` -> whether it has a backward operator
OPS: dict[str, bool] = {"cutlass": True, "flash": True, "flash3": True, "triton_splitk": False}
#: the operators the dispatcher chooses among on CUDA (xformers/ops/fmha/dispatch.py), forward and backward
DISPATCHED_FW = ("flash3", "flash", "cutlass", "triton_splitk")
DISPATCHED_BW = ("flash3", "flash", "cutlass")
ENTRY_POINTS = (*BIASES, *OPS, "partial")


def window_size(case: Case) -> int:
    """``window_size`` of a local-attention bias for `case`: keys ``i' - window_size < j <= i'`` (left + 1)."""
    if case.window is None or case.window[0] is None:
        raise ValueError(f"case {case.id} has no finite left window")
    return int(case.window[0]) + 1


def op_capabilities(fw, bw) -> dict[str, Any]:
    """The `Capabilities` fields an operator pair decides, from xformers' own declarations on the operator."""
    max_k = int(getattr(fw, "SUPPORTED_MAX_K", 0))
    return dict(
        dtypes=frozenset(tc.dtype_name(d) for d in getattr(fw, "SUPPORTED_DTYPES", ())),
        head_dims=None, max_head_dim=max_k,
        dv_ne_d=bool(getattr(fw, "SUPPORTS_DIFFERENT_VALUE_EMBED", False)),
        gqa=bool(getattr(fw, "SUPPORTS_BMGHK", False)),
        custom_scale=bool(getattr(fw, "SUPPORTS_CUSTOM_SCALE", False)),
    )


def _bias_type(fmha, name: str):
    cls = BIASES[name].cls
    if cls is None:
        return type(None)
    if cls == "Tensor":
        return torch.Tensor
    return getattr(fmha.attn_bias, cls, None)


def _takes(op, fmha, name: str) -> bool:
    """Whether operator `op` lists the bias of spelling `name` among its ``SUPPORTED_ATTN_BIAS_TYPES``."""
    t = _bias_type(fmha, name)
    return op is not None and t is not None and t in tuple(getattr(op, "SUPPORTED_ATTN_BIAS_TYPES", ()))


#: what `Xformers.library_reason` asks at run time (``Capabilities.library_check``)
LIBRARY_CHECK = ("xformers' own answer for the case's tensors and bias: the operator's not_supported_reasons (an op= "
                 "variant) or the dispatcher's 'No operator found' (head-dim alignment, bias and layout limits), and "
                 "the bias classes' checks of the lengths and window")


def _capabilities(fmha, name: str, fw, bw, *, partial: bool = False) -> Capabilities:
    return Capabilities(devices=frozenset({"cuda"}), softcap=False, lse=partial,
                        backward=not partial and _takes(bw, fmha, name), library_check=LIBRARY_CHECK,
                        **op_capabilities(fw, bw), **BIASES[name].capabilities())


# -- translation: case -> xformers arguments ---------------------------------------------------------------------------
class BiasRefused(ValueError):
    """An ``attn_bias`` constructor of xformers refused the case's lengths or window (its message is xformers')."""


@dataclass
class Translated:
    """The arguments of one ``memory_efficient_attention`` call and how to read its output back."""

    q: Any
    k: Any
    v: Any
    bias: Any
    unpack: Callable[[Any], Any]  # out (BMHK / BMGHK, packed or not) -> [B, Hq, Lq, dv]
    named: dict[str, Any] = field(default_factory=dict)  # what the kernel receives, for the mutation check
    notes: list[str] = field(default_factory=list)


def _bias_object(fmha, sp: BiasSpelling, case: Case, device):
    ab = fmha.attn_bias
    if sp.cls is None:
        return None
    sq, sk = sequence_lengths(case)
    if not sp.blocks:
        cls = getattr(ab, sp.cls)
        return cls(window_size(case)) if sp.window else cls()
    if sp.padded_keys:
        return getattr(ab, sp.cls).from_seqlens(q_seqlen=sq, kv_padding=case.Lk, kv_seqlen=sk, device=device)
    if sp.window:
        return ab.BlockDiagonalMask.from_seqlens(sq, sk, device=device).make_local_attention(window_size(case))
    return getattr(ab, sp.cls).from_seqlens(sq, sk, device=device)


def _dense_bias(case: Case, q, mask: np.ndarray | None, bias: np.ndarray | None, dry: bool):
    """[B, Hq, Lq, Lk] additive bias in q's dtype (the case's bias where visible, -inf elsewhere), stored with the
    last dimension padded to a multiple of 8 (xformers requires that alignment of a tensor bias and says to slice a
    wider buffer)."""
    B, Hq, Lq, Lk = case.B, case.Hq, case.Lq, case.Lk
    storage = torch.empty(B, Hq, Lq, 8 * math.ceil(max(Lk, 1) / 8), dtype=q.dtype, device=q.device)
    out = storage[..., :Lk]
    if dry:
        return out
    vis = tc.visibility(case, mask)
    full = tc.float_mask(vis, tc.neutral_padded_bias(bias, case), B, Lq, Lk)
    if full is None:
        full = np.zeros((B, 1, Lq, Lk))
    out.copy_(tc.to_torch(np.array(np.broadcast_to(full, (B, Hq, Lq, Lk))), q.dtype, str(q.device), name="attn_bias"))
    return out


def translate(fmha, name: str, case: Case, q, k, v, *, mask=None, bias=None, dry: bool = False) -> Translated:
    """xformers' arguments for `case` through ``attn_bias`` spelling `name`, from [B, H, L, D] tensors (SEMANTICS.md
    §1). ``dry``: only shapes, strides and types matter (an uninitialised dense bias)."""
    sp = BIASES[name]
    B, Hq, Hkv, Lq = case.B, case.Hq, case.Hkv, case.Lq
    g = Hq // Hkv
    sq, sk = sequence_lengths(case)
    qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # BMHK views
    notes: list[str] = []
    if sp.blocks:
        qb = torch.cat([qb[b: b + 1, :n] for b, n in enumerate(sq)], dim=1)
        if sp.padded_keys:
            kb, vb = kb.reshape(1, B * case.Lk, Hkv, -1), vb.reshape(1, B * case.Lk, Hkv, -1)
        else:
            kb = torch.cat([kb[b: b + 1, :n] for b, n in enumerate(sk)], dim=1)
            vb = torch.cat([vb[b: b + 1, :n] for b, n in enumerate(sk)], dim=1)
    if sp.dense:
        attn_bias = _dense_bias(case, q, mask, bias, dry)
        notes.append("tensor attn_bias stored with its last dimension padded to a multiple of 8")
    else:
        try:
            attn_bias = _bias_object(fmha, sp, case, q.device)
        except (ValueError, RuntimeError) as exc:  # xformers' own checks in the bias classes
            raise BiasRefused(f"xformers refuses {sp.cls}: {exc}") from exc
    named = {"q": qb, "k": kb, "v": vb}
    if isinstance(attn_bias, torch.Tensor):
        named["attn_bias"] = attn_bias
    if g > 1:  # BMGHK: one group per K/V head, K/V expanded over the group with stride 0
        qb = qb.unflatten(2, (Hkv, g))
        kb = kb.unsqueeze(3).expand(*kb.shape[:3], g, kb.shape[-1])
        vb = vb.unsqueeze(3).expand(*vb.shape[:3], g, vb.shape[-1])
        if isinstance(attn_bias, torch.Tensor):
            attn_bias = attn_bias.unflatten(1, (Hkv, g))

    def unpack(out):
        out = out.flatten(2, 3) if out.dim() == 5 else out  # [.., M, Hq, dv]
        if not sp.blocks:
            return out.transpose(1, 2)
        full = out.new_zeros(B, Lq, Hq, out.shape[-1])
        start = 0
        for b, n in enumerate(sq):
            full[b, :n] = out[0, start: start + n]
            start += n
        return full.transpose(1, 2)

    return Translated(q=qb, k=kb, v=vb, bias=attn_bias, unpack=unpack, named=named, notes=notes)


def _empty_like_case(case: Case, device: str, dtype) -> tuple[Any, Any, Any]:
    """Uninitialised q, k, v [B, H, L, D] with the strides the case's layout gives (`tc.materialize`'s layouts)."""
    def laid(H, L, D, kv):
        if case.layout == "bshd":
            return torch.empty(case.B, L, H, D, dtype=dtype, device=device).transpose(1, 2)
        if case.layout == "kv_broadcast" and kv:
            return torch.empty(1, H, L, D, dtype=dtype, device=device).expand(case.B, H, L, D)
        return torch.empty(case.B, H, L, D, dtype=dtype, device=device)

    return (laid(case.Hq, case.Lq, case.d, False), laid(case.Hkv, case.Lk, case.d, True),
            laid(case.Hkv, case.Lk, case.dv, True))


# -- the adapter -----------------------------------------------------------------------------------------------------
def flash_attn_without_fa2() -> bool:
    """Whether the importable ``flash_attn`` package lacks FA2's ``flash_attn_interface`` (flash-attn-4 installs
    ``flash_attn.cute`` only). Read from the package's folders, without importing it."""
    loaded = sys.modules.get("flash_attn")
    spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec("flash_attn")
    if spec is None:
        return False
    return not any(os.path.exists(os.path.join(loc, "flash_attn_interface.py"))
                   for loc in (spec.submodule_search_locations or ()))


#: what `Xformers.list` says where `importing_xformers` hid flash_attn
HIDDEN_NOTE = ("flash_attn here is not FA2 (no flash_attn_interface: flash-attn-4?); xformers was imported with it "
               "hidden, so its flash operators use PyTorch's flash build")


@contextmanager
def importing_xformers() -> Iterator[bool]:
    """Around the first import of xformers (the adapter's, a benchmark's): yields whether ``flash_attn`` is hidden.

    xformers 0.0.35 imports ``flash_attn.flash_attn_interface`` whenever a package named ``flash_attn`` is
    importable, so beside flash-attn-4 (``flash_attn.cute`` only) its import fails. Then ``flash_attn`` is hidden for
    the import alone (restored after it): xformers takes its path for a machine without FA2 (its flash operators
    call PyTorch's flash build), as where flash-attn-4 is not installed."""
    if not flash_attn_without_fa2():
        yield False
        return
    missing = object()
    saved = sys.modules.get("flash_attn", missing)
    sys.modules["flash_attn"] = None  # type: ignore[assignment]  # find_spec("flash_attn") answers None
    try:
        yield True
    finally:
        if saved is missing:
            sys.modules.pop("flash_attn", None)
        else:
            sys.modules["flash_attn"] = saved


def cpp_library_reason() -> str | None:
    """Why the imported xformers cannot run any operator (None: its C++/CUDA extensions loaded, or no xformers).

    An xformers wheel is built for one CUDA runtime (0.0.35 on PyPI: CUDA 12.8, beside torch 2.10). Where its
    extension does not load, every operator declines every call with "xFormers wasn't build with CUDA support":
    cutlassF-pt and fa2F-pt too, though they call PyTorch's own kernels, and Triton's split-KV (an H100 with torch
    2.11 + cu130: all 6,336 (case, variant) pairs of the gpu profile declined). That is said once, as the adapter's
    reason to be unavailable, in xformers' own words (its load exception) and the loader's (the exception's cause,
    e.g. "libcudart.so.12: cannot open shared object file": 0.0.35's extension uses only torch's stable C ABI besides
    the CUDA 12 runtime, so that file on LD_LIBRARY_PATH is what a cu130 torch lacks), not as NOT_SUPPORTED on every
    case."""
    xformers = sys.modules.get("xformers")
    if xformers is None or getattr(xformers, "_has_cpp_library", True):
        return None
    exc = getattr(getattr(xformers, "_cpp_lib", None), "_cpp_library_load_exception", None)
    words = " ".join(str(exc).split()).split(" Please reinstall")[0] if exc is not None else "no load exception"
    cause, seen = getattr(exc, "__cause__", None), set()
    while cause is not None and id(cause) not in seen:  # the innermost: torch.ops.load_library wraps dlopen's error
        seen.add(id(cause))
        inner = cause.__cause__ or cause.__context__
        if inner is None or not str(inner).strip():
            break
        cause = inner
    if cause is not None and str(cause).strip():
        words += f" ({type(cause).__name__}: {str(cause).strip().splitlines()[0]})"
        if "libcudart.so.12" in str(cause):
            words += ("; the CUDA 12 runtime this build links is not on the loader's path (LD_LIBRARY_PATH: "
                      "libcudart.so.12, e.g. from nvidia-cuda-runtime-cu12)")
    return f"xformers cannot load its C++/CUDA extensions, without which none of its operators runs: {words}"


class Xformers(LibraryAdapter):
    """xformers' memory_efficient_attention through its attn_bias and op= spellings (see the module docstring)."""

    name = "xformers"
    description = ("xformers memory_efficient_attention (BMHK/BMGHK), one variant per attn_bias and per op=, "
                   "memory_efficient_attention_partial + merge_attentions")
    module_name = "xformers.ops.fmha"
    distribution = DISTRIBUTION
    min_cc = (5, 0)
    cc_text = "xformers' CUDA operators"
    entry_points: ClassVar[tuple[str, ...]] = ENTRY_POINTS

    def __init__(self, entry_point: str | None = None) -> None:
        super().__init__(entry_point)
        self.capabilities = self._declared()

    def unavailable_reason(self, device: str) -> str | None:
        reason = super().unavailable_reason(device)
        if reason is None and device.startswith("cuda"):
            return cpp_library_reason()
        return reason

    def import_library(self) -> Any:
        """``xformers.ops.fmha``, imported as `importing_xformers` says (beside flash-attn-4 too)."""
        with importing_xformers() as hidden:
            module = super().import_library()
        if hidden:
            self.import_messages.append(HIDDEN_NOTE)
        return module

    # -- what this variant can say ----------------------------------------------------------------
    def _op(self, name: str) -> tuple[Any, Any]:
        """(forward operator, backward operator or None) of ``xformers.ops.fmha.<name>``."""
        mod = getattr(self.module(), name)
        return mod.FwOp, (getattr(mod, "BwOp", None) if OPS[name] else None)

    def _biases(self) -> tuple[str, ...]:
        if self.entry_point in BIASES:
            return (self.entry_point,)
        if self.entry_point == "partial":
            return ("no_bias",)
        return tuple(BIASES)

    def _op_pairs(self) -> list[tuple[Any, Any]]:
        """The operator pairs this variant may run: the fixed one, or what the dispatcher chooses among."""
        if self.entry_point in OPS:
            return [self._op(self.entry_point)]
        bws = [self._op(n)[1] for n in DISPATCHED_BW]
        pairs = []
        for name in DISPATCHED_FW:
            fw = self._op(name)[0]
            if self.entry_point == "partial" and not getattr(fw, "SUPPORTS_PARTIAL", False):
                continue
            pairs.extend((fw, bw) for bw in bws)
        return pairs

    def _bias_capabilities(self, name: str) -> Capabilities | None:
        """What spelling `name` expresses through the operators this variant may run (None: no operator takes it)."""
        fmha = self.module()
        caps = [_capabilities(fmha, name, fw, bw, partial=self.entry_point == "partial")
                for fw, bw in self._op_pairs() if _takes(fw, fmha, name)]
        if not caps:
            return None
        return dataclasses.replace(union_capabilities(caps), excludes=BIASES[name].capabilities()["excludes"])

    def _declared(self) -> Capabilities:
        if self.module() is None:
            return Capabilities(dtypes=frozenset(), devices=frozenset({"cuda"}))
        caps = [c for c in (self._bias_capabilities(n) for n in self._biases()) if c is not None]
        if not caps:
            return Capabilities(dtypes=frozenset(), devices=frozenset({"cuda"}))
        if len(caps) == 1:
            return caps[0]
        unclaimed = Exclusion(f"no attn_bias of {self.name} expresses this combination of features",
                              lambda c: self._claim(c)[0] is None)
        return union_capabilities(caps, unclaimed)

    def _claim(self, case: Case) -> tuple[str | None, Case, dict[str, str]]:
        """The first bias spelling whose declaration claims an equivalent form of `case` (`first_claim`)."""
        return first_claim(((n, c) for n in self._biases() if (c := self._bias_capabilities(n)) is not None), case)

    def claim_reason(self, case: Case, device: str) -> str | None:
        name, _, reasons = self._claim(case)
        if name is not None:
            return None
        return f"{self.name}: " + "; ".join(f"{n}: {r}" for n, r in reasons.items()) if reasons else \
            f"{self.name}: no operator of this variant takes any of its attn_bias spellings"

    def library_reason(self, case: Case, device: str) -> str | None:
        pick = self._pick(case, device)
        return None if pick[0] is not None else pick[2]

    def _pick(self, case: Case, device: str) -> tuple[str | None, Case, str]:
        """(bias spelling, the equivalent form of the case it expresses, '') for the first spelling the declaration
        claims and xformers accepts, else (None, case, xformers' reasons)."""
        reasons = []
        for name in self._biases():
            caps = self._bias_capabilities(name)
            if caps is None:
                continue
            for form in equivalent_cases(case):
                if capability_reason(caps, form, "cuda") is not None:
                    continue
                reason = self._library_reason(name, form, device)
                if reason is None:
                    return name, form, ""
                reasons.append(f"{name}: {reason}" if len(self._biases()) > 1 else reason)
        return None, case, "; ".join(dict.fromkeys(reasons)) or "claimed by no attn_bias spelling"

    def _inputs(self, tr: Translated, case: Case):
        common = importlib.import_module(self.module_name + ".common")
        return common.Inputs(query=tr.q, key=tr.k, value=tr.v, attn_bias=tr.bias, p=0.0, scale=case.scale,
                             is_partial=self.entry_point == "partial")

    def _library_reason(self, name: str, case: Case, device: str) -> str | None:
        """xformers' own answer for the case's tensors and bias: the fixed operator's ``not_supported_reasons``
        or the dispatcher's refusal; None when it takes the call."""
        fmha = self.module()
        q, k, v = _empty_like_case(case, device, tc.torch_dtype(case.dtype))
        try:
            tr = translate(fmha, name, case, q, k, v, dry=True)
        except BiasRefused as exc:  # a bias constructor refusing the lengths, in xformers' words
            return str(exc)
        inp = self._inputs(tr, case)
        if self.entry_point in OPS:
            fw, bw = self._op(self.entry_point)
            why = list(fw.not_supported_reasons(inp))
            if case.backward:
                why += [f"backward: {r}" for r in (bw.not_supported_reasons(inp) if bw else ["no backward operator"])]
            return f"xformers: {fw.NAME} does not support this call: {'; '.join(why)}" if why else None
        try:
            fmha.dispatch._dispatch_fw(inp, case.backward)
            if case.backward:
                fmha.dispatch._dispatch_bw(inp, varlen_lse_packed=self._lse_packed(inp))
        except NotImplementedError as exc:
            return "xformers: " + " ".join(str(exc).split())[:600]
        return None

    def _lse_packed(self, inp) -> bool | None:
        """The LSE format of the forward operator the dispatcher picks (the backward must read it)."""
        fw = self.module().dispatch._dispatch_fw(inp, True)
        return getattr(fw, "VARLEN_LSE_PACKED", None)

    def _op_arg(self):
        if self.entry_point in OPS:
            return self._op(self.entry_point)
        return None

    def _picked_names(self, tr: Translated, case: Case, backward: bool) -> tuple[str, ...]:
        """``xformers:<NAME>`` of the operator(s) that run: the fixed ones, or the dispatcher's pick."""
        if self.entry_point in OPS:
            fw, bw = self._op(self.entry_point)
            return (f"xformers:{fw.NAME}",) + ((f"xformers:{bw.NAME}",) if backward and bw else ())
        dispatch = self.module().dispatch
        inp = self._inputs(tr, case)
        names = (f"xformers:{dispatch._dispatch_fw(inp, backward).NAME}",)
        if backward:
            names += (f"xformers:{dispatch._dispatch_bw(inp, varlen_lse_packed=self._lse_packed(inp)).NAME}",)
        return names

    # -- calls ------------------------------------------------------------------------------------
    def _prepare(self, inputs: CaseInputs, case: Case, device: str, requires_grad: bool):
        name, form, why = self._pick(case, device)
        if name is None:
            raise ValueError(f"{self.name} cannot express case {case.id}: {why}")
        t = tc.materialize(inputs, case, device, requires_grad=requires_grad)
        tr = translate(self.module(), name, form, t.q, t.k, t.v, mask=inputs.mask, bias=inputs.bias)
        return name, form, t, tr

    def _call(self, tr: Translated, form: Case, device: str):
        fmha = self.module()
        try:
            with tc.code_under_test(device):
                return fmha.memory_efficient_attention(tr.q, tr.k, tr.v, attn_bias=tr.bias, scale=form.scale,
                                                       op=self._op_arg())
        except NotImplementedError as exc:  # the dispatcher or operator declining, before computing anything
            raise CallDeclined(f"xformers declined the call: {' '.join(str(exc).split())[:600]}") from exc

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        if self.entry_point == "partial":
            return self._partial(inputs, case, device)
        name, form, t, tr = self._prepare(inputs, case, device, False)
        picked = self._picked_names(tr, form, False)
        before = tc.snapshot(tr.named)
        with tc.KernelRecorder(device) as rec:
            out = tr.unpack(self._call(tr, form, device))
        notes = [f"entry point: xformers.ops.memory_efficient_attention(attn_bias={BIASES[name].cls})",
                 *tr.notes] + ([rec.error] if rec.error else [])
        return ForwardOutput(out=tc.to_numpy(out), out_dtype=tc.dtype_name(out.dtype), out_device=str(out.device),
                             kernels=picked + rec.names, mutated_inputs=tc.changed(before, tr.named), notes=notes)

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        if inputs.dout is None:
            raise ValueError(f"{self.name}.backward needs inputs.dout (case {case.id})")
        name, form, t, tr = self._prepare(inputs, case, device, True)
        picked = self._picked_names(tr, form, True)
        before = tc.snapshot(tr.named)
        with torch.enable_grad(), tc.KernelRecorder(device) as rec:
            out = tr.unpack(self._call(tr, form, device))
            with tc.code_under_test(device):
                grads = torch.autograd.grad(out, (t.q, t.k, t.v), grad_outputs=t.dout)
        notes = [f"entry point: xformers.ops.memory_efficient_attention(attn_bias={BIASES[name].cls}) + autograd",
                 *tr.notes] + ([rec.error] if rec.error else [])
        bo = tc.autograd_output(out, grads, rec, tc.changed(before, tr.named), notes=notes)
        bo.kernels = picked + bo.kernels
        return bo

    def _partial(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        fmha = self.module()
        name, form, t, tr = self._prepare(inputs, case, device, False)
        splits = kv_splits(case.Lk)
        before = tc.snapshot(tr.named)
        with tc.KernelRecorder(device) as rec:
            with tc.code_under_test(device):
                parts = [fmha.memory_efficient_attention_partial(tr.q, tr.k[:, lo:hi], tr.v[:, lo:hi], scale=form.scale)
                         for lo, hi in splits]
                out, lse = fmha.merge_attentions([p[0] for p in parts], [p[1] for p in parts], write_lse=True,
                                                 output_dtype=tr.q.dtype)
        out = tr.unpack(out)
        lse = lse.reshape(case.B, case.Hq, -1)[:, :, : case.Lq]  # [B, G, g, M] / [B, H, M] -> [B, Hq, Lq]
        notes = [f"entry point: xformers.ops.memory_efficient_attention_partial on key splits {splits} + "
                 "merge_attentions(output_dtype=query dtype)"] + ([rec.error] if rec.error else [])
        return ForwardOutput(out=tc.to_numpy(out), lse=tc.to_numpy(lse), out_dtype=tc.dtype_name(out.dtype),
                             out_device=str(out.device), kernels=rec.names, lse_convention="-inf",
                             mutated_inputs=tc.changed(before, tr.named), notes=notes)
