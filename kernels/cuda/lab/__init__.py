"""The lab build of the attention kernels: ablation, tuning and timing builds, chosen by name.

libattn_kernels_lab.so (``python -m attention_conformance.kernels.build --lab``; C ABI: attn_lab.h beside this file)
holds the builds the design records measure against the shipped ones: FA3 forward variants (``"two_wg"``,
``"no_pingpong"``, ``"persistent"``, timing probes ``"probe_no_exp"`` ...), FP8 forward variants, FA3 backward
variants, FA2 backward tile shapes. Each is chosen by a launcher argument, never by the environment; the parameter
structs are the shipped library's (`kernels.cuda_lib`), so one filled struct runs in both. This folder lives in a
checkout: the installed package has neither these sources nor this module, and the shipped library none of these
builds.

- `library(path=None)`: the lab build (default: next to the shipped library, build/kernels/libattn_kernels_lab.so),
  refused when it was built against another ABI (`cuda_lib.ATTN_PARAMS_VERSION`, `LAB_VERSION`);
- `call_fa3_fwd(params, variant, l2_budget_mb=0)`, `call_fp8_fwd(params, variant)`, `fp8_key_tile(params, variant)`,
  `call_fa3_bwd(params, variant, deterministic=False)`, `call_fa2_bwd(params, variant)`: one call each;
- `bind_fa3_fwd(...)` and friends: a `cuda_lib.KernelCall` for timed or graph-captured calls.

Variant names are the keys of `FA3_FWD_VARIANTS`, `FP8_VARIANTS`, `FA3_BWD_VARIANTS`, `FA2_BWD_VARIANTS`; an unknown
name is a `cuda_lib.KernelError` naming the known ones, a variant a head dim or layout has no build for is
`cuda_lib.KernelUnsupported` with the launcher's reason.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

from attention_conformance.kernels import cuda_lib
from attention_conformance.kernels.build import DEFAULT_OUT, LAB_LIB_NAME

__all__ = [
    "FA2_BWD_VARIANTS",
    "FA3_BWD_VARIANTS",
    "FA3_FWD_EXACT_VARIANTS",
    "FA3_FWD_VARIANTS",
    "FP8_KMAJOR_VARIANTS",
    "FP8_ROWS_VARIANTS",
    "FP8_VARIANTS",
    "LAB_VERSION",
    "bind_fa3_fwd",
    "bind_fp8_fwd",
    "call_fa2_bwd",
    "call_fa3_bwd",
    "call_fa3_fwd",
    "call_fp8_fwd",
    "fa3_bwd_wide_variants",
    "fp8_key_tile",
    "library",
    "library_path",
]

#: attn_lab.h ATTN_LAB_VERSION
LAB_VERSION = 8
#: attn_lab.h AttnLabFa3FwdVariant, by name ("default": the shipped build of each head dim)
FA3_FWD_VARIANTS = {"default": 0, "no_pingpong": 1, "no_overlap": 2, "persistent": 3, "no_ws": 4, "stage1": 5,
                    "n176": 6, "stages2": 7, "d64_two_wg": 8, "one_cta_per_tile": 9, "lazy_rescale_one_cta": 10,
                    "probe_no_exp": 11, "probe_no_pv": 12, "probe_no_softmax": 13, "smem_q": 14, "two_wg": 15,
                    "cluster2": 16, "eager_rescale": 17, "d96_whole_blocks": 18, "d96_n80": 19, "d96_n96": 20,
                    "d192_pingpong": 21, "d192_n96": 22, "d192_n80": 23, "d192_eager_rescale": 24}
#: the FA3 forward variants that compute attention (the probes leave a stage out: timing only)
FA3_FWD_EXACT_VARIANTS = tuple(v for v in FA3_FWD_VARIANTS if not v.startswith("probe_"))
#: attn_lab.h AttnLabFp8Variant, by name
FP8_VARIANTS = {"default": 0, "no_transpose": 1, "no_exp": 2, "no_pv": 3, "smem_q": 4, "narrow_transpose": 5,
                "no_fold": 6, "row_tiles": 7, "two_wg": 8, "exp_poly4": 9, "exp_poly2": 10, "persistent": 11,
                "one_cta_per_tile": 12}
#: the FP8 variants of each V layout (cuda_lib.FP8_V_LAYOUT_CODES); "default" runs with either
FP8_ROWS_VARIANTS = ("no_transpose", "no_exp", "no_pv", "smem_q", "narrow_transpose", "no_fold")
FP8_KMAJOR_VARIANTS = ("row_tiles", "two_wg", "exp_poly4", "exp_poly2", "persistent", "one_cta_per_tile")
#: attn_lab.h AttnLabFa3BwdVariant, by name
FA3_BWD_VARIANTS = {"default": 0, "atomic_dq": 1, "atomic_dq_other_overlap": 2, "rows64": 3, "other_dq_split": 4,
                    "wide_dq_float4": 5, "wide_tma_dq_one_do_stage": 6, "direct_dkv": 7, "alternate_dq": 8,
                    "shared_keys64": 9}
#: attn_lab.h AttnLabFa2BwdVariant, by name
FA2_BWD_VARIANTS = {"default": 0, "small": 1, "db": 2, "dbp": 3, "w16": 4, "w16p": 5, "p2": 6, "bc128": 7, "fa2p": 8}


def fa3_bwd_wide_variants(d: int, dv: int) -> tuple[str, ...]:
    """The FA3 backward variants with a build at the wide head dims (d, dv) (d = 192, 256, (192, 128); attn_lab.h):
    every one but wide_tma_dq_one_do_stage at d = dv = 192, whose third dQ block alternates between the consumers;
    shared_keys64 (the 64-key tiling the shipped 96-key one replaced) at d = 192 only."""
    per_consumer = () if (d, dv) == (192, 192) else ("wide_tma_dq_one_do_stage",)
    d192 = ("shared_keys64",) if d == 192 else ()
    return ("default", "atomic_dq", "wide_dq_float4", *per_consumer, *d192)


_i32 = ctypes.c_int32
_lock = threading.Lock()
_libs: dict[Path, ctypes.CDLL] = {}


def library_path() -> Path:
    """Where the lab build is expected: beside the shipped library's default place."""
    return DEFAULT_OUT / LAB_LIB_NAME


