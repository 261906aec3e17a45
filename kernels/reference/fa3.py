"""FlashAttention-3 numerics at tile granularity in NumPy: FP16/BF16 forward and backward, FP8 forward.

FA3 keeps FA2's tiling (Q tile outer, K/V inner, unnormalised accumulator, one division at the end)
with the softmax in float32 and exp evaluated as exp2((s - m) * log2 e). Its asynchrony (warp
specialisation, ping-pong, intra-warpgroup overlap) does not change the numbers and is not modelled.

The FP8 forward (`forward_fp8`, oracles/SEMANTICS.md §10) takes FP8 codes Q8, K8, V8 and float32
descales -- shape () per tensor, (B, Hkv) per (batch, kv head) as in the FA3 API (Q's descale shared
by the query heads of the group), (B, H, n_tiles) per tile of ``block_q`` rows for Q and ``block_k``
rows for K and V as in the FA3 paper -- and computes

    S = scale * dq * dk * (Q8 K8^T)            float32 accumulation
    P = exp2((S - m) * log2 e + 8)             max-offset trick: P in [0, 256], then rounded to FP8
    O = dv * (P8 V8) / l,   LSE = m + log(l) - 8 ln 2

with the V descale applied once at the end (per tensor / per head) or per K/V tile (per tile).
Incoherent processing happens before the kernel (oracles/fp8.py, §11): the kernel sees rotated codes.

``max_stale`` (FP16/BF16 forward) models the CUDA kernel's lazy rescale (kernels/cuda/include/hopper/softmax.cuh): a
row keeps its running maximum m until a key tile's maximum exceeds it by more than ``max_stale`` in log2 units, so
P = exp2((s - m) log2 e) <= 2^max_stale; O, l and the LSE all use that m, so the result is the same in exact arithmetic.

Sinks (§18, FP16/BF16 paths): the running state starts at m = sink, l = 2^offset (the sink's own P on
the kernel's scale); the backward folds dlse into D and returns d sink. Chunks (§19): `Problem.visible`.
"""

from __future__ import annotations

import numpy as np

from attention_conformance.kernels import emulate
from attention_conformance.kernels.reference._common import LN2, LOG2E, Problem, tiles

__all__ = ["FP8_P_OFFSET", "backward", "expand_descale", "forward", "forward_fp8"]

FP8_P_OFFSET = 8.0  # log2 of the max offset: P = exp2(s - m + 8) lies in [0, 256] before the FP8 rounding


