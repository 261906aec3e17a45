"""Input validation for the FP64 oracles (SEMANTICS.md §15).

Every public oracle entry point runs `validate` first. It converts q, k, v (and dout, mask, bias) to
float64 / bool arrays, checks the shape contract of SEMANTICS.md §1, §6, §7, §9 and the keyword
contract of §2, §4, §5, and raises a `ValueError` that names the offending argument and all input
shapes. It never changes a valid value: any real dtype (integers, float16/32/64, ml_dtypes bfloat16
and FP8) is widened exactly to float64.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ALIGNMENTS", "Problem", "validate", "as_real_float64", "check_chunk"]

ALIGNMENTS = ("bottom_right", "top_left")


@dataclass(frozen=True)
class Problem:
    """A validated attention problem: float64 arrays plus normalised keywords (SEMANTICS.md §1-§9).

    ``sinks`` is a float64 array ``[Hq]`` or ``None`` (§18); ``chunk`` an int >= 1 or ``None`` (§19);
    ``dlse`` a float64 ``[B, Hq, Lq]`` LSE cotangent or ``None`` (§13, §18).
    ``window`` is always a pair ``(left, right)`` with ``None`` for unbounded, *before* causal is
    applied (causal is kept separately, §5). ``mask`` / ``bias`` are read-only broadcast views of
    shape ``[B, Hq, Lq, Lk]`` or ``None``. ``seqlens_q`` / ``seqlens_k`` are int64 arrays of length B
    (full lengths when the caller passed ``None``).
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    dout: np.ndarray | None
    scale: float
    causal: bool
    alignment: str
    window: tuple[int | None, int | None]
    mask: np.ndarray | None
    bias: np.ndarray | None
    softcap: float | None
    seqlens_q: np.ndarray
    seqlens_k: np.ndarray
    sinks: np.ndarray | None = None
    chunk: int | None = None
    dlse: np.ndarray | None = None

    @property
    def B(self) -> int:
        return self.q.shape[0]

    @property
    def Hq(self) -> int:
        return self.q.shape[1]

    @property
    def Hkv(self) -> int:
        return self.k.shape[1]

    @property
    def Lq(self) -> int:
        return self.q.shape[2]

    @property
    def Lk(self) -> int:
        return self.k.shape[2]

    @property
    def d(self) -> int:
        return self.q.shape[3]

    @property
    def dv(self) -> int:
        return self.v.shape[3]

    @property
    def group(self) -> int:
        """Query heads per kv head; query head h reads kv head h // group (§9)."""
        return self.Hq // self.Hkv


def _is_real_dtype(dtype: np.dtype) -> bool:
    if dtype.kind in "fiu":
        return True
    if dtype.kind == "V":  # ml_dtypes bfloat16 / float8_e4m3fn register as void-kind scalar types
        try:
            import ml_dtypes

            ml_dtypes.finfo(dtype)
            return True
        except Exception:
            return False
    return False


def as_real_float64(x, name: str, shapes: str) -> np.ndarray:
    """Widen ``x`` (any real dtype, incl. ml_dtypes bf16/FP8) to a float64 array, exactly (§1)."""
    arr = np.asarray(x)
    if not _is_real_dtype(arr.dtype):
        raise ValueError(
            f"{name} must have a real dtype (float, int, bfloat16, float8); got dtype {arr.dtype}; {shapes}"
        )
    return np.ascontiguousarray(arr, dtype=np.float64) if arr.dtype != np.float64 else arr


def _first_nonfinite(arr: np.ndarray) -> tuple[int, ...] | None:
    if arr.size == 0 or np.isfinite(arr).all():
        return None
    return tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])


def _check_broadcast(arr: np.ndarray, name: str, target: tuple[int, ...], shapes: str) -> np.ndarray:
    ok = arr.ndim <= 4 and all(s in (1, t) for s, t in zip(arr.shape[::-1], target[::-1]))
    if not ok:
        raise ValueError(
            f"{name} of shape {arr.shape} does not broadcast to [B, Hq, Lq, Lk] = {list(target)} (§6); {shapes}"
        )
    return np.broadcast_to(arr, target)


def _check_seqlens(seqlens, name: str, B: int, limit: int, limit_name: str, shapes: str) -> np.ndarray:
    if seqlens is None:
        return np.full(B, limit, dtype=np.int64)
    arr = np.asarray(seqlens)
    if arr.ndim != 1 or arr.shape[0] != B:
        raise ValueError(f"{name} must be a sequence of B={B} lengths (§7); got shape {arr.shape}; {shapes}")
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() > limit):
        raise ValueError(
            f"{name} entries must be integers in [0, {limit_name}={limit}] (§7); got {arr.tolist()}; {shapes}"
        )
    return arr.astype(np.int64)


