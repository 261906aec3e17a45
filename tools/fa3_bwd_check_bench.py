"""Correctness check and benchmark of the FA3 backward (kernels/cuda/fa3_bwd.cu, sm_90a) (lab script).

Correctness: every case of `attention_conformance.kernels.check.cases.FA3_BWD_CASES` through both launchers and the
builds beside the default, every case of `FA3_BWD_WIDE_CASES` (d = 192, 256, (192, 128): the wide builds and their
lab variants, `lab.fa3_bwd_wide_variants`) through both launchers
(`attention_conformance.kernels.check.backward.check_backward`: the conformance judge's verdict on O, LSE, dq, dk, dv
against the FP64 oracle under the a-priori bounds of conformance/TOLERANCES.md), and `check_determinism`
(attn_fa3_bwd_deterministic twice, bit for bit; FA3_BWD_DETERMINISM_CASES and FA3_BWD_WIDE_DETERMINISM_CASES).

Benchmark (`bench_rows`): B=4, H=16, N=8192 bf16 by default, TFLOPs/s of the backward alone (2.5x the
forward's 4 B H N^2 d) and of forward + backward (3.5x), halved for causal, for FA3 (attn_fa3_fwd + attn_fa3_bwd,
the deterministic build and the other overlap build), our FA2 (attn_fa2_fwd + attn_fa2_bwd), torch SDPA's flash and
cuDNN backends (autograd on their own forward); every row's candidates timed round-robin (`time_round_robin`).
``--head-dims`` takes d (dv = d) or d x dv, e.g. ``64,128,192,256,192x128``; with dv != d the FLOPs are
2 B H N^2 (d + dv) forward and 2 B H N^2 (3 d + 2 dv) backward (S, dQ, dK over d; dP, dV over dv), and only the
candidates with a build for the shape run (the lab variants at d <= 128, FA2 at d = dv in {64, 128, 256}, SDPA at
dv = d).

Run: ``python tools/fa3_bwd_check_bench.py [--no-bench] [--head-dims 64,128,192,256,192x128] --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from bench_shapes import dims_label, parse_head_dims, row_key
from cuda_fwd_check_bench import env_info
from timing_md import TIMING_NOTE, env_line, host_table, replaced_set_note

from attention_conformance.kernels import cuda_bwd_lib, cuda_lib
from attention_conformance.kernels.check.backward import check_backward, check_determinism
from attention_conformance.kernels.check.cases import (
    FA3_BWD_CASES,
    FA3_BWD_DETERMINISM_CASES,
    FA3_BWD_WIDE_CASES,
    FA3_BWD_WIDE_DETERMINISM_CASES,
    OVERLAP_DEFAULT_D,
    ROWS128_D,
)
from attention_conformance.kernels.cuda.lab import fa3_bwd_wide_variants
from attention_conformance.kernels.timing import time_round_robin

__all__ = ["bench_rows", "fa4_fwd_bwd", "main", "markdown", "sdpa_fwd_bwd"]

BF = torch.bfloat16
#: the head dims the lab's FA3 backward variants are built for (hopper/bwd_launch.cuh fa3_bwd_narrow_head_dims)
LAB_DIMS = (64, 96, 128)
FA2_DIMS = (64, 128, 256)


def _calls(*pairs: tuple, variant: str = "default"):
    """A callable that runs each (launcher, params) of ``pairs`` in order; the FA3 backward launchers of the lab
    build's ``variant`` (`kernels.cuda.lab.FA3_BWD_VARIANTS`) where it is not "default"."""
    if variant == "default":
        bound = [cuda_lib.bind(name, params) for name, params in pairs]  # structs filled, workspaces sized once
        return lambda: [kc() for kc in bound]
    from attention_conformance.kernels.cuda import lab

    def one(name: str, params):
        if name.startswith("attn_fa3_bwd"):
            return lab.call_fa3_bwd(params, variant, deterministic=name.endswith("_deterministic"))
        return cuda_lib.call(name, params)

    return lambda: [one(name, params) for name, params in pairs]


