"""kernels/timing.py on the CPU: warm-up, synchronize, one event pair per sample (fake CUDA events)."""

from __future__ import annotations

import pytest

from attention_conformance.kernels.timing import cuda_event_median_ms, cuda_event_times_ms

torch = pytest.importorskip("torch")


class _FakeEvent:
    clock = 0.0
    log: list[str] = []

    def __init__(self, enable_timing: bool = False):
        assert enable_timing, "timing events must be created with enable_timing=True"
        self.t = None

    def record(self):
        self.t = _FakeEvent.clock
        _FakeEvent.log.append("record")

    def synchronize(self):
        _FakeEvent.log.append("sync-event")

    def elapsed_time(self, end):
        return end.t - self.t


@pytest.fixture
def fake_cuda(monkeypatch):
    _FakeEvent.clock, _FakeEvent.log = 0.0, []
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: _FakeEvent.log.append("sync-device"))
    return _FakeEvent


def test_samples_bracket_each_call(fake_cuda):
    durations = iter([9.0, 9.0, 1.0, 3.0, 2.0])  # two warm-up calls, then three timed ones

    def call():
        fake_cuda.log.append("call")
        fake_cuda.clock += next(durations)

    assert cuda_event_times_ms(call, reps=3, warmup=2) == [1.0, 3.0, 2.0]
    assert fake_cuda.log[:3] == ["call", "call", "sync-device"]
    assert fake_cuda.log[3:] == ["record", "call", "record", "sync-event"] * 3


def test_median(fake_cuda):
    durations = iter([5.0, 1.0, 4.0, 2.0])

    def call():
        fake_cuda.clock += next(durations)

    assert cuda_event_median_ms(call, reps=4, warmup=0) == 3.0  # statistics.median of 5, 1, 4, 2


def test_round_robin_interleaves_candidates_and_keeps_the_median_of_rounds():
    from attention_conformance.kernels.timing import time_round_robin

    order: list[str] = []
    samples = {"a": iter([3.0, 1.0, 2.0]), "b": iter([4.0, 4.0, 8.0])}

    def refuses():
        raise RuntimeError("no kernel for this shape\nsecond line")

    def timer(fn):
        name = fn()
        order.append(name)
        return next(samples[name])

    row: dict = {}
    time_round_robin(row, [("a", lambda: "a"), ("b", lambda: "b"), ("c", refuses)], flops=2e12, rounds=3, timer=timer)
    # in turn, odd rounds backwards (no candidate always follows the same one); a refusing candidate is not timed again
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert row["a_ms"] == 2.0 and row["a_tflops"] == 2e12 / 2.0 / 1e9 and row["a_spread"] == (3.0 - 1.0) / 2.0
    assert row["b_ms"] == 4.0 and row["b_spread"] == 1.0
    assert row["c_error"] == "no kernel for this shape" and "c_ms" not in row
