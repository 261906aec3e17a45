"""The conformance suite under pytest: one test per (case, adapter); see conformance/conftest.py.

Same engine, same verdicts as ``python -m conformance run``: NOT_SUPPORTED skips with the adapter's
reason, QUALITY_WARNING passes with a warning, FAIL / CRASH / TIMEOUT / HARNESS_ERROR fail with the
standalone message and the repro command.
"""

from __future__ import annotations

import warnings

import pytest


def test_case(conformance_session, conformance_case, conformance_spec):
    session = conformance_session
    if session.device == "cuda":
        try:
            import torch

            has_cuda = torch.cuda.is_available()
        except ImportError:
            has_cuda = False
        if not has_cuda:
            pytest.skip("--device cuda but no CUDA device is available")
    la = session.adapter(conformance_spec)
    if not la.available:
        pytest.skip(f"{conformance_spec} unavailable on {session.device}: {la.reason}")
    session.touch(conformance_case.id)
    result = session.runner.run_case(la, conformance_case)
    if result.outcome == "NOT_SUPPORTED":
        pytest.skip(f"NOT_SUPPORTED: {result.message}")
    if result.outcome == "QUALITY_WARNING":
        warnings.warn(f"QUALITY_WARNING {conformance_case.id} on {conformance_spec}: {result.message}", stacklevel=1)
    if result.outcome not in ("PASS", "QUALITY_WARNING"):
        pytest.fail(f"{result.outcome}: {conformance_spec} on {conformance_case.id}\n{result.message}\n"
                    f"repro: {result.repro}", pytrace=False)
