"""CPU tests of the lab build's ABI and choices (kernels/cuda/lab: attn_lab.h, the variant tables of its Python side).

The lab's variant names must be attn_lab.h's codes (checked with the host C compiler, no build needed); the default
build never compiles a lab source; an unknown variant name is an error naming the known ones before any library is
loaded. With a lab build present (``python -m attention_conformance.kernels.build --lab``, not part of CI's build)
the key tiles and workspaces of its builds are checked too (no device needed); without one those tests skip.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from kernel_helpers import LAB_MODULE, LAB_NOT_INSTALLED

from attention_conformance.kernels import build as kbuild
from attention_conformance.kernels import cuda_lib

lab = pytest.importorskip(LAB_MODULE, reason=LAB_NOT_INSTALLED)

torch = pytest.importorskip("torch")

ENUMS = {
    "ATTN_LAB_FA3_": lab.FA3_FWD_VARIANTS,
    "ATTN_LAB_FP8_": lab.FP8_VARIANTS,
    "ATTN_LAB_FA3_BWD_": lab.FA3_BWD_VARIANTS,
    "ATTN_LAB_FA2_BWD_": lab.FA2_BWD_VARIANTS,
}
#: the C names of variants whose Python name is not the enum's tail in lower case
C_NAMES = {("ATTN_LAB_FA3_", "lazy_rescale_one_cta"): "LAZY_RESCALE_ONE_CTA"}


def _lab_header_values(printfs: list[str]) -> list[int]:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    import tempfile
    from pathlib import Path

    lines = ["#include <stdio.h>", '#include "attn_lab.h"', "int main(void) {", *printfs, "return 0; }"]
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "lab.c", Path(d) / "lab"
        src.write_text("\n".join(lines))
        subprocess.run([cc, "-I", str(kbuild.CUDA_DIR / "include"), "-I", str(kbuild.LAB_DIR), str(src), "-o",
                        str(exe)], check=True)
        return [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]


def test_variant_tables_are_the_headers_codes():
    names = [(prefix, name) for prefix, table in ENUMS.items() for name in table]
    printfs = ['printf("%d\\n", ATTN_LAB_VERSION);']
    printfs += [f'printf("%d\\n", {prefix}{C_NAMES.get((prefix, n), n.upper())});' for prefix, n in names]
    values = _lab_header_values(printfs)
    assert values[0] == lab.LAB_VERSION
    assert values[1:] == [ENUMS[prefix][n] for prefix, n in names], "attn_lab.h and kernels/cuda/lab disagree"


def test_fp8_variants_of_each_layout_partition_the_table():
    assert set(lab.FP8_ROWS_VARIANTS).isdisjoint(lab.FP8_KMAJOR_VARIANTS)
    assert set(lab.FP8_ROWS_VARIANTS) | set(lab.FP8_KMAJOR_VARIANTS) | {"default"} == set(lab.FP8_VARIANTS)
    assert set(lab.FA3_FWD_EXACT_VARIANTS) == {v for v in lab.FA3_FWD_VARIANTS if not v.startswith("probe_")}


def test_the_default_build_compiles_no_lab_source():
    """CI builds the shipped library only: its sources are kernels/cuda/*.cu, the lab's kernels/cuda/lab/*.cu."""
    shipped, lab_sources = kbuild._sources(), kbuild._sources(lab=True)
    assert shipped and lab_sources
    assert all(s.parent == kbuild.CUDA_DIR for s in shipped)
    assert all(s.parent == kbuild.LAB_DIR for s in lab_sources)


@pytest.mark.parametrize("call", [
    lambda: lab.call_fa3_fwd(None, "fastest"),
    lambda: lab.call_fp8_fwd(None, "fastest"),
    lambda: lab.fp8_key_tile(None, "fastest"),
    lambda: lab.call_fa3_bwd(None, "fastest"),
    lambda: lab.call_fa2_bwd(None, "fastest"),
])
def test_an_unknown_variant_names_the_known_ones(call):
    with pytest.raises(cuda_lib.KernelError, match="variant='fastest': one of .*'default'") as e:
        call()
    assert e.value.code == 2


def test_lab_sanitize_picks_the_cases_of_the_variants_launcher_and_layout():
    from attention_conformance.kernels.cuda.lab.sanitize import cases_for

    assert {n for n, _ in cases_for("fa3_variant", "two_wg")} == {"attn_fa3_fwd"}
    kmajor = cases_for("fp8_variant", "persistent")
    rows = cases_for("fp8_variant", "no_exp")
    assert kmajor and rows and all(s.get("vt") for _, s in kmajor) and not any(s.get("vt") for _, s in rows)
    assert {n for n, _ in cases_for("fa3_bwd_variant", "rows64")} == {"attn_fa3_bwd", "attn_fa3_bwd_deterministic"}


def _lab_or_skip() -> ctypes.CDLL:
    try:
        return lab.library()
    except cuda_lib.LibraryUnavailable as e:
        pytest.skip(f"lab build unavailable: {e}")


@pytest.mark.parametrize("d, granularity, variant, want", [
    (64, "per_head", "two_wg", 256),
    (128, "per_tensor", "row_tiles", 128),
    (256, "per_tensor", "row_tiles", 64),
    (128, "per_head", "exp_poly2", 192),
    (128, "per_tensor", "two_wg", 192),
    (64, "per_tile", "persistent", 128),
    (128, "per_tile", "persistent", 128),
    (256, "per_head", "persistent", 128),
    (64, "per_tile", "one_cta_per_tile", 128),
    (128, "per_tile", "default", 128),
])
def test_lab_fp8_key_tile_names_the_build(d, granularity, variant, want):
    """The lab's FP8 builds of V k-major report their key tiles (no device needed)."""
    from test_cuda_fp8_params import fp8_key_tile_params

    _lab_or_skip()
    assert lab.fp8_key_tile(fp8_key_tile_params(d, granularity, "kmajor"), variant) == want


@pytest.mark.parametrize("d, granularity, variant, reason", [
    (128, "per_tile", "two_wg", "per-tensor or per-head"),
    (256, "per_tensor", "one_cta_per_tile", "head_dim 64 build"),
    (128, "per_tensor", "no_exp", "reads V as rows"),
])
def test_lab_fp8_variant_without_a_build_says_why(d, granularity, variant, reason):
    from test_cuda_fp8_params import fp8_key_tile_params

    _lab_or_skip()
    with pytest.raises(cuda_lib.KernelUnsupported, match=reason):
        lab.fp8_key_tile(fp8_key_tile_params(d, granularity, "kmajor"), variant)


@pytest.mark.parametrize("d, variant, want", [(128, "persistent", 256), (64, "default", 256),
                                              (64, "one_cta_per_tile", 0), (128, "two_wg", 0), (64, "no_ws", -1),
                                              (64, "cluster2", -1), (192, "d192_n96", 0), (128, "d192_pingpong", -1),
                                              (96, "d96_n80", 0)])
def test_lab_fa3_forward_workspace(d, variant, want):
    """attn_lab_fa3_fwd_workspace: the tile counter of a persistent build, none otherwise, -1 for a variant the head
    dim has no build of."""
    lib = _lab_or_skip()
    q = torch.zeros(1, 2, 128, d, dtype=torch.bfloat16)
    p = cuda_lib.fwd_params(q, q, q, torch.zeros_like(q))
    assert lib.attn_lab_fa3_fwd_workspace(ctypes.byref(p), lab.FA3_FWD_VARIANTS[variant]) == want
