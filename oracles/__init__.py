"""FP64 attention oracles: the ground truth every kernel is judged against (see oracles/SEMANTICS.md).

Public API (NumPy in, float64 out):

- `attention`, `attention_backward`: dense exact forward / analytic backward.
- `streaming_attention`: an independently written row-streaming online-softmax forward.
- `merge_partials`, `split_partials`: split-KV partials and their merge (Flash-Decoding, §14).
- `visibility`: dense boolean mask for causal / window / varlen / chunk semantics (§4, §5, §7, §19).
- `fold_sinks`: fold per-head sink logits into a sink-free (out, lse) (§18); `kv_append`: KV-cache append (§20).
- `numerical_gradients`, `gradcheck`, `compare_gradients`: central-difference gradient checker.
- `python -m attention_conformance.oracles.selfcheck`, `python -m attention_conformance.oracles.lab`, `python -m
attention_conformance.oracles.bench`: self-check, seed lab, speed.
- `fp8` (lazy submodule, written separately): FP8 quantisation and the random Hadamard transform.
- `formats` (submodule): the formats inputs and kernels are rounded to, and one exact rounding to each (§1, §10).
"""

from __future__ import annotations

import importlib

from .forward import attention
from .masking import visibility
from .validate import validate

__all__ = [
    "attention",
    "attention_backward",
    "streaming_attention",
    "merge_partials",
    "split_partials",
    "visibility",
    "validate",
    "fold_sinks",
    "kv_append",
    "central_differences",
    "numerical_gradients",
    "gradcheck",
    "compare_gradients",
    "fp8",
    "hadamard",
]

_LAZY = {
    "attention_backward": ("backward", "attention_backward"),
    "streaming_attention": ("streaming", "streaming_attention"),
    "merge_partials": ("merge", "merge_partials"),
    "split_partials": ("merge", "split_partials"),
    "numerical_gradients": ("numgrad", "numerical_gradients"),
    "gradcheck": ("numgrad", "gradcheck"),
    "compare_gradients": ("numgrad", "compare_gradients"),
    "central_differences": ("numgrad", "central_differences"),
    "fold_sinks": ("sinks", "fold_sinks"),
    "kv_append": ("kvcache", "kv_append"),
}


def __getattr__(name: str):
    """Import submodules on first access, so `import oracles` works before every file exists."""
    if name in ("fp8", "hadamard"):
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
