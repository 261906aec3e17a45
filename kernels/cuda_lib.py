"""ctypes loader for libattn_kernels.so and builders of its parameter structs from torch tensors.

The library exposes a plain C ABI (kernels/cuda/include/attn_params.h): launchers take a pointer to
`AttnFwdParams` / `AttnBwdParams` (device pointers, element strides, shapes, mask settings), a CUDA
stream and an error buffer. Nothing of torch's C++ ABI crosses, so one build serves every torch
version; torch CUDA tensors only carry the data (``data_ptr()`` and ``stride()``).

- `library()` finds the library: ``$ATTN_KERNELS_LIB``, else build/kernels/libattn_kernels.so,
  building it on demand when nvcc exists (`kernels.build`);
- `AttnFwdParams` / `AttnBwdParams` mirror the C structs field by field (tests compare the layout
  against the compiled one through ``attn_params_layout``);
- `fwd_params(...)` / `bwd_params(...)` fill them from tensors in the [B, H, L, D] convention (or,
  for paged K/V, from page pools and an int32 block table: ``block_table=``, ``page_size=``);
- `call(name, params)` runs a launcher and raises `KernelError` (`KernelUnsupported` for
  ATTN_ERR_UNSUPPORTED) carrying the kernel's own message;
- `AttnFp8FwdParams` / `fp8_fwd_params(...)`: the FP8 forward's struct (attn_params.h, its own version
  ``ATTN_FP8_PARAMS_VERSION``) around an `AttnFwdParams`, for ``attn_fa3_fp8_fwd`` (SEMANTICS.md §10);
  `pack_vt` writes V's codes k-major (``attn_fp8_pack_vt``) for ``v_layout="kmajor"``, `pack_vt_reference` is the
  same layout in NumPy.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
from pathlib import Path
from typing import Any

__all__ = [
    "ATTN_BF16",
    "ATTN_FP16",
    "ATTN_FP8_PARAMS_VERSION",
    "ATTN_PARAMS_VERSION",
    "FP8_FORMAT_CODES",
    "FP8_GRANULARITY_CODES",
    "FP8_V_LAYOUT_CODES",
    "LAUNCHERS",
    "AttnBwdParams",
    "AttnFp8FwdParams",
    "AttnFp8PackVtParams",
    "AttnFwdParams",
    "FA3_EXACT_VARIANTS",
    "FA3_VARIANTS",
    "KernelError",
    "KernelUnsupported",
    "LibraryUnavailable",
    "VT_KEY_ORDER",
    "build_setting",
    "bwd_params",
    "call",
    "call_fa3_variant",
    "compiled_fp8_layout",
    "compiled_layout",
    "fp8_fwd_params",
    "fp8_key_tile",
    "fp8_mirror_layout",
    "fwd_params",
    "library",
    "library_path",
    "mirror_layout",
    "open_library",
    "pack_vt",
    "pack_vt_reference",
    "splitkv_num_splits",
]

ATTN_PARAMS_VERSION = 4
ATTN_FP16, ATTN_BF16 = 0, 1
STATUS = {0: "ATTN_OK", 1: "ATTN_ERR_UNSUPPORTED", 2: "ATTN_ERR_INVALID", 3: "ATTN_ERR_CUDA"}
LAUNCHERS = ("attn_fa1_fwd", "attn_fa1_bwd", "attn_fa2_fwd", "attn_fa2_bwd", "attn_splitkv_fwd", "attn_fa3_fwd",
             "attn_fa3_fp8_fwd", "attn_fp8_pack_vt", "attn_fa3_bwd", "attn_fa3_bwd_deterministic")
ATTN_FP8_PARAMS_VERSION = 2
#: attn_params.h AttnFp8Format / AttnFp8Granularity, keyed by the oracle's names (oracles/fp8.py)
FP8_FORMAT_CODES = {"e4m3fn": 0, "e5m2": 1}
FP8_GRANULARITY_CODES = {"per_tensor": 0, "per_head": 1, "per_tile": 2}
#: attn_params.h AttnFp8VLayout: V's codes as rows (the kernel transposes them) or k-major (`pack_vt`)
FP8_V_LAYOUT_CODES = {"rows": 0, "kmajor": 1}
#: attn_params.h ATTN_FP8_VT_KEY: position p of every 16-key group of a k-major V row holds key VT_KEY_ORDER[p]
VT_KEY_ORDER = tuple(2 * (p >> 2) + (p & 1) + 8 * ((p >> 1) & 1) for p in range(16))
#: attn_fa3_fwd_variant flags (attn_params.h AttnFa3Variant): the ablation builds of the FA3 forward
FA3_VARIANTS = {"full": 0, "no_pingpong": 1, "no_overlap": 2, "persistent": 3, "no_ws": 4, "stage1": 5,
                "n176": 6, "stages2": 7, "d64_two_wg": 8, "one_cta_per_tile": 9, "skip_rescale": 10,
                "probe_no_exp": 11, "probe_no_pv": 12, "probe_no_softmax": 13, "smem_q": 14,
                "two_wg": 15, "cluster2": 16, "eager_rescale": 17}
#: the builds of FA3_VARIANTS that compute attention (the probes leave a stage out: timing only)
FA3_EXACT_VARIANTS = tuple(v for v in FA3_VARIANTS if not v.startswith("probe_"))

_vp = ctypes.c_void_p
_i64 = ctypes.c_int64
_i32 = ctypes.c_int32
_f32 = ctypes.c_float


class AttnFwdParams(ctypes.Structure):
    """Mirror of ``AttnFwdParams`` in attn_params.h (same order, same types)."""

    _fields_ = [
        ("q", _vp), ("k", _vp), ("v", _vp), ("o", _vp), ("lse", _vp),
        ("q_batch_stride", _i64), ("q_head_stride", _i64), ("q_row_stride", _i64),
        ("k_batch_stride", _i64), ("k_head_stride", _i64), ("k_row_stride", _i64),
        ("v_batch_stride", _i64), ("v_head_stride", _i64), ("v_row_stride", _i64),
        ("o_batch_stride", _i64), ("o_head_stride", _i64), ("o_row_stride", _i64),
        ("lse_batch_stride", _i64), ("lse_head_stride", _i64),
        ("batch", _i32), ("heads_q", _i32), ("heads_kv", _i32),
        ("seqlen_q", _i32), ("seqlen_k", _i32),
        ("head_dim", _i32), ("head_dim_v", _i32),
        ("seqlens_q", _vp), ("seqlens_k", _vp),
        ("scale", _f32), ("softcap", _f32),
        ("causal", _i32), ("align_bottom_right", _i32),
        ("window_left", _i32), ("window_right", _i32),
        ("dtype", _i32),
        ("num_splits", _i32),
        ("o_partial", _vp), ("lse_partial", _vp),
        ("block_table", _vp), ("block_table_batch_stride", _i64), ("page_size", _i32),  # v3: paged K/V
        ("sinks", _vp),  # v4: attention sinks, fp32 [Hq] or NULL
    ]  # fmt: skip


class AttnBwdParams(ctypes.Structure):
    """Mirror of ``AttnBwdParams`` in attn_params.h."""

    _fields_ = [
        ("fwd", AttnFwdParams),
        ("dout", _vp), ("dq", _vp), ("dk", _vp), ("dv", _vp),
        ("do_batch_stride", _i64), ("do_head_stride", _i64), ("do_row_stride", _i64),
        ("dq_batch_stride", _i64), ("dq_head_stride", _i64), ("dq_row_stride", _i64),
        ("dk_batch_stride", _i64), ("dk_head_stride", _i64), ("dk_row_stride", _i64),
        ("dv_batch_stride", _i64), ("dv_head_stride", _i64), ("dv_row_stride", _i64),
        ("dq_accum", _vp), ("d_rowsum", _vp), ("dk_accum", _vp), ("dv_accum", _vp),
        ("dlse", _vp), ("dsinks", _vp),  # v4: LSE cotangent fp32 [B, Hq, Lq] and d sinks fp32 [Hq], or NULL
    ]  # fmt: skip


class AttnFp8FwdParams(ctypes.Structure):
    """Mirror of ``AttnFp8FwdParams`` in attn_params.h (ATTN_FP8_PARAMS_VERSION 2)."""

    _fields_ = [
        ("fwd", AttnFwdParams),
        ("format", _i32), ("granularity", _i32),
        ("q_descale", _vp), ("k_descale", _vp), ("v_descale", _vp),
        ("tile_q", _i32), ("tile_k", _i32),
        ("v_layout", _i32), ("vt_keys", _i32),
    ]  # fmt: skip


class AttnFp8PackVtParams(ctypes.Structure):
    """Mirror of ``AttnFp8PackVtParams`` in attn_params.h (ATTN_FP8_PARAMS_VERSION 2)."""

    _fields_ = [
        ("v", _vp), ("vt", _vp),
        ("v_batch_stride", _i64), ("v_head_stride", _i64), ("v_row_stride", _i64),
        ("vt_batch_stride", _i64), ("vt_head_stride", _i64), ("vt_row_stride", _i64),
        ("seqlens_k", _vp),
        ("batch", _i32), ("heads", _i32), ("seqlen", _i32), ("head_dim", _i32),
        ("vt_keys", _i32), ("reserved", _i32),
    ]  # fmt: skip


class LibraryUnavailable(RuntimeError):
    """The shared library could not be found, built or loaded; the message says why."""


class KernelError(RuntimeError):
    """A launcher returned a non-zero AttnStatus; ``code``, ``status`` and ``message`` are the kernel's."""

    def __init__(self, launcher: str, code: int, message: str):
        self.launcher, self.code, self.message = launcher, code, message
        self.status = STATUS.get(code, f"status {code}")
        super().__init__(f"{launcher}: {self.status}: {message}")


