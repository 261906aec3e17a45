"""flash-attention adapters: FlashAttention-2 (`flash_attn`), FlashAttention-3 (`flash_attn_interface`,
with FP8 descales) and FlashAttention-4 (`flash_attn.cute`). Used when importable on a CUDA device.

How a case (oracles/SEMANTICS.md) maps onto the flash-attention APIs (public signatures of
Dao-AILab/flash-attention: flash_attn/flash_attn_interface.py, hopper/flash_attn_interface.py,
flash_attn/cute/interface.py):
- layout: the APIs take [B, L, H, D]; the adapter passes ``x.transpose(1, 2)`` of the case's
  [B, H, L, D] view (so ``bshd`` cases reach the kernel contiguous and ``contiguous`` cases reach it
  with a non-unit sequence stride; the last dimension is always unit-stride).
- §4 causal: flash-attn aligns causal masks bottom-right (>= 2.1). Top-left is only expressible when
  Lq == Lk (then it is the same mask); other top-left cases are declined.
- §5 window ``(left, right)``: ``window_size=(left, right)`` with -1 for unbounded (FA2, FA3) or
  None (FA4); causal forces right = 0 (`fa_window`). Negative windows never reach the kernel.
- §7 varlen: ``flash_attn_varlen_func`` on sequences packed to [total, H, D] with int32
  ``cu_seqlens`` (`cu_seqlens`, `pack_varlen`, `unpack_varlen`); padded query rows come back as 0.
- decoding (FA2, FA3): ``flash_attn_with_kvcache`` for forward cases with Lq <= 4 and no seqlens_q;
  per-batch key lengths (``seqlens_k``) go in ``cache_seqlens``.
- §3 softcap: ``softcap=c``. Boolean masks and arbitrary biases: not expressible (ALiBi slopes only)
  -> NOT_SUPPORTED.
- §12 LSE: ``return_attn_probs=True`` (FA2 func/varlen, FA3), ``return_softmax_lse=True``
  (with_kvcache), ``return_lse=True`` (FA4 when the signature has it). FA2 kernels write +inf on rows
  with no visible key, FA3/FA4 -inf (§8): the adapter passes them through and names the convention
  (`ForwardOutput.lse_convention`); the engine accepts +inf there and reports it as a finding.
- FP8 (FA3, §10): q8/k8/v8 as ``float8_e4m3fn`` with ``q_descale``, ``k_descale``, ``v_descale`` of
  shape (B, Hkv) in float32 (`fa3_descales`; per-tensor scales broadcast to that shape); output bf16.

None of this can run on a machine without the packages and a GPU; the pure translation helpers
(`fa_window`, `cu_seqlens`, `pack_varlen`, `unpack_varlen`, `unpack_varlen_lse`, `fa3_descales`) are
unit-tested on CPU.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, ClassVar

import numpy as np

from conformance.adapters import _torch_common as tc
from conformance.adapters._torch_common import torch
from conformance.adapters.base import (
    Adapter,
    BackwardOutput,
    Capabilities,
    CaseInputs,
    ForwardOutput,
    capability_reason,
)
from conformance.case import LAYOUTS, Case

__all__ = [
    "FlashAttn2",
    "FlashAttn3",
    "FlashAttn4",
    "cu_seqlens",
    "fa3_descales",
    "fa_window",
    "pack_varlen",
    "unpack_varlen",
    "unpack_varlen_lse",
]

_HALF = frozenset({"float16", "bfloat16"})


# -- argument translation (pure; unit-tested without flash-attn) -------------------------------------
def fa_window(case: Case, unbounded: int | None = -1) -> tuple[int | None, int | None]:
    """flash-attn ``window_size`` for `case` (SEMANTICS.md §5): None entries -> `unbounded`
    (-1 for FA2/FA3, None for FA4); causal forces right = 0 (§4, causal means right = 0)."""
    left, right = case.window if case.window is not None else (None, None)
    if case.causal:
        right = 0
    for name, value in (("left", left), ("right", right)):
        if value is not None and value < 0:
            raise ValueError(f"window {name}={value} < 0 in case {case.id}: flash-attn would treat it as unbounded")
    return (unbounded if left is None else int(left), unbounded if right is None else int(right))


def cu_seqlens(lengths) -> list[int]:
    """Cumulative sequence offsets [0, l0, l0 + l1, ...] (the ``cu_seqlens`` of varlen APIs)."""
    out = [0]
    for n in lengths:
        if int(n) < 0:
            raise ValueError(f"negative sequence length {n} in {list(lengths)}")
        out.append(out[-1] + int(n))
    return out


def pack_varlen(x, lengths):
    """[B, H, L, D] -> [sum(lengths), H, D]: the first lengths[b] rows of each batch, concatenated."""
    parts = [x[b, :, : int(n)].transpose(0, 1) for b, n in enumerate(lengths)]
    return torch.cat(parts, dim=0)


def unpack_varlen(packed, lengths, L: int):
    """[total, H, D] -> [B, H, L, D], zeros past each sequence's length (differentiable)."""
    offsets = cu_seqlens(lengths)
    outs = []
    for b, n in enumerate(lengths):
        seq = packed[offsets[b]: offsets[b + 1]].transpose(0, 1)  # [H, n, D]
        outs.append(torch.nn.functional.pad(seq, (0, 0, 0, L - int(n))))
    return torch.stack(outs, dim=0)


