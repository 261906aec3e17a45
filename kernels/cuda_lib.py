"""ctypes loader for libattn_kernels.so, builders of its parameter structs from torch tensors, and the call path.

The library exposes a plain C ABI (kernels/cuda/include/attn_params.h): launchers take a pointer to
`AttnFwdParams` / `AttnBwdParams` (device pointers, element strides, shapes, mask settings), an `AttnLaunch`
(the stream and a workspace the caller may preallocate) and an error buffer. Nothing of torch's C++ ABI crosses,
so one build serves every torch version; torch CUDA tensors only carry the data (``data_ptr()`` and ``stride()``).

- `library()` finds the library: ``$ATTN_KERNELS_LIB``, else build/kernels/libattn_kernels.so,
  building it on demand when nvcc exists (`kernels.build`), and refuses a build of another ABI version;
- `AttnFwdParams` / `AttnBwdParams` / `AttnLaunch` mirror the C structs field by field (tests compare the layout
  against the compiled one through ``attn_params_layout``);
- `fwd_params(...)` / `bwd_params(...)` fill them from tensors in the [B, H, L, D] convention (or,
  for paged K/V, from page pools and an int32 block table: ``block_table=``, ``page_size=``);
- `bind(name, params)` prepares a launcher for repeated calls (`KernelCall`), `call(name, params)` runs it once;
  both raise `KernelError` (`KernelUnsupported` for ATTN_ERR_UNSUPPORTED) carrying the kernel's own message;
- `AttnFp8FwdParams` / `fp8_fwd_params(...)`: the FP8 forward's struct (attn_params.h, its own version
  ``ATTN_FP8_PARAMS_VERSION``) around an `AttnFwdParams`, for ``attn_fa3_fp8_fwd`` (SEMANTICS.md §10);
  `pack_vt` writes V's codes k-major (``attn_fp8_pack_vt``) for ``v_layout="kmajor"``, `pack_vt_reference` is the
  same layout in NumPy.

The call path. A call's host time counts in every training step that launches it, and a CUDA graph can only
capture a call that does stream-ordered work alone. Two designs were weighed: a ``torch.library`` custom op, which
would also serve torch.compile, and a cached ctypes path. The custom op goes through torch's dispatcher on every
call (and, registered from Python, through a Python kernel), which costs more host time than the launch it wraps,
and it would tie the library to torch's C++ ABI or to a per-torch-version registration; the cached ctypes path costs
one foreign call and keeps the plain C ABI. So: `bind` resolves the launcher and its signature once, sizes and
allocates the launch's workspace once (``attn_<launcher>_workspace``: the persistent builds' tile counter, the
deterministic backward's semaphores, ...), and keeps the filled params struct and its error buffer; each
`KernelCall` call then looks up torch's current stream (one cheap lookup, needed because a graph capture or a
``torch.cuda.stream`` block changes it) and makes one ctypes call. No environment variable is read on that path
(what runs is the parameters'), nothing is allocated, nothing synchronises, so the call is captured by
``torch.cuda.graph`` and replays. `KernelCall.update` re-points the struct at new tensors of the same shape,
strides and dtype without refilling it. The library caches the rest on its side (device properties, the kernels'
shared-memory opt-in: launch_common.cuh). A torch.compile path can wrap a `KernelCall` in a custom op later.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from collections.abc import Callable
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
    "AttnLaunch",
    "KernelCall",
    "KernelError",
    "KernelUnsupported",
    "LibraryUnavailable",
    "VT_KEY_ORDER",
    "bind",
    "bwd_params",
    "call",
    "compiled_fp8_layout",
    "compiled_layout",
    "current_stream",
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
    "workspace_bytes",
]

ATTN_PARAMS_VERSION = 5
ATTN_FP16, ATTN_BF16 = 0, 1
STATUS = {0: "ATTN_OK", 1: "ATTN_ERR_UNSUPPORTED", 2: "ATTN_ERR_INVALID", 3: "ATTN_ERR_CUDA"}
#: every launcher of the shipped library (attn_params.h, attn_quant.h): (params, launch, err, errlen) -> status
LAUNCHERS = ("attn_fa1_fwd", "attn_fa1_bwd", "attn_fa2_fwd", "attn_fa2_bwd", "attn_splitkv_fwd", "attn_fa3_fwd",
             "attn_fa3_fp8_fwd", "attn_fp8_pack_vt", "attn_fa3_bwd", "attn_fa3_bwd_deterministic", "attn_hadamard",
             "attn_fp8_quantize")
ATTN_FP8_PARAMS_VERSION = 2
#: attn_params.h AttnFp8Format / AttnFp8Granularity, keyed by the oracle's names (oracles/fp8.py)
FP8_FORMAT_CODES = {"e4m3fn": 0, "e5m2": 1}
FP8_GRANULARITY_CODES = {"per_tensor": 0, "per_head": 1, "per_tile": 2}
#: attn_params.h AttnFp8VLayout: V's codes as rows (the kernel transposes them) or k-major (`pack_vt`)
FP8_V_LAYOUT_CODES = {"rows": 0, "kmajor": 1}
#: attn_params.h ATTN_FP8_VT_KEY: position p of every 16-key group of a k-major V row holds key VT_KEY_ORDER[p]
VT_KEY_ORDER = tuple(2 * (p >> 2) + (p & 1) + 8 * ((p >> 1) & 1) for p in range(16))

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


class AttnLaunch(ctypes.Structure):
    """Mirror of ``AttnLaunch`` in attn_params.h (v5): the stream and the caller's workspace of one launch."""

    _fields_ = [("stream", _vp), ("workspace", _vp), ("workspace_bytes", _i64)]


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
            lib = open_library(path)
        except OSError as e:
            _lib_error = f"loading {path} failed: {e}"
            raise LibraryUnavailable(_lib_error) from None
        _lib_error = _version_mismatch(lib, path)
        if _lib_error is not None:
            raise LibraryUnavailable(_lib_error)
        _lib = lib
        return _lib


