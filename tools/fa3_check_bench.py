"""Device check + benchmark of the FA3 forward (kernels/cuda/fa3_fwd.cu, sm_90a) on one H200 (lab script).

``python tools/fa3_check_bench.py [--out DIR] [--quick] [--skip-bench] [--curves] [--ablation]``

1. Correctness (`attention_conformance.kernels.check.forward`: fresh random inputs per case, outputs poisoned with
   NaN between guard bands, the conformance judge's verdict against the FP64 oracle, inputs checked unmodified):
   head dims 64/128/256, fp16/bf16, tails, causal in both alignments, windows, softcap, GQA, varlen,
   [B, L, H, D] strides, Lk = 0; then every ablation build on a few d = 128 cases.
2. Timing (GPU time, `kernels.timing.measure`; the candidates of a row timed round-robin 3 times, the
   median kept) at B=4, H=16, N=8192, ``--head-dims`` (default d in {64, 128, 256, 96, 192} and d x dv = 192 x 128),
   causal or not,
   beside torch SDPA's flash and cuDNN backends and, when ``flash_attn.cute`` imports, flash-attn-4
   (``flash_attn.cute.interface.flash_attn_func``); ``--ablation``: the ablation builds at d = 128;
   ``--curves``: N in {512 ... 16k} per head dim. TFLOPs/s = 2*B*H*N*N*(d + dv) (halved for causal).

Prints a short table last; writes fa3.json and fa3.md (after each row of the table too, so that a run its time
limit cuts short keeps its rows; fa3_curves.svg with --curves) under --out. A candidate that leaves the CUDA context
unusable (an illegal address) costs its own row only: the row is kept with ``context_lost``, and the script runs
again in a fresh process with ``--resume`` for the rows left.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
from bench_shapes import dims_label, parse_head_dims, row_key
from cuda_fwd_check_bench import env_info, sdpa_fn
from timing_md import FA3_REFS as REFS
from timing_md import TIMING_NOTE, env_line, host_table, replaced_set_note
from vendor_rows import flashinfer_prefill_fn, xformers_fn

from attention_conformance.kernels import cuda_lib
from attention_conformance.kernels.check.forward import check_forward
from attention_conformance.kernels.cuda import lab
from attention_conformance.kernels.timing import time_round_robin

__all__ = ["ContextLost", "ablation_rows", "bench_rows", "built_head_dim", "context_lost", "correctness",
           "curves_svg", "fa4_fn", "main", "remaining_shapes", "resume_argv", "shape_key"]

BF, HF = torch.bfloat16, torch.float16


def _runner(variant):
    def run(q, k, v, o, lse, **kw):
        p = cuda_lib.fwd_params(q, k, v, o, lse, **kw)
        if variant in ("full", "default"):
            cuda_lib.call("attn_fa3_fwd", p)
        else:
            lab.call_fa3_fwd(p, variant)

    return run


def _checked(label, variant, seed, case):
    r = check_forward(label, runner=_runner(variant), seed=seed, **case)
    print(("OK  " if r["ok"] else "BAD ") + f"{r['case']:72s} err {r['rel_err']:.2e} lse {r['lse_err']:.1e} "
          + "; ".join(r["problems"]), flush=True)
    return r


def correctness(variants) -> list[dict]:
    """The case list through every build named in `variants` ("full" = attn_fa3_fwd)."""
    cases = []
    for d in (64, 128, 256):
        for dt in (BF, HF):
            cases.append(dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=d, dtype=dt))
            cases.append(dict(B=2, Hq=4, Hkv=4, Lq=257, Lk=129, d=d, dtype=dt, causal=True))
            cases.append(dict(B=1, Hq=2, Hkv=1, Lq=300, Lk=77, d=d, dtype=dt, causal=True, bottom_right=False))
    cases += [
        dict(B=2, Hq=8, Hkv=2, Lq=513, Lk=1000, d=128, dtype=BF, causal=True),
        dict(B=1, Hq=2, Hkv=2, Lq=1, Lk=1, d=128, dtype=BF),
        dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=64, dtype=HF),
        dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, d=128, dtype=BF, window=(50, 20)),
        dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, d=64, dtype=HF, window=(30, None), causal=True),
        dict(B=2, Hq=4, Hkv=1, Lq=300, Lk=100, d=128, dtype=BF, window=(None, 5), bottom_right=False),
        dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=128, dtype=BF, varlen=True, causal=True),
        dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=64, dtype=HF, varlen=True),
        dict(B=3, Hq=4, Hkv=2, Lq=333, Lk=200, d=256, dtype=BF, varlen=True, causal=True),
        dict(B=2, Hq=4, Hkv=2, Lq=128, Lk=256, d=128, dtype=BF, softcap=5.0, causal=True),
        dict(B=2, Hq=4, Hkv=2, Lq=100, Lk=300, d=256, dtype=HF, layout="bshd"),
        dict(B=2, Hq=4, Hkv=2, Lq=300, Lk=300, d=128, dtype=BF, layout="bshd", causal=True),
        dict(B=2, Hq=4, Hkv=4, Lq=1024, Lk=1024, d=128, dtype=BF, causal=True),
        dict(B=1, Hq=132, Hkv=132, Lq=1000, Lk=1000, d=128, dtype=BF, causal=True),  # > #SMs tiles: persistent loop
        dict(B=2, Hq=16, Hkv=16, Lq=2048, Lk=2048, d=64, dtype=BF),
        # windows several key tiles wide: masked tiles at both ends of a row block's loop, unmasked ones between
        dict(B=1, Hq=2, Hkv=1, Lq=1000, Lk=1500, d=128, dtype=BF, window=(400, 100)),
        dict(B=1, Hq=3, Hkv=1, Lq=900, Lk=700, d=64, dtype=HF, window=(333, None), causal=True, bottom_right=False),
        dict(B=1, Hq=2, Hkv=2, Lq=700, Lk=900, d=256, dtype=BF, window=(300, 250)),
    ]
    res = []
    vcases = [
        dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=128, dtype=BF),
        dict(B=2, Hq=8, Hkv=2, Lq=513, Lk=1000, d=128, dtype=BF, causal=True),
        dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=128, dtype=HF, varlen=True, causal=True, bottom_right=False),
        dict(B=1, Hq=132, Hkv=66, Lq=700, Lk=900, d=128, dtype=BF, window=(100, 30)),
    ]
    d64 = [dict(c, d=64) for c in vcases]
    for variant in variants:
        if variant == "d64_two_wg":
            res += [_checked(f"attn_fa3_fwd[{variant}]", variant, 2000 + i, c) for i, c in enumerate(d64)]
        elif variant in ANY_DIM_VARIANTS:
            every = vcases + d64 + [dict(c, d=256) for c in vcases]
            res += [_checked(f"attn_fa3_fwd[{variant}]", variant, 3000 + i, c) for i, c in enumerate(every)]
        elif variant == "cluster2":  # no causal mask, window or varlen; d = 128 / 256; even and odd query tile counts
            keys = [dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=d, dtype=BF) for d in (128, 256)]
            keys += [dict(B=1, Hq=3, Hkv=1, Lq=513, Lk=700, d=128, dtype=HF),  # 3 tiles, 3 heads: a CTA left idle
                     dict(B=2, Hq=5, Hkv=5, Lq=333, Lk=512, d=256, dtype=BF, layout="bshd"),
                     dict(B=1, Hq=132, Hkv=66, Lq=700, Lk=900, d=128, dtype=BF)]
            res += [_checked(f"attn_fa3_fwd[{variant}]", variant, 4000 + i, c) for i, c in enumerate(keys)]
        elif (own := built_head_dim(variant)) in (96, 192):  # one head dim's builds: the variant cases and a softcap
            at = [dict(c, d=own) for c in vcases]                # one at that head dim
            at.append(dict(B=2, Hq=4, Hkv=2, Lq=128, Lk=256, d=own, dtype=HF, softcap=5.0))
            res += [_checked(f"attn_fa3_fwd[{variant}]", variant, 5000 + i, c) for i, c in enumerate(at)]
        elif variant == "full":
            res += [_checked("attn_fa3_fwd", "full", i, c) for i, c in enumerate(cases)]
        else:
            res += [_checked(f"attn_fa3_fwd[{variant}]", variant, 1000 + i, c) for i, c in enumerate(vcases)]
    return res


def fa4_fn(q, k, v, causal):
    """flash-attn-4's forward on [B, H, N, d] tensors, or None when ``flash_attn.cute`` does not import."""
    try:
        from flash_attn.cute.interface import flash_attn_func
    except Exception:
        return None
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))

    def f():
        return flash_attn_func(qt, kt, vt, causal=causal)

    return f


