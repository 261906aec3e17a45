"""The CUDA adapters' guard bands and poisoned outputs (issue 6 item 3), checked on CPU tensors.

`GuardedBuffer` is device-agnostic; on the H200 the same object wraps every output of cuda-fa1,
cuda-fa2 and cuda-splitkv, and a changed sentinel raises, which the engine turns into a FAIL.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from attention_conformance.adapters.cuda import GUARD_ELEMS, GuardedBuffer  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fresh_buffer_is_poisoned_and_its_bands_intact(dtype):
    buf = GuardedBuffer("out", (2, 3, 5, 4), dtype, "cpu")
    assert buf.view.shape == (2, 3, 5, 4) and buf.flat.numel() == 2 * 3 * 5 * 4 + 2 * GUARD_ELEMS
    assert torch.isnan(buf.view).all(), "the output view must start as NaN so unwritten elements show"
    assert buf.oob_report() is None
    buf.view.fill_(1.0)  # writing every in-bounds element leaves the bands alone
    assert buf.oob_report() is None


@pytest.mark.parametrize("side,offset", [("after", 0), ("after", GUARD_ELEMS - 1), ("before", 1), ("before", 7)])
def test_a_write_outside_the_view_is_reported_with_name_shape_and_offset(side, offset):
    buf = GuardedBuffer("lse", (1, 2, 33), torch.float32, "cpu")
    n = math.prod(buf.shape)
    pos = GUARD_ELEMS + n + offset if side == "after" else GUARD_ELEMS - offset
    buf.flat[pos] = 0.0
    msg = buf.oob_report()
    assert msg is not None, f"a write {side} the buffer at offset {offset} went unnoticed"
    assert msg.startswith("oob_write: lse (shape (1, 2, 33), dtype float32)"), msg
    where = "past the end" if side == "after" else "before the start"
    assert where in msg and f"offset {offset if side == 'after' else -offset} " in msg, msg
