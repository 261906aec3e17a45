"""CPU tests of attention sinks in the CUDA kernels' C ABI (attn_params.h v4) and the CUDA adapters' claims.

Bug classes (SEMANTICS.md §18; flash-attention PR #2752, #1973): a sink silently dropped by a kernel that
does not implement it, a d sink without its dLSE term. These tests need no GPU:
- ``sinks`` is appended at the END of AttnFwdParams, ``dlse`` / ``dsinks`` at the END of AttnBwdParams, in
  the header and in the ctypes mirror; every v3 field of AttnFwdParams keeps its offset; ABI version 4;
  a zero-initialised struct means "no sink, no LSE cotangent";
- `fwd_params` / `bwd_params` fill the pointers and refuse a wrong dtype / shape / stride naming the argument;
- the launchers that do not fold sinks in (FA1 forward and backward, FA3) answer ATTN_ERR_UNSUPPORTED naming
  ``sinks`` (or ``dlse`` / ``dsinks``) before touching the device, and attn_fa2_bwd refuses sinks without a
  ``dsinks`` output;
- cuda-fa2 claims sinks (forward and backward, with the LSE cotangent), cuda-splitkv sinks (forward), and
  cuda-fa1 / cuda-fa3 decline sink cases with the capability reason.
The kernels themselves are checked on the GPU by the conformance run (reports/gpu/, the sinks family).
"""

from __future__ import annotations

import re

import pytest
from kernel_helpers import cuda_library_or_skip

from attention_conformance.kernels import build as kbuild
from attention_conformance.kernels import cuda_lib

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def lib():
    """The library CI built before pytest (`python -m attention_conformance.kernels.build`); skips with that
    command when absent."""
    return cuda_library_or_skip()


