"""Built-in adapters, imported lazily so that `list` works without torch, flash-attn or a GPU.

Each entry maps the adapter's name to ``module:attribute``; the attribute is an `Adapter`
subclass or instance. A module that cannot be imported makes the adapter unavailable, with the
import error as the reason.
"""

from __future__ import annotations

__all__ = ["BUILTIN"]

BUILTIN: dict[str, str] = {
    "torch-sdpa-math": "conformance.adapters.torch_sdpa:SdpaMath",
    "torch-sdpa-flash": "conformance.adapters.torch_sdpa:SdpaFlash",
    "torch-sdpa-efficient": "conformance.adapters.torch_sdpa:SdpaEfficient",
    "torch-sdpa-cudnn": "conformance.adapters.torch_sdpa:SdpaCudnn",
    "torch-flex": "conformance.adapters.torch_flex:FlexAttention",
    "flash-attn-2": "conformance.adapters.flash_attn:FlashAttn2",
    "flash-attn-3": "conformance.adapters.flash_attn:FlashAttn3",
    "flash-attn-4": "conformance.adapters.flash_attn:FlashAttn4",
    "reference-fa1": "conformance.adapters.reference:ReferenceFA1",
    "reference-fa2": "conformance.adapters.reference:ReferenceFA2",
    "reference-fa3": "conformance.adapters.reference:ReferenceFA3",
    "reference-fa3-fp8": "conformance.adapters.reference:ReferenceFA3FP8",
    "reference-splitkv": "conformance.adapters.reference:ReferenceSplitKV",
    "cuda-fa1": "conformance.adapters.cuda:CudaFA1",
    "cuda-fa2": "conformance.adapters.cuda:CudaFA2",
    "cuda-splitkv": "conformance.adapters.cuda:CudaSplitKV",
    "cuda-fa3": "conformance.adapters.cuda:CudaFA3",
}
