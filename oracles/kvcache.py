"""KV-cache append, the `flash_attn_with_kvcache` contract (SEMANTICS.md §20).

A decoding step holds a cache ``k_cache [B, Hkv, Lc, d]``, ``v_cache [B, Hkv, Lc, dv]`` whose first
``cache_seqlens[b]`` slots are valid, and ``Ln`` new rows ``k_new [B, Hkv, Ln, d]``, ``v_new``. The new rows are
written at slots ``cache_seqlens[b] .. cache_seqlens[b] + Ln - 1``; attention then runs over the cache with
``seqlens_k[b] = cache_seqlens[b] + Ln`` (§7: slots past that length are never read, whatever they hold) and,
by default, bottom-right causal alignment (§4: the last new query sees every valid key).
"""

from __future__ import annotations

import numpy as np

from .validate import as_real_float64

__all__ = ["kv_append"]


def kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Write ``k_new``, ``v_new`` into copies of the caches at ``cache_seqlens[b]`` (§20).

    Returns ``(k, v, seqlens_k)``: float64 caches with the new rows in place (every other slot copied
    unchanged, including the garbage past the valid length) and ``seqlens_k = cache_seqlens + Ln`` (int64 [B]),
    ready for ``oracles.attention(q, k, v, seqlens_k=seqlens_k, causal=True)``. ValueError names the argument
    for shape mismatches, lengths outside ``[0, Lc - Ln]``, or a cache_seqlens not of length B.
    """
    raw = {"k_cache": k_cache, "v_cache": v_cache, "k_new": k_new, "v_new": v_new}
    shapes = ", ".join(f"{n}.shape={tuple(np.shape(a))}" for n, a in raw.items())
    kc, vc, kn, vn = (as_real_float64(a, n, shapes) for n, a in raw.items())
    if any(a.ndim != 4 for a in (kc, vc, kn, vn)):
        raise ValueError(f"k_cache, v_cache, k_new, v_new must all have rank 4 [B, Hkv, L, D] (§20); {shapes}")
    B, Hkv, Lc, _ = kc.shape
    Ln = kn.shape[2]
    if vc.shape[:3] != (B, Hkv, Lc) or kn.shape[:2] != (B, Hkv) or vn.shape[:3] != (B, Hkv, Ln):
        raise ValueError(f"k_new/v_new must be [B, Hkv, Ln, D] and v_cache [B, Hkv, Lc, dv] for "
                         f"k_cache [B, Hkv, Lc, d] = {list(kc.shape)} (§20); {shapes}")
    if kn.shape[3] != kc.shape[3] or vn.shape[3] != vc.shape[3]:
        raise ValueError(f"k_new / v_new head dims must match k_cache / v_cache (§20); {shapes}")
    lens = np.asarray(cache_seqlens)
    if lens.shape != (B,) or (lens.size and lens.dtype.kind not in "iu"):
        raise ValueError(f"cache_seqlens must hold B={B} integers (§20); got {lens.tolist()}; {shapes}")
    if lens.size and (lens.min() < 0 or lens.max() + Ln > Lc):
        raise ValueError(f"cache_seqlens entries must lie in [0, Lc - Ln] = [0, {Lc - Ln}] so the {Ln} new rows fit "
                         f"(§20); got {lens.tolist()}; {shapes}")
    k, v = kc.copy(), vc.copy()
    for b, start in enumerate(int(x) for x in lens):
        k[b, :, start:start + Ln] = kn[b]
        v[b, :, start:start + Ln] = vn[b]
    return k, v, lens.astype(np.int64) + Ln