def _version_mismatch(lib: ctypes.CDLL, path: Path) -> str | None:
    """Why ``lib`` cannot be driven by this module (a build of another ABI version), or None."""
    fn = getattr(lib, "attn_params_layout", None)
    if fn is None:
        return f"{path} does not export attn_params_layout (not a libattn_kernels build)"
    buf = (_i64 * 1)()
    built = buf[0] if fn(buf, 1) == 1 else None
    if built != ATTN_PARAMS_VERSION:
        return (f"{path} was built with attn_params.h ABI v{built}; this package drives v{ATTN_PARAMS_VERSION} "
                f"(rebuild: python -m attention_conformance.kernels.build --force)")
    return None


def open_library(path: str | Path) -> ctypes.CDLL:
    """A build of the library at ``path`` with every export's signature declared: `library` loads the configured one
    through it; a benchmark comparing builds (different paths) in one process opens each, so same-named symbols of
    different builds stay apart, and passes it to `call` / `bind`. Raises OSError when the file does not load."""
    lib = ctypes.CDLL(str(path))
    declare(lib, LAUNCHERS)
    if hasattr(lib, "attn_splitkv_num_splits"):
        lib.attn_splitkv_num_splits.restype = ctypes.c_int
        lib.attn_splitkv_num_splits.argtypes = [_vp, ctypes.c_int]
    if hasattr(lib, "attn_fa3_fp8_key_tile"):
        lib.attn_fa3_fp8_key_tile.restype = ctypes.c_int
        lib.attn_fa3_fp8_key_tile.argtypes = [_vp, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int]
    for name in ("attn_params_layout", "attn_fp8_params_layout", "attn_quant_params_layout"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.POINTER(_i64), ctypes.c_int]
    return lib


def declare(lib: ctypes.CDLL, launchers: tuple[str, ...], extra: tuple[Any, ...] = ()) -> None:
    """Declare the signature of each launcher of ``launchers`` that ``lib`` exports, ``(params, *extra, launch, err,
    errlen) -> int``, and of its ``<launcher>_workspace(params, *extra) -> int64`` where it has one (attn_params.h)."""
    for name in launchers:
        fn = getattr(lib, name, None)
        if fn is not None:  # the error buffer as a plain address: a bound call passes addresses only (cheapest)
            fn.restype = ctypes.c_int
            fn.argtypes = [_vp, *extra, _vp, _vp, ctypes.c_int]
        ws = getattr(lib, name + "_workspace", None)
        if ws is not None:
            ws.restype = _i64
            ws.argtypes = [_vp, *extra]


def mirror_layout() -> list[int]:
    """The ctypes mirror's layout in `compiled_layout`'s format."""
    out = [ATTN_PARAMS_VERSION, ctypes.sizeof(AttnFwdParams), ctypes.sizeof(AttnBwdParams)]
    out += [getattr(AttnFwdParams, n).offset for n, _ in AttnFwdParams._fields_]
    out += [getattr(AttnBwdParams, n).offset for n, _ in AttnBwdParams._fields_]
    out += [ctypes.sizeof(AttnLaunch)] + [getattr(AttnLaunch, n).offset for n, _ in AttnLaunch._fields_]
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
    p._tensors = {"q": q, "k": k, "v": v, "o": o, "lse": lse}  # what KernelCall.update may re-point
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
        fwd._tensors["v"] = v8
    p.fwd = fwd
    p.v_layout, p.vt_keys = FP8_V_LAYOUT_CODES[v_layout], vt_keys
    p.format, p.granularity = FP8_FORMAT_CODES[format], FP8_GRANULARITY_CODES[granularity]
    p.q_descale, p.k_descale, p.v_descale = _ptr(q_descale), _ptr(k_descale), _ptr(v_descale)
    p.tile_q, p.tile_k = int(tile_q), int(tile_k)
    p._keep = list(fwd._keep) + [q_descale, k_descale, v_descale]
    p._tensors = fwd._tensors
    return p


