"""pytest-benchmark measurements of the CUDA forward kernels (``tox -e bench`` on a GPU runner).

Marked ``benchmark_only`` and ``gpu``. Each benchmark times one launch with CUDA events semantics
(a synchronize after the launch inside the timed call) on the issue-6 shapes: FA2 forward at
B=4, H=16, N=8192, d=128 bf16 (causal and not) and split-KV decoding Lq=1, Lk=128k, Hq=32, Hkv=8.
The side-by-side comparison with torch SDPA flash/cuDNN and the committed numbers come from
``reports/benchmarks/cuda_fwd_check_bench.py`` (reports/benchmarks/cuda_fwd.md).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.benchmark_only,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def _launch(launcher, params):
    from kernels import cuda_lib

    def run():
        cuda_lib.call(launcher, params)
        torch.cuda.synchronize()

    return run


@pytest.mark.parametrize("causal", [False, True])
def test_fa2_fwd_8k_d128(benchmark, causal):
    from kernels import cuda_lib

    q, k, v = (torch.randn(4, 16, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(4, 16, 8192, device="cuda")
    p = cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)
    fn = _launch("attn_fa2_fwd", p)
    fn()
    benchmark.pedantic(fn, rounds=20, warmup_rounds=3)
    flops = 4 * 4 * 16 * 8192 * 8192 * 128 / (2 if causal else 1)
    benchmark.extra_info["tflops_median"] = flops / benchmark.stats.stats.median / 1e12


def test_splitkv_decode_128k(benchmark):
    from kernels import cuda_lib

    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8, 131072, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o = torch.empty_like(q)
    lse = torch.empty(1, 32, 1, device="cuda")
    p = cuda_lib.fwd_params(q, k, v, o, lse)
    fn = _launch("attn_splitkv_fwd", p)
    fn()
    benchmark.pedantic(fn, rounds=30, warmup_rounds=3)
    benchmark.extra_info["TBps_median"] = 2 * 8 * 131072 * 128 * 2 / benchmark.stats.stats.median / 1e12
