"""The case lists of the FA3 backward and FA3 FP8 device checks (plain dicts: dtype names, no torch).

A case is the keyword arguments of `backward.check_backward` / `fp8.check_fp8`: shape (B, Hq, Hkv, Lq, Lk, d),
dtype or FP8 format and granularity, and the semantics of SEMANTICS.md it exercises (causal in both alignments §4,
windows §5, varlen §7 with NaN in the padding, fully masked rows §8, GQA §9, FP8 §10-§11, softcap, [B, L, H, D]
strides, Lk = 0). The lists are what tests/kernels/test_cuda_fa3_bwd_device.py and test_cuda_fa3_fp8_device.py
parametrize over, and what tools/fa3_bwd_check_bench.py and tools/fa3_fp8_check_bench.py check before they time.
"""

from __future__ import annotations

__all__ = ["FA3_BWD_CASES", "FA3_BWD_DETERMINISM_CASES", "FA3_BWD_WIDE_CASES", "FA3_BWD_WIDE_DETERMINISM_CASES",
           "FA3_BWD_WIDE_DIMS", "FP8_CASES", "OVERLAP_DEFAULT_D", "ROWS128_D"]

#: the head dim at which the FA3 backward's atomics build overlaps its GEMMs with the element-wise work by default
#: (kernels/cuda/fa3_bwd.cu; the default TMA reduce-add build overlaps at neither head dim)
OVERLAP_DEFAULT_D = 64
#: the head dim at which the FA3 backward's default build streams 128-row query tiles (kernels/cuda/fa3_bwd.cu)
ROWS128_D = 64

FA3_BWD_CASES: list[dict] = [
    dict(B=2, Hq=4, Hkv=4, Lq=128, Lk=128, d=64, dtype="bfloat16"),
    dict(B=2, Hq=4, Hkv=4, Lq=256, Lk=256, d=128, dtype="float16"),
    dict(B=2, Hq=4, Hkv=2, Lq=173, Lk=301, d=128, dtype="bfloat16", causal=True),
    dict(B=2, Hq=4, Hkv=4, Lq=301, Lk=173, d=128, dtype="float16", causal=True, alignment="top_left"),
    dict(B=2, Hq=4, Hkv=4, Lq=200, Lk=100, d=64, dtype="bfloat16", causal=True),  # fully masked rows (bottom-right)
    dict(B=1, Hq=4, Hkv=1, Lq=190, Lk=500, d=128, dtype="bfloat16", window=(50, 20)),
    dict(B=2, Hq=4, Hkv=2, Lq=150, Lk=260, d=64, dtype="float16", causal=True, seqlens_q=(150, 37),
         seqlens_k=(200, 260), nan_padding=True),
    dict(B=2, Hq=2, Hkv=2, Lq=96, Lk=96, d=128, dtype="bfloat16", softcap=5.0, scale=0.5),
    dict(B=1, Hq=2, Hkv=2, Lq=1000, Lk=1000, d=64, dtype="float16", causal=True),
    dict(B=1, Hq=2, Hkv=1, Lq=513, Lk=777, d=128, dtype="bfloat16", window=(100, None), causal=True,
         alignment="top_left"),
    dict(B=2, Hq=2, Hkv=2, Lq=100, Lk=300, d=128, dtype="bfloat16", layout="bshd"),
    dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=64, dtype="float16"),
]

#: cases on which two runs of attn_fa3_bwd_deterministic must agree bit for bit
FA3_BWD_DETERMINISM_CASES: list[dict] = [
    dict(B=2, Hq=4, Hkv=2, Lq=700, Lk=900, d=128, dtype="bfloat16", causal=True),
    dict(B=1, Hq=4, Hkv=4, Lq=1024, Lk=1024, d=64, dtype="float16"),
]

#: the (d, dv) of the FA3 backward's wide builds (kernels/cuda/include/hopper/bwd_wide.cuh)
FA3_BWD_WIDE_DIMS: tuple[tuple[int, int], ...] = ((192, 192), (256, 256), (192, 128))

