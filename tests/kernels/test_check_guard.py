"""kernels/check/guard.py on the CPU: the sentinel bands around an output notice a write past either end."""

from __future__ import annotations

import pytest

from attention_conformance.kernels.check.guard import GUARD, SENTINEL, guard_ok, guarded

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_sentinel_is_exact_and_the_output_starts_as_nan(dtype):
    buf, view = guarded((2, 3, 5), getattr(torch, dtype), "cpu")
    assert view.shape == (2, 3, 5) and view.is_contiguous() and torch.isnan(view).all()
    assert buf.numel() == 30 + 2 * GUARD and float(buf[0]) == SENTINEL and guard_ok(buf)
    view.fill_(1.0)  # writing the whole output leaves the bands alone
    assert guard_ok(buf)


@pytest.mark.parametrize("where", [GUARD - 1, GUARD + 30])
def test_a_write_next_to_the_output_is_seen(where):
    buf, _ = guarded((2, 3, 5), torch.bfloat16, "cpu")
    buf[where] = 0.0
    assert not guard_ok(buf)
