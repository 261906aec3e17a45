"""A float32 call made while torch lets float32 matmuls round to TF32 / bfloat16 carries a note naming the switch
(conformance/running/matmul_precision.py), so its FAIL says why; the default settings add nothing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from attention_conformance.adapters.registry import load  # noqa: E402
from attention_conformance.cases import catalog  # noqa: E402
from attention_conformance.cases.inputs import make_inputs  # noqa: E402
from attention_conformance.running.matmul_precision import reduced_float32_matmul, settings  # noqa: E402
from attention_conformance.running.worker import call_adapter  # noqa: E402


@pytest.fixture
def high_precision_restored():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def _case(dtype: str):
    return next(c for c in catalog.cases("ci") if c.dtype == dtype and not c.backward and c.fp8 is None
                and c.family == "dtype")


def test_default_settings_are_not_reduced():
    assert settings()["float32_matmul_precision"] == "highest"
    assert reduced_float32_matmul() is None
    case = _case("float32")
    res = call_adapter(load("torch-sdpa-math", "cpu").adapter, "forward", make_inputs(case), case, "cpu")
    assert not any("round below float32" in n for n in res.output.notes)


def test_a_float32_call_under_reduced_precision_is_noted(high_precision_restored):
    torch.set_float32_matmul_precision("high")
    note = reduced_float32_matmul()
    assert note and "torch.get_float32_matmul_precision() == 'high'" in note
    adapter = load("torch-sdpa-math", "cpu").adapter
    case = _case("float32")
    res = call_adapter(adapter, "forward", make_inputs(case), case, "cpu")
    assert note in res.output.notes
    other = _case("float16")  # not a float32 case: nothing to say
    res = call_adapter(adapter, "forward", make_inputs(other), other, "cpu")
    assert note not in res.output.notes
