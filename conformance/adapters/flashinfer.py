"""FlashInfer (``pip install flashinfer-python``, 0.7.x): the attention library of the serving engines, through each
entry point their users call.

Spellings (``flashinfer@ENTRY``, `conformance.adapters.variants`; `SPELLINGS` is the one table of what each can
express, and its `Capabilities` are derived from it, `spelling_capabilities`):

- ``single_prefill`` / ``single_prefill_hnd``: ``single_prefill_with_kv_cache`` once per sequence, K/V in the NHD
  ([kv_len, Hkv, d]) or HND ([Hkv, kv_len, d]) layout, views of the case's tensors (their strides as the case's
  layout makes them); ``custom_mask``: the same function with the dense ``custom_mask`` [qo_len, kv_len] (one
  pattern for every head) instead of the ``causal`` / ``window_left`` flags.
- ``single_decode`` / ``single_decode_hnd``: ``single_decode_with_kv_cache``, one query row per sequence (Lq = 1).
- ``ragged_prefill``: ``BatchPrefillWithRaggedKVCacheWrapper`` (plan / run) on sequences packed to [total, H, d]
  with ``qo_indptr`` / ``kv_indptr``.
- ``paged_prefill`` / ``paged_prefill_hnd``, ``paged_decode`` / ``paged_decode_hnd``:
  ``BatchPrefillWithPagedKVCacheWrapper`` / ``BatchDecodeWithPagedKVCacheWrapper`` over the page table
  ``kv_indptr`` / ``kv_indices`` / ``kv_last_page_len`` (`page_table`) built from the case's block table
  (SEMANTICS.md §16): the pools with their NaN decoy pages and NaN tail slots are handed over whole, and only the
  used entries of each table row reach ``kv_indices``. A case stored densely is paged here in order, in pages of
  `DENSE_PAGE_SIZE` keys (`dense_pages`, zero tails), as serving engines page any cache.
- ``sink_wrapper``: ``BatchAttentionWithAttentionSinkWrapper``, the paged prefill with the AttentionSink variant
  (``run(q, (k_cache, v_cache), sinks, sm_scale)``); ``paged_prefill`` passes sinks as ``run(sinks=)`` (§18).
- ``merge_state`` / ``merge_states``: split-KV (SEMANTICS.md §14): each sequence's keys in three uneven splits
  (`kv_splits`), each through ``single_prefill_with_kv_cache(return_lse=True)`` (the split's slice of the dense
  visibility as ``custom_mask`` when the case masks anything), merged by ``merge_state`` pairwise or one
  ``merge_states`` call.

Without ``@`` the spelling is picked per case (`auto_order`): paged cases through the paged wrappers, sink cases
through the sink wrapper, varlen cases through the ragged wrapper, decode rows through ``single_decode``, the rest
through ``single_prefill``, and ``custom_mask`` for what the flags cannot say.

Semantics (FlashInfer's kernels: include/flashinfer/attention/variants.cuh): causal is aligned bottom-right per
request (``qo_len`` / ``kv_len``), the top-left cases it cannot say are declined unless every sequence is square;
``window_left`` keeps keys ``j >= i + kv_len - qo_len - window_left`` and bounds nothing on the right unless
``causal`` (a right bound of at least qo_len - 1 is vacuous and passes); soft cap ``logits_soft_cap`` (§3).
FP8 KV cache (§10, per-tensor scales): K and V as FP8 codes with ``k_scale`` / ``v_scale``, Q's codes in float16
with its descale folded into ``sm_scale`` (``q_scale`` where the call takes one).

Limits of the library written where they are known: the decode kernels' GQA group sizes (`DECODE_GROUPS`); a
sequence with queries and no keys is not handed to a single-request function (`NO_KEYS`); FlashInfer's FA2 single
prefill (its pick for FP8 K/V under a 16-bit query and for head dims its FA3 kernels lack) refuses causal with
kv_len < qo_len, asked at run time from FlashInfer's own backend choice (`FlashInfer.library_reason`). Sinks through
``BatchPrefillWithPagedKVCacheWrapper.run(sinks=)`` are claimed as its documentation states them, on every backend.

LSE (§12, §21): what FlashInfer returns, base 2 (``log2 sum 2^(s log2 e)``), ``[total_q, Hq]`` (``NH``): declared
as ``Capabilities.lse_base = "2"``, ``lse_layout = "total_h"``; the judge converts (x ln 2). Rows with no visible key:
-inf (declared; anything else is judged). With sinks the LSE includes the sink.

Declared support comes from the installed library: dtypes, head dims (pairs with d == dv) and FP8 formats of its
ahead-of-time set (``flashinfer.aot.get_default_config()``: what the FlashInfer team builds and ships); without the
library the adapter claims nothing. The version is the distribution's (``flashinfer-python``). Kernel names come
from the profiler; the wrappers' backend (``fa2`` / ``fa3``) is noted.

Kernels are JIT-compiled with nvcc on first use (minutes per module); tools/device/flashinfer_prebuild.py builds the
modules a profile needs beforehand, all at once.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters._torch_common import torch
from attention_conformance.adapters.base import (
    Capabilities,
    CaseInputs,
    Exclusion,
    ForwardOutput,
    same_mask_either_alignment,
)
from attention_conformance.adapters.spelling import (
    LibraryAdapter,
    first_claim,
    kv_splits,
    mask_varies_over_heads,
    sequence_lengths,
    union_capabilities,
)
from attention_conformance.cases.case import ALIGNMENTS, LAYOUTS, PAGED_LAYOUTS, Case, page_size_of

__all__ = [
    "DENSE_PAGE_SIZE",
    "SPELLINGS",
    "FlashInfer",
    "LibrarySupport",
    "Spelling",
    "auto_order",
    "dense_pages",
    "library_support",
    "native_window",
    "page_table",
    "spelling_capabilities",
]

DISTRIBUTION = "flashinfer-python"
#: keys per page when a densely stored case goes through a paged spelling (vLLM's default block size)
DENSE_PAGE_SIZE = 16
#: the float workspace FlashInfer's documentation recommends for the batch wrappers
WORKSPACE_BYTES = 128 * 1024 * 1024


# -- what each spelling can express ------------------------------------------------------------------
@dataclass(frozen=True)
class Spelling:
    """One public way of calling FlashInfer, and what it can express (the only place its limits are written).

    ``kind``: single_prefill, single_decode, ragged, paged_prefill, paged_decode, sink, merge. ``masks``: "flags"
    (``causal`` + ``window_left``) or "custom" (a dense ``custom_mask``). ``fp8``: takes FP8 K/V with scales;
    ``sinks``: takes sink logits; ``merge``: the merge function of a split-KV spelling.
    """

    call: str
    kind: str
    kv_layout: str = "NHD"
    masks: str = "flags"
    fp8: bool = False
    sinks: bool = False
    merge: str | None = None

    @property
    def decode(self) -> bool:
        return self.kind in ("single_decode", "paged_decode")

    @property
    def paged(self) -> bool:
        return self.kind in ("paged_prefill", "paged_decode", "sink")

    @property
    def softcap(self) -> bool:
        return self.kind != "sink"  # the AttentionSink variant has no logits transform

    @property
    def strided(self) -> bool:
        """Takes Q/K/V as strided views (reads their strides); the other calls check for contiguous tensors
        (decode) or get packed copies (the batch wrappers), so only the contiguous layout means anything there."""
        return self.kind in ("single_prefill", "merge")

    @property
    def packed(self) -> bool:
        """Queries go in packed [total_q, Hq, d] (the batch wrappers)."""
        return self.kind in ("ragged", "paged_prefill", "paged_decode", "sink")


SPELLINGS: dict[str, Spelling] = {
    "single_prefill": Spelling("single_prefill_with_kv_cache", "single_prefill", fp8=True),
    "single_prefill_hnd": Spelling("single_prefill_with_kv_cache(kv_layout='HND')", "single_prefill", "HND",
                                   fp8=True),
    "custom_mask": Spelling("single_prefill_with_kv_cache(custom_mask=)", "single_prefill", masks="custom"),
    "single_decode": Spelling("single_decode_with_kv_cache", "single_decode", fp8=True),
    "single_decode_hnd": Spelling("single_decode_with_kv_cache(kv_layout='HND')", "single_decode", "HND", fp8=True),
    "ragged_prefill": Spelling("BatchPrefillWithRaggedKVCacheWrapper", "ragged"),
    "paged_prefill": Spelling("BatchPrefillWithPagedKVCacheWrapper", "paged_prefill", sinks=True),
    "paged_prefill_hnd": Spelling("BatchPrefillWithPagedKVCacheWrapper(kv_layout='HND')", "paged_prefill", "HND",
                                  sinks=True),
    "paged_decode": Spelling("BatchDecodeWithPagedKVCacheWrapper", "paged_decode", fp8=True),
    "paged_decode_hnd": Spelling("BatchDecodeWithPagedKVCacheWrapper(kv_layout='HND')", "paged_decode", "HND",
                                 fp8=True),
    "sink_wrapper": Spelling("BatchAttentionWithAttentionSinkWrapper", "sink", sinks=True),
    "merge_state": Spelling("single_prefill_with_kv_cache(return_lse=True) + merge_state", "merge",
                            masks="custom", merge="merge_state"),
    "merge_states": Spelling("single_prefill_with_kv_cache(return_lse=True) + merge_states", "merge",
                             masks="custom", merge="merge_states"),
}


@dataclass(frozen=True)
class LibrarySupport:
    """What the installed FlashInfer builds and ships (``flashinfer.aot.get_default_config()``)."""

    dtypes: frozenset[str]
    head_dims: frozenset[int]
    fp8_formats: frozenset[str]
    #: every (head_dim_qk, head_dim_vo) of its FA2 and FA3 (sm90) builds, e.g. (192, 128)
    head_dim_pairs: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def from_config(cls, config: dict) -> LibrarySupport:
        def name(dtype) -> str:
            return str(dtype).removeprefix("torch.")

        pairs = [tuple(p) for p in config.get("fa2_head_dim", ())]
        every = pairs + [tuple(p) for p in config.get("fa3_head_dim", ())]
        return cls(dtypes=frozenset(name(d) for d in config.get("f16_dtype", ())),
                   head_dims=frozenset(int(qk) for qk, vo in pairs if qk == vo),
                   fp8_formats=frozenset(name(d).removeprefix("float8_") for d in config.get("f8_dtype", ())),
                   head_dim_pairs=frozenset((int(qk), int(vo)) for qk, vo in every))


NOTHING = LibrarySupport(frozenset(), frozenset(), frozenset())


def library_support(module) -> LibrarySupport:
    """`LibrarySupport` of an imported flashinfer module (`NOTHING` without one, or without its AOT list)."""
    if module is None:
        return NOTHING
    try:
        aot = importlib.import_module(module.__name__ + ".aot")
        return LibrarySupport.from_config(aot.get_default_config())
    except Exception:  # an install without the AOT list claims nothing rather than guessing
        return NOTHING


def _layouts(sp: Spelling) -> frozenset[str]:
    if sp.paged:
        return frozenset({"contiguous"}) | frozenset(PAGED_LAYOUTS)
    return frozenset(LAYOUTS) if sp.strided else frozenset({"contiguous"})


def _right_bound_unsaid(case: Case) -> bool:
    """A window right bound the ``causal`` / ``window_left`` flags cannot say: not causal, and below qo_len - 1 (a
    bound of at least qo_len - 1 keeps every key a bottom-right window keeps anyway)."""
    if case.window is None or case.window[1] is None or case.causal:
        return False
    longest_q = max(case.seqlens_q) if case.seqlens_q else case.Lq
    return case.window[1] < longest_q - 1


RIGHT_BOUND = Exclusion("FlashInfer's window_left bounds the left side only: keys right of the diagonal stay "
                        "visible unless causal (a right bound needs causal, or one of at least qo_len - 1)",
                        _right_bound_unsaid)
SHARED_MASK = Exclusion("FlashInfer's custom_mask is one [qo_len, kv_len] pattern shared by every head; this case's "
                        "mask recipe differs between heads", mask_varies_over_heads)
NEEDS_SINKS = Exclusion("BatchAttentionWithAttentionSinkWrapper always adds its sink logits (the AttentionSink "
                        "variant): cases without sinks go through flashinfer@paged_prefill", lambda c: c.sinks is None)


#: the GQA group sizes FlashInfer's decode kernels instantiate (include/flashinfer/utils.cuh
#: ``DISPATCH_GQA_GROUP_SIZE``; any other raises "Unsupported group_size")
DECODE_GROUP_SIZES = frozenset({1, 2, 3, 4, 6, 8, 16})
DECODE_GROUPS = Exclusion("FlashInfer's decode kernels take GQA group sizes (Hq / Hkv) 1, 2, 3, 4, 6, 8 and 16 only "
                          "(\"Unsupported group_size\": include/flashinfer/utils.cuh, DISPATCH_GQA_GROUP_SIZE)",
                          lambda c: c.Hq // c.Hkv not in DECODE_GROUP_SIZES)


def _request_without_keys(case: Case) -> bool:
    sq, sk = sequence_lengths(case)
    return any(q > 0 and k == 0 for q, k in zip(sq, sk, strict=True))


NO_KEYS = Exclusion("a sequence with queries and no keys: the single-request functions are called once per sequence, "
                    "and a call with kv_len = 0 is one no caller makes (the batch wrappers, which take empty "
                    "requests, say these cases: flashinfer@ragged_prefill, @paged_prefill)", _request_without_keys)


#: the run-time check `FlashInfer.library_reason` makes (the declaration cannot: it depends on the backend FlashInfer
#: picks on the device)
SINGLE_PREFILL_CHECK = ("FlashInfer's backend choice (flashinfer.utils.determine_attention_backend): its FA2 single "
                        "prefill refuses causal with kv_len < qo_len")


def _exclusions(sp: Spelling) -> tuple[Exclusion, ...]:
    out = [RIGHT_BOUND if sp.masks == "flags" else SHARED_MASK]
    if sp.kind in ("single_prefill", "single_decode", "merge"):
        out.append(NO_KEYS)
    if sp.decode:
        out.append(Exclusion(f"{sp.call} computes one query row per sequence (decode): Lq must be 1",
                             lambda c: c.Lq != 1))
        out.append(DECODE_GROUPS)
    if sp.kind == "sink":
        out.append(NEEDS_SINKS)
    return tuple(out)


def spelling_capabilities(sp: Spelling, lib: LibrarySupport) -> Capabilities:
    """The `Capabilities` spelling `sp` expresses with the library's support `lib` (its limits, exclusions
    included: the one place they are written)."""
    custom = sp.masks == "custom"
    return Capabilities(
        dtypes=lib.dtypes, devices=frozenset({"cuda"}), head_dims=lib.head_dims, dv_ne_d=False,
        alignments=frozenset(ALIGNMENTS) if custom else frozenset({"bottom_right"}),
        window=True, mask=custom, bias=False, softcap=sp.softcap, gqa=True, varlen=True, custom_scale=True,
        layouts=_layouts(sp), lse=True, lse_base="2", lse_layout="total_h", backward=False,
        fp8=frozenset({"per_tensor"}) if sp.fp8 and lib.fp8_formats else frozenset(),
        fp8_formats=lib.fp8_formats if sp.fp8 else frozenset(),
        sinks=sp.sinks, chunk=custom, memory=None if custom else "linear",  # a custom mask is an O(N^2) input
        excludes=_exclusions(sp),
        library_check=SINGLE_PREFILL_CHECK if sp.kind == "single_prefill" and not custom else None,
    )


def native_window(case: Case) -> int:
    """``window_left`` for `case` (-1: unbounded); ValueError when the flags cannot say the case's window."""
    if case.window is None:
        return -1
    if case.alignment != "bottom_right" and not same_mask_either_alignment(case):
        raise ValueError("FlashInfer's window_left counts from the bottom-right diagonal; a top-left window with "
                         "Lq != Lk (or unequal sequence lengths) is not expressible")
    if _right_bound_unsaid(case):
        raise ValueError(RIGHT_BOUND.reason)
    return -1 if case.window[0] is None else int(case.window[0])


