"""A small case set over every launcher in libattn_kernels.so, for compute-sanitizer.

``compute-sanitizer --tool memcheck --error-exitcode 1 python -m attention_conformance.kernels.cuda.sanitize_cases
[LAUNCHER ...]``
(launcher names restrict the run to their cases; and ``--tool racecheck``; ``tox -e sanitize`` runs both).
Small shapes that still cover tail tiles, causal diagonals in both alignments, a window, GQA, varlen with an
empty sequence, softcap, split-KV with several splits and an empty split, the FA3 forward and backward (Hopper
only), paged K/V (a shuffled block table over a pool with NaN decoy pages, varlen with a short and an empty
sequence), the FA3 FP8 forward (e4m3 codes, unit descales of each granularity's shape), and the backward
launchers when the library exports them. Inputs are random (never zeros); each launcher's status is checked,
and the outputs must be finite where the semantics say so (a crash or a sanitizer report is the real signal);
a paged case must also equal the same launcher on the dense K/V bitwise. Exit code 0 = clean.

`run_cases` takes the function that runs a launcher on its filled params (default `cuda_lib.call`), so the lab's
variant builds go through the same cases (kernels/cuda/lab/sanitize.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["CASES", "Runner", "main", "paged_kv", "run_cases"]

#: runs launcher `name` on its filled params struct (cuda_lib.call, or a lab variant's call)
Runner = Callable[[str, Any], None]

# (launcher, shape and semantics keywords)
CASES: list[tuple[str, dict]] = [
    ("attn_fa2_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa2_fwd", dict(B=1, Hq=1, Hkv=1, Lq=129, Lk=65, d=128, causal=True, alignment="top_left")),
    ("attn_fa2_fwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=200, d=256, window=(20, 5), varlen=True)),
    ("attn_fa2_fwd", dict(B=1, Hq=2, Hkv=1, Lq=64, Lk=64, d=128, softcap=4.0, dtype="float16")),
    ("attn_fa2_fwd", dict(B=1, Hq=2, Hkv=2, Lq=200, Lk=520, d=128)),  # unmasked tiles, K/V ping-pong
    ("attn_splitkv_fwd", dict(B=1, Hq=8, Hkv=2, Lq=1, Lk=1000, d=128, num_splits=5)),
    ("attn_splitkv_fwd", dict(B=2, Hq=4, Hkv=1, Lq=3, Lk=70, d=64, causal=True, num_splits=4, varlen=True)),
    ("attn_splitkv_fwd", dict(B=1, Hq=2, Hkv=2, Lq=2, Lk=300, d=256, num_splits=0)),
    # paged K/V: shuffled table, NaN decoy pages / slots / table entries, lengths full, short, empty
    ("attn_splitkv_fwd", dict(B=3, Hq=8, Hkv=2, Lq=2, Lk=300, d=128, num_splits=3, page_size=64,
                              seqlens_k=[300, 37, 0], causal=True)),
    ("attn_fa1_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa1_fwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=100, d=128, window=(20, 5), varlen=True)),
    ("attn_fa1_bwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa2_bwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa2_bwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=100, d=128, window=(20, 5), varlen=True)),
    ("attn_fa2_bwd", dict(B=1, Hq=2, Hkv=2, Lq=200, Lk=300, d=128)),  # several Q tiles, key-tile tail
    ("attn_fa2_bwd", dict(B=1, Hq=2, Hkv=1, Lq=96, Lk=130, d=256, causal=True)),
    # FA3 forward (sm_90a only: skipped elsewhere): TMA ring, wgmma, producer/consumer mbarriers, pingpong
    ("attn_fa3_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa3_fwd", dict(B=1, Hq=1, Hkv=1, Lq=129, Lk=65, d=128, causal=True, alignment="top_left")),
    ("attn_fa3_fwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=200, d=256, window=(20, 5), varlen=True)),
    ("attn_fa3_fwd", dict(B=1, Hq=2, Hkv=1, Lq=64, Lk=64, d=128, softcap=4.0, dtype="float16")),
    ("attn_fa3_fwd", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=520, d=128)),  # unmasked tiles, ring wrap-around
    ("attn_fa3_fwd", dict(B=1, Hq=140, Hkv=20, Lq=64, Lk=300, d=64)),  # > #SMs tiles: persistent loop, GQA
    ("attn_fa3_fwd", dict(B=1, Hq=3, Hkv=1, Lq=300, Lk=200, d=256)),  # cluster2: pairs, left-over tiles, an idle CTA
    # ... d = 96 (a zero-filled half block), 192 (three blocks, 112-key tiles) and (192, 128) (K and V tiles of
    # different sizes)
    ("attn_fa3_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=96, causal=True)),
    ("attn_fa3_fwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=200, d=96, window=(20, 5), varlen=True, dtype="float16")),
    ("attn_fa3_fwd", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=520, d=192)),  # unmasked tiles, ring wrap-around
    ("attn_fa3_fwd", dict(B=2, Hq=2, Hkv=1, Lq=129, Lk=200, d=192, causal=True, alignment="top_left", varlen=True)),
    ("attn_fa3_fwd", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=520, d=192, dv=128, softcap=4.0)),
    ("attn_fa3_fwd", dict(B=2, Hq=4, Hkv=2, Lq=70, Lk=131, d=192, dv=128, causal=True, varlen=True)),
    # FA3 FP8 forward (sm_90a only): TMA of codes, V transpose by the producer warps, FP8 wgmma
    ("attn_fa3_fp8_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True, fp8="per_tensor")),
    ("attn_fa3_fp8_fwd", dict(B=2, Hq=2, Hkv=2, Lq=129, Lk=300, d=128, varlen=True, fp8="per_tile")),
    ("attn_fa3_fp8_fwd", dict(B=1, Hq=4, Hkv=2, Lq=300, Lk=520, d=128, alignment="top_left", causal=True,
                              fp8="per_head")),
    ("attn_fa3_fp8_fwd", dict(B=2, Hq=2, Hkv=1, Lq=150, Lk=200, d=256, varlen=True, fp8="per_tile")),  # 64-key tiles
    # ... with V packed k-major first (attn_fp8_pack_vt; the producer TMA-loads Vt, no transposing warps)
    ("attn_fa3_fp8_fwd", dict(B=2, Hq=2, Hkv=2, Lq=129, Lk=300, d=128, varlen=True, fp8="per_tile", vt=True)),
    ("attn_fa3_fp8_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True, fp8="per_tensor", vt=True)),
    ("attn_fa3_fp8_fwd", dict(B=2, Hq=2, Hkv=1, Lq=150, Lk=200, d=256, varlen=True, fp8="per_head", vt=True)),
    ("attn_fa3_fp8_fwd", dict(B=1, Hq=140, Hkv=20, Lq=200, Lk=300, d=128, causal=True, fp8="per_head", vt=True)),
    # ... d = 96 and 192 (the tiles of d = 128 and 256, padding columns zero-filled by TMA), V as rows and k-major
    ("attn_fa3_fp8_fwd", dict(B=2, Hq=2, Hkv=1, Lq=129, Lk=300, d=96, varlen=True, causal=True, fp8="per_tile")),
    ("attn_fa3_fp8_fwd", dict(B=1, Hq=4, Hkv=2, Lq=300, Lk=520, d=96, fp8="per_head", vt=True)),
    ("attn_fa3_fp8_fwd", dict(B=2, Hq=2, Hkv=1, Lq=150, Lk=200, d=192, varlen=True, fp8="per_tile")),  # 64-key tiles
    ("attn_fa3_fp8_fwd", dict(B=1, Hq=4, Hkv=2, Lq=300, Lk=520, d=192, causal=True, alignment="top_left",
                              fp8="per_tensor", vt=True)),
    # FA3 backward (sm_90a only): Q / dO ring, dS^T in shared memory (double-buffered where dQ is split), zeroed
    # tails; d = 64 streams 128-row query tiles with dQ split by rows (a tile's second half past Lq: 70, 300)
    ("attn_fa3_bwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa3_bwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=200, d=128, window=(20, 5), varlen=True)),
    ("attn_fa3_bwd_deterministic", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=270, d=128, causal=True)),
    ("attn_fa3_bwd_deterministic", dict(B=2, Hq=2, Hkv=1, Lq=300, Lk=200, d=64, varlen=True)),
    # d = 96: d = 128's tiles with zero-filled padding columns, consumer 1's dQ block half past the tensor
    ("attn_fa3_bwd", dict(B=2, Hq=2, Hkv=1, Lq=70, Lk=131, d=96, causal=True, varlen=True)),
    ("attn_fa3_bwd_deterministic", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=270, d=96, window=(20, 5))),
    # the wide builds (hopper/bwd_wide.cuh: 64-key CTAs, P^T / dS^T exchanged through shared memory, dK / dV held by
    # one consumer each): d = 256 (dQ by atomics), 192 and (192, 128) (dQ blocks through TMA reduce-add, d = 192's
    # third block alternating between the consumers), each build non-deterministic and deterministic
    ("attn_fa3_bwd", dict(B=2, Hq=2, Hkv=1, Lq=70, Lk=131, d=256, causal=True, varlen=True)),
    ("attn_fa3_bwd_deterministic", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=270, d=256, window=(20, 5))),
    ("attn_fa3_bwd", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=270, d=192, causal=True, alignment="top_left")),
    ("attn_fa3_bwd_deterministic", dict(B=2, Hq=2, Hkv=1, Lq=129, Lk=200, d=192, varlen=True)),
    ("attn_fa3_bwd", dict(B=2, Hq=4, Hkv=2, Lq=70, Lk=131, d=192, dv=128, causal=True, varlen=True)),
    ("attn_fa3_bwd_deterministic", dict(B=1, Hq=2, Hkv=2, Lq=300, Lk=520, d=192, dv=128, softcap=4.0)),
]


def paged_kv(k: Any, v: Any, page_size: int, lens: list[int], *, seed: int = 0, decoys: int = 2):
    """Page pools and a shuffled block table holding dense k, v [B, Hkv, Lk, d] (attn_params.h v3).

    Returns (k_pool, v_pool, block_table): pools [num_pages, Hkv, page_size, d] on k's device, block_table
    int32 [B, ceil(Lk / page_size)]. Batch b owns ceil(lens[b] / page_size) pages at shuffled pool slots
    (never all at their dense position); NaN fills the `decoys` extra pages, every slot at or past
    lens[b], and the table entries past a sequence's pages point at decoy pages: a kernel that reads a
    table entry, page or slot it should not gets NaN (flash-attention #2709).
    """
    import torch

    B, Hkv, Lk, d = k.shape
    pages_per_seq = max(1, math.ceil(Lk / page_size))
    need = [math.ceil(int(n) / page_size) for n in lens]
    n_real = sum(need)
    num_pages = n_real + max(1, decoys)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_pages, generator=g)
    if n_real > 1 and torch.equal(perm[:n_real], torch.arange(n_real)):
        perm = torch.roll(perm, 1)
    k_pool = torch.full((num_pages, Hkv, page_size, d), float("nan"), dtype=k.dtype, device=k.device)
    v_pool = torch.full((num_pages, Hkv, page_size, v.shape[-1]), float("nan"), dtype=v.dtype, device=v.device)
    decoy = perm[n_real:]
    pick = torch.randint(0, decoy.numel(), (B, pages_per_seq), generator=g)
    table = decoy[pick].to(torch.int32)  # every entry starts at a decoy page
    i = 0
    for b in range(B):
        for pg in range(need[b]):
            slot = int(perm[i])
            i += 1
            j0, j1 = pg * page_size, min((pg + 1) * page_size, int(lens[b]))
            k_pool[slot, :, : j1 - j0] = k[b, :, j0:j1]
            v_pool[slot, :, : j1 - j0] = v[b, :, j0:j1]
            table[b, pg] = slot
    return k_pool, v_pool, table.to(k.device)


def _valid_rows(B: int, Lq: int, seqlens_q: Any, dev: str) -> Any:
    import torch

    if seqlens_q is None:
        return torch.ones(B, 1, Lq, 1, dtype=torch.bool, device=dev)
    return torch.arange(Lq, device=dev)[None, None, :, None] < seqlens_q[:, None, None, None]


def _run(launcher: str, spec: dict, runner: Runner) -> str:
    import torch

    from attention_conformance.kernels import cuda_lib

    spec = dict(spec)
    B, Hq, Hkv, Lq, Lk, d = (spec.pop(n) for n in ("B", "Hq", "Hkv", "Lq", "Lk", "d"))
    d_v = spec.pop("dv", d)  # the head dim of V and O
    dtype = getattr(torch, spec.pop("dtype", "bfloat16"))
    varlen = spec.pop("varlen", False)
    num_splits = spec.pop("num_splits", None)
    page_size = spec.pop("page_size", None)
    lens_k = spec.pop("seqlens_k", None)
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, Hq, Lq, d, device=dev, generator=g).to(dtype)
    k = torch.randn(B, Hkv, Lk, d, device=dev, generator=g).to(dtype)
    v = torch.randn(B, Hkv, Lk, d_v, device=dev, generator=g).to(dtype)
    o = torch.full((B, Hq, Lq, d_v), float("nan"), device=dev, dtype=dtype)
    lse = torch.full((B, Hq, Lq), float("nan"), device=dev)
    kw = dict(spec)
    if varlen:
        kw["seqlens_q"] = torch.tensor([Lq] + [max(0, Lq // 2 - 3)] * (B - 1), device=dev, dtype=torch.int32)
        kw["seqlens_k"] = torch.tensor([Lk] + [0] * (B - 1), device=dev, dtype=torch.int32)
    if lens_k is not None:
        kw["seqlens_k"] = torch.tensor(lens_k, device=dev, dtype=torch.int32)
    if num_splits is not None:
        kw["num_splits"] = num_splits
    fp8 = kw.pop("fp8", None)
    if fp8 is not None:
        return _run_fp8(launcher, q, k, v, o, lse, kw, fp8, runner, kw.pop("vt", False))
    if page_size is not None:
        return _run_paged(launcher, q, k, v, kw, page_size, lens_k if lens_k is not None else [Lk] * B, runner)
    if "_bwd" in launcher:  # attn_*_bwd and attn_fa3_bwd_deterministic
        # forward through FA2 first (for O and LSE; through FA3 at the head dims FA2 has no build for), then the
        # backward under test
        p = cuda_lib.fwd_params(q, k, v, o, lse, **kw)
        cuda_lib.call("attn_fa2_fwd" if d in (64, 128, 256) and d_v == d else "attn_fa3_fwd", p)
        dout = torch.randn(B, Hq, Lq, d_v, device=dev, generator=g).to(dtype)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        scratch = dict(
            dq_accum=torch.zeros(B, Hq, Lq, d, device=dev),
            d_rowsum=torch.zeros(B, Hq, Lq, device=dev),
            dk_accum=torch.zeros(B, Hq, Lk, d, device=dev),
            dv_accum=torch.zeros(B, Hq, Lk, d_v, device=dev),
        )
        bp = cuda_lib.bwd_params(q, k, v, o, lse, dout, dq, dk, dv, **scratch, **kw)
        runner(launcher, bp)
        outputs = {"dq": dq, "dk": dk, "dv": dv}  # padded varlen rows are written as zeros
    else:
        runner(launcher, cuda_lib.fwd_params(q, k, v, o, lse, **kw))
        # rows past seqlens_q[b] stay unwritten (the NaN poison), by contract
        rows = _valid_rows(B, Lq, kw.get("seqlens_q"), dev)
        outputs = {"o (valid rows)": torch.where(rows, o, 0)}
    torch.cuda.synchronize()
    for name, t in outputs.items():
        bad = int((~torch.isfinite(t.float())).sum())
        if bad:
            raise RuntimeError(f"{name}: {bad} non-finite value(s) of shape {list(t.shape)}")
    dims = f"d{d}" if d_v == d else f"d{d}/{d_v}"
    return f"{launcher} B{B} H{Hq}/{Hkv} q{Lq} k{Lk} {dims} {kw.get('causal', '')} ok"


def _run_fp8(launcher: str, q: Any, k: Any, v: Any, o: Any, lse: Any, kw: dict, granularity: str, runner: Runner,
             vt: bool = False) -> str:
    """One FP8 case: e4m3 codes of q, k, v, unit descales of the granularity's shape (attn_params.h); ``vt``: V
    packed k-major by attn_fp8_pack_vt (v_layout ATTN_FP8_V_KMAJOR)."""
    import torch

    from attention_conformance.kernels import cuda_lib

    B, Hq, Lq, _ = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    shapes = {"per_tensor": [()] * 3, "per_head": [(B, Hkv)] * 3,
              "per_tile": [(B, Hq, -(-Lq // 128)), (B, Hkv, -(-Lk // 128)), (B, Hkv, -(-Lk // 128))]}[granularity]
    ds = [torch.ones(s, device=q.device) for s in shapes]
    q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    o = o.to(torch.bfloat16)
    if vt:
        v8 = cuda_lib.pack_vt(v8, seqlens_k=kw.get("seqlens_k"))
    runner(launcher, cuda_lib.fp8_fwd_params(q8, k8, v8, o, lse, *ds, format="e4m3fn", granularity=granularity,
                                             v_layout="kmajor" if vt else "rows", **kw))
    torch.cuda.synchronize()
    rows = _valid_rows(B, Lq, kw.get("seqlens_q"), q.device)
    bad = int((~torch.isfinite(torch.where(rows, o, 0).float())).sum())
    if bad:
        raise RuntimeError(f"o (valid rows): {bad} non-finite value(s) of shape {list(o.shape)}")
    return f"{launcher} {granularity}{' vt' if vt else ''} B{B} H{Hq}/{Hkv} q{Lq} k{Lk} d{q.shape[-1]} ok"


def _run_paged(launcher: str, q: Any, k: Any, v: Any, kw: dict, page_size: int, lens: list[int],
               runner: Runner) -> str:
    """One paged case: the launcher on a shuffled, NaN-poisoned pool must equal it on the dense K/V."""
    import torch

    from attention_conformance.kernels import cuda_lib

    B, Hq, Lq, _ = q.shape
    Lk = k.shape[2]
    k_pool, v_pool, table = paged_kv(k, v, page_size, lens)
    results = []
    for pk, pv, extra in ((k, v, {}), (k_pool, v_pool, dict(block_table=table, page_size=page_size, seqlen_k=Lk))):
        o = torch.full_like(q, float("nan"))
        lse = torch.full((B, Hq, Lq), float("nan"), device=q.device)
        runner(launcher, cuda_lib.fwd_params(q, pk, pv, o, lse, **kw, **extra))
        results.append((o, lse))
    torch.cuda.synchronize()
    rows = _valid_rows(B, Lq, kw.get("seqlens_q"), q.device)
    (o_d, lse_d), (o_p, lse_p) = results
    o_d, o_p = torch.where(rows, o_d, 0), torch.where(rows, o_p, 0)
    lse_d, lse_p = torch.where(rows[..., 0], lse_d, 0), torch.where(rows[..., 0], lse_p, 0)
    bad = int((~torch.isfinite(o_p.float())).sum())
    if bad:
        raise RuntimeError(f"paged o (valid rows): {bad} non-finite value(s) of shape {list(o_p.shape)} "
                           f"(page_size={page_size}, lens={lens}): a poisoned page, slot or table entry was read")
    if not (torch.equal(o_d, o_p) and torch.equal(lse_d, lse_p)):
        diff = (o_d.float() - o_p.float()).abs().max().item()
        raise RuntimeError(f"paged vs dense K/V differ: max |o| difference {diff} (page_size={page_size}, "
                           f"lens={lens}); the same kernel should agree bitwise")
    return f"{launcher} paged{page_size} B{B} H{Hq}/{k.shape[1]} q{Lq} k{Lk} lens {lens} ok (== dense)"


def run_cases(cases: list[tuple[str, dict]], runner: Runner | None = None, declines_skip: bool = False) -> int:
    """Run every case of ``cases`` through ``runner`` (default `cuda_lib.call`); print one line each and the count.
    A launcher's ATTN_ERR_UNSUPPORTED is a failure, or with ``declines_skip`` (a lab variant that has no build for a
    case) a skip with its reason. Returns the number of failures; -1 without torch or a CUDA device."""
    try:
        import torch
    except ImportError:
        print("sanitize_cases: torch is not installed", file=sys.stderr)
        return -1
    from attention_conformance.kernels import cuda_lib

    if not torch.cuda.is_available():
        print("sanitize_cases: no CUDA device", file=sys.stderr)
        return -1
    runner = runner or cuda_lib.call
    lib = cuda_lib.library()
    failures = 0
    ran = 0
    for launcher, spec in cases:
        ran += 1
        if getattr(lib, launcher, None) is None:
            print(f"SKIP {launcher}: not exported by {cuda_lib.library_path()}")
            continue
        cap = torch.cuda.get_device_capability()
        if launcher.startswith("attn_fa3") and cap[0] != 9:
            print(f"SKIP {launcher}: sm_90a kernel, device has compute capability {cap}")
            continue
        try:
            print(_run(launcher, spec, runner), flush=True)
        except cuda_lib.KernelUnsupported as e:
            if not declines_skip:
                failures += 1
                print(f"FAIL {launcher} {spec}: {e}", flush=True)
            else:
                print(f"SKIP {launcher} {spec}: {e.message}", flush=True)
        except Exception as e:  # a kernel error is a failure of the set
            failures += 1
            print(f"FAIL {launcher} {spec}: {e}", flush=True)
    print(f"sanitize_cases: {ran} of {len(CASES)} cases run, {failures} failures")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.kernels.cuda.sanitize_cases")
    ap.add_argument("launchers", nargs="*", help="run only these launchers' cases")
    args = ap.parse_args(argv)
    failures = run_cases([c for c in CASES if not args.launchers or c[0] in args.launchers])
    return 2 if failures < 0 else 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
