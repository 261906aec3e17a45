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


@pytest.mark.parametrize("v_layout", ["rows", "kmajor"])
@pytest.mark.parametrize("i", range(len(_cases())), ids=[f"fp8-{i}" for i in range(len(_cases()))])
def test_fa3_fp8_matches_reference_and_oracle(i, v_layout):
    from attention_conformance.kernels.check.fp8 import check_fp8 as check_fp8_case

    cuda_library_exporting_or_skip("attn_fa3_fp8_fwd")
    res = check_fp8_case(seed=i, v_layout=v_layout, **_cases()[i])
    assert res["ok"], f"{res['case']}: {'; '.join(res['problems'])}"
