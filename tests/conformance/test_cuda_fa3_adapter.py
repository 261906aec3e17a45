"""CPU tests of the ``cuda-fa3`` adapter (conformance/adapters/cuda.py): registered, declines what it does
not claim with a reason (the backward: head dims 64 and 128 only), and is unavailable without a Hopper GPU
(never a FAIL of a correct kernel)."""

from __future__ import annotations

from attention_conformance.adapters import BUILTIN
from attention_conformance.cases.case import Case


def _case(**kw):
    base = dict(family="fa3_test", B=2, Hq=4, Hkv=2, Lq=100, Lk=300, d=128, dv=128, dtype="bfloat16", causal=True,
                seed=1)
    base.update(kw)
    return Case(**base)


def test_registered_under_its_name():
    from attention_conformance.adapters.cuda import CudaFA3

    assert BUILTIN["cuda-fa3"] == "attention_conformance.adapters.cuda:CudaFA3"
    assert CudaFA3.name == "cuda-fa3" and CudaFA3.fwd_launcher == "attn_fa3_fwd"
    assert CudaFA3.bwd_launcher == "attn_fa3_bwd"


def test_claims_the_kernels_features_and_declines_the_rest():
    from attention_conformance.adapters.cuda import CudaFA3

    a = CudaFA3()
    for layout in ("contiguous", "bshd", "kv_broadcast"):
        assert a.supports(_case(layout=layout), "cuda") is None, layout
    assert a.supports(_case(window=(30, 5), causal=False, softcap=5.0), "cuda") is None
    for kw, word in ((dict(d=96, dv=96), "head dim"), (dict(dtype="float32"), "dtype"),
                     (dict(layout="paged128"), "paged")):
        reason = a.supports(_case(**kw), "cuda")
        assert reason and word in reason, f"{kw}: expected a refusal naming {word!r}, got {reason!r}"


def test_claims_backward_for_head_dims_64_and_128_only():
    from attention_conformance.adapters.cuda import CudaFA3

    a = CudaFA3()
    for d in (64, 128):
        assert a.supports(_case(d=d, dv=d, backward=True), "cuda") is None, d
        assert a.supports(_case(d=d, dv=d, backward=True, lse_grad=True), "cuda") is None, d
    reason = a.supports(_case(d=256, dv=256, backward=True), "cuda")
    assert reason and "backward head dim d=256" in reason, reason
    assert a.supports(_case(d=256, dv=256), "cuda") is None  # the forward still covers 256


def test_unavailable_off_cuda_with_a_reason():
    from attention_conformance.adapters.cuda import CudaFA3

    reason = CudaFA3().unavailable_reason("cpu")
    assert isinstance(reason, str) and reason
