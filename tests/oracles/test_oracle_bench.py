"""pytest-benchmark measurement of the oracle forward vs the two float64 GEMMs (issue 2 speed contract).

Runs only with benchmarks enabled, e.g.
``python -m pytest tests/oracles/test_oracle_bench.py -m benchmark_only --benchmark-enable -s``.
Before every timed oracle round, the untimed ``setup`` runs and times the GEMM baseline, so both see
the same machine load. The ratio (fastest oracle round / fastest GEMM round, contract <= 2) goes
into the benchmark's ``extra_info`` and is printed.

Both run on one BLAS thread, the setting of the 2-core CI where the contract was set: on a 16-core GPU host
(``tox -e bench`` there) multi-threaded GEMMs against the oracle's single-threaded element-wise steps read 3.19, a
figure of the core count, not of the oracle's work.
"""

from __future__ import annotations

import time

import pytest
from threadpoolctl import threadpool_limits

from attention_conformance import oracles
from attention_conformance.oracles.bench import gemm_baseline, make_inputs

SHAPE = dict(B=1, H=4, L=2048, d=128)


@pytest.mark.benchmark_only
def test_bench_oracle_forward_vs_gemms(benchmark):
    if benchmark.disabled:
        pytest.skip("benchmarks disabled (pyproject addopts --benchmark-disable); pass --benchmark-enable")
    q, k, v = make_inputs(**SHAPE)
    gemm_times: list[float] = []

    def timed_gemm_then_args():
        t0 = time.perf_counter()
        gemm_baseline(q, k, v)
        gemm_times.append(time.perf_counter() - t0)
        return (q, k, v), {}

    with threadpool_limits(limits=1):
        benchmark.pedantic(oracles.attention, setup=timed_gemm_then_args, rounds=5, iterations=1, warmup_rounds=1)
    ratio = benchmark.stats.stats.min / min(gemm_times)
    benchmark.extra_info.update(SHAPE, gemm_min_s=min(gemm_times), ratio=ratio, blas_threads=1)
    print(f"\noracle forward / two float64 GEMMs = {ratio:.2f} at {SHAPE} (contract <= 2)")
    assert ratio <= 2.0, f"oracle forward is {ratio:.2f}x the two GEMMs at {SHAPE} (contract <= 2)"
