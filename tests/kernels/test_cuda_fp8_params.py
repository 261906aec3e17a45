"""CPU tests of the FP8 forward's ABI (kernels/cuda/include/attn_params.h AttnFp8FwdParams, kernels/cuda_lib.py):
the ctypes mirror against the C header (gcc) and the compiled library, and `fp8_fwd_params`' argument checks."""

from __future__ import annotations

import pytest
from kernel_helpers import c_header_values, cuda_library_or_skip

from attention_conformance.kernels import cuda_lib

torch = pytest.importorskip("torch")


def _c_layout() -> list[int]:
    lines = ['printf("%d %zu\\n", ATTN_FP8_PARAMS_VERSION, sizeof(AttnFp8FwdParams));']
    lines += [f'printf("%zu\\n", offsetof(AttnFp8FwdParams, {n}));' for n, _ in cuda_lib.AttnFp8FwdParams._fields_]
    lines += [f'printf("%d\\n", {c});' for c in ("ATTN_FP8_E4M3FN", "ATTN_FP8_E5M2", "ATTN_FP8_PER_TENSOR",
                                                 "ATTN_FP8_PER_HEAD", "ATTN_FP8_PER_TILE")]
    return c_header_values(lines)


def test_fp8_mirror_matches_c_header():
    c = _c_layout()
    n = len(cuda_lib.AttnFp8FwdParams._fields_) + 2
    assert c[:n] == cuda_lib.fp8_mirror_layout(), "attn_params.h AttnFp8FwdParams and kernels/cuda_lib.py disagree"
    codes = list(cuda_lib.FP8_FORMAT_CODES.values()) + list(cuda_lib.FP8_GRANULARITY_CODES.values())
    assert c[n:] == codes, f"enum values: header {c[n:]} vs cuda_lib {codes}"


def test_fp8_mirror_matches_compiled_library():
    lib = cuda_library_or_skip()
    if getattr(lib, "attn_fp8_params_layout", None) is None:
        pytest.skip("library predates attn_fa3_fp8_fwd (rebuild it)")
    assert cuda_lib.compiled_fp8_layout() == cuda_lib.fp8_mirror_layout(), (
        "libattn_kernels.so was compiled with another AttnFp8FwdParams layout than kernels/cuda_lib.py mirrors")


def _tensors(B=1, Hq=2, Hkv=1, L=40, d=64, fmt=torch.float8_e4m3fn):
    q = torch.zeros(B, Hq, L, d).to(fmt)
    k = torch.zeros(B, Hkv, L, d).to(fmt)
    v = torch.zeros(B, Hkv, L, d).to(fmt)
    o = torch.zeros(B, Hq, L, d, dtype=torch.bfloat16)
    return q, k, v, o


def test_fp8_fwd_params_fills_the_struct():
    q, k, v, o = _tensors()
    ds = [torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1)]
    p = cuda_lib.fp8_fwd_params(q, k, v, o, None, *ds, format="e4m3fn", granularity="per_head", causal=True)
    assert p.format == 0 and p.granularity == 1 and p.tile_q == p.tile_k == 128
    assert p.fwd.dtype == cuda_lib.ATTN_BF16 and p.fwd.causal == 1 and p.fwd.head_dim == 64
    assert p.q_descale == ds[0].data_ptr() and p.fwd.q == q.data_ptr()


@pytest.mark.parametrize("bad, word", [
    (dict(format="e4m3"), "format"),
    (dict(granularity="per_row"), "granularity"),
    (dict(format="e5m2"), "q8.dtype"),
    (dict(granularity="per_tile"), "q_descale"),
])
def test_fp8_fwd_params_names_the_bad_argument(bad, word):
    q, k, v, o = _tensors()
    ds = [torch.ones(()), torch.ones(()), torch.ones(())]
    kw = dict(format="e4m3fn", granularity="per_tensor")
    kw.update(bad)
    with pytest.raises(cuda_lib.KernelError, match=word):
        cuda_lib.fp8_fwd_params(q, k, v, o, None, *ds, **kw)
