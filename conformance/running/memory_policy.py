"""How the engine runs a ``memory`` family case: on CUDA only, after one unmeasured warm-up call.

Peak device memory is recorded on CUDA only (`conformance.running.peak_memory`), so a ``memory`` case on another
device is NOT_SUPPORTED with the reason (`unsupported_reason`); on CUDA the engine calls the adapter once before
the measured call (`needs_warmup`), so one-time workspaces are in the baseline, not in the smallest N's peak.
"""

from __future__ import annotations

from typing import Any

from attention_conformance.verdict.growth import FAMILY

__all__ = ["needs_warmup", "unsupported_reason"]


def unsupported_reason(case: Any, device: str) -> str | None:
    """Why a ``memory`` family case cannot run on `device` (peak memory is measured on CUDA only), else None."""
    if getattr(case, "family", None) == FAMILY and not str(device).startswith("cuda"):
        return (f"the {FAMILY} family measures peak device memory, which is recorded on CUDA only "
                f"(device {device!r})")
    return None


def needs_warmup(case: Any, device: str) -> bool:
    """True for a ``memory`` family case on CUDA: the engine calls the adapter once, unmeasured, before the
    measured call, so one-time allocations (cuBLAS / cuDNN workspaces kept by torch's allocator, lazily loaded
    kernel modules) are in the baseline and not in the smallest N's peak, where they would bias the exponent."""
    return getattr(case, "family", None) == FAMILY and str(device).startswith("cuda")
