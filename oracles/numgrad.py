"""Central-difference gradient checker for any scalar-valued function of q, k, v (FP64).

`numerical_gradients(f, q, k, v, dout, eps)` differentiates ``L(q, k, v) = sum(f(q, k, v) * dout)``
by central differences, one input entry at a time: ``(L(x + eps) - L(x - eps)) / (2 eps)``.
Truncation error is O(eps^2), rounding error O(eps_64 |L| / eps); eps = 1e-6 gives ~1e-10 for O(1)
inputs, well inside the 2e-8 bound of the seed lab ([FA-anim] "动手 · CPU 参考实现").
`compare_gradients` / `gradcheck` report the worst entry with its index (SEMANTICS.md §13).
`central_differences` is the general form: any list of arguments (e.g. q, k, v and the sinks of §18) and any
list of outputs with their cotangents (e.g. out with dout and LSE with dlse).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["numerical_gradients", "central_differences", "compare_gradients", "gradcheck", "GradientMismatch"]


class GradientMismatch(AssertionError):
    """Raised by `gradcheck` when analytic and numerical gradients differ by more than atol."""


def central_differences(
    f: Callable[..., Sequence[np.ndarray]],
    args: Sequence,
    cotangents: Sequence,
    eps: float = 1e-6,
) -> list[np.ndarray]:
    """Central-difference gradients of ``L = sum_o sum(f(*args)[o] * cotangents[o])`` w.r.t. every arg.

    ``f`` returns a sequence of outputs, one per cotangent. Entries with a zero cotangent are left out of
    the sum (so a -inf LSE of a fully masked row with dlse = 0 does not make L NaN). Returns float64 arrays
    shaped like ``args``.
    """
    xs = [np.array(x, dtype=np.float64) for x in args]
    cts = [np.asarray(c, dtype=np.float64) for c in cotangents]

    def loss() -> float:
        outs = f(*xs)
        return float(sum(np.sum(np.where(c != 0, np.asarray(o, dtype=np.float64) * c, 0.0))
                         for o, c in zip(outs, cts, strict=True)))

    grads = []
    for x in xs:
        g = np.zeros_like(x)
        flat, gflat = x.reshape(-1), g.reshape(-1)
        for idx in range(flat.size):
            orig = flat[idx]
            flat[idx] = orig + eps
            up = loss()
            flat[idx] = orig - eps
            down = loss()
            flat[idx] = orig
            gflat[idx] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


def numerical_gradients(
    f: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    q,
    k,
    v,
    dout,
    eps: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Central-difference gradients of ``sum(f(q, k, v) * dout)`` w.r.t. q, k, v (float64 copies):
    `central_differences` with one output."""
    dq, dk, dv = central_differences(lambda *a: (f(*a),), (q, k, v), (dout,), eps)
    return dq, dk, dv


def compare_gradients(analytic, numeric, names=("dq", "dk", "dv")) -> dict[str, tuple[float, tuple[int, ...]]]:
    """Max absolute error and its index for each pair of gradients: ``{name: (err, index)}``."""
    report = {}
    for name, a, n in zip(names, analytic, numeric):
        a, n = np.asarray(a, dtype=np.float64), np.asarray(n, dtype=np.float64)
        if a.shape != n.shape:
            raise ValueError(f"{name}: analytic shape {a.shape} != numerical shape {n.shape}")
        if a.size == 0:
            report[name] = (0.0, ())
            continue
        diff = np.abs(a - n)
        idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
        report[name] = (float(diff[idx]), tuple(int(i) for i in idx))
    return report


def gradcheck(
    f: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    grad_f: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple],
    q,
    k,
    v,
    dout,
    *,
    eps: float = 1e-6,
    atol: float = 2e-8,
) -> dict[str, tuple[float, tuple[int, ...]]]:
    """Check ``grad_f(q, k, v, dout)`` against central differences of ``f``; raise on error > atol.

    Returns the `compare_gradients` report; raises `GradientMismatch` with a stand-alone message
    (gradient, index, error, tolerance, shapes) when any error exceeds ``atol``.
    """
    analytic = grad_f(q, k, v, dout)
    numeric = numerical_gradients(f, q, k, v, dout, eps)
    report = compare_gradients(analytic, numeric)
    bad = {n: r for n, r in report.items() if not r[0] <= atol}
    if bad:
        shapes = f"q{np.shape(q)} k{np.shape(k)} v{np.shape(v)} dout{np.shape(dout)}"
        lines = [
            f"{n}[{idx}]: |analytic - central difference| = {err:.3e} > atol {atol:g}" for n, (err, idx) in bad.items()
        ]
        raise GradientMismatch(f"gradient check failed (eps={eps:g}, {shapes}): " + "; ".join(lines))
    return report
