"""Correctness check and benchmark of the FA3 backward (kernels/cuda/fa3_bwd.cu, sm_90a).

Correctness (`check_case`): random inputs in the case's dtype; O and LSE from ``attn_fa3_fwd``; dq, dk, dv from
the backward launcher under test and from ``attn_fa2_bwd`` on the same inputs, O and LSE; the FP64 oracle
(`oracles.attention_backward`, SEMANTICS.md §13) on the same (rounded) inputs. A case passes when every
gradient is finite and its max abs error against the oracle is at most ``2 * (FA2's error) + 2e-3 * max(1,
max |oracle|)``, and rows with no visible key have dq exactly 0 (§8). ``nan_padding`` fills the varlen padding
(rows past the real lengths, §7) of q, k, v and dout with NaN, which must not reach any gradient.
`determinism_case` runs ``attn_fa3_bwd_deterministic`` twice and compares the bits.

Benchmark (`bench_rows`): B=4, H=16, N=8192 bf16 by default, TFLOPs/s of the backward alone (2.5x the
forward's 4 B H N^2 d) and of forward + backward (3.5x), halved for causal, for FA3 (attn_fa3_fwd + attn_fa3_bwd,
the deterministic build and the other overlap build, `overlap_build`), our FA2 (attn_fa2_fwd + attn_fa2_bwd),
torch SDPA's flash and cuDNN backends (autograd on their own forward); every row's candidates timed round-robin
(`time_round_robin`).

Run: ``python -m attention_conformance.reports.benchmarks.fa3_bwd_check_bench [--no-bench] --out DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

from attention_conformance.kernels import cuda_bwd_lib, cuda_lib
from attention_conformance.kernels.timing import time_round_robin
from attention_conformance.oracles import attention_backward
from attention_conformance.reports.benchmarks.cuda_fwd_check_bench import env_info

__all__ = ["BLOCK_M_ENV", "CASES", "DET_CASES", "DQ_ENV", "DQ_SPLIT_ENV", "DQ_TURNS_D", "OVERLAP_DEFAULT_D",
           "OVERLAP_ENV", "ROWS128_D", "atomic_dq_build", "bench_rows", "block_m64_build", "check_case",
           "determinism_case", "dq_other_build", "fa4_fwd_bwd", "main", "markdown", "overlap_build", "sdpa_fwd_bwd"]

BF, HF = torch.bfloat16, torch.float16
OVERLAP_ENV = "ATTN_FA3_BWD_OVERLAP"
DQ_ENV = "ATTN_FA3_BWD_DQ"  # "atomic": dQ by fp32 atomics from the consumers (the default is the TMA reduce-add)
#: the atomics build (ATTN_FA3_BWD_DQ=atomic) overlaps the GEMMs with the element-wise work at this head dim only by
#: default (kernels/cuda/fa3_bwd.cu; the TMA reduce-add build, the default, at neither)
OVERLAP_DEFAULT_D = 64
BLOCK_M_ENV = "ATTN_FA3_BWD_BLOCK_M"  # "64": the TMA build's 64-row query tiles where it defaults to 128
#: the head dim where the default (TMA reduce-add) build streams 128-row query tiles (kernels/cuda/fa3_bwd.cu)
ROWS128_D = 64
#: "1": every tile's dQ split between the consumers (by rows at d = 64, by columns at d = 128), "0": one consumer
#: computes a tile's whole dQ, the two taking turns; by default turns at d = `DQ_TURNS_D`, split elsewhere
DQ_SPLIT_ENV = "ATTN_FA3_BWD_DQ_SPLIT"
DQ_TURNS_D = 64
CASES = [
    dict(B=2, Hq=4, Hkv=4, Lq=128, Lk=128, d=64, dtype=BF),
    dict(B=2, Hq=4, Hkv=4, Lq=256, Lk=256, d=128, dtype=HF),
    dict(B=2, Hq=4, Hkv=2, Lq=173, Lk=301, d=128, dtype=BF, causal=True),
    dict(B=2, Hq=4, Hkv=4, Lq=301, Lk=173, d=128, dtype=HF, causal=True, alignment="top_left"),
    dict(B=2, Hq=4, Hkv=4, Lq=200, Lk=100, d=64, dtype=BF, causal=True),  # fully masked rows (bottom-right)
    dict(B=1, Hq=4, Hkv=1, Lq=190, Lk=500, d=128, dtype=BF, window=(50, 20)),
    dict(B=2, Hq=4, Hkv=2, Lq=150, Lk=260, d=64, dtype=HF, causal=True, seqlens_q=(150, 37),
         seqlens_k=(200, 260), nan_padding=True),
    dict(B=2, Hq=2, Hkv=2, Lq=96, Lk=96, d=128, dtype=BF, softcap=5.0, scale=0.5),
    dict(B=1, Hq=2, Hkv=2, Lq=1000, Lk=1000, d=64, dtype=HF, causal=True),
    dict(B=1, Hq=2, Hkv=1, Lq=513, Lk=777, d=128, dtype=BF, window=(100, None), causal=True,
         alignment="top_left"),
    dict(B=2, Hq=2, Hkv=2, Lq=100, Lk=300, d=128, dtype=BF, layout="bshd"),
    dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=64, dtype=HF),
]
DET_CASES = [
    dict(B=2, Hq=4, Hkv=2, Lq=700, Lk=900, d=128, dtype=BF, causal=True),
    dict(B=1, Hq=4, Hkv=4, Lq=1024, Lk=1024, d=64, dtype=HF),
]


def _name(spec: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in spec.items() if k != "dtype") + f",{str(spec['dtype'])[6:]}"


def _inputs(spec: dict, seed: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = spec["dtype"]
    B, Hq, Hkv, Lq, Lk, d = (spec[x] for x in ("B", "Hq", "Hkv", "Lq", "Lk", "d"))

    def rnd(H: int, L: int) -> torch.Tensor:
        if spec.get("layout") == "bshd":
            return torch.randn(B, L, H, d, device="cuda", generator=g).to(dt).transpose(1, 2)
        return torch.randn(B, H, L, d, device="cuda", generator=g).to(dt)

    t = dict(q=rnd(Hq, Lq), k=rnd(Hkv, Lk), v=rnd(Hkv, Lk), dout=rnd(Hq, Lq))
    if spec.get("nan_padding"):
        for b in range(B):
            t["q"][b, :, spec["seqlens_q"][b]:] = float("nan")
            t["dout"][b, :, spec["seqlens_q"][b]:] = float("nan")
            t["k"][b, :, spec["seqlens_k"][b]:] = float("nan")
            t["v"][b, :, spec["seqlens_k"][b]:] = float("nan")
    return t


def _semantics(spec: dict) -> dict:
    kw = dict(scale=spec.get("scale"), causal=spec.get("causal", False),
              alignment=spec.get("alignment", "bottom_right"), window=spec.get("window", (None, None)),
              softcap=spec.get("softcap"))
    for n in ("seqlens_q", "seqlens_k"):
        if n in spec:
            kw[n] = torch.tensor(spec[n], dtype=torch.int32, device="cuda")
    return kw


def _oracle(spec: dict, t: dict) -> tuple[np.ndarray, ...]:
    def f64(x: torch.Tensor) -> np.ndarray:
        return torch.nan_to_num(x.double(), nan=0.0).cpu().numpy()

    w = spec.get("window")
    return attention_backward(f64(t["q"]), f64(t["k"]), f64(t["v"]), f64(t["dout"]), scale=spec.get("scale"),
                              causal=spec.get("causal", False), alignment=spec.get("alignment", "bottom_right"),
                              window=None if w is None else tuple(w), softcap=spec.get("softcap"),
                              seqlens_q=spec.get("seqlens_q"), seqlens_k=spec.get("seqlens_k"))


def _forward(t: dict, kw: dict) -> tuple[torch.Tensor, torch.Tensor]:
    q = t["q"]
    o = torch.zeros(q.shape[0], q.shape[1], q.shape[2], t["v"].shape[-1], dtype=q.dtype, device="cuda")
    lse = torch.full(q.shape[:3], -math.inf, dtype=torch.float32, device="cuda")
    cuda_lib.call("attn_fa3_fwd", cuda_lib.fwd_params(q, t["k"], t["v"], o, lse, **kw))
    return o, lse


def _err(x: torch.Tensor, ref: np.ndarray) -> float:
    if x.numel() == 0:
        return 0.0
    d = (x.double().cpu() - torch.from_numpy(ref)).abs()
    return float(torch.nan_to_num(d, nan=math.inf).max())


def overlap_build(overlap: bool | None):
    """Within the block attn_fa3_bwd's atomics build runs with (True) or without (False) the GEMM / element-wise
    overlap (``ATTN_FA3_BWD_OVERLAP``); None: the default."""
    return cuda_lib.build_setting(OVERLAP_ENV, None if overlap is None else ("1" if overlap else "0"))


def atomic_dq_build():
    """Within the block both FA3 backward launchers add dQ with fp32 atomics from the consumers
    (``ATTN_FA3_BWD_DQ=atomic``; the default build adds it through shared memory and a TMA reduce-add)."""
    return cuda_lib.build_setting(DQ_ENV, "atomic")


def block_m64_build():
    """Within the block the default FA3 backward build streams 64-row query tiles at every head dim
    (``ATTN_FA3_BWD_BLOCK_M=64``; by default 128-row tiles at d = `ROWS128_D`)."""
    return cuda_lib.build_setting(BLOCK_M_ENV, "64")


def dq_other_build(d: int):
    """Within the block the default build at head dim ``d`` runs the dQ mode it does not run by default: the split
    (``ATTN_FA3_BWD_DQ_SPLIT=1``) at d = `DQ_TURNS_D`, the turns (``=0``) elsewhere."""
    return cuda_lib.build_setting(DQ_SPLIT_ENV, "1" if d == DQ_TURNS_D else "0")


@contextlib.contextmanager
def _within(builds):
    """Within the block every build setting of ``builds`` (factories of `cuda_lib.build_setting` contexts)."""
    with contextlib.ExitStack() as stack:
        for build in builds:
            stack.enter_context(build())
        yield


def check_case(spec: dict, launcher: str = "attn_fa3_bwd", seed: int = 0, overlap: bool | None = None,
               atomic_dq: bool = False, block_m64: bool = False, dq_other: bool = False) -> dict:
    """Errors of ``launcher`` (``overlap``: `overlap_build`; ``block_m64``: `block_m64_build`; ``dq_other``:
    `dq_other_build`) and of attn_fa2_bwd against the FP64 oracle on one case; ``ok`` and ``problems``."""
    t = _inputs(spec, seed)
    kw = _semantics(spec)
    o, lse = _forward(t, kw)
    ref = _oracle(spec, t)
    chosen = ((atomic_dq, atomic_dq_build), (block_m64, block_m64_build), (dq_other, lambda: dq_other_build(spec["d"])))
    with _within([lambda: overlap_build(overlap)] + [build for on, build in chosen if on]):
        ours = cuda_bwd_lib.backward(launcher, t["q"], t["k"], t["v"], o, lse, t["dout"], **kw)
    fa2 = cuda_bwd_lib.backward("attn_fa2_bwd", t["q"], t["k"], t["v"], o, lse, t["dout"], **kw)
    torch.cuda.synchronize()
    label = launcher if overlap is None else f"{launcher}[overlap={int(overlap)}]"
    label += "[atomic_dq]" if atomic_dq else ""
    label += "[block_m=64]" if block_m64 else ""
    label += f"[{DQ_SPLIT_ENV}={1 if spec['d'] == DQ_TURNS_D else 0}]" if dq_other else ""
    res: dict = {"case": _name(spec), "launcher": label, "problems": []}
    for name, x, y, r in zip(("dq", "dk", "dv"), ours, fa2, ref):
        e, e2 = _err(x, r), _err(y, r)
        tol = 2 * e2 + 2e-3 * max(1.0, float(np.abs(r).max()) if r.size else 1.0)
        res[name] = dict(err=e, fa2_err=e2, tol=tol)
        if not bool(torch.isfinite(x).all()):
            res["problems"].append(f"{name}: non-finite values")
        if not e <= tol:
            res["problems"].append(f"{name}: max|err|={e:.3e} > tol={tol:.3e} (FA2 {e2:.3e})")
    masked = (lse == -math.inf)
    if "seqlens_q" in spec:
        rows = torch.arange(spec["Lq"], device="cuda")[None, :] < kw["seqlens_q"][:, None]
        masked &= rows[:, None, :]
    if bool(masked.any()) and not bool((ours[0][masked] == 0).all()):
        res["problems"].append("dq: rows with no visible key must be exactly 0")
    res["masked_rows"] = int(masked.sum())
    res["ok"] = not res["problems"]
    return res


def determinism_case(spec: dict, seed: int = 0, atomic_dq: bool = False) -> dict:
    """Two runs of attn_fa3_bwd_deterministic on the same inputs: ``identical`` (every bit of dq, dk, dv), and
    the largest difference to attn_fa3_bwd (atomics in any order)."""
    t = _inputs(spec, seed)
    kw = _semantics(spec)
    o, lse = _forward(t, kw)
    args = (t["q"], t["k"], t["v"], o, lse, t["dout"])
    with _within([atomic_dq_build] if atomic_dq else []):
        a = cuda_bwd_lib.backward("attn_fa3_bwd_deterministic", *args, **kw)
        b = cuda_bwd_lib.backward("attn_fa3_bwd_deterministic", *args, **kw)
        c = cuda_bwd_lib.backward("attn_fa3_bwd", *args, **kw)
    torch.cuda.synchronize()
    same = all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(a, b))
    diff = max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, c))
    return {"case": _name(spec) + (" [atomic_dq]" if atomic_dq else ""), "identical": same, "max_diff_vs_atomic": diff}


def _calls(*pairs: tuple, builds: tuple = ()):
    """A callable that runs each (launcher, params) of ``pairs`` in order (within ``builds``: see `_within`)."""
    if not builds:
        return lambda: [cuda_lib.call(name, params) for name, params in pairs]

    def run():
        with _within(builds):
            return [cuda_lib.call(name, params) for name, params in pairs]

    return run


def _grad_fn(out: torch.Tensor, leaves: tuple, dout: torch.Tensor):
    return lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)


def sdpa_fwd_bwd(backend, q, k, v, dout, causal: bool):
    """torch SDPA's `backend` on [B, H, N, d] inputs: (forward + backward through autograd, the backward alone on
    one retained forward), both returning the gradients of q, k, v for `dout`."""
    from torch.nn.attention import sdpa_kernel

    leaves = tuple(x.detach().requires_grad_(True) for x in (q, k, v))

    def f():
        with sdpa_kernel([backend]):
            out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
        return torch.autograd.grad(out, leaves, dout)

    with sdpa_kernel([backend]):
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    return f, _grad_fn(out, leaves, dout)


def fa4_fwd_bwd(q, k, v, dout, causal: bool):
    """flash-attn-4 on [B, H, N, d] inputs (its [B, N, H, d] copies): (forward + backward through autograd, the
    backward alone on one retained forward), as `sdpa_fwd_bwd` (gradients in [B, N, H, d]), or None when
    ``flash_attn.cute`` does not import."""
    try:
        from flash_attn.cute.interface import flash_attn_func
    except Exception:
        return None
    leaves = tuple(x.transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v))
    g = dout.transpose(1, 2).contiguous()

    def f():
        out = flash_attn_func(*leaves, causal=causal)
        out = out[0] if isinstance(out, tuple) else out
        return torch.autograd.grad(out, leaves, g)

    out = flash_attn_func(*leaves, causal=causal)
    return f, _grad_fn(out[0] if isinstance(out, tuple) else out, leaves, g)


def bench_rows(shapes, rounds: int = 3, only: frozenset[str] = frozenset()) -> list[dict]:
    """One row per (B, H, N, d, causal): backward-only and forward+backward TFLOPs/s of every candidate (of those
    named in `only`, when given)."""
    from torch.nn.attention import SDPBackend

    rows = []
    for B, H, N, d, causal in shapes:
        q, k, v, dout = (torch.randn(B, H, N, d, device="cuda", dtype=BF) for _ in range(4))
        fwd_flops = 4 * B * H * N * N * d / (2 if causal else 1)
        row: dict = dict(B=B, H=H, N=N, d=d, causal=causal, other_build_overlap=d != OVERLAP_DEFAULT_D)
        o3, l3 = torch.empty_like(q), torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        o2, l2 = torch.empty_like(q), torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        pf3 = cuda_lib.fwd_params(q, k, v, o3, l3, causal=causal)
        pf2 = cuda_lib.fwd_params(q, k, v, o2, l2, causal=causal)
        cuda_lib.call("attn_fa3_fwd", pf3)
        cuda_lib.call("attn_fa2_fwd", pf2)
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
        sc = cuda_bwd_lib.bwd_scratch(q, k)
        pb3 = cuda_bwd_lib.bwd_params(q, k, v, o3, l3, dout, dq, dk, dv, causal=causal, **sc)
        pb2 = cuda_bwd_lib.bwd_params(q, k, v, o2, l2, dout, dq, dk, dv, causal=causal, **sc)
        fl_fwd, fl_bwd = sdpa_fwd_bwd(SDPBackend.FLASH_ATTENTION, q, k, v, dout, causal)
        cu_fwd, cu_bwd = sdpa_fwd_bwd(SDPBackend.CUDNN_ATTENTION, q, k, v, dout, causal)
        other = d != OVERLAP_DEFAULT_D  # the build the default does not run at this head dim
        bwd3, det3, fwd3 = ("attn_fa3_bwd", pb3), ("attn_fa3_bwd_deterministic", pb3), ("attn_fa3_fwd", pf3)
        atomic = (atomic_dq_build,)
        # the overlap switch applies to the atomics build
        overlap_other = (lambda other=other: overlap_build(other), atomic_dq_build)
        dq_other = (lambda d=d: dq_other_build(d),)
        m64 = (block_m64_build,)
        bwd = [("fa3", _calls(bwd3)), ("fa3_det", _calls(det3)),
               ("fa3_atomic", _calls(bwd3, builds=atomic)), ("fa3_atomic_det", _calls(det3, builds=atomic)),
               ("fa3_other", _calls(bwd3, builds=overlap_other)),
               ("fa3_dq_other", _calls(bwd3, builds=dq_other)),
               *([("fa3_m64", _calls(bwd3, builds=m64)), ("fa3_m64_det", _calls(det3, builds=m64))]
                 if d == ROWS128_D else []),
               ("fa2", _calls(("attn_fa2_bwd", pb2))), ("flash", fl_bwd), ("cudnn", cu_bwd)]
        both = [("fa3", _calls(fwd3, bwd3)),
                ("fa3_dq_other", _calls(fwd3, bwd3, builds=dq_other)),
                *([("fa3_m64", _calls(fwd3, bwd3, builds=m64))] if d == ROWS128_D else []),
                ("fa2", _calls(("attn_fa2_fwd", pf2), ("attn_fa2_bwd", pb2))), ("flash", fl_fwd), ("cudnn", cu_fwd)]
        fa4 = fa4_fwd_bwd(q, k, v, dout, causal)
        if fa4 is not None:
            bwd.append(("fa4", fa4[1]))
            both.append(("fa4", fa4[0]))
        if only:
            bwd, both = ([c for c in cands if c[0] in only] for cands in (bwd, both))
        rb: dict = {}
        time_round_robin(rb, bwd, 2.5 * fwd_flops, rounds)
        rf: dict = {}
        time_round_robin(rf, both, 3.5 * fwd_flops, rounds)
        row.update({"bwd_" + key: val for key, val in rb.items()})
        row.update({"fwdbwd_" + key: val for key, val in rf.items()})
        # agreement with torch flash's gradients on these inputs (bf16 both)
        cuda_lib.call("attn_fa3_bwd", pb3)
        ref = fl_bwd()
        row["max_diff_vs_flash"] = [float((a.float() - b.float()).abs().max()) for a, b in zip((dq, dk, dv), ref)]
        rows.append(row)
        del q, k, v, dout, o3, o2, dq, dk, dv, sc
        torch.cuda.empty_cache()
    return rows


def markdown(env: dict, checks: list[dict], dets: list[dict], rows: list[dict], command: str) -> str:
    """The report: environment, correctness, determinism and the timing table."""
    out = [f"# FA3 backward (sm_90a) vs FA2 backward, torch flash and cuDNN ({env['gpu']})", "",
           f"Date {env['date']}; driver {env['driver']}; CUDA {env['cuda']}; torch {env['torch']}; "
           f"cuDNN {env['cudnn']}.", "", f"Command: `{command}`", ""]
    if checks:
        out += ["## Correctness (max abs error vs the FP64 oracle; FA2 backward on the same inputs)", "",
                "| case | launcher | dq err (FA2) | dk err (FA2) | dv err (FA2) | ok |", "|---|---|---|---|---|---|"]
        for c in checks:
            cells = " | ".join(f"{c[n]['err']:.2e} ({c[n]['fa2_err']:.2e})" for n in ("dq", "dk", "dv"))
            out.append(f"| {c['case']} | {c['launcher']} | {cells} | {'PASS' if c['ok'] else 'FAIL'} |")
        out.append("")
    if dets:
        out += ["## Determinism (attn_fa3_bwd_deterministic twice)", ""]
        out += [f"- {d['case']}: bit-identical {d['identical']}, max diff to attn_fa3_bwd "
                f"{d['max_diff_vs_atomic']:.2e}" for d in dets]
        out.append("")
    if rows:
        out += ["## TFLOPs/s (bf16; backward = 2.5x, forward+backward = 3.5x the forward's 4 B H N^2 d; "
                "causal halved)", "",
                "FA3 (default): dQ through TMA reduce-add; FA3 atomic / atomic det: dQ by fp32 atomics "
                "(ATTN_FA3_BWD_DQ=atomic); FA3 other: the atomics build with (d = 128) / without (d = 64) the GEMM / "
                f"element-wise overlap; FA3 m64 (det): the default build with 64-row query tiles at d = {ROWS128_D} "
                "(ATTN_FA3_BWD_BLOCK_M=64; by default 128 there); FA3 dQ other: the other dQ mode (d = 64: every "
                "tile's dQ split by rows, ATTN_FA3_BWD_DQ_SPLIT=1; d = 128: the consumers take turns, =0).", "",
                "| shape | causal | bwd FA3 | FA3 det | FA3 m64 | m64 det | FA3 dQ other | FA3 other | FA3 atomic | "
                "FA3 atomic det | FA2 | flash | cuDNN | fwd+bwd FA3 | FA3 m64 | FA3 dQ other | FA2 | flash | cuDNN | "
                "FA4 | FA3/flash bwd | FA3/cuDNN bwd | fwd+bwd FA3/FA4 |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

        def g(r: dict, key: str) -> str:
            return f"{r[key]:.0f}" if key in r else "-"

        for r in rows:
            rf = r.get("bwd_flash_ms", math.nan) / r.get("bwd_fa3_ms", math.nan)
            rc = r.get("bwd_cudnn_ms", math.nan) / r.get("bwd_fa3_ms", math.nan)
            r4 = r.get("fwdbwd_fa4_ms", math.nan) / r.get("fwdbwd_fa3_ms", math.nan)
            out.append(f"| B{r['B']} H{r['H']} N{r['N']} d{r['d']} | {r['causal']} | {g(r, 'bwd_fa3_tflops')} | "
                       f"{g(r, 'bwd_fa3_det_tflops')} | {g(r, 'bwd_fa3_m64_tflops')} | "
                       f"{g(r, 'bwd_fa3_m64_det_tflops')} | {g(r, 'bwd_fa3_dq_other_tflops')} | "
                       f"{g(r, 'bwd_fa3_other_tflops')} | "
                       f"{g(r, 'bwd_fa3_atomic_tflops')} | "
                       f"{g(r, 'bwd_fa3_atomic_det_tflops')} | {g(r, 'bwd_fa2_tflops')} | "
                       f"{g(r, 'bwd_flash_tflops')} | "
                       f"{g(r, 'bwd_cudnn_tflops')} | {g(r, 'fwdbwd_fa3_tflops')} | {g(r, 'fwdbwd_fa3_m64_tflops')} | "
                       f"{g(r, 'fwdbwd_fa3_dq_other_tflops')} | "
                       f"{g(r, 'fwdbwd_fa2_tflops')} | "
                       f"{g(r, 'fwdbwd_flash_tflops')} | {g(r, 'fwdbwd_cudnn_tflops')} | {g(r, 'fwdbwd_fa4_tflops')} | "
                       f"{rf:.2f} | {rc:.2f} | {r4:.2f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the checks (and unless ``--no-bench`` the benchmark); write fa3_bwd.json / fa3_bwd.md under --out."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness and determinism checks")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--head-dims", default="64,128", help="benchmark rows: comma-separated head dims")
    ap.add_argument("--only", default="", help="benchmark only these candidates (comma-separated, e.g. fa3,cudnn)")
    ap.add_argument("--rounds", type=int, default=3, help="round-robin rounds per row (the median is kept)")
    args = ap.parse_args(argv)
    checks: list[dict] = []
    for i, spec in enumerate([] if args.no_check else CASES):
        runs = [("attn_fa3_bwd", None, False, ""), ("attn_fa3_bwd_deterministic", None, False, ""),
                ("attn_fa3_bwd", None, True, ""), ("attn_fa3_bwd_deterministic", None, True, ""),
                ("attn_fa3_bwd", spec["d"] != OVERLAP_DEFAULT_D, True, "")]
        runs += [("attn_fa3_bwd", None, False, "dq_other"), ("attn_fa3_bwd_deterministic", None, False, "dq_other")]
        if spec["d"] == ROWS128_D:
            runs += [("attn_fa3_bwd", None, False, "m64"), ("attn_fa3_bwd_deterministic", None, False, "m64")]
        for launcher, overlap, atomic, build in runs:
            checks.append(check_case(spec, launcher, seed=i, overlap=overlap, atomic_dq=atomic,
                                     block_m64=build == "m64", dq_other=build == "dq_other"))
            print(checks[-1], flush=True)
    dets = [] if args.no_check else [determinism_case(s, seed=i, atomic_dq=atomic) for atomic in (False, True)
                                     for i, s in enumerate(DET_CASES)]
    print(dets, flush=True)
    if checks or dets:
        nok = sum(c["ok"] for c in checks) + sum(d["identical"] for d in dets)
        print(f"correctness: {nok}/{len(checks) + len(dets)} ok (cases and determinism)", flush=True)
    dims = [int(x) for x in args.head_dims.split(",")]
    only = frozenset(x for x in args.only.split(",") if x)
    rows = [] if args.no_bench else bench_rows([(4, 16, 8192, d, c) for d in dims for c in (False, True)],
                                               args.rounds, only)
    env = env_info()
    command = "python -m attention_conformance.reports.benchmarks.fa3_bwd_check_bench" + (
        " --no-bench" if args.no_bench else "") + (" --no-check" if args.no_check else "") + (
        f" --head-dims {args.head_dims}" if dims != [64, 128] else "") + (
        f" --only {args.only}" if only else "") + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fa3_bwd.json").write_text(json.dumps(dict(env=env, command=command, checks=checks, determinism=dets,
                                                      bench=rows), indent=1, default=str))
    md = markdown(env, checks, dets, rows, command)
    (out / "fa3_bwd.md").write_text(md)
    print(md)
    return 0 if all(c["ok"] for c in checks) and all(d["identical"] for d in dets) else 1


if __name__ == "__main__":
    sys.exit(main())
