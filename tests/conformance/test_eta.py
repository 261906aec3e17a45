"""The progress line's time-left model (conformance/running/eta.py)."""

from __future__ import annotations

import pytest

from attention_conformance.running.eta import EtaModel


def test_recovers_overhead_and_rate():
    m = EtaModel()
    for cost in (1e3, 1e6, 5e8, 2e9, 3e10):
        m.observe(cost, 0.4 + 2e-9 * cost)
    a, b = m.coefficients()
    assert a == pytest.approx(0.4, rel=1e-6) and b == pytest.approx(2e-9, rel=1e-6)
    assert m.remaining([0.0, 1e9]) == pytest.approx(0.4 + 0.4 + 2.0, rel=1e-6)


def test_small_cases_first_do_not_explode_the_estimate():
    # 50 small cases of pure overhead, then 1 big case left: the estimate must stay near the
    # overhead per case, not extrapolate 1 s per 1e5 cost units (the old cost-proportional ETA).
    m = EtaModel()
    for i in range(50):
        m.observe(1e4 * (1 + i % 3), 0.2)
    assert m.remaining([3e10]) < 10.0


@pytest.mark.parametrize("pairs", [[(5.0, 1.0)], [(1.0, 3.0), (1.0, 5.0)], [(1e9, 0.0), (0.0, 4.0)]])
def test_coefficients_are_never_negative(pairs):
    m = EtaModel()
    for cost, sec in pairs:
        m.observe(cost, sec)
    a, b = m.coefficients()
    assert a >= 0.0 and b >= 0.0


def test_empty_model_estimates_zero():
    assert EtaModel().remaining([1.0, 2.0]) == 0.0
