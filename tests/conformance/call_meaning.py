"""What an attention call computes, read back from its arguments through each API's documented semantics.

test_variant_claims.py has every built-in spelling translate every case it claims (`sdpa_args`, `flex_args`,
``FlashAttn*.call_for``: the arguments the adapter would pass, no kernel run) and compares what that call means,
read here, with what the case asks (oracles/SEMANTICS.md). These readers are written from the vendors'
documentation, not from the adapters:

- torch SDPA (``torch.nn.functional.scaled_dot_product_attention``): ``is_causal=True`` keeps the top-left lower
  triangle (key j for query i iff j <= i); a boolean ``attn_mask`` keeps its True entries; a float ``attn_mask``
  is added to the scaled scores (-inf removes a key); ``is_causal`` with an ``attn_mask`` is an error;
  ``torch.nn.attention.bias.causal_upper_left(Lq, Lk)`` is the top-left triangle, ``causal_lower_right`` the one
  whose diagonal ends in the bottom-right corner (j <= i + Lk - Lq); ``scale=None`` is 1/sqrt(d); query heads
  are grouped over fewer key/value heads only with ``enable_gqa=True``.
- FlexAttention: the block mask keeps (b, h, q_idx, kv_idx) where ``mask_mod`` is True; ``score_mod(score, b, h,
  q_idx, kv_idx)`` rewrites each scaled score; ``scale=None`` is 1/sqrt(d); ``enable_gqa`` as for SDPA.
- flash-attn (FA2 / FA3 / FA4 interface docstrings): per sequence, with seqlen_q = sq and seqlen_k = sk, causal
  keeps j <= i + sk - sq (aligned to the bottom-right corner); ``window_size=(left, right)`` keeps
  i + sk - sq - left <= j <= i + sk - sq + right, -1 (FA2 / FA3) or None (FA4) meaning unbounded, causal
  setting right to 0; ``softcap=c`` (0: none) maps a scaled score s to c * tanh(s / c); ``softmax_scale=None``
  is 1/sqrt(d); the lengths are the full Lq, Lk (``flash_attn_func``), the differences of ``cu_seqlens_q`` /
  ``cu_seqlens_k`` (packed varlen), ``cache_seqlens`` keys with Lq queries (``flash_attn_with_kvcache``), or
  ``seqused_q`` / ``seqused_k``; GQA is native; ``learnable_sink`` adds the sink logits; a block table
  (``block_table`` / ``page_table``) reads K/V from page caches; ``q_descale`` / ``k_descale`` / ``v_descale``
  dequantize FP8 inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Meaning", "read_flash_attn", "read_flex", "read_sdpa"]


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _softcap(c: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: c * np.tanh(x / c)


@dataclass
class Meaning:
    """What one call computes, in the contract's terms (SEMANTICS.md)."""

    visible: np.ndarray  # bool, broadcastable to [B, H, Lq, Lk]: key j takes part for query i (§4-§7, §19)
    bias: np.ndarray | None  # additive score term, broadcastable likewise (§6)
    transform: Callable[[np.ndarray], np.ndarray]  # scaled score -> logit before the bias (softcap, §3)
    scale: float
    gqa: bool  # query heads are grouped over the key/value heads (§9)
    dropout_p: float = 0.0
    sinks: str | None = None  # the input the sink logits come from (§18)
    paged: bool = False  # K/V read from page caches through the block table (§16)
    fp8_descales: bool = False  # FP8 codes dequantized with the descales (§10)
    kv_append: bool = False  # new K/V rows written into a cache at cache_seqlens (§20)


def _default_scale(scale: float | None, d: int) -> float:
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def read_sdpa(args, B: int, Lq: int, Lk: int, d: int) -> Meaning:
    """The meaning of `args` (a `torch_sdpa.SdpaArgs`) on q [B, H, Lq, d] and k [B, Hkv, Lk, d]."""
    bias = None
    if args.causal_bias is not None:
        if args.attn_mask is not None or args.is_causal:
            raise ValueError("a CausalBias is the attn_mask itself, with is_causal=False")
        if args.causal_bias not in ("causal_upper_left", "causal_lower_right"):
            raise ValueError(f"no CausalBias {args.causal_bias!r} in torch.nn.attention.bias")
        diagonal = 0 if args.causal_bias == "causal_upper_left" else Lk - Lq
        visible = np.tri(Lq, Lk, diagonal, dtype=bool)[None, None]
    elif args.is_causal:
        if args.attn_mask is not None:
            raise ValueError("torch refuses is_causal=True together with an explicit attn_mask")
        visible = np.tri(Lq, Lk, 0, dtype=bool)[None, None]
    elif args.attn_mask is None:
        visible = np.ones((1, 1, Lq, Lk), dtype=bool)
    elif args.attn_mask.dtype == bool:
        visible = args.attn_mask
    else:
        visible, bias = np.ones((1, 1, Lq, Lk), dtype=bool), args.attn_mask
    return Meaning(visible, bias, _identity, _default_scale(args.scale, d), gqa=bool(args.enable_gqa),
                   dropout_p=float(args.dropout_p))