def fp8_key_tile(params: AttnFp8FwdParams) -> int:
    """Keys per online-softmax block of the ``attn_fa3_fp8_fwd`` build that runs ``params``
    (``attn_fa3_fp8_key_tile``): the tile P is rounded against."""
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
    p._tensors = {**fwd._tensors, "dout": dout, "dq": dq, "dk": dk, "dv": dv}
    return p


def _stream_lookup() -> Callable[[int], int]:
    """The cheapest way this torch offers to read the current stream's handle of a device (a raw lookup where torch
    has one, else ``torch.cuda.current_stream``), or one that answers 0 (the legacy default stream) without torch."""
    try:
        import torch
    except ImportError:
        return lambda device: 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


_current_raw_stream: Callable[[int], int] | None = None


def current_stream(device: int | None = None) -> int:
    """The handle of torch's current CUDA stream on ``device`` (default: the current device), 0 without CUDA."""
    global _current_raw_stream
    if _current_raw_stream is None:
        _current_raw_stream = _stream_lookup()
    try:
        if device is None:
            import torch

            device = torch.cuda.current_device()
        return int(_current_raw_stream(device))
    except Exception:  # no torch / no CUDA: the default stream
        return 0


def _raise(name: str, rc: int, err: Any) -> None:
    msg = err.value.decode(errors="replace") or "(no message)"
    raise (KernelUnsupported if rc == 1 else KernelError)(name, rc, msg)


def _launcher(lib: ctypes.CDLL | None, name: str) -> tuple[ctypes.CDLL, Any]:
    where = library_path() if lib is None else lib
    lib = library() if lib is None else lib
    fn = getattr(lib, name, None)
    if fn is None:
        raise LibraryUnavailable(f"{where} does not export {name}")
    return lib, fn


def workspace_bytes(name: str, params: Any, *, lib: ctypes.CDLL | None = None, args: tuple[Any, ...] = ()) -> int:
    """The workspace launcher ``name`` needs for ``params`` (``attn_<name>_workspace``; 0 for a launcher without one,
    and for parameters it would reject: the launch then answers with its own message)."""
    lib, _ = _launcher(lib, name)
    fn = getattr(lib, name + "_workspace", None)
    return max(0, int(fn(ctypes.byref(params), *args))) if fn is not None else 0


def _device_of(params: Any) -> int | None:
    """The CUDA device of the tensors a params struct points into (`fwd_params` and friends keep them)."""
    for t in getattr(params, "_keep", ()):
        dev = getattr(t, "device", None)
        if dev is not None and dev.type == "cuda":
            return dev.index
    return None