def unpack_varlen_lse(lse, lengths, L: int, fill: float = float("-inf")):
    """A varlen LSE to [B, H, L]: accepts (H, total) (flash-attn >= 2.4, FA3) or (B, H, max_seqlen)."""
    B = len(lengths)
    offsets = cu_seqlens(lengths)
    if lse.dim() == 2:
        H = lse.shape[0]
        out = torch.full((B, H, L), fill, dtype=lse.dtype, device=lse.device)
        for b, n in enumerate(lengths):
            out[b, :, : int(n)] = lse[:, offsets[b]: offsets[b + 1]]
        return out
    if lse.dim() == 3 and lse.shape[0] == B:
        out = torch.full((B, lse.shape[1], L), fill, dtype=lse.dtype, device=lse.device)
        for b, n in enumerate(lengths):
            out[b, :, : int(n)] = lse[b, :, : int(n)]
        return out
    raise ValueError(f"unexpected varlen LSE shape {tuple(lse.shape)} for B={B}, L={L}")


def fa3_descales(fp8: dict[str, Any], B: int, Hkv: int) -> tuple[dict[str, np.ndarray], float]:
    """float32 (B, Hkv) descales for FA3 from `CaseInputs.fp8` (SEMANTICS.md §10), and the largest
    relative change rounding them to float32 made (0.0 when they were float32 values already).

    Per-tensor descales (shape ()) are broadcast to (B, Hkv); per-head ones must already be (B, Hkv).
    FA3 takes float32 descales, so a float64 descale is rounded; the adapter notes the change (the
    oracle dequantized with the unrounded value).
    """
    out = {}
    worst = 0.0
    for name in ("q_descale", "k_descale", "v_descale"):
        if name not in fp8:
            raise KeyError(f"CaseInputs.fp8 lacks {name!r}; keys: {sorted(fp8)}")
        d = np.asarray(fp8[name], dtype=np.float64)
        if d.shape not in ((), (B, Hkv)):
            raise ValueError(f"{name} has shape {d.shape}; FA3 takes () broadcast or (B, Hkv) = {(B, Hkv)}")
        full = np.broadcast_to(d, (B, Hkv))
        d32 = np.ascontiguousarray(full.astype(np.float32))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(d32.astype(np.float64) - full) / np.abs(full)
        worst = max(worst, float(np.nan_to_num(rel, nan=0.0).max(initial=0.0)))
        out[name] = d32
    return out, worst


def _call(fn, args: tuple, required: dict, optional: dict):
    """fn(*args, **required, **optional-that-fn-accepts); a missing *required* keyword raises clearly."""
    try:
        params = inspect.signature(fn).parameters
        var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        params, var_kw = {}, True
    if not var_kw:
        missing = [k for k in required if k not in params]
        if missing:
            raise TypeError(f"{getattr(fn, '__qualname__', fn)} has no keyword(s) {missing} this case needs")
        optional = {k: v for k, v in optional.items() if k in params}
    return fn(*args, **required, **optional)