class KernelUnsupported(KernelError):
    """ATTN_ERR_UNSUPPORTED: the kernel does not implement this head dim / dtype / feature."""


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_error: str | None = None


def library_path() -> Path:
    """Where the library is expected: ``$ATTN_KERNELS_LIB`` or build/kernels/libattn_kernels.so."""
    env = os.environ.get("ATTN_KERNELS_LIB")
    if env:
        return Path(env)
    from attention_conformance.kernels.build import DEFAULT_OUT, LIB_NAME

    return DEFAULT_OUT / LIB_NAME


def library(build_if_missing: bool = True) -> ctypes.CDLL:
    """The loaded library (cached). Builds it first when it is missing and nvcc exists, unless
    ``$ATTN_KERNELS_NO_BUILD`` is set (the pytest plugin sets it: under pytest the build is a step
    before the tests, never a silent compile inside one).

    Raises `LibraryUnavailable` with the reason (and the build command) otherwise.
    """
    build_if_missing = build_if_missing and "ATTN_KERNELS_NO_BUILD" not in os.environ
    global _lib, _lib_error
    with _lock:
        if _lib is not None:
            return _lib
        if _lib_error is not None:
            raise LibraryUnavailable(_lib_error)
        path = library_path()
        if not path.is_file() and build_if_missing and "ATTN_KERNELS_LIB" not in os.environ:
            from attention_conformance.kernels.build import BuildError, build, find_nvcc

            if find_nvcc() is None:
                _lib_error = (f"{path} does not exist and nvcc was not found to build it "
                              "(`python -m attention_conformance.kernels.build`)")
                raise LibraryUnavailable(_lib_error)
            try:
                build(path.parent, verbose=False)
            except BuildError as e:
                _lib_error = f"building {path} failed: {e}"
                raise LibraryUnavailable(_lib_error) from None
        if not path.is_file():
            _lib_error = f"{path} does not exist (run `python -m attention_conformance.kernels.build`)"
            raise LibraryUnavailable(_lib_error)
        try:
            _lib = open_library(path)
        except OSError as e:
            _lib_error = f"loading {path} failed: {e}"
            raise LibraryUnavailable(_lib_error) from None
        return _lib


