"""Speed of the FP64 oracle forward relative to the two float64 GEMMs of the same shape (issue 2).

``python -m attention_conformance.oracles.bench [--B 1 --H 4 --L 2048 --d 128 --repeat 5]`` times `oracles.attention`
and
``Q K^T`` plus ``P V`` done as plain NumPy float64 matmuls per head (interleaved runs) and prints
their ratio. The contract is ratio <= 2. The pytest-benchmark version lives in
tests/oracles/test_oracle_bench.py (marker ``benchmark_only``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from .forward import attention

__all__ = ["make_inputs", "gemm_baseline", "measure_ratio", "main"]


def make_inputs(B: int, H: int, L: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, L, d)) for _ in range(3))


def gemm_baseline(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """The two float64 GEMMs of attention, per head: S = Q K^T ([L x L]) and S V."""
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = q[b, h] @ k[b, h].T
            s @ v[b, h]


def measure_ratio(B: int = 1, H: int = 4, L: int = 2048, d: int = 128, repeat: int = 5, **kw) -> dict:
    """Time the oracle forward (with keywords ``kw``) and the GEMM baseline, interleaved, ``repeat`` times.

    Interleaving makes both see the same machine load (the CI machine is shared). ``ratio`` uses the
    fastest run of each (least disturbed); ``ratio_median`` the medians.
    """
    q, k, v = make_inputs(B, H, L, d)
    attention(q, k, v, **kw)  # warm-up
    gemm_baseline(q, k, v)
    t_gemm, t_oracle = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        gemm_baseline(q, k, v)
        t1 = time.perf_counter()
        attention(q, k, v, **kw)
        t2 = time.perf_counter()
        t_gemm.append(t1 - t0)
        t_oracle.append(t2 - t1)
    return {
        "B": B, "H": H, "L": L, "d": d,
        "oracle_s": min(t_oracle), "gemm_s": min(t_gemm), "ratio": min(t_oracle) / min(t_gemm),
        "ratio_median": statistics.median(t_oracle) / statistics.median(t_gemm),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.oracles.bench",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--L", type=int, default=2048)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--causal", action="store_true", help="time the causal forward (baseline stays dense)")
    a = ap.parse_args(argv)
    kw = {"causal": True} if a.causal else {}
    r = measure_ratio(a.B, a.H, a.L, a.d, a.repeat, **kw)
    print(
        f"B={r['B']} H={r['H']} L={r['L']} d={r['d']}{' causal' if a.causal else ''}: oracle forward "
        f"{r['oracle_s'] * 1e3:.1f} ms, two float64 GEMMs {r['gemm_s'] * 1e3:.1f} ms (fastest of {a.repeat}), "
        f"ratio {r['ratio']:.2f} (median ratio {r['ratio_median']:.2f}; contract <= 2)"
    )
    return 0 if r["ratio"] <= 2.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
