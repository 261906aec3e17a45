"""ctypes binding of the FP8 input kernels: the random Hadamard transform and the FP8 quantizer on the GPU.

The kernels live in kernels/cuda/hadamard.cu (C ABI: kernels/cuda/include/attn_quant.h) inside the one
library `kernels.cuda_lib` loads. They compute in float64 with the operations of `oracles.fp8` in its
order, so their results equal the oracle's bit for bit (SEMANTICS.md §10, §11):

- `hadamard(x, signs)`: x M along the head dim, M = H_d diag(signs) / sqrt(d), for fp16 / bf16 / fp32 x
  [B, H, L, d] (d a power of two in [32, 512]); the result in x's dtype or float32, rounded once;
- `quantize(x, ...)`: FP8 codes (a torch float8 tensor) and descales (float32, and the float64 value the
  codes were divided by) for one tensor, per tensor / per (batch, head group) / per tile of rows, with the
  transform fused in front when ``signs`` is given;
- `quantize_attention_inputs(q, k, v, ...)`: `oracles.fp8.quantize_attention_inputs` on CUDA tensors, the
  signs drawn on the host by the oracle's own `hadamard_signs(d, seed)`; `oracle_view` turns its result
  into the oracle's dict of float64 NumPy arrays (what an adapter reads from ``CaseInputs.fp8``).

Argument checks run in Python first (ValueError naming the argument and the shape), before the library is
loaded, so they need no GPU; the launchers check again and answer `cuda_lib.KernelError`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from attention_conformance.kernels import cuda_lib
from attention_conformance.oracles import fp8

__all__ = [
    "ATTN_QUANT_PARAMS_VERSION",
    "DTYPE_CODES",
    "FORMAT_CODES",
    "GRANULARITY_CODES",
    "MAX_HEAD_DIM",
    "Fp8QuantParams",
    "HadamardParams",
    "check_signs",
    "compiled_layout",
    "descale_shape",
    "hadamard",
    "mirror_layout",
    "oracle_view",
    "quantize",
    "quantize_attention_inputs",
]

ATTN_QUANT_PARAMS_VERSION = 2
DTYPE_CODES = {"float16": 0, "bfloat16": 1, "float32": 2}  # AttnQuantDtype
FORMAT_CODES = cuda_lib.FP8_FORMAT_CODES  # attn_params.h AttnFp8Format (one table for both FP8 entry points)
GRANULARITY_CODES = cuda_lib.FP8_GRANULARITY_CODES  # attn_params.h AttnFp8Granularity
MAX_HEAD_DIM = 512
_TORCH_FP8 = {"e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2"}

_vp, _i64, _i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32


class HadamardParams(ctypes.Structure):
    """Mirror of ``AttnHadamardParams`` in attn_quant.h (same order, same types)."""

    _fields_ = [
        ("x", _vp), ("y", _vp),
        ("x_batch_stride", _i64), ("x_head_stride", _i64), ("x_row_stride", _i64),
        ("y_batch_stride", _i64), ("y_head_stride", _i64), ("y_row_stride", _i64),
        ("batch", _i32), ("heads", _i32), ("seqlen", _i32), ("head_dim", _i32),
        ("x_dtype", _i32), ("y_dtype", _i32),
        ("signs", _vp),
    ]  # fmt: skip


class Fp8QuantParams(ctypes.Structure):
    """Mirror of ``AttnFp8QuantParams`` in attn_quant.h."""

    _fields_ = [
        ("x", _vp), ("codes", _vp), ("descale", _vp), ("descale64", _vp),
        ("x_batch_stride", _i64), ("x_head_stride", _i64), ("x_row_stride", _i64),
        ("c_batch_stride", _i64), ("c_head_stride", _i64), ("c_row_stride", _i64),
        ("batch", _i32), ("heads", _i32), ("seqlen", _i32), ("head_dim", _i32),
        ("x_dtype", _i32), ("format", _i32), ("granularity", _i32), ("group", _i32), ("tile", _i32),
        ("signs", _vp), ("amax_scratch", _vp),
    ]  # fmt: skip


def mirror_layout() -> list[int]:
    """The ctypes mirrors' layout in `compiled_layout`'s format."""
    out = [ATTN_QUANT_PARAMS_VERSION, ctypes.sizeof(HadamardParams), ctypes.sizeof(Fp8QuantParams)]
    out += [getattr(HadamardParams, n).offset for n, _ in HadamardParams._fields_]
    out += [getattr(Fp8QuantParams, n).offset for n, _ in Fp8QuantParams._fields_]
    return out


def compiled_layout() -> list[int]:
    """Version, sizes and field offsets as nvcc compiled them (``attn_quant_params_layout``)."""
    lib = cuda_lib.library()
    fn = getattr(lib, "attn_quant_params_layout", None)
    if fn is None:
        raise cuda_lib.LibraryUnavailable(f"{cuda_lib.library_path()} does not export attn_quant_params_layout")
    buf = (_i64 * 64)()
    n = fn(buf, 64)
    return list(buf[:n])


# -- argument checks (pure Python: no library, no GPU) ---------------------------------------------------

def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def _check_tensor(name: str, x: Any, dtypes: tuple[str, ...]) -> str:
    """Rank 4 [B, H, L, D], a dtype of ``dtypes``, last dimension contiguous; returns the dtype name."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch tensor [B, H, L, D]; got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"{name} must have rank 4 [B, H, L, D]; got shape {_shape(x)}")
    dt = str(x.dtype).removeprefix("torch.")
    if dt not in dtypes:
        raise ValueError(f"{name}.dtype={dt}: expected one of {list(dtypes)} (shape {_shape(x)})")
    if x.shape[3] > 1 and x.stride(3) != 1:
        raise ValueError(f"{name}.stride(-1)={x.stride(3)}: the head dimension must be contiguous "
                         f"(shape {_shape(x)}, stride {tuple(x.stride())})")
    d = int(x.shape[3])
    if d < 32 or d > MAX_HEAD_DIM or d & (d - 1):
        raise ValueError(f"{name}: head dim d={d} must be a power of two in [32, {MAX_HEAD_DIM}] "
                         f"(one warp per row; the Hadamard transform, §11, needs a power of two) (shape {_shape(x)})")
    if max(x.shape[0], x.shape[1]) > 65535:
        raise ValueError(f"{name}: batch and heads must be <= 65535 (grid limit); got shape {_shape(x)}")
    return dt