class ContextLost(RuntimeError):
    """A candidate left the process's CUDA context unusable (an illegal address is sticky: every later CUDA call of
    the process fails), so the rest of the table must run in a fresh process (`main` restarts with ``--resume``)."""


def context_lost() -> str | None:
    """The first line of the error a small CUDA operation raises now, or None while the context works."""
    try:
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    except Exception as exc:
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return None


def shape_key(shape: tuple) -> tuple:
    """A shape (B, H, N, d[, dv], causal) of `bench_rows` as (B, H, N, d, dv, causal): how `bench_rows` reads it, and
    `bench_shapes.row_key` of its row."""
    B, H, N, d, dv, causal = shape if len(shape) == 6 else (*shape[:4], shape[3], shape[4])
    return B, H, N, d, dv, bool(causal)


def remaining_shapes(shapes: list[tuple], done: list[dict]) -> list[tuple]:
    """The shapes whose row is not among ``done`` (an earlier process's rows, ``--resume``), in order."""
    have = {row_key(r) for r in done}
    return [s for s in shapes if shape_key(s) not in have]


def resume_argv(argv: list[str]) -> list[str]:
    """The command line of the process that carries on after a lost context: the same, with ``--resume`` once (the
    ablation and curves, which follow the table, run in that process)."""
    return [a for a in argv if a != "--resume"] + ["--resume"]


