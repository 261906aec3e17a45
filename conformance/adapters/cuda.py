"""Adapters for the project's own CUDA kernels (kernels/cuda/, loaded by `kernels.cuda_lib`).

``cuda-fa1`` (FA1 forward + backward), ``cuda-fa2`` (FA2 forward + backward), ``cuda-splitkv``
(split-KV forward with its combine kernel), ``cuda-fa3`` (FA3 forward, sm_90a only, head dims `FA3_HEAD_DIMS` and
(d, dv) `FA3_DV_PAIRS`; backward for head dims `FA3_BWD_HEAD_DIMS`, kernels/cuda/fa3_bwd.cu), ``cuda-fa3-fp8`` (FA3 FP8
forward, sm_90a only) and ``cuda-fa3-fp8-vt`` (the same kernel with V packed k-major by ``attn_fp8_pack_vt``
first). Each call runs in a worker process (``isolate = True``) so a crash or hang costs one case.

How a case (oracles/SEMANTICS.md) maps onto the C parameter struct (kernels/cuda/include/attn_params.h):
- §2 scale, §3 softcap, §4 causal + alignment, §5 window (None -> -1), §7 varlen (int32 device arrays
  of real lengths, padded [B, H, L, D] layout), §9 GQA: native fields; no boolean mask or bias (§6).
- layouts: the views of `_torch_common.materialize` go in as they are (element strides; [B, L, H, D]
  transposed and stride-0 K/V included); the kernels need 16-byte aligned rows (head dims 64/128/256).
- §8 fully masked rows: the kernels write O = 0, LSE = -inf (declared convention "-inf").
- §18 attention sinks (``cuda-fa2`` forward and backward, ``cuda-splitkv`` forward): ``inputs.sinks`` goes in as
  an fp32 [Hq] device tensor (``sinks=``); the LSE the kernels write includes the sink (an empty row: O = 0,
  LSE = the sink). ``cuda-fa2``'s backward also takes the LSE cotangent ``inputs.dlse`` (fp32 [B, Hq, Lq],
  ``dlse=``) and writes d sinks (fp32 [Hq]) into `BackwardOutput.dsinks`. FA1 and FA3 decline sink cases
  (``cuda-fa3``'s backward takes ``dlse``).
- §16 paged K/V (``cuda-splitkv`` only, layouts paged64/128/256): the kernel gets the page pools of
  ``CaseInputs.paged`` as [num_pages, Hkv, page_size, d] tensors (their batch stride is the page stride)
  and the block table as an int32 device tensor; q and the output stay contiguous [B, H, L, D]. The dense
  ``inputs.k`` / ``inputs.v`` are not handed to the kernel. The pools and table are in the mutation check.
- §10 FP8 (``cuda-fa3-fp8``): the codes of ``CaseInputs.fp8`` (already rotated when the case is incoherent, §11)
  go in as torch.float8_e4m3fn / float8_e5m2 views of the case layout, the descales as fp32 device tensors of
  their oracle shapes (float64 -> float32, as the reference kernel rounds them); the output is bf16.
  ``cuda-fa3-fp8-vt`` packs the V codes k-major (`cuda_lib.pack_vt`, with the case's seqlens_k) and passes that
  tensor (``v_layout="kmajor"``); the V codes of the case layout stay in the mutation check.
- §7 padded query rows are never written by the kernels; the adapter reports them as 0 / -inf (the
  engine does not compare them) and counts only real rows as unwritten.

Every output (O, LSE, dQ, dK, dV) is written into a buffer poisoned with NaN that sits inside a
larger allocation with sentinel guard bands before and after it. A changed sentinel is an
out-of-bounds write: it is recorded in ``notes`` as ``oob_write: ...`` and the call raises
AssertionError so the case fails; NaN left in a real row is counted in ``ForwardOutput.unwritten``.
"""

from __future__ import annotations

import dataclasses
import math
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
from attention_conformance.cases.case import ALIGNMENTS, LAYOUTS, PAGED_LAYOUTS, Case, page_size_of

