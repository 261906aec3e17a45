"""CUDA paths of the torch adapters (run on a GPU runner: ``pytest -m gpu tests/conformance``).

Skipped cleanly without a CUDA device. Covers what the CPU suite cannot: the pinned SDPA backends on
CUDA (dispatcher refusals in torch's own words, profiler kernel names, LSE through the backends' aten
ops), compiled FlexAttention forward/backward, and a third-party function probed on CUDA.
"""

from __future__ import annotations

import pytest
from adapter_helpers import check_backward, check_forward

from attention_conformance.adapters.torch_flex import FlexAttention
from attention_conformance.adapters.torch_sdpa import SdpaCudnn, SdpaEfficient, SdpaFlash, SdpaMath
from attention_conformance.cases.case import Case

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

C = Case
EXPECTED = {"torch-sdpa-flash": "flash_fwd", "torch-sdpa-efficient": "fmha_cutlassF", "torch-sdpa-cudnn": "cudnn"}


@pytest.mark.parametrize("cls", [SdpaMath, SdpaFlash, SdpaEfficient, SdpaCudnn], ids=lambda c: c.name)
def test_pinned_backend_forward_kernels_and_lse(cls):
    adapter = cls()
    case = C("g", 2, 8, 8, 128, 128, 64, 64, dtype="float16", causal=True)
    fo, _ = check_forward(adapter, case, device="cuda")
    assert fo.out_device.startswith("cuda") and fo.kernels, f"no CUDA kernel captured: {fo.notes}"
    if adapter.name in EXPECTED:
        assert any(EXPECTED[adapter.name] in k for k in fo.kernels), fo.kernels
        assert fo.lse is not None or any("LSE not reported" in n for n in fo.notes), fo.notes
    assert not any("none of the captured" in n or "fused attention kernels ran" in n for n in fo.notes), fo.notes


@pytest.mark.backward
@pytest.mark.parametrize("cls", [SdpaFlash, SdpaEfficient, SdpaCudnn], ids=lambda c: c.name)
def test_pinned_backend_backward(cls):
    check_backward(cls(), C("g", 2, 4, 4, 96, 96, 64, 64, dtype="bfloat16", causal=True, backward=True),
                   device="cuda")


def test_flash_refuses_non_square_causal_in_torchs_words():
    reason = SdpaFlash().supports(C("g", 1, 2, 2, 64, 96, 64, 64, dtype="float16", causal=True,
                                    alignment="top_left"), "cuda")
    assert reason is not None and "seqlen_q != seqlen_k" in reason, reason


def test_flex_compiled_forward_and_backward():
    flex = FlexAttention()
    fo, _ = check_forward(flex, C("g", 2, 4, 4, 100, 130, 64, 64, dtype="bfloat16", causal=True, mask="full_rows"),
                          device="cuda")
    assert fo.lse is not None
    check_backward(flex, C("g", 1, 4, 2, 64, 80, 64, 64, dtype="float32", causal=True, backward=True),
                   device="cuda")


@pytest.mark.xfail(torch.__version__.startswith("2.11."), strict=True, raises=Exception,
                   reason="torch 2.11 inductor on an H200: compiled flex_attention with GQA (Hq 4, Hkv 2) at Lq = 100 "
                          "lowers to flex_decoding, which has no valid config (NoValidChoicesError: 'No choices exist "
                          "for backend'); the MHA case above compiles")
def test_flex_compiled_gqa_short_queries():
    check_forward(FlexAttention(), C("g", 2, 4, 2, 100, 130, 64, 64, dtype="bfloat16", causal=True, mask="full_rows"),
                  device="cuda")


def test_third_party_function_probed_on_cuda():
    from attention_conformance.adapters.third_party import load_impl

    good = load_impl("attention_conformance.examples.good_sdpa:attention")
    assert all(v is None for v in good.probes("cuda").values()), good.probes("cuda")
    check_forward(good, C("g", 2, 4, 2, 33, 65, 64, 64, dtype="float16", causal=True), device="cuda")
