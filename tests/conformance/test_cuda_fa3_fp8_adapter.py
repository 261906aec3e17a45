"""CPU tests of the ``cuda-fa3-fp8`` and ``cuda-fa3-fp8-vt`` adapters (conformance/adapters/cuda.py): registered,
claims exactly the FP8 kernel's features (SEMANTICS.md §10), declines the rest with a reason, unavailable without a
Hopper GPU."""

from __future__ import annotations

import pytest

from attention_conformance.adapters import BUILTIN
from attention_conformance.cases.case import Case, FP8Spec

_DEFAULT = FP8Spec()


def _case(fp8=_DEFAULT, **kw):
    base = dict(family="fp8_test", B=2, Hq=4, Hkv=2, Lq=100, Lk=300, d=128, dv=128, dtype="float8_e4m3fn",
                causal=True, seed=1, fp8=fp8)
    base.update(kw)
    return Case(**base)


def _adapter(cls_name: str):
    from attention_conformance.adapters import cuda

    return getattr(cuda, cls_name)()


BOTH = pytest.mark.parametrize("cls_name", ["CudaFA3FP8", "CudaFA3FP8KMajor"])


def test_registered_under_its_name():
    from attention_conformance.adapters.cuda import CudaFA3FP8

    assert BUILTIN["cuda-fa3-fp8"] == "attention_conformance.adapters.cuda:CudaFA3FP8"
    assert CudaFA3FP8.name == "cuda-fa3-fp8" and CudaFA3FP8.fwd_launcher == "attn_fa3_fp8_fwd"
    assert CudaFA3FP8.bwd_launcher is None and not CudaFA3FP8.capabilities.backward
    vt = BUILTIN["cuda-fa3-fp8-vt"]
    assert vt == "attention_conformance.adapters.cuda:CudaFA3FP8KMajor"
    kmajor = _adapter("CudaFA3FP8KMajor")
    assert kmajor.name == "cuda-fa3-fp8-vt" and kmajor.v_layout == "kmajor" and CudaFA3FP8.v_layout == "rows"
    assert kmajor.capabilities == CudaFA3FP8.capabilities


@pytest.mark.parametrize("fp8", [FP8Spec(granularity=g, format=f) for g in ("per_tensor", "per_head", "per_tile")
                                 for f in ("e4m3fn", "e5m2")] + [FP8Spec(incoherent=True)])
@pytest.mark.parametrize("d", [64, 128])
@BOTH
def test_claims_every_granularity_format_and_head_dim_it_is_built_for(fp8, d, cls_name):
    assert _adapter(cls_name).supports(_case(fp8=fp8, d=d, dv=d), "cuda") is None


@BOTH
def test_claims_the_shared_plumbing(cls_name):
    a = _adapter(cls_name)
    for layout in ("contiguous", "bshd", "kv_broadcast"):
        assert a.supports(_case(layout=layout), "cuda") is None, layout
    assert a.supports(_case(window=(30, 5), causal=False, softcap=5.0), "cuda") is None
    assert a.supports(_case(alignment="top_left", seqlens_q=(50, 100), seqlens_k=(3, 300)), "cuda") is None


@BOTH
@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
def test_claims_each_built_head_dim(d, cls_name):
    assert _adapter(cls_name).supports(_case(d=d, dv=d), "cuda") is None, d


@pytest.mark.parametrize("kw, word", [
    (dict(fp8=None, dtype="bfloat16"), "FP8-only"),
    (dict(d=32, dv=32), "head dim"),
    (dict(d=80, dv=80), "head dim"),
    (dict(d=64, dv=128), "dv=128"),
    (dict(d=192, dv=128), "dv=128"),
    (dict(fp8=FP8Spec(granularity="per_tile", tile_q=64)), "128"),
    (dict(fp8=FP8Spec(granularity="per_tile", tile_k=256)), "128"),
    (dict(mask="random"), "mask"),
    (dict(bias="random"), "bias"),
    (dict(layout="paged128"), "paged"),
])
@BOTH
def test_declines_what_the_kernel_does_not_do(kw, word, cls_name):
    reason = _adapter(cls_name).supports(_case(**kw), "cuda")
    assert reason and word in reason, f"{kw}: expected a refusal naming {word!r}, got {reason!r}"


@BOTH
def test_unavailable_off_cuda_with_a_reason(cls_name):
    reason = _adapter(cls_name).unavailable_reason("cpu")
    assert isinstance(reason, str) and reason
