"""Known findings: FAIL verdicts the harness reproduces against pinned upstream kernels.

`python -m conformance run` reports them as FAIL like any other failure (nothing is hidden there).
Under pytest (`conformance/test_conformance.py`), a (case, adapter, device) that matches an entry
here and FAILs with the recorded symptom is an expected failure (xfail, with the reason and the
upstream issue), so the default CI run stays green while the finding stays visible; if it PASSes,
the test fails, asking for the entry to be removed (the upstream kernel or the harness changed).
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

    def matches(self, case: Case, adapter: str, device: str) -> bool:
        return (adapter in self.adapters and device.split(":")[0] in self.devices
                and case.distribution == self.distribution)


KNOWN_FINDINGS: tuple[KnownFinding, ...] = (
    KnownFinding(
        adapters=("torch-sdpa-math", "torch-sdpa-flash", "torch-flex"),
        devices=("cpu",),
        distribution="nan_padding",
        symptom="non-finite value(s) where the oracle is finite",
        reason=("torch 2.13 CPU: NaN in padded (masked-out) rows poisons real rows (torch #101967 class; "
                "SEMANTICS.md §6, §7). sdpa math and CPU flash: NaN in masked-out K alone or V alone gives NaN "
                "rows; flex (eager): masked-out V (P = 0 times NaN); backward: padded q rows give NaN dK, dV "
                "through the dense mask"),
    ),
)


def known_finding(case: Case, adapter: str, device: str) -> KnownFinding | None:
    """The entry matching (case, adapter name, device), or None."""
    for f in KNOWN_FINDINGS:
        if f.matches(case, adapter, device):
            return f
    return None