def read_flex(args, B: int, Hq: int, Lq: int, Lk: int, d: int) -> Meaning:
    """The meaning of `args` (a `torch_flex.FlexArgs`): its mods evaluated on every (b, h, q_idx, kv_idx)."""
    import torch

    def grid(H: int):
        return (torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1),
                torch.arange(Lq).view(1, 1, Lq, 1), torch.arange(Lk).view(1, 1, 1, Lk))

    visible = np.ones((1, 1, Lq, Lk), dtype=bool)
    if args.mask_mod is not None:
        H = Hq if args.mask_heads > 1 else 1
        visible = np.broadcast_to(args.mask_mod(*grid(H)).numpy(), (B, H, Lq, Lk))
    bias, transform = None, _identity
    if args.score_mod is not None:
        zero = torch.zeros((B, Hq, Lq, Lk), dtype=torch.float64)
        bias = args.score_mod(zero, *grid(Hq)).double().numpy()
        at = [torch.zeros((), dtype=torch.long)] * 4
        base = float(args.score_mod(torch.zeros((), dtype=torch.float64), *at))

        def transform(x: np.ndarray) -> np.ndarray:  # position (0, 0, 0, 0) less its bias
            s = torch.from_numpy(np.asarray(x, dtype=np.float64))
            return args.score_mod(s, *at).double().numpy() - base
    return Meaning(visible, bias, transform, _default_scale(args.scale, d), gqa=bool(args.enable_gqa))


def _handed_name(value) -> str | None:
    from attention_conformance.adapters.flash_attn import Handed

    return value.name if isinstance(value, Handed) else None


def read_flash_attn(call, B: int, Lq: int, Lk: int, d: int) -> Meaning:
    """The meaning of `call` (a `flash_attn.FaCall`) on q [B, Lq, H, d] and k [B, Lk, Hkv, d]."""
    kw = {**call.kwargs, **call.optional}
    if call.tensors == "packed":
        sq, sk = np.diff(kw["cu_seqlens_q"]), np.diff(kw["cu_seqlens_k"])
    elif "cache_seqlens" in kw:
        sq, sk = np.full(B, Lq), np.asarray(kw["cache_seqlens"])
    else:
        sq = np.asarray(kw["seqused_q"]) if "seqused_q" in kw else np.full(B, Lq)
        sk = np.asarray(kw["seqused_k"]) if "seqused_k" in kw else np.full(B, Lk)
    left, right = kw.get("window_size", (None, None))
    left = None if left is None or left < 0 else int(left)
    right = None if right is None or right < 0 else int(right)
    if kw.get("causal", False):
        right = 0 if right is None else min(right, 0)
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    visible = np.zeros((B, 1, Lq, Lk), dtype=bool)
    for b in range(B):
        diag = i + int(sk[b]) - int(sq[b])
        keep = (i < sq[b]) & (j < sk[b])
        if right is not None:
            keep &= j <= diag + right
        if left is not None:
            keep &= j >= diag - left
        visible[b, 0] = keep
    cap = kw.get("softcap") or 0.0
    table = [_handed_name(kw.get(k)) for k in ("block_table", "page_table")]
    return Meaning(
        visible, None, _softcap(cap) if cap else _identity, _default_scale(kw.get("softmax_scale"), d), gqa=True,
        dropout_p=float(kw.get("dropout_p", 0.0)), sinks=_handed_name(kw.get("learnable_sink")),
        paged=call.tensors == "paged" and "paged.block_table" in table,
        fp8_descales=all(k in kw for k in ("q_descale", "k_descale", "v_descale")),
        kv_append=any(k in kw for k in ("k", "v")),
    )