class KernelCall:
    """Launcher ``name`` bound to one filled params struct, for calls that must cost little host time and that a CUDA
    graph can capture (see the module doc). Made by `bind`; ``kc()`` runs the launcher once.

    Everything that does not change between calls is done here once: the launcher and its signature resolved, the
    workspace sized (``attn_<name>_workspace``) and allocated as a torch tensor on the params' device (or the
    caller's ``workspace``), the `AttnLaunch` struct and the error buffer made. A call then sets the launch's stream
    (``stream``, or torch's current stream of the device at the time of the call) and makes one foreign call.
    """

    __slots__ = ("name", "params", "workspace", "_fn", "_params_at", "_launch", "_launch_at", "_err", "_err_at",
                 "_errlen", "_args", "_stream", "_device", "_stream_of")

    def __init__(self, name: str, params: Any, *, lib: ctypes.CDLL | None = None, stream: int | None = None,
                 workspace: Any = None, args: tuple[Any, ...] = (), workspace_args: tuple[Any, ...] | None = None):
        lib, self._fn = _launcher(lib, name)
        self.name, self.params = name, params
        # the structs live as long as this object (params and _launch are held), so their addresses stay valid
        self._params_at = ctypes.addressof(params)
        self._args = tuple(args)
        self._device = _device_of(params)
        self._launch = AttnLaunch()
        self._launch_at = ctypes.addressof(self._launch)
        self._err = ctypes.create_string_buffer(512)
        self._err_at = ctypes.addressof(self._err)
        self._errlen = len(self._err)
        self._stream = stream
        global _current_raw_stream
        if _current_raw_stream is None:
            _current_raw_stream = _stream_lookup()
        self._stream_of = _current_raw_stream
        need = workspace_bytes(name, params, lib=lib, args=self._args if workspace_args is None else workspace_args)
        if workspace is None and need > 0:
            import torch

            workspace = torch.empty(need, dtype=torch.uint8, device=torch.device("cuda", self._device or 0))
        self.workspace = workspace
        if workspace is not None:
            size = workspace.numel() * workspace.element_size()
            if size < need:
                raise KernelError(name, 2, f"workspace of {size} bytes: this launch needs {need} "
                                           f"({name}_workspace)")
            self._launch.workspace, self._launch.workspace_bytes = workspace.data_ptr(), size

    def __call__(self) -> None:
        stream = self._stream
        self._launch.stream = self._stream_of(self._device or 0) if stream is None else stream
        rc = self._fn(self._params_at, *self._args, self._launch_at, self._err_at, self._errlen)
        if rc:
            _raise(self.name, rc, self._err)

    def update(self, **tensors: Any) -> None:
        """Point the bound struct at other tensors of the same shape, strides and dtype as the ones they replace
        (q, k, v, o, lse; dout, dq, dk, dv of a backward; by `fwd_params` / `bwd_params` names): no refill, no
        allocation. KernelError naming the tensor otherwise."""
        held = getattr(self.params, "_tensors", None)
        if held is None:
            raise KernelError(self.name, 2, "update: the params struct was not filled by fwd_params / bwd_params")
        for key, t in tensors.items():
            old = held.get(key)
            if old is None:
                names = sorted(k for k, v in held.items() if v is not None)
                raise KernelError(self.name, 2, f"update: {key}: one of {names}")
            if tuple(t.shape) != tuple(old.shape) or tuple(t.stride()) != tuple(old.stride()) or t.dtype != old.dtype \
                    or t.device != old.device:
                raise KernelError(self.name, 2, f"update: {key}: shape {tuple(t.shape)} stride {tuple(t.stride())} "
                                                f"{t.dtype} on {t.device}; bound: shape {tuple(old.shape)} stride "
                                                f"{tuple(old.stride())} {old.dtype} on {old.device}")
        keep = self.params._keep
        for key, t in tensors.items():
            struct, field = _field_of(self.params, key)
            setattr(struct, field, t.data_ptr())
            old, held[key] = held[key], t
            keep[:] = [t if x is old else x for x in keep]


def _field_of(params: Any, key: str) -> tuple[Any, str]:
    """(struct, field) of tensor ``key`` in a params struct: the forward's tensors live in ``fwd`` of a backward's."""
    if key in ("q", "k", "v", "o", "lse") and isinstance(params, (AttnBwdParams, AttnFp8FwdParams)):
        return params.fwd, key
    return params, key


def bind(name: str, params: Any, *, lib: ctypes.CDLL | None = None, stream: int | None = None,
         workspace: Any = None) -> KernelCall:
    """`KernelCall` of launcher ``name`` (e.g. "attn_fa3_fwd") on ``params`` from ``lib`` (default: `library`):
    run it with ``kc()`` as often as needed; ``stream`` fixes the stream (default: torch's current one at each call),
    ``workspace`` gives the workspace (default: allocated here when the launcher needs one)."""
    return KernelCall(name, params, lib=lib, stream=stream, workspace=workspace)


def call(name: str, params: AttnFwdParams | AttnBwdParams | AttnFp8FwdParams | AttnFp8PackVtParams,
         stream: int | None = None, lib: ctypes.CDLL | None = None, workspace: Any = None) -> None:
    """Run launcher ``name`` (e.g. "attn_fa2_fwd") on ``params`` once, on ``stream`` (default: torch's current), from
    ``lib`` (an `open_library` handle; default: `library`). Without ``workspace`` (a device tensor of at least
    `workspace_bytes`) a launcher that needs scratch allocates it stream-ordered itself; calls made many times, or
    captured in a CUDA graph, go through `bind`.

    Raises `KernelUnsupported` / `KernelError` with the kernel's message on a non-zero status, and
    `LibraryUnavailable` when the library or the launcher is missing.
    """
    _, fn = _launcher(lib, name)
    launch = AttnLaunch()
    launch.stream = current_stream(_device_of(params)) if stream is None else stream
    if workspace is not None:
        launch.workspace, launch.workspace_bytes = workspace.data_ptr(), workspace.numel() * workspace.element_size()
    err = ctypes.create_string_buffer(512)
    rc = fn(ctypes.byref(params), ctypes.byref(launch), err, len(err))
    if rc != 0:
        _raise(name, rc, err)


def splitkv_num_splits(params: AttnFwdParams, num_sms: int = 0) -> int:
    """How many splits `attn_splitkv_fwd` uses for ``params`` (to size o_partial / lse_partial)."""
    n = library().attn_splitkv_num_splits(ctypes.byref(params), int(num_sms))
    if n < 1:
        raise KernelError("attn_splitkv_num_splits", 2, "invalid parameters")
    return n
