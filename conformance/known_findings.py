"""Known findings: verdicts the harness reproduces against pinned upstream kernels.

An entry names a named finding class (`conformance.judge.FINDING_CLASSES`, SEMANTICS.md §17) when
the behaviour is one: ``run`` then reports it as FINDING (counted on its own, listed in every
report; FAIL under ``--strict``), and under pytest (`conformance/test_conformance.py`) a matching
(case, adapter, device) must show that finding. A FAIL that matches an entry's recorded symptom is
an expected failure under pytest (xfail, with the reason and the upstream issue), so the default CI
run stays green while the finding stays visible. Either way, if the case PASSes the test fails,
asking for the entry to be removed (the upstream kernel or the harness changed).
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.case import Case

__all__ = ["KnownFinding", "KNOWN_FINDINGS", "known_finding"]


@dataclass(frozen=True)
class KnownFinding:
    """One upstream failure: which adapters, on which device, for which cases, with which symptom."""

    adapters: tuple[str, ...]
    devices: tuple[str, ...]
    distribution: str  # the case's input recipe (conformance/inputs.py)
    symptom: str  # a substring of the engine's failure message
    reason: str
    finding: str | None = None  # the named finding class this is (`conformance.judge.FINDING_CLASSES`), if any

    def matches(self, case: Case, adapter: str, device: str) -> bool:
        return (adapter in self.adapters and device.split(":")[0] in self.devices
                and case.distribution == self.distribution)


KNOWN_FINDINGS: tuple[KnownFinding, ...] = (
    KnownFinding(
        adapters=("torch-sdpa-math", "torch-sdpa-flash", "torch-flex"),
        devices=("cpu",),
        distribution="nan_padding",
        symptom="where the oracle is finite",
        reason=("torch 2.13 CPU: NaN planted in padded rows, which reach SDPA as masked-out positions of a dense "
                "mask, poisons real rows through 0 x NaN (torch #101967 class; SEMANTICS.md §6, §7, §17). sdpa "
                "math and CPU flash: NaN in masked-out K alone or V alone gives NaN rows; flex (eager): masked-out "
                "V (P = 0 times NaN); backward: the fully masked padded q rows give NaN dK, dV (dS = 0 times q = "
                "NaN)"),
        finding="masked_nan",
    ),
)


def known_finding(case: Case, adapter: str, device: str) -> KnownFinding | None:
    """The entry matching (case, adapter name, device), or None."""
    for f in KNOWN_FINDINGS:
        if f.matches(case, adapter, device):
            return f
    return None
