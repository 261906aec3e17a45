"""Benchmark candidates of the serving and diffusion stacks' attention (issue 42, item 3): FlashInfer's batch prefill
and paged decode, xformers' ``memory_efficient_attention``, each set up once (inputs re-laid out, plans made,
workspaces allocated) so that a timed call is one call of the library's own entry point, as a server makes it.

Each ``*_fn`` takes the benchmarks' tensors ([B, H, N, d], torch's SDPA layout) and returns ``(callable, note)``, or
``(None, reason)`` where the library does not import or refuses the shape. The note names what was called (and, for
xformers, the operator its dispatcher picked). Used by tools/fa3_check_bench.py (forward rows) and
tools/cuda_fwd_check_bench.py (the decode row); on the GPU host the libraries come from tools/device/fi_xf.sh
(its ``PYTHONPATH``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["WORKSPACE_BYTES", "DECODE_PAGE_SIZE", "flashinfer_prefill_fn", "flashinfer_paged_decode_fn",
           "xformers_fn", "paged_layout"]

#: FlashInfer's float workspace for the batch wrappers (the size its documentation recommends)
WORKSPACE_BYTES = 128 * 1024 * 1024
#: keys per page of the decode row's paged cache (vLLM's default block size)
DECODE_PAGE_SIZE = 16

Fn = tuple[Callable[[], object] | None, str]


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


def _settle(torch, t) -> None:
    """Wait for the set-up call's kernels: a fault they raise (an illegal address is reported by whichever CUDA call
    comes next) is then this library's decline, not the next candidate's."""
    if t.is_cuda:
        torch.cuda.synchronize(t.device)


def _unshipped(flashinfer, d: int, dv: int) -> str | None:
    """Why FlashInfer's row is left out at head dims (d, dv) its release does not build (`flashinfer.aot`'s default
    config, as the `flashinfer` adapter reads it), or None: such a shape would be JIT-compiled for the benchmark
    alone, outside what the conformance run judged (on the H100 the d = 96 row ended in an illegal address, raised by
    FlashInfer's or xformers' set-up: that run had no `_settle`)."""
    from attention_conformance.adapters.flashinfer import library_support

    pairs = library_support(flashinfer).head_dim_pairs
    if not pairs or (d, dv) in pairs:
        return None
    return (f"FlashInfer {getattr(flashinfer, '__version__', '?')} builds head dims {sorted(pairs)} "
            f"(flashinfer.aot.get_default_config()), not ({d}, {dv})")


def _indptr(torch, B: int, n: int, device) -> Any:
    return torch.arange(B + 1, dtype=torch.int32, device=device) * n


def flashinfer_prefill_fn(q, k, v, causal: bool) -> Fn:
    """``BatchPrefillWithRaggedKVCacheWrapper``: the B sequences packed to [B*N, H, d] (NHD), planned once."""
    try:
        import flashinfer
        import torch
    except Exception as exc:  # not installed here
        return None, f"flashinfer does not import ({_first_line(exc)})"
    B, Hq, N, d = q.shape
    Hkv = k.shape[1]
    if (why := _unshipped(flashinfer, d, v.shape[3])) is not None:
        return None, why
    try:
        qp, kp, vp = (x.transpose(1, 2).reshape(B * x.shape[2], x.shape[1], x.shape[3]).contiguous()
                      for x in (q, k, v))
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, kv_layout="NHD")
        w.plan(_indptr(torch, B, N, q.device), _indptr(torch, B, k.shape[2], q.device), Hq, Hkv, d,
               head_dim_vo=v.shape[3], causal=causal, q_data_type=q.dtype, kv_data_type=k.dtype)
        w.run(qp, kp, vp)  # builds or loads the module before any timing
        _settle(torch, q)
    except Exception as exc:
        return None, f"BatchPrefillWithRaggedKVCacheWrapper: {_first_line(exc)}"
    return (lambda: w.run(qp, kp, vp)), "flashinfer.BatchPrefillWithRaggedKVCacheWrapper (NHD, planned once)"


def paged_layout(torch, k, v, page_size: int) -> dict[str, Any]:
    """K and V of [B, Hkv, L, d] as FlashInfer's NHD page pool [pages, page_size, Hkv, d], every sequence's pages
    in order, with the plan's ``kv_indptr`` / ``kv_indices`` / ``kv_last_page_len``. L must be a multiple of
    `page_size`."""
    B, Hkv, L, d = k.shape
    if L % page_size:
        raise ValueError(f"paged_layout: L={L} is not a multiple of page_size={page_size}")
    pages = L // page_size

    def pool(x):
        return x.transpose(1, 2).reshape(B * pages, page_size, Hkv, x.shape[3]).contiguous()

    return dict(k_cache=pool(k), v_cache=pool(v), kv_indptr=_indptr(torch, B, pages, k.device),
                kv_indices=torch.arange(B * pages, dtype=torch.int32, device=k.device),
                kv_last_page_len=torch.full((B,), page_size, dtype=torch.int32, device=k.device))


def flashinfer_paged_decode_fn(q, k, v, page_size: int = DECODE_PAGE_SIZE) -> Fn:
    """``BatchDecodeWithPagedKVCacheWrapper`` on one query row per sequence (q [B, Hq, 1, d]) over K/V laid out as a
    page pool (`paged_layout`), planned once."""
    try:
        import flashinfer
        import torch
    except Exception as exc:
        return None, f"flashinfer does not import ({_first_line(exc)})"
    B, Hq, _, d = q.shape
    if (why := _unshipped(flashinfer, d, v.shape[3])) is not None:
        return None, why
    try:
        p = paged_layout(torch, k, v, page_size)
        q1 = q[:, :, 0].contiguous()
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout="NHD")
        w.plan(p["kv_indptr"], p["kv_indices"], p["kv_last_page_len"], Hq, k.shape[1], d, page_size,
               q_data_type=q.dtype, kv_data_type=k.dtype)
        kv = (p["k_cache"], p["v_cache"])
        w.run(q1, kv)
        _settle(torch, q)
    except Exception as exc:
        return None, f"BatchDecodeWithPagedKVCacheWrapper: {_first_line(exc)}"
    return (lambda: w.run(q1, kv)), (f"flashinfer.BatchDecodeWithPagedKVCacheWrapper (NHD, page size {page_size}, "
                                     "planned once)")


def xformers_fn(q, k, v, causal: bool) -> Fn:
    """``xformers.ops.memory_efficient_attention`` on BMHK copies, ``LowerTriangularMask`` when causal; the note
    names the forward operator xformers' dispatcher picks for these inputs."""
    try:
        import torch

        from attention_conformance.adapters.xformers import importing_xformers

        with importing_xformers():  # beside flash-attn-4, as the adapter imports it
            from xformers.ops import fmha
    except Exception as exc:
        return None, f"xformers does not import ({_first_line(exc)})"
    qb, kb, vb = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    if k.shape[1] != q.shape[1]:  # GQA: xformers takes [B, M, G, H, K] or expanded heads; the rows here are MHA
        return None, "xformers rows are MHA (Hq == Hkv)"
    bias = fmha.attn_bias.LowerTriangularMask() if causal else None
    try:
        picked = fmha.dispatch._dispatch_fw(fmha.Inputs(query=qb, key=kb, value=vb, attn_bias=bias), False)
        op = getattr(picked, "NAME", type(picked).__name__)
    except Exception as exc:  # the dispatcher's internals moved: the row still runs, unnamed
        op = f"operator not read ({_first_line(exc)})"
    try:
        fmha.memory_efficient_attention(qb, kb, vb, attn_bias=bias)
        _settle(torch, q)
    except Exception as exc:
        return None, f"memory_efficient_attention: {_first_line(exc)}"
    return (lambda: fmha.memory_efficient_attention(qb, kb, vb, attn_bias=bias)), (
        f"xformers.ops.memory_efficient_attention (BMHK{', LowerTriangularMask' if causal else ''}; dispatched to "
        f"{op})")
