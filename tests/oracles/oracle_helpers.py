"""Shared input builders for the oracle self-tests (SEMANTICS.md §1)."""

from __future__ import annotations

import numpy as np

__all__ = ["rand_qkv", "case_repr"]


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


def case_repr(shape_args: dict, kw: dict) -> str:
    """A stand-alone repro string for failure messages."""
    kws = ", ".join(f"{k}={v!r}" if not isinstance(v, np.ndarray) else f"{k}=<array {v.shape}>" for k, v in kw.items())
    return f"rand_qkv(**{shape_args!r}) with oracles.attention(q, k, v, {kws})"
