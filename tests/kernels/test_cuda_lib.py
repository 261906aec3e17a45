"""CPU-side tests of the CUDA kernel build, the ctypes loader and the cuda-* adapters.

- the library under build/kernels is the build of this tree (the stamp matches); a stale or missing
  library is reported with the build command, never rebuilt here (CI runs `python -m
  attention_conformance.kernels.build`
  as its own step before pytest);
- the ctypes mirror of AttnFwdParams / AttnBwdParams matches the C header, checked two ways: a tiny C
  program compiled with the host compiler prints sizeof/offsetof, and the library's own
  ``attn_params_layout`` (what nvcc compiled);
- launchers reject bad parameters with a status and a message naming the argument (validation
  runs before any CUDA call, so this needs the library but no GPU);
- without a GPU the adapters say why they are unavailable, and decline unsupported cases cleanly.
"""

from __future__ import annotations

import os

import pytest
from kernel_helpers import c_header_values, cuda_library_or_skip

from attention_conformance.kernels import build as kbuild
from attention_conformance.kernels import cuda_lib

torch = pytest.importorskip("torch")

HAS_NVCC = kbuild.find_nvcc() is not None


def _lib_or_skip():
    return cuda_library_or_skip()


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not found")
def test_library_is_up_to_date():
    """A library built from other sources is reported (stale), not rebuilt: the build is CI's step."""
    if "ATTN_KERNELS_LIB" in __import__("os").environ:
        pytest.skip("$ATTN_KERNELS_LIB names a library built elsewhere")
    if not (kbuild.DEFAULT_OUT / kbuild.LIB_NAME).is_file():
        pytest.skip(f"kernel library not built: run `{kbuild.BUILD_COMMAND}`")
    reason = kbuild.stale_reason(kbuild.DEFAULT_OUT)
    assert reason is None, reason


def test_stale_reason_names_the_build_command(tmp_path):
    """stale_reason never compiles: an empty directory is reported missing, a foreign stamp stale."""
    if not HAS_NVCC:
        assert "nvcc not found" in kbuild.stale_reason(tmp_path)
        return
    assert "does not exist" in kbuild.stale_reason(tmp_path) and kbuild.BUILD_COMMAND in kbuild.stale_reason(tmp_path)
    (tmp_path / kbuild.LIB_NAME).write_bytes(b"not a library")
    (tmp_path / "build.stamp").write_text("0" * 64)
    assert "is stale" in kbuild.stale_reason(tmp_path)
    assert not (tmp_path / "obj").exists(), "stale_reason must not start a build"


def test_library_is_never_built_under_pytest():
    """The plugin sets ATTN_KERNELS_NO_BUILD, so cuda_lib.library() cannot compile inside a test."""
    import os

    assert os.environ.get("ATTN_KERNELS_NO_BUILD") == "1"


def test_build_flags_target_sm80_and_sm90a():
    flags = " ".join(kbuild.nvcc_flags())
    assert "arch=compute_80,code=sm_80" in flags and "arch=compute_90a,code=sm_90a" in flags, flags
    assert "--use_fast_math" not in flags, "fast-math would approximate the LSE's logf (see kernels/build.py)"


def _c_layout() -> list[int]:
    fwd = [n for n, _ in cuda_lib.AttnFwdParams._fields_]
    bwd = [n for n, _ in cuda_lib.AttnBwdParams._fields_]
    lines = ['printf("%d %zu %zu\\n", ATTN_PARAMS_VERSION, sizeof(AttnFwdParams), sizeof(AttnBwdParams));']
    lines += [f'printf("%zu\\n", offsetof(AttnFwdParams, {n}));' for n in fwd]
    lines += [f'printf("%zu\\n", offsetof(AttnBwdParams, {n}));' for n in bwd]
    return c_header_values(lines)


def test_ctypes_mirror_matches_c_header():
    c = _c_layout()
    mine = cuda_lib.mirror_layout()
    fields = (["version", "sizeof(fwd)", "sizeof(bwd)"] + [f"fwd.{n}" for n, _ in cuda_lib.AttnFwdParams._fields_]
              + [f"bwd.{n}" for n, _ in cuda_lib.AttnBwdParams._fields_])
    diffs = [f"{f}: header {a} vs ctypes {b}" for f, a, b in zip(fields, c, mine) if a != b]
    assert len(c) == len(mine) and not diffs, f"attn_params.h and kernels/cuda_lib.py disagree: {diffs}"


def test_ctypes_mirror_matches_compiled_library():
    _lib_or_skip()
    assert cuda_lib.compiled_layout() == cuda_lib.mirror_layout(), (
        "libattn_kernels.so was compiled with a different AttnFwdParams/AttnBwdParams layout than "
        "kernels/cuda_lib.py mirrors: rebuild (python -m attention_conformance.kernels.build --force) "
        "or fix the mirror")


def _cpu_params(**kw):
    B, Hq, Hkv, Lq, Lk, d = 2, 4, 2, 5, 7, kw.pop("d", 64)
    q = torch.zeros(B, Lq, Hq, d, dtype=torch.bfloat16).transpose(1, 2)  # [B, L, H, D] view
    k = torch.zeros(1, Hkv, Lk, d, dtype=torch.bfloat16).expand(B, -1, -1, -1)  # stride-0 batch
    v = torch.zeros(B, Hkv, Lk, d, dtype=torch.bfloat16)
    o = torch.zeros(B, Hq, Lq, d, dtype=torch.bfloat16)
    lse = torch.zeros(B, Hq, Lq)
    return cuda_lib.fwd_params(q, k, v, o, lse, **kw), (q, k, v, o, lse)


