"""Shared bookkeeping of the reference kernels: argument checks, the visibility rule, tile views.

`Problem` holds one call's inputs rounded to the kernel dtype (kernels/emulate.py) and answers, for
any tile of rows [r0, r1) x keys [c0, c1), which scores take part (oracles/SEMANTICS.md §3-§7):
key j is visible to query i iff i < Lq_b, j < Lk_b (varlen, §6), the boolean mask allows it (§5),
and, with causal or a window, diag - left <= j <= diag + right where diag = i + Lk_b - Lq_b
("bottom_right") or diag = i ("top_left"); causal sets right = 0 (§4); with ``chunk`` C, also
floor(diag / C) == floor(j / C) (§19).

Sinks (§18) are one term of the softmax state: `initial_state` starts every row's running max at the
head's sink logit and its running sum at exp(sink - sink) = 1, so the sink is in the running max from
the first tile and a row that sees no key ends with O = 0, LSE = sink. `sink_grad` is the backward's
d sink = sum_i P_sink,i (dlse_i - D_i), with D already holding the LSE cotangent (D - dlse).
"""

from __future__ import annotations

import numpy as np

from attention_conformance.kernels import emulate

__all__ = ["LN2", "LOG2E", "Problem", "tiles"]

LOG2E = 1.4426950408889634  # log2(e): FA3 evaluates exp(x) as exp2(x * log2(e))
LN2 = 0.6931471805599453


def tiles(length: int, block: int) -> list[tuple[int, int]]:
    """[(start, stop)] of consecutive blocks of ``block`` covering range(length); the last may be short."""
    if block < 1:
        raise ValueError(f"block size {block} must be >= 1")
    return [(start, min(start + block, length)) for start in range(0, length, block)]


def _seqlens(name: str, seqlens, B: int, L: int) -> np.ndarray:
    if seqlens is None:
        return np.full(B, L, dtype=np.int64)
    arr = np.asarray(seqlens, dtype=np.int64).reshape(-1)
    if arr.shape != (B,) or (arr < 0).any() or (arr > L).any():
        raise ValueError(f"{name}={list(np.asarray(seqlens).reshape(-1))} must hold B={B} lengths in [0, {L}]")
    return arr


