"""CUDA attention kernels (FA1, FA2 forward/backward, split-KV, FA3 forward/backward and FP8 forward for Hopper, the
FP8 input kernels) built into libattn_kernels.so.

Sources: kernels/cuda/*.cu plus shared headers in kernels/cuda/include/ (attn_params.h is the C ABI).
Build with ``python -m attention_conformance.kernels.build``; load and call with `kernels.cuda_lib`; validate with the
``cuda-*`` conformance adapters; ``python -m attention_conformance.kernels.cuda.sanitize_cases`` is the small case set
that ``tox -e sanitize`` runs under compute-sanitizer; ``python -m attention_conformance.kernels.cuda.ptx_diff``
compares the PTX of the kernels with a git revision's. The lab build (kernels/cuda/lab: ablation, tuning and timing
builds chosen by name) lives beside them in a checkout and is not part of the installed package. Design records:
docs/ (fa1_fa2.md, fa3_forward.md, fa3_backward.md, fp8.md, split_kv.md, quantization.md).
"""

__all__: list[str] = []