def library(path: str | Path | None = None) -> ctypes.CDLL:
    """The lab build at ``path`` (default `library_path`), loaded once, every launcher's signature declared.

    Raises `cuda_lib.LibraryUnavailable` naming the build command when it is missing, and when it was built against
    another ABI than this package drives."""
    path = Path(path) if path is not None else library_path()
    with _lock:
        if path in _libs:
            return _libs[path]
        if not path.is_file():
            raise cuda_lib.LibraryUnavailable(f"{path} does not exist (run `python -m attention_conformance.kernels."
                                              f"build --lab --out {path.parent}` in a checkout)")
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise cuda_lib.LibraryUnavailable(f"loading {path} failed: {e}") from None
        version = getattr(lib, "attn_lab_version", None)
        if version is None:
            raise cuda_lib.LibraryUnavailable(f"{path} does not export attn_lab_version (not a lab build)")
        version.restype, version.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
        params = ctypes.c_int(0)
        lab = version(ctypes.byref(params))
        if (lab, params.value) != (LAB_VERSION, cuda_lib.ATTN_PARAMS_VERSION):
            raise cuda_lib.LibraryUnavailable(
                f"{path} was built as lab ABI v{lab} against attn_params.h v{params.value}; this package drives lab "
                f"v{LAB_VERSION} and params v{cuda_lib.ATTN_PARAMS_VERSION} (rebuild it with --lab --force)")
        cuda_lib.declare(lib, ("attn_lab_fa3_bwd",), (_i32, _i32))
        cuda_lib.declare(lib, ("attn_lab_fa3_fp8_fwd", "attn_lab_fa2_bwd"), (_i32,))
        # (params, variant, l2_budget_mb, launch, err, errlen): the error buffer as a plain address, as a bound call
        # passes it (cuda_lib.declare; its workspace function takes the variant alone, below)
        lib.attn_lab_fa3_fwd.restype = ctypes.c_int
        lib.attn_lab_fa3_fwd.argtypes = [ctypes.c_void_p, _i32, _i32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        lib.attn_lab_fa3_fwd_workspace.restype = ctypes.c_int64
        lib.attn_lab_fa3_fwd_workspace.argtypes = [ctypes.c_void_p, _i32]
        lib.attn_lab_fa3_fp8_key_tile.restype = ctypes.c_int
        lib.attn_lab_fa3_fp8_key_tile.argtypes = [ctypes.c_void_p, _i32, ctypes.POINTER(ctypes.c_int),
                                                  ctypes.c_char_p, ctypes.c_int]
        _libs[path] = lib
        return lib


def _code(table: dict[str, int], variant: str, launcher: str) -> int:
    if variant not in table:
        raise cuda_lib.KernelError(launcher, 2, f"variant={variant!r}: one of {sorted(table)}")
    return table[variant]


def bind_fa3_fwd(params: cuda_lib.AttnFwdParams, variant: str = "default", *, l2_budget_mb: int = 0,
                 stream: int | None = None, lib: ctypes.CDLL | None = None) -> cuda_lib.KernelCall:
    """`cuda_lib.KernelCall` of the FA3 forward build ``variant`` (a key of `FA3_FWD_VARIANTS`); ``l2_budget_mb`` > 0
    sizes the heads per L2 section for that many MB of K / V instead of the shipped rule."""
    code = _code(FA3_FWD_VARIANTS, variant, "attn_lab_fa3_fwd")
    return cuda_lib.KernelCall("attn_lab_fa3_fwd", params, lib=lib or library(), stream=stream,
                               args=(code, int(l2_budget_mb)), workspace_args=(code,))


def call_fa3_fwd(params: cuda_lib.AttnFwdParams, variant: str = "default", *, l2_budget_mb: int = 0,
                 stream: int | None = None, lib: ctypes.CDLL | None = None) -> None:
    """One call of `bind_fa3_fwd`'s build."""
    bind_fa3_fwd(params, variant, l2_budget_mb=l2_budget_mb, stream=stream, lib=lib)()


def bind_fp8_fwd(params: cuda_lib.AttnFp8FwdParams, variant: str = "default", *, stream: int | None = None,
                 lib: ctypes.CDLL | None = None) -> cuda_lib.KernelCall:
    """`cuda_lib.KernelCall` of the FP8 forward build ``variant`` (a key of `FP8_VARIANTS`, of the V layout of
    ``params``: `FP8_ROWS_VARIANTS` or `FP8_KMAJOR_VARIANTS`)."""
    code = _code(FP8_VARIANTS, variant, "attn_lab_fa3_fp8_fwd")
    return cuda_lib.KernelCall("attn_lab_fa3_fp8_fwd", params, lib=lib or library(), stream=stream, args=(code,))


def call_fp8_fwd(params: cuda_lib.AttnFp8FwdParams, variant: str = "default", *, stream: int | None = None,
                 lib: ctypes.CDLL | None = None) -> None:
    """One call of `bind_fp8_fwd`'s build."""
    bind_fp8_fwd(params, variant, stream=stream, lib=lib)()


def fp8_key_tile(params: cuda_lib.AttnFp8FwdParams, variant: str = "default", lib: ctypes.CDLL | None = None) -> int:
    """Keys per online-softmax block of the FP8 build ``variant`` for ``params`` (the tile P is rounded against)."""
    code = _code(FP8_VARIANTS, variant, "attn_lab_fa3_fp8_key_tile")
    out, err = ctypes.c_int(0), ctypes.create_string_buffer(512)
    rc = (lib or library()).attn_lab_fa3_fp8_key_tile(ctypes.byref(params), code, ctypes.byref(out), err, len(err))
    if rc != 0:
        raise (cuda_lib.KernelUnsupported if rc == 1 else cuda_lib.KernelError)(
            "attn_lab_fa3_fp8_key_tile", rc, err.value.decode(errors="replace"))
    return out.value


def call_fa3_bwd(params: cuda_lib.AttnBwdParams, variant: str = "default", *, deterministic: bool = False,
                 stream: int | None = None, lib: ctypes.CDLL | None = None) -> None:
    """One call of the FA3 backward build ``variant`` (a key of `FA3_BWD_VARIANTS`), dQ added in a fixed order when
    ``deterministic``."""
    code = _code(FA3_BWD_VARIANTS, variant, "attn_lab_fa3_bwd")
    cuda_lib.KernelCall("attn_lab_fa3_bwd", params, lib=lib or library(), stream=stream,
                        args=(code, int(bool(deterministic))))()


def call_fa2_bwd(params: cuda_lib.AttnBwdParams, variant: str = "default", *, stream: int | None = None,
                 lib: ctypes.CDLL | None = None) -> Any:
    """One call of the FA2 backward tile shape ``variant`` (a key of `FA2_BWD_VARIANTS`)."""
    code = _code(FA2_BWD_VARIANTS, variant, "attn_lab_fa2_bwd")
    cuda_lib.KernelCall("attn_lab_fa2_bwd", params, lib=lib or library(), stream=stream, args=(code,))()