def _split_result(result) -> tuple[Any, Any]:
    """(out, lse or None) from a tensor or a tuple (out, lse, ...)."""
    if isinstance(result, (tuple, list)):
        return result[0], (result[1] if len(result) > 1 else None)
    return result, None


# -- adapters -------------------------------------------------------------------------------------------
class _FlashAttnBase(Adapter):
    """Shared availability, capability and LSE-translation logic of the flash-attention adapters."""

    isolate = True
    module_names: ClassVar[tuple[str, ...]] = ()
    package: ClassVar[str] = ""
    min_cc: ClassVar[tuple[int, int]] = (8, 0)
    cc_text: ClassVar[str] = "sm80 or newer"
    lse_declared: ClassVar[str] = "-inf"
    unbounded: ClassVar[int | None] = -1  # `fa_window`'s value for an unbounded side

    def __init__(self) -> None:
        self._module = None
        self._import_error: str | None = None
        self._notes: list[str] = []

    # -- availability -----------------------------------------------------------------------------
    def module(self):
        if self._module is None and self._import_error is None:
            errors = []
            for name in self.module_names:
                try:
                    mod = importlib.import_module(name)
                except Exception as exc:  # ImportError, or a broken build raising at import
                    errors.append(f"{name}: {type(exc).__name__}: {exc}")
                    continue
                problem = self._check_module(mod)
                if problem:
                    errors.append(f"{name}: {problem}")
                    continue
                self._module = mod
                break
            if self._module is None:
                self._import_error = f"{self.package} is not importable ({'; '.join(errors)})"
        return self._module

    def _check_module(self, mod) -> str | None:
        return None

    def version(self) -> str:
        mod = self.module()
        if mod is None:
            return "not installed"
        root = importlib.import_module(mod.__name__.split(".")[0])
        return str(getattr(mod, "__version__", None) or getattr(root, "__version__", "unknown"))

    def unavailable_reason(self, device: str) -> str | None:
        reasons = []
        if not device.startswith("cuda"):
            reasons.append(f"{self.name} runs on CUDA only (asked for device {device!r})")
        else:
            dev = tc.device_unavailable_reason(device)
            if dev:
                reasons.append(f"{self.name} needs a CUDA device: {dev}")
            else:
                cc = tc.cuda_capability()
                if cc is not None and cc < self.min_cc:
                    reasons.append(f"{self.name} needs {self.cc_text}; this GPU is sm{cc[0]}{cc[1]}")
        if tc.torch_import_error():
            reasons.append(tc.torch_import_error())
        elif self.module() is None:
            reasons.append(self._import_error)
        return "; ".join(reasons) or None

    def supports(self, case: Case, device: str) -> str | None:
        reason = self.unavailable_reason(device)
        if reason:
            return reason
        effective = case
        if case.causal and case.Lq == case.Lk and not case.varlen:
            effective = case.replace(alignment="bottom_right")  # square: both alignments are the same mask
        if case.window is not None and case.alignment == "top_left" and (case.Lq != case.Lk or case.varlen):
            return ("flash-attn windows are centred on the bottom-right diagonal; a top-left window with "
                    "Lq != Lk (or varlen lengths) is not expressible")
        return capability_reason(self.capabilities, effective, device) or self._extra_reason(case, device)

    def _extra_reason(self, case: Case, device: str) -> str | None:
        if max(case.d, case.dv) > 256:
            return f"flash-attn supports head dims up to 256; d={case.d}, dv={case.dv}"
        return None

    # -- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _bshd(x):
        return x.transpose(1, 2)

    def _finish_lse(self, lse_bhl, case: Case, notes: list[str]) -> tuple[np.ndarray | None, str]:
        if lse_bhl is None:
            return None, "-inf"
        lse = tc.to_numpy(lse_bhl)
        vis = tc.visibility(case, None, padded_rows_visible=True)  # real rows only: padding is not compared
        empty = tc.fully_masked_rows(vis, (case.B, case.Hq, case.Lq))
        lse, convention, note = tc.translate_empty_lse(lse, empty, self.lse_declared)
        if note:
            notes.append(note)
        return lse, convention

    def _lengths(self, case: Case) -> tuple[list[int], list[int]]:
        sq = list(case.seqlens_q) if case.seqlens_q is not None else [case.Lq] * case.B
        sk = list(case.seqlens_k) if case.seqlens_k is not None else [case.Lk] * case.B
        return sq, sk

    # subclasses: (out [B, H, Lq, dv] tensor, lse [B, H, Lq] tensor or None, entry-point name)
    def _run(self, t: tc.Materialized, inputs: CaseInputs, case: Case, device: str, want_lse: bool):
        raise NotImplementedError

    def _tensors(self, inputs: CaseInputs, case: Case, device: str, requires_grad: bool) -> tc.Materialized:
        return tc.materialize(inputs, case, device, requires_grad=requires_grad)

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        self._notes = []
        t = self._tensors(inputs, case, device, False)
        handed = t.named()
        before = tc.snapshot(handed)
        with tc.KernelRecorder(device) as rec:
            out, lse, entry = self._run(t, inputs, case, device, want_lse=True)
        notes = [f"entry point: {entry}"] + self._notes + ([rec.error] if rec.error else [])
        lse_np, convention = self._finish_lse(lse, case, notes)
        return ForwardOutput(
            out=tc.to_numpy(out), lse=lse_np, out_dtype=tc.dtype_name(out.dtype), out_device=str(out.device),
            kernels=rec.names, mutated_inputs=tc.changed(before, handed), lse_convention=convention, notes=notes,
        )

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        if inputs.dout is None:
            raise ValueError(f"{self.name}.backward needs inputs.dout (case {case.id})")
        self._notes = []
        t = self._tensors(inputs, case, device, True)
        handed = t.named()
        before = tc.snapshot(handed)
        with torch.enable_grad(), tc.KernelRecorder(device) as rec:
            out, _, entry = self._run(t, inputs, case, device, want_lse=False)
            grads = torch.autograd.grad(out, (t.q, t.k, t.v), grad_outputs=t.dout)
        return tc.autograd_output(out, grads, rec, tc.changed(before, handed),
                                  notes=[f"entry point: {entry}"] + ([rec.error] if rec.error else []))


