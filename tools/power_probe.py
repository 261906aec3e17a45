"""How an attention kernel's speed on a power-capped GPU depends on the values of its inputs (H200).

``python tools/power_probe.py [--launcher attn_fa3_fwd|attn_fa3_fp8_fwd]
[--d 128,256] [--n 8192] [--rounds 7] [--out DIR]``

The H200 runs attention at its 700 W board limit, and the energy of a tensor-core product depends on how many operand
bits toggle: the same kernel on the same shapes runs at a higher SM clock, and so faster, on inputs with fewer
changing bits. This probe times one launcher of the kernel library (``ATTN_KERNELS_LIB`` or the default build) on
B=4, H=16, N bf16 inputs of several value classes (`VALUE_CLASSES`), round-robin beside cuDNN on the same inputs
(`kernels.timing.time_round_robin`), then reads the SM clock and board power (``nvidia-smi``) under a ~1 s stream of
each candidate. So a speed-up seen on other inputs than the benchmarks' standard normal ones is not mistaken for a
kernel's: a probe that loaded half of each K / V tile into a zeroed ring ran 1.14-1.17x faster for this reason
(docs/fa3_forward.md, "The power limit"). Every class is
fed to every candidate alike, so ratios between kernels on one class stay fair. With ``--launcher attn_fa3_fp8_fwd``
the inputs are the e4m3 codes of each class (per-tensor descales of 1, V k-major) and cuDNN runs on their bf16 values.
Writes power.json and power.md under --out and prints the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

__all__ = ["VALUE_CLASSES", "main", "markdown", "probe_rows", "smi_sample"]


def _half_zero(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[..., x.shape[-1] // 2:] = 0
    return y


def _sparse(x: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator(device=x.device).manual_seed(1)
    return x * (torch.rand(x.shape, device=x.device, generator=gen) < 0.5).to(x.dtype)


# name -> (what it is, q k v -> q k v); each maps the standard normal inputs the benchmarks use.
VALUE_CLASSES: dict[str, tuple[str, Callable[[list[torch.Tensor]], list[torch.Tensor]]]] = {
    "randn": ("standard normal Q, K, V (the benchmarks' inputs)", lambda t: t),
    "kv_half_zero": ("K and V with their last d / 2 columns zero",
                     lambda t: [t[0], _half_zero(t[1]), _half_zero(t[2])]),
    "kv_sparse": ("K and V with half their elements zero at random", lambda t: [t[0], _sparse(t[1]), _sparse(t[2])]),
    "scaled_0.01": ("Q, K, V times 0.01 (scores near 0: P nearly constant)", lambda t: [x * 0.01 for x in t]),
    "zeros": ("Q, K, V zero", lambda t: [torch.zeros_like(x) for x in t]),
}


def smi_sample() -> dict[str, float]:
    """The SM clock (MHz) and board power (W) of GPU 0 now, from nvidia-smi (NaN where it is not there)."""
    try:
        out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=clocks.sm,power.draw",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
        mhz, watts = (float(x) for x in out.strip().split(","))
    except (OSError, ValueError, subprocess.SubprocessError):
        mhz = watts = float("nan")
    return {"mhz": mhz, "watts": watts}


def _under_load(fn: Callable[[], object], ms: float, seconds: float = 1.2) -> dict[str, float]:
    """`smi_sample` taken ~0.6 s into a stream of `fn` about `seconds` long (`ms`: its time per call)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    for _ in range(max(20, int(seconds * 1e3 / ms))):
        fn()
    time.sleep(min(0.6, seconds / 2))
    sample = smi_sample()
    torch.cuda.synchronize()
    return sample