def _fresh(leaves: tuple) -> tuple:
    """New leaf views of `leaves`. Each forward+backward call takes its own, so that their gradient accumulators are
    made on the stream the call runs on. Reusing the leaves of the retained backward-only forward (made on the
    default stream) made torch 2.11's engine sync the legacy stream with the capture's, so no torch forward+backward
    could be captured ("operation would make the legacy stream depend on a capturing blocking stream")."""
    return tuple(x.detach().requires_grad_(True) for x in leaves)


def _grad_fn(out: torch.Tensor, leaves: tuple, dout: torch.Tensor):
    return lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)


def sdpa_fwd_bwd(backend, q, k, v, dout, causal: bool):
    """torch SDPA's `backend` on [B, H, N, d] inputs: (forward + backward through autograd, the backward alone on
    one retained forward), both returning the gradients of q, k, v for `dout`."""
    from torch.nn.attention import sdpa_kernel

    leaves = _fresh((q, k, v))

    def f():
        fresh = _fresh(leaves)
        with sdpa_kernel([backend]):
            out = torch.nn.functional.scaled_dot_product_attention(*fresh, is_causal=causal)
        return torch.autograd.grad(out, fresh, dout)

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
        fresh = _fresh(leaves)
        out = flash_attn_func(*fresh, causal=causal)
        out = out[0] if isinstance(out, tuple) else out
        return torch.autograd.grad(out, fresh, g)

    out = flash_attn_func(*leaves, causal=causal)
    return f, _grad_fn(out[0] if isinstance(out, tuple) else out, leaves, g)