def _check_window(window, shapes: str) -> tuple[int | None, int | None]:
    if window is None:
        return (None, None)
    if isinstance(window, str | bytes) or not isinstance(window, Sequence | np.ndarray) or len(window) != 2:
        raise ValueError(f"window must be None or a pair (left, right) (§5); got {window!r}; {shapes}")
    out = []
    for side, w in zip(("left", "right"), window):
        if w is None:
            out.append(None)
            continue
        if isinstance(w, bool) or not isinstance(w, numbers.Integral):
            raise ValueError(f"window {side} entry must be None or an int >= 0 (§5); got {w!r}; {shapes}")
        if w < 0:
            raise ValueError(
                f"window {side} entry must be >= 0, None means unbounded (§5); got window={tuple(window)!r}; {shapes}"
            )
        out.append(int(w))
    return (out[0], out[1])


def _check_sinks(sinks, Hq: int, allow_nonfinite: bool, shapes: str) -> np.ndarray | None:
    """§18: one sink logit per query head, shape [Hq]; NaN and +inf are errors (-inf means no sink)."""
    if sinks is None:
        return None
    arr = as_real_float64(sinks, "sinks", shapes)
    if arr.shape != (Hq,):
        raise ValueError(f"sinks must have shape [Hq] = [{Hq}] (one logit per query head, §18); "
                         f"got sinks.shape={arr.shape}; {shapes}")
    if not allow_nonfinite and (np.isnan(arr).any() or np.isposinf(arr).any()):
        bad = int(np.argwhere(np.isnan(arr) | np.isposinf(arr))[0, 0])
        raise ValueError(f"sinks has {arr[bad]} at head {bad}; sinks must be finite or -inf (no sink) (§18); "
                         f"sinks.shape={arr.shape}; {shapes}")
    return arr


def check_chunk(chunk, shapes: str) -> int | None:
    """§19: chunk is None (off) or an int >= 1."""
    if chunk is None:
        return None
    if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral) or chunk <= 0:
        raise ValueError(f"chunk must be None or an int >= 1 (chunked attention, §19); got chunk={chunk!r}; {shapes}")
    return int(chunk)


