"""One FA3 forward launch per named build, for a profiler (ncu) to capture.

``ncu --clock-control none -k regex:fa3_fwd_kernel python -m attention_conformance.reports.benchmarks.fa3_profile_case
[--d 128] [--causal] [VARIANT ...]`` (variants: keys of `kernels.cuda_lib.FA3_VARIANTS`, default full).
B=4, H=16, N=8192, bf16, random inputs; each build runs twice (a warm-up the profiler also sees, then the
launch to read), so pass ``--launch-skip 1 --launch-count 1`` per build or filter by launch index.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    import torch

    from attention_conformance.kernels import cuda_lib

    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*", default=["full"])
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args(argv)
    q, k, v = (torch.randn(4, 16, args.n, args.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    p = cuda_lib.fwd_params(q, k, v, o, causal=args.causal)
    for variant in args.variants:
        for _ in range(2):
            cuda_lib.call_fa3_variant(p, variant)
        torch.cuda.synchronize()
        print(f"{variant}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