def _fa_caps(**kw) -> Capabilities:
    base = dict(dtypes=_HALF, devices=frozenset({"cuda"}), head_dims=None, dv_ne_d=False,
                alignments=frozenset({"bottom_right"}), window=True, mask=False, bias=False, softcap=True, gqa=True,
                varlen=True, custom_scale=True, layouts=frozenset(LAYOUTS), lse=True, backward=True)
    base.update(kw)
    return Capabilities(**base)


class FlashAttn2(_FlashAttnBase):
    """FlashAttention-2 (``pip install flash-attn``, 2.x): func, varlen_func, with_kvcache."""

    name = "flash-attn-2"
    description = "FlashAttention-2 (flash_attn_func / flash_attn_varlen_func / flash_attn_with_kvcache)"
    module_names = ("flash_attn",)
    package = "flash-attn 2.x (module flash_attn)"
    min_cc = (8, 0)
    cc_text = "sm80 or newer (Ampere, Ada, Hopper)"
    lse_declared = "+inf"
    capabilities = _fa_caps()

    def _check_module(self, mod) -> str | None:
        version = str(getattr(mod, "__version__", ""))
        if not hasattr(mod, "flash_attn_func"):
            return "has no flash_attn_func (a FlashAttention-4-only install provides flash_attn.cute alone)"
        if version and not version.startswith("2."):
            return f"version {version} is not 2.x"
        return None

    def _run(self, t, inputs, case, device, want_lse):
        mod = self.module()
        scale = case.scale
        window = fa_window(case, self.unbounded)
        softcap = case.softcap if case.softcap is not None else 0.0
        common = dict(softmax_scale=scale, causal=case.causal, window_size=window)
        extra = dict(softcap=softcap) if softcap else {}
        decoding = case.Lq <= 4 and not case.backward and case.seqlens_q is None
        if decoding and hasattr(mod, "flash_attn_with_kvcache"):
            # the KV-cache entry point; per-batch key lengths (seqlens_k) become cache_seqlens
            _, sk = self._lengths(case)
            cache_seqlens = torch.tensor(sk, dtype=torch.int32, device=device)
            res = _call(mod.flash_attn_with_kvcache, (self._bshd(t.q), self._bshd(t.k), self._bshd(t.v)),
                        dict(cache_seqlens=cache_seqlens, **common, **extra), dict(return_softmax_lse=want_lse))
            out, lse = _split_result(res)
            return out.transpose(1, 2), lse, "flash_attn_with_kvcache"
        if case.varlen:
            sq, sk = self._lengths(case)
            cq = torch.tensor(cu_seqlens(sq), dtype=torch.int32, device=device)
            ck = torch.tensor(cu_seqlens(sk), dtype=torch.int32, device=device)
            res = _call(mod.flash_attn_varlen_func,
                        (pack_varlen(t.q, sq), pack_varlen(t.k, sk), pack_varlen(t.v, sk), cq, ck, max(sq), max(sk)),
                        dict(dropout_p=0.0, **common, **extra), dict(return_attn_probs=want_lse))
            out, lse = _split_result(res) if want_lse else (_split_result(res)[0], None)
            out = unpack_varlen(out, sq, case.Lq)
            if lse is not None:
                lse = unpack_varlen_lse(lse, sq, case.Lq)
            return out, lse, "flash_attn_varlen_func"
        q, k, v = self._bshd(t.q), self._bshd(t.k), self._bshd(t.v)
        res = _call(mod.flash_attn_func, (q, k, v), dict(dropout_p=0.0, **common, **extra),
                    dict(return_attn_probs=want_lse))
        out, lse = _split_result(res)
        return out.transpose(1, 2), (lse if want_lse else None), "flash_attn_func"


