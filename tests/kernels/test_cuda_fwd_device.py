"""GPU tests of the CUDA forward kernels (FA2 forward, split-KV): random inputs vs a float64 reference.

Marked ``gpu``; skipped cleanly without CUDA or without the kernel library. Each case draws fresh
random inputs, poisons the outputs with NaN inside sentinel guard bands and checks values, LSE,
fully masked rows (O = 0, LSE = -inf, SEMANTICS.md §8), padded rows left unwritten (§7), guard bands
and input immutability (`kernels.check.forward.check_forward`: the conformance judge's verdict against the FP64
oracle under the a-priori bounds of conformance/TOLERANCES.md).
"""

from __future__ import annotations

import zlib

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

CASES = [
    ("attn_fa2_fwd", dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=64, dtype=torch.bfloat16)),
    ("attn_fa2_fwd", dict(B=2, Hq=4, Hkv=4, Lq=257, Lk=129, d=128, dtype=torch.float16, causal=True)),
    ("attn_fa2_fwd", dict(B=1, Hq=2, Hkv=1, Lq=300, Lk=77, d=256, dtype=torch.bfloat16, causal=True,
                          bottom_right=False)),
    ("attn_fa2_fwd", dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, d=128, dtype=torch.bfloat16, window=(50, 20))),
    ("attn_fa2_fwd", dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=128, dtype=torch.bfloat16, varlen=True, causal=True)),
    ("attn_fa2_fwd", dict(B=2, Hq=4, Hkv=2, Lq=128, Lk=256, d=128, dtype=torch.bfloat16, softcap=5.0)),
    ("attn_fa2_fwd", dict(B=2, Hq=4, Hkv=2, Lq=100, Lk=300, d=256, dtype=torch.float16, layout="bshd")),
    ("attn_splitkv_fwd", dict(B=2, Hq=32, Hkv=8, Lq=1, Lk=20000, d=128, dtype=torch.bfloat16, num_splits=7)),
    ("attn_splitkv_fwd", dict(B=2, Hq=8, Hkv=2, Lq=16, Lk=3000, d=128, dtype=torch.float16, causal=True)),
    ("attn_splitkv_fwd", dict(B=3, Hq=8, Hkv=2, Lq=4, Lk=900, d=64, dtype=torch.bfloat16, varlen=True)),
    ("attn_splitkv_fwd", dict(B=1, Hq=4, Hkv=2, Lq=1, Lk=0, d=256, dtype=torch.bfloat16)),
]


@pytest.mark.parametrize("launcher, spec", CASES, ids=[f"{lau[5:]}-{i}" for i, (lau, _) in enumerate(CASES)])
def test_forward_matches_float64_reference(launcher, spec):
    from attention_conformance.kernels import cuda_lib
    from attention_conformance.kernels.check.forward import check_forward as check_case

    try:
        cuda_lib.library()
    except cuda_lib.LibraryUnavailable as e:
        pytest.skip(str(e))
    res = check_case(launcher, seed=zlib.crc32(repr(sorted(spec.items())).encode()) % 1000, **spec)
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])} (rel err {res['rel_err']:.3e})"
