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
- §16 paged K/V: the pools [num_pages, Hkv, page_size, d] become caches [num_pages, page_size, Hkv, d] with
  the int32 block table: ``flash_attn_with_kvcache(block_table=...)`` (FA2, pages of 256 keys),
  ``(page_table=...)`` (FA3), ``flash_attn_varlen_func(page_table=..., seqused_k=...)`` (FA4).
- entry points: each adapter lists its public spellings (``entry_points``); ``NAME@ENTRY``
  (`conformance.adapters.variants`, conformance/README.md) calls only that one and declines the cases it
  cannot express; plain NAME picks the spelling per case as above. What each spelling carries is one table
  per family (`FA23_SPELLINGS`, `FA4_SPELLINGS`): a variant's capabilities are the library's less what its
  spelling cannot carry, and `call_for` is the call it makes (a `FaCall`, pure: no library or device needed).
- §3 softcap: ``softcap=c``. Boolean masks and arbitrary biases: not expressible (ALiBi slopes only)
  -> NOT_SUPPORTED.
- §12 LSE: ``return_attn_probs=True`` (FA2 func/varlen, FA3), ``return_softmax_lse=True``
  (with_kvcache), ``return_lse=True`` (FA4 when the signature has it). FA2 kernels write +inf on rows
  with no visible key, FA3/FA4 -inf (§8): the adapter passes them through and names the convention
  (`ForwardOutput.lse_convention`); the engine accepts +inf there and reports it as a finding.
- FP8 (FA3, §10): q8/k8/v8 as ``float8_e4m3fn`` with ``q_descale``, ``k_descale``, ``v_descale`` of
  shape (B, Hkv) in float32 (`fa3_descales`; per-tensor scales broadcast to that shape); output bf16.

None of this can run on a machine without the packages and a GPU; the pure translation helpers
(`fa_window`, `cu_seqlens`, `pack_varlen`, `unpack_varlen`, `unpack_varlen_lse`, `fa3_descales`, `call_for`)
are tested on CPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import inspect
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.base import (
    Adapter,
    BackwardOutput,
    Capabilities,
    CaseInputs,
    Exclusion,
    ForwardOutput,
)
from attention_conformance.adapters.variants import (
    Spelling,
    checked_entry_point,
    spelled_capabilities,
    spelling_reason,
    variant_name,
)
from attention_conformance.cases.case import LAYOUTS, PAGED_LAYOUTS, Case, page_size_of

