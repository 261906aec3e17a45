"""Shared builders for the reference-kernel tests (kernels/reference, oracles/SEMANTICS.md)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from attention_conformance.kernels.reference import fa1, fa2, fa3, splitkv

__all__ = ["KERNELS", "BWD_KERNELS", "SEMANTIC_CASES", "UNIT_ROUNDOFF", "c_header_values", "cuda_library_or_skip",
           "make_case", "repro", "run_forward"]

KERNELS = {"fa1": fa1, "fa2": fa2, "fa3": fa3, "splitkv": splitkv}
BWD_KERNELS = {"fa1": fa1, "fa2": fa2, "fa3": fa3}
#: unit roundoff u = 2^-(mantissa bits + 1) of each emulated dtype
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24}

# name -> (shape kwargs, semantics kwargs builder); shapes chosen so tiles of 16 leave tails
SEMANTIC_CASES = {
    "plain": {},
    "causal_br_lq_lt_lk": {"causal": True},
    "causal_tl_lq_lt_lk": {"causal": True, "alignment": "top_left"},
    "causal_br_lq_gt_lk": {"causal": True, "_shape": {"Lq": 53, "Lk": 37}},
    "causal_tl_lq_gt_lk": {"causal": True, "alignment": "top_left", "_shape": {"Lq": 53, "Lk": 37}},
    "window_5_3": {"window": (5, 3)},
    "window_left_only_causal": {"window": (7, None), "causal": True},
    "window_right_only_top_left": {"window": (None, 2), "alignment": "top_left"},
    "mask_random": {"mask": "random"},
    "bias_random": {"bias": "random"},
    "softcap": {"softcap": 1.5, "scale": 0.9},
    "negative_scale": {"scale": -0.4},
    "gqa_4_to_1_dv_ne_d": {"_shape": {"Hq": 4, "Hkv": 1, "dv": 8}},
    "varlen_causal": {"causal": True, "seqlens_q": (10, 37), "seqlens_k": (53, 4)},
    "varlen_window_tl": {"window": (3, 4), "alignment": "top_left", "seqlens_q": (37, 0), "seqlens_k": (20, 53)},
    "all_masked_rows": {"mask": "full_rows"},
    "everything": {"causal": True, "window": (9, None), "mask": "random", "bias": "random", "softcap": 3.0,
                   "seqlens_q": (30, 37), "seqlens_k": (53, 41), "_shape": {"Hq": 4, "Hkv": 2, "dv": 8}},
}


def make_case(name: str, seed: int = 0, dout: bool = False, **shape_over):
    """(arrays dict with q, k, v[, dout], semantic kwargs for oracle and kernels) for a named case."""
    spec = dict(SEMANTIC_CASES[name])
    shape = {"B": 2, "Hq": 2, "Hkv": 2, "Lq": 37, "Lk": 53, "d": 16, "dv": 16}
    shape.update(spec.pop("_shape", {}))
    shape.update(shape_over)
    rng = np.random.default_rng(seed)
    B, Hq, Hkv, Lq, Lk, d, dv = (shape[x] for x in ("B", "Hq", "Hkv", "Lq", "Lk", "d", "dv"))
    arrays = {
        "q": rng.standard_normal((B, Hq, Lq, d)),
        "k": rng.standard_normal((B, Hkv, Lk, d)),
        "v": rng.standard_normal((B, Hkv, Lk, dv)),
    }
    if dout:
        arrays["dout"] = rng.standard_normal((B, Hq, Lq, dv))
    kw = dict(spec)
    if kw.get("mask") == "random":
        kw["mask"] = rng.random((B, 1, Lq, Lk)) > 0.3
    elif kw.get("mask") == "full_rows":
        m = np.ones((B, Hq, Lq, Lk), dtype=bool)
        m[0, 0, [0, 5, Lq - 1]] = False  # three fully masked rows, one at a tile start, one in the tail
        m[-1, -1, 16] = False
        kw["mask"] = m
    if kw.get("bias") == "random":
        kw["bias"] = rng.standard_normal((1, Hq, Lq, Lk))
    return arrays, kw, shape


def repro(kernel: str, name: str, **extra) -> str:
    """A stand-alone repro line for failure messages."""
    more = ", ".join(f"{k}={v!r}" for k, v in extra.items())
    return (f"repro: arrays, kw, _ = tests/kernels/kernel_helpers.make_case({name!r}); "
            f"attention_conformance.kernels.reference.{kernel}.forward(**arrays, **kw, {more})")


def run_forward(kernel: str, arrays: dict, kw: dict, **knobs):
    mod = KERNELS[kernel]
    return mod.forward(arrays["q"], arrays["k"], arrays["v"], **kw, **knobs)


def cuda_library_or_skip(why: str = "kernel library unavailable"):
    """The CUDA kernel library CI built before pytest (`python -m attention_conformance.kernels.build`): pytest
    never compiles it, so a test that needs it skips with the reason (which names the build command)."""
    from attention_conformance.kernels import cuda_lib

    try:
        return cuda_lib.library(build_if_missing=False)
    except cuda_lib.LibraryUnavailable as e:
        pytest.skip(f"{why}: {e}")


def cuda_library_exporting_or_skip(launcher: str):
    """`cuda_library_or_skip`, and a skip when that library does not export ``launcher`` (built before the
    kernel existed)."""
    lib = cuda_library_or_skip()
    if getattr(lib, launcher, None) is None:
        pytest.skip(f"library does not export {launcher} (python -m attention_conformance.kernels.build)")
    return lib


#: why a lab test skips where the package is installed from its wheel (tox): the lab's Python side is a checkout's
LAB_NOT_INSTALLED = ("kernels.cuda.lab (the lab build's Python side) is not in the installed package: the wheel ships "
                     "the product only; run the lab's tests from a checkout (pip install -e .)")
LAB_MODULE = "attention_conformance.kernels.cuda.lab"


def lab_module_or_skip():
    """`kernels.cuda.lab`, or a skip saying it is a checkout's (tox installs the wheel, which does not ship it)."""
    return pytest.importorskip(LAB_MODULE, reason=LAB_NOT_INSTALLED)


def lab_library_or_skip():
    """`kernels.cuda.lab` with its library loaded, or a skip naming the build command (the lab build of ablation,
    tuning and timing variants is made on request only: ``python -m attention_conformance.kernels.build --lab``)."""
    lab = lab_module_or_skip()
    if not lab.library_path().exists():
        pytest.skip(f"no lab build at {lab.library_path()} (python -m attention_conformance.kernels.build --lab)")
    lab.library()
    return lab


def c_header_values(printfs: list[str]) -> list[int]:
    """The integers a C program prints that includes kernels/cuda/include/attn_params.h and runs `printfs` (lines
    of C, e.g. ``printf("%zu\\n", offsetof(AttnFwdParams, q));``): the header's layout and constants as the C
    compiler sees them. Skips the test when there is no C compiler."""
    from attention_conformance.kernels.build import CUDA_DIR

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "attn_params.h"', "int main(void) {", *printfs,
             "return 0; }"]
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "layout.c", Path(d) / "layout"
        src.write_text("\n".join(lines))
        subprocess.run([cc, "-I", str(CUDA_DIR / "include"), str(src), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    return [int(x) for x in out]