def _struct_fields(name: str) -> list[str]:
    """Field names of struct `name` in attn_params.h, in declaration order."""
    text = (kbuild.CUDA_DIR / "include" / "attn_params.h").read_text()
    body = re.search(rf"typedef struct {name} \{{(.*?)\}} {name};", text, re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    names = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if decl:
            m = re.match(r"((?:const )?\w+\s*\**)\s*(.*)", decl)
            names += [n.strip().lstrip("*") for n in m.group(2).split(",")]
    return names


def test_sink_fields_are_appended_at_the_end_of_the_header_and_the_mirror():
    fwd, bwd = _struct_fields("AttnFwdParams"), _struct_fields("AttnBwdParams")
    assert fwd[-1] == "sinks", f"attn_params.h: last AttnFwdParams field is {fwd[-1]}, expected sinks"
    assert bwd[-2:] == ["dlse", "dsinks"], f"attn_params.h: last AttnBwdParams fields are {bwd[-2:]}"
    assert [n for n, _ in cuda_lib.AttnFwdParams._fields_] == fwd
    assert [n for n, _ in cuda_lib.AttnBwdParams._fields_] == bwd
    assert cuda_lib.ATTN_PARAMS_VERSION >= 4, "appending fields changed sizeof(AttnFwdParams): the ABI version is >= 4"
    off = {n: getattr(cuda_lib.AttnFwdParams, n).offset for n, _ in cuda_lib.AttnFwdParams._fields_}
    assert off["sinks"] == off["page_size"] + 8, off  # int32 page_size, then the pointer at the next 8 bytes
    zero = cuda_lib.AttnBwdParams()
    assert zero.fwd.sinks is None and zero.dlse is None and zero.dsinks is None, (
        "a zero-initialised struct must mean 'no sink, no LSE cotangent'")


def _tensors(B=2, Hq=4, Hkv=2, L=8, d=64):
    t = lambda *s: torch.zeros(*s, dtype=torch.bfloat16)  # noqa: E731
    return t(B, Hq, L, d), t(B, Hkv, L, d), t(B, Hkv, L, d), t(B, Hq, L, d), torch.zeros(B, Hq, L)


def test_fwd_params_fills_sinks_and_refuses_a_wrong_shape_or_dtype():
    q, k, v, o, lse = _tensors()
    sinks = torch.zeros(4)
    p = cuda_lib.fwd_params(q, k, v, o, lse, sinks=sinks)
    assert p.sinks == sinks.data_ptr() and any(t is sinks for t in p._keep)
    assert cuda_lib.fwd_params(q, k, v, o, lse).sinks is None
    for bad, what in ((torch.zeros(2), "shape (2,)"), (torch.zeros(4, dtype=torch.float16), "float16"),
                      (torch.zeros(8)[::2], "stride (2,)")):
        with pytest.raises(cuda_lib.KernelError, match=re.escape(what)) as ei:
            cuda_lib.fwd_params(q, k, v, o, lse, sinks=bad)
        assert "sinks" in str(ei.value) and "(4,)" in str(ei.value)


def _bwd(sinks=None, dlse=None, dsinks=None, B=1, Hq=2, Hkv=1, L=8, d=64, lse=None):
    t = lambda *s: torch.zeros(*s, dtype=torch.bfloat16)  # noqa: E731
    f32 = lambda *s: torch.zeros(*s)  # noqa: E731
    q, k, v, o, do = t(B, Hq, L, d), t(B, Hkv, L, d), t(B, Hkv, L, d), t(B, Hq, L, d), t(B, Hq, L, d)
    return cuda_lib.bwd_params(q, k, v, o, f32(B, Hq, L) if lse is None else lse, do, t(B, Hq, L, d),
                               t(B, Hkv, L, d), t(B, Hkv, L, d), dq_accum=f32(B, Hq, L, d), d_rowsum=f32(B, Hq, L),
                               dk_accum=f32(B, Hq, L, d), dv_accum=f32(B, Hq, L, d), sinks=sinks, dlse=dlse,
                               dsinks=dsinks)


def test_bwd_params_fills_dlse_and_dsinks_and_checks_them():
    sinks, dlse, dsinks = torch.zeros(2), torch.zeros(1, 2, 8), torch.zeros(2)
    p = _bwd(sinks, dlse, dsinks)
    assert (p.fwd.sinks, p.dlse, p.dsinks) == (sinks.data_ptr(), dlse.data_ptr(), dsinks.data_ptr())
    with pytest.raises(cuda_lib.KernelError, match="dsinks"):
        _bwd(sinks, None, torch.zeros(3))
    with pytest.raises(cuda_lib.KernelError, match="dlse"):
        _bwd(None, torch.zeros(1, 2, 7), None)
    with pytest.raises(cuda_lib.KernelError, match="dlse stride"):  # the kernel reads dlse with the lse strides
        _bwd(None, dlse, None, lse=torch.zeros(2, 1, 8).transpose(0, 1))


def _status(launcher: str, params) -> cuda_lib.KernelError | None:
    try:
        cuda_lib.call(launcher, params, stream=0)
    except cuda_lib.KernelError as e:
        return e
    return None


@pytest.mark.parametrize("launcher", ["attn_fa1_fwd", "attn_fa3_fwd"])
def test_forward_launchers_without_sinks_refuse_them(lib, launcher):
    q, k, v, o, lse = _tensors()
    p = cuda_lib.fwd_params(q, k, v, o, lse, sinks=torch.zeros(4))
    e = _status(launcher, p)
    assert e is not None and e.status == "ATTN_ERR_UNSUPPORTED" and "sinks" in e.message, (
        f"{launcher} with sinks: expected ATTN_ERR_UNSUPPORTED naming sinks, got {e}")


def test_fa1_backward_refuses_sinks_and_an_lse_cotangent(lib):
    e = _status("attn_fa1_bwd", _bwd(torch.zeros(2), None, torch.zeros(2)))
    assert e is not None and e.status == "ATTN_ERR_UNSUPPORTED" and "sinks" in e.message, e
    e = _status("attn_fa1_bwd", _bwd(None, torch.zeros(1, 2, 8), None))
    assert e is not None and e.status == "ATTN_ERR_UNSUPPORTED" and "dlse" in e.message, e


def test_fa2_backward_refuses_sinks_without_a_dsinks_output(lib):
    e = _status("attn_fa2_bwd", _bwd(torch.zeros(2), None, None))
    assert e is not None and e.status == "ATTN_ERR_INVALID" and "dsinks" in e.message, e


# -- adapter claims ------------------------------------------------------------------------------------------
def _case(**kw):
    from attention_conformance.cases.case import Case

    base = dict(family="sinks_test", B=2, Hq=4, Hkv=2, Lq=40, Lk=24, d=64, dv=64, dtype="bfloat16", causal=True,
                sinks="small")
    base.update(kw)
    return Case(**base)


def test_cuda_adapters_claim_sinks_where_the_kernels_fold_them_in():
    from attention_conformance.adapters.base import capability_reason
    from attention_conformance.adapters.cuda import CudaFA1, CudaFA2, CudaFA3, CudaSplitKV

    fwd, bwd, bwd_dlse = _case(), _case(backward=True), _case(backward=True, lse_grad=True)
    for cls in (CudaFA2, CudaSplitKV):
        assert capability_reason(cls.capabilities, fwd, "cuda") is None, cls.name
    assert capability_reason(CudaFA2.capabilities, bwd, "cuda") is None
    assert capability_reason(CudaFA2.capabilities, bwd_dlse, "cuda") is None
    assert "backward" in (capability_reason(CudaSplitKV.capabilities, bwd, "cuda") or "")
    for cls in (CudaFA1, CudaFA3):
        reason = capability_reason(cls.capabilities, fwd, "cuda")
        assert reason is not None and "sinks" in reason, (cls.name, reason)
    assert "dlse" in (capability_reason(CudaFA1.capabilities, _case(sinks=None, backward=True, lse_grad=True),
                                        "cuda") or "")
