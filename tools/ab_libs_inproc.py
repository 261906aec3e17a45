"""A/B of several builds of the kernel library in one process (H200; kernels too close to tell apart across calls).

``python tools/ab_libs_inproc.py --lib A=a.so --lib B=b.so [--launcher attn_fa3_fwd]
[--d 64,128,256] [--rounds 7] [--out DIR]``; ``--lib A=a.so@persistent``: that library's FA3 forward build
``persistent`` (a key of ``kernels.cuda.lab.FA3_FWD_VARIANTS``, of a lab build) instead of the launcher;
with ``--launcher attn_fa3_fp8_fwd`` a k-major FP8 build (`fa3_fp8_check_bench.KMAJOR_VARIANTS`, selected by
``lab FP8_VARIANTS`` around each call).

Each library is opened with ``kernels.cuda_lib.open_library`` (its own handle; every build links its CUDA runtime
statically and shares the device's primary context with torch), and the same launcher of each is timed on the same
inputs, round-robin with cuDNN and, when ``flash_attn.cute`` imports, flash-attn-4
(`kernels.timing.time_round_robin`: each round a median of 25 CUDA-event samples, the median of the rounds kept), so
clock drift over the call reaches every build alike; `tools/ab_libs_h200.sh` runs one process per
library instead. Before timing, every build's output at each shape is compared with cuDNN's (relative Frobenius
error; a build above ``--max-err`` is reported and not timed). B=4, H=16, N=8192 bf16 (``--n``), causal and not.
``--launcher attn_fa3_fp8_fwd``: the FP8 forward on e4m3 codes of such inputs (`fp8_rows`), beside cuDNN on the
dequantized ones. ``--launcher attn_fa3_bwd`` (any of `cuda_bwd_lib.BWD_LAUNCHERS`): the backward alone (`bwd_rows`),
beside cuDNN's and flash-attn-4's backward on one retained forward each. Prints a table last; writes ab.json and ab.md
under --out.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from cuda_fwd_check_bench import env_info, sdpa_fn
from fa3_bwd_check_bench import fa4_fwd_bwd, sdpa_fwd_bwd
from fa3_check_bench import fa4_fn
from fa3_fp8_check_bench import KMAJOR_VARIANTS

from attention_conformance.adapters.cudnn_fp8_timed import CudnnFp8Unavailable, cudnn_fp8
from attention_conformance.kernels import cuda_bwd_lib, cuda_lib
from attention_conformance.kernels.cuda import lab
from attention_conformance.kernels.timing import time_round_robin

__all__ = ["REFERENCES", "Build", "bwd_rows", "fp8_kmajor_params_for", "fp8_rows", "main", "markdown", "pick", "rows"]

#: the timed libraries that are not builds of ours (columns of the table after the builds; never picked)
REFERENCES = ("cudnn", "cudnn_fp8", "fa4")


class Build(NamedTuple):
    """One timed build: a library handle (`cuda_lib.open_library`) and, for the FA3 forward, the name of one of its
    variant builds ("": the launcher itself)."""

    lib: ctypes.CDLL
    variant: str = ""


def _fp8_variant_call(params, variant: str, lib: ctypes.CDLL) -> None:
    lab.call_fp8_fwd(params, variant, lib=lib)


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error of `x` against the fp32 `ref` (NaN when `x` holds one)."""
    return float((x.float() - ref).norm() / ref.norm())