class Problem:
    """One attention call, validated, with inputs rounded to ``dtype`` (or taken as given for FP8)."""

    def __init__(self, q, k, v, *, scale=None, causal=False, alignment="bottom_right", window=None, mask=None,
                 bias=None, softcap=None, seqlens_q=None, seqlens_k=None, dtype="bfloat16",
                 round_inputs: bool = True, sinks=None, chunk=None):
        self.dtype = emulate.canonical(dtype)
        self.acc = emulate.acc_dtype(self.dtype)
        arrays = {}
        for name, x in (("q", q), ("k", k), ("v", v)):
            x = np.asarray(x)
            if x.ndim != 4:
                raise ValueError(f"{name} must have rank 4 [B, H, L, D]; got shape {x.shape}")
            arrays[name] = emulate.round_to(x, self.dtype) if round_inputs else x.astype(self.acc)
        q, k, v = arrays["q"], arrays["k"], arrays["v"]
        B, Hq, Lq, d = q.shape
        _, Hkv, Lk, dv = v.shape
        if k.shape[:3] != (B, Hkv, Lk) or k.shape[3] != d or v.shape[0] != B:
            raise ValueError(f"shapes do not agree: q {q.shape}, k {k.shape}, v {v.shape} "
                             f"(need k [B, Hkv, Lk, d], v [B, Hkv, Lk, dv])")
        if Hkv == 0 or Hq % Hkv:
            raise ValueError(f"Hq={Hq} (q {q.shape}) is not a multiple of Hkv={Hkv} (k {k.shape})")
        if alignment not in ("bottom_right", "top_left"):
            raise ValueError(f"alignment={alignment!r}; expected 'bottom_right' or 'top_left'")
        self.q, self.k, self.v = q, k, v
        self.B, self.Hq, self.Hkv, self.Lq, self.Lk, self.d, self.dv = B, Hq, Hkv, Lq, Lk, d, dv
        self.group = Hq // Hkv
        self.scale = float(1.0 / np.sqrt(d)) if scale is None else float(scale)
        if softcap is not None and not softcap > 0:
            raise ValueError(f"softcap={softcap} must be > 0 (or None)")
        self.softcap = None if softcap is None else float(softcap)
        left, right = (None, None) if window is None else tuple(window)
        for name, w in (("window[0] (left)", left), ("window[1] (right)", right)):
            if w is not None and w < 0:
                raise ValueError(f"{name}={w} must be >= 0 or None (window={window})")
        if causal:
            right = 0 if right is None else min(int(right), 0)
        self.left, self.right = left, right
        if chunk is not None and (isinstance(chunk, bool) or int(chunk) != chunk or chunk < 1):
            raise ValueError(f"chunk={chunk!r} must be an int >= 1 (or None)")
        self.chunk = None if chunk is None else int(chunk)
        self.sinks = None
        if sinks is not None:
            sk_arr = np.asarray(sinks, dtype=np.float64)
            if sk_arr.shape != (Hq,):
                raise ValueError(f"sinks shape {sk_arr.shape} must be [Hq] = ({Hq},) (one logit per query head)")
            self.sinks = sk_arr.astype(self.acc)  # the sink logit in the softmax dtype (FA4: float32)
        self.len_q = _seqlens("seqlens_q", seqlens_q, B, Lq)
        self.len_k = _seqlens("seqlens_k", seqlens_k, B, Lk)
        self.offset = self.len_k - self.len_q if alignment == "bottom_right" else np.zeros(B, dtype=np.int64)
        # The tile loader's bounds check: padded rows (§7) load as 0 and their memory is never used, so
        # NaN or garbage there cannot reach a result (P = 0 times a NaN V row would still be NaN).
        self.q = self.load_q_rows(self.q)
        self.k = self.load_k_rows(self.k)
        self.v = self.load_k_rows(self.v)
        full = (B, Hq, Lq, Lk)
        self.mask = None
        if mask is not None:
            m = np.asarray(mask)
            if m.dtype != np.bool_:
                raise ValueError(f"mask must be boolean (True = attend); got dtype {m.dtype}")
            try:
                self.mask = np.broadcast_to(m, full)
            except ValueError:
                raise ValueError(f"mask shape {m.shape} does not broadcast to [B, Hq, Lq, Lk] = {full}") from None
        self.bias = None
        if bias is not None:
            b = np.asarray(bias)
            try:
                self.bias = np.broadcast_to(b.astype(self.acc), full)
            except ValueError:
                raise ValueError(f"bias shape {b.shape} does not broadcast to [B, Hq, Lq, Lk] = {full}") from None

    def load_q_rows(self, x: np.ndarray) -> np.ndarray:
        """``x`` [B, H, Lq, D] with the padded query rows (i >= seqlens_q[b]) read as 0 (a new array)."""
        real = np.arange(x.shape[2])[None, :] < self.len_q[:, None]
        return np.where(real[:, None, :, None], x, np.zeros((), dtype=x.dtype))

    def load_k_rows(self, x: np.ndarray) -> np.ndarray:
        """``x`` [B, Hkv, Lk, D] with the padded key rows (j >= seqlens_k[b]) read as 0 (a new array)."""
        real = np.arange(x.shape[2])[None, :] < self.len_k[:, None]
        return np.where(real[:, None, :, None], x, np.zeros((), dtype=x.dtype))

    def visible(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Boolean [B, 1 or Hq, r1 - r0, c1 - c0]: which scores of the tile take part (§3-§6)."""
        i = np.arange(r0, r1)[None, :, None]
        j = np.arange(c0, c1)[None, None, :]
        ok = (i < self.len_q[:, None, None]) & (j < self.len_k[:, None, None])
        diag = i + self.offset[:, None, None]
        if self.right is not None:
            ok = ok & (j <= diag + self.right)
        if self.left is not None:
            ok = ok & (j >= diag - self.left)
        if self.chunk is not None:
            ok = ok & (diag // self.chunk == j // self.chunk)
        ok = ok[:, None]
        if self.mask is not None:
            ok = ok & self.mask[:, :, r0:r1, c0:c1]
        return ok

    def initial_state(self, rows: int, unit: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Running (max, sum) [B, Hq, rows] before the first key tile: (-inf, 0), or with a sink
        (sink, ``unit``): the sink's own exp(sink - max) on the kernel's P scale (``unit`` = 2^offset in FA3)."""
        m = np.full((self.B, self.Hq, rows), -np.inf, dtype=self.acc)
        l = np.zeros((self.B, self.Hq, rows), dtype=self.acc)
        if self.sinks is not None:
            live = np.broadcast_to((self.sinks > -np.inf)[None, :, None], m.shape)
            m = np.where(live, self.sinks[None, :, None], m).astype(self.acc)
            l = np.where(live, unit, 0.0).astype(self.acc)
        return m, l

    def load_dlse(self, dlse) -> np.ndarray:
        """The LSE cotangent [B, Hq, Lq] in the accumulator dtype, 0 on padded rows (0 everywhere if None)."""
        if dlse is None:
            return np.zeros((self.B, self.Hq, self.Lq), dtype=self.acc)
        g = np.asarray(dlse).astype(self.acc)
        if g.shape != (self.B, self.Hq, self.Lq):
            raise ValueError(f"dlse shape {g.shape} must be [B, Hq, Lq] = {(self.B, self.Hq, self.Lq)}")
        real = np.arange(self.Lq)[None, :] < self.len_q[:, None]
        return np.where(real[:, None, :], g, 0.0).astype(self.acc)

    def sink_grad(self, L: np.ndarray, D: np.ndarray) -> np.ndarray:
        """d sink [Hq] = -sum over batch and real rows of P_sink * D, P_sink = exp(sink - L) (§18).

        ``L`` is the stored LSE (it includes the sink), ``D`` = rowsum(dO * O) - dlse."""
        real = (np.arange(self.Lq)[None, :] < self.len_q[:, None])[:, None, :]
        with np.errstate(invalid="ignore", over="ignore"):
            p_sink = np.exp(self.sinks[None, :, None] - L)
        contrib = np.where(real & (self.sinks[None, :, None] > -np.inf), p_sink * D, 0.0)
        return -np.sum(contrib, axis=(0, 2)).astype(self.acc)

    def bias_tile(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """The additive bias of the tile, [B, Hq, r1 - r0, c1 - c0] in the accumulator dtype."""
        return self.bias[:, :, r0:r1, c0:c1]
