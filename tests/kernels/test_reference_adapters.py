"""conformance/adapters/reference.py: the five reference adapters on engine-made inputs (issue 5 item 6)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from attention_conformance import oracles
from attention_conformance.adapters import BUILTIN
from attention_conformance.adapters.base import Adapter, CaseInputs
from attention_conformance.cases.case import Case, FP8Spec

NAMES = ["reference-fa1", "reference-fa2", "reference-fa3", "reference-fa3-fp8", "reference-splitkv"]


def _adapter(name: str, **kw) -> Adapter:
    module, attr = BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), attr)(**kw)


def _inputs(case: Case, seed: int = 0) -> CaseInputs:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((case.B, case.Hq, case.Lq, case.d))
    k = rng.standard_normal((case.B, case.Hkv, case.Lk, case.d))
    v = rng.standard_normal((case.B, case.Hkv, case.Lk, case.dv))
    dout = rng.standard_normal((case.B, case.Hq, case.Lq, case.dv))
    mask = rng.random((case.B, 1, case.Lq, case.Lk)) > 0.2
    return CaseInputs(q=q, k=k, v=v, dout=dout, mask=mask)


CASE = Case(family="test", B=2, Hq=4, Hkv=2, Lq=33, Lk=47, d=16, dv=8, dtype="float64", causal=True,
            window=(20, None), softcap=4.0, seqlens_q=(33, 20), seqlens_k=(47, 30))


@pytest.mark.parametrize("name", [n for n in NAMES if n != "reference-fa3-fp8"])
def test_forward_float64_matches_oracle_and_inputs_untouched(name):
    adapter = _adapter(name)
    assert adapter.name == name and adapter.supports(CASE, "cpu") is None, adapter.supports(CASE, "cpu")
    inputs = _inputs(CASE)
    before = {k: v.copy() for k, v in inputs.arrays().items()}
    res = adapter.forward(inputs, CASE, "cpu")
    ref_out, ref_lse = oracles.attention(inputs.q, inputs.k, inputs.v, mask=inputs.mask, **CASE.oracle_kwargs)
    assert res.out.dtype == np.float64 and res.out.shape == ref_out.shape
    assert np.abs(res.out - ref_out).max() <= 1e-12, f"{name}: forward differs by {np.abs(res.out - ref_out).max()}"
    assert np.array_equal(np.isneginf(res.lse), np.isneginf(ref_lse)), f"{name}: LSE -inf pattern"
    for k, v in inputs.arrays().items():
        assert np.array_equal(v, before[k]), f"{name} modified input {k}"
    if adapter.capabilities.backward:
        g = adapter.backward(inputs, CASE, "cpu")
        ref = oracles.attention_backward(inputs.q, inputs.k, inputs.v, inputs.dout, mask=inputs.mask,
                                         **CASE.oracle_kwargs)
        for label, a, b in zip(("dq", "dk", "dv"), (g.dq, g.dk, g.dv), ref):
            assert np.abs(a - b).max() <= 1e-11, f"{name}: {label} differs by {np.abs(a - b).max():.3e}"


@pytest.mark.fp8
@pytest.mark.parametrize("granularity", ["per_tensor", "per_head", "per_tile"])
def test_fp8_adapter_reads_inputs_fp8(granularity):
    from attention_conformance.oracles import fp8

    case = Case(family="test", B=1, Hq=4, Hkv=2, Lq=40, Lk=70, d=32, dv=32, dtype="float8_e4m3fn",
                fp8=FP8Spec(granularity=granularity, tile_q=16, tile_k=32, incoherent=True))
    adapter = _adapter("reference-fa3-fp8")
    assert adapter.supports(case, "cpu") is None
    assert adapter.supports(CASE, "cpu") is not None, "the FP8 adapter must decline non-FP8 cases"
    raw = _inputs(case)
    qi = fp8.quantize_attention_inputs(raw.q, raw.k, raw.v, granularity=granularity, tile_q=16, tile_k=32,
                                       incoherent=True)
    inputs = CaseInputs(q=qi["q"], k=qi["k"], v=qi["v"], fp8=qi)
    res = adapter.forward(inputs, case, "cpu")
    ref_out, _ = oracles.attention(qi["q"], qi["k"], qi["v"])
    err = np.abs(res.out - ref_out).max()
    assert 0 < err <= 2.0**-4 * np.abs(qi["v"]).max(), f"FP8 adapter error {err:.3e}"
    assert res.out_dtype == "bfloat16"


def test_adapters_can_be_built_on_another_kernel_module():
    import types

    from attention_conformance.kernels.reference import fa2

    calls = []
    fake = types.SimpleNamespace(__name__="mutant", forward=lambda *a, **kw: calls.append(kw) or fa2.forward(*a, **kw))
    adapter = _adapter("reference-fa2", kernel_module=fake)
    adapter.forward(_inputs(CASE), CASE, "cpu")
    assert calls and calls[0]["block_q"] == 64 and adapter.version().startswith("mutant")
    assert _adapter("reference-splitkv", num_splits=5).knobs["num_splits"] == 5


def test_capabilities_are_honest():
    for name in NAMES:
        caps = _adapter(name).capabilities
        assert caps.devices == frozenset({"cpu"}) and caps.lse and caps.deterministic
    assert _adapter("reference-fa2").capabilities.backward and not _adapter("reference-splitkv").capabilities.backward
    assert _adapter("reference-fa3-fp8").capabilities.fp8 == {"per_tensor", "per_head", "per_tile"}
    bwd_case = CASE.replace(backward=True)
    assert _adapter("reference-splitkv").supports(bwd_case, "cpu") is not None
    assert _adapter("reference-fa1").supports(CASE, "cuda") is not None


def test_reference_adapters_are_unavailable_off_the_cpu():
    """On --device cuda the NumPy adapters are unavailable with a reason, so a CUDA run never 'passes'
    by reporting every case of a CPU-only kernel NOT_SUPPORTED."""
    from attention_conformance.adapters.registry import load

    for name in NAMES:
        assert load(name, "cpu").available
        la = load(name, "cuda")
        assert not la.available and "CPU only" in la.reason and "'cuda'" in la.reason, la.reason