def auto_order(case: Case) -> tuple[str, ...]:
    """The spellings the per-case adapter tries for `case`, in order; the first that expresses it is called."""
    if page_size_of(case.layout) is not None:
        return ("sink_wrapper", "paged_prefill") if case.sinks is not None else ("paged_decode", "paged_prefill")
    if case.sinks is not None:
        return ("sink_wrapper",)
    if case.varlen:
        return ("ragged_prefill", "single_decode", "custom_mask")
    return ("single_decode", "single_prefill", "custom_mask")


AUTO_SPELLINGS = ("sink_wrapper", "paged_prefill", "paged_decode", "ragged_prefill", "single_decode",
                  "single_prefill", "custom_mask")


# -- argument translation (pure; unit-tested without FlashInfer) -------------------------------------
def indptr(lengths: Iterable[int]) -> np.ndarray:
    """int32 [n + 1] offsets 0, l0, l0 + l1, ... (``qo_indptr`` / ``kv_indptr`` of packed sequences)."""
    return np.concatenate([[0], np.cumsum([int(n) for n in lengths])]).astype(np.int32)


def page_table(block_table: np.ndarray, lengths: Iterable[int], page_size: int) -> dict[str, np.ndarray]:
    """FlashInfer's page table of a block table (SEMANTICS.md §16): sequence b uses its first ceil(len_b / page_size)
    entries; ``kv_indices`` holds those, ``kv_indptr`` their offsets, ``kv_last_page_len`` the keys in each last page
    (0 for an empty sequence, which has no page)."""
    table = np.asarray(block_table)
    used = [-(-int(n) // page_size) for n in lengths]
    if any(u > table.shape[1] for u in used):
        raise ValueError(f"block table of shape {table.shape} has fewer than ceil(len / {page_size}) entries for "
                         f"lengths {list(lengths)}")
    indices = np.concatenate([table[b, :u] for b, u in enumerate(used)] + [np.zeros(0, table.dtype)])
    last = [int(n) - (u - 1) * page_size if u else 0 for n, u in zip(lengths, used, strict=True)]
    return {"kv_indptr": indptr(used), "kv_indices": indices.astype(np.int32),
            "kv_last_page_len": np.asarray(last, dtype=np.int32)}


def dense_pages(k: np.ndarray, v: np.ndarray, lengths: Iterable[int], page_size: int) -> dict:
    """Densely stored K [B, Hkv, Lk, d] / V paged in order (`CaseInputs.paged`'s layout: pools [num_pages, Hkv,
    page_size, d], int32 ``block_table`` [B, ceil(Lk / page_size)]); only each sequence's first len_b keys are
    copied, the rest of a last page is 0."""
    B, Hkv, Lk, d = k.shape
    per_seq = max(1, -(-Lk // page_size))
    k_pool = np.zeros((B * per_seq, Hkv, page_size, d))
    v_pool = np.zeros((B * per_seq, Hkv, page_size, v.shape[3]))
    for b, n in enumerate(lengths):
        for p in range(-(-int(n) // page_size)):
            j0, j1 = p * page_size, min((p + 1) * page_size, int(n))
            k_pool[b * per_seq + p, :, : j1 - j0] = k[b, :, j0:j1]
            v_pool[b * per_seq + p, :, : j1 - j0] = v[b, :, j0:j1]
    table = np.arange(B * per_seq, dtype=np.int32).reshape(B, per_seq)
    return dict(k_pool=k_pool, v_pool=v_pool, block_table=table, page_size=page_size)


def _needs_custom_mask(case: Case) -> bool:
    return case.causal or case.window is not None or case.mask is not None or case.chunk is not None


# -- the adapter -----------------------------------------------------------------------------------------------------
class FlashInfer(LibraryAdapter):
    """FlashInfer through its public entry points (see the module docstring)."""

    name = "flashinfer"
    description = ("FlashInfer (single/batch prefill and decode, ragged and paged KV with NHD/HND layouts, sinks, "
                   "split-KV merge_state); LSE base 2")
    module_name = "flashinfer"
    distribution = DISTRIBUTION
    min_cc = (8, 0)
    cc_text = "FlashInfer's kernels: sm80 and newer"
    entry_points: ClassVar[tuple[str, ...]] = tuple(SPELLINGS)

    def __init__(self, entry_point: str | None = None) -> None:
        super().__init__(entry_point)
        self._workspace: dict[str, Any] = {}
        self._lib = library_support(self.module())
        if entry_point is None:
            unclaimed = Exclusion("no FlashInfer entry point expresses this combination of features",
                                  lambda c: self._pick(c)[0] is None)
            self.capabilities = union_capabilities((spelling_capabilities(SPELLINGS[e], self._lib)
                                                    for e in AUTO_SPELLINGS), unclaimed)
        else:
            self.capabilities = spelling_capabilities(SPELLINGS[entry_point], self._lib)

    def claim_reason(self, case: Case, device: str) -> str | None:
        entry, _, reasons = self._pick(case)
        if entry is not None:
            return None
        if self.entry_point is not None:
            return f"{self.name} ({SPELLINGS[self.entry_point].call}) cannot express this case: " \
                   f"{reasons[self.entry_point]}"
        return "no FlashInfer entry point expresses this case: " + "; ".join(f"{e}: {r}" for e, r in reasons.items())

    def library_reason(self, case: Case, device: str) -> str | None:
        """FlashInfer's own refusal of a claimed case: its FA2 single prefill (the backend it picks for a custom mask,
        for FP8 K/V under a 16-bit query, and for head dims its FA3 kernels lack) raises on causal with kv_len <
        qo_len, where its FA3 kernel computes the empty rows; the backend is FlashInfer's own choice
        (``flashinfer.utils.determine_attention_backend``, as ``single_prefill_with_kv_cache`` makes it)."""
        entry, form, _ = self._pick(case)
        if entry is None or SPELLINGS[entry].kind != "single_prefill" or SPELLINGS[entry].masks != "flags" \
                or not form.causal:
            return None
        sq, sk = sequence_lengths(form)
        if not any(k < q for q, k in zip(sq, sk, strict=True) if q):
            return None
        if self._single_prefill_backend(form, device) != "fa2":
            return None
        return ("FlashInfer's single_prefill_with_kv_cache picks its FA2 kernel here, which refuses causal with fewer "
                "keys than queries: \"When mask_mode is set to MaskMode::kCausal, kv_len must be greater than or "
                "equal to qo_len\" (include/flashinfer/attention/prefill.cuh)")

    def _single_prefill_backend(self, case: Case, device: str) -> str | None:
        """The backend ``single_prefill_with_kv_cache(backend="auto")`` picks for `case`'s dtypes and head dims on
        `device` (None when FlashInfer cannot say)."""
        try:
            utils = importlib.import_module(self.module_name + ".utils")
            if case.fp8 is not None:
                dtype_q, dtype_kv = torch.float16, tc.torch_dtype("float8_" + case.fp8.format)
            else:
                dtype_q = dtype_kv = tc.torch_dtype(case.dtype)
            return utils.determine_attention_backend(torch.device(device), utils.PosEncodingMode.NONE.value, False,
                                                     False, dtype_q, dtype_kv, head_dim_qk=case.d, head_dim_vo=case.dv)
        except Exception:  # an older or newer FlashInfer without this helper: let the call answer
            return None

    def _pick(self, case: Case) -> tuple[str | None, Case, dict[str, str]]:
        """(the spelling this call uses, the equivalent form of the case it expresses, {}) or (None, case, each tried
        spelling's reason)."""
        candidates = (self.entry_point,) if self.entry_point else auto_order(case)
        return first_claim(((e, spelling_capabilities(SPELLINGS[e], self._lib)) for e in candidates), case)

    # -- tensors ----------------------------------------------------------------------------------
    def _tensors(self, inputs: CaseInputs, case: Case, device: str) -> dict[str, Any]:
        """q [B, Hq, Lq, d], k, v [B, Hkv, Lk, d] views in the case's layout; FP8: Q's codes in float16, K/V codes."""
        layout = "contiguous" if page_size_of(case.layout) is not None else None
        if case.fp8 is None:
            m = tc.materialize(inputs, case, device, layout=layout)
            return {"q": m.q, "k": m.k, "v": m.v}
        codes = inputs.fp8_codes(case.fp8)
        coded = CaseInputs(q=codes["q8"], k=codes["k8"], v=codes["v8"])
        q = tc.materialize(coded, case, device, dtype=torch.float16, layout=layout).q
        kv = tc.materialize(coded, case, device, dtype=tc.torch_dtype("float8_" + case.fp8.format), layout=layout)
        return {"q": q, "k": kv.k, "v": kv.v}

    @staticmethod
    def _fp8_scales(inputs: CaseInputs, case: Case) -> tuple[float, float, float]:
        codes = inputs.fp8_codes(case.fp8)
        return tuple(float(np.asarray(codes[n], dtype=np.float64).reshape(-1)[0])
                     for n in ("q_descale", "k_descale", "v_descale"))

    def _pages(self, inputs: CaseInputs, case: Case, sp: Spelling, kv_dtype, device: str) -> dict[str, Any]:
        """The caches in the spelling's layout and the page table (device tensors), from the case's paged storage
        or, for a dense case, `dense_pages`."""
        _, sk = sequence_lengths(case)
        if page_size_of(case.layout) is not None:
            if inputs.paged is None:
                raise ValueError(f"case {case.id}: layout {case.layout!r} is paged but CaseInputs.paged is None")
            store = inputs.paged
        else:
            k, v = inputs.k, inputs.v
            if case.fp8 is not None:
                codes = inputs.fp8_codes(case.fp8)
                k, v = codes["k8"], codes["v8"]
            store = dense_pages(np.asarray(k), np.asarray(v), sk, DENSE_PAGE_SIZE)
        size = int(store["page_size"])
        caches = {}
        for name in ("k_pool", "v_pool"):
            pool = np.asarray(store[name])  # [num_pages, Hkv, page_size, d]: FlashInfer's HND page layout
            if sp.kv_layout == "NHD":
                pool = pool.transpose(0, 2, 1, 3)
            caches[name] = tc.to_torch(np.ascontiguousarray(pool), kv_dtype, device, name=f"paged.{name}")
        table = {n: torch.from_numpy(a).to(device) for n, a in page_table(store["block_table"], sk, size).items()}
        return {"k_cache": caches["k_pool"], "v_cache": caches["v_pool"], "page_size": size, **table}

    def _workspace_buffer(self, device: str):
        if device not in self._workspace:
            self._workspace[device] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        return self._workspace[device]

    # -- forward --------------------------------------------------------------------------------------
    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        entry, form, why = self._pick(case)
        if entry is None:
            raise ValueError(f"{self.name} cannot express case {case.id}: {why}")
        sp = SPELLINGS[entry]
        call = _Call(self, inputs, form, device, sp)
        before = tc.snapshot(call.handed)
        with tc.KernelRecorder(device) as rec:
            out, lse = call.run()
        notes = [f"entry point: flashinfer.{sp.call}"] + call.notes + ([rec.error] if rec.error else [])
        return ForwardOutput(out=tc.to_numpy(out), lse=tc.to_numpy(lse), out_dtype=tc.dtype_name(out.dtype),
                             out_device=str(out.device), kernels=rec.names,
                             mutated_inputs=tc.changed(before, call.handed), lse_convention="-inf", notes=notes)


class _Call:
    """One forward call of `FlashInfer` through spelling `sp`: the tensors it hands over (``handed``, for the
    mutation check) and `run`, which returns (out [B, Hq, Lq, dv], lse [total_q, Hq] base 2)."""

    def __init__(self, adapter: FlashInfer, inputs: CaseInputs, case: Case, device: str, sp: Spelling):
        self.mod = adapter.module()
        self.case, self.device, self.sp = case, device, sp
        self.notes: list[str] = []
        self.sq, self.sk = sequence_lengths(case)
        t = adapter._tensors(inputs, case, device)
        self.q, self.k, self.v = t["q"], t["k"], t["v"]
        self.handed: dict[str, Any] = {"q": self.q}
        self.kw: dict[str, Any] = {}
        if case.scale is not None:
            self.kw["sm_scale"] = float(case.scale)
        if sp.softcap and case.softcap:
            self.kw["logits_soft_cap"] = float(case.softcap)
        self.scales = None
        if case.fp8 is not None:
            self.scales = FlashInfer._fp8_scales(inputs, case)
        self.sink = None
        if case.sinks is not None:
            if inputs.sinks is None or np.shape(inputs.sinks) != (case.Hq,):
                raise ValueError(f"case {case.id}: sinks={case.sinks!r} needs CaseInputs.sinks of shape ({case.Hq},)")
            self.sink = torch.tensor(np.asarray(inputs.sinks, dtype=np.float32), device=device)
            self.handed["sinks"] = self.sink
        self.mask = None
        if sp.masks == "custom" and (sp.kind != "merge" or _needs_custom_mask(case)):
            vis = tc.visibility(case, inputs.mask, padded_rows_visible=True)
            self.mask = np.ones((case.B, 1, case.Lq, case.Lk), dtype=bool) if vis is None else vis
        if sp.paged:
            self.pages = adapter._pages(inputs, case, sp, self.k.dtype, device)
            self.handed.update({f"paged.{n}": x for n, x in self.pages.items() if n != "page_size"})
        else:
            self.handed.update(k=self.k, v=self.v)
        if sp.packed:
            self.workspace = adapter._workspace_buffer(device)

    # -- shared pieces ---------------------------------------------------------------------------
    @property
    def dtype(self):
        return self.q.dtype

    def _window(self) -> int:
        return native_window(self.case)

    def _kv(self, x, b: int, lo: int, hi: int):
        """Keys lo..hi-1 of sequence b in the spelling's layout: NHD [n, Hkv, d] or HND [Hkv, n, d] (views)."""
        rows = x[b, :, lo:hi]
        rows = rows if self.sp.kv_layout == "HND" else rows.transpose(0, 1)
        return rows if self.sp.strided else rows.contiguous()

    def _mask_rows(self, b: int, lo: int, hi: int):
        m = self.mask[b, 0, : self.sq[b], lo:hi]
        t = torch.from_numpy(np.ascontiguousarray(m)).to(self.device)
        self.handed[f"custom_mask[{b}][{lo}:{hi}]"] = t
        return t

    def _empty_out(self):
        dv = self.v.shape[-1] if not self.sp.paged else self.pages["v_cache"].shape[-1]
        return torch.zeros(self.case.B, self.case.Hq, self.case.Lq, dv, dtype=self.dtype, device=self.device)

    def _packed_q(self):
        return torch.cat([self.q[b, :, : n].transpose(0, 1) for b, n in enumerate(self.sq)], dim=0)

    def _unpack(self, packed):
        out = self._empty_out()
        start = 0
        for b, n in enumerate(self.sq):
            out[b, :, :n] = packed[start: start + n].transpose(0, 1)
            start += n
        return out

    def _fp8_prefill_kw(self) -> dict:
        if self.scales is None:
            return {}
        dq, dk, dv = self.scales
        base = self.kw.get("sm_scale", self.case.d ** -0.5)
        self.notes.append("FP8 K/V codes with k_scale / v_scale; Q's codes in float16, its descale folded into "
                          "sm_scale (the call has no q_scale for a 16-bit query)")
        return {"sm_scale": base * dq, "k_scale": dk, "v_scale": dv}

    def _backend_note(self, wrapper) -> None:
        backend = getattr(wrapper, "_backend", None)
        if backend:
            self.notes.append(f"backend: {backend}")

    def run(self):
        return getattr(self, "_run_" + self.sp.kind)()

    # -- single request functions ----------------------------------------------------------------
    def _single(self, b: int, lo: int, hi: int, extra: dict):
        kw = dict(self.kw, kv_layout=self.sp.kv_layout, return_lse=True, **extra)
        if self.mask is not None:
            kw["custom_mask"] = self._mask_rows(b, lo, hi)
        else:
            kw.update(causal=self.case.causal, window_left=self._window())
        q_b = self.q[b, :, : self.sq[b]].transpose(0, 1)
        with tc.code_under_test(self.device):
            return self.mod.single_prefill_with_kv_cache(q_b, self._kv(self.k, b, lo, hi), self._kv(self.v, b, lo, hi),
                                                         **kw)

    def _run_single_prefill(self):
        out, lses = self._empty_out(), []
        extra = self._fp8_prefill_kw()
        for b, n in enumerate(self.sq):
            if n == 0:
                continue
            o_b, lse_b = self._single(b, 0, self.sk[b], extra)
            out[b, :, :n] = o_b.transpose(0, 1)
            lses.append(lse_b)
        return out, self._stack_lse(lses)

    def _run_single_decode(self):
        out, lses = self._empty_out(), []
        kw = dict(self.kw, kv_layout=self.sp.kv_layout, window_left=self._window(), return_lse=True)
        if self.scales is not None:
            kw.update(q_scale=self.scales[0], k_scale=self.scales[1], v_scale=self.scales[2])
            self.notes.append("FP8 K/V codes with q_scale / k_scale / v_scale; Q's codes in float16")
        for b, n in enumerate(self.sq):
            if n == 0:
                continue
            q_b, k_b, v_b = self.q[b, :, 0].contiguous(), self._kv(self.k, b, 0, self.sk[b]), self._kv(self.v, b, 0,
                                                                                                        self.sk[b])
            with tc.code_under_test(self.device):
                o_b, lse_b = self.mod.single_decode_with_kv_cache(q_b, k_b, v_b, **kw)
            out[b, :, 0] = o_b
            lses.append(lse_b.reshape(1, -1))
        return out, self._stack_lse(lses)

    def _stack_lse(self, lses: list):
        if not lses:
            return torch.zeros(0, self.case.Hq, dtype=torch.float32, device=self.device)
        return torch.cat(lses, dim=0)

    def _run_merge(self):
        out, lses = self._empty_out(), []
        for b, n in enumerate(self.sq):
            if n == 0:
                continue
            parts = [self._single(b, lo, hi, {}) for lo, hi in kv_splits(self.sk[b])]
            with tc.code_under_test(self.device):
                if self.sp.merge == "merge_states":
                    o_b, s_b = self.mod.merge_states(torch.stack([p[0] for p in parts], dim=1),
                                                     torch.stack([p[1] for p in parts], dim=1))
                else:
                    o_b, s_b = parts[0]
                    for o_s, s_s in parts[1:]:
                        o_b, s_b = self.mod.merge_state(o_b, s_b, o_s, s_s)
            out[b, :, :n] = o_b.transpose(0, 1)
            lses.append(s_b)
        self.notes.append(f"split-KV: key splits {[kv_splits(n) for n in self.sk]} merged by {self.sp.merge}")
        return out, self._stack_lse(lses)

    # -- batch wrappers --------------------------------------------------------------------------
    def _indptr(self, lengths) -> Any:
        return torch.from_numpy(indptr(lengths)).to(self.device)

    def _type_kw(self) -> dict:
        return dict(q_data_type=self.dtype, kv_data_type=self.k.dtype)

    def _run_ragged(self):
        q = self._packed_q()
        k = torch.cat([self._kv(self.k, b, 0, n) for b, n in enumerate(self.sk)], dim=0)
        v = torch.cat([self._kv(self.v, b, 0, n) for b, n in enumerate(self.sk)], dim=0)
        qo, kv = self._indptr(self.sq), self._indptr(self.sk)
        self.handed.update(q_packed=q, k_packed=k, v_packed=v, qo_indptr=qo, kv_indptr=kv)
        with tc.code_under_test(self.device):
            w = self.mod.BatchPrefillWithRaggedKVCacheWrapper(self.workspace, kv_layout="NHD")
            w.plan(qo, kv, self.case.Hq, self.case.Hkv, self.case.d, head_dim_vo=self.case.dv, causal=self.case.causal,
                   window_left=self._window(), **self.kw, **self._type_kw())
            o, lse = w.run(q, k, v, return_lse=True)
        self._backend_note(w)
        return self._unpack(o), lse

    def _paged_plan_args(self) -> tuple:
        p = self.pages
        return (self._indptr(self.sq), p["kv_indptr"], p["kv_indices"], p["kv_last_page_len"], self.case.Hq,
                self.case.Hkv, self.case.d, p["page_size"])

    def _run_paged_prefill(self):
        q = self._packed_q()
        self.handed["q_packed"] = q
        args = self._paged_plan_args()
        run_kw = {"sinks": self.sink} if self.sink is not None else {}
        with tc.code_under_test(self.device):
            w = self.mod.BatchPrefillWithPagedKVCacheWrapper(self.workspace, kv_layout=self.sp.kv_layout)
            w.plan(*args, head_dim_vo=self.case.dv, causal=self.case.causal, window_left=self._window(), **self.kw,
                   **self._type_kw())
            o, lse = w.run(q, (self.pages["k_cache"], self.pages["v_cache"]), return_lse=True, **run_kw)
        self._backend_note(w)
        return self._unpack(o), lse

    def _run_paged_decode(self):
        q = self.q[:, :, 0]
        p = self.pages
        run_kw = {}
        if self.scales is not None:
            run_kw = dict(q_scale=self.scales[0], k_scale=self.scales[1], v_scale=self.scales[2])
            self.notes.append("FP8 K/V codes with q_scale / k_scale / v_scale; Q's codes in float16")
        with tc.code_under_test(self.device):
            w = self.mod.BatchDecodeWithPagedKVCacheWrapper(self.workspace, kv_layout=self.sp.kv_layout)
            w.plan(p["kv_indptr"], p["kv_indices"], p["kv_last_page_len"], self.case.Hq, self.case.Hkv, self.case.d,
                   p["page_size"], window_left=self._window(), **self.kw, **self._type_kw())
            o, lse = w.run(q, (p["k_cache"], p["v_cache"]), return_lse=True, **run_kw)
        self._backend_note(w)
        out = self._empty_out()
        out[:, :, 0] = o
        rows = [b for b, n in enumerate(self.sq) if n == 1]  # LSE rows of the sequences that have a query
        return out, lse[rows]

    def _run_sink(self):
        q = self._packed_q()
        self.handed["q_packed"] = q
        args = self._paged_plan_args()
        scale = self.kw.get("sm_scale", self.case.d ** -0.5)
        with tc.code_under_test(self.device):
            w = self.mod.BatchAttentionWithAttentionSinkWrapper(
                self.workspace, kv_layout=self.sp.kv_layout, head_dim_qk=self.case.d, head_dim_vo=self.case.dv,
                window_left=self._window(), **self._type_kw())
            w.plan(*args, head_dim_vo=self.case.dv, causal=self.case.causal, window_left=self._window(),
                   **self._type_kw())
            o, lse = w.run(q, (self.pages["k_cache"], self.pages["v_cache"]), self.sink, scale, return_lse=True)
        self._backend_note(w)
        return self._unpack(o), lse
