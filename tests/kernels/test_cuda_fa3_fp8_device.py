"""GPU tests of the FA3 FP8 forward (kernels/cuda/fa3_fp8_fwd.cu, sm_90a) against the NumPy FA3 FP8 reference
(kernels/reference/fa3.py:forward_fp8, same codes and descales) and, through the conformance judge, the FP64 oracle
on the dequantized inputs under the FP8 bounds of conformance/TOLERANCES.md (`kernels.check.fp8.check_fp8`).

Marked ``gpu``; skipped without a Hopper GPU or the kernel library. The cases
(`kernels.check.cases.FP8_CASES`) cover every granularity, both formats, d = 64, 128 and 256,
causal in both alignments, windows, softcap, GQA, varlen, bshd strides, Lk = 0 and incoherent outlier inputs;
each also checks guard bands, NaN poison in real rows, padded rows left unwritten and input immutability, with V
as rows (the in-kernel transpose) and k-major (``attn_fp8_pack_vt`` first, its output against
`cuda_lib.pack_vt_reference`).
"""

from __future__ import annotations

import pytest
from kernel_helpers import cuda_library_exporting_or_skip

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                       reason="needs a Hopper (sm_90) GPU"),
]


def _cases():
    from attention_conformance.kernels.check.cases import FP8_CASES

    return FP8_CASES


# The builds of d = 96 and 192 (hopper/fp8_defaults.cuh; Q, K and V in shared memory as at d = 128 / 256, the padding
# columns zero-filled by TMA) through every granularity and feature cuda-fa3-fp8 claims at them (no incoherent
# processing: its Hadamard rotation needs a power-of-two head dim); ids fp8-d96-<i>, fp8-d192-<i>.
NEW_DIM_SHAPES = [
    dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, granularity="per_tensor"),
    dict(B=2, Hq=4, Hkv=2, Lq=300, Lk=260, granularity="per_tile", causal=True, bottom_right=False),
    dict(B=2, Hq=2, Hkv=2, Lq=150, Lk=390, granularity="per_head", format="e5m2", causal=True),
    dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, granularity="per_tensor", format="e5m2", window=(50, 20)),
    dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, granularity="per_tile", varlen=True, causal=True),
    dict(B=2, Hq=4, Hkv=2, Lq=128, Lk=256, granularity="per_tensor", softcap=5.0),
    dict(B=2, Hq=4, Hkv=2, Lq=100, Lk=300, granularity="per_head", layout="bshd"),
    dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, granularity="per_tensor"),
    dict(B=1, Hq=2, Hkv=1, Lq=600, Lk=700, granularity="per_tile", outliers=True),
    dict(B=1, Hq=140, Hkv=70, Lq=300, Lk=260, granularity="per_head", causal=True),  # more work tiles than SMs
]
NEW_DIM_CASES = {f"fp8-d{d}-{i}": dict(shape, d=d) for d in (96, 192) for i, shape in enumerate(NEW_DIM_SHAPES)}


@pytest.mark.parametrize("v_layout", ["rows", "kmajor"])
@pytest.mark.parametrize("name", NEW_DIM_CASES)
def test_fa3_fp8_new_head_dims_match_reference_and_oracle(name, v_layout):
    from attention_conformance.kernels.check.fp8 import check_fp8 as check_fp8_case

    cuda_library_exporting_or_skip("attn_fa3_fp8_fwd")
    res = check_fp8_case(seed=list(NEW_DIM_CASES).index(name), v_layout=v_layout, **NEW_DIM_CASES[name])
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])}"


@pytest.mark.parametrize("v_layout", ["rows", "kmajor"])
@pytest.mark.parametrize("i", range(len(_cases())), ids=[f"fp8-{i}" for i in range(len(_cases()))])
def test_fa3_fp8_matches_reference_and_oracle(i, v_layout):
    from attention_conformance.kernels.check.fp8 import check_fp8 as check_fp8_case

    cuda_library_exporting_or_skip("attn_fa3_fp8_fwd")
    res = check_fp8_case(seed=i, v_layout=v_layout, **_cases()[i])
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])}"