def open_library(path: str | Path) -> ctypes.CDLL:
    """A build of the library at ``path`` with every export's signature declared: `library` loads the configured one
    through it; a benchmark comparing builds (different paths) in one process opens each, so same-named symbols of
    different builds stay apart, and passes it to `call`. Raises OSError when the file does not load."""
    lib = ctypes.CDLL(str(path))
    for name in LAUNCHERS:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            fn.argtypes = [_vp, _vp, ctypes.c_char_p, ctypes.c_int]
    if hasattr(lib, "attn_fa3_fwd_variant"):
        lib.attn_fa3_fwd_variant.restype = ctypes.c_int
        lib.attn_fa3_fwd_variant.argtypes = [_vp, ctypes.c_int, _vp, ctypes.c_char_p, ctypes.c_int]
    if hasattr(lib, "attn_splitkv_num_splits"):
        lib.attn_splitkv_num_splits.restype = ctypes.c_int
        lib.attn_splitkv_num_splits.argtypes = [_vp, ctypes.c_int]
    if hasattr(lib, "attn_fa3_fp8_key_tile"):
        lib.attn_fa3_fp8_key_tile.restype = ctypes.c_int
        lib.attn_fa3_fp8_key_tile.argtypes = [_vp, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int]
    for name in ("attn_params_layout", "attn_fp8_params_layout"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.POINTER(_i64), ctypes.c_int]
    return lib


def mirror_layout() -> list[int]:
    """The ctypes mirror's layout in `compiled_layout`'s format."""
    out = [ATTN_PARAMS_VERSION, ctypes.sizeof(AttnFwdParams), ctypes.sizeof(AttnBwdParams)]
    out += [getattr(AttnFwdParams, n).offset for n, _ in AttnFwdParams._fields_]
    out += [getattr(AttnBwdParams, n).offset for n, _ in AttnBwdParams._fields_]
    return out


def compiled_layout() -> list[int]:
    """Version, sizes and field offsets as compiled into the library (``attn_params_layout``)."""
    buf = (_i64 * 128)()
    n = library().attn_params_layout(buf, 128)
    return list(buf[:n])