class FlashAttn3(_FlashAttnBase):
    """FlashAttention-3 (hopper/ build, module flash_attn_interface), incl. FP8 with (B, Hkv) descales."""

    name = "flash-attn-3"
    description = "FlashAttention-3 (flash_attn_interface.flash_attn_func / varlen), FP8 e4m3 with descales"
    module_names = ("flash_attn_interface", "flash_attn_3.flash_attn_interface")
    package = "flash-attn 3 (hopper/ build, module flash_attn_interface)"
    min_cc = (8, 0)
    cc_text = "sm80 or newer (FP8: sm90 Hopper)"
    lse_declared = "-inf"
    capabilities = _fa_caps(fp8=frozenset({"per_tensor", "per_head"}), fp8_formats=frozenset({"e4m3fn"}))

    def _extra_reason(self, case: Case, device: str) -> str | None:
        reason = super()._extra_reason(case, device)  # head dims up to 256
        if reason:
            return reason
        if case.fp8 is not None:
            cc = tc.cuda_capability()
            if cc is not None and cc < (9, 0):
                return f"FA3 FP8 needs sm90; this GPU is sm{cc[0]}{cc[1]}"
            if case.backward:
                return "FA3 FP8 is forward only"
            if case.fp8.incoherent:
                return None  # rotation happens before quantization; the kernel sees plain FP8 codes
        return None

    def _tensors(self, inputs, case, device, requires_grad):
        if case.fp8 is None:
            return super()._tensors(inputs, case, device, requires_grad)
        fp8 = inputs.fp8
        if fp8 is None:
            raise ValueError(f"FP8 case {case.id} without CaseInputs.fp8")
        coded = CaseInputs(q=fp8["q8"], k=fp8["k8"], v=fp8["v8"])
        return tc.materialize(coded, case, device, dtype=torch.float8_e4m3fn)

    def _run(self, t, inputs, case, device, want_lse):
        mod = self.module()
        window = fa_window(case, self.unbounded)
        softcap = case.softcap if case.softcap is not None else 0.0
        required = dict(softmax_scale=case.scale, causal=case.causal, window_size=window)
        if softcap:
            required["softcap"] = softcap
        if case.fp8 is not None:
            ds, rounded = fa3_descales(inputs.fp8, case.B, case.Hkv)
            if rounded:
                self._notes.append(f"FP8 descales rounded to float32 for FA3 (max relative change {rounded:.2e})")
            for name, arr in ds.items():
                required[name] = torch.from_numpy(arr).to(device)
        optional = dict(return_attn_probs=want_lse)
        decoding = case.Lq <= 4 and not case.backward and case.seqlens_q is None
        if decoding and hasattr(mod, "flash_attn_with_kvcache"):
            # KV-cache entry point (split-KV heuristics, num_splits=0); seqlens_k become cache_seqlens
            _, sk = self._lengths(case)
            required["cache_seqlens"] = torch.tensor(sk, dtype=torch.int32, device=device)
            res = _call(mod.flash_attn_with_kvcache, (self._bshd(t.q), self._bshd(t.k), self._bshd(t.v)),
                        required, dict(return_softmax_lse=want_lse))
            out, lse = _split_result(res)
            return out.transpose(1, 2), (lse if want_lse else None), "flash_attn_interface.flash_attn_with_kvcache"
        if case.varlen:
            sq, sk = self._lengths(case)
            cq = torch.tensor(cu_seqlens(sq), dtype=torch.int32, device=device)
            ck = torch.tensor(cu_seqlens(sk), dtype=torch.int32, device=device)
            res = _call(mod.flash_attn_varlen_func,
                        (pack_varlen(t.q, sq), pack_varlen(t.k, sk), pack_varlen(t.v, sk), cq, ck, max(sq), max(sk)),
                        required, optional)
            out, lse = _split_result(res)
            out = unpack_varlen(out, sq, case.Lq)
            lse = unpack_varlen_lse(lse, sq, case.Lq) if (lse is not None and want_lse) else None
            return out, lse, "flash_attn_interface.flash_attn_varlen_func"
        res = _call(mod.flash_attn_func, (self._bshd(t.q), self._bshd(t.k), self._bshd(t.v)), required, optional)
        out, lse = _split_result(res)
        return out.transpose(1, 2), (lse if want_lse else None), "flash_attn_interface.flash_attn_func"


