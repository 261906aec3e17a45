"""Attention sinks: one extra logit per query head in every row's softmax denominator (SEMANTICS.md §18).

A sink ``sigma_h`` is a score with no value. For a row i of head h with scores ``s_ij`` over its visible keys:

    LSE'_i = log(sum_j exp(s_ij) + exp(sigma_h)),   P_ij = exp(s_ij - LSE'_i),   P_sink,i = exp(sigma_h - LSE'_i)
    out_i  = sum_j P_ij v_j

which is the §14 merge of the sink-free result ``(O_i, LSE_i)`` with one extra partial ``(0, sigma_h)``:

    LSE'_i = logaddexp(LSE_i, sigma_h),   out_i = exp(LSE_i - LSE'_i) O_i     (0 where LSE_i = -inf)

so a fully masked row gets ``out = 0`` and ``LSE' = sigma_h``. `fold_sinks` is that one step; it is applied
once per row, after every split is merged (a sink joins the merge once, not once per split).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fold_sinks", "sink_lse_broadcast"]


def sink_lse_broadcast(sinks: np.ndarray, lse_shape: tuple[int, ...]) -> np.ndarray:
    """The sink logits broadcast to an LSE of shape ``[..., Hq, Lq]`` (the head axis is the second last)."""
    s = np.asarray(sinks, dtype=np.float64)
    if len(lse_shape) < 2 or s.shape != (lse_shape[-2],):
        raise ValueError(f"sinks must have shape [Hq] = [{lse_shape[-2] if len(lse_shape) >= 2 else '?'}] for an "
                         f"LSE of shape [..., Hq, Lq] = {list(lse_shape)} (§18); got sinks.shape={s.shape}")
    return np.broadcast_to(s[:, None], lse_shape)


def fold_sinks(out: np.ndarray, lse: np.ndarray, sinks) -> tuple[np.ndarray, np.ndarray]:
    """Fold the per-head sink logits into a sink-free ``(out [..., Hq, Lq, dv], lse [..., Hq, Lq])`` (§18).

    Returns new float64 arrays: ``lse' = logaddexp(lse, sink)``, ``out' = exp(lse - lse') out``, with rows whose
    sink-free LSE is ``-inf`` (no visible key) giving ``out' = 0`` and ``lse' = sink`` exactly. A sink of
    ``-inf`` changes nothing.
    """
    lse = np.asarray(lse, dtype=np.float64)
    out = np.asarray(out, dtype=np.float64)
    sig = sink_lse_broadcast(sinks, lse.shape)
    new_lse = np.logaddexp(lse, sig)
    keep = lse > -np.inf
    with np.errstate(invalid="ignore"):
        factor = np.where(keep, np.exp(np.where(keep, lse, 0.0) - np.where(keep, new_lse, 0.0)), 0.0)
    new_out = np.where(keep[..., None], factor[..., None] * out, 0.0)
    return new_out, new_lse