def _row(libs: dict[str, Build], launcher: str, params_for: Callable, q: torch.Tensor, k: torch.Tensor,
         v: torch.Tensor, causal: bool, rounds: int, max_err: float, diff0: bool, refs: list,
         checked_refs: Sequence[tuple[str, Callable[[], object], Callable[[], torch.Tensor]]] = (), **extra) -> dict:
    """One row of the table (`extra`: more keys for it): `launcher` of every build on ``params_for(o, lse)`` checked
    against cuDNN on the bf16 ``q, k, v`` (``_err``; with `diff0` also ``_diff0``, the largest absolute difference
    from the first build's output), then the builds within `max_err` timed round-robin beside cuDNN and the
    (name, fn) pairs in `refs`; each (name, fn, output) of `checked_refs` is run once and its ``output()`` checked as
    a build's (``_err``) before it is timed with them."""
    from torch.nn.attention import SDPBackend

    B, H, n, d = q.shape
    ref = sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)().float()
    row: dict = dict(B=B, H=H, N=n, d=d, causal=causal, **extra)
    cands, first = [], None
    for name, (lib, variant) in libs.items():
        o = torch.full_like(q, float("nan"))
        lse = torch.empty(B, H, n, device=q.device, dtype=torch.float32)
        if variant and launcher == "attn_fa3_fp8_fwd":
            run = functools.partial(_fp8_variant_call, params_for(o, lse), variant, lib)
        elif variant:
            run = functools.partial(lab.call_fa3_fwd, params_for(o, lse), variant, lib=lib)
        else:
            run = functools.partial(cuda_lib.call, launcher, params_for(o, lse), lib=lib)
        try:
            run()
        except cuda_lib.KernelUnsupported as e:  # a variant built for other shapes (cluster2: no causal mask, ...)
            row[name + "_err"], row[name + "_declined"] = float("nan"), str(e)
            print(f"{name} declines the row: {e}", flush=True)
            continue
        torch.cuda.synchronize()
        row[name + "_err"] = err = _rel_err(o, ref)
        if diff0:
            first = o.clone() if first is None else first
            row[name + "_diff0"] = float((o.float() - first.float()).abs().max())
        if err <= max_err:  # False for NaN
            cands.append((name, run))
    for name, fn, output in checked_refs:
        fn()
        torch.cuda.synchronize()
        row[name + "_err"] = err = _rel_err(output(), ref)
        if err <= max_err:
            refs = [*refs, (name, fn)]
    cands.append(("cudnn", sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)))
    time_round_robin(row, cands + refs, 4 * B * H * n * n * d / (2 if causal else 1), rounds)
    print(json.dumps(row), flush=True)
    return row


