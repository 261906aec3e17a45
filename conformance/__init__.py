"""attention_conformance: judge attention kernels against the FP64 oracle.

The one import name this distribution installs: the repository's conformance/ folder is this package, and
the folders beside it are its subpackages (`attention_conformance.oracles`, `.kernels`, `.property_tests`;
pyproject.toml maps them), so nothing shadows Hugging Face's `kernels`.

The package root holds the front ends: `python -m attention_conformance` (cli.py: list / run / repro / cases /
merge / mutants), the pytest plugin (pytest_plugin.py) and the conformance test module (test_conformance.py).
The rest is one subpackage per concern: `cases` (the case model and the catalog), `verdict` (oracle values,
bounds, checks, the judge, expectations), `running` (engine, workers, shards), `reporting` (reports and joins of
reports), `reproduce` (repro snippets and standalone files) and `adapters` (the implementations under test and
their loading). See conformance/README.md.

`claims` declares what a plain SDPA-signature function supports (conformance/adapters/declared.py); `CallDeclined`
is what a function raises when the library it wraps refuses a call itself (NOT_SUPPORTED, cases/calldata.py).
"""

from attention_conformance.adapters.declared import Claims, claims
from attention_conformance.cases.calldata import CallDeclined

__all__ = ["CallDeclined", "Claims", "claims"]
