"""Built-in adapters, imported lazily so that `list` works without torch, flash-attn or a GPU.

Each entry maps the adapter's name to ``module:attribute``; the attribute is an `Adapter`
subclass or instance. A module that cannot be imported makes the adapter unavailable, with the
import error as the reason.
"""

from __future__ import annotations

__all__ = ["BUILTIN"]

BUILTIN: dict[str, str] = {
    "torch-sdpa-math": "attention_conformance.adapters.torch_sdpa:SdpaMath",
    "torch-sdpa-flash": "attention_conformance.adapters.torch_sdpa:SdpaFlash",
    "torch-sdpa-efficient": "attention_conformance.adapters.torch_sdpa:SdpaEfficient",
    "torch-sdpa-cudnn": "attention_conformance.adapters.torch_sdpa:SdpaCudnn",
    "torch-flex": "attention_conformance.adapters.torch_flex:FlexAttention",
    "flash-attn-2": "attention_conformance.adapters.flash_attn:FlashAttn2",
    "flash-attn-3": "attention_conformance.adapters.flash_attn:FlashAttn3",
    "flash-attn-4": "attention_conformance.adapters.flash_attn:FlashAttn4",
    "reference-fa1": "attention_conformance.adapters.reference:ReferenceFA1",
    "reference-fa2": "attention_conformance.adapters.reference:ReferenceFA2",
    "reference-fa3": "attention_conformance.adapters.reference:ReferenceFA3",
    "reference-fa3-fp8": "attention_conformance.adapters.reference:ReferenceFA3FP8",
    "reference-splitkv": "attention_conformance.adapters.reference:ReferenceSplitKV",
    "cuda-fa1": "attention_conformance.adapters.cuda:CudaFA1",
    "cuda-fa2": "attention_conformance.adapters.cuda:CudaFA2",
    "cuda-splitkv": "attention_conformance.adapters.cuda:CudaSplitKV",
    "cuda-fa3": "attention_conformance.adapters.cuda:CudaFA3",
    "cuda-fa3-fp8": "attention_conformance.adapters.cuda:CudaFA3FP8",
    "cuda-fa3-fp8-vt": "attention_conformance.adapters.cuda:CudaFA3FP8KMajor",
    "cudnn-fp8": "attention_conformance.adapters.cudnn_fp8:CudnnFP8",
    "flashinfer": "attention_conformance.adapters.flashinfer:FlashInfer",
    "xformers": "attention_conformance.adapters.xformers:Xformers",
}