def bench_rows(shapes, rounds: int = 3, only: frozenset[str] = frozenset(),
               row_done: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """One row per (B, H, N, d, causal): backward-only and forward+backward TFLOPs/s of every candidate (of those
    named in `only`, when given); `row_done(rows so far)` after each row (the files written then: a run that its
    time limit cuts short keeps the table of the rows it finished)."""
    from torch.nn.attention import SDPBackend

    rows = []
    for shape in shapes:
        B, H, N, d, causal = shape if len(shape) == 5 else (*shape[:4], shape[5])
        dv_ = d if len(shape) == 5 else shape[4]  # the head dim of V, O and dO
        q, k = (torch.randn(B, H, N, d, device="cuda", dtype=BF) for _ in range(2))
        v, dout = (torch.randn(B, H, N, dv_, device="cuda", dtype=BF) for _ in range(2))
        fwd_flops = 2 * B * H * N * N * (d + dv_) / (2 if causal else 1)  # 4 B H N^2 d at dv = d
        bwd_flops = 2 * B * H * N * N * (3 * d + 2 * dv_) / (2 if causal else 1)  # 2.5x the forward's at dv = d
        lab, fa2_ok, sdpa_ok = d == dv_ and d in LAB_DIMS, d == dv_ and d in FA2_DIMS, d == dv_
        row: dict = dict(B=B, H=H, N=N, d=d, dv=dv_, causal=causal, other_build_overlap=d != OVERLAP_DEFAULT_D)
        o3, l3 = torch.empty_like(v), torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        o2, l2 = torch.empty_like(v), torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        pf3 = cuda_lib.fwd_params(q, k, v, o3, l3, causal=causal)
        pf2 = cuda_lib.fwd_params(q, k, v, o2, l2, causal=causal)
        cuda_lib.call("attn_fa3_fwd", pf3)
        if fa2_ok:
            cuda_lib.call("attn_fa2_fwd", pf2)
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
        sc = cuda_bwd_lib.bwd_scratch(q, k, v)
        pb3 = cuda_bwd_lib.bwd_params(q, k, v, o3, l3, dout, dq, dk, dv, causal=causal, **sc)
        pb2 = cuda_bwd_lib.bwd_params(q, k, v, o2, l2, dout, dq, dk, dv, causal=causal, **sc)
        bwd3, det3, fwd3 = ("attn_fa3_bwd", pb3), ("attn_fa3_bwd_deterministic", pb3), ("attn_fa3_fwd", pf3)
        bwd = [("fa3", _calls(bwd3)), ("fa3_det", _calls(det3))]
        both = [("fa3", _calls(fwd3, bwd3))]
        if lab:  # the lab build's named variants (the overlap switch applies to the atomics build)
            bwd += [("fa3_atomic", _calls(bwd3, variant="atomic_dq")),
                    ("fa3_atomic_det", _calls(det3, variant="atomic_dq")),
                    ("fa3_other", _calls(bwd3, variant="atomic_dq_other_overlap")),
                    ("fa3_dq_other", _calls(bwd3, variant="other_dq_split")),
                    ("fa3_m64", _calls(bwd3, variant="rows64")), ("fa3_m64_det", _calls(det3, variant="rows64")),
                    ("fa3_dkv4", _calls(bwd3, variant="direct_dkv"))]
            if d == ROWS128_D:
                bwd.append(("fa3_alt", _calls(bwd3, variant="alternate_dq")))
            both += [("fa3_dq_other", _calls(fwd3, bwd3, variant="other_dq_split")),
                     ("fa3_m64", _calls(fwd3, bwd3, variant="rows64")),
                     ("fa3_dkv4", _calls(fwd3, bwd3, variant="direct_dkv"))]
            if d == ROWS128_D:
                both.append(("fa3_alt", _calls(fwd3, bwd3, variant="alternate_dq")))
        if d > max(LAB_DIMS):  # the wide builds' lab variants: dQ by float2 / float4 atomics; TMA dQ, one dO stage
            names = {"atomic_dq": "fa3_atomic", "wide_dq_float4": "fa3_dq_f4",
                     "wide_tma_dq_one_do_stage": "fa3_dq_tma1", "shared_keys64": "fa3_k64"}
            for variant in fa3_bwd_wide_variants(d, dv_)[1:]:
                bwd.append((names[variant], _calls(bwd3, variant=variant)))
                if variant != "atomic_dq":
                    both.append((names[variant], _calls(fwd3, bwd3, variant=variant)))
        if fa2_ok:
            bwd.append(("fa2", _calls(("attn_fa2_bwd", pb2))))
            both.append(("fa2", _calls(("attn_fa2_fwd", pf2), ("attn_fa2_bwd", pb2))))
        fl_bwd = None
        if sdpa_ok:
            fl_fwd, fl_bwd = sdpa_fwd_bwd(SDPBackend.FLASH_ATTENTION, q, k, v, dout, causal)
            cu_fwd, cu_bwd = sdpa_fwd_bwd(SDPBackend.CUDNN_ATTENTION, q, k, v, dout, causal)
            bwd += [("flash", fl_bwd), ("cudnn", cu_bwd)]
            both += [("flash", fl_fwd), ("cudnn", cu_fwd)]
        fa4 = fa4_fwd_bwd(q, k, v, dout, causal)
        if fa4 is not None:
            bwd.append(("fa4", fa4[1]))
            both.append(("fa4", fa4[0]))
        if only:
            bwd, both = ([c for c in cands if c[0] in only] for cands in (bwd, both))
        memory: list[dict] = []
        rb: dict = {}
        time_round_robin(rb, _named("bwd", bwd), bwd_flops, rounds, timer=_memory_logged(memory))
        rf: dict = {}
        time_round_robin(rf, _named("fwdbwd", both), fwd_flops + bwd_flops, rounds, timer=_memory_logged(memory))
        row.update({"bwd_" + key: val for key, val in rb.items()})
        row.update({"fwdbwd_" + key: val for key, val in rf.items()})
        row["device_memory_after_each_timing"] = memory
        # agreement with torch flash's gradients on these inputs (bf16 both)
        try:
            if fl_bwd is None:
                raise LookupError("torch flash takes dv = d only")
            cuda_lib.call("attn_fa3_bwd", pb3)
            ref = fl_bwd()
            row["max_diff_vs_flash"] = [float((a.float() - b.float()).abs().max())
                                        for a, b in zip((dq, dk, dv), ref)]
        except (torch.OutOfMemoryError, LookupError) as exc:  # the timings stand; say what held the memory
            row["max_diff_vs_flash_error"] = str(exc).splitlines()[0]
        print(json.dumps(row, default=str), flush=True)  # each row as it ends: a run cut short keeps them
        rows.append(row)
        if row_done is not None:
            row_done(rows)
        del q, k, v, dout, o3, o2, dq, dk, dv, sc
        torch.cuda.empty_cache()
    return rows


def _named(prefix: str, cands: list) -> list:
    """`cands` with each callable wrapped under its candidate's name (``prefix_name``), for `_memory_logged`'s log."""
    def wrap(label, fn):
        def call():
            return fn()
        call.__qualname__ = label
        return call

    return [(name, wrap(f"{prefix}_{name}", fn)) for name, fn in cands]


def _memory_logged(log: list[dict]):
    """A `time_round_robin` timer: its default (`round_timing`), then the device's free memory and torch's
    reserved and allocated memory (GiB) appended to `log` (on the H200 a first fwd+bwd row once ran the card out of
    memory with 3.5 GiB allocated by torch: this says after which candidate's timing the memory went)."""
    from attention_conformance.kernels.timing import round_timing

    def timer(fn):
        t = round_timing(fn)
        free, _ = torch.cuda.mem_get_info()
        log.append(dict(fn=getattr(fn, "__qualname__", "?"), method=t.method, free_gib=round(free / 2**30, 2),
                        reserved_gib=round(torch.cuda.memory_reserved() / 2**30, 2),
                        allocated_gib=round(torch.cuda.memory_allocated() / 2**30, 2)))
        return t

    return timer


def _ratio(x: float) -> str:
    """A ratio to two places, "-" where a candidate did not run."""
    return "-" if math.isnan(x) else f"{x:.2f}"


def change_table(rows: list[dict], previous: list[dict], previous_env: dict, gpu: str) -> list[str]:
    """Each row against the set this one replaces (``--previous``): our backward's TFLOPs/s and our forward +
    backward's ratio to FA4, then and now, and by how much they moved; what the previous set was."""
    before = {row_key(r): r for r in previous}
    note = replaced_set_note(previous, previous_env, gpu,
                             "timed by the wall timer, which charged each call's host time")
    out = ["## Against the set this one replaces", "", note[0].upper() + note[1:], "",
           "| shape | causal | bwd FA3 before | now | change | fwd+bwd FA3/FA4 before | now | change |",
           "|---" * 8 + "|"]
    nan = math.nan
    for r in rows:
        o = before.get(row_key(r))
        if o is None:
            continue
        t0, t1 = o.get("bwd_fa3_tflops", nan), r.get("bwd_fa3_tflops", nan)
        q0 = o.get("fwdbwd_fa4_ms", nan) / o.get("fwdbwd_fa3_ms", nan)
        q1 = r.get("fwdbwd_fa4_ms", nan) / r.get("fwdbwd_fa3_ms", nan)
        out.append(f"| B{r['B']} H{r['H']} N{r['N']} d{dims_label(r)} | {r['causal']} | {t0:.0f} | {t1:.0f} | "
                   f"{t1 / t0 - 1:+.1%} | {_ratio(q0)} | {_ratio(q1)} | {q1 - q0:+.2f} |")
    return out + [""]


def markdown(env: dict, checks: list[dict], dets: list[dict], rows: list[dict], command: str,
             previous: list[dict] | None = None, previous_env: dict | None = None) -> str:
    """The report: environment, correctness, determinism and the timing table; with ``previous`` (an earlier set's
    rows) each row's change against it (`change_table`)."""
    out = [f"# FA3 backward (sm_90a) vs FA2 backward, torch flash and cuDNN ({env['gpu']})", "",
           env_line(env), "", f"Command: `{command}`", ""]
    if checks:
        out += ["## Correctness (max abs error vs the FP64 oracle; in brackets error / bound, the judge's usage)", "",
                "| case | launcher | dq err | dk err | dv err | ok |", "|---|---|---|---|---|---|"]
        for c in checks:
            cells = " | ".join(f"{c[n]['err']:.2e} ({c[n]['usage']:.2f})" for n in ("dq", "dk", "dv"))
            out.append(f"| {c['case']} | {c['launcher']} | {cells} | {'PASS' if c['ok'] else 'FAIL'} |")
        out.append("")
    if dets:
        out += ["## Determinism (attn_fa3_bwd_deterministic twice)", ""]
        out += [f"- {d['case']}: bit-identical {d['identical']}, max diff to attn_fa3_bwd "
                f"{d['max_diff_vs_atomic']:.2e}" for d in dets]
        out.append("")
    if rows:
        out += [TIMING_NOTE, ""]
        out += host_table(rows, lambda r: f"B{r['B']} H{r['H']} N{r['N']} d{dims_label(r)} "
                                          f"{'causal' if r['causal'] else ''}")
        out += ["## TFLOPs/s (bf16; backward = 2.5x, forward+backward = 3.5x the forward's 4 B H N^2 d; "
                "causal halved)", "",
                "FA3 (default): dQ through TMA reduce-add; FA3 atomic / atomic det: dQ by fp32 atomics "
                "(lab variant atomic_dq); FA3 other: the atomics build with (d = 128) / without (d = 64) the GEMM / "
                "element-wise overlap; FA3 m64 (det): 64-row query tiles (lab variant rows64; the default build has "
                f"128 at d = {ROWS128_D}, 80 with dQ^T = K^T dS^T at d = 96, 128); FA3 dQ other: the other dQ mode "
                "(d = 64: every tile's dQ split by rows; d = 128: the consumers take turns; lab variant "
                "other_dq_split); FA3 dQ f4: the wide builds (d > 128) with dQ added by float4 atomics (lab variant "
                "wide_dq_float4); FA3 TMA dQ 1: "
                "dQ through one 16 KB buffer per consumer and the TMA reduce-add, dO in one stage (lab variant "
                "wide_tma_dq_one_do_stage: the d = 256 default; not d = dv = 192); FA3 dKV4: dK / dV stored 4 bytes "
                "at a time from the accumulators (lab variant direct_dkv; the default build stages them through "
                "shared memory at d <= 128); FA3 alt dQ: d = 64 with the dQ turns on the same tile (lab variant "
                "alternate_dq; the default build takes them one tile behind); FA3 k64: d = 192 on 64-key tiles shared "
                "by two consumers (lab variant shared_keys64; the default build has 96-key tiles, three consumers).",
                "",
                "| shape | causal | bwd FA3 | FA3 det | FA3 m64 | m64 det | FA3 dQ other | FA3 other | FA3 atomic | "
                "FA3 atomic det | FA3 dQ f4 | FA3 TMA dQ 1 | FA3 dKV4 | FA3 alt dQ | FA3 k64 | FA2 | "
                "flash | cuDNN | fwd+bwd FA3 | FA3 m64 | FA3 dQ other | FA3 dQ f4 | FA3 TMA dQ 1 | FA3 dKV4 | "
                "FA3 alt dQ | FA3 k64 | FA2 | flash | cuDNN | FA4 | FA3/flash bwd | FA3/cuDNN bwd | fwd+bwd FA3/FA4 |",
                "|---" * 33 + "|"]

        def g(r: dict, key: str) -> str:
            return f"{r[key]:.0f}" if key in r else "-"

        for r in rows:
            rf = r.get("bwd_flash_ms", math.nan) / r.get("bwd_fa3_ms", math.nan)
            rc = r.get("bwd_cudnn_ms", math.nan) / r.get("bwd_fa3_ms", math.nan)
            r4 = r.get("fwdbwd_fa4_ms", math.nan) / r.get("fwdbwd_fa3_ms", math.nan)
            out.append(f"| B{r['B']} H{r['H']} N{r['N']} d{dims_label(r)} | {r['causal']} | {g(r, 'bwd_fa3_tflops')} | "
                       f"{g(r, 'bwd_fa3_det_tflops')} | {g(r, 'bwd_fa3_m64_tflops')} | "
                       f"{g(r, 'bwd_fa3_m64_det_tflops')} | {g(r, 'bwd_fa3_dq_other_tflops')} | "
                       f"{g(r, 'bwd_fa3_other_tflops')} | "
                       f"{g(r, 'bwd_fa3_atomic_tflops')} | "
                       f"{g(r, 'bwd_fa3_atomic_det_tflops')} | {g(r, 'bwd_fa3_dq_f4_tflops')} | "
                       f"{g(r, 'bwd_fa3_dq_tma1_tflops')} | {g(r, 'bwd_fa3_dkv4_tflops')} | "
                       f"{g(r, 'bwd_fa3_alt_tflops')} | {g(r, 'bwd_fa3_k64_tflops')} | "
                       f"{g(r, 'bwd_fa2_tflops')} | "
                       f"{g(r, 'bwd_flash_tflops')} | "
                       f"{g(r, 'bwd_cudnn_tflops')} | {g(r, 'fwdbwd_fa3_tflops')} | {g(r, 'fwdbwd_fa3_m64_tflops')} | "
                       f"{g(r, 'fwdbwd_fa3_dq_other_tflops')} | {g(r, 'fwdbwd_fa3_dq_f4_tflops')} | "
                       f"{g(r, 'fwdbwd_fa3_dq_tma1_tflops')} | {g(r, 'fwdbwd_fa3_dkv4_tflops')} | "
                       f"{g(r, 'fwdbwd_fa3_alt_tflops')} | {g(r, 'fwdbwd_fa3_k64_tflops')} | "
                       f"{g(r, 'fwdbwd_fa2_tflops')} | "
                       f"{g(r, 'fwdbwd_flash_tflops')} | {g(r, 'fwdbwd_cudnn_tflops')} | {g(r, 'fwdbwd_fa4_tflops')} | "
                       f"{_ratio(rf)} | {_ratio(rc)} | {_ratio(r4)} |")
        if previous:
            out += [""] + change_table(rows, previous, previous_env or {}, env["gpu"])
    return "\n".join(out) + "\n"


def write_table(out: Path, env: dict, command: str, checks: list[dict], dets: list[dict], rows: list[dict],
                prev: dict) -> str:
    """fa3_bwd.json and fa3_bwd.md under ``out`` (``prev``: an earlier fa3_bwd.json, or {}); returns the markdown."""
    (out / "fa3_bwd.json").write_text(json.dumps(dict(env=env, command=command, checks=checks, determinism=dets,
                                                      bench=rows), indent=1, default=str))
    md = markdown(env, checks, dets, rows, command, prev.get("bench"), prev.get("env"))
    (out / "fa3_bwd.md").write_text(md)
    return md


def join_tables(parts: list[dict], out: Path, prev: dict) -> int:
    """Write fa3_bwd.json / fa3_bwd.md under ``out`` from tables measured in parts (``--join``)."""
    out.mkdir(parents=True, exist_ok=True)
    print(write_table(out, parts[0]["env"], " and ".join(p["command"] for p in parts), [], [],
                      [r for p in parts for r in p["bench"]], prev))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the checks (and unless ``--no-bench`` the benchmark); write fa3_bwd.json / fa3_bwd.md under --out."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness and determinism checks")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--head-dims", default="64,128",
                    help="benchmark rows: comma-separated head dims, d or d x dv (e.g. 64,128,192,256,192x128)")
    ap.add_argument("--only", default="", help="benchmark only these candidates (comma-separated, e.g. fa3,cudnn)")
    ap.add_argument("--rounds", type=int, default=3, help="round-robin rounds per row (the median is kept)")
    ap.add_argument("--previous", default="", help="an earlier fa3_bwd.json: each row's change against it")
    ap.add_argument("--join", nargs="+", default=[], metavar="JSON",
                    help="measure nothing: one table from these fa3_bwd.json files (a table measured in parts, one "
                         "device call each), their rows in order, the first one's environment")
    args = ap.parse_args(argv)
    prev = json.loads(Path(args.previous).read_text()) if args.previous else {}
    if args.join:
        return join_tables([json.loads(Path(j).read_text()) for j in args.join], Path(args.out), prev)
    checks: list[dict] = []
    for i, spec in enumerate([] if args.no_check else FA3_BWD_CASES):
        variants = ["default", "atomic_dq", "other_dq_split", "rows64"]
        runs = [(launcher, v) for v in variants for launcher in ("attn_fa3_bwd", "attn_fa3_bwd_deterministic")]
        runs.append(("attn_fa3_bwd", "atomic_dq_other_overlap"))
        for launcher, variant in runs:
            checks.append(check_backward(spec, launcher, seed=i, variant=variant))
            print(checks[-1], flush=True)
    for i, spec in enumerate([] if args.no_check else FA3_BWD_WIDE_CASES):
        for launcher in ("attn_fa3_bwd", "attn_fa3_bwd_deterministic"):
            for variant in fa3_bwd_wide_variants(spec["d"], spec.get("dv", spec["d"])):
                checks.append(check_backward(spec, launcher, seed=500 + i, variant=variant))
                print(checks[-1], flush=True)
    dets = [] if args.no_check else [check_determinism(s, seed=i, variant=v) for v in ("default", "atomic_dq")
                                     for i, s in enumerate(FA3_BWD_DETERMINISM_CASES)]
    dets += [] if args.no_check else [check_determinism(s, seed=600 + i)
                                      for i, s in enumerate(FA3_BWD_WIDE_DETERMINISM_CASES)]
    print(dets, flush=True)
    if checks or dets:
        nok = sum(c["ok"] for c in checks) + sum(d["ok"] for d in dets)
        print(f"correctness: {nok}/{len(checks) + len(dets)} ok (cases and determinism)", flush=True)
    dims = parse_head_dims(args.head_dims)
    only = frozenset(x for x in args.only.split(",") if x)
    command = "python tools/fa3_bwd_check_bench.py" + (
        " --no-bench" if args.no_bench else "") + (" --no-check" if args.no_check else "") + (
        f" --head-dims {args.head_dims}" if dims != [(64, 64), (128, 128)] else "") + (
        f" --only {args.only}" if only else "") + (f" --rounds {args.rounds}" if args.rounds != 3 else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = env_info()
    shapes = [(4, 16, 8192, d, dv, c) for d, dv in dims for c in (False, True)]

    def write(rows: list[dict]) -> str:
        cut = "" if len(rows) == len(shapes) or args.no_bench else f" (rows so far: {len(rows)} of {len(shapes)})"
        return write_table(out, env, command + cut, checks, dets, rows, prev)

    rows = [] if args.no_bench else bench_rows(shapes, args.rounds, only, row_done=write)
    print(write(rows))
    return 0 if all(c["ok"] for c in checks) and all(d["ok"] for d in dets) else 1


if __name__ == "__main__":
    sys.exit(main())
