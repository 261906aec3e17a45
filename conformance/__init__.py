"""attention_conformance: judge attention kernels against the FP64 oracle.

The one import name this distribution installs: the repository's conformance/ folder is this package, and
the folders beside it are its subpackages (`attention_conformance.oracles`, `.kernels`, `.property_tests`,
`.reports`; pyproject.toml maps them), so nothing shadows Hugging Face's `kernels` or another `reports`.

`python -m attention_conformance` (cli.py): list / run / repro / cases / mutants. The case catalog
(catalog.py, inputs.py), the tolerance policy (tolerance.py, TOLERANCES.md), the checks
(checks.py), the engine (engine.py, worker.py, parallel.py), adapters (adapters/, registry.py) and
reports (report.py). See conformance/README.md.

`claims` declares what a plain SDPA-signature function supports (conformance/adapters/declared.py); `CallDeclined`
is what a function raises when the library it wraps refuses a call itself (NOT_SUPPORTED, conformance/cases/calldata.py).
"""

from attention_conformance.adapters.declared import Claims, claims
from attention_conformance.cases.calldata import CallDeclined

__all__ = ["CallDeclined", "Claims", "claims"]