def fp8_mirror_layout() -> list[int]:
    """The ctypes mirrors of AttnFp8FwdParams and AttnFp8PackVtParams in `compiled_fp8_layout`'s format."""
    out = [ATTN_FP8_PARAMS_VERSION, ctypes.sizeof(AttnFp8FwdParams)]
    out += [getattr(AttnFp8FwdParams, n).offset for n, _ in AttnFp8FwdParams._fields_]
    out += [ctypes.sizeof(AttnFp8PackVtParams)]
    return out + [getattr(AttnFp8PackVtParams, n).offset for n, _ in AttnFp8PackVtParams._fields_]


def compiled_fp8_layout() -> list[int]:
    """Version, sizes and field offsets of AttnFp8FwdParams and AttnFp8PackVtParams as compiled
    (``attn_fp8_params_layout``)."""
    lib = library()
    if getattr(lib, "attn_fp8_params_layout", None) is None:
        raise LibraryUnavailable(f"{library_path()} does not export attn_fp8_params_layout")
    buf = (_i64 * 64)()
    n = lib.attn_fp8_params_layout(buf, 64)
    return list(buf[:n])


def _is_fp8(t: Any) -> bool:
    return "float8" in str(getattr(t, "dtype", ""))


def _dtype_code(t: Any) -> int:
    import torch

    if t.dtype == torch.float16:
        return ATTN_FP16
    if t.dtype == torch.bfloat16:
        return ATTN_BF16
    raise KernelUnsupported("fwd_params", 1, f"q.dtype={t.dtype}: only float16 and bfloat16 are supported")


def _ptr(t: Any) -> int | None:
    return None if t is None else t.data_ptr()


def fwd_params(
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    lse: Any = None,
    *,
    scale: float | None = None,
    causal: bool = False,
    alignment: str = "bottom_right",
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    seqlens_q: Any = None,
    seqlens_k: Any = None,
    num_splits: int = 0,
    o_partial: Any = None,
    lse_partial: Any = None,
    block_table: Any = None,
    page_size: int = 0,
    seqlen_k: int | None = None,
    sinks: Any = None,
) -> AttnFwdParams:
    """Fill `AttnFwdParams` from CUDA tensors q [B,Hq,Lq,d], k [B,Hkv,Lk,d], v [B,Hkv,Lk,dv], o [B,Hq,Lq,dv].

    Tensors may be any strided views whose last dimension is contiguous (stride 1); lse is fp32
    [B, Hq, Lq] with row stride 1 or None. ``window`` is (left, right) with None = unbounded
    (oracles/SEMANTICS.md); seqlens_* are int32 CUDA tensors of length B or None. The returned struct
    keeps references to every tensor it points into (``_keep``), so they outlive the call.

    Paged K/V (attn_params.h v3, read by ``attn_splitkv_fwd`` only): ``block_table`` is an int32 tensor
    [B, pages_per_seq] (last dimension contiguous), k / v are the page pools [num_pages, Hkv, page_size, d|dv]
    (their batch stride becomes the page stride), ``page_size`` the keys per page, and ``seqlen_k`` the
    logical (padded) key length Lk, which the pools' shape does not carry; it must be given and at most
    pages_per_seq * page_size. Logical key j of batch b is ``pool[block_table[b, j // page_size], :,
    j % page_size]``.

    Attention sinks (attn_params.h v4, SEMANTICS.md §18; read by ``attn_fa2_fwd``, ``attn_splitkv_fwd`` and
    ``attn_fa2_bwd``): ``sinks`` is a contiguous fp32 tensor [Hq], one logit per query head, or None.
    """
    B, Hq, Lq, d = q.shape
    _, Hkv, Lk, _ = k.shape
    dv = v.shape[-1]
    if block_table is not None:
        Lk = _check_paged(k, v, block_table, int(page_size), seqlen_k, B)
    elif seqlen_k is not None or page_size:
        raise KernelError("fwd_params", 2, f"seqlen_k={seqlen_k!r} / page_size={page_size!r} are only meaningful "
                                           "with block_table (paged K/V); dense K/V take Lk from k.shape[2]")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        if t.numel() > 0 and t.stride(-1) != 1:  # an empty tensor is never read; torch may give it any stride
            raise KernelError("fwd_params", 2,
                              f"{name}.stride(-1)={t.stride(-1)}: the last dimension must be contiguous")
    if lse is not None and lse.stride(-1) != 1:
        raise KernelError("fwd_params", 2, f"lse.stride(-1)={lse.stride(-1)}: must be 1")
    _check_vector("fwd_params", "sinks", sinks, (Hq,))
    wl, wr = (None, None) if window is None else window
    p = AttnFwdParams()
    p.q, p.k, p.v, p.o, p.lse = _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse)
    p.q_batch_stride, p.q_head_stride, p.q_row_stride = q.stride(0), q.stride(1), q.stride(2)
    p.k_batch_stride, p.k_head_stride, p.k_row_stride = k.stride(0), k.stride(1), k.stride(2)
    p.v_batch_stride, p.v_head_stride, p.v_row_stride = v.stride(0), v.stride(1), v.stride(2)
    p.o_batch_stride, p.o_head_stride, p.o_row_stride = o.stride(0), o.stride(1), o.stride(2)
    if lse is not None:
        p.lse_batch_stride, p.lse_head_stride = lse.stride(0), lse.stride(1)
    p.batch, p.heads_q, p.heads_kv = B, Hq, Hkv
    p.seqlen_q, p.seqlen_k, p.head_dim, p.head_dim_v = Lq, Lk, d, dv
    p.seqlens_q, p.seqlens_k = _ptr(seqlens_q), _ptr(seqlens_k)
    p.scale = (1.0 / math.sqrt(d)) if scale is None else float(scale)
    p.softcap = 0.0 if not softcap else float(softcap)
    p.causal = int(bool(causal))
    p.align_bottom_right = int(alignment == "bottom_right")
    p.window_left = -1 if wl is None else int(wl)
    p.window_right = -1 if wr is None else int(wr)
    p.dtype = _dtype_code(o if _is_fp8(q) else q)  # FP8 codes in: the field is the output dtype (attn_params.h)
    p.num_splits = int(num_splits)
    p.o_partial, p.lse_partial = _ptr(o_partial), _ptr(lse_partial)
    if block_table is not None:
        p.block_table, p.block_table_batch_stride, p.page_size = _ptr(block_table), block_table.stride(0), page_size
    p.sinks = _ptr(sinks)
    p._keep = [q, k, v, o, lse, seqlens_q, seqlens_k, o_partial, lse_partial, block_table, sinks]
    return p


