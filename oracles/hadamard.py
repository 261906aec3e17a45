"""The random Hadamard transform of incoherent processing (oracles/SEMANTICS.md §11).

M = H_d diag(s) / sqrt(d), with H_d the Sylvester Hadamard matrix and s a seeded vector of +-1, is
orthogonal; applied along the head dimension of Q and K it keeps QK^T and spreads outlier channels
over all d entries before FP8 quantization (FA3 paper, "incoherent processing"). `fwht` computes
x @ H_d in O(d log d).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fwht", "hadamard_matrix", "hadamard_signs", "random_hadamard"]


def hadamard_signs(d: int, seed: int = 0) -> np.ndarray:
    """The random diagonal of §11: ``d`` entries +-1.0 from ``np.random.default_rng(seed).integers(0, 2, d)``
    (0 -> -1, 1 -> +1)."""
    bits = np.random.default_rng(seed).integers(0, 2, size=d)
    return np.where(bits == 1, 1.0, -1.0)


def _check_pow2(d: int) -> None:
    if d < 1 or d & (d - 1):
        raise ValueError(f"head dim d={d} must be a power of two for the Hadamard transform")


def fwht(x: np.ndarray) -> np.ndarray:
    """Unnormalised fast Walsh-Hadamard transform along the last axis: x @ H_d (Sylvester order), O(d log d)."""
    x = np.array(x, dtype=np.float64)
    d = x.shape[-1]
    _check_pow2(d)
    lead = x.shape[:-1]
    h = 1
    while h < d:
        y = x.reshape(*lead, d // (2 * h), 2, h)
        a = y[..., 0, :]
        b = y[..., 1, :]
        x = np.stack([a + b, a - b], axis=-2).reshape(*lead, d)
        h *= 2
    return x


def hadamard_matrix(d: int) -> np.ndarray:
    """Dense Sylvester Hadamard matrix H_d (entries +-1), H_1 = [1], H_2n = [[H, H], [H, -H]]."""
    _check_pow2(d)
    H = np.ones((1, 1))
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    return H


def random_hadamard(x: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """x @ M along the last axis, M = H_d diag(signs) / sqrt(d) (§11); orthogonal, so (QM)(KM)^T = QK^T."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    signs = np.asarray(signs, dtype=np.float64)
    if signs.shape != (d,):
        raise ValueError(f"signs must have shape ({d},) to match the head dim; got {signs.shape}")
    return fwht(x) * signs / np.sqrt(d)
