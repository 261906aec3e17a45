"""FA3 FP8 forward (kernels/cuda/fa3_fp8_fwd.cu): device correctness and speed beside our BF16 FA3, cuDNN's FP8
forward and the FP8 matmul ceiling (``torch._scaled_mm``) (lab script).

Correctness: every case of `attention_conformance.kernels.check.cases.FP8_CASES` through the default build and its
variants (`attention_conformance.kernels.check.fp8.check_fp8`: the conformance judge's verdict against the FP64
oracle on the dequantized inputs, and the agreement with the NumPy FA3 FP8 model on the same codes).

    python tools/fa3_fp8_check_bench.py --check --bench --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from cuda_fwd_check_bench import env_info, time_fn
from timing_md import TIMING_NOTE, env_line, host_table

from attention_conformance.adapters.cudnn_fp8_timed import CudnnFp8Unavailable, cudnn_fp8
from attention_conformance.kernels import cuda_lib
from attention_conformance.kernels.check.cases import FP8_CASES
from attention_conformance.kernels.check.fp8 import check_fp8
from attention_conformance.kernels.timing import time_round_robin

__all__ = ["KMAJOR_VARIANTS", "KMAJOR_VARIANT_D", "KMAJOR_VARIANT_NO_PER_TILE", "PROBES", "VARIANTS", "bench_rows",
           "kmajor_variant_applies", "main", "markdown", "scaled_mm_row", "variant_call"]


def scaled_mm_row(n: int = 8192) -> dict:
    """``torch._scaled_mm`` n^3 e4m3 -> bf16: the FP8 matmul ceiling."""
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    ms = time_fn(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))[0]
    return dict(kind="scaled_mm", n=n, ms=ms, tflops=2 * n**3 / ms / 1e9)


#: FP8 builds beside the default (lab FP8_VARIANTS, kernels/cuda/fa3_fp8_fwd.cu; e4m3, d = 128), each changing one
#: thing of it, and the timing probes (each leaves one stage out: wrong results by design)
VARIANTS = ("smem_q", "narrow_transpose", "no_fold")
PROBES = ("no_transpose", "no_exp", "no_pv")
#: builds of the V k-major path beside its default (lab FP8_VARIANTS with v_layout="kmajor"): the key tiles of
#: the V-as-rows builds (128; 64 at d = 256, where the default has 128) with two consumer warpgroups, and at d = 64 /
#: 128 the two-warpgroup builds with 256 / 192-key tiles (the defaults have three warpgroups and 128-key tiles), and
#: at d = 128 that build with the exponentials of every fourth / second 8-key chunk on the FMA pipe (the default: none),
#: the default of each head dim with the persistent loop (#SMs CTAs taking work tiles from a counter; d = 64's default
#: itself), and at d = 64 the three-warpgroup build with one CTA per work tile (docs/fp8.md)
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
    from attention_conformance.kernels.cuda import lab

    lab.call_fp8_fwd(p, variant)


def bench_rows(shapes, rounds: int = 3, probes: bool = False, row_done=None) -> list[dict]:
    """FP8 (each granularity) and BF16 FA3 on the same shapes, and cuDNN's FP8 forward on the same codes where
    cudnn-frontend imports (``cudnn_fp8``; ``cudnn_fp8_declined``: why not), timed round-robin ``rounds`` times
    (median kept); ``probes``: also the `PROBES` builds (per-tensor descales) on the d = 128 shapes;
    `row_done(rows so far)` after each row."""
    rows = []
    for B, H, N, d, causal in shapes:
        x = [torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        o = torch.empty_like(x[0])
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        pb = cuda_lib.fwd_params(*x, o, lse, causal=causal)
        cands = [("bf16", cuda_lib.bind("attn_fa3_fwd", pb))]
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
            cands.append(("fp8_" + gran, cuda_lib.bind("attn_fa3_fp8_fwd", p)))
            vt = cuda_lib.pack_vt(x8[2])
            pk = cuda_lib.fp8_fwd_params(x8[0], x8[1], vt, o, lse, *ds, format="e4m3fn", granularity=gran,
                                         causal=causal, v_layout="kmajor")
            cands.append(("fp8kmajor_" + gran, cuda_lib.bind("attn_fa3_fp8_fwd", pk)))
            if gran == "per_tensor":
                cands += [(f"fp8kmajor_{v}_{gran}", lambda p=pk, v=v: variant_call(p, v)) for v in KMAJOR_VARIANTS
                          if kmajor_variant_applies(v, d, gran)]
            if d == 128:
                cands += [(f"fp8_{v}_{gran}", lambda p=p, v=v: variant_call(p, v)) for v in VARIANTS]
            if probes and d == 128 and gran == "per_tensor":
                cands += [("fp8_probe_" + pr, lambda p=p, pr=pr: variant_call(p, pr)) for pr in PROBES]
        flops = 4 * B * H * N * N * d / (2 if causal else 1)
        time_round_robin(row, cands, flops, rounds)
        nan = float("nan")
        row["fp8_over_bf16"] = row.get("bf16_ms", nan) / row.get("fp8_per_tensor_ms", nan)
        row["fp8kmajor_over_bf16"] = row.get("bf16_ms", nan) / row.get("fp8kmajor_per_tensor_ms", nan)
        row["pack_vt_ms"] = time_fn(lambda v=x8[2]: cuda_lib.pack_vt(v))[0]
        rows.append(row)
        print(json.dumps(row), flush=True)
        if row_done is not None:
            row_done(rows)
    return rows


def markdown(env: dict, checks: list[dict], rows: list[dict], command: str) -> str:
    nan = float("nan")
    out = [f"# FA3 FP8 forward on {env.get('gpu', '?')}", "",
           env_line(env), "",
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
        out += [TIMING_NOTE, ""]
        out += host_table(att, lambda r: f"d{r['d']} {'causal' if r['causal'] else ''}")
        out += ["TFLOPs/s (e4m3 codes; the FLOP count is 4 B H N^2 d, halved when causal). V as rows: the kernel "
                "transposes V in shared memory; V k-major: `pack_vt` wrote it transposed beforehand (its time, one "
                "pass over V, in the pack_vt column, not in the kernel's figure):", "",
                "| B | H | N | d | causal | BF16 FA3 | FP8 per tensor | FP8 per head | FP8 per tile | FP8 / BF16 "
                "| V k-major: per tensor | per head | per tile | / BF16 | pack_vt ms | cuDNN FP8 "
                "| k-major / cuDNN FP8 |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        probe_rows = [r for r in att if any(k.startswith("fp8_probe_") for k in r)]
        var_rows = [r for r in att if any(f"fp8_{v}_per_tensor_tflops" in r for v in VARIANTS)]

        def g(r: dict, key: str, fmt: str = ".0f") -> str:
            return format(r.get(key, nan), fmt)

        for r in att:
            over_cudnn = r.get("cudnn_fp8_ms", nan) / r.get("fp8kmajor_per_tensor_ms", nan)
            out.append(f"| {r['B']} | {r['H']} | {r['N']} | {r['d']} | {r['causal']} | {g(r, 'bf16_tflops')} | "
                       f"{g(r, 'fp8_per_tensor_tflops')} | {g(r, 'fp8_per_head_tflops')} | "
                       f"{g(r, 'fp8_per_tile_tflops')} | {g(r, 'fp8_over_bf16', '.2f')} | "
                       f"{g(r, 'fp8kmajor_per_tensor_tflops')} | "
                       f"{g(r, 'fp8kmajor_per_head_tflops')} | {g(r, 'fp8kmajor_per_tile_tflops')} | "
                       f"{g(r, 'fp8kmajor_over_bf16', '.2f')} | {g(r, 'pack_vt_ms', '.3f')} | "
                       + (f"{g(r, 'cudnn_fp8_tflops')} | {over_cudnn:.2f} |" if "cudnn_fp8_tflops" in r else "- | - |"))
        out.append("")
        c8 = sorted({r["cudnn_fp8_o"] for r in att if "cudnn_fp8_o" in r})
        declined = sorted({r["cudnn_fp8_declined"] for r in att if "cudnn_fp8_declined" in r})
        if c8:
            out += [f"cuDNN FP8: cuDNN's own FP8 forward on the same codes (`cudnn_fp8.py`, per-tensor descales of 1), "
                    f"{', '.join(c8)} output.", ""]
        out += [f"cuDNN FP8 not timed: {x}" for x in declined] + ([""] if declined else [])
        if var_rows:
            out += ["Variant builds (TFLOPs/s; lab FP8_VARIANTS):", "",
                    "| d | causal | default per tensor | " + " | ".join(f"{v} {g}" for v in VARIANTS
                                                                    for g in ("per tensor", "per head", "per tile"))
                    + " |", "|---|---|---|" + "---|" * (3 * len(VARIANTS))]
            for r in var_rows:
                cells = [f"{r.get(f'fp8_{v}_{g}_tflops', float('nan')):.0f}" for v in VARIANTS
                         for g in ("per_tensor", "per_head", "per_tile")]
                out.append(f"| {r['d']} | {r['causal']} | {r.get('fp8_per_tensor_tflops', nan):.0f} | "
                           + " | ".join(cells) + " |")
            out.append("")
        kv_rows = [r for r in att if any(f"fp8kmajor_{v}_per_tensor_tflops" in r for v in KMAJOR_VARIANTS)]
        if kv_rows:
            out += ["V k-major builds (TFLOPs/s, per-tensor descales; lab FP8_VARIANTS with v_layout=\"kmajor\"):",
                    "", "| d | causal | default | " + " | ".join(KMAJOR_VARIANTS) + " |",
                    "|---|---|---|" + "---|" * len(KMAJOR_VARIANTS)]
            for r in kv_rows:
                cells = [f"{r[f'fp8kmajor_{v}_per_tensor_tflops']:.0f}" if f"fp8kmajor_{v}_per_tensor_tflops" in r
                         else "-" for v in KMAJOR_VARIANTS]
                out.append(f"| {r['d']} | {r['causal']} | {r.get('fp8kmajor_per_tensor_tflops', nan):.0f} | "
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
    ap.add_argument("--check", action="store_true", help="device correctness cases (kernels.check.cases.FP8_CASES)")
    ap.add_argument("--bench", action="store_true", help="B=4 H=16 N=8192 for each --head-dims, causal and not")
    ap.add_argument("--head-dims", default="128,256,64,96,192", help="--bench rows: comma-separated d")
    ap.add_argument("--probes", action="store_true", help="--bench: also the timing probes (PROBES) at d = 128")
    ap.add_argument("--out", type=Path, default=None, help="directory for fa3_fp8.json and fa3_fp8.md")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("fa3_fp8_check_bench: needs a CUDA device", file=sys.stderr)
        return 2
    env = env_info()
    checks = []
    if args.check:
        runs = [(i, c, v, "rows") for v in (None, *VARIANTS) for i, c in enumerate(FP8_CASES)
                if v is None or (c["d"] == 128 and c.get("format", "e4m3fn") == "e4m3fn")]
        runs += [(i, c, v, "kmajor") for v in (None, *KMAJOR_VARIANTS) for i, c in enumerate(FP8_CASES)
                 if v is None or kmajor_variant_applies(v, c["d"], c["granularity"])]
        for i, c, v, layout in runs:
            try:
                r = check_fp8(seed=i, variant=v, v_layout=layout, **c)
            except Exception as e:  # a launcher error is a failed case, reported with its message
                r = dict(case=repr(c), ok=False, problems=[f"{type(e).__name__}: {e}"])
            checks.append(r)
            print(("OK  " if r["ok"] else "FAIL") + f" {r['case']} {r.get('rel_err_vs_reference', float('nan')):.2e}"
                  f" {'; '.join(r['problems'])}", flush=True)
    command = "python tools/fa3_fp8_check_bench.py " + " ".join(argv or sys.argv[1:])

    def write(rows: list[dict]) -> None:
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "fa3_fp8.json").write_text(json.dumps(dict(env=env, command=command, checks=checks,
                                                                   rows=rows), indent=1))
            (args.out / "fa3_fp8.md").write_text(markdown(env, checks, rows, command))

    rows = []
    if args.bench:
        shapes = [(4, 16, 8192, int(d), c) for d in args.head_dims.split(",") for c in (False, True)]
        rows = bench_rows(shapes, probes=args.probes, row_done=write)
        rows.append(scaled_mm_row())
    write(rows)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