def validate(
    q,
    k,
    v,
    dout=None,
    *,
    scale=None,
    causal=False,
    alignment="bottom_right",
    window=None,
    mask=None,
    bias=None,
    softcap=None,
    seqlens_q=None,
    seqlens_k=None,
    allow_nonfinite=False,
    sinks=None,
    chunk=None,
    dlse=None,
) -> Problem:
    """Check every argument against SEMANTICS.md §15 and return the normalised `Problem`.

    Raises ``ValueError`` naming the argument and the shapes of q, k, v for: rank != 4, batch /
    kv-head / key-length / head-dim mismatches, Hq not a multiple of Hkv, dout of the wrong shape,
    mask not boolean or not broadcastable, bias not broadcastable, window entries < 0, softcap <= 0,
    non-finite scale, seqlens of the wrong length or out of range, NaN/Inf in the non-padded part of
    q, k, v, dout (and NaN/+Inf in bias) unless ``allow_nonfinite=True``, unknown alignment, sinks
    not of shape [Hq] or holding NaN / +inf (§18), chunk not None and not an int >= 1 (§19), dlse not
    of shape [B, Hq, Lq] or non-finite in its non-padded rows (§13).
    """
    raw = {"q": q, "k": k, "v": v}
    if dout is not None:
        raw["dout"] = dout
    shapes = ", ".join(f"{n}.shape={tuple(np.shape(a))}" for n, a in raw.items())
    arrs = {n: as_real_float64(a, n, shapes) for n, a in raw.items()}
    for n, a in arrs.items():
        if a.ndim != 4:
            layout = {"q": "[B, Hq, Lq, d]", "k": "[B, Hkv, Lk, d]", "v": "[B, Hkv, Lk, dv]", "dout": "[B, Hq, Lq, dv]"}
            raise ValueError(f"{n} must have rank 4 {layout[n]} (§1); got rank {a.ndim}; {shapes}")
    q64, k64, v64 = arrs["q"], arrs["k"], arrs["v"]
    B, Hq, Lq, d = q64.shape
    _, Hkv, Lk, dk = k64.shape
    if k64.shape[0] != B or v64.shape[0] != B:
        raise ValueError(f"q, k, v must share the batch size B (§1); {shapes}")
    if v64.shape[1] != Hkv or v64.shape[2] != Lk:
        raise ValueError(f"k and v must share [B, Hkv, Lk] (§1); {shapes}")
    if dk != d:
        raise ValueError(f"q and k head dims differ: q d={d}, k d={dk} (§1); {shapes}")
    if d < 1:
        raise ValueError(f"head dim d must be >= 1 (§1); {shapes}")
    if Hkv < 1 or Hq % Hkv != 0:
        raise ValueError(f"Hq={Hq} must be a multiple of Hkv={Hkv} >= 1 (GQA/MQA, §9); {shapes}")
    dv = v64.shape[3]
    dout64 = arrs.get("dout")
    if dout64 is not None and dout64.shape != (B, Hq, Lq, dv):
        raise ValueError(f"dout must have shape [B, Hq, Lq, dv] = {[B, Hq, Lq, dv]} (§13); {shapes}")

    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS} (§4); got {alignment!r}; {shapes}")
    if not isinstance(causal, bool | np.bool_):
        raise ValueError(f"causal must be a bool (§4); got {causal!r}; {shapes}")
    if scale is None:
        scale_f = 1.0 / math.sqrt(d)
    else:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(float(scale)):
            raise ValueError(f"scale must be None or a finite real number (§2); got {scale!r}; {shapes}")
        scale_f = float(scale)
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real) or not (0 < float(softcap) < math.inf):
            raise ValueError(f"softcap must be None or a finite number > 0 (§3); got {softcap!r}; {shapes}")
        softcap = float(softcap)
    win = _check_window(window, shapes)
    sinks64 = _check_sinks(sinks, Hq, allow_nonfinite, shapes)
    chunk_i = check_chunk(chunk, shapes)

    target = (B, Hq, Lq, Lk)
    mask_b = None
    if mask is not None:
        m = np.asarray(mask)
        if m.dtype != np.bool_:
            raise ValueError(
                f"mask must be boolean (True = attend, §6; pass additive masks as bias); got dtype {m.dtype}; {shapes}"
            )
        mask_b = _check_broadcast(m, "mask", target, shapes)
    bias_b = None
    if bias is not None:
        b64 = as_real_float64(bias, "bias", shapes)
        bias_b = _check_broadcast(b64, "bias", target, shapes)
        if not allow_nonfinite and b64.size and (np.isnan(b64).any() or np.isposinf(b64).any()):
            bad = tuple(int(i) for i in np.argwhere(np.isnan(b64) | np.isposinf(b64))[0])
            raise ValueError(
                f"bias has NaN/+Inf at index {bad} (value {b64[bad]}); -inf is allowed and means masked (§6); "
                f"pass allow_nonfinite=True to propagate it; {shapes}"
            )

    sq = _check_seqlens(seqlens_q, "seqlens_q", B, Lq, "Lq", shapes)
    sk = _check_seqlens(seqlens_k, "seqlens_k", B, Lk, "Lk", shapes)

    dlse64 = None
    if dlse is not None:
        dlse64 = as_real_float64(dlse, "dlse", shapes)
        if dlse64.shape != (B, Hq, Lq):
            raise ValueError(f"dlse must have shape [B, Hq, Lq] = {[B, Hq, Lq]} (§13); "
                             f"got dlse.shape={dlse64.shape}; {shapes}")
        arrs["dlse"] = dlse64[..., None]

    if not allow_nonfinite:  # only the positions that are read: padding may hold anything (§7)
        for n, a in arrs.items():
            lengths = sk if n in ("k", "v") else sq
            for bi in range(B):
                idx = _first_nonfinite(a[bi, :, : lengths[bi]])
                if idx is not None:
                    idx = (bi, *idx)
                    raise ValueError(
                        f"{n} has a non-finite value {a[idx]} at index {idx} (§15); pass allow_nonfinite=True "
                        f"to propagate NaN/Inf with IEEE semantics; {shapes}"
                    )

    return Problem(
        q=q64,
        k=k64,
        v=v64,
        dout=dout64,
        scale=scale_f,
        causal=bool(causal),
        alignment=alignment,
        window=win,
        mask=mask_b,
        bias=bias_b,
        softcap=softcap,
        seqlens_q=sq,
        seqlens_k=sk,
        sinks=sinks64,
        chunk=chunk_i,
        dlse=dlse64,
    )
