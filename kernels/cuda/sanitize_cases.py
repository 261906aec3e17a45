"""A small case set over every launcher in libattn_kernels.so, for compute-sanitizer.

``compute-sanitizer --tool memcheck --error-exitcode 1 python -m kernels.cuda.sanitize_cases``
(and ``--tool racecheck``; ``tox -e sanitize`` runs both). Small shapes that still cover tail tiles,
causal diagonals in both alignments, a window, GQA, varlen with an empty sequence, softcap, split-KV
with several splits and an empty split, and the backward launchers when the library exports them.
Inputs are random (never zeros); each launcher's status is checked, and the outputs must be finite
where the semantics say so (a crash or a sanitizer report is the real signal). Exit code 0 = clean.
"""

from __future__ import annotations

import sys

__all__ = ["CASES", "main"]

# (launcher, shape and semantics keywords)
CASES: list[tuple[str, dict]] = [
    ("attn_fa2_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa2_fwd", dict(B=1, Hq=1, Hkv=1, Lq=129, Lk=65, d=128, causal=True, alignment="top_left")),
    ("attn_fa2_fwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=200, d=256, window=(20, 5), varlen=True)),
    ("attn_fa2_fwd", dict(B=1, Hq=2, Hkv=1, Lq=64, Lk=64, d=128, softcap=4.0, dtype="float16")),
    ("attn_fa2_fwd", dict(B=1, Hq=2, Hkv=2, Lq=200, Lk=520, d=128)),  # unmasked tiles, K/V ping-pong
    ("attn_splitkv_fwd", dict(B=1, Hq=8, Hkv=2, Lq=1, Lk=1000, d=128, num_splits=5)),
    ("attn_splitkv_fwd", dict(B=2, Hq=4, Hkv=1, Lq=3, Lk=70, d=64, causal=True, num_splits=4, varlen=True)),
    ("attn_splitkv_fwd", dict(B=1, Hq=2, Hkv=2, Lq=2, Lk=300, d=256, num_splits=0)),
    ("attn_fa1_fwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa1_fwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=100, d=128, window=(20, 5), varlen=True)),
    ("attn_fa1_bwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa2_bwd", dict(B=1, Hq=2, Hkv=1, Lq=70, Lk=131, d=64, causal=True)),
    ("attn_fa2_bwd", dict(B=2, Hq=2, Hkv=2, Lq=33, Lk=100, d=128, window=(20, 5), varlen=True)),
    ("attn_fa2_bwd", dict(B=1, Hq=2, Hkv=2, Lq=200, Lk=300, d=128)),  # several Q tiles, key-tile tail
    ("attn_fa2_bwd", dict(B=1, Hq=2, Hkv=1, Lq=96, Lk=130, d=256, causal=True)),
]


def _run(launcher: str, spec: dict) -> str:
    import torch

    from kernels import cuda_lib

    spec = dict(spec)
    B, Hq, Hkv, Lq, Lk, d = (spec.pop(n) for n in ("B", "Hq", "Hkv", "Lq", "Lk", "d"))
    dtype = getattr(torch, spec.pop("dtype", "bfloat16"))
    varlen = spec.pop("varlen", False)
    num_splits = spec.pop("num_splits", None)
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, Hq, Lq, d, device=dev, generator=g).to(dtype)
    k = torch.randn(B, Hkv, Lk, d, device=dev, generator=g).to(dtype)
    v = torch.randn(B, Hkv, Lk, d, device=dev, generator=g).to(dtype)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, Lq), float("nan"), device=dev)
    kw = dict(spec)
    if varlen:
        kw["seqlens_q"] = torch.tensor([Lq] + [max(0, Lq // 2 - 3)] * (B - 1), device=dev, dtype=torch.int32)
        kw["seqlens_k"] = torch.tensor([Lk] + [0] * (B - 1), device=dev, dtype=torch.int32)
    if num_splits is not None:
        kw["num_splits"] = num_splits
    if launcher.endswith("_bwd"):
        # forward through FA2 first (for O and LSE), then the backward under test
        p = cuda_lib.fwd_params(q, k, v, o, lse, **kw)
        cuda_lib.call("attn_fa2_fwd", p)
        dout = torch.randn(B, Hq, Lq, d, device=dev, generator=g).to(dtype)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        scratch = dict(
            dq_accum=torch.zeros(B, Hq, Lq, d, device=dev),
            d_rowsum=torch.zeros(B, Hq, Lq, device=dev),
            dk_accum=torch.zeros(B, Hq, Lk, d, device=dev),
            dv_accum=torch.zeros(B, Hq, Lk, d, device=dev),
        )
        bp = cuda_lib.bwd_params(q, k, v, o, lse, dout, dq, dk, dv, **scratch, **kw)
        cuda_lib.call(launcher, bp)
        outputs = {"dq": dq, "dk": dk, "dv": dv}  # padded varlen rows are written as zeros
    else:
        p = cuda_lib.fwd_params(q, k, v, o, lse, **kw)
        cuda_lib.call(launcher, p)
        rows = torch.ones(B, 1, Lq, 1, dtype=torch.bool, device=dev)
        if varlen:  # rows past seqlens_q[b] stay unwritten (the NaN poison), by contract
            rows = torch.arange(Lq, device=dev)[None, None, :, None] < kw["seqlens_q"][:, None, None, None]
        outputs = {"o (valid rows)": torch.where(rows, o, 0)}
    torch.cuda.synchronize()
    for name, t in outputs.items():
        bad = int((~torch.isfinite(t.float())).sum())
        if bad:
            raise RuntimeError(f"{name}: {bad} non-finite value(s) of shape {list(t.shape)}")
    return f"{launcher} B{B} H{Hq}/{Hkv} q{Lq} k{Lk} d{d} {kw.get('causal', '')} ok"


def main() -> int:
    try:
        import torch
    except ImportError:
        print("sanitize_cases: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sanitize_cases: no CUDA device", file=sys.stderr)
        return 2
    from kernels import cuda_lib

    lib = cuda_lib.library()
    failures = 0
    for launcher, spec in CASES:
        if getattr(lib, launcher, None) is None:
            print(f"SKIP {launcher}: not exported by {cuda_lib.library_path()}")
            continue
        try:
            print(_run(launcher, spec), flush=True)
        except Exception as e:  # a kernel error is a failure of the set
            failures += 1
            print(f"FAIL {launcher} {spec}: {e}", flush=True)
    print(f"sanitize_cases: {len(CASES)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
