"""Times the FA3 forward under several L2 budgets of its head sections (the lab build's ``l2_budget_mb``), in one
process.

``python tools/fa3_env_sweep.py 4,8,32 [--d 64,128,256] [--rounds 3] [--out DIR]``. Each value is a named call of the
lab build (`kernels.cuda.lab.bind_fa3_fwd(params, "default", l2_budget_mb=X)`; a checkout's ``kernels.build --lab``),
timed round-robin on the same inputs (B=4, H=16, N=8192 bf16, causal and not) by `kernels.timing.time_round_robin`,
so the clock drift of the card reaches every value alike. An empty value or 0 is the shipped rule. Writes
``env_sweep.json`` and ``env_sweep.md`` under ``--out`` ("-" for a value the launcher refused).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    import torch

    from attention_conformance.kernels import cuda_lib
    from attention_conformance.kernels.cuda import lab
    from attention_conformance.kernels.timing import time_round_robin

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("values", help="comma-separated L2 budgets in MB ('' or 0 = the shipped rule)")
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "reports/latest/benchmarks"))
    args = ap.parse_args(argv)
    values = args.values.split(",")
    rows = []
    for d in (int(x) for x in args.d.split(",")):
        for causal in (False, True):
            q, k, v = (torch.randn(4, 16, 8192, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            o = torch.empty_like(q)
            lse = torch.empty(4, 16, 8192, device="cuda", dtype=torch.float32)
            p = cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)
            flops = 4 * 4 * 16 * 8192 * 8192 * d / (2 if causal else 1)

            def under(x: str, p=p) -> None:
                lab.call_fa3_fwd(p, "default", l2_budget_mb=int(x or 0))

            row = dict(d=d, causal=causal)
            time_round_robin(row, [(x or "default", lambda x=x: under(x)) for x in values], flops, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "env_sweep.json").write_text(json.dumps(dict(var="l2_budget_mb", values=values, rows=rows), indent=1))
    head = [x or "default" for x in values]
    md = ["# attn_fa3_fwd under lab l2_budget_mb (B=4, H=16, N=8192 bf16, TFLOPs/s)", "",
          "| d | causal | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(head)]
    def cell(r: dict, h: str) -> str:
        return f"{r[h + '_tflops']:.0f}" if h + "_tflops" in r else "-"

    md += [f"| {r['d']} | {r['causal']} | " + " | ".join(cell(r, h) for h in head) + " |" for r in rows]
    (out / "env_sweep.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