__all__ = [
    "FA23_SPELLINGS",
    "FA4_SPELLINGS",
    "FaCall",
    "FlashAttn2",
    "FlashAttn3",
    "FlashAttn4",
    "Handed",
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


@dataclass(frozen=True)
class Handed:
    """A tensor the adapter makes before the call and hands over under this name (the mutation check's): the
    page caches and block table (``paged.k_pool``, ``paged.v_pool``, ``paged.block_table``), the sink logits
    (``sinks``)."""

    name: str


@dataclass
class FaCall:
    """One flash-attention call before its tensors exist (pure: made without the library or a device).

    `tensors` says how q, k, v reach `function`: ``bshd`` (the case's tensors as [B, L, H, D] views), ``packed``
    ([total, H, D], each batch's first lengths concatenated, the lengths being those of ``cu_seqlens_q`` /
    ``cu_seqlens_k``), ``paged`` (q as [B, Lq, H, D]; k, v the caches ``Handed("paged.k_pool")`` and
    ``Handed("paged.v_pool")``). `kwargs` must be in the function's signature, `optional` are passed where they
    are. Values are Python numbers and tuples, NumPy arrays (int32 lengths and tables, float32 descales: tensors
    on the device at the call) or `Handed` names. `name` is the entry point as the notes report it.
    """

    function: str
    tensors: str
    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    optional: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def packed_lengths(self) -> tuple[list[int], list[int]]:
        """(query, key) lengths per batch of a ``packed`` call, read from its cu_seqlens."""
        return (np.diff(self.kwargs["cu_seqlens_q"]).tolist(), np.diff(self.kwargs["cu_seqlens_k"]).tolist())


def _i32(values) -> np.ndarray:
    return np.asarray([int(x) for x in values], dtype=np.int32)


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

    #: public spellings selectable as ``NAME@ENTRY`` (`conformance.adapters.variants`); auto per case without
    entry_points: ClassVar[tuple[str, ...]] = ()
    #: what each spelling carries (None: the per-case choice, for the declared capabilities of plain NAME)
    spellings: ClassVar[dict[str | None, Spelling]] = {}
    #: substrings of the CUDA kernel names the library launches (forward, backward); a record without any
    #: of them gets a note (empty: not checked)
    expected_kernels: ClassVar[tuple[tuple[str, ...], tuple[str, ...]]] = ((), ())

    def __init__(self, entry_point: str | None = None) -> None:
        self.entry_point = checked_entry_point(type(self), entry_point)
        self.name = variant_name(type(self).name, entry_point)
        self._module = None
        self._import_error: str | None = None
        self._notes: list[str] = []
        self._paged: dict = {}  # the page pools and table of a paged call, by `CaseInputs.arrays` name
        self._sink = None  # the learnable_sink tensor of the current call (FA4 sink cases), or None
        self.capabilities = spelled_capabilities(type(self).capabilities, self.spellings[entry_point])

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
        return self.unavailable_reason(device) or self.claim_reason(case, device)

    def claim_reason(self, case: Case, device: str) -> str | None:
        """The decline `supports` takes from the declarations alone (what the library claims, what the spelling
        of this case carries: `spellings`), without this machine: None means claimed."""
        entry = self.entry(case)
        label = (variant_name(type(self).name, entry) if entry == self.entry_point
                 else f"{type(self).name}'s spelling for this case, {entry}")
        return (spelling_reason(label, self.spellings[entry], type(self).capabilities, case, device)
                or self._extra_reason(case, device))

    # -- entry points -----------------------------------------------------------------------------
    def entry(self, case: Case) -> str:
        """The spelling this call uses: the variant's, else the one `_auto_entry` picks for the case."""
        return self.entry_point or self._auto_entry(case)

    def _auto_entry(self, case: Case) -> str:
        if page_size_of(case.layout) is not None:
            return "with_kvcache_paged"
        if case.Lq <= 4 and not case.backward and case.seqlens_q is None:
            return "with_kvcache"
        return "varlen_func" if case.varlen else "func"

    def _extra_reason(self, case: Case, device: str) -> str | None:
        """A limit that depends on the device found at run time (the declaration holds the others)."""
        return None

    # -- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _bshd(x):
        return x.transpose(1, 2)

    def _finish_lse(self, lse_bhl, case: Case, notes: list[str]) -> tuple[np.ndarray | None, str]:
        if lse_bhl is None:
            return None, "-inf"
        lse = tc.to_numpy(lse_bhl)
        if case.sinks is not None:  # a sink joins every row: no row is empty, an unkeyed row's LSE is the sink (§18)
            return lse, self.lse_declared
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

    def _paged_lens(self, case: Case) -> list[int]:
        """Keys per batch in the page caches (the case's key lengths, at most Lk)."""
        return [min(int(n), case.Lk) for n in self._lengths(case)[1]]

    def call_for(self, case: Case, inputs: CaseInputs, want_lse: bool) -> FaCall:
        """The call `case` makes through ``self.entry(case)`` (subclasses); pure: no library, no device."""
        raise NotImplementedError

    def _run(self, t: tc.Materialized, inputs: CaseInputs, case: Case, device: str, want_lse: bool):
        """(out [B, H, Lq, dv] tensor, lse [B, H, Lq] tensor or None, entry-point name): `call_for`'s call, made on
        the tensors of `_prepare` (``Handed`` names resolve to the paged caches and the sink tensor)."""
        call = self.call_for(case, inputs, want_lse)
        self._notes += call.notes
        named = dict(self._paged, **({"sinks": self._sink} if self._sink is not None else {}))

        def value(x):
            if isinstance(x, Handed):
                return named[x.name]
            return torch.from_numpy(x).to(device) if isinstance(x, np.ndarray) else x

        kwargs = {k: value(x) for k, x in call.kwargs.items()}
        optional = {k: value(x) for k, x in call.optional.items()}
        fn = getattr(self.module(), call.function)
        if call.tensors == "packed":
            sq, sk = call.packed_lengths()
            res = _call(fn, (pack_varlen(t.q, sq), pack_varlen(t.k, sk), pack_varlen(t.v, sk)), kwargs, optional)
            out, lse = _split_result(res)
            lse = unpack_varlen_lse(lse, sq, case.Lq) if (lse is not None and want_lse) else None
            return unpack_varlen(out, sq, case.Lq), lse, call.name
        if call.tensors == "paged":
            k, v = named["paged.k_pool"], named["paged.v_pool"]
        else:
            k, v = self._bshd(t.k), self._bshd(t.v)
        out, lse = _split_result(_call(fn, (self._bshd(t.q), k, v), kwargs, optional))
        return out.transpose(1, 2), (lse if want_lse else None), call.name

    def _tensors(self, inputs: CaseInputs, case: Case, device: str, requires_grad: bool) -> tc.Materialized:
        layout = "contiguous" if page_size_of(case.layout) is not None else None  # paged: q dense, K/V in pools
        return tc.materialize(inputs, case, device, requires_grad=requires_grad, layout=layout)

    def _handed(self, t: tc.Materialized, case: Case) -> dict:
        """Everything the kernel receives, by name (the mutation check): the paged pools instead of dense K/V."""
        if self._paged:
            return {"q": t.q, **self._paged}
        return t.named()

    def _paged_cache(self, inputs: CaseInputs, case: Case, device: str, dtype) -> tuple[Any, Any, Any, list[int]]:
        """(k_cache, v_cache [num_pages, page_size, Hkv, d] contiguous, block_table int32, key lengths) from
        `CaseInputs.paged` (SEMANTICS.md §16: pool [num_pages, Hkv, page_size, d] is the engine's layout;
        flash-attn's caches put the page slot before the head). Remembered in ``self._paged`` for the
        mutation check. `_finite_tail` may rewrite slots an API documents it reads (FA4)."""
        paged = inputs.paged
        if paged is None:
            raise ValueError(f"case {case.id}: layout {case.layout!r} is paged but CaseInputs.paged is None")
        lens = self._paged_lens(case)
        k_pool = np.ascontiguousarray(np.asarray(paged["k_pool"]).transpose(0, 2, 1, 3))
        v_pool = np.ascontiguousarray(np.asarray(paged["v_pool"]).transpose(0, 2, 1, 3))
        table = np.ascontiguousarray(paged["block_table"], dtype=np.int32)
        k_pool, v_pool = self._finite_tail(k_pool, v_pool, table, lens, int(paged["page_size"]))
        k_cache = tc.to_torch(k_pool, dtype, device, name="paged.k_pool")
        v_cache = tc.to_torch(v_pool, dtype, device, name="paged.v_pool")
        bt = torch.from_numpy(table).to(device)
        self._paged = {"paged.k_pool": k_cache, "paged.v_pool": v_cache, "paged.block_table": bt}
        return k_cache, v_cache, bt, lens

    def _finite_tail(self, k_pool: np.ndarray, v_pool: np.ndarray, table: np.ndarray, lens: list[int],
                     page_size: int) -> tuple[np.ndarray, np.ndarray]:
        return k_pool, v_pool

    def _prepare(self, inputs: CaseInputs, case: Case, device: str, requires_grad: bool):
        """(tensors, everything handed to the kernel by name, its snapshot), all made before the kernel record
        starts: the paged caches too (for a spelling that carries paged K/V)."""
        self._notes = []
        self._paged = {}
        t = self._tensors(inputs, case, device, requires_grad)
        if page_size_of(case.layout) is not None and "paged" in self.spellings[self.entry(case)].carries:
            self._paged_cache(inputs, case, device, t.q.dtype)
        handed = self._handed(t, case)
        return t, handed, tc.snapshot(handed)

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        t, handed, before = self._prepare(inputs, case, device, False)
        with tc.KernelRecorder(device) as rec:
            out, lse, entry = self._run(t, inputs, case, device, want_lse=True)
        notes = [f"entry point: {entry}"] + self._notes + ([rec.error] if rec.error else [])
        notes += self._kernel_notes(rec, 0)
        lse_np, convention = self._finish_lse(lse, case, notes)
        return ForwardOutput(
            out=tc.to_numpy(out), lse=lse_np, out_dtype=tc.dtype_name(out.dtype), out_device=str(out.device),
            kernels=rec.names, mutated_inputs=tc.changed(before, handed), lse_convention=convention, notes=notes,
        )

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        if inputs.dout is None:
            raise ValueError(f"{self.name}.backward needs inputs.dout (case {case.id})")
        t, handed, before = self._prepare(inputs, case, device, True)
        with torch.enable_grad(), tc.KernelRecorder(device) as rec:
            out, _, entry = self._run(t, inputs, case, device, want_lse=False)
            grads = torch.autograd.grad(out, (t.q, t.k, t.v), grad_outputs=t.dout)
        notes = [f"entry point: {entry}"] + self._notes + ([rec.error] if rec.error else [])
        notes += self._kernel_notes(rec, 1)
        return tc.autograd_output(out, grads, rec, tc.changed(before, handed), notes=notes)

    def _kernel_notes(self, rec: tc.KernelRecorder, which: int) -> list[str]:
        """A note when the record (forward: 0, backward: 1) holds none of the library's expected kernels."""
        expected = self.expected_kernels[which]
        note = tc.missing_kernel_note(rec.names, expected, self.name) if expected else None
        return [note] if note else []

    # -- the FA2 / FA3 spellings (same signatures in flash_attn and flash_attn_interface) -------------
    def _fa23_call(self, case: Case, want_lse: bool, kwargs: dict, prefix: str) -> FaCall:
        """`case` through spelling ``self.entry(case)`` with `kwargs` (softmax_scale, causal, window_size, softcap,
        dropout_p, descales) and the spelling's own arguments (lengths, block table)."""
        entry = self.entry(case)
        sq, sk = self._lengths(case)
        if entry in ("with_kvcache", "with_kvcache_paged"):
            kwargs = dict(kwargs, cache_seqlens=_i32(sk))
            tensors = "bshd"
            if entry == "with_kvcache_paged":
                kwargs[self.page_table_kw] = Handed("paged.block_table")
                tensors = "paged"
            return FaCall("flash_attn_with_kvcache", tensors, f"{prefix}flash_attn_with_kvcache", kwargs,
                          dict(return_softmax_lse=want_lse))
        if entry == "varlen_func":
            kwargs = dict(kwargs, cu_seqlens_q=_i32(cu_seqlens(sq)), cu_seqlens_k=_i32(cu_seqlens(sk)),
                          max_seqlen_q=max(sq), max_seqlen_k=max(sk))
            return FaCall("flash_attn_varlen_func", "packed", f"{prefix}flash_attn_varlen_func", kwargs,
                          dict(return_attn_probs=want_lse))
        return FaCall("flash_attn_func", "bshd", f"{prefix}flash_attn_func", kwargs, dict(return_attn_probs=want_lse))


#: FA2 / FA3: the one spelling that takes a block table, flash_attn_with_kvcache, computes no gradient and takes
#: per-batch key lengths only
_PAGED_FORWARD_ONLY = Exclusion("paged K/V is forward only: the spelling with a block table (flash_attn_with_kvcache) "
                                "computes no gradient", lambda c: c.backward and page_size_of(c.layout) is not None)
_PAGED_NO_SEQLENS_Q = Exclusion("paged K/V with query lengths: the spelling with a block table "
                                "(flash_attn_with_kvcache) takes per-batch key lengths (cache_seqlens), not query "
                                "lengths",
                                lambda c: c.seqlens_q is not None and page_size_of(c.layout) is not None)


def _fa_caps(**kw) -> Capabilities:
    base = dict(dtypes=_HALF, devices=frozenset({"cuda"}), head_dims=None, max_head_dim=256, dv_ne_d=False,
                alignments=frozenset({"bottom_right"}), window=True, mask=False, bias=False, softcap=True, gqa=True,
                varlen=True, custom_scale=True, layouts=frozenset(LAYOUTS), lse=True, backward=True,
                memory="linear")
    base.update(kw)
    return Capabilities(**base)


#: what the FA2 / FA3 spellings carry (`conformance.adapters.variants`): causal (bottom-right: ``causal=True`` is
#: aligned to the bottom-right corner in every spelling) or not, windows, softcap; no boolean mask, additive bias,
#: chunk (FA3's attention_chunk is not passed), sinks or KV append
_FA23_COMMON = frozenset({"noncausal", "window", "softcap"})
_BOTTOM_RIGHT = frozenset({"bottom_right"})
FA23_SPELLINGS: dict[str | None, Spelling] = {
    "func": Spelling("flash_attn_func(q, k, v) on [B, L, H, D]", _FA23_COMMON | {"backward", "dense"}, _BOTTOM_RIGHT),
    "varlen_func": Spelling("flash_attn_varlen_func on sequences packed by cu_seqlens_q / cu_seqlens_k",
                            _FA23_COMMON | {"varlen", "query_lengths", "backward", "dense"}, _BOTTOM_RIGHT),
    "with_kvcache": Spelling("flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=key lengths), forward only",
                             _FA23_COMMON | {"varlen", "dense"}, _BOTTOM_RIGHT),
    "with_kvcache_paged": Spelling("flash_attn_with_kvcache over page caches with a block table, forward only",
                                   _FA23_COMMON | {"varlen", "paged"}, _BOTTOM_RIGHT),
}
FA23_SPELLINGS[None] = Spelling("the spelling the case needs: paged -> with_kvcache_paged, Lq <= 4 forward without "
                                "query lengths -> with_kvcache, varlen -> varlen_func, else func",
                                frozenset().union(*(x.carries for x in FA23_SPELLINGS.values())), _BOTTOM_RIGHT)
_FA23_ENTRY_POINTS = tuple(e for e in FA23_SPELLINGS if e is not None)


class FlashAttn2(_FlashAttnBase):
    """FlashAttention-2 (``pip install flash-attn``, 2.x): func, varlen_func, with_kvcache (cache_seqlens,
    block_table with pages of a multiple of 256 keys)."""

    name = "flash-attn-2"
    description = "FlashAttention-2 (flash_attn_func / flash_attn_varlen_func / flash_attn_with_kvcache)"
    module_names = ("flash_attn",)
    package = "flash-attn 2.x (module flash_attn)"
    min_cc = (8, 0)
    cc_text = "sm80 or newer (Ampere, Ada, Hopper)"
    lse_declared = "+inf"
    entry_points = _FA23_ENTRY_POINTS
    spellings = FA23_SPELLINGS
    page_table_kw = "block_table"
    # FA2's block_table takes pages of a multiple of 256 keys: of the paged layouts, paged256
    capabilities = _fa_caps(layouts=frozenset(LAYOUTS) | {"paged256"},
                            excludes=(_PAGED_FORWARD_ONLY, _PAGED_NO_SEQLENS_Q))

    def _check_module(self, mod) -> str | None:
        version = str(getattr(mod, "__version__", ""))
        if not hasattr(mod, "flash_attn_func"):
            return "has no flash_attn_func (a FlashAttention-4-only install provides flash_attn.cute alone)"
        if version and not version.startswith("2."):
            return f"version {version} is not 2.x"
        return None

    def call_for(self, case: Case, inputs: CaseInputs, want_lse: bool) -> FaCall:
        kwargs = dict(softmax_scale=case.scale, causal=case.causal, window_size=fa_window(case, self.unbounded))
        if case.softcap:
            kwargs["softcap"] = case.softcap
        if self.entry(case) in ("func", "varlen_func"):
            kwargs["dropout_p"] = 0.0
        return self._fa23_call(case, want_lse, kwargs, "")


class FlashAttn3(_FlashAttnBase):
    """FlashAttention-3 (hopper/ build, module flash_attn_interface), incl. FP8 with (B, Hkv) descales;
    func, varlen_func, with_kvcache (cache_seqlens, page_table of any page size)."""

    name = "flash-attn-3"
    description = "FlashAttention-3 (flash_attn_interface.flash_attn_func / varlen / with_kvcache), FP8 e4m3"
    module_names = ("flash_attn_interface", "flash_attn_3.flash_attn_interface")
    package = "flash-attn 3 (hopper/ build, module flash_attn_interface)"
    min_cc = (8, 0)
    cc_text = "sm80 or newer (FP8: sm90 Hopper)"
    lse_declared = "-inf"
    entry_points = _FA23_ENTRY_POINTS
    spellings = FA23_SPELLINGS
    page_table_kw = "page_table"
    capabilities = _fa_caps(fp8=frozenset({"per_tensor", "per_head"}), fp8_formats=frozenset({"e4m3fn"}),
                            layouts=frozenset(LAYOUTS) | frozenset(PAGED_LAYOUTS),
                            excludes=(Exclusion("FA3 FP8 is forward only", lambda c: c.fp8 is not None and c.backward),
                                      _PAGED_FORWARD_ONLY, _PAGED_NO_SEQLENS_Q))

    def _extra_reason(self, case: Case, device: str) -> str | None:
        if case.fp8 is not None:
            cc = tc.cuda_capability()
            if cc is not None and cc < (9, 0):
                return f"FA3 FP8 needs sm90; this GPU is sm{cc[0]}{cc[1]}"
        return None

    def _tensors(self, inputs, case, device, requires_grad):
        if case.fp8 is None:
            return super()._tensors(inputs, case, device, requires_grad)
        fp8 = inputs.fp8
        if fp8 is None:
            raise ValueError(f"FP8 case {case.id} without CaseInputs.fp8")
        coded = CaseInputs(q=fp8["q8"], k=fp8["k8"], v=fp8["v8"])
        return tc.materialize(coded, case, device, dtype=torch.float8_e4m3fn)

    def call_for(self, case: Case, inputs: CaseInputs, want_lse: bool) -> FaCall:
        kwargs = dict(softmax_scale=case.scale, causal=case.causal, window_size=fa_window(case, self.unbounded))
        if case.softcap:
            kwargs["softcap"] = case.softcap
        notes = []
        if case.fp8 is not None:
            ds, rounded = fa3_descales(inputs.fp8, case.B, case.Hkv)
            if rounded:
                notes.append(f"FP8 descales rounded to float32 for FA3 (max relative change {rounded:.2e})")
            kwargs.update(ds)
        call = self._fa23_call(case, want_lse, kwargs, "flash_attn_interface.")
        call.notes += notes
        return call


#: what the FA4 spellings carry: those of FA2 / FA3 plus the sink logits (learnable_sink) and, with backward, an
#: LSE cotangent; ``deterministic`` is the per-case spelling with ``deterministic=True``
_FA4_COMMON = frozenset({"noncausal", "window", "softcap", "sinks"})
FA4_SPELLINGS: dict[str | None, Spelling] = {
    "func": Spelling("flash_attn_func(q, k, v) on [B, L, H, D]", _FA4_COMMON | {"backward", "lse_grad", "dense"},
                     _BOTTOM_RIGHT),
    "varlen_func": Spelling("flash_attn_varlen_func on sequences packed by cu_seqlens_q / cu_seqlens_k",
                            _FA4_COMMON | {"varlen", "query_lengths", "backward", "lse_grad", "dense"}, _BOTTOM_RIGHT),
    "seqused": Spelling("flash_attn_varlen_func on [B, L, H, D] with seqused_q / seqused_k",
                        _FA4_COMMON | {"varlen", "query_lengths", "backward", "lse_grad", "dense"}, _BOTTOM_RIGHT),
    "paged": Spelling("flash_attn_varlen_func over page caches with page_table and seqused_k, forward only",
                      _FA4_COMMON | {"varlen", "query_lengths", "paged"}, _BOTTOM_RIGHT),
}
FA4_SPELLINGS[None] = Spelling("the spelling the case needs: paged -> paged, varlen -> varlen_func, else func",
                               frozenset().union(*(x.carries for x in FA4_SPELLINGS.values())), _BOTTOM_RIGHT)
FA4_SPELLINGS["deterministic"] = dataclasses.replace(
    FA4_SPELLINGS[None], call="the spelling the case needs, with deterministic=True", deterministic=True)

#: FA4 (flash-attn-4 4.0.0b36, flash_attn/cute/interface.py) on sm90: `_validate_head_dims` accepts d and dv
#: in 8..256, multiples of 16 // element size (8 for fp16/bf16)
FA4_SM90_HEAD_DIMS = frozenset(range(8, 257, 8))


class FlashAttn4(_FlashAttnBase):
    """FlashAttention-4 (CuTe DSL, module flash_attn.cute, distribution flash-attn-4), its sm90 path.

    What it claims is what flash_attn/cute/interface.py (4.0.0b36) accepts on sm90: fp16/bf16 (FP8 is
    sm100-only there); d and dv in 8..256, multiples of 8, dv != d allowed; causal (bottom-right), windows
    ``(left, right)`` with None unbounded, softcap, GQA/MQA, a custom ``softmax_scale``; LSE through
    ``return_lse=True`` ([B, H, Lq], or [H, total_q] with cu_seqlens_q; -inf on rows with no key, §8);
    backward through autograd, except GQA/MQA with dv != d (FlashAttentionBackwardSm90 asserts
    ``head_dim == head_dim_v`` for GQA) and paged K/V (the backward takes no page table).

    Entry points (``flash-attn-4@ENTRY``, conformance/README.md): ``func`` (``flash_attn_func``, dense
    cases), ``varlen_func`` (``flash_attn_varlen_func`` on packed sequences with ``cu_seqlens_q/k``; a dense
    case is packed with equal lengths), ``seqused`` (``flash_attn_varlen_func`` on padded [B, L, H, D] tensors
    with ``seqused_q`` / ``seqused_k``), ``paged`` (``flash_attn_varlen_func`` with ``page_table`` [B, pages]
    and ``seqused_k`` over caches [num_pages, page_size, Hkv, d]; paged cases only), and ``deterministic``
    (the per-case spelling with ``deterministic=True``, which FA4 honours in its backward with semaphores;
    the adapter then declares bitwise determinism). Without ``@`` the spelling is picked per case: paged
    -> ``paged``, varlen -> ``varlen_func``, otherwise ``func``.

    FA4 documents a precondition of ``page_table``: when pages are loaded by TMA, the slots past
    ``seqused_k`` in a sequence's last, partially used page are read (their scores masked, but 0 x NaN is
    NaN), so they must be finite. The adapter writes 0 there (a note counts them) and leaves NaN in every
    page and table entry a sequence does not use, which FA4 says may hold anything (SEMANTICS.md §16).

    Attention sinks (SEMANTICS.md §18): ``learnable_sink``, a float32 tensor of shape (Hq,) (the interface
    accepts fp16 / bf16 / fp32; the case's sink values are exact in fp32), on every spelling. FA4 folds it
    into the softmax, so the LSE it returns includes the sink and a row with no visible key has LSE = the
    sink (not -inf; the adapter translates nothing on sink cases). Backward: ``FlashAttnFunc.backward``
    returns the sink's gradient (``_flash_attn_bwd(..., learnable_sink=)`` -> (dq, dk, dv, dsink), sm90 and
    sm100), which autograd hands back as the gradient of the sink tensor -> `BackwardOutput.dsinks`.
    LSE cotangent (``lse_grad`` cases): the forward runs with ``return_lse=True`` and autograd passes the
    cotangent of the returned LSE to FA4's backward as ``dlse`` (padded query rows get 0).

    Not passed (yet): ``qv`` (MLA, sm100), ``score_mod`` / ``mask_mod``, block sparsity, ``num_splits``
    (SplitKV is refused on sm90).
    """

    builds_per_shape = True  # the CUTLASS DSL compiles a kernel for each new shape, mask and dtype

    name = "flash-attn-4"
    description = "FlashAttention-4 sm90 (flash_attn.cute.flash_attn_func / flash_attn_varlen_func, CuTe DSL)"
    module_names = ("flash_attn.cute",)
    distribution = "flash-attn-4"
    package = "flash-attn-4 (module flash_attn.cute, needs nvidia-cutlass-dsl)"
    min_cc = (9, 0)
    cc_text = "sm90 (Hopper); the claims here are FA4's sm90 path"
    lse_declared = "-inf"
    unbounded = None
    entry_points = ("func", "varlen_func", "seqused", "paged", "deterministic")
    spellings = FA4_SPELLINGS
    # seen on the H200 (tools/fa4_smoke.py records them): kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90
    # FlashAttentionForwardSm90_..., and FlashAttentionBackwardPreprocess / BackwardSm90 / BackwardPostprocess
    expected_kernels = (("FlashAttentionForwardSm90",), ("FlashAttentionBackwardSm90",))
    capabilities = _fa_caps(
        head_dims=FA4_SM90_HEAD_DIMS, dv_ne_d=True, layouts=frozenset(LAYOUTS) | frozenset(PAGED_LAYOUTS), sinks=True,
        lse_grad=True, excludes=(
            Exclusion("FA4's sm90 backward with GQA/MQA needs head_dim == head_dim_v (FlashAttentionBackwardSm90 "
                      "asserts it)", lambda c: c.backward and c.Hq != c.Hkv and c.d != c.dv),
            Exclusion("FA4's sm90 paged K/V loaded without TMA needs head dims that are multiples of 16 ('Paged KV "
                      "does not support irregular head dim')",
                      lambda c: page_size_of(c.layout) is not None and bool(c.d % 16 or c.dv % 16)),
            Exclusion("FA4's backward takes no page_table (paged K/V is forward only)",
                      lambda c: c.backward and page_size_of(c.layout) is not None)))

    def version(self) -> str:
        """The distribution's version from package metadata (flash_attn.cute.__version__ asks for a
        distribution named "fa4" and reads 0.0.0 for the flash-attn-4 wheel)."""
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return super().version() + f" (no {self.distribution} distribution metadata)"

    def unavailable_reason(self, device: str) -> str | None:
        reason = super().unavailable_reason(device)
        if reason is None and device.startswith("cuda"):
            cc = tc.cuda_capability()
            if cc is not None and cc[0] != 9:
                return (f"{self.name} claims what FA4's sm90 path supports; this GPU is sm{cc[0]}{cc[1]}, where "
                        "FA4 has other limits (head dims <= 128, 192/128, 256/256; FP8)")
        return reason

    def entry(self, case: Case) -> str:
        if self.entry_point in (None, "deterministic"):
            return self._auto_entry(case)
        return self.entry_point

    def _auto_entry(self, case: Case) -> str:
        if page_size_of(case.layout) is not None:
            return "paged"
        return "varlen_func" if case.varlen else "func"

    def _finite_tail(self, k_pool, v_pool, table, lens, page_size):
        k_pool, v_pool = k_pool.copy(), v_pool.copy()
        zeroed = 0
        for b, n in enumerate(lens):
            used = -(-n // page_size)
            if used and n % page_size:
                page = int(table[b, used - 1])
                k_pool[page, n % page_size:] = 0.0
                v_pool[page, n % page_size:] = 0.0
                zeroed += page_size - n % page_size
        if zeroed:
            self._notes.append(f"page_table precondition (FA4 docstring): {zeroed} slot(s) past seqused_k in "
                               "last, partially used pages set to 0 (unused pages keep NaN)")
        return k_pool, v_pool

    def _prepare(self, inputs: CaseInputs, case: Case, device: str, requires_grad: bool):
        """The base's tensors plus, for a sink case, ``learnable_sink`` (float32 [Hq], a leaf that requires
        grad in a backward) in the mutation check as ``sinks``."""
        t, handed, before = super()._prepare(inputs, case, device, requires_grad)
        self._sink = None
        if case.sinks is not None:
            if inputs.sinks is None or np.shape(inputs.sinks) != (case.Hq,):
                raise ValueError(f"case {case.id}: case.sinks={case.sinks!r} needs CaseInputs.sinks of shape "
                                 f"({case.Hq},), got {None if inputs.sinks is None else np.shape(inputs.sinks)}")
            sink = torch.tensor(np.asarray(inputs.sinks, dtype=np.float32), device=device)
            self._sink = sink.requires_grad_(requires_grad)
            handed = dict(handed, sinks=self._sink)
            before = dict(before, sinks=self._sink.detach().clone())
        return t, handed, before

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        """Autograd through FA4 with the sink as a leaf (its gradient is d sinks) and, for ``lse_grad`` cases,
        the LSE as a second output with cotangent ``inputs.dlse`` (0 on padded query rows)."""
        if case.sinks is None and not case.lse_grad:
            return super().backward(inputs, case, device)
        if inputs.dout is None:
            raise ValueError(f"{self.name}.backward needs inputs.dout (case {case.id})")
        if case.lse_grad and inputs.dlse is None:
            raise ValueError(f"case {case.id}: lse_grad=True but CaseInputs.dlse is None")
        t, handed, before = self._prepare(inputs, case, device, True)
        wrt = (t.q, t.k, t.v) + ((self._sink,) if self._sink is not None else ())
        with torch.enable_grad(), tc.KernelRecorder(device) as rec:
            out, lse, entry = self._run(t, inputs, case, device, want_lse=case.lse_grad)
            outputs, cotangents = [out], [t.dout]
            if case.lse_grad:
                dlse = np.array(inputs.dlse, dtype=np.float32)
                for b, n in enumerate(case.seqlens_q or ()):
                    dlse[b, :, int(n):] = 0.0  # padded rows are not in the loss (§7)
                outputs.append(lse)
                cotangents.append(torch.from_numpy(dlse).to(device=device, dtype=lse.dtype))
            grads = torch.autograd.grad(outputs, wrt, grad_outputs=cotangents)
        notes = [f"entry point: {entry}"] + self._notes + ([rec.error] if rec.error else [])
        notes += self._kernel_notes(rec, 1)
        bo = tc.autograd_output(out, grads[:3], rec, tc.changed(before, handed), notes=notes)
        if self._sink is not None:
            bo.dsinks = tc.to_numpy(grads[3])
        return bo

    def call_for(self, case: Case, inputs: CaseInputs, want_lse: bool) -> FaCall:
        entry = self.entry(case)
        kw: dict[str, Any] = dict(softmax_scale=case.scale, causal=case.causal, return_lse=want_lse)
        if case.sinks is not None:
            kw["learnable_sink"] = Handed("sinks")
        window = fa_window(case, self.unbounded)
        if window != (None, None):
            kw["window_size"] = window
        if case.softcap:
            kw["softcap"] = case.softcap
        if self.entry_point == "deterministic":
            kw["deterministic"] = True
        sq, sk = self._lengths(case)
        name = "flash_attn.cute."
        if entry == "func":
            return FaCall("flash_attn_func", "bshd", name + "flash_attn_func", kw)
        if entry == "varlen_func":
            kw.update(cu_seqlens_q=_i32(cu_seqlens(sq)), cu_seqlens_k=_i32(cu_seqlens(sk)), max_seqlen_q=max(sq),
                      max_seqlen_k=max(sk))
            return FaCall("flash_attn_varlen_func", "packed",
                          name + "flash_attn_varlen_func(cu_seqlens_q, cu_seqlens_k)", kw)
        if entry == "seqused":
            kw.update(seqused_q=_i32(sq), seqused_k=_i32(sk))
            return FaCall("flash_attn_varlen_func", "bshd", name + "flash_attn_varlen_func(seqused_q, seqused_k)", kw)
        kw.update(page_table=Handed("paged.block_table"), seqused_k=_i32(self._paged_lens(case)))
        if case.seqlens_q is not None:
            kw["seqused_q"] = _i32(sq)
        return FaCall("flash_attn_varlen_func", "paged", name + "flash_attn_varlen_func(page_table, seqused_k)", kw)