def test_fwd_params_fills_strides_and_semantics():
    p, (q, k, v, o, lse) = _cpu_params(causal=True, alignment="top_left", window=(None, 3), softcap=2.5)
    assert (p.q_batch_stride, p.q_head_stride, p.q_row_stride) == q.stride()[:3]
    assert p.k_batch_stride == 0, "expanded K must keep batch stride 0 (no copy)"
    assert (p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim) == (2, 4, 2, 5, 7, 64)
    assert (p.causal, p.align_bottom_right, p.window_left, p.window_right) == (1, 0, -1, 3)
    assert p.dtype == cuda_lib.ATTN_BF16 and abs(p.scale - 64 ** -0.5) < 1e-7 and p.softcap == 2.5
    assert p.q == q.data_ptr() and p.lse == lse.data_ptr()


@pytest.mark.parametrize(
    "launcher, kw, status, needle",
    [
        ("attn_fa2_fwd", dict(d=96), "ATTN_ERR_UNSUPPORTED", "head_dim=96"),
        ("attn_fa2_fwd", dict(window=(-2, 0)), "ATTN_ERR_INVALID", "window=(-2, 0)"),
        ("attn_splitkv_fwd", dict(d=32), "ATTN_ERR_UNSUPPORTED", "head_dim=32"),
        ("attn_splitkv_fwd", dict(num_splits=-3), "ATTN_ERR_INVALID", "num_splits=-3"),
    ],
)
def test_launchers_reject_bad_parameters_with_a_message(launcher, kw, status, needle):
    _lib_or_skip()
    p, _ = _cpu_params(**kw)
    with pytest.raises(cuda_lib.KernelError) as ei:
        cuda_lib.call(launcher, p, stream=0)
    assert ei.value.status == status and needle in ei.value.message, (
        f"{launcher} with {kw}: expected {status} mentioning {needle!r}, got {ei.value}")


def test_a_build_opened_on_its_own_handle_runs_the_same_validation():
    """`open_library` opens a build on its own (ab_libs_inproc compares builds of different paths in one process):
    `call(..., lib=)` goes through that library's launcher, with the same checks and messages, and never falls back
    to the configured one."""
    import ctypes

    _lib_or_skip()
    other = cuda_lib.open_library(cuda_lib.library_path())
    p, _ = _cpu_params(d=96)
    with pytest.raises(cuda_lib.KernelError) as ei:
        cuda_lib.call("attn_fa2_fwd", p, stream=0, lib=other)
    assert ei.value.status == "ATTN_ERR_UNSUPPORTED" and "head_dim=96" in ei.value.message
    with pytest.raises(cuda_lib.LibraryUnavailable, match="does not export attn_fa2_fwd"):
        cuda_lib.call("attn_fa2_fwd", p, stream=0, lib=ctypes.CDLL(None))  # the process itself: no launchers
    with pytest.raises(cuda_lib.KernelError) as ei:  # the FA3 variant builds likewise (ab_libs_inproc's NAME@VARIANT)
        cuda_lib.call_fa3_variant(p, "persistent", stream=0, lib=other)
    assert ei.value.status == "ATTN_ERR_UNSUPPORTED" and "head_dim=96" in ei.value.message
    with pytest.raises(cuda_lib.LibraryUnavailable, match="does not export attn_fa3_fwd_variant"):
        cuda_lib.call_fa3_variant(p, "persistent", stream=0, lib=ctypes.CDLL(None))


def test_adapters_unavailable_or_declining_cleanly_without_gpu():
    from attention_conformance.adapters.cuda import CudaFA1, CudaFA2, CudaSplitKV
    from attention_conformance.case import Case

    for cls in (CudaFA1, CudaFA2, CudaSplitKV):
        a = cls()
        if not torch.cuda.is_available():
            reason = a.unavailable_reason("cuda")
            assert isinstance(reason, str) and reason, f"{a.name}: no reason given without a GPU"
        assert a.unavailable_reason("cpu"), f"{a.name} must refuse the cpu device"
        case = Case(family="t", B=1, Hq=2, Hkv=1, Lq=8, Lk=8, d=96, dv=96, dtype="bfloat16")
        assert "head dim" in a.supports(case, "cuda")
        assert "dtype float32" in a.supports(case.replace(d=64, dv=64, dtype="float32"), "cuda")
        assert a.supports(case.replace(d=64, dv=64), "cuda") is None
    assert CudaSplitKV().supports(Case(family="t", B=1, Hq=2, Hkv=1, Lq=8, Lk=8, d=64, dv=64, dtype="float16",
                                       backward=True), "cuda") == "backward not supported"


def test_build_setting_sets_and_restores_the_variable(monkeypatch):
    from attention_conformance.kernels import cuda_lib

    monkeypatch.setenv("ATTN_FA3_BWD_DQ", "before")
    with cuda_lib.build_setting("ATTN_FA3_BWD_DQ", "atomic"):
        assert os.environ["ATTN_FA3_BWD_DQ"] == "atomic"
    assert os.environ["ATTN_FA3_BWD_DQ"] == "before"
    with cuda_lib.build_setting("ATTN_FA3_BWD_DQ", None):
        assert "ATTN_FA3_BWD_DQ" not in os.environ
    assert os.environ["ATTN_FA3_BWD_DQ"] == "before"
    monkeypatch.delenv("ATTN_FA3_BWD_DQ")
    with cuda_lib.build_setting("ATTN_FA3_BWD_DQ", "atomic"):
        pass
    assert "ATTN_FA3_BWD_DQ" not in os.environ
