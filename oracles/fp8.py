"""FP8 quantization and incoherent processing: the dequantized view an FP8 kernel is judged by.

Implements oracles/SEMANTICS.md §10 (formats, saturating round-to-nearest-even, the three scaling
granularities and their descale shapes) and §11 (the random Hadamard transform M = H diag(s) / sqrt(d)
applied along the head dimension of Q and K, never V).

An FP8 kernel receives codes ``q8, k8, v8`` (values of the FP8 grid) and descales ``dq, dk, dv`` and
computes O = softmax(scale * dq * dk * Q8 K8^T) (dv * V8). The oracle computes exact attention on the
dequantized arrays ``q = dq * q8`` (and k, v); `quantize_attention_inputs` returns both views.
"""

from __future__ import annotations

import numpy as np

from attention_conformance.oracles.formats import GRID, round_once
from attention_conformance.oracles.hadamard import fwht, hadamard_matrix, hadamard_signs, random_hadamard

__all__ = [
    "FP8_FORMATS",
    "GRANULARITIES",
    "dequantize",
    "expand_descale",
    "fp8_max",
    "fwht",
    "hadamard_matrix",
    "hadamard_signs",
    "quantize",
    "quantize_attention_inputs",
    "random_hadamard",
    "round_fp8",
]

FP8_FORMATS: dict[str, str] = {"e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2"}
GRANULARITIES = ("per_tensor", "per_head", "per_tile")


def _format(format: str, shapes: str = "") -> str:
    key = format[len("float8_"):] if isinstance(format, str) and format.startswith("float8_") else format
    if key not in FP8_FORMATS:
        raise ValueError(
            f"format={format!r} is not a known FP8 format; expected one of {sorted(FP8_FORMATS)} (§10){shapes}"
        )
    return FP8_FORMATS[key]


def _granularity(granularity: str, shapes: str = "") -> str:
    if granularity not in GRANULARITIES:
        raise ValueError(
            f"granularity={granularity!r} is not known; expected one of {list(GRANULARITIES)} (§10){shapes}"
        )
    return granularity


def _shapes(**arrays) -> str:
    """'; q.shape=(...), ...' suffix naming the input shapes in an error message (SEMANTICS.md §15)."""
    return "; " + ", ".join(f"{n}.shape={tuple(np.shape(a))}" for n, a in arrays.items())


def fp8_max(format: str) -> float:
    """Largest finite value: 448 for e4m3fn, 57344 for e5m2 (§10)."""
    return GRID[_format(format)][2]


def round_fp8(x: np.ndarray, format: str = "e4m3fn") -> np.ndarray:
    """Round to the FP8 grid: one round-to-nearest-even, saturating at +-max; float64 out (§10).

    Exact (`oracles.formats.round_once`): within the binade of |x| (clamped at the smallest normal exponent, so
    subnormals share its quantum) x / 2**(e - mbits) is an exact power-of-two scaling and ``np.round`` rounds half
    to even. +-inf and anything beyond +-max saturate to +-max; NaN stays NaN.
    """
    return round_once(x, _format(format), saturate=True)