def _check_cuda(name: str, x: Any) -> None:
    if not x.is_cuda:
        raise ValueError(f"{name} must be a CUDA tensor; got device {x.device} (shape {_shape(x)})")


def check_signs(signs: Any, d: int, name: str = "signs") -> np.ndarray:
    """``signs`` as a contiguous float32 host array of shape (d,), every entry exactly +1 or -1 (§11)."""
    s = np.asarray(signs, dtype=np.float64)
    if s.shape != (d,):
        raise ValueError(f"{name} must have shape ({d},) to match the head dim; got {s.shape}")
    bad = np.flatnonzero((s != 1.0) & (s != -1.0))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}]={float(s[bad[0]])!r}: every sign must be exactly +1 or -1 (§11)")
    return np.ascontiguousarray(s, dtype=np.float32)


def _format(format: str) -> str:
    fp8.fp8_max(format)  # the oracle's own check: ValueError naming `format` for an unknown name
    return format.removeprefix("float8_")


def _granularity(granularity: str) -> str:
    if granularity not in GRANULARITY_CODES:
        raise ValueError(f"granularity={granularity!r} is not known; expected one of {list(fp8.GRANULARITIES)} (§10)")
    return granularity


def descale_shape(shape: tuple[int, ...], granularity: str, group: int = 1, tile: int = 128) -> tuple[int, ...]:
    """The descale shape of §10 for ``shape`` [B, H, L, D]: (), (B, H // group) or (B, H, ceil(L / tile))."""
    B, H, L, _ = shape
    granularity = _granularity(granularity)
    if granularity == "per_tensor":
        return ()
    if granularity == "per_head":
        return (B, H // group)
    return (B, H, -(-L // tile))


def _check_quant_args(name: str, x: Any, granularity: str, group: int, tile: int) -> None:
    if granularity == "per_head" and (int(group) < 1 or x.shape[1] % int(group)):
        raise ValueError(f"group={group}: per_head needs a group size >= 1 dividing the heads of {name} "
                         f"(shape {_shape(x)})")
    if granularity == "per_tile" and int(tile) < 1:
        raise ValueError(f"tile={tile} must be >= 1 (shape of {name}: {_shape(x)})")


# -- launchers -------------------------------------------------------------------------------------------

def _ptr(t: Any) -> int | None:
    return None if t is None or t.numel() == 0 else t.data_ptr()


def hadamard(x: Any, signs: Any, *, out_dtype: Any = None) -> Any:
    """x M along the last axis (SEMANTICS.md §11) on the GPU: float64 arithmetic, one rounding to ``out_dtype``.

    ``x``: CUDA tensor [B, H, L, d] of float16 / bfloat16 / float32, d a power of two in [32, 512];
    ``signs``: d values +-1 (`oracles.fp8.hadamard_signs`); ``out_dtype``: x's dtype (default) or float32.
    """
    import torch

    dt = _check_tensor("x", x, tuple(DTYPE_CODES))
    s = check_signs(signs, int(x.shape[3]))
    out_dtype = x.dtype if out_dtype is None else out_dtype
    out_name = str(out_dtype).removeprefix("torch.")
    if out_name not in (dt, "float32"):
        raise ValueError(f"out_dtype={out_name}: must be x's dtype ({dt}) or float32 (shape {_shape(x)})")
    _check_cuda("x", x)
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    p = HadamardParams()
    p.x, p.y = _ptr(x), _ptr(y)
    p.x_batch_stride, p.x_head_stride, p.x_row_stride = x.stride(0), x.stride(1), x.stride(2)
    p.y_batch_stride, p.y_head_stride, p.y_row_stride = y.stride(0), y.stride(1), y.stride(2)
    p.batch, p.heads, p.seqlen, p.head_dim = _shape(x)
    p.x_dtype, p.y_dtype = DTYPE_CODES[dt], DTYPE_CODES[out_name]
    p.signs = s.ctypes.data
    p._keep = [x, y, s]
    cuda_lib.call("attn_hadamard", p)
    return y


def quantize(x: Any, *, format: str = "e4m3fn", granularity: str = "per_tensor", group: int = 1, tile: int = 128,
             signs: Any = None, name: str = "x") -> tuple[Any, Any, Any]:
    """FP8-quantize CUDA tensor ``x`` [B, H, L, d] as `oracles.fp8.quantize` does (§10), after x M when ``signs``.

    Returns (codes, descale, descale64): codes a torch float8_e4m3fn / float8_e5m2 tensor [B, H, L, d];
    descale float32 and descale64 float64 tensors of `descale_shape` (descale64 is the exact value the
    codes were divided by; descale its float32 rounding, the one an FP8 kernel is given).
    """
    import torch

    fmt = _format(format)
    granularity = _granularity(granularity)
    dt = _check_tensor(name, x, tuple(DTYPE_CODES))
    _check_quant_args(name, x, granularity, group, tile)
    s = None if signs is None else check_signs(signs, int(x.shape[3]))
    _check_cuda(name, x)
    dshape = descale_shape(_shape(x), granularity, int(group), int(tile))
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    descale = torch.empty(dshape, dtype=torch.float32, device=x.device)
    descale64 = torch.empty(dshape, dtype=torch.float64, device=x.device)
    p = Fp8QuantParams()
    p.x, p.codes, p.descale, p.descale64 = _ptr(x), _ptr(codes), _ptr(descale), _ptr(descale64)
    p.x_batch_stride, p.x_head_stride, p.x_row_stride = x.stride(0), x.stride(1), x.stride(2)
    p.c_batch_stride, p.c_head_stride, p.c_row_stride = codes.stride(0), codes.stride(1), codes.stride(2)
    p.batch, p.heads, p.seqlen, p.head_dim = _shape(x)
    p.x_dtype, p.format, p.granularity = DTYPE_CODES[dt], FORMAT_CODES[fmt], GRANULARITY_CODES[granularity]
    p.group, p.tile = int(group), int(tile)
    p.signs = None if s is None else s.ctypes.data
    p._keep = [x, codes, descale, descale64, s]
    cuda_lib.call("attn_fp8_quantize", p)
    return codes.view(getattr(torch, _TORCH_FP8[fmt])), descale, descale64


def quantize_attention_inputs(q: Any, k: Any, v: Any, *, format: str = "e4m3fn", granularity: str = "per_tensor",
                              tile_q: int = 128, tile_k: int = 128, incoherent: bool = False,
                              seed: int = 0) -> dict[str, Any]:
    """`oracles.fp8.quantize_attention_inputs` on CUDA tensors q [B, Hq, Lq, d], k [B, Hkv, Lk, d], v [B, Hkv, Lk, dv].

    With ``incoherent``, Q and K (not V) go through x M first, M from the oracle's `hadamard_signs(d, seed)`.
    Returns torch tensors "q8", "k8", "v8" (float8), "q_descale", "k_descale", "v_descale" (float32),
    "q_descale64", "k_descale64", "v_descale64" (float64), and "format", "granularity", "tile_q", "tile_k",
    "incoherent", "signs" (float64 NumPy or None) as the oracle's dict has them.
    """
    fmt = _format(format)
    granularity = _granularity(granularity)
    for n, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(n, t, tuple(DTYPE_CODES))
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"q, k, v shapes do not agree: q {_shape(q)}, k {_shape(k)}, v {_shape(v)}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"Hq={q.shape[1]} is not a multiple of Hkv={k.shape[1]} (q {_shape(q)}, k {_shape(k)})")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k head dims differ: q {_shape(q)}, k {_shape(k)}")
    for n, t in (("tile_q", tile_q), ("tile_k", tile_k)):
        if int(t) < 1:
            raise ValueError(f"{n}={t} must be >= 1 (q {_shape(q)}, k {_shape(k)})")
    group = int(q.shape[1] // k.shape[1])
    signs = fp8.hadamard_signs(int(q.shape[3]), seed) if incoherent else None
    out: dict[str, Any] = {}
    for n, t, g, tile, s in (("q", q, group, tile_q, signs), ("k", k, 1, tile_k, signs), ("v", v, 1, tile_k, None)):
        out[f"{n}8"], out[f"{n}_descale"], out[f"{n}_descale64"] = quantize(
            t, format=fmt, granularity=granularity, group=g, tile=int(tile), signs=s, name=n)
    out.update(format=fmt, granularity=granularity, tile_q=int(tile_q), tile_k=int(tile_k),
               incoherent=bool(incoherent), signs=signs)
    return out


def oracle_view(result: dict[str, Any], *, descale: str = "float32") -> dict[str, Any]:
    """`quantize_attention_inputs`' result as the oracle's dict: float64 NumPy codes, descales and the
    dequantized "q", "k", "v" (`oracles.fp8.dequantize`), plus the settings; what ``CaseInputs.fp8`` holds.

    ``descale``: "float32" (the descales an FP8 kernel is given, widened) or "float64" (the exact ones).
    """
    if descale not in ("float32", "float64"):
        raise ValueError(f"descale={descale!r}: expected 'float32' or 'float64'")
    suffix = "" if descale == "float32" else "64"
    group = int(result["q8"].shape[1] // result["k8"].shape[1])
    out: dict[str, Any] = {}
    for n in ("q", "k", "v"):
        out[f"{n}8"] = result[f"{n}8"].cpu().double().numpy()
        out[f"{n}_descale"] = result[f"{n}_descale{suffix}"].cpu().double().numpy()
    out["q"] = fp8.dequantize(out["q8"], out["q_descale"], group=group, tile=result["tile_q"])
    out["k"] = fp8.dequantize(out["k8"], out["k_descale"], tile=result["tile_k"])
    out["v"] = fp8.dequantize(out["v8"], out["v_descale"], tile=result["tile_k"])
    for key in ("format", "granularity", "tile_q", "tile_k", "incoherent", "signs"):
        out[key] = result[key]
    return out