class FlashAttn4(_FlashAttnBase):
    """FlashAttention-4 (CuTe DSL, module flash_attn.cute; Hopper sm90 and Blackwell sm100)."""

    name = "flash-attn-4"
    description = "FlashAttention-4 (flash_attn.cute.flash_attn_func / flash_attn_varlen_func, CuTe DSL)"
    module_names = ("flash_attn.cute",)
    package = "flash-attn 4 (module flash_attn.cute, needs nvidia-cutlass-dsl)"
    min_cc = (9, 0)
    cc_text = "sm90 (Hopper) or sm100 (Blackwell)"
    lse_declared = "-inf"
    unbounded = None
    # head dims the FA4 README lists for sm90/sm100 forward and backward
    capabilities = _fa_caps(head_dims=frozenset({64, 96, 128}))

    def _run(self, t, inputs, case, device, want_lse):
        mod = self.module()
        window = fa_window(case, self.unbounded)
        required = dict(softmax_scale=case.scale, causal=case.causal)
        if window != (None, None):
            required["window_size"] = window
        if case.softcap is not None:
            required["softcap"] = case.softcap
        optional = dict(return_lse=want_lse)
        if case.varlen:
            sq, sk = self._lengths(case)
            required["cu_seqlens_q"] = torch.tensor(cu_seqlens(sq), dtype=torch.int32, device=device)
            required["cu_seqlens_k"] = torch.tensor(cu_seqlens(sk), dtype=torch.int32, device=device)
            optional.update(max_seqlen_q=max(sq), max_seqlen_k=max(sk))
            res = _call(mod.flash_attn_varlen_func, (pack_varlen(t.q, sq), pack_varlen(t.k, sk), pack_varlen(t.v, sk)),
                        required, optional)
            out, lse = _split_result(res)
            out = unpack_varlen(out, sq, case.Lq)
            lse = unpack_varlen_lse(lse, sq, case.Lq) if (lse is not None and want_lse) else None
            return out, lse, "flash_attn.cute.flash_attn_varlen_func"
        res = _call(mod.flash_attn_func, (self._bshd(t.q), self._bshd(t.k), self._bshd(t.v)), required, optional)
        out, lse = _split_result(res)
        return out.transpose(1, 2), (lse if want_lse else None), "flash_attn.cute.flash_attn_func"
