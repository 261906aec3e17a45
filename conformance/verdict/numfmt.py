"""How numbers appear in verdict messages and reports: one helper for every module.

- `value`: a value the kernel returned or the oracle computed, as Python's shortest round-trip
  ``repr`` of the float64 (``0.1868896484375``, ``-0.010804179148237``, ``nan``, ``inf``), so two values
  that differ never print the same, and NumPy scalars never print as ``np.float64(nan)``;
- `approx`: an error, a tolerance, a usage ratio: 3 significant digits (``n/a`` for None);
- `index`: an array index as ``[1, 0, 0, 0]``;
- `mib`: a byte count in MiB with one decimal (``16.1``), ``n/a`` for None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["approx", "index", "mib", "value"]


def _special(x: object) -> str | None:
    """``n/a`` for None, ``nan`` / ``inf`` / ``-inf`` for non-finite values, else None (format the number)."""
    if x is None:
        return "n/a"
    f = float(x)  # type: ignore[arg-type]
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return None


def value(x: object) -> str:
    """Shortest round-trip repr of ``float(x)`` (``nan``, ``inf``, ``-inf`` for non-finite); ``n/a`` for None."""
    special = _special(x)
    return special if special is not None else repr(float(x))  # type: ignore[arg-type]


def approx(x: object, digits: int = 3) -> str:
    """``x`` to `digits` significant digits (``n/a`` for None)."""
    special = _special(x)
    return special if special is not None else f"{float(x):.{digits}g}"  # type: ignore[arg-type]


def index(idx: Iterable[int] | None) -> str:
    """``[1, 0, 0, 0]`` for an index tuple (``n/a`` for None)."""
    if idx is None:
        return "n/a"
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def mib(n: object) -> str:
    """Bytes as MiB with one decimal (``mib(16 * 2**20 + 2**17)`` -> ``16.1``); ``n/a`` for None."""
    return "n/a" if n is None else f"{float(n) / 2**20:.1f}"  # type: ignore[arg-type]
