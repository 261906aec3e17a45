"""CUDA attention kernels (FA1, FA2 forward/backward, split-KV) built into libattn_kernels.so.

Sources: kernels/cuda/*.cu plus shared headers in kernels/cuda/include/ (attn_params.h is the C ABI).
Build with ``python -m attention_conformance.kernels.build``; load with `kernels.cuda_lib`; validate with the
``cuda-fa1`` / ``cuda-fa2`` / ``cuda-splitkv`` conformance adapters; ``python -m
attention_conformance.kernels.cuda.sanitize_cases`` is the small case set that ``tox -e sanitize`` runs under
compute-sanitizer. Performance notes: docs/fa1_fa2.md.
"""

__all__: list[str] = []
