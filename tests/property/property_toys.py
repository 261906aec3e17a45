"""Toy adapters for the property suite's own tests (tests/property/test_declared_properties.py), importable by module
name (``--impl property_toys:Biased``) with tests/property on PYTHONPATH. Each is the NumPy FA2 reference kernel
declaring forward, float32 and one head dim, 64, with one change."""

from __future__ import annotations

import dataclasses

from attention_conformance.adapters.base import CallDeclined, Capabilities
from attention_conformance.adapters.reference import ReferenceFA2
from attention_conformance.cases.calldata import under_test
from attention_conformance.cases.case import Case

#: forward only, float32, d = dv = 64, no masks or varlen (so every draw is cheap)
D64 = dataclasses.replace(
    ReferenceFA2.capabilities, dtypes=frozenset({"float32"}), head_dims=frozenset({64}), backward=False, mask=False,
    bias=False, window=False, varlen=False, sinks=False, chunk=False, lse_grad=False)


class _Toy(ReferenceFA2):
    capabilities: Capabilities = D64


class DeclinesD64(_Toy):
    """Claims d = 64 and declines it in supports(): a limit written only there (the property must fail)."""

    name = "toy-declines-d64"

    def supports(self, case: Case, device: str) -> str | None:
        return super().supports(case, device) or ("d = 64 not compiled" if case.d == 64 else None)


class RaisesD64(_Toy):
    """Claims d = 64 and raises on it, as a kernel without that build does (the property must fail)."""

    name = "toy-raises-d64"

    def forward(self, inputs, case, device):
        with under_test():
            raise ValueError(f"KernelUnsupported: head_dim={case.d}")


class LibraryDeclinesLong(_Toy):
    """Its library refuses Lk > 17 at run time, a refusal the declaration announces (``library_check``): such draws
    are rejected and counted, the rest judged."""

    name = "toy-library-declines-long"
    capabilities = dataclasses.replace(D64, library_check="the toy library's own length check")

    def forward(self, inputs, case, device):
        if case.Lk > 17:
            raise CallDeclined(f"the toy library refuses Lk={case.Lk} > 17")
        return super().forward(inputs, case, device)


class Biased(_Toy):
    """Adds 0.01 to every output element: a wrong kernel (FAIL in ``out``), a known finding when an entry says so."""

    name = "toy-biased"

    def forward(self, inputs, case, device):
        fo = super().forward(inputs, case, device)
        fo.out = fo.out + 1e-2
        return fo
