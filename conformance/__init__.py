"""conformance: judge attention kernels against the FP64 oracle (issue 3).

`python -m conformance` (cli.py): list / run / repro / cases / mutants. The case catalog
(catalog.py, inputs.py), the tolerance policy (tolerance.py, TOLERANCES.md), the checks
(checks.py), the engine (engine.py, worker.py, parallel.py), adapters (adapters/, registry.py) and
reports (report.py). See conformance/README.md.

`claims` declares what a plain SDPA-signature function supports (conformance/declared.py).
"""

from conformance.declared import Claims, claims

__all__ = ["Claims", "claims"]