#: the wide builds' cases: every feature of FA3_BWD_CASES at each (d, dv) of FA3_BWD_WIDE_DIMS (``dv``: the head dim of
#: v and dout). Lengths are not multiples of the 64-key / 64-query tiles, so tails, the per-consumer 32-query halves
#: and the alternating dQ block (d = 192: tile parity) all occur.
FA3_BWD_WIDE_CASES: list[dict] = [
    dict(B=2, Hq=4, Hkv=4, Lq=256, Lk=256, d=256, dtype="bfloat16"),
    dict(B=2, Hq=4, Hkv=4, Lq=200, Lk=330, d=192, dtype="float16"),
    dict(B=2, Hq=4, Hkv=4, Lq=200, Lk=330, d=192, dv=128, dtype="bfloat16"),
    dict(B=2, Hq=4, Hkv=2, Lq=173, Lk=301, d=256, dtype="float16", causal=True),
    dict(B=2, Hq=4, Hkv=4, Lq=301, Lk=173, d=192, dtype="bfloat16", causal=True, alignment="top_left"),
    dict(B=2, Hq=4, Hkv=4, Lq=200, Lk=100, d=192, dv=128, dtype="float16", causal=True),  # fully masked rows
    dict(B=1, Hq=4, Hkv=1, Lq=190, Lk=500, d=256, dtype="bfloat16", window=(50, 20)),
    dict(B=2, Hq=4, Hkv=2, Lq=150, Lk=260, d=192, dtype="float16", causal=True, seqlens_q=(150, 37),
         seqlens_k=(200, 260), nan_padding=True),
    dict(B=2, Hq=4, Hkv=2, Lq=150, Lk=260, d=256, dtype="bfloat16", causal=True, seqlens_q=(150, 37),
         seqlens_k=(200, 260), nan_padding=True),
    dict(B=2, Hq=4, Hkv=2, Lq=150, Lk=260, d=192, dv=128, dtype="bfloat16", seqlens_q=(100, 150),
         seqlens_k=(260, 61), nan_padding=True),
    dict(B=2, Hq=2, Hkv=2, Lq=96, Lk=96, d=256, dtype="bfloat16", softcap=5.0, scale=0.5),
    dict(B=1, Hq=2, Hkv=1, Lq=513, Lk=777, d=192, dtype="bfloat16", window=(100, None), causal=True,
         alignment="top_left"),
    dict(B=2, Hq=4, Hkv=2, Lq=300, Lk=260, d=192, dv=128, dtype="float16", window=(40, 70)),  # GQA + window
    dict(B=2, Hq=2, Hkv=2, Lq=100, Lk=300, d=256, dtype="bfloat16", layout="bshd"),
    dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=192, dv=128, dtype="float16"),
    dict(B=1, Hq=2, Hkv=2, Lq=1000, Lk=1000, d=256, dtype="float16", causal=True),
]

#: cases on which two runs of attn_fa3_bwd_deterministic must agree bit for bit, one per wide build
FA3_BWD_WIDE_DETERMINISM_CASES: list[dict] = [
    dict(B=2, Hq=4, Hkv=2, Lq=700, Lk=900, d=256, dtype="bfloat16", causal=True),
    dict(B=1, Hq=4, Hkv=4, Lq=1024, Lk=1024, d=192, dtype="float16"),
    dict(B=2, Hq=4, Hkv=2, Lq=600, Lk=500, d=192, dv=128, dtype="bfloat16", window=(300, 100)),
]

FP8_CASES: list[dict] = [
    dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=128, granularity="per_tensor"),
    dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=128, granularity="per_head", causal=True),
    dict(B=2, Hq=4, Hkv=2, Lq=300, Lk=260, d=128, granularity="per_tile", causal=True, bottom_right=False),
    dict(B=1, Hq=4, Hkv=1, Lq=256, Lk=512, d=64, granularity="per_tile"),
    dict(B=2, Hq=2, Hkv=2, Lq=150, Lk=390, d=64, granularity="per_head", format="e5m2", causal=True),
    dict(B=2, Hq=4, Hkv=2, Lq=190, Lk=500, d=128, granularity="per_tensor", format="e5m2", window=(50, 20)),
    dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=128, granularity="per_tile", varlen=True, causal=True),
    dict(B=2, Hq=4, Hkv=2, Lq=128, Lk=256, d=64, granularity="per_tensor", softcap=5.0),
    dict(B=2, Hq=4, Hkv=2, Lq=100, Lk=300, d=128, granularity="per_head", layout="bshd", incoherent=True),
    dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=64, granularity="per_tensor"),
    dict(B=1, Hq=2, Hkv=1, Lq=1000, Lk=1000, d=128, granularity="per_tile", outliers=True, incoherent=True),
    # more work tiles (280 of 192 rows) than the H200 has SMs: the persistent builds' CTAs each take several
    dict(B=1, Hq=140, Hkv=70, Lq=300, Lk=260, d=128, granularity="per_head", causal=True),
    # d = 256: 64-key tiles, two per descale block of 128 keys
    dict(B=2, Hq=4, Hkv=2, Lq=300, Lk=333, d=256, granularity="per_tile", causal=True, bottom_right=False),
    dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, d=256, granularity="per_tensor", format="e5m2", window=(50, 20)),
    dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=256, granularity="per_head", varlen=True, causal=True),
    dict(B=1, Hq=2, Hkv=1, Lq=600, Lk=700, d=256, granularity="per_tile", outliers=True, incoherent=True),
]