def probe_rows(launcher: str, ds: list[int], n: int, rounds: int, classes: list[str]) -> list[dict]:
    """One row per head dim (no mask): `launcher` and cuDNN on every value class in `classes`, timed round-robin,
    then the clock and power under each."""
    from ab_libs_inproc import fp8_kmajor_params_for
    from cuda_fwd_check_bench import sdpa_fn
    from torch.nn.attention import SDPBackend

    from attention_conformance.kernels import cuda_lib
    from attention_conformance.kernels.timing import time_round_robin

    fp8 = launcher == "attn_fa3_fp8_fwd"
    out = []
    for d in ds:
        gen = torch.Generator(device="cuda").manual_seed(0)
        base = [torch.randn(4, 16, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3)]
        cands: list[tuple[str, Callable[[], object]]] = []
        for cls in classes:
            q, k, v = VALUE_CLASSES[cls][1](base)
            o = torch.empty_like(q)
            lse = torch.empty(4, 16, n, device="cuda", dtype=torch.float32)
            if fp8:
                x8 = [x.to(torch.float8_e4m3fn) for x in (q, k, v)]
                params = fp8_kmajor_params_for(*x8, False)(o, lse)
                q, k, v = (x.to(torch.bfloat16) for x in x8)
            else:
                params = cuda_lib.fwd_params(q, k, v, o, lse, causal=False)
            cands.append((f"ours:{cls}", lambda p=params: cuda_lib.call(launcher, p)))
            cands.append((f"cudnn:{cls}", sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, False)))
        row: dict = dict(B=4, H=16, N=n, d=d, causal=False)
        time_round_robin(row, cands, 4 * 4 * 16 * n * n * d, rounds)
        for name, fn in cands:
            if name + "_ms" in row:
                sample = _under_load(fn, row[name + "_ms"])
                row[name + "_mhz"], row[name + "_watts"] = sample["mhz"], sample["watts"]
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def markdown(env: dict, launcher: str, classes: list[str], table: list[dict]) -> str:
    """The rows of `probe_rows` as a table: per head dim and value class, TFLOPs/s of ours and cuDNN, each with the
    SM clock and board power under it, and the speed relative to the standard normal inputs."""
    lines = [f"# Speed against input values: {launcher} beside cuDNN ({env.get('gpu', '?')}, driver "
             f"{env.get('driver', '?')}, torch {env.get('torch', '?')})", "",
             "B=4, H=16, no mask; TFLOPs/s (median of round-robin rounds), then the SM clock and board power read "
             "under a ~1 s stream of that candidate; `x randn`: speed over the same kernel's on standard normal "
             "inputs.", "",
             "| d | inputs | ours | MHz / W | x randn | cuDNN | MHz / W | x randn |",
             "|---|---|---|---|---|---|---|---|"]

    def cell(row: dict, who: str, cls: str) -> list[str]:
        t = row.get(f"{who}:{cls}_tflops")
        if t is None:
            return ["-", "-", "-"]
        ref = row.get(f"{who}:randn_tflops")
        return [f"{t:.0f}", f"{row.get(f'{who}:{cls}_mhz', float('nan')):.0f} / "
                f"{row.get(f'{who}:{cls}_watts', float('nan')):.0f}", f"{t / ref:.3f}" if ref else "-"]

    for row in table:
        for cls in classes:
            lines.append(f"| {row['d']} | {cls} | " + " | ".join(cell(row, "ours", cls) + cell(row, "cudnn", cls))
                         + " |")
    lines += ["", "Inputs: " + "; ".join(f"`{c}` {VALUE_CLASSES[c][0]}" for c in classes) + ".", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/power_probe.py",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--launcher", default="attn_fa3_fwd", choices=["attn_fa3_fwd", "attn_fa3_fp8_fwd"])
    ap.add_argument("--d", default="128,256", help="comma-separated head dims (64, 128, 256)")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--classes", default=",".join(VALUE_CLASSES), help="comma-separated value classes, randn first "
                    f"(of {', '.join(VALUE_CLASSES)})")
    ap.add_argument("--out", default="reports/latest/power")
    args = ap.parse_args(argv)
    try:
        ds = [int(d) for d in args.d.split(",")]
    except ValueError:
        ap.error(f"--d {args.d!r}: comma-separated integers")
    if any(d not in (64, 128, 256) for d in ds):
        ap.error(f"--d {args.d}: head dims 64, 128, 256")
    classes = args.classes.split(",")
    unknown = [c for c in classes if c not in VALUE_CLASSES]
    if unknown or classes[0] != "randn":
        ap.error(f"--classes {args.classes}: value classes of {', '.join(VALUE_CLASSES)}, randn first")
    if args.n < 1 or args.rounds < 1:
        ap.error(f"--n {args.n} --rounds {args.rounds}: positive")
    if not torch.cuda.is_available():
        print("power_probe: no CUDA device", file=sys.stderr)
        return 2
    from cuda_fwd_check_bench import env_info

    env = env_info()
    table = probe_rows(args.launcher, ds, args.n, args.rounds, classes)
    md = markdown(env, args.launcher, classes, table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "power.json").write_text(json.dumps(dict(env=env, launcher=args.launcher, rows=table), indent=1))
    (out / "power.md").write_text(md)
    print(md)
    spread = [row[k] for row in table for k in row if k.endswith("_spread")]
    if spread:
        print(f"largest round spread {max(spread):.3f}, median {statistics.median(spread):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
