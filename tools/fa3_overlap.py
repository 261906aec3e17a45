"""The FA3 ablation beside the seeds' pipeline bound: how much of the overlap a model allows did the kernel get?

``python tools/fa3_overlap.py --json FA3_JSON [--out MD]`` (FA3_JSON: `fa3_check_bench.py --ablation`'s fa3.json)

FA3's intra-warpgroup overlap runs the softmax of key tile j while the tensor cores compute the GEMMs of tile
j+1: a two-stage pipeline over the n = N / B_c key tiles of a row block, the seeds' load/compute model
(`kernels.planning.pipeline_times`) with "load" = softmax and "compute" = the two GEMMs. Per 128 x 128 tile
at d = 128 the GEMMs are 4 B_r B_c d FLOPs and the softmax B_r B_c exponentials; at the peak rates the FA3
paper gives for the SM the H200 shares with the H100 SXM5 (989 TFLOPs/s dense BF16 matmul, 3.9 TFLOPs/s of
special functions: exp2 on the MUFU), the softmax takes about half a GEMM's time. That sets the bound: the
most this overlap can speed a kernel whose two stages run at those rates. The measured gain is the ablation's
``full`` over ``no_overlap`` (the same kernel with the overlap switched off, docs/fa3_forward.md).

The model counts only the exponentials on the softmax side (the max, scale, sum and convert instructions run
on the FP32 pipe beside them) and assumes the GEMMs run at peak, so it is an upper bound on the gain, not a
prediction.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attention_conformance.kernels.planning import pipeline_speedup

__all__ = ["MATMUL_TFLOPS", "SFU_TFLOPS", "overlap_bound", "overlap_rows", "render", "main"]

#: the FA3 paper's H100 SXM5 peak rates (the H200 has the same SM): dense BF16 matmul, special functions
MATMUL_TFLOPS = 989.0
SFU_TFLOPS = 3.9


def overlap_bound(n: int, d: int, block_q: int = 128, block_k: int = 128) -> tuple[float, float, float]:
    """(GEMM time, softmax time, bound) per key tile, in microseconds per SM-equivalent, for sequence length `n`.

    >>> gemm, soft, bound = overlap_bound(8192, 128)
    >>> round(soft / gemm, 3), round(bound, 3)  # softmax ~ half a GEMM; 64 key tiles
    (0.495, 1.484)
    >>> round(overlap_bound(128, 128)[2], 3)  # one tile: nothing to overlap
    1.0
    """
    flops = 4.0 * block_q * block_k * d
    exps = float(block_q * block_k)
    gemm = flops / (MATMUL_TFLOPS * 1e12) * 1e6
    soft = exps / (SFU_TFLOPS * 1e12) * 1e6
    tiles = max(1, -(-n // block_k))
    return gemm, soft, pipeline_speedup(tiles, soft, gemm)


def overlap_rows(data: dict) -> list[dict]:
    """One row per causal setting of the ablation in `data` (a fa3_check_bench JSON): measured gain vs bound."""
    rows = []
    by = {(r["variant"], bool(r["causal"])): r for r in data.get("ablation", [])}
    for causal in (False, True):
        full, off = by.get(("full", causal)), by.get(("no_overlap", causal))
        if full is None or off is None:
            continue
        n, d = int(full.get("N", 8192)), int(full.get("d", 128))
        _, _, bound = overlap_bound(n, d)
        gain = float(off["fa3_ms"]) / float(full["fa3_ms"])
        rows.append({"causal": causal, "N": n, "d": d, "full_tflops": full["fa3_tflops"],
                     "no_overlap_tflops": off["fa3_tflops"], "measured_gain": gain, "bound": bound,
                     "share_of_bound": (gain - 1.0) / (bound - 1.0) if bound > 1.0 else float("nan")})
    return rows


def render(rows: list[dict], source: str) -> str:
    lines = ["# FA3 softmax/GEMM overlap: measured gain beside the pipeline bound", "",
             f"Ablation data: `{source}`; model and assumptions: `tools/fa3_overlap.py` (the seeds' two-stage "
             f"pipeline, `kernels.planning.pipeline_times`; {MATMUL_TFLOPS:.0f} TFLOPs/s matmul, "
             f"{SFU_TFLOPS} TFLOPs/s exp2).", "",
             f"Reproduce: `python tools/fa3_overlap.py --json {source}`", "",
             "| N, d | causal | with overlap TFLOPs/s | without | measured gain | bound | share of the bound's gain |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['N']}, {r['d']} | {'yes' if r['causal'] else 'no'} | {r['full_tflops']:.0f} | "
                     f"{r['no_overlap_tflops']:.0f} | {r['measured_gain']:.3f}x | {r['bound']:.3f}x | "
                     f"{100 * r['share_of_bound']:.0f} % |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/fa3_overlap.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="a fa3_check_bench JSON with an 'ablation' list")
    ap.add_argument("--out", help="write the table here (default: print it)")
    args = ap.parse_args(argv)
    try:
        data = json.loads(Path(args.json).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: --json {args.json}: {exc}", file=sys.stderr)
        return 2
    rows = overlap_rows(data)
    if not rows:
        print(f"error: --json {args.json}: no 'full' and 'no_overlap' ablation rows", file=sys.stderr)
        return 2
    try:
        source = Path(args.json).resolve().relative_to(Path(__file__).resolve().parents[1]).as_posix()
    except ValueError:
        source = args.json
    text = render(rows, source)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
