"""Launches of one FA3 kernel (forward, backward or FP8 forward) for a profiler (ncu) to capture.

``ncu --clock-control none -k regex:fa3_fwd_kernel python tools/fa3_profile_case.py
[--kernel KERNEL] [--d 128] [--causal] [VARIANT ...]``. Forward variants: keys of `kernels.cuda.lab.FA3_FWD_VARIANTS`
(default full); FP8 variants: values of ``lab FP8_VARIANTS`` (default: the default build), ``vt`` or
``vt:VARIANT`` for V packed k-major (``v_layout="kmajor"``, its default build or VARIANT); backward variants:
lab FA3_BWD_VARIANTS (default: the default build). B=4, H=16, N=8192, bf16 (FP8: e4m3 per-tensor
descales of 1), random inputs; each build runs twice (a warm-up the profiler also sees, then the launch to read), so
pass ``--launch-skip 1 --launch-count 1`` per build or filter by launch index. The kernel names to filter on:
``fa3_fwd_kernel``, ``fa3_bwd_kernel`` (the backward's pre- and postprocess kernels run too), ``fa3_fp8_fwd_kernel``.
``--kernel fa4`` / ``fa4bwd``: flash-attn-4's forward / forward and backward (``flash_attn.cute.flash_attn_func``,
its [B, N, H, D] layout, the same shape), for the same profiler sections beside ours; filter on ``ForwardSm90`` /
``BackwardSm90`` (the first call also JIT-compiles, which launches nothing those filters match).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = ["main"]

KERNELS = ("fwd", "bwd", "fp8", "fa4", "fa4bwd")


def _launcher(kernel: str, d: int, n: int, causal: bool) -> Callable[[str], None]:
    """A function running the chosen kernel's build ``variant`` once on fixed random inputs."""
    import torch

    from attention_conformance.kernels import cuda_bwd_lib, cuda_lib
    from attention_conformance.kernels.cuda import lab

    if kernel.startswith("fa4"):
        import flash_attn.cute as fa4

        grad = kernel == "fa4bwd"
        qt, kt, vt = (torch.randn(4, n, 16, d, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
                      for _ in range(3))
        dout = torch.randn_like(qt)

        def fa4_call(variant: str) -> None:
            out = fa4.flash_attn_func(qt, kt, vt, causal=causal)[0]
            if grad:
                torch.autograd.grad(out, (qt, kt, vt), dout)

        return fa4_call
    q, k, v = (torch.randn(4, 16, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(4, 16, n, device="cuda", dtype=torch.float32)
    if kernel == "fwd":
        p = cuda_lib.fwd_params(q, k, v, o, causal=causal)

        def fwd(variant: str) -> None:
            if variant in ("full", "default"):  # the shipped build: no lab library needed
                cuda_lib.call("attn_fa3_fwd", p)
            else:
                lab.call_fa3_fwd(p, variant)

        return fwd
    if kernel == "fp8":
        x8 = [t.to(torch.float8_e4m3fn) for t in (q, k, v)]
        ones = [torch.ones((), device="cuda") for _ in range(3)]
        p8 = cuda_lib.fp8_fwd_params(*x8, o, lse, *ones, format="e4m3fn", granularity="per_tensor", causal=causal)
        pvt = cuda_lib.fp8_fwd_params(x8[0], x8[1], cuda_lib.pack_vt(x8[2]), o, lse, *ones, format="e4m3fn",
                                      granularity="per_tensor", causal=causal, v_layout="kmajor")

        def fp8(variant: str) -> None:
            kmajor, _, rest = variant.partition(":") if variant.startswith("vt") else ("", "", variant)
            build = rest if rest and rest != "full" else None
            if build is None:
                cuda_lib.call("attn_fa3_fp8_fwd", pvt if kmajor else p8)
            else:
                lab.call_fp8_fwd(pvt if kmajor else p8, build)

        return fp8
    cuda_lib.call("attn_fa3_fwd", cuda_lib.fwd_params(q, k, v, o, lse, causal=causal))
    dout = torch.randn_like(q)
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    pb = cuda_bwd_lib.bwd_params(q, k, v, o, lse, dout, dq, dk, dv, causal=causal, **cuda_bwd_lib.bwd_scratch(q, k))

    def bwd(variant: str) -> None:
        if variant in ("full", "default"):
            cuda_lib.call("attn_fa3_bwd", pb)
        else:  # a lab build's named backward variant (atomic_dq, ...)
            lab.call_fa3_bwd(pb, variant)

    return bwd


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*", default=["full"])
    ap.add_argument("--kernel", choices=KERNELS, default="fwd")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args(argv)
    run = _launcher(args.kernel, args.d, args.n, args.causal)
    for variant in args.variants:
        for _ in range(2):
            run(variant)
        torch.cuda.synchronize()
        print(f"{args.kernel} {variant}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
