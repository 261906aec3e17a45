"""FA3 FP8 forward (kernels/cuda/fa3_fp8_fwd.cu): device correctness against the NumPy FA3 FP8 reference and the
FP64 oracle, and speed beside our BF16 FA3 and the FP8 matmul ceiling (``torch._scaled_mm``).

Correctness (`check_fp8_case`): random inputs are quantized by `oracles.fp8.quantize_attention_inputs`
(SEMANTICS.md §10-§11); the kernel and `kernels/reference/fa3.py:forward_fp8` run on the same codes and descales,
and both are compared with the FP64 oracle on the dequantized inputs. The reference models the kernel's rounding
(P to FP8 with the max offset, same tiles, same key-tile order), so the kernel must agree with it closely and be
no less accurate against the oracle.

    python -m attention_conformance.reports.benchmarks.fa3_fp8_check_bench --check --bench --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

from attention_conformance.kernels import cuda_lib
from attention_conformance.kernels.timing import time_round_robin
from attention_conformance.reports.benchmarks.cuda_fwd_check_bench import env_info, time_fn
from attention_conformance.reports.benchmarks.cudnn_fp8 import CudnnFp8Unavailable, cudnn_fp8

__all__ = ["CHECK_CASES", "FP8_STEP_U", "KMAJOR_VARIANTS", "KMAJOR_VARIANT_D", "KMAJOR_VARIANT_NO_PER_TILE", "PROBES",
           "VARIANTS", "acc_score_error", "bench_rows", "check_fp8_case", "kmajor_variant_applies", "main", "markdown",
           "scaled_mm_row", "variant_call"]

GUARD = 1024
SENTINEL = 1234.5
TORCH_FP8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
#: Relative error of one k32 FP8 wgmma step's running sum. The H200 run of 2026-12-01 (outlier inputs after the
#: Hadamard transform, scores up to 638) deviated from the exactly summing reference by 0.40 in the LSE: what a
#: running sum truncated to ~12 significant bits gives (2^-11 relative), 4x the tolerance policy's rounding model
#: (FP8_ACCUMULATOR_U = 2^-13, whose gamma(d) bound still covers it 3.5x over).
FP8_STEP_U = 2.0**-11

CHECK_CASES = [
    dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=128, granularity="per_tensor"),
    dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=128, granularity="per_head", causal=True),
    dict(B=2, Hq=4, Hkv=2, Lq=300, Lk=260, d=128, granularity="per_tile", causal=True, bottom_right=False),
    dict(B=1, Hq=4, Hkv=1, Lq=256, Lk=512, d=64, granularity="per_tile"),
    dict(B=2, Hq=2, Hkv=2, Lq=150, Lk=390, d=64, granularity="per_head", format="e5m2", causal=True),
    dict(B=2, Hq=4, Hkv=2, Lq=190, Lk=500, d=128, granularity="per_tensor", format="e5m2", window=(50, 20)),
    dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=128, granularity="per_tile", varlen=True, causal=True),
    dict(B=2, Hq=4, Hkv=2, Lq=128, Lk=256, d=64, granularity="per_tensor", softcap=5.0),
    dict(B=2, Hq=4, Hkv=2, Lq=100, Lk=300, d=128, granularity="per_head", layout="bshd", incoherent=True),
    dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=64, granularity="per_tensor"),
    dict(B=1, Hq=2, Hkv=1, Lq=1000, Lk=1000, d=128, granularity="per_tile", outliers=True, incoherent=True),
    # more work tiles (280 of 192 rows) than the H200 has SMs: the persistent builds' CTAs each take several
    dict(B=1, Hq=140, Hkv=70, Lq=300, Lk=260, d=128, granularity="per_head", causal=True),
    # d = 256: 64-key tiles, two per descale block of 128 keys
    dict(B=2, Hq=4, Hkv=2, Lq=300, Lk=333, d=256, granularity="per_tile", causal=True, bottom_right=False),
    dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, d=256, granularity="per_tensor", format="e5m2", window=(50, 20)),
    dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=256, granularity="per_head", varlen=True, causal=True),
    dict(B=1, Hq=2, Hkv=1, Lq=600, Lk=700, d=256, granularity="per_tile", outliers=True, incoherent=True),
]


def _guarded(shape, dtype):
    n = math.prod(shape)
    flat = torch.full((n + 2 * GUARD,), SENTINEL, dtype=dtype, device="cuda")
    view = flat[GUARD:GUARD + n].view(shape)
    view.fill_(float("nan"))
    return flat, view


def _guard_ok(flat) -> bool:
    return bool((flat[:GUARD] == SENTINEL).all() and (flat[-GUARD:] == SENTINEL).all())


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_fp8_case(*, B, Hq, Hkv, Lq, Lk, d, granularity, format="e4m3fn", causal=False, bottom_right=True,
                   window=None, softcap=None, varlen=False, layout="contiguous", incoherent=False, outliers=False,
                   seed=0, variant=None, v_layout="rows") -> dict:
    """One case through ``attn_fa3_fp8_fwd`` (``variant``: through that build of VARIANTS; ``v_layout="kmajor"``:
    V packed by `cuda_lib.pack_vt` first, checked against `cuda_lib.pack_vt_reference`); returns a dict with
    ``ok``, ``problems`` and the error figures."""
    from attention_conformance import oracles
    from attention_conformance.kernels.reference.fa3 import forward_fp8
    from attention_conformance.oracles import fp8

    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) for s in ((B, Hq, Lq, d), (B, Hkv, Lk, d), (B, Hkv, Lk, d)))
    if outliers:  # a few large channels in Q and K, the case incoherent processing is for (SEMANTICS.md §11)
        q[..., :4] *= 20.0
        k[..., :4] *= 20.0
    sq = sk = None
    if varlen:
        sq = [int(x) for x in rng.integers(0, Lq + 1, B)]
        sk = [int(x) for x in rng.integers(0, Lk + 1, B)]
        sq[0], sk[0] = Lq, Lk
    qi = fp8.quantize_attention_inputs(q, k, v, format=format, granularity=granularity, incoherent=incoherent)
    alignment = "bottom_right" if bottom_right else "top_left"
    sem = dict(causal=causal, alignment=alignment, window=window, softcap=softcap, seqlens_q=sq, seqlens_k=sk)

    def dev(x, dtype):
        t = torch.from_numpy(np.ascontiguousarray(x)).to(dtype)
        if layout == "bshd":
            t = t.transpose(1, 2).contiguous().transpose(1, 2)
        return t.cuda()

    tdt = TORCH_FP8[format]
    q8, k8, v8 = dev(qi["q8"], tdt), dev(qi["k8"], tdt), dev(qi["v8"], tdt)
    ds = [torch.from_numpy(np.array(qi[n], dtype=np.float32)).cuda()
          for n in ("q_descale", "k_descale", "v_descale")]
    oflat, o = _guarded((B, Hq, Lq, d), torch.bfloat16)
    lflat, lse = _guarded((B, Hq, Lq), torch.float32)
    before = [t.view(torch.uint8).clone() for t in (q8, k8, v8)]
    lens = {n: (None if x is None else torch.tensor(x, dtype=torch.int32, device="cuda"))
            for n, x in (("seqlens_q", sq), ("seqlens_k", sk))}
    problems = []
    vin = v8
    if v_layout == "kmajor":
        vin = cuda_lib.pack_vt(v8, seqlens_k=lens["seqlens_k"])
        want = cuda_lib.pack_vt_reference(v8.view(torch.uint8).cpu().numpy(), seqlens_k=sk)
        if not np.array_equal(vin.view(torch.uint8).cpu().numpy(), want):
            problems.append("pack_vt differs from pack_vt_reference")
    p = cuda_lib.fp8_fwd_params(q8, k8, vin, o, lse, *ds, format=format, granularity=granularity, causal=causal,
                                alignment=alignment, window=window, softcap=softcap, v_layout=v_layout, **lens)
    if variant is None:
        cuda_lib.call("attn_fa3_fp8_fwd", p)
    else:
        variant_call(p, variant)
    torch.cuda.synchronize()
    # The reference rounds P against the running maxima of the kernel's key tiles: its block_k is the build's key
    # tile (per tile the descale blocks are 128 keys, which the kernel's tiles of 64 or 128 never straddle).
    with cuda_lib.build_setting("ATTN_FA3_FP8_VARIANT", variant):
        block_k = 128 if granularity == "per_tile" else cuda_lib.fp8_key_tile(p)
    ref_o, ref_lse = forward_fp8(qi["q8"], qi["k8"], qi["v8"], qi["q_descale"], qi["k_descale"], qi["v_descale"],
                                 format=format, block_q=128, block_k=block_k, **sem)
    ora_o, ora_lse = oracles.attention(qi["q"], qi["k"], qi["v"], **sem)
    valid = np.ones((B, Hq, Lq), dtype=bool)
    if sq is not None:
        for b, n in enumerate(sq):
            valid[b, :, n:] = False
    ko = o.double().cpu().numpy()
    kl = lse.double().cpu().numpy()
    if not (_guard_ok(oflat) and _guard_ok(lflat)):
        problems.append("guard band changed (out-of-bounds write)")
    if any(not torch.equal(t.view(torch.uint8), b) for t, b in zip((q8, k8, v8), before)):
        problems.append("inputs mutated")
    if np.isnan(ko[valid]).any() or np.isnan(kl[valid]).any():
        problems.append(f"{int(np.isnan(ko[valid]).any(-1).sum())} real rows unwritten / NaN")
    if (~valid).any() and not np.isnan(ko[~valid]).all():
        problems.append("padded rows written")
    kv, rv, ov = ko[valid], np.asarray(ref_o)[valid], ora_o[valid]
    err_ref = _rel(kv, rv)  # kernel vs the reference on the same codes
    max_ref = float(np.abs(kv - rv).max() / max(np.abs(rv).max(), 1e-30)) if kv.size else 0.0
    err_kernel = _rel(kv, ov)
    err_numpy = _rel(rv, ov)
    # The reference sums Q K^T exactly; the FP8 tensor cores truncate the running sum (FP8_STEP_U), so each
    # score may be off by u * sum_c |q_c k_c| per k32 step (natural units).
    s_err = acc_score_error(qi, B, Hq, Hkv, Lq, Lk, d)[valid]  # per row: the largest over its keys
    # A score error e moves a row's output by about e relative (exactly so for a one-hot softmax row).
    o_allow = float(np.sqrt(np.mean(s_err**2))) if s_err.size else 0.0
    if not err_ref <= 2e-2 + o_allow:
        problems.append(f"rel err vs reference {err_ref:.3e} > 2e-2 + {o_allow:.1e} (accumulator)")
    if not err_kernel <= 1.25 * err_numpy + 2e-3 + o_allow:
        problems.append(f"rel err vs oracle {err_kernel:.3e} > 1.25 x the reference's {err_numpy:.3e} + 2e-3 "
                        f"+ {o_allow:.1e} (accumulator)")
    lr, lk = np.asarray(ref_lse, dtype=np.float64)[valid], kl[valid]
    if (np.isinf(lr) != np.isinf(lk)).any():
        problems.append(f"{int((np.isinf(lr) != np.isinf(lk)).sum())} LSE -inf mismatches")
    fin = np.isfinite(lr) & np.isfinite(lk)
    lse_dev = np.abs(lr[fin] - lk[fin])
    lse_err = float(lse_dev.max()) if fin.any() else 0.0
    worst = float((lse_dev / (2e-3 + s_err[fin])).max()) if fin.any() else 0.0
    if worst > 1.0:
        problems.append(f"lse max err vs reference {lse_err:.3e}: {worst:.2f} x its bound 2e-3 + accumulator error")
    name = (f"fp8 {format} {granularity} B{B} H{Hq}/{Hkv} q{Lq} k{Lk} d{d}"
            + (" causal" + ("BR" if bottom_right else "TL") if causal else "") + (f" win{window}" if window else "")
            + (f" cap{softcap}" if softcap else "") + (" varlen" if varlen else "")
            + (f" {layout}" if layout != "contiguous" else "") + (" had" if incoherent else "")
            + (" outliers" if outliers else "") + (f" [{variant}]" if variant else "")
            + (" vt-kmajor" if v_layout == "kmajor" else ""))
    return dict(case=name, ok=not problems, problems=problems, rel_err_vs_reference=err_ref,
                max_err_vs_reference=max_ref, rel_err_vs_oracle=err_kernel, reference_rel_err_vs_oracle=err_numpy,
                lse_err_vs_reference=lse_err)


def acc_score_error(qi: dict, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int) -> np.ndarray:
    """[B, Hq, Lq]: per query row, the largest score error over its keys that FP8 tensor-core accumulation allows,
    ``(d / 32) FP8_STEP_U scale dq_i dk_j sum_c |q_ic| |k_jc|`` (one truncation of the running sum per k32 wgmma
    step), in natural-log units; 0 where there is no key."""
    from attention_conformance.kernels.reference.fa3 import expand_descale

    out = np.zeros((B, Hq, Lq))
    if Lk == 0:
        return out
    dq = expand_descale(qi["q_descale"], B, Hq, Hkv, Lq, 128).astype(np.float64)
    dk = expand_descale(qi["k_descale"], B, Hkv, Hkv, Lk, 128).astype(np.float64)
    q8, k8 = (np.abs(np.asarray(qi[n], dtype=np.float64)) for n in ("q8", "k8"))
    for b in range(B):
        for h in range(Hq):
            hk = h // (Hq // Hkv)
            sig = (q8[b, h] @ k8[b, hk].T) * dq[b, h][:, None] * dk[b, hk][None, :]
            out[b, h] = sig.max(axis=1)
    return out * (d / 32) * FP8_STEP_U / math.sqrt(d)


def scaled_mm_row(n: int = 8192) -> dict:
    """``torch._scaled_mm`` n^3 e4m3 -> bf16: the FP8 matmul ceiling."""
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    ms = time_fn(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))[0]
    return dict(kind="scaled_mm", n=n, ms=ms, tflops=2 * n**3 / ms / 1e9)


#: FP8 builds beside the default (ATTN_FA3_FP8_VARIANT, kernels/cuda/fa3_fp8_fwd.cu; e4m3, d = 128), each changing one
#: thing of it, and the timing probes (each leaves one stage out: wrong results by design)
VARIANTS = ("smem_q", "narrow_transpose", "no_fold")
PROBES = ("no_transpose", "no_exp", "no_pv")
#: builds of the V k-major path beside its default (ATTN_FA3_FP8_VARIANT with v_layout="kmajor"): the key tiles of
#: the V-as-rows builds (128; 64 at d = 256, where the default has 128) with two consumer warpgroups, and at d = 64 /
#: 128 the two-warpgroup builds with 256 / 192-key tiles (the defaults have three warpgroups and 128-key tiles), and
#: at d = 128 that build with the exponentials of every fourth / second 8-key chunk on the FMA pipe (the default: none),
#: the default of each head dim with the persistent loop (#SMs CTAs taking work tiles from a counter; d = 64's default
#: itself since session 23), and at d = 64 the three-warpgroup build with one CTA per work tile (its default before)
KMAJOR_VARIANTS = ("row_tiles", "two_wg", "exp_poly4", "exp_poly2", "persistent", "one_cta_per_tile")
#: the head dims a k-major variant is built for (absent: every head dim)
KMAJOR_VARIANT_D = {"two_wg": (64, 128), "exp_poly4": (128,), "exp_poly2": (128,), "one_cta_per_tile": (64,)}
#: k-major variants built for per-tensor / per-head descales only (their 192 / 256-key tiles straddle per-tile blocks)
KMAJOR_VARIANT_NO_PER_TILE = ("two_wg", "exp_poly4", "exp_poly2")


def kmajor_variant_applies(variant: str, d: int, granularity: str) -> bool:
    """Whether attn_fa3_fp8_fwd has the k-major build ``variant`` for head dim ``d`` and ``granularity``."""
    return (d in KMAJOR_VARIANT_D.get(variant, (d,))
            and not (granularity == "per_tile" and variant in KMAJOR_VARIANT_NO_PER_TILE))


def variant_call(p, variant: str) -> None:
    """attn_fa3_fp8_fwd on params ``p`` through the build ``variant`` (a member of VARIANTS or PROBES)."""
    with cuda_lib.build_setting("ATTN_FA3_FP8_VARIANT", variant):
        cuda_lib.call("attn_fa3_fp8_fwd", p)


def bench_rows(shapes, rounds: int = 3, probes: bool = False) -> list[dict]:
    """FP8 (each granularity) and BF16 FA3 on the same shapes, and cuDNN's FP8 forward on the same codes where
    cudnn-frontend imports (``cudnn_fp8``; ``cudnn_fp8_declined``: why not), timed round-robin ``rounds`` times
    (median kept); ``probes``: also the `PROBES` builds (per-tensor descales) on the d = 128 shapes."""
    rows = []
    for B, H, N, d, causal in shapes:
        x = [torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        o = torch.empty_like(x[0])
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        pb = cuda_lib.fwd_params(*x, o, lse, causal=causal)
        cands = [("bf16", lambda p=pb: cuda_lib.call("attn_fa3_fwd", p))]
        x8 = [t.to(torch.float8_e4m3fn) for t in x]
        row = dict(kind="attention", B=B, H=H, N=N, d=d, causal=causal)
        try:
            c8 = cudnn_fp8(*x8, causal)
            cands.append(("cudnn_fp8", c8.run))
            row["cudnn_fp8_o"] = c8.o_dtype
        except CudnnFp8Unavailable as e:
            row["cudnn_fp8_declined"] = str(e)
        for gran, shp in (("per_tensor", ((),) * 3), ("per_head", ((B, H),) * 3),
                          ("per_tile", ((B, H, -(-N // 128)),) * 3)):
            ds = [torch.ones(s, device="cuda") for s in shp]
            p = cuda_lib.fp8_fwd_params(*x8, o, lse, *ds, format="e4m3fn", granularity=gran, causal=causal)
            cands.append(("fp8_" + gran, lambda p=p: cuda_lib.call("attn_fa3_fp8_fwd", p)))
            vt = cuda_lib.pack_vt(x8[2])
            pk = cuda_lib.fp8_fwd_params(x8[0], x8[1], vt, o, lse, *ds, format="e4m3fn", granularity=gran,
                                         causal=causal, v_layout="kmajor")
            cands.append(("fp8kmajor_" + gran, lambda p=pk: cuda_lib.call("attn_fa3_fp8_fwd", p)))
            if gran == "per_tensor":
                cands += [(f"fp8kmajor_{v}_{gran}", lambda p=pk, v=v: variant_call(p, v)) for v in KMAJOR_VARIANTS
                          if kmajor_variant_applies(v, d, gran)]
            if d == 128:
                cands += [(f"fp8_{v}_{gran}", lambda p=p, v=v: variant_call(p, v)) for v in VARIANTS]
            if probes and d == 128 and gran == "per_tensor":
                cands += [("fp8_probe_" + pr, lambda p=p, pr=pr: variant_call(p, pr)) for pr in PROBES]
        flops = 4 * B * H * N * N * d / (2 if causal else 1)
        time_round_robin(row, cands, flops, rounds)
        row["fp8_over_bf16"] = row["bf16_ms"] / row["fp8_per_tensor_ms"]
        row["fp8kmajor_over_bf16"] = row["bf16_ms"] / row["fp8kmajor_per_tensor_ms"]
        row["pack_vt_ms"] = time_fn(lambda v=x8[2]: cuda_lib.pack_vt(v))[0]
        rows.append(row)
    return rows


def markdown(env: dict, checks: list[dict], rows: list[dict], command: str) -> str:
    out = [f"# FA3 FP8 forward on {env.get('gpu', '?')}", "",
           f"Date {env.get('date')}; driver {env.get('driver')}; CUDA {env.get('cuda')}; torch {env.get('torch')}.", "",
           f"Reproduce: `{command}`", ""]
    if checks:
        out += [f"Correctness: {sum(c['ok'] for c in checks)}/{len(checks)} cases OK "
                "(kernel vs `forward_fp8` on the same codes; kernel and reference vs the FP64 oracle).", "",
                "| case | ok | rel err vs reference | max err vs reference | kernel vs oracle | reference vs oracle |",
                "|---|---|---|---|---|---|"]
        for c in checks:
            out.append(f"| {c['case']} | {'OK' if c['ok'] else 'FAIL: ' + '; '.join(c['problems'])} | "
                       f"{c.get('rel_err_vs_reference', float('nan')):.2e} | "
                       f"{c.get('max_err_vs_reference', float('nan')):.2e} | "
                       f"{c.get('rel_err_vs_oracle', float('nan')):.2e} | "
                       f"{c.get('reference_rel_err_vs_oracle', float('nan')):.2e} |")
        out.append("")
    att = [r for r in rows if r["kind"] == "attention"]
    if att:
        out += ["TFLOPs/s (e4m3 codes; the FLOP count is 4 B H N^2 d, halved when causal). V as rows: the kernel "
                "transposes V in shared memory; V k-major: `pack_vt` wrote it transposed beforehand (its time, one "
                "pass over V, in the pack_vt column, not in the kernel's figure):", "",
                "| B | H | N | d | causal | BF16 FA3 | FP8 per tensor | FP8 per head | FP8 per tile | FP8 / BF16 "
                "| V k-major: per tensor | per head | per tile | / BF16 | pack_vt ms | cuDNN FP8 "
                "| k-major / cuDNN FP8 |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        probe_rows = [r for r in att if any(k.startswith("fp8_probe_") for k in r)]
        var_rows = [r for r in att if any(f"fp8_{v}_per_tensor_tflops" in r for v in VARIANTS)]
        for r in att:
            out.append(f"| {r['B']} | {r['H']} | {r['N']} | {r['d']} | {r['causal']} | {r['bf16_tflops']:.0f} | "
                       f"{r['fp8_per_tensor_tflops']:.0f} | {r['fp8_per_head_tflops']:.0f} | "
                       f"{r['fp8_per_tile_tflops']:.0f} | {r['fp8_over_bf16']:.2f} | "
                       f"{r['fp8kmajor_per_tensor_tflops']:.0f} | {r['fp8kmajor_per_head_tflops']:.0f} | "
                       f"{r['fp8kmajor_per_tile_tflops']:.0f} | {r['fp8kmajor_over_bf16']:.2f} | "
                       f"{r['pack_vt_ms']:.3f} | " + (
                           f"{r['cudnn_fp8_tflops']:.0f} | {r['cudnn_fp8_ms'] / r['fp8kmajor_per_tensor_ms']:.2f} |"
                           if "cudnn_fp8_tflops" in r else "- | - |"))
        out.append("")
        c8 = sorted({r["cudnn_fp8_o"] for r in att if "cudnn_fp8_o" in r})
        declined = sorted({r["cudnn_fp8_declined"] for r in att if "cudnn_fp8_declined" in r})
        if c8:
            out += [f"cuDNN FP8: cuDNN's own FP8 forward on the same codes (`cudnn_fp8.py`, per-tensor descales of 1), "
                    f"{', '.join(c8)} output.", ""]
        out += [f"cuDNN FP8 not timed: {x}" for x in declined] + ([""] if declined else [])
        if var_rows:
            out += ["Variant builds (TFLOPs/s; ATTN_FA3_FP8_VARIANT):", "",
                    "| d | causal | default per tensor | " + " | ".join(f"{v} {g}" for v in VARIANTS
                                                                    for g in ("per tensor", "per head", "per tile"))
                    + " |", "|---|---|---|" + "---|" * (3 * len(VARIANTS))]
            for r in var_rows:
                cells = [f"{r.get(f'fp8_{v}_{g}_tflops', float('nan')):.0f}" for v in VARIANTS
                         for g in ("per_tensor", "per_head", "per_tile")]
                out.append(f"| {r['d']} | {r['causal']} | {r['fp8_per_tensor_tflops']:.0f} | " + " | ".join(cells)
                           + " |")
            out.append("")
        kv_rows = [r for r in att if any(f"fp8kmajor_{v}_per_tensor_tflops" in r for v in KMAJOR_VARIANTS)]
        if kv_rows:
            out += ["V k-major builds (TFLOPs/s, per-tensor descales; ATTN_FA3_FP8_VARIANT with v_layout=\"kmajor\"):",
                    "", "| d | causal | default | " + " | ".join(KMAJOR_VARIANTS) + " |",
                    "|---|---|---|" + "---|" * len(KMAJOR_VARIANTS)]
            for r in kv_rows:
                cells = [f"{r[f'fp8kmajor_{v}_per_tensor_tflops']:.0f}" if f"fp8kmajor_{v}_per_tensor_tflops" in r
                         else "-" for v in KMAJOR_VARIANTS]
                out.append(f"| {r['d']} | {r['causal']} | {r['fp8kmajor_per_tensor_tflops']:.0f} | "
                           + " | ".join(cells) + " |")
            out.append("")
        if probe_rows:
            out += ["Timing probes (per-tensor descales; each build leaves one stage out, results wrong by design): "
                    "ms, and the share of the full kernel's time the stage costs.", "",
                    "| d | causal | full ms | " + " | ".join(f"{pr} ms (share)" for pr in PROBES) + " |",
                    "|---|---|---|" + "---|" * len(PROBES)]
            for r in probe_rows:
                full = r["fp8_per_tensor_ms"]
                cells = [f"{r['fp8_probe_' + pr + '_ms']:.3f} ({1 - r['fp8_probe_' + pr + '_ms'] / full:.0%})"
                         if "fp8_probe_" + pr + "_ms" in r else "-" for pr in PROBES]
                out.append(f"| {r['d']} | {r['causal']} | {full:.3f} | " + " | ".join(cells) + " |")
            out.append("")
    for r in rows:
        if r["kind"] == "scaled_mm":
            out.append(f"FP8 matmul ceiling: `torch._scaled_mm` {r['n']}^3 e4m3 -> bf16: {r['tflops']:.0f} TFLOPs/s.")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="device correctness cases (CHECK_CASES)")
    ap.add_argument("--bench", action="store_true", help="B=4 H=16 N=8192 d in {64, 128, 256}, causal and not")
    ap.add_argument("--probes", action="store_true", help="--bench: also the timing probes (PROBES) at d = 128")
    ap.add_argument("--out", type=Path, default=None, help="directory for fa3_fp8.json and fa3_fp8.md")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("fa3_fp8_check_bench: needs a CUDA device", file=sys.stderr)
        return 2
    env = env_info()
    checks = []
    if args.check:
        runs = [(i, c, v, "rows") for v in (None, *VARIANTS) for i, c in enumerate(CHECK_CASES)
                if v is None or (c["d"] == 128 and c.get("format", "e4m3fn") == "e4m3fn")]
        runs += [(i, c, v, "kmajor") for v in (None, *KMAJOR_VARIANTS) for i, c in enumerate(CHECK_CASES)
                 if v is None or kmajor_variant_applies(v, c["d"], c["granularity"])]
        for i, c, v, layout in runs:
            try:
                r = check_fp8_case(seed=i, variant=v, v_layout=layout, **c)
            except Exception as e:  # a launcher error is a failed case, reported with its message
                r = dict(case=repr(c), ok=False, problems=[f"{type(e).__name__}: {e}"])
            checks.append(r)
            print(("OK  " if r["ok"] else "FAIL") + f" {r['case']} {r.get('rel_err_vs_reference', float('nan')):.2e}"
                  f" {'; '.join(r['problems'])}", flush=True)
    rows = []
    if args.bench:
        shapes = [(4, 16, 8192, d, c) for d in (128, 256, 64) for c in (False, True)]
        rows = bench_rows(shapes, probes=args.probes)
        rows.append(scaled_mm_row())
        for r in rows:
            print(json.dumps(r), flush=True)
    command = "python -m attention_conformance.reports.benchmarks.fa3_fp8_check_bench " + " ".join(argv or sys.argv[1:])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fa3_fp8.json").write_text(json.dumps(dict(env=env, command=command, checks=checks, rows=rows),
                                                          indent=1))
        (args.out / "fa3_fp8.md").write_text(markdown(env, checks, rows, command))
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
