"""CPU tests of the ``cuda-fa3`` adapter (conformance/adapters/cuda.py): registered, declines what it does
not claim with a reason (the backward: head dims 64, 96 and 128 only), and is unavailable without a Hopper GPU
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
    for kw, word in ((dict(d=80, dv=80), "head dim"), (dict(d=128, dv=96), "dv != d"), (dict(dtype="float32"), "dtype"),
                     (dict(layout="paged128"), "paged")):
        reason = a.supports(_case(**kw), "cuda")
        assert reason and word in reason, f"{kw}: expected a refusal naming {word!r}, got {reason!r}"


def test_claims_the_forward_builds_of_each_head_dim():
    """The forward claims exactly the (d, dv) builds of attn_fa3_fwd (fwd_launch.cuh fa3_fwd_head_dims): d = dv in
    {64, 96, 128, 192, 256} and (192, 128)."""
    from attention_conformance.adapters.cuda import CudaFA3

    a = CudaFA3()
    for d, dv in ((64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128)):
        assert a.supports(_case(d=d, dv=dv), "cuda") is None, (d, dv)
    for d, dv in ((96, 128), (128, 192), (256, 128), (192, 96)):
        reason = a.supports(_case(d=d, dv=dv), "cuda")
        assert reason and "dv != d" in reason, (d, dv, reason)


def test_claims_the_backward_builds_of_each_head_dim():
    """The backward claims exactly the (d, dv) builds of attn_fa3_bwd (bwd_launch.cuh fa3_bwd_head_dims): d = dv in
    {64, 96, 128} (bwd_mainloop.cuh) and {192, 256}, (192, 128) (bwd_wide.cuh); other pairs are declined naming dv."""
    from attention_conformance.adapters.cuda import CudaFA3

    a = CudaFA3()
    for d, dv in ((64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128)):
        assert a.supports(_case(d=d, dv=dv, backward=True), "cuda") is None, (d, dv)
        assert a.supports(_case(d=d, dv=dv, backward=True, lse_grad=True), "cuda") is None, (d, dv)
    for d, dv in ((256, 128), (128, 64)):
        reason = a.supports(_case(d=d, dv=dv, backward=True), "cuda")
        assert reason and "dv != d" in reason, (d, dv, reason)
    reason = a.supports(_case(d=160, dv=160, backward=True), "cuda")
    assert reason and "head dim" in reason, reason


def test_unavailable_off_cuda_with_a_reason():
    from attention_conformance.adapters.cuda import CudaFA3

    reason = CudaFA3().unavailable_reason("cpu")
    assert isinstance(reason, str) and reason