def _check_rank4(name: str, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 4:
        raise ValueError(f"{name} must have rank 4 [B, H, L, D]; got shape {x.shape}")
    return x


def _amax_to_descale(amax: np.ndarray, fmax: float) -> np.ndarray:
    amax = np.asarray(amax, dtype=np.float64)
    return np.where(amax > 0, amax / fmax, 1.0)


def _descale(x: np.ndarray, granularity: str, fmax: float, group: int, tile: int) -> np.ndarray:
    B, H, L, _ = x.shape
    if granularity == "per_tensor":
        return _amax_to_descale(np.max(np.abs(x)) if x.size else 0.0, fmax)
    if granularity == "per_head":
        if H % group:
            raise ValueError(f"heads H={H} is not a multiple of the group size {group} (shape {x.shape})")
        grouped = np.abs(x).reshape(B, H // group, group * L * x.shape[3])
        return _amax_to_descale(grouped.max(axis=2, initial=0.0), fmax)
    n_tiles = -(-L // tile)
    padded = np.zeros((B, H, n_tiles * tile, x.shape[3]))
    padded[:, :, :L] = np.abs(x)
    return _amax_to_descale(padded.reshape(B, H, n_tiles, tile * x.shape[3]).max(axis=3), fmax)


def expand_descale(descale: np.ndarray, shape: tuple[int, int, int, int], *, group: int = 1,
                   tile: int = 128) -> np.ndarray:
    """Broadcast a descale to one value per row: float64 [B, H, L] for a tensor of ``shape`` [B, H, L, D].

    Shapes (§10): () per tensor; (B, H // group) per (batch, kv head) -- query heads of one group share
    it; (B, H, ceil(L / tile)) per tile of ``tile`` rows.
    """
    B, H, L, _ = shape
    d = np.asarray(descale, dtype=np.float64)
    if d.ndim == 0:
        return np.broadcast_to(d, (B, H, L))
    if d.ndim == 2:
        if d.shape != (B, H // group):
            raise ValueError(f"per-head descale must have shape {(B, H // group)}; got {d.shape}")
        return np.broadcast_to(np.repeat(d, group, axis=1)[:, :, None], (B, H, L))
    if d.ndim == 3:
        n_tiles = -(-L // tile)
        if d.shape != (B, H, n_tiles):
            raise ValueError(f"per-tile descale must have shape {(B, H, n_tiles)} (tile={tile}); got {d.shape}")
        return np.repeat(d, tile, axis=2)[:, :, :L]
    raise ValueError(f"descale must have rank 0, 2 or 3; got shape {d.shape}")


def quantize(x: np.ndarray, *, format: str = "e4m3fn", granularity: str = "per_tensor", group: int = 1,
             tile: int = 128, name: str = "x") -> tuple[np.ndarray, np.ndarray]:
    """Quantize [B, H, L, D] ``x``: returns (codes, descale), codes = RNE_sat(x / descale) on the FP8 grid.

    descale = amax / fmax over the scaling block (1 where amax = 0): the whole tensor (shape ()),
    (batch, kv head) with ``group`` query heads per kv head (shape (B, H // group)), or tiles of
    ``tile`` rows x D (shape (B, H, ceil(L / tile))). See SEMANTICS.md §10.
    """
    shapes = _shapes(**{name: x})
    fmt = _format(format, shapes)
    granularity = _granularity(granularity, shapes)
    x = _check_rank4(name, x)
    if tile < 1:
        raise ValueError(f"tile={tile} must be >= 1{shapes}")
    fmax = GRID[fmt][2]
    descale = _descale(x, granularity, fmax, group, tile)
    rows = expand_descale(descale, x.shape, group=group, tile=tile)
    # a block holding inf or NaN has a non-finite descale: its codes are NaN (inf / inf, NaN) or 0 (x / inf), as the
    # CUDA quantizer gives them (test_cuda_quant_device's non-finite blocks); numpy's warning says nothing more
    with np.errstate(invalid="ignore"):
        codes = round_fp8(x / rows[..., None], fmt)
    return codes, np.asarray(descale, dtype=np.float64)


def dequantize(codes: np.ndarray, descale: np.ndarray, *, group: int = 1, tile: int = 128) -> np.ndarray:
    """descale * codes in float64, with the descale broadcast as in `expand_descale`."""
    codes = _check_rank4("codes", codes)
    return codes * expand_descale(descale, codes.shape, group=group, tile=tile)[..., None]


def quantize_attention_inputs(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, format: str = "e4m3fn",
                              granularity: str = "per_tensor", tile_q: int = 128, tile_k: int = 128,
                              incoherent: bool = False, seed: int = 0) -> dict:
    """Quantize Q, K, V for an FP8 attention kernel; SEMANTICS.md §10-§11.

    With ``incoherent``, Q and K (not V) are first multiplied by M = H diag(signs) / sqrt(d),
    signs = `hadamard_signs(d, seed)`. Returns a dict: "q8", "k8", "v8" (float64 FP8 grid values),
    "q_descale", "k_descale", "v_descale" (float64; () per tensor, (B, Hkv) per head -- Q's descale is
    shared by the query heads of a kv group -- , (B, H, n_tiles) per tile with tiles of ``tile_q`` rows
    for Q and ``tile_k`` rows for K and V), "q", "k", "v" (the dequantized float64 arrays the oracle
    sees, rotated when incoherent), "format", "granularity", "tile_q", "tile_k", "incoherent", "signs".
    """
    shapes = _shapes(q=q, k=k, v=v)
    fmt = _format(format, shapes)
    granularity = _granularity(granularity, shapes)
    q = _check_rank4("q", q)
    k = _check_rank4("k", k)
    v = _check_rank4("v", v)
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"q, k, v shapes do not agree: q {q.shape}, k {k.shape}, v {v.shape}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"Hq={q.shape[1]} is not a multiple of Hkv={k.shape[1]} (q {q.shape}, k {k.shape})")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k head dims differ: q {q.shape}, k {k.shape}")
    for name, t in (("tile_q", tile_q), ("tile_k", tile_k)):
        if int(t) < 1:
            raise ValueError(f"{name}={t} must be >= 1{shapes}")
    if incoherent and (q.shape[3] < 1 or q.shape[3] & (q.shape[3] - 1)):
        raise ValueError(f"incoherent=True needs a head dim that is a power of two (Hadamard transform, §11); "
                         f"got d={q.shape[3]}{shapes}")
    group = q.shape[1] // k.shape[1]
    signs = None
    if incoherent:
        signs = hadamard_signs(q.shape[3], seed)
        q = random_hadamard(q, signs)
        k = random_hadamard(k, signs)
    q8, qd = quantize(q, format=fmt, granularity=granularity, group=group, tile=tile_q, name="q")
    k8, kd = quantize(k, format=fmt, granularity=granularity, group=1, tile=tile_k, name="k")
    v8, vd = quantize(v, format=fmt, granularity=granularity, group=1, tile=tile_k, name="v")
    return {
        "q8": q8, "k8": k8, "v8": v8,
        "q_descale": qd, "k_descale": kd, "v_descale": vd,
        "q": dequantize(q8, qd, group=group, tile=tile_q),
        "k": dequantize(k8, kd, tile=tile_k),
        "v": dequantize(v8, vd, tile=tile_k),
        "format": "e4m3fn" if fmt == "float8_e4m3fn" else "e5m2",
        "granularity": granularity, "tile_q": int(tile_q), "tile_k": int(tile_k),
        "incoherent": bool(incoherent), "signs": signs,
    }