# builds that exist for every head dim
ANY_DIM_VARIANTS = ("persistent", "one_cta_per_tile", "lazy_rescale_one_cta", "eager_rescale")


def built_head_dim(variant: str) -> int | None:
    """The head dim d = dv a lab FA3 forward build exists for (kernels/cuda/lab/attn_lab.h): None for the builds of
    every head dim, 64 / 96 / 192 for the ``d64_`` / ``d96_`` / ``d192_`` ones, else 128 (the ablations of the
    d = 128 build)."""
    if variant in ANY_DIM_VARIANTS:
        return None
    own = variant.split("_", 1)[0]
    return {"d64": 64, "d96": 96, "d192": 192}.get(own, 128)


ROUNDS = 3  # each row's candidates are timed in turn, ROUNDS times; the median of the round medians is kept


def bench_rows(shapes, with_refs=True, variants=(), rounds=ROUNDS, row_done=None) -> list[dict]:
    """Timing rows of shapes (B, H, N, d[, dv], causal): FA3 (attn_fa3_fwd, plus each build in `variants` as
    ``fa3_<variant>``) beside the references on the same inputs; `row_done(rows so far)` after each row."""
    from torch.nn.attention import SDPBackend

    rows = []
    for shape in shapes:
        B, H, N, d, dv, causal = shape_key(shape)
        q, k = (torch.randn(B, H, N, d, device="cuda", dtype=BF) for _ in range(2))
        v = torch.randn(B, H, N, dv, device="cuda", dtype=BF)
        o = torch.empty_like(v)
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        p = cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)
        flops = 2 * B * H * N * N * (d + dv) / (2 if causal else 1)
        row = dict(B=B, H=H, N=N, d=d, dv=dv, causal=causal)
        cands = [("fa3", cuda_lib.bind("attn_fa3_fwd", p))]  # the bound call: struct filled once
        cands += [("fa3_" + v, lambda p=p, v=v: lab.call_fa3_fwd(p, v)) for v in variants
                  if dv == d and built_head_dim(v) in (None, d)]
        if with_refs:
            cands += [("flash", sdpa_fn(SDPBackend.FLASH_ATTENTION, q, k, v, causal)),
                      ("cudnn", sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, causal))]
            f4 = fa4_fn(q, k, v, causal)
            if f4 is not None:
                cands.append(("fa4", f4))
            for name, (fn, note) in (("flashinfer", flashinfer_prefill_fn(q, k, v, causal)),
                                     ("xformers", xformers_fn(q, k, v, causal))):
                row[name + ("_call" if fn is not None else "_declined")] = note
                if fn is not None:
                    cands.append((name, fn))
        time_round_robin(row, cands, flops, rounds)
        for ref, _ in REFS:
            if ref + "_ms" in row and "fa3_ms" in row:
                row["ratio_vs_" + ref] = row[ref + "_ms"] / row["fa3_ms"]
        lost = context_lost()
        if lost is not None:  # this row's timings after the fault are errors; the next rows need a fresh process
            row["context_lost"] = lost
        rows.append(row)
        if row_done is not None:
            row_done(rows)
        if lost is not None:
            raise ContextLost(f"the CUDA context was lost in row {shape_key(shape)}: {lost}")
        del q, k, v, o
    return rows


