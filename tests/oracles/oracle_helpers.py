"""Shared input builders for the oracle self-tests (SEMANTICS.md §1)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["rand_qkv", "case_repr", "scalar_visible"]


def rand_qkv(B=2, Hq=4, Hkv=2, Lq=5, Lk=6, d=3, dv=None, seed=0, dout=False):
    """Seeded N(0, 1) q, k, v (and dout) of the given shapes."""
    rng = np.random.default_rng(seed)
    dv = d if dv is None else dv
    arrs = [
        rng.standard_normal((B, Hq, Lq, d)),
        rng.standard_normal((B, Hkv, Lk, d)),
        rng.standard_normal((B, Hkv, Lk, dv)),
    ]
    if dout:
        arrs.append(rng.standard_normal((B, Hq, Lq, dv)))
    return arrs


def scalar_visible(i, j, sq, sk, causal, alignment, window, chunk=None) -> bool:
    """Whether key j takes part for query i, one pair at a time (SEMANTICS.md §4 causal and its
    alignment, §5 window ``(left, right)`` or None, §7 real lengths sq, sk, §19 chunk): a scalar
    restatement of the rule, independent of `oracles.masking`, for the oracle self-tests to check it against."""
    if i >= sq or j >= sk:
        return False
    diag = i + (sk - sq) if alignment == "bottom_right" else i
    left, right = window or (None, None)
    if causal and j > diag:
        return False
    if left is not None and j < diag - left:
        return False
    if chunk is not None and math.floor(diag / chunk) != math.floor(j / chunk):
        return False
    return right is None or j <= diag + right


def case_repr(shape_args: dict, kw: dict) -> str:
    """A stand-alone repro string for failure messages."""
    kws = ", ".join(f"{k}={v!r}" if not isinstance(v, np.ndarray) else f"{k}=<array {v.shape}>" for k, v in kw.items())
    return f"rand_qkv(**{shape_args!r}) with oracles.attention(q, k, v, {kws})"
