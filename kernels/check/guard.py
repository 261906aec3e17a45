"""Output buffers between sentinel guard bands: a launcher that writes past its output changes a sentinel.

`guarded` allocates ``GUARD`` sentinel elements, the output, and ``GUARD`` more in one flat buffer and fills the
output with NaN, so an element the launcher leaves unwritten stays NaN (attn_params.h: a launcher writes every real
row of O and LSE and no padded one, SEMANTICS.md §7); `guard_ok` says whether both bands still hold the sentinel.
The sentinel, 12288 = 3 * 2^12, is exact in fp16, bf16 and fp32, so the comparison never depends on a rounding.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["GUARD", "SENTINEL", "guard_ok", "guarded"]

#: sentinel elements before and after every output
GUARD = 4096
#: the value the guard bands hold (exact in fp16, bf16 and fp32)
SENTINEL = 12288.0


def guarded(shape: tuple[int, ...], dtype: Any, device: Any, fill: float = float("nan")) -> tuple[Any, Any]:
    """``(buffer, view)``: a flat torch buffer of ``GUARD`` sentinels, ``prod(shape)`` elements and ``GUARD``
    sentinels, and the middle part as a contiguous tensor of ``shape`` filled with ``fill``."""
    import torch

    n = math.prod(shape)
    buf = torch.full((n + 2 * GUARD,), SENTINEL, dtype=dtype, device=device)
    view = buf[GUARD:GUARD + n].view(shape)
    view.fill_(fill)
    return buf, view


def guard_ok(buf: Any) -> bool:
    """True when both guard bands of a `guarded` buffer still hold the sentinel everywhere."""
    return bool((buf[:GUARD] == SENTINEL).all() and (buf[-GUARD:] == SENTINEL).all())