def rows(libs: dict[str, Build], launcher: str, ds: list[int], n: int, rounds: int,
         max_err: float) -> list[dict]:
    """The table: per head dim in `ds`, causal and not, `launcher` of every build in `libs` (`cuda_lib.open_library`
    handles and variant names) checked against cuDNN, then timed round-robin beside cuDNN and flash-attn-4."""
    out = []
    for d in ds:
        for causal in (False, True):
            q, k, v = (torch.randn(4, 16, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            f4 = fa4_fn(q, k, v, causal)

            def params_for(o, lse, q=q, k=k, v=v, causal=causal):
                return cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)

            out.append(_row(libs, launcher, params_for, q, k, v, causal, rounds, max_err, False,
                            [] if f4 is None else [("fa4", f4)]))
    return out


def fp8_kmajor_params_for(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor,
                          causal: bool) -> Callable[[torch.Tensor, torch.Tensor], object]:
    """``params_for(o, lse)``: `attn_fa3_fp8_fwd` params on the e4m3 codes q8, k8, v8 with per-tensor descales of 1 and
    V packed k-major once, here, by `cuda_lib.pack_vt_reference` (the benchmarks' FP8 inputs)."""
    vt = torch.from_numpy(cuda_lib.pack_vt_reference(v8.view(torch.uint8).cpu().numpy()))
    vt = vt.to(v8.device).view(torch.float8_e4m3fn)
    ones = [torch.ones((), device=q8.device) for _ in range(3)]

    def params_for(o: torch.Tensor, lse: torch.Tensor):
        return cuda_lib.fp8_fwd_params(q8, k8, vt, o, lse, *ones, format="e4m3fn", granularity="per_tensor",
                                       causal=causal, v_layout="kmajor")

    return params_for


def fp8_rows(libs: dict[str, Build], ds: list[int], n: int, rounds: int, max_err: float) -> list[dict]:
    """`rows` for ``attn_fa3_fp8_fwd``: e4m3 codes of the same bf16 inputs, per-tensor descales of 1, V k-major
    (`cuda_lib.pack_vt_reference`), every build checked against cuDNN on the dequantized inputs (`max_err`) and
    against the first build (``_diff0``: the largest absolute difference), then timed round-robin beside cuDNN (bf16,
    on the dequantized inputs) and, where cudnn-frontend imports and cuDNN builds the graph, cuDNN's own FP8 forward
    on the same codes (`cudnn_fp8`, checked like a build; ``cudnn_fp8_declined``: why not)."""
    out = []
    for d in ds:
        for causal in (False, True):
            x8 = [torch.randn(4, 16, n, d, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
                  for _ in range(3)]
            extra: dict = dict(format="e4m3fn", granularity="per_tensor", v_layout="kmajor")
            checked = []
            try:
                c8 = cudnn_fp8(*x8, causal)
                checked.append(("cudnn_fp8", c8.run, c8.output))
                extra.update(cudnn_fp8_o=c8.o_dtype, cudnn_fp8_version=c8.version)
                if c8.bf16_declined:
                    extra["cudnn_fp8_bf16_declined"] = c8.bf16_declined
            except CudnnFp8Unavailable as e:
                extra["cudnn_fp8_declined"] = str(e)
                print(f"cudnn_fp8 declines the row: {e}", flush=True)
            out.append(_row(libs, "attn_fa3_fp8_fwd", fp8_kmajor_params_for(*x8, causal),
                            *(t.to(torch.bfloat16) for t in x8), causal, rounds, max_err, True, [], checked, **extra))
    return out


def bwd_rows(libs: dict[str, Build], launcher: str, ds: list[int], n: int, rounds: int,
             max_err: float) -> list[dict]:
    """The table for a backward launcher (`cuda_bwd_lib.BWD_LAUNCHERS`): per head dim in `ds`, causal and not, on
    bf16 inputs and dO, O and LSE from the first build's ``attn_fa3_fwd``; every build's dq, dk, dv compared with
    cuDNN's gradients (``<name>_err``: the largest relative Frobenius error of the three), then the builds within
    `max_err` timed round-robin (2.5x the forward's FLOPs) beside cuDNN's and flash-attn-4's backward alone."""
    from torch.nn.attention import SDPBackend

    first = next(iter(libs.values())).lib
    out = []
    for d in ds:
        for causal in (False, True):
            q, k, v, dout = (torch.randn(4, 16, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            B, H = q.shape[:2]
            o, lse = torch.empty_like(q), torch.empty(B, H, n, device="cuda", dtype=torch.float32)
            cuda_lib.call("attn_fa3_fwd", cuda_lib.fwd_params(q, k, v, o, lse, causal=causal), lib=first)
            cudnn = sdpa_fwd_bwd(SDPBackend.CUDNN_ATTENTION, q, k, v, dout, causal)[1]
            refs = [g.float() for g in cudnn()]
            row: dict = dict(B=B, H=H, N=n, d=d, causal=causal)
            cands = []
            for name, build in libs.items():
                grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
                params = cuda_bwd_lib.bwd_params(q, k, v, o, lse, dout, *grads, causal=causal,
                                                 **cuda_bwd_lib.bwd_scratch(q, k))
                run = functools.partial(cuda_lib.call, launcher, params, lib=build.lib)
                run()
                torch.cuda.synchronize()
                row[name + "_err"] = err = max(_rel_err(g, r) for g, r in zip(grads, refs))
                if err <= max_err:  # False for NaN
                    cands.append((name, run))
            cands.append(("cudnn", cudnn))
            f4 = fa4_fwd_bwd(q, k, v, dout, causal)
            time_round_robin(row, cands + ([] if f4 is None else [("fa4", f4[1])]),
                             2.5 * 4 * B * H * n * n * d / (2 if causal else 1), rounds)
            print(json.dumps(row), flush=True)
            out.append(row)
            del q, k, v, dout, o, lse, cudnn, refs, cands, f4
            torch.cuda.empty_cache()
    return out


def markdown(env: dict, names: list[str], table: list[dict]) -> str:
    refs = [r for r in REFERENCES if any(r + "_tflops" in row for row in table)]
    cols = names + refs
    lines = [f"# In-process A/B of {env.get('launcher', 'attn_fa3_fwd')} ({env.get('gpu', '?')}, torch "
             f"{env.get('torch', '?')}, fa4 {env.get('fa4', '-')})", "",
             "TFLOPs/s (median of the rounds; spread = (max - min) / median of the round medians); ratios against "
             f"`{names[0]}`.", "",
             "| N | d | causal | " + " | ".join(cols) + " | " + " | ".join(f"{c}/{names[0]}" for c in cols[1:]) + " |",
             "|---|---|---|" + "---|" * (2 * len(cols) - 1)]
    for row in table:
        base = row.get(names[0] + "_tflops")
        vals = [f"{row[c + '_tflops']:.0f} ({100 * row[c + '_spread']:.0f}%)" if c + "_tflops" in row else "-"
                for c in cols]
        ratios = [f"{row[c + '_tflops'] / base:.3f}" if base and c + "_tflops" in row else "-" for c in cols[1:]]
        lines.append(f"| {row['N']} | {row['d']} | {row['causal']} | " + " | ".join(vals) + " | "
                     + " | ".join(ratios) + " |")
    errs = ", ".join(f"{name} {max(r.get(name + '_err', float('nan')) for r in table):.1e}" for name in cols
                     if any(name + "_err" in r for r in table))
    tail = ["", f"Largest relative error against cuDNN (bf16) per build: {errs}."]
    tail += [f"cudnn_fp8 at d = {r['d']}, causal={r['causal']}: {r['cudnn_fp8_declined']}" for r in table
             if "cudnn_fp8_declined" in r]
    tail += sorted({f"cudnn_fp8: {r['cudnn_fp8_version']}, {r['cudnn_fp8_o']} output"
                    + (f" (bf16 declined: {r['cudnn_fp8_bf16_declined']})" if "cudnn_fp8_bf16_declined" in r else "")
                    for r in table if "cudnn_fp8_version" in r})
    if len(names) > 1 and any(names[-1] + "_diff0" in r for r in table):
        diffs = ", ".join(f"{name} {max(r[name + '_diff0'] for r in table):.1e}" for name in names[1:])
        tail.append(f"Largest absolute difference from `{names[0]}`'s output: {diffs}.")
    return "\n".join(lines + tail + [""])


def pick(results: list[Path], baseline: str, min_gain: float) -> tuple[str, dict[str, float]]:
    """The build with the highest geometric mean, over every row of every ab.json in `results`, of its TFLOPs/s
    over `baseline`'s in the same row; `baseline` unless that mean exceeds 1 + `min_gain`. Returns it and the means."""
    logs: dict[str, list[float]] = {}
    for path in results:
        for row in json.loads(Path(path).read_text())["rows"]:
            base = row.get(baseline + "_tflops")
            for key, val in row.items():
                name = key[: -len("_tflops")]
                if base and key.endswith("_tflops") and name not in REFERENCES:
                    logs.setdefault(name, []).append(math.log(val / base))
    means = {name: math.exp(sum(v) / len(v)) for name, v in logs.items()}
    best = max(means, key=means.get, default=baseline)
    return (best if means.get(best, 0.0) > 1 + min_gain else baseline), means


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/ab_libs_inproc.py",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--lib", action="append", required=True, metavar="NAME=PATH[@VARIANT]",
                    help="a build to time (repeat); @VARIANT: its FA3 (FP8) forward build VARIANT")
    ap.add_argument("--launcher", default="attn_fa3_fwd")
    ap.add_argument("--d", default=None, help="comma-separated head dims (default 64,128,256; 64,128 for a "
                    "backward launcher)")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--max-err", type=float, default=None, help="relative error against cuDNN above which a build "
                    "is not timed (default 2e-2; 0.1 for attn_fa3_fp8_fwd, whose inputs are FP8 codes)")
    ap.add_argument("--out", default="reports/latest/ab")
    ap.add_argument("--pick", nargs="+", metavar="AB_JSON", help="no timing: print the build `pick` chooses from "
                    "these results against the first --lib (its name alone)")
    ap.add_argument("--min-gain", type=float, default=0.005)
    args = ap.parse_args(argv)
    if args.pick:
        best, means = pick([Path(p) for p in args.pick], args.lib[0].split("=", 1)[0], args.min_gain)
        print(best)
        print(json.dumps(means), file=sys.stderr)
        return 0
    specs = [s.split("=", 1) for s in args.lib]
    if any(len(s) != 2 for s in specs):
        ap.error("--lib takes NAME=PATH")
    libs: dict[str, Build] = {}
    for name, spec in specs:
        path, _, variant = spec.partition("@")
        known = KMAJOR_VARIANTS if args.launcher == "attn_fa3_fp8_fwd" else lab.FA3_FWD_VARIANTS
        if variant and (variant not in known or args.launcher not in ("attn_fa3_fwd", "attn_fa3_fp8_fwd")):
            ap.error(f"--lib {name}={spec}: @VARIANT takes a key of lab.FA3_FWD_VARIANTS with --launcher "
                     f"attn_fa3_fwd, or of KMAJOR_VARIANTS ({', '.join(KMAJOR_VARIANTS)}) with --launcher "
                     "attn_fa3_fp8_fwd (PATH@VARIANT: PATH is a lab build, kernels.build --lab)")
        resolved = Path(path).resolve()
        libs[name] = Build(lab.library(resolved) if variant else cuda_lib.open_library(resolved), variant)
    env = env_info()
    try:
        from importlib.metadata import version

        env["fa4"] = version("flash-attn-4")
    except Exception:
        env["fa4"] = "not installed"
    env["launcher"] = args.launcher
    bwd = args.launcher in cuda_bwd_lib.BWD_LAUNCHERS
    ds = [int(d) for d in (args.d or ("64,128" if bwd else "64,128,256")).split(",")]
    fp8 = args.launcher == "attn_fa3_fp8_fwd"
    max_err = args.max_err if args.max_err is not None else 0.1 if fp8 else 2e-2
    if bwd:
        table = bwd_rows(libs, args.launcher, ds, args.n, args.rounds, max_err)
    elif fp8:
        table = fp8_rows(libs, ds, args.n, args.rounds, max_err)
    else:
        table = rows(libs, args.launcher, ds, args.n, args.rounds, max_err)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(env, list(libs), table)
    (out / "ab.json").write_text(json.dumps(dict(env=env, libs=dict(specs), rows=table), indent=1))
    (out / "ab.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