def fp8_fwd_params(q8: Any, k8: Any, v8: Any, o: Any, lse: Any, q_descale: Any, k_descale: Any, v_descale: Any, *,
                   format: str, granularity: str, tile_q: int = 128, tile_k: int = 128, v_layout: str = "rows",
                   **fwd_kwargs: Any) -> AttnFp8FwdParams:
    """Fill `AttnFp8FwdParams` for ``attn_fa3_fp8_fwd`` (SEMANTICS.md §10).

    q8, k8, v8: FP8 CUDA tensors (torch.float8_e4m3fn / float8_e5m2, [B, H, L, D] views as for `fwd_params`);
    o: bf16 [B, Hq, Lq, dv]; descales: contiguous fp32 CUDA tensors of shape () per tensor, (B, Hkv) per head,
    (B, Hq, ceil(Lq / tile_q)) / (B, Hkv, ceil(Lk / tile_k)) per tile; ``format`` "e4m3fn" or "e5m2",
    ``granularity`` "per_tensor", "per_head" or "per_tile". ``v_layout="kmajor"``: v8 is `pack_vt`'s output,
    [B, Hkv, dv, vt_keys] with unit stride along the keys (attn_params.h ATTN_FP8_V_KMAJOR), packed with the same
    ``seqlens_k``. ``fwd_kwargs``: `fwd_params` keywords.
    """
    if v_layout not in FP8_V_LAYOUT_CODES:
        raise KernelError("fp8_fwd_params", 2, f"v_layout={v_layout!r}: one of {sorted(FP8_V_LAYOUT_CODES)}")
    if format not in FP8_FORMAT_CODES:
        raise KernelError("fp8_fwd_params", 2, f"format={format!r}: one of {sorted(FP8_FORMAT_CODES)}")
    if granularity not in FP8_GRANULARITY_CODES:
        raise KernelError("fp8_fwd_params", 2, f"granularity={granularity!r}: one of {sorted(FP8_GRANULARITY_CODES)}")
    for name, t in (("q8", q8), ("k8", k8), ("v8", v8)):
        if str(t.dtype) != f"torch.float8_{format}":
            raise KernelError("fp8_fwd_params", 2, f"{name}.dtype={t.dtype}: must be torch.float8_{format} "
                                                   f"(format={format!r})")
    B, Hq, Lq, _ = q8.shape
    Hkv, Lk = k8.shape[1], k8.shape[2]
    shapes = {"per_tensor": ((), (), ()), "per_head": ((B, Hkv),) * 3,
              "per_tile": ((B, Hq, -(-Lq // tile_q)),) + ((B, Hkv, -(-Lk // tile_k)),) * 2}[granularity]
    for name, t, shape in zip(("q_descale", "k_descale", "v_descale"), (q_descale, k_descale, v_descale), shapes):
        _check_vector("fp8_fwd_params", name, t, shape)
        if t is None:
            raise KernelError("fp8_fwd_params", 2, f"{name} is None: an fp32 tensor of shape {shape} is needed")
    vt_keys = 0
    if v_layout == "kmajor":
        d = k8.shape[3]
        if v8.dim() != 4 or tuple(v8.shape[:3]) != (B, Hkv, d) or v8.stride(3) != 1 or v8.shape[3] % 16 \
                or v8.shape[3] < Lk:
            raise KernelError("fp8_fwd_params", 2, f"v8 shape {tuple(v8.shape)} stride {tuple(v8.stride())}: "
                                                   f"v_layout='kmajor' needs [B={B}, Hkv={Hkv}, dv={d}, vt_keys] with "
                                                   f"vt_keys a multiple of 16 >= Lk={Lk} and unit key stride "
                                                   "(pack_vt's output)")
        vt_keys = int(v8.shape[3])
    p = AttnFp8FwdParams()
    fwd = fwd_params(q8, k8, k8 if v_layout == "kmajor" else v8, o, lse, **fwd_kwargs)
    if v_layout == "kmajor" and vt_keys > 0:  # no keys: nothing reads V (k8's strides stand in for the checks)
        fwd.v = _ptr(v8)
        fwd.v_batch_stride, fwd.v_head_stride, fwd.v_row_stride = v8.stride(0), v8.stride(1), v8.stride(2)
        fwd._keep.append(v8)
    p.fwd = fwd
    p.v_layout, p.vt_keys = FP8_V_LAYOUT_CODES[v_layout], vt_keys
    p.format, p.granularity = FP8_FORMAT_CODES[format], FP8_GRANULARITY_CODES[granularity]
    p.q_descale, p.k_descale, p.v_descale = _ptr(q_descale), _ptr(k_descale), _ptr(v_descale)
    p.tile_q, p.tile_k = int(tile_q), int(tile_k)
    p._keep = list(fwd._keep) + [q_descale, k_descale, v_descale]
    return p


def fp8_key_tile(params: AttnFp8FwdParams) -> int:
    """Keys per online-softmax block of the ``attn_fa3_fp8_fwd`` build that runs ``params``
    (``attn_fa3_fp8_key_tile``; the variant of ``$ATTN_FA3_FP8_VARIANT`` included): the tile P is rounded against."""
    lib = library()
    fn = getattr(lib, "attn_fa3_fp8_key_tile", None)
    if fn is None:
        raise LibraryUnavailable(f"{library_path()} does not export attn_fa3_fp8_key_tile")
    out, err = ctypes.c_int(0), ctypes.create_string_buffer(512)
    rc = fn(ctypes.byref(params), ctypes.byref(out), err, len(err))
    if rc != 0:
        raise (KernelUnsupported if rc == 1 else KernelError)("attn_fa3_fp8_key_tile", rc,
                                                              err.value.decode(errors="replace"))
    return out.value


def _vt_keys(seqlen: int, vt_keys: int | None) -> int:
    """Positions per k-major V row: ``vt_keys``, or by default ``seqlen`` rounded up to a 16-key group."""
    return -(-seqlen // 16) * 16 if vt_keys is None else int(vt_keys)


def pack_vt(v8: Any, *, seqlens_k: Any = None, vt_keys: int | None = None, stream: int | None = None) -> Any:
    """V's FP8 codes k-major for ``fp8_fwd_params(..., v_layout="kmajor")`` through ``attn_fp8_pack_vt``.

    v8: FP8 CUDA tensor [B, Hkv, Lk, dv] (any strides with unit stride along dv); seqlens_k: the int32 [B] tensor the
    forward gets (keys at or past a sequence's length become zero codes); vt_keys: positions per row (default Lk
    rounded up to 16). Returns a new tensor [B, Hkv, dv, vt_keys] of v8's dtype (`pack_vt_reference`'s layout).
    """
    import torch

    if not _is_fp8(v8) or v8.dim() != 4 or (v8.numel() > 0 and v8.shape[3] > 1 and v8.stride(3) != 1):
        raise KernelError("pack_vt", 2, f"v8: dtype {getattr(v8, 'dtype', None)}, shape {tuple(v8.shape)}: an FP8 "
                                        "tensor [B, Hkv, Lk, dv] with unit stride along dv is needed")
    B, H, L, d = v8.shape
    keys = _vt_keys(L, vt_keys)
    vt = torch.empty((B, H, d, keys), dtype=v8.dtype, device=v8.device)
    p = AttnFp8PackVtParams()
    p.v, p.vt = _ptr(v8), _ptr(vt)
    p.v_batch_stride, p.v_head_stride, p.v_row_stride = v8.stride(0), v8.stride(1), v8.stride(2)
    p.vt_batch_stride, p.vt_head_stride, p.vt_row_stride = vt.stride(0), vt.stride(1), vt.stride(2)
    p.seqlens_k = _ptr(seqlens_k)
    p.batch, p.heads, p.seqlen, p.head_dim, p.vt_keys = B, H, L, d, keys
    call("attn_fp8_pack_vt", p, stream)
    return vt


def pack_vt_reference(v: Any, seqlens_k: Any = None, vt_keys: int | None = None) -> Any:
    """`pack_vt`'s layout in NumPy: v [B, H, L, d] -> [B, H, d, vt_keys], position 16 g + p holding key
    16 g + VT_KEY_ORDER[p], zero at and past each sequence's length."""
    import numpy as np

    v = np.asarray(v)
    B, H, L, d = v.shape
    keys = _vt_keys(L, vt_keys)
    src = np.zeros((B, H, keys, d), dtype=v.dtype)
    src[:, :, :L] = v
    if seqlens_k is not None:
        for b in range(B):
            src[b, :, int(seqlens_k[b]):] = 0
    order = (np.arange(keys) // 16) * 16 + np.asarray(VT_KEY_ORDER)[np.arange(keys) % 16]
    return np.ascontiguousarray(src[:, :, order].transpose(0, 1, 3, 2))


def _check_vector(who: str, name: str, t: Any, shape: tuple[int, ...]) -> None:
    """A contiguous fp32 tensor of exactly ``shape`` (or None); else `KernelError` naming it and its shape."""
    if t is None:
        return
    import torch

    if t.dtype != torch.float32 or tuple(t.shape) != shape or not t.is_contiguous():
        raise KernelError(who, 2, f"{name}: dtype {t.dtype}, shape {tuple(t.shape)}, stride {tuple(t.stride())}: "
                                  f"must be a contiguous float32 tensor of shape {shape}")


def _check_paged(k: Any, v: Any, block_table: Any, page_size: int, seqlen_k: int | None, batch: int) -> int:
    """Shape checks of paged K/V for `fwd_params`; returns the logical key length Lk."""
    import torch

    def bad(msg: str) -> KernelError:
        return KernelError("fwd_params", 2, msg)

    if block_table.dtype != torch.int32 or block_table.dim() != 2:
        raise bad(f"block_table: dtype {block_table.dtype}, shape {tuple(block_table.shape)}: must be int32 "
                  "[B, pages_per_seq]")
    if block_table.shape[0] != batch or (block_table.shape[1] > 1 and block_table.stride(1) != 1):
        raise bad(f"block_table shape {tuple(block_table.shape)} stride {tuple(block_table.stride())}: needs "
                  f"B={batch} rows with a contiguous last dimension")
    if page_size <= 0:
        raise bad(f"page_size={page_size}: must be > 0 with block_table")
    for name, pool in (("k", k), ("v", v)):
        if pool.dim() != 4 or pool.shape[2] != page_size:
            raise bad(f"{name} pool shape {tuple(pool.shape)}: must be [num_pages, Hkv, page_size={page_size}, d]")
    if k.shape[:3] != v.shape[:3]:
        raise bad(f"k pool {tuple(k.shape)} and v pool {tuple(v.shape)} differ in [num_pages, Hkv, page_size]")
    if seqlen_k is None:
        raise bad("seqlen_k: the logical key length Lk must be given with block_table (the pools do not carry it)")
    capacity = block_table.shape[1] * page_size
    if not 0 <= int(seqlen_k) <= capacity:
        raise bad(f"seqlen_k={seqlen_k}: must be in [0, pages_per_seq * page_size = "
                  f"{block_table.shape[1]} * {page_size} = {capacity}]")
    return int(seqlen_k)


def bwd_params(
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    lse: Any,
    dout: Any,
    dq: Any,
    dk: Any,
    dv: Any,
    *,
    dq_accum: Any = None,
    d_rowsum: Any = None,
    dk_accum: Any = None,
    dv_accum: Any = None,
    dlse: Any = None,
    dsinks: Any = None,
    **fwd_kwargs: Any,
) -> AttnBwdParams:
    """Fill `AttnBwdParams`: the forward's fields (`fwd_params` keywords) plus dO, dQ, dK, dV and scratch.

    dq [B,Hq,Lq,d], dk [B,Hkv,Lk,d], dv [B,Hkv,Lk,dv] (written); scratch buffers as the header
    describes (fp32; the launchers initialise them, so torch.empty is enough), or None for kernels that do not use them.
    v4 (``attn_fa2_bwd`` only): ``dlse`` the LSE cotangent, contiguous fp32 [B, Hq, Lq] (the lse's layout), and
    ``dsinks`` the fp32 [Hq] output written when ``sinks=`` is given (SEMANTICS.md §18).
    """
    p = AttnBwdParams()
    fwd = fwd_params(q, k, v, o, lse, **fwd_kwargs)
    p.fwd = fwd  # ctypes copies the struct; the Python attribute _keep stays on `fwd`
    keep = list(fwd._keep)
    p.dout, p.dq, p.dk, p.dv = _ptr(dout), _ptr(dq), _ptr(dk), _ptr(dv)
    p.do_batch_stride, p.do_head_stride, p.do_row_stride = dout.stride(0), dout.stride(1), dout.stride(2)
    p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride = dq.stride(0), dq.stride(1), dq.stride(2)
    p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride = dk.stride(0), dk.stride(1), dk.stride(2)
    p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride = dv.stride(0), dv.stride(1), dv.stride(2)
    p.dq_accum, p.d_rowsum = _ptr(dq_accum), _ptr(d_rowsum)
    p.dk_accum, p.dv_accum = _ptr(dk_accum), _ptr(dv_accum)
    B, Hq, Lq = q.shape[0], q.shape[1], q.shape[2]
    _check_vector("bwd_params", "dsinks", dsinks, (Hq,))
    if dlse is not None:
        _check_vector("bwd_params", "dlse", dlse, (B, Hq, Lq))
        if lse is None or tuple(lse.stride()) != tuple(dlse.stride()):
            raise KernelError("bwd_params", 2, f"dlse stride {tuple(dlse.stride())}: must equal the lse's "
                                               f"({None if lse is None else tuple(lse.stride())}), the kernel "
                                               "addresses both with the lse strides")
    p.dlse, p.dsinks = _ptr(dlse), _ptr(dsinks)
    p._keep = keep + [dout, dq, dk, dv, dq_accum, d_rowsum, dk_accum, dv_accum, dlse, dsinks]
    return p


def _current_stream() -> int:
    try:
        import torch

        return torch.cuda.current_stream().cuda_stream
    except Exception:  # no torch / no CUDA: the default stream
        return 0


def call(name: str, params: AttnFwdParams | AttnBwdParams | AttnFp8FwdParams | AttnFp8PackVtParams,
         stream: int | None = None, lib: ctypes.CDLL | None = None) -> None:
    """Run launcher ``name`` (e.g. "attn_fa2_fwd") on ``params`` on ``stream`` (default: torch's current), from
    ``lib`` (an `open_library` handle; default: `library`).

    Raises `KernelUnsupported` / `KernelError` with the kernel's message on a non-zero status, and
    `LibraryUnavailable` when the library or the launcher is missing.
    """
    _invoke(name, params, (), stream, lib)


def _invoke(name: str, params: Any, flags: tuple[int, ...], stream: int | None, lib: ctypes.CDLL | None) -> None:
    """``name(&params, *flags, stream, err, errlen)`` from `lib` (default: `library`), raising as `call` says."""
    where = library_path() if lib is None else lib
    lib = library() if lib is None else lib
    fn = getattr(lib, name, None)
    if fn is None:
        raise LibraryUnavailable(f"{where} does not export {name}")
    err = ctypes.create_string_buffer(512)
    s = _current_stream() if stream is None else stream
    rc = fn(ctypes.byref(params), *flags, ctypes.c_void_p(s), err, len(err))
    if rc != 0:
        msg = err.value.decode(errors="replace") or "(no message)"
        cls = KernelUnsupported if rc == 1 else KernelError
        raise cls(name, rc, msg)


def splitkv_num_splits(params: AttnFwdParams, num_sms: int = 0) -> int:
    """How many splits `attn_splitkv_fwd` uses for ``params`` (to size o_partial / lse_partial)."""
    n = library().attn_splitkv_num_splits(ctypes.byref(params), int(num_sms))
    if n < 1:
        raise KernelError("attn_splitkv_num_splits", 2, "invalid parameters")
    return n


@contextlib.contextmanager
def build_setting(name: str, value: str | None):
    """Within the block the launchers that read environment variable ``name`` at every call (which build runs:
    ATTN_FA3_BWD_DQ, ATTN_FA3_BWD_OVERLAP, ATTN_FA3_FP8_VARIANT; a launch setting: ATTN_FA3_FWD_L2_MB, the forward's
    L2 budget per section of heads; kernels/cuda/*.cu) see ``value`` (None: unset); the previous value comes back
    afterwards."""
    old = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if old is not None:
            os.environ[name] = old


def call_fa3_variant(params: AttnFwdParams, variant: str, stream: int | None = None,
                     lib: ctypes.CDLL | None = None) -> None:
    """Run the FA3 forward build named ``variant`` (a key of `FA3_VARIANTS`) through ``attn_fa3_fwd_variant`` of
    ``lib`` (an `open_library` handle; default: `library`).

    Raises like `call`; an unknown variant name raises `KernelError` naming the known ones.
    """
    if variant not in FA3_VARIANTS:
        raise KernelError("attn_fa3_fwd_variant", 2, f"variant={variant!r}: one of {sorted(FA3_VARIANTS)}")
    _invoke("attn_fa3_fwd_variant", params, (FA3_VARIANTS[variant],), stream, lib)
