"""The seed's CPU lab: a tiled streaming forward and a recomputation backward, checked two ways.

``python -m attention_conformance.oracles.lab --length 7 --block 3`` ([FA-anim] "动手 · CPU 参考实现") builds one causal
head (seeded), then

1. runs a small FA-style kernel written here: the online softmax over key tiles of ``--block``
   keys carrying (m, l, o) (SEMANTICS.md §12), and a backward that rebuilds P = exp(S - L) tile by
   tile from the stored L = m + log l (§13);
2. compares its forward with the dense FP64 oracle (`oracles.attention`): max error < 1e-12;
3. compares its dQ, dK, dV with central differences of the dense oracle: max error < 2e-8.

It prints the errors and PASS (exit 0) or FAIL (exit 1). ``--mutate`` plants one of the seed's three
edits into the lab kernel, each of which must make it FAIL: ``drop-alpha`` (the old numerator is not
rescaled by alpha), ``drop-scale`` (1/sqrt(d) forgotten), ``causal-strict`` (``j <= i`` became ``j < i``).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from .forward import attention
from .numgrad import numerical_gradients

__all__ = ["MUTATIONS", "lab_forward", "lab_backward", "run_lab", "main"]

MUTATIONS = ("none", "drop-alpha", "drop-scale", "causal-strict")
FORWARD_TOL = 1e-12
GRAD_TOL = 2e-8


def _visible(i: np.ndarray, j: np.ndarray, mutate: str) -> np.ndarray:
    """Causal visibility for equal lengths (§4): j <= i (the planted bug: j < i)."""
    return (j < i) if mutate == "causal-strict" else (j <= i)


def _scale(d: int, mutate: str) -> float:
    return 1.0 if mutate == "drop-scale" else 1.0 / math.sqrt(d)


def lab_forward(q, k, v, block: int, mutate: str = "none") -> tuple[np.ndarray, np.ndarray]:
    """Online-softmax forward of one causal head, rows streamed over key tiles; returns (O, L)."""
    n, d = q.shape
    out, lse = np.zeros((n, v.shape[1])), np.full(n, -np.inf)
    scale = _scale(d, mutate)
    for i in range(n):
        m, l, o = -np.inf, 0.0, np.zeros(v.shape[1])
        for start in range(0, n, block):
            j = np.arange(start, min(start + block, n))  # tail tile: j < N
            valid = _visible(np.full(j.size, i), j, mutate)
            if not valid.any():
                continue  # fully masked tile: skip (no -inf - -inf)
            s = np.where(valid, (k[j] @ q[i]) * scale, -np.inf)
            m2 = max(m, float(s.max()))
            alpha = math.exp(m - m2) if l else 0.0
            p = np.exp(s - m2)
            o = (o if mutate == "drop-alpha" else alpha * o) + p @ v[j]
            l = alpha * l + float(p.sum())
            m = m2
        if l > 0:
            out[i], lse[i] = o / l, m + math.log(l)
    return out, lse


def lab_backward(q, k, v, out, lse, dout, block: int, mutate: str = "none"):
    """Recomputation backward: P = exp(S - L) per (query tile, key tile); dQ, dK, dV (§13)."""
    n, d = q.shape
    scale = _scale(d, mutate)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    big_d = np.sum(dout * out, axis=1)  # D_i = dO_i . O_i
    for r0 in range(0, n, block):
        i = np.arange(r0, min(r0 + block, n))
        for c0 in range(0, n, block):
            j = np.arange(c0, min(c0 + block, n))
            vis = _visible(i[:, None], j[None, :], mutate)
            lse_i = np.where(np.isfinite(lse[i]), lse[i], 0.0)[:, None]
            p = np.where(vis, np.exp(np.where(vis, (q[i] @ k[j].T) * scale, 0.0) - lse_i), 0.0)
            dv[j] += p.T @ dout[i]
            dp = dout[i] @ v[j].T
            ds = p * (dp - big_d[i][:, None])
            dq[i] += scale * ds @ k[j]
            dk[j] += scale * ds.T @ q[i]
    return dq, dk, dv


def run_lab(length: int = 7, block: int = 3, d: int = 4, seed: int = 0, mutate: str = "none") -> dict:
    """Run the lab; return the errors and ``passed``."""
    if mutate not in MUTATIONS:
        raise ValueError(f"mutate must be one of {MUTATIONS}; got {mutate!r}")
    if length < 1 or block < 1 or d < 1:
        raise ValueError(f"length, block and d must be >= 1; got length={length}, block={block}, d={d}")
    rng = np.random.default_rng(seed)
    q, k, v, dout = (rng.standard_normal((length, d)) for _ in range(4))

    def dense(qq, kk, vv):
        return attention(qq[None, None], kk[None, None], vv[None, None], causal=True)

    ref_out, ref_lse = (x[0, 0] for x in dense(q, k, v))
    out, lse = lab_forward(q, k, v, block, mutate)
    fwd_err = float(max(np.abs(out - ref_out).max(), np.abs(lse - ref_lse).max()))
    grads = lab_backward(q, k, v, out, lse, dout, block, mutate)
    numeric = numerical_gradients(lambda a, b, c: dense(a, b, c)[0][0, 0], q, k, v, dout, eps=1e-6)
    grad_err = {n: float(np.abs(g - r).max()) for n, g, r in zip(("dQ", "dK", "dV"), grads, numeric)}
    passed = fwd_err < FORWARD_TOL and all(e < GRAD_TOL for e in grad_err.values())
    return {"forward_err": fwd_err, "grad_err": grad_err, "passed": passed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attention_conformance.oracles.lab",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=7)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--dim", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mutate", choices=MUTATIONS, default="none")
    a = ap.parse_args(argv)
    r = run_lab(a.length, a.block, a.dim, a.seed, a.mutate)
    print(f"lab: causal, length={a.length}, block={a.block}, d={a.dim}, seed={a.seed}, mutate={a.mutate}")
    print(f"forward max |streaming - dense| = {r['forward_err']:.3e}  (< {FORWARD_TOL:g})")
    for n, e in r["grad_err"].items():
        print(f"{n} max |recomputation - central difference| = {e:.3e}  (< {GRAD_TOL:g})")
    print("PASS" if r["passed"] else "FAIL")
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
