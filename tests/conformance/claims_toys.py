"""Correct SDPA-signature functions with the limits real third-party kernels have, declared and not.

Each computes attention with torch's math backend (right on every case it accepts) and raises, as a
kernel with a narrower interface does, outside its limits: causal-only, head dims {64, 128}, fp16 only.
The ``*_declared`` twins carry `conformance.claims`; the plain ones leave it to the probes.
"""

from __future__ import annotations

import attention_conformance as conformance

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # collected without torch: the tests importorskip it
    torch = None


def _sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                              enable_gqa=enable_gqa)


def unlimited(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _sdpa(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def causal_only(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if not is_causal or attn_mask is not None:
        raise ValueError("this kernel computes causal attention only (is_causal=True, no attn_mask)")
    return _sdpa(q, k, v, None, True, scale, enable_gqa)


def head_dims_64_128(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if q.shape[-1] not in (64, 128) or v.shape[-1] not in (64, 128):
        raise NotImplementedError(f"head dim {q.shape[-1]}/{v.shape[-1]}: only 64 and 128 are compiled")
    return _sdpa(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def fp16_only(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if q.dtype != torch.float16:
        raise TypeError(f"expected float16 inputs, got {q.dtype}")
    return _sdpa(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def _twin(fn):
    """A separate function object calling `fn` (so a declaration on it leaves `fn` undeclared)."""

    def twin(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return fn(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    return twin


causal_only_declared = conformance.claims(causal="only")(_twin(causal_only))
head_dims_64_128_declared = conformance.claims(head_dims=(64, 128))(_twin(head_dims_64_128))
fp16_only_declared = conformance.claims(dtypes=("float16",))(_twin(fp16_only))