__all__ = ["CudaFA1", "CudaFA2", "CudaFA3", "CudaFA3FP8", "CudaFA3FP8KMajor", "CudaSplitKV", "GUARD_ELEMS",
           "GuardedBuffer"]

#: sentinel elements before and after every output buffer
GUARD_ELEMS = 1024
_SENTINEL = 1234.5  # a value no kernel writes; fp16 / bf16 store it rounded (1234, 1232), compared as stored
_SENTINEL_FP8 = 320.0  # exactly representable in e4m3fn (1.25 x 2^8) and e5m2


class GuardedBuffer:
    """A [shape] view poisoned with NaN inside a flat allocation with sentinel guard bands."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: Any, device: str):
        self.name, self.shape = name, tuple(shape)
        n = math.prod(self.shape)
        sentinel = _SENTINEL_FP8 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else _SENTINEL
        self.flat = torch.full((n + 2 * GUARD_ELEMS,), sentinel, dtype=dtype, device=device)
        self.sentinel = float(self.flat[0].float())  # as stored (compared in float32: FP8 has no comparisons)
        self.view = self.flat[GUARD_ELEMS : GUARD_ELEMS + n].view(self.shape)
        self.view.fill_(float("nan"))

    def oob_report(self) -> str | None:
        """None when both guard bands are intact; otherwise where the first changed sentinel lies."""
        for side, band in (("before", self.flat[:GUARD_ELEMS]), ("after", self.flat[-GUARD_ELEMS:])):
            bad = torch.nonzero(band.float() != self.sentinel)
            if bad.numel():
                pos = int(bad[0])
                off = pos - GUARD_ELEMS if side == "before" else pos
                return (f"oob_write: {self.name} (shape {self.shape}, dtype {tc.dtype_name(self.flat.dtype)}): "
                        f"{bad.numel()} sentinel element(s) changed {side} the buffer, first at element offset "
                        f"{off} {'before the start' if side == 'before' else 'past the end'} "
                        f"(value {float(band[pos])!r})")
        return None


def _rows_valid(case: Case) -> np.ndarray:
    """[B, Hq, Lq] bool: real query rows (SEMANTICS.md §7)."""
    valid = np.ones((case.B, case.Hq, case.Lq), dtype=bool)
    if case.seqlens_q is not None:
        for b, n in enumerate(case.seqlens_q):
            valid[b, :, int(n):] = False
    return valid


class _CudaAdapter(Adapter):
    """Shared forward/backward plumbing; subclasses name their launchers."""

    isolate: ClassVar[bool] = True
    #: one worker process for every adapter of the library (`running.worker.worker_key`), as one program loads it:
    #: six per run worker made 48 more CUDA contexts on the H200 beside 8 workers, and calls ran out of memory
    process_group: ClassVar[str | None] = "attn_kernels"
    fwd_launcher: ClassVar[str] = ""
    bwd_launcher: ClassVar[str | None] = None
    capabilities = Capabilities(
        dtypes=frozenset({"float16", "bfloat16"}),
        devices=frozenset({"cuda"}),
        head_dims=frozenset({64, 128, 256}),
        dv_ne_d=False,
        alignments=frozenset(ALIGNMENTS),
        window=True,
        softcap=True,
        gqa=True,
        varlen=True,
        custom_scale=True,
        layouts=frozenset(LAYOUTS),
        lse=True,
        backward=False,
        accepts_out=True,
        memory="linear",
    )

    # -- availability ---------------------------------------------------------------------------------
    def unavailable_reason(self, device: str) -> str | None:
        reason = tc.cuda_unavailable_reason(device, self.name, (8, 0), "sm_80 / sm_90a builds")
        if reason:
            return reason
        try:
            from attention_conformance.kernels import cuda_lib

            lib = cuda_lib.library()
        except Exception as e:  # LibraryUnavailable, or an import problem
            return f"CUDA kernel library unavailable: {e}"
        for name in (self.fwd_launcher, self.bwd_launcher):
            if name and getattr(lib, name, None) is None:
                return f"{cuda_lib.library_path()} does not export {name}"
        return None

    def version(self) -> str:
        try:
            from attention_conformance.kernels import cuda_lib

            return f"libattn_kernels ABI v{cuda_lib.ATTN_PARAMS_VERSION} ({cuda_lib.library_path()})"
        except Exception:
            return "unknown"

    # -- calls ------------------------------------------------------------------------------------------
    def _extra_fwd_kwargs(self, case: Case) -> dict:
        return {}

    def _materialize(self, inputs: CaseInputs, case: Case, device: str) -> tuple[tc.Materialized, dict, dict]:
        """(tensors for the kernel, extra `fwd_params` keywords, every tensor handed over by name).

        Dense layouts: `tc.materialize` as it is. Paged layouts (SEMANTICS.md §16): q contiguous, and K/V
        replaced by the page pools of ``inputs.paged`` plus the int32 block table (``block_table``,
        ``page_size``, ``seqlen_k`` keywords), named ``paged.*`` like `CaseInputs.arrays`.
        """
        page_size = page_size_of(case.layout)
        if page_size is None:
            m = tc.materialize(inputs, case, device)
            return m, {}, m.named()
        paged = inputs.paged
        if paged is None:
            raise ValueError(f"case {case.id}: layout {case.layout!r} is paged but CaseInputs.paged is None "
                             "(make_inputs builds it for paged layouts)")
        if int(paged["page_size"]) != page_size:
            raise ValueError(f"case {case.id}: CaseInputs.paged page_size={paged['page_size']} but layout "
                             f"{case.layout!r} means {page_size}")
        m = tc.materialize(inputs, case, device, layout="contiguous")
        table = np.ascontiguousarray(paged["block_table"], dtype=np.int32)
        k_pool = tc.to_torch(paged["k_pool"], m.q.dtype, device, name="paged.k_pool")
        v_pool = tc.to_torch(paged["v_pool"], m.q.dtype, device, name="paged.v_pool")
        bt = torch.from_numpy(table).to(device)
        m = dataclasses.replace(m, k=k_pool, v=v_pool)
        kw = dict(block_table=bt, page_size=page_size, seqlen_k=case.Lk)
        named = {"q": m.q, "paged.k_pool": k_pool, "paged.v_pool": v_pool, "paged.block_table": bt}
        return m, kw, named

    def _semantics(self, case: Case, device: str) -> dict:
        kw: dict[str, Any] = dict(scale=case.scale, causal=case.causal, alignment=case.alignment, window=case.window,
                                  softcap=case.softcap)
        for name in ("seqlens_q", "seqlens_k"):
            lens = getattr(case, name)
            if lens is not None:
                kw[name] = torch.tensor([int(x) for x in lens], dtype=torch.int32, device=device)
        return kw

    @staticmethod
    def _fp32(inputs: CaseInputs, case: Case, device: str, name: str, shape: tuple[int, ...]) -> Any:
        """``inputs.<name>`` (sinks / dlse) as a contiguous fp32 device tensor of ``shape``, or None when unset."""
        arr = getattr(inputs, name)
        if arr is None:
            return None
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.shape != shape:
            raise ValueError(f"case {case.id}: CaseInputs.{name} has shape {arr.shape}, expected {shape}")
        return torch.from_numpy(arr).to(device)

    def _sinks(self, inputs: CaseInputs, case: Case, device: str) -> Any:
        """The fp32 [Hq] sink tensor of a sink case (SEMANTICS.md §18), None otherwise."""
        if case.sinks is not None and inputs.sinks is None:
            raise ValueError(f"case {case.id}: case.sinks={case.sinks!r} but CaseInputs.sinks is None "
                             "(make_inputs builds it for sink cases)")
        return self._fp32(inputs, case, device, "sinks", (case.Hq,))

    def _forward_raw(self, m: tc.Materialized, case: Case, device: str, notes: list[str],
                     paged_kw: dict | None = None, sinks: Any = None):
        from attention_conformance.kernels import cuda_lib

        dtype = m.q.dtype
        o = GuardedBuffer("out", (case.B, case.Hq, case.Lq, case.dv), dtype, device)
        lse = GuardedBuffer("lse", (case.B, case.Hq, case.Lq), torch.float32, device)
        kw = self._semantics(case, device)
        kw.update(self._extra_fwd_kwargs(case))
        if sinks is not None:
            kw["sinks"] = sinks
        params = cuda_lib.fwd_params(m.q, m.k, m.v, o.view, lse.view, **kw, **(paged_kw or {}))
        if paged_kw:
            notes.append(f"paged K/V: page_size={paged_kw['page_size']}, pool {tuple(m.k.shape)}, "
                         f"block_table {tuple(paged_kw['block_table'].shape)}")
        if self.fwd_launcher == "attn_splitkv_fwd":
            notes.append(f"num_splits={cuda_lib.splitkv_num_splits(params)} (auto)")
        cuda_lib.call(self.fwd_launcher, params)
        torch.cuda.synchronize()
        oob = [r for r in (o.oob_report(), lse.oob_report()) if r]
        return o, lse, kw, oob

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        m, paged_kw, named = self._materialize(inputs, case, device)
        sinks = self._sinks(inputs, case, device)
        if sinks is not None:
            named["sinks"] = sinks
        before = tc.snapshot(named)
        notes: list[str] = []
        o, lse, _, oob = self._forward_raw(m, case, device, notes, paged_kw, sinks)
        notes += oob
        if oob:
            raise AssertionError("; ".join(oob))
        return self._forward_output(o, lse, case, notes, tc.changed(before, named))

    def _forward_output(self, o, lse, case: Case, notes: list[str], mutated) -> ForwardOutput:
        valid = _rows_valid(case)
        out = tc.to_numpy(o.view)
        lse_np = tc.to_numpy(lse.view)
        unwritten = int(np.isnan(out[valid]).sum() + np.isnan(lse_np[valid]).sum())
        out[~valid] = 0.0  # padded rows are never written (§7); the engine ignores them
        lse_np[~valid] = -np.inf
        return ForwardOutput(out=out, lse=lse_np, out_dtype=tc.dtype_name(o.view.dtype), unwritten=unwritten,
                             mutated_inputs=mutated, lse_convention="-inf", notes=notes)

    def backward(self, inputs: CaseInputs, case: Case, device: str) -> BackwardOutput:
        if self.bwd_launcher is None:
            raise NotImplementedError(f"{self.name} declares no backward")
        from attention_conformance.kernels import cuda_lib

        m = tc.materialize(inputs, case, device)
        sinks = self._sinks(inputs, case, device)
        dlse = self._fp32(inputs, case, device, "dlse", (case.B, case.Hq, case.Lq)) if case.lse_grad else None
        named = m.named()
        named.update({k: t for k, t in (("sinks", sinks), ("dlse", dlse)) if t is not None})
        before = tc.snapshot(named)
        notes: list[str] = []
        o, lse, kw, oob = self._forward_raw(m, case, device, notes, sinks=sinks)
        B, Hq, Hkv, Lq, Lk, d, dv = case.B, case.Hq, case.Hkv, case.Lq, case.Lk, case.d, case.dv
        dtype = m.q.dtype
        dq = GuardedBuffer("dq", (B, Hq, Lq, d), dtype, device)
        dk = GuardedBuffer("dk", (B, Hkv, Lk, d), dtype, device)
        dvb = GuardedBuffer("dv", (B, Hkv, Lk, dv), dtype, device)
        f32 = dict(dtype=torch.float32, device=device)
        scratch = dict(dq_accum=torch.zeros(B, Hq, Lq, d, **f32), d_rowsum=torch.zeros(B, Hq, Lq, **f32),
                       dk_accum=torch.zeros(B, Hq, Lk, d, **f32), dv_accum=torch.zeros(B, Hq, Lk, dv, **f32))
        ds = GuardedBuffer("dsinks", (Hq,), torch.float32, device) if sinks is not None else None
        params = cuda_lib.bwd_params(m.q, m.k, m.v, o.view, lse.view, m.dout, dq.view, dk.view, dvb.view, **scratch,
                                     dlse=dlse, dsinks=None if ds is None else ds.view, **kw)
        cuda_lib.call(self.bwd_launcher, params)
        torch.cuda.synchronize()
        bufs = (o, lse, dq, dk, dvb) + ((ds,) if ds is not None else ())
        oob += [r for r in (b.oob_report() for b in bufs) if r]
        notes += oob
        if oob:
            raise AssertionError("; ".join(oob))
        mutated = tc.changed(before, named)
        fo = self._forward_output(o, lse, case, [], mutated)
        valid = _rows_valid(case)
        dq_np = tc.to_numpy(dq.view)
        if np.isnan(dq_np[valid]).any() or np.isnan(tc.to_numpy(dk.view)).any() or np.isnan(
                tc.to_numpy(dvb.view)).any():
            notes.append("unwritten: NaN poison left in dq/dk/dv")
        dq_np[~valid] = 0.0
        dsinks = None
        if ds is not None:
            dsinks = tc.to_numpy(ds.view)
            if np.isnan(dsinks).any():
                notes.append("unwritten: NaN poison left in dsinks")
        return BackwardOutput(dq=dq_np, dk=tc.to_numpy(dk.view), dv=tc.to_numpy(dvb.view), out=fo, dsinks=dsinks,
                              mutated_inputs=mutated, notes=notes)


class CudaFA2(_CudaAdapter):
    name = "cuda-fa2"
    description = ("FlashAttention-2 CUDA kernels (kernels/cuda/fa2_fwd.cu, fa2_bwd.cu): split-Q, mma.sync "
                   "m16n8k16, cp.async K/V ping-pong, deferred normalisation")
    fwd_launcher = "attn_fa2_fwd"
    bwd_launcher = "attn_fa2_bwd"
    # sinks: the running max / sum start at (sink, 1) (kernels/cuda/include/softmax.cuh); backward: d sinks from
    # the preprocess, and the LSE cotangent enters as D - dlse (include/bwd_prepost.cuh), SEMANTICS.md §18.
    capabilities = dataclasses.replace(_CudaAdapter.capabilities, backward=True, sinks=True, lse_grad=True)


class CudaFA1(_CudaAdapter):
    name = "cuda-fa1"
    description = ("FlashAttention-1 CUDA kernels (kernels/cuda/fa1.cu): Algorithm 1 loop order, statistics in "
                   "global memory")
    fwd_launcher = "attn_fa1_fwd"
    bwd_launcher = "attn_fa1_bwd"
    capabilities = dataclasses.replace(_CudaAdapter.capabilities, backward=True)


class CudaSplitKV(_CudaAdapter):
    name = "cuda-splitkv"
    description = ("Split-KV (Flash-Decoding) CUDA forward (kernels/cuda/splitkv.cu): GQA group packed into M, "
                   "per-split fp32 partials (O_s, LSE_s) and a combine kernel; num_splits chosen automatically; "
                   "dense or paged K/V (block table, pages of 64/128/256 keys)")
    fwd_launcher = "attn_splitkv_fwd"
    bwd_launcher = None
    # Paged K/V: every page size of the catalog is a multiple of the kernel's key tile (64 for d = 64/128,
    # 32 for d = 256), which attn_splitkv_fwd requires (ATTN_ERR_UNSUPPORTED otherwise).
    # Sinks: the split partials are sink-free and the combine kernel adds the sink once (SEMANTICS.md §18).
    capabilities = dataclasses.replace(_CudaAdapter.capabilities, layouts=frozenset(LAYOUTS) | frozenset(PAGED_LAYOUTS),
                                       sinks=True)


#: The head dims the FA3 FP8 forward is built for (kernels/cuda/include/hopper/fp8_launch.cuh fp8_head_dims; dv = d).
#: 96 and 192 are the newest builds: a claim the H200 contradicts is withdrawn here, and nowhere else.
FA3_FP8_HEAD_DIMS = frozenset({64, 96, 128, 192, 256})
#: The head dims the FA3 forward is built for (kernels/cuda/include/hopper/fwd_launch.cuh fa3_fwd_head_dims,
#: schedules in fwd_defaults.cuh): d = dv in FA3_HEAD_DIMS, and the (d, dv) pairs with dv != d of FA3_DV_PAIRS. 96, 192
#: and (192, 128) are the newest builds: a claim the H200 contradicts is withdrawn here, and nowhere else.
FA3_HEAD_DIMS = frozenset({64, 96, 128, 192, 256})
FA3_DV_PAIRS = frozenset({(192, 128)})
#: ... and its backward (kernels/cuda/include/hopper/bwd_launch.cuh fa3_bwd_head_dims): d = dv in FA3_BWD_HEAD_DIMS, and
#: dv != d as the forward's FA3_DV_PAIRS (the one exclusion below declines both directions' other pairs; the backward
#: has a build for (192, 128), hopper/bwd_wide.cuh). All validated on the H200 (the wide builds 192, 256 and
#: (192, 128) on 2026-12-05: device tests, the gpu profile, the three sanitizers): a claim the H200 contradicts is
#: withdrawn here, and nowhere else.
FA3_BWD_HEAD_DIMS = frozenset({64, 96, 128, 192, 256})


class CudaFA3(_CudaAdapter):
    name = "cuda-fa3"
    description = ("FlashAttention-3 CUDA forward for Hopper (kernels/cuda/fa3_fwd.cu, sm_90a): TMA + mbarrier K/V "
                   "ring, wgmma (S from shared memory, P V with P in registers), producer warpgroup and two or "
                   "three consumer warpgroups (setmaxnreg), pingpong, intra-warpgroup overlap, persistent scheduler "
                   "at d = 64")
    fwd_launcher = "attn_fa3_fwd"
    bwd_launcher = "attn_fa3_bwd"
    # Forward: FA3_HEAD_DIMS, dv != d only as FA3_DV_PAIRS. Backward (kernels/cuda/fa3_bwd.cu): FA3_BWD_HEAD_DIMS and
    # the same FA3_DV_PAIRS (the instantiations of attn_fa3_bwd); the LSE cotangent enters as D - dlse in the shared
    # preprocess (include/bwd_prepost.cuh, SEMANTICS.md §13). Sinks stay unclaimed: the FA3 forward does not fold them
    # in.
    capabilities = dataclasses.replace(
        _CudaAdapter.capabilities, head_dims=FA3_HEAD_DIMS, dv_ne_d=True, backward=True, lse_grad=True,
        backward_head_dims=FA3_BWD_HEAD_DIMS,
        excludes=(Exclusion(f"dv != d: the FA3 forward and backward are built for (d, dv) in {sorted(FA3_DV_PAIRS)} "
                            "only",
                            lambda c: c.dv != c.d and (c.d, c.dv) not in FA3_DV_PAIRS),))
    # Every catalog layout is expressible as a TMA tensor map: head dims that are multiples of 32 make every stride of
    # contiguous / bshd views a multiple of 16 bytes, and kv_broadcast's stride-0 batch axis becomes an
    # extent-1 map dimension (kernels/cuda/include/hopper/tma_host.cuh). Strides TMA cannot express would be
    # answered ATTN_ERR_UNSUPPORTED naming the argument; no catalog case produces one.

    def unavailable_reason(self, device: str) -> str | None:
        reason = super().unavailable_reason(device)
        if reason:
            return reason
        cap = tc.cuda_capability()
        if cap is None or cap[0] != 9:
            return f"{self.name} is built for sm_90a (Hopper, compute capability 9.0) only; device has {cap}"
        return None


class CudaFA3FP8(CudaFA3):
    name = "cuda-fa3-fp8"
    description = ("FlashAttention-3 FP8 forward for Hopper (kernels/cuda/fa3_fp8_fwd.cu, sm_90a): e4m3 / e5m2 "
                   "wgmma k32, V transposed in shared memory by the producer warpgroup, P rounded to FP8 with the "
                   "max offset, descales per tensor, per (batch, kv head) or per 128 x 128 tile, bf16 output")
    fwd_launcher = "attn_fa3_fp8_fwd"
    bwd_launcher = None  # a forward kernel (FP8 training backward is not in the contract)
    #: per-tile descale blocks the kernel applies (SEMANTICS.md §10): its 128-row query tiles and 128-key blocks
    #: (one key tile at d = 64 / 128, two of 64 keys at d = 256)
    TILE = 128
    # FP8 only (no fp16 / bf16 inputs), head dims FA3_FP8_HEAD_DIMS (the instantiations of fa3_fp8_fwd.cu), dv = d,
    # per-tile descales of TILE x TILE only; causal both alignments, windows, softcap, GQA, varlen and every dense
    # layout go through the FP16/BF16 kernel's plumbing (mask.cuh, plan.cuh, tma_host.cuh). Incoherent processing (§11)
    # happens before the kernel: it gets rotated codes.
    capabilities = dataclasses.replace(_CudaAdapter.capabilities, dtypes=frozenset(),
                                       head_dims=FA3_FP8_HEAD_DIMS,
                                       fp8=frozenset({"per_tensor", "per_head", "per_tile"}),
                                       fp8_formats=frozenset({"e4m3fn", "e5m2"}), fp8_tiles=frozenset({(TILE, TILE)}))
    #: how V reaches the kernel (cuda_lib.FP8_V_LAYOUT_CODES): its codes as rows, transposed in shared memory
    v_layout = "rows"

    def forward(self, inputs: CaseInputs, case: Case, device: str) -> ForwardOutput:
        from attention_conformance.kernels import cuda_lib

        qi = inputs.fp8_codes(case.fp8)
        dtype = torch.float8_e4m3fn if qi["format"] == "e4m3fn" else torch.float8_e5m2
        m = tc.materialize(CaseInputs(q=qi["q8"], k=qi["k8"], v=qi["v8"]), case, device, dtype=dtype)
        descales = {name: torch.from_numpy(np.array(qi[name], dtype=np.float32)).to(device)
                    for name in ("q_descale", "k_descale", "v_descale")}
        named = {**m.named(), **descales}
        before = tc.snapshot(named)
        o = GuardedBuffer("out", (case.B, case.Hq, case.Lq, case.dv), torch.bfloat16, device)
        lse = GuardedBuffer("lse", (case.B, case.Hq, case.Lq), torch.float32, device)
        sem = self._semantics(case, device)
        v = cuda_lib.pack_vt(m.v, seqlens_k=sem.get("seqlens_k")) if self.v_layout == "kmajor" else m.v
        params = cuda_lib.fp8_fwd_params(m.q, m.k, v, o.view, lse.view, descales["q_descale"],
                                         descales["k_descale"], descales["v_descale"], format=qi["format"],
                                         granularity=qi["granularity"], tile_q=int(qi["tile_q"]),
                                         tile_k=int(qi["tile_k"]), v_layout=self.v_layout, **sem)
        cuda_lib.call(self.fwd_launcher, params)
        torch.cuda.synchronize()
        notes = [r for r in (o.oob_report(), lse.oob_report()) if r]
        if notes:
            raise AssertionError("; ".join(notes))
        return self._forward_output(o, lse, case, notes, tc.changed(before, named))


class CudaFA3FP8KMajor(CudaFA3FP8):
    name = "cuda-fa3-fp8-vt"
    description = ("FlashAttention-3 FP8 forward for Hopper (kernels/cuda/fa3_fp8_fwd.cu, sm_90a) with V delivered "
                   "k-major: attn_fp8_pack_vt writes V's codes transposed (keys contiguous, in the P fragments' key "
                   "order, zero past each sequence), so the kernel loads Vt with TMA and skips its in-kernel transpose")
    v_layout = "kmajor"
