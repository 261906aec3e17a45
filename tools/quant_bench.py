"""Time the FP8 input kernels on the GPU: the Hadamard transform alone, FP8 quantization alone, and both fused.

    python tools/quant_bench.py [--out DIR] [--batch 4 --heads 16 --seqlen 8192
        --headdim 128] [--reps 20]

Inputs: bf16 Q, K, V [B, H, N, d], N(0, 1) plus N(0, 10^2) on 0.1% of entries (FA3 Table 3's distribution).
Kernels: kernels/cuda/hadamard.cu through kernels/cuda_quant.py (float64 arithmetic, bit-compatible with
oracles/fp8.py, SEMANTICS.md §10-§11). Rows, each the median of ``--reps`` CUDA-event samples after warm-up
(`kernels.timing`):

- Hadamard alone: x M on Q and on K, bf16 in and out;
- quantization alone: e4m3fn codes and descales of Q, K, V, per granularity, no transform;
- fused: Hadamard on Q and K inside the quantizer, V quantized plain (`cuda_quant.quantize_attention_inputs`
  with ``incoherent=True``), per granularity;
- a device-to-device copy of Q, K, V (torch ``copy_``) as the bandwidth reference.

GB/s counts the minimum traffic: every input element read once (2 bytes) and every output written once
(2 bytes for the transform, 1 byte for a code), descales ignored. The per-tensor and per-head quantizers read
their input twice (an amax pass, then the quantization pass), so their DRAM traffic is higher than counted.
A spot check compares the codes of (batch 0, head 0) of every fused run with `oracles.fp8` (per tile only:
tiles are independent, so a slice is exact; per tensor / per head need the whole tensor and are covered by
tests/kernels/test_cuda_quant_device.py). Writes quant_time.json and quant_time.md into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from timing_md import env_line

__all__ = ["main", "measure", "render"]

GRANULARITIES = ("per_tensor", "per_head", "per_tile")
FP8_FWD_TFLOPS = 1100.0  # issue target for the FP8 forward at d = 128, non-causal: a scale for the share column


def _inputs(B: int, H: int, N: int, d: int, seed: int = 0) -> list[Any]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(3):
        x = torch.randn(B, H, N, d, device="cuda", generator=g)
        hit = torch.rand(B, H, N, d, device="cuda", generator=g) < 1e-3
        x += torch.where(hit, 10.0 * torch.randn(B, H, N, d, device="cuda", generator=g), 0.0)
        out.append(x.to(torch.bfloat16))
        del x, hit
    return out


def _spot_check(res: dict[str, Any], q: Any, k: Any, v: Any, tile: int, seed: int) -> int:
    """Codes of (batch 0, head 0) that differ from `oracles.fp8` (per-tile runs only; -1 = not checked)."""
    from attention_conformance.oracles import fp8

    if res["granularity"] != "per_tile":
        return -1
    sl = [t[:1, :1].double().cpu().numpy() for t in (q, k, v)]
    ref = fp8.quantize_attention_inputs(*sl, granularity="per_tile", tile_q=tile, tile_k=tile, incoherent=True,
                                        seed=seed)
    bad = 0
    for n in "qkv":
        got = res[f"{n}8"][:1, :1].cpu().double().numpy()
        bad += int(np.sum(~((got == ref[f"{n}8"]) | (np.isnan(got) & np.isnan(ref[f"{n}8"])))))
    return bad


def measure(B: int = 4, H: int = 16, N: int = 8192, d: int = 128, reps: int = 20, seed: int = 0,
            tile: int = 128) -> list[dict[str, Any]]:
    """One row per measurement: name, granularity, ms (median), us, bytes (minimum traffic), GB/s."""
    import torch

    from attention_conformance.kernels import cuda_quant
    from attention_conformance.kernels.timing import cuda_event_median_ms
    from attention_conformance.oracles import fp8

    q, k, v = _inputs(B, H, N, d, seed)
    n = q.numel()
    signs = fp8.hadamard_signs(d, seed)
    rows: list[dict[str, Any]] = []

    def add(name: str, granularity: str | None, fn, nbytes: int, **extra: Any) -> None:
        ms = cuda_event_median_ms(fn, reps=reps, warmup=3)
        rows.append(dict(name=name, granularity=granularity, ms=ms, us=1e3 * ms, bytes=nbytes,
                         GBps=nbytes / (ms * 1e-3) / 1e9, **extra))

    dst = [torch.empty_like(t) for t in (q, k, v)]
    add("copy Q, K, V (torch copy_)", None, lambda: [a.copy_(b) for a, b in zip(dst, (q, k, v))], 3 * n * 4)
    dst.clear()
    add("Hadamard alone: Q and K (bf16 -> bf16)", None,
        lambda: (cuda_quant.hadamard(q, signs), cuda_quant.hadamard(k, signs)), 2 * n * 4)
    for g in GRANULARITIES:
        kw = dict(format="e4m3fn", granularity=g, tile=tile)
        add("quantization alone: Q, K, V", g,
            lambda kw=kw: [cuda_quant.quantize(t, **kw) for t in (q, k, v)], 3 * n * 3)
    for g in GRANULARITIES:
        kw = dict(format="e4m3fn", granularity=g, tile_q=tile, tile_k=tile, incoherent=True, seed=seed)
        add("fused: Hadamard on Q, K + quantization of Q, K, V", g,
            lambda kw=kw: cuda_quant.quantize_attention_inputs(q, k, v, **kw), 3 * n * 3,
            spot_check_mismatches=_spot_check(cuda_quant.quantize_attention_inputs(q, k, v, **kw), q, k, v,
                                              tile, seed))
    fwd_ms = 4.0 * B * H * N * N * d / (FP8_FWD_TFLOPS * 1e12) * 1e3
    for r in rows:
        r["share_of_fp8_fwd"] = r["ms"] / fwd_ms
    return rows


def render(rep: dict[str, Any]) -> str:
    env, cfg = rep["env"], rep["config"]
    lines = [
        f"# FP8 input kernels on the {env['gpu']}: Hadamard, quantization, fused",
        "",
        "- " + env_line(env, f"Python {env['python']}"),
        "",
        f"- Command: `{rep['command']}`",
        "",
        f"Shape B={cfg['B']}, H={cfg['H']}, N={cfg['N']}, d={cfg['d']}, bf16 Q/K/V (FA3 Table 3's outlier "
        f"distribution), e4m3fn, {cfg['tile']}-row tiles; median of {cfg['reps']} CUDA-event samples. GB/s counts "
        "the minimum traffic (inputs read once, outputs written once); the per-tensor / per-head quantizers read "
        "their inputs twice (amax pass + quantization pass). The kernels compute in float64 for bit-compatibility "
        "with oracles/fp8.py. Share: the time over that of an FP8 forward at "
        f"{FP8_FWD_TFLOPS:.0f} TFLOP/s on this shape ({rep['fp8_fwd_ms_at_target']:.2f} ms, non-causal).",
        "",
        "| what | granularity | us | GB/s | share of FP8 fwd | spot check (codes differing, b0 h0) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rep["rows"]:
        sc = r.get("spot_check_mismatches")
        sc = "" if sc is None else ("n/a" if sc < 0 else str(sc))
        lines.append(f"| {r['name']} | {r['granularity'] or ''} | {r['us']:.1f} | {r['GBps']:.0f} | "
                     f"{r['share_of_fp8_fwd']:.1%} | {sc} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/quant_bench.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/latest/benchmarks")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--headdim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("quant_bench: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("quant_bench: needs a CUDA device", file=sys.stderr)
        return 2
    from cuda_fwd_check_bench import env_info

    t0 = time.time()
    cfg = dict(B=args.batch, H=args.heads, N=args.seqlen, d=args.headdim, reps=args.reps, tile=128)
    rows = measure(cfg["B"], cfg["H"], cfg["N"], cfg["d"], reps=cfg["reps"], tile=cfg["tile"])
    rep = {"command": "python tools/quant_bench.py " + " ".join(
               argv if argv is not None else sys.argv[1:]),
           "env": env_info(), "config": cfg, "rows": rows, "seconds": round(time.time() - t0, 1),
           "fp8_fwd_ms_at_target": 4.0 * cfg["B"] * cfg["H"] * cfg["N"] ** 2 * cfg["d"] / (FP8_FWD_TFLOPS * 1e9)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quant_time.json").write_text(json.dumps(rep, indent=1) + "\n")
    text = render(rep)
    (out / "quant_time.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