def expand_descale(descale, B: int, H: int, Hkv: int, L: int, block: int) -> np.ndarray:
    """A descale as one float32 value per (batch, head, row): [B, H, L]; H = Hq for Q (per-head descales
    of shape (B, Hkv) are repeated over the query heads of each group), H = Hkv for K and V."""
    d = np.asarray(descale, dtype=np.float32)
    if d.ndim == 0:
        return np.broadcast_to(d, (B, H, L))
    if d.ndim == 2:
        if d.shape != (B, Hkv):
            raise ValueError(f"per-head descale must have shape (B, Hkv) = {(B, Hkv)}; got {d.shape}")
        return np.broadcast_to(np.repeat(d, H // Hkv, axis=1)[:, :, None], (B, H, L))
    n_tiles = -(-L // block)
    if d.shape != (B, H, n_tiles):
        raise ValueError(f"per-tile descale must have shape (B, H, ceil(L / {block})) = {(B, H, n_tiles)}; "
                         f"got {d.shape}")
    return np.repeat(d, block, axis=2)[:, :, :L]


def _attend(p: Problem, block_q: int, block_k: int, p_dtype: str, p_offset: float,
            q_rows=None, k_rows=None, v_tiles=None, v_end=None, max_stale: float = 0.0):
    """The FA3 forward loop shared by the FP16/BF16 and FP8 paths; returns unrounded (out, lse).

    FP8 only: ``q_rows`` [B, Hq, Lq] and ``k_rows`` [B, Hkv, Lk] are per-row descales, ``v_tiles``
    [B, Hkv, n_k_tiles] the per-tile V descales or ``v_end`` [B, Hq] the V descale applied at the end.
    """
    kv_head = np.arange(p.Hq) // p.group
    K = p.k[:, kv_head]
    V = p.v[:, kv_head]
    out = np.zeros((p.B, p.Hq, p.Lq, p.dv), dtype=p.acc)
    lse = np.full((p.B, p.Hq, p.Lq), -np.inf, dtype=p.acc)
    with np.errstate(divide="ignore", invalid="ignore"):
        for r0, r1 in tiles(p.Lq, block_q):
            Qi = p.q[:, :, r0:r1]
            m, l = p.initial_state(r1 - r0, unit=float(np.exp2(p_offset)))
            acc = np.zeros((p.B, p.Hq, r1 - r0, p.dv), dtype=p.acc)
            for j, (c0, c1) in enumerate(tiles(p.Lk, block_k)):
                vis = p.visible(r0, r1, c0, c1)
                if not vis.any():
                    continue
                s = emulate.matmul(Qi, K[:, :, c0:c1].swapaxes(-1, -2), p.dtype)
                if q_rows is not None:
                    s = s * (q_rows[:, :, r0:r1, None] * k_rows[:, kv_head][:, :, None, c0:c1])
                s = s * p.scale
                if p.softcap is not None:
                    s = p.softcap * np.tanh(s / p.softcap)
                if p.bias is not None:
                    s = s + p.bias_tile(r0, r1, c0, c1)
                s = np.where(vis, s, -np.inf)
                m_new = np.maximum(m, s.max(axis=-1))
                if max_stale > 0:  # keep m while P stays <= 2^max_stale (False for NaN: -inf moves to any maximum)
                    m_new = np.where((m_new - m) * LOG2E <= max_stale, m, m_new).astype(p.acc)
                m_safe = np.where(m_new == -np.inf, 0.0, m_new).astype(p.acc)
                P = np.exp2((s - m_safe[..., None]) * LOG2E + p_offset)
                alpha = np.exp2((m - m_safe) * LOG2E)
                l = alpha * l + P.sum(axis=-1)
                PV = emulate.matmul(emulate.round_to(P, p_dtype), V[:, :, c0:c1], p.dtype)
                if v_tiles is not None:
                    PV = PV * v_tiles[:, kv_head, j, None, None]
                acc = alpha[..., None] * acc + PV
                m = m_new
            o = np.where(l[..., None] > 0, acc / l[..., None], 0.0)
            if v_end is not None:
                o = o * v_end[:, :, None, None]
            out[:, :, r0:r1] = o
            lse[:, :, r0:r1] = np.where(l > 0, m + np.log(l) - p_offset * LN2, -np.inf)
    return out, lse


def forward(q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None, bias=None,
            softcap=None, seqlens_q=None, seqlens_k=None, block_q=128, block_k=128, dtype="bfloat16", sinks=None,
            chunk=None, max_stale=0.0):
    """FA3 FP16/BF16 forward (float32 softmax); returns (out rounded to ``dtype``, lse). ``max_stale`` > 0: the lazy
    rescale (module docstring)."""
    if not max_stale >= 0:
        raise ValueError(f"max_stale={max_stale!r}: a non-negative number of log2 units")
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype, sinks=sinks, chunk=chunk)
    out, lse = _attend(p, block_q, block_k, p.dtype, 0.0, max_stale=max_stale)
    return emulate.round_to(out, p.dtype), lse


def forward_fp8(q8, k8, v8, q_descale=1.0, k_descale=1.0, v_descale=1.0, *, format="e4m3fn", scale=None,
                causal=False, alignment="bottom_right", window=None, mask=None, bias=None, softcap=None,
                seqlens_q=None, seqlens_k=None, block_q=128, block_k=128, out_dtype="bfloat16"):
    """FA3 FP8 forward on codes ``q8, k8, v8`` (values of the FP8 grid) and their descales (§10).

    Per-tile descales are per kernel tile: (B, Hq, ceil(Lq / block_q)) for Q and
    (B, Hkv, ceil(Lk / block_k)) for K and V. Returns (out rounded to ``out_dtype``, lse float32).
    """
    fmt = emulate.canonical(format, "format")
    if fmt not in ("float8_e4m3fn", "float8_e5m2"):
        raise ValueError(f"format={format!r} is not an FP8 format; expected 'e4m3fn' or 'e5m2'")
    codes = []
    for name, x in (("q8", q8), ("k8", k8), ("v8", v8)):
        x = np.asarray(x, dtype=np.float64)
        if not np.array_equal(emulate.round_exact(x, fmt), x, equal_nan=True):
            raise ValueError(f"{name} holds values that are not on the {fmt} grid (shape {x.shape})")
        codes.append(x)
    p = Problem(*codes, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype="float32", round_inputs=False)
    q_rows = expand_descale(q_descale, p.B, p.Hq, p.Hkv, p.Lq, block_q)
    k_rows = expand_descale(k_descale, p.B, p.Hkv, p.Hkv, p.Lk, block_k)
    v_tiles = v_end = None
    if np.ndim(v_descale) == 3:
        expand_descale(v_descale, p.B, p.Hkv, p.Hkv, p.Lk, block_k)
        v_tiles = np.asarray(v_descale, dtype=np.float32)
    else:
        v_end = expand_descale(v_descale, p.B, p.Hq, p.Hkv, 1, 1)[:, :, 0]
    out, lse = _attend(p, block_q, block_k, fmt, FP8_P_OFFSET, q_rows, k_rows, v_tiles, v_end)
    return emulate.round_to(out, out_dtype), lse


def backward(q, k, v, out, lse, dout, *, scale=None, causal=False, alignment="bottom_right", window=None,
             mask=None, bias=None, softcap=None, seqlens_q=None, seqlens_k=None, block_q=64, block_k=128,
             dtype="bfloat16", sinks=None, chunk=None, dlse=None):
    """FA3 FP16/BF16 backward: K/V tiles outer, dQ accumulated in a float32 buffer, exp2-based P
    recomputation from the LSE; returns (dq, dk, dv) rounded to ``dtype`` with GQA-reduced dk, dv, and
    d sinks with ``sinks``. ``dlse`` is the LSE cotangent (§13, §18)."""
    p = Problem(q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, mask=mask, bias=bias,
                softcap=softcap, seqlens_q=seqlens_q, seqlens_k=seqlens_k, dtype=dtype, sinks=sinks, chunk=chunk)
    O = emulate.round_to(np.asarray(out), p.dtype)
    dO = emulate.round_to(np.asarray(dout), p.dtype)
    O = p.load_q_rows(O)  # padded query rows of out and dO are never read (SEMANTICS.md §7, §13)
    dO = p.load_q_rows(dO)
    L = np.asarray(lse).astype(p.acc)
    L_log2 = np.where(L == -np.inf, 0.0, L * LOG2E).astype(p.acc)
    kv_head = np.arange(p.Hq) // p.group
    D = np.sum(dO * O, axis=-1) - p.load_dlse(dlse)
    dQ_accum = np.zeros((p.B, p.Hq, p.Lq, p.d), dtype=p.acc)
    dK = np.zeros((p.B, p.Hkv, p.Lk, p.d), dtype=p.acc)
    dV = np.zeros((p.B, p.Hkv, p.Lk, p.dv), dtype=p.acc)
    for c0, c1 in tiles(p.Lk, block_k):
        Kj = p.k[:, kv_head, c0:c1]
        Vj = p.v[:, kv_head, c0:c1]
        dKj = np.zeros((p.B, p.Hq, c1 - c0, p.d), dtype=p.acc)
        dVj = np.zeros((p.B, p.Hq, c1 - c0, p.dv), dtype=p.acc)
        for r0, r1 in tiles(p.Lq, block_q):
            vis = p.visible(r0, r1, c0, c1)
            if not vis.any():
                continue
            Qi = p.q[:, :, r0:r1]
            dOi = dO[:, :, r0:r1]
            s = emulate.matmul(Qi, Kj.swapaxes(-1, -2), p.dtype)
            s = s * p.scale
            if p.softcap is not None:
                t = np.tanh(s / p.softcap)
                s = p.softcap * t
            if p.bias is not None:
                s = s + p.bias_tile(r0, r1, c0, c1)
            s = np.where(vis, s, -np.inf)
            P = np.exp2(s * LOG2E - L_log2[:, :, r0:r1, None])
            dVj = dVj + emulate.matmul(emulate.round_to(P, p.dtype).swapaxes(-1, -2), dOi, p.dtype)
            dP = emulate.matmul(dOi, Vj.swapaxes(-1, -2), p.dtype)
            dS = P * (dP - D[:, :, r0:r1, None])
            if p.softcap is not None:
                dS = dS * (1.0 - t * t)
            dS = emulate.round_to(dS, p.dtype)
            dQ_accum[:, :, r0:r1] = dQ_accum[:, :, r0:r1] + emulate.matmul(dS, Kj, p.dtype) * p.scale
            dKj = dKj + emulate.matmul(dS.swapaxes(-1, -2), Qi, p.dtype) * p.scale
        dK[:, :, c0:c1] = dKj.reshape(p.B, p.Hkv, p.group, c1 - c0, p.d).sum(axis=2)
        dV[:, :, c0:c1] = dVj.reshape(p.B, p.Hkv, p.group, c1 - c0, p.dv).sum(axis=2)
    grads = emulate.round_to(dQ_accum, p.dtype), emulate.round_to(dK, p.dtype), emulate.round_to(dV, p.dtype)
    if p.sinks is None:
        return grads
    return (*grads, p.sink_grad(L, D))