def ablation_rows() -> list[dict]:
    """Every build of `lab.FA3_FWD_VARIANTS` at B=4, H=16, N=8192, d=128 bf16, causal and not."""
    rows = []
    for causal in (False, True):
        B, H, N, d = 4, 16, 8192, 128
        q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=BF) for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        p = cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)
        flops = 4 * B * H * N * N * d / (2 if causal else 1)
        row: dict = {}
        names = [v for v in lab.FA3_FWD_VARIANTS if built_head_dim(v) in (None, d) and v != "one_cta_per_tile"
                 and not (causal and v == "cluster2")]
        time_round_robin(row, [(v, lambda p=p, v=v: lab.call_fa3_fwd(p, v)) for v in names], flops, ROUNDS)
        for variant in names:
            r = dict(variant=variant, B=B, H=H, N=N, d=d, causal=causal)
            r.update({"fa3" + k[len(variant):]: x for k, x in row.items() if k.startswith(variant + "_")})
            rows.append(r)
        del q, k, v, o
    return rows


COLORS = {"fa3": "#d62728", "cudnn": "#1f77b4", "flash": "#2ca02c", "fa4": "#9467bd"}


def curves_svg(rows: list[dict]) -> str:
    """A dependency-free SVG chart of `bench_rows` output over N: one panel per (d, causal), TFLOPs/s of
    each implementation (lines), N on a log2 axis."""
    panels = sorted({(r["d"], r["causal"]) for r in rows})
    w, h, pad = 300, 200, 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * w}" height="{h * ((len(panels) + 2) // 3)}" '
           'font-family="sans-serif" font-size="10">']
    ymax = max([r.get(k + "_tflops", 0) for r in rows for k in COLORS] + [1]) * 1.1
    for idx, (d, causal) in enumerate(panels):
        x0, y0 = (idx % 3) * w, (idx // 3) * h
        pr = sorted((r for r in rows if (r["d"], r["causal"]) == (d, causal)), key=lambda r: r["N"])
        ns = [r["N"] for r in pr]
        lo, hi = math.log2(min(ns)), max(math.log2(max(ns)), math.log2(min(ns)) + 1)

        def px(n, lo=lo, hi=hi, x0=x0):
            return x0 + pad + (math.log2(n) - lo) / (hi - lo) * (w - 1.5 * pad)

        def py(t, y0=y0):
            return y0 + h - pad + -t / ymax * (h - 1.5 * pad)

        out.append(f'<text x="{x0 + pad}" y="{y0 + 14}">d={d} {"causal" if causal else "non-causal"} '
                   '(TFLOPs/s vs N)</text>')
        out.append(f'<line x1="{px(ns[0])}" y1="{py(0)}" x2="{px(ns[-1])}" y2="{py(0)}" stroke="black"/>')
        for n in ns:
            label = f"{n // 1024}k" if n >= 1024 else str(n)
            out.append(f'<text x="{px(n) - 8}" y="{py(0) + 12}">{label}</text>')
        for t in range(0, int(ymax), 200):
            out.append(f'<text x="{x0 + 5}" y="{py(t) + 3}">{t}</text>')
        for k, color in COLORS.items():
            pts = [(px(r["N"]), py(r[k + "_tflops"])) for r in pr if k + "_tflops" in r]
            if pts:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="'
                           + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
                out.append(f'<text x="{pts[-1][0] - 20}" y="{pts[-1][1] - 4}" fill="{color}">{k}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"




def _previous_note(rows, previous: list[dict], prev_env: dict, gpu: str) -> str:
    """What the */FA4 before* column compares with (`timing_md.replaced_set_note`): a set by GPU time, or by the wall
    timer, which charged FA4's Python entry to FA4 (its cost a call in this run beside it)."""
    fa4_host = [r["fa4_host_us"] / 1e3 for r in rows if "fa4_host_us" in r]
    entry = f" ({min(fa4_host):.2f}-{max(fa4_host):.2f} ms a call in this run)" if fa4_host else ""
    return replaced_set_note(previous, prev_env, gpu, "timed per call with the call's host time included (event, "
                             f"call, event, synchronize), which charged FA4's Python entry{entry} to FA4")


def markdown(env, rows, abl, previous: list[dict] | None = None, previous_env: dict | None = None) -> str:
    """The tables: TFLOPs/s and ratios by GPU time (the headline), then host and wall time per call beside them;
    with `previous` (an earlier run's rows, e.g. the wall-timer figures this set replaces), each ratio's change."""
    nan = float("nan")
    before = {row_key(r): r for r in previous or []}
    out = [f"# FA3 forward (kernels/cuda/fa3_fwd.cu) vs torch SDPA and flash-attn-4 ({env['gpu']})", "",
           env_line(env, f"FA4 {env.get('fa4', 'not installed')}"), "",
           "Reproduce: `python -m attention_conformance.kernels.build && "
           "python tools/fa3_check_bench.py --skip-check --out DIR`", "",
           TIMING_NOTE + " Rows: 3 rounds of 25 calls; bf16, TFLOPs/s = 2*B*H*N*N*(d + dv) (halved for causal).", "",
           "| B, H, N, d | causal | FA3 TFLOPs/s | " + " | ".join(title for _, title in REFS) + " | "
           + " | ".join(f"/{title}" for _, title in REFS) + " |" + (" /FA4 before | change |" if before else ""),
           "|---|---|---|" + "---|---|" * len(REFS) + ("---|---|" if before else "")]
    for r in rows:
        line = (f"| {r['B']}, {r['H']}, {r['N']}, {dims_label(r)} | {r['causal']} | {r.get('fa3_tflops', nan):.0f} | "
                + " | ".join(f"{r.get(ref + '_tflops', nan):.0f}" for ref, _ in REFS) + " | "
                + " | ".join(f"{r.get('ratio_vs_' + ref, nan):.2f}" for ref, _ in REFS) + " |")
        if before:
            old = before.get(row_key(r), {}).get("ratio_vs_fa4", nan)
            line += f" {old:.2f} | {r.get('ratio_vs_fa4', nan) - old:+.2f} |"
        out.append(line)
    if before:
        out += ["", "*/FA4 before*: " + _previous_note(rows, previous or [], previous_env or {}, env["gpu"])]
    for ref, title in REFS[3:]:  # the serving / diffusion stacks: what each column called, or why it is empty
        calls = sorted({r[ref + "_call"] for r in rows if ref + "_call" in r})
        declined = sorted({r[ref + "_declined"] for r in rows if ref + "_declined" in r})
        out += ["", f"*{title}*: " + ("; ".join(calls) if calls else "no row ran")
                + (f" (declined: {'; '.join(declined)})" if declined else "") + "."]
    for r in rows:
        if "context_lost" in r:
            errors = "; ".join(f"{name}: {r[name + '_error']}" for name in ["fa3", *(ref for ref, _ in REFS)]
                               if name + "_error" in r)
            out += ["", f"*Row {r['B']}, {r['H']}, {r['N']}, {dims_label(r)}{' causal' if r['causal'] else ''}*: a "
                        f"candidate left the CUDA context unusable ({r['context_lost']}); its timings after the "
                        f"fault are errors ({errors or 'none recorded'}), and the rows after it ran in a fresh "
                        "process."]
    out += [""] + host_table(rows, lambda r: f"{r['B']}, {r['H']}, {r['N']}, {dims_label(r)}"
                                             + (" causal" if r["causal"] else ""))
    extra = sorted({k[4:-7] for r in rows for k in r
                    if k.startswith("fa3_") and k.endswith("_tflops") and k != "fa3_tflops"})
    if extra:
        out += ["", "| B, H, N, d | causal | attn_fa3_fwd | " + " | ".join(extra) + " |",
                "|---|---|---|" + "---|" * len(extra)]
        for r in rows:
            out.append(f"| {r['B']}, {r['H']}, {r['N']}, {dims_label(r)} | {r['causal']} | "
                       f"{r.get('fa3_tflops', nan):.0f} | "
                       + " | ".join(f"{r.get('fa3_' + v + '_tflops', nan):.0f}" for v in extra) + " |")
    if abl:
        out += ["", "Ablation: `full` is the default (attn_fa3_fwd); every other build changes one thing of",
                "`two_wg`, the two-warpgroup 128-key build (kernels/cuda/lab/attn_lab.h AttnLabFa3FwdVariant;",
                "`persistent`, `lazy_rescale_one_cta`, `eager_rescale`, `cluster2`: of the default).", "",
                "| ablation (B=4, H=16, N=8192, d=128 bf16) | causal | TFLOPs/s | ms |", "|---|---|---|---|"]
        for r in abl:
            out.append(f"| {r['variant']} | {r['causal']} | {r.get('fa3_tflops', nan):.0f} | "
                       f"{r.get('fa3_ms', nan):.3f} |" + (f" {r['fa3_error']}" if "fa3_error" in r else ""))
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "reports/latest/benchmarks"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--ablation", action="store_true")
    ap.add_argument("--curves", action="store_true")
    ap.add_argument("--tag", default="")
    ap.add_argument("--previous", default="", help="an earlier fa3.json: each FA4 ratio's change is shown beside it")
    ap.add_argument("--curves-only", action="store_true", help="skip the N=8192 table")
    ap.add_argument("--head-dims", default="64,128,256,96,192,192x128",
                    help="the N=8192 table's rows: comma-separated d, or d x dv (default: every head dim FA3 builds)")
    ap.add_argument("--curves-no-refs", action="store_true", help="curves: time FA3 builds only")
    ap.add_argument("--curve-variants", default="", help="comma-separated FA3 builds to add to the curves")
    ap.add_argument("--bench-variants", default="", help="comma-separated FA3 builds to time beside attn_fa3_fwd")
    ap.add_argument("--variants", default=",".join(lab.FA3_FWD_EXACT_VARIANTS),
                    help="comma-separated builds to check (full = attn_fa3_fwd; see lab.FA3_FWD_VARIANTS)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows of --out's fa3.json and time the rest (how a run goes on in a fresh process "
                         "after a candidate left the CUDA context unusable)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = env_info()
    try:
        from importlib.metadata import version

        env["fa4"] = version("flash-attn-4")
    except Exception:
        env["fa4"] = "not installed"
    print(json.dumps(env), flush=True)
    t0 = time.time()
    data = out / f"fa3{args.tag}.json"
    earlier = json.loads(data.read_text()) if args.resume and data.is_file() else {}
    if earlier:  # the first process checked
        res = earlier.get("correctness", [])
    else:
        res = [] if args.skip_check else correctness(args.variants.split(","))
    nbad = sum(not r["ok"] for r in res)
    print(f"correctness: {len(res) - nbad}/{len(res)} ok ({time.time() - t0:.1f} s)", flush=True)
    rows, abl, curves = [], [], []
    prev = json.loads(Path(args.previous).read_text()) if args.previous else None

    def write(rows: list[dict]) -> str:  # after each row of the table too: a run cut short keeps its rows
        data.write_text(json.dumps(dict(env=env, correctness=res, bench=rows, ablation=abl, curves=curves), indent=1))
        md = markdown(env, rows, abl, prev and prev["bench"], prev and prev.get("env", {}))
        (out / f"fa3{args.tag}.md").write_text(md)
        return md

    if not args.skip_bench:
        shapes = [(4, 16, 8192, d, dv, c) for d, dv in parse_head_dims(args.head_dims) for c in (False, True)]
        if args.quick:
            shapes = [(4, 16, 8192, 128, False), (4, 16, 8192, 128, True)]
        done = earlier.get("bench", [])
        try:
            rows = done if args.curves_only else done + bench_rows(
                remaining_shapes(shapes, done), variants=[v for v in args.bench_variants.split(",") if v],
                row_done=lambda new: write(done + new))
        except ContextLost as exc:
            print(f"{exc}; the rest of the table in a fresh process", flush=True)
            os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *resume_argv(argv)])
        if args.ablation:
            abl = ablation_rows()
        if args.curves:
            curves = bench_rows([(max(1, 32768 // n), 16, n, d, c) for d in (64, 128, 256) for c in (False, True)
                                 for n in (512, 1024, 2048, 4096, 8192, 16384)], rounds=1,
                                with_refs=not args.curves_no_refs,
                                variants=[v for v in args.curve_variants.split(",") if v])
    if curves:
        (out / f"fa3_curves{args.tag}.svg").write_text(curves_svg(curves))
    print(write(rows))
    return 1 if nbad else 0


if __name__ == "__main__":
    sys.exit(main())
