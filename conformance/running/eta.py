"""Time-left estimate for long runs: per-case seconds modelled as ``a + b * estimated_cost``.

A cost-proportional ETA is wrong both ways on real profiles: small cases are dominated by a fixed
per-case overhead (adapter set-up, cuDNN plan building, tolerance checks), large ones by the
score-matrix work. The two coefficients are fitted by non-negative least squares on the cases
already finished, so the estimate learns the overhead of the machine it runs on.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["EtaModel"]


class EtaModel:
    """Online fit of seconds per case against ``conformance.cases.catalog.estimated_cost``."""

    def __init__(self) -> None:
        self._n = 0
        self._sc = self._scc = self._st = self._stc = 0.0

    def observe(self, cost: float, seconds: float) -> None:
        """Record one finished case."""
        self._n += 1
        self._sc += cost
        self._scc += cost * cost
        self._st += seconds
        self._stc += seconds * cost

    def coefficients(self) -> tuple[float, float]:
        """``(a, b)`` >= 0 minimising sum (a + b * cost - seconds)^2 over the observed cases."""
        n, sc, scc, st, stc = self._n, self._sc, self._scc, self._st, self._stc
        if n == 0:
            return 0.0, 0.0
        det = n * scc - sc * sc
        if det > 1e-12 * max(n * scc, 1e-300):
            a = (scc * st - sc * stc) / det
            b = (n * stc - sc * st) / det
            if a >= 0.0 and b >= 0.0:
                return a, b
        # Constrained optima on the edges: overhead only, or cost only; keep the better fit.
        a_only = st / n
        b_only = stc / scc if scc > 0 else 0.0

        def sse(a: float, b: float) -> float:
            return n * a * a + b * b * scc + 2 * a * b * sc - 2 * a * st - 2 * b * stc

        return (a_only, 0.0) if sse(a_only, 0.0) <= sse(0.0, b_only) else (0.0, b_only)

    def remaining(self, costs: Iterable[float]) -> float:
        """Estimated seconds for the cases of these costs."""
        a, b = self.coefficients()
        return sum(a + b * c for c in costs)
