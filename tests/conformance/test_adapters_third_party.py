"""Third-party implementations: SDPA-signature functions (probing, FAIL vs NOT_SUPPORTED), `load_impl`,
the examples (good passes, broken fails on Lk % 64 == 1), and input-mutation reports.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from adapter_helpers import check_backward, check_forward, reference

from attention_conformance.adapters.base import Adapter, Capabilities, ForwardOutput
from attention_conformance.adapters.third_party import SdpaFunctionAdapter, load_impl, wrap_sdpa_function
from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.examples import broken_sdpa, good_sdpa

torch = pytest.importorskip("torch")

C = Case
GOOD_CASES = [
    C("t", 2, 4, 2, 5, 65, 16, 16, dtype="float32"),
    C("t", 2, 4, 2, 9, 5, 16, 16, dtype="float32", causal=True, alignment="bottom_right"),
    C("t", 2, 4, 1, 5, 9, 16, 16, dtype="bfloat16", causal=True, alignment="top_left"),
    C("t", 1, 2, 2, 6, 6, 16, 8, dtype="float64", window=(2, 1)),
    C("t", 2, 2, 1, 6, 9, 16, 16, dtype="float16", mask="none_visible"),
    C("t", 2, 2, 2, 6, 9, 16, 16, dtype="float32", bias="alibi", layout="bshd"),
    C("t", 2, 2, 2, 6, 9, 16, 16, dtype="float32", seqlens_q=(4, 6), seqlens_k=(9, 0), causal=True),
    C("t", 3, 4, 2, 5, 7, 16, 16, dtype="float32", layout="kv_broadcast", scale=0.25),
]


@pytest.fixture(scope="module")
def good():
    return load_impl("attention_conformance.examples.good_sdpa:attention")


@pytest.mark.parametrize("case", GOOD_CASES, ids=lambda c: c.id)
def test_good_example_matches_oracle(good, case):
    check_forward(good, case)


@pytest.mark.backward
def test_good_example_backward(good):
    check_backward(good, C("t", 3, 4, 2, 5, 7, 16, 16, dtype="float64", layout="kv_broadcast", backward=True,
                           mask="full_rows"))


@pytest.mark.parametrize("Lk,broken", [(64, False), (65, True), (1, True), (129, True), (66, False)])
def test_broken_example_fails_exactly_on_the_tail_tile(Lk, broken):
    adapter = load_impl("attention_conformance.examples.broken_sdpa:attention")
    case = C("t", 1, 2, 2, 3, Lk, 16, 16, dtype="float32")
    inputs = make_inputs(case)
    want, _ = reference(case, inputs)
    err = float(np.abs(adapter.forward(inputs, case, "cpu").out - want).max())
    assert (err > 1e-3) is broken, f"Lk={Lk}: max |err| {err:.3g}"
    assert broken_sdpa.n_key_tiles(Lk) == (Lk + 63) // 64 - (Lk % 64 == 1)


def test_probe_marks_missing_gqa_not_supported_and_keeps_the_rest():
    def no_gqa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        return good_sdpa.attention(q, k, v, attn_mask, dropout_p, is_causal, scale)

    adapter = wrap_sdpa_function(no_gqa, "no_gqa")
    probes = adapter.probes("cpu")
    assert probes["gqa"] is not None and "enable_gqa" in probes["gqa"]
    assert probes["dtype:float32"] is None and probes["bool_mask"] is None and probes["backward"] is None
    gqa_case = C("t", 1, 4, 2, 3, 5, 16, 16, dtype="float32")
    reason = adapter.supports(gqa_case, "cpu")
    assert reason.startswith("probe 'gqa' raised on cpu: TypeError")
    check_forward(adapter, gqa_case.replace(Hkv=4))
    assert adapter.capabilities.gqa is False and adapter.capabilities.mask is True


def test_probes_run_once_per_device():
    calls = []

    def counted(q, k, v, **kw):
        calls.append(1)
        return good_sdpa.attention(q, k, v, **kw)

    adapter = wrap_sdpa_function(counted, "counted")
    adapter.probes("cpu")
    n = len(calls)
    adapter.supports(C("t", 1, 2, 2, 3, 5, 16, 16, dtype="float32"), "cpu")
    wrap_sdpa_function(counted, "again").probes("cpu")
    assert len(calls) == n > 0


def test_a_feature_that_probed_fine_and_raises_later_propagates():
    def fails_on_long_keys(q, k, v, **kw):
        if k.shape[-2] > 32:
            raise RuntimeError("kernel launch failed for Lk > 32")
        return good_sdpa.attention(q, k, v, **kw)

    adapter = wrap_sdpa_function(fails_on_long_keys, "fails_on_long_keys")
    case = C("t", 1, 2, 2, 3, 40, 16, 16, dtype="float32")
    assert adapter.supports(case, "cpu") is None  # declared through the probes ...
    with pytest.raises(RuntimeError, match="Lk > 32"):  # ... so the engine records a FAIL
        adapter.forward(make_inputs(case), case, "cpu")


def test_in_place_modification_of_q_is_reported():
    def scribbles(q, k, v, **kw):
        out = good_sdpa.attention(q, k, v, **kw)
        with torch.no_grad():
            q[..., 0, 0] = 0.0
        return out

    adapter = wrap_sdpa_function(scribbles, "scribbles")
    case = C("t", 1, 2, 2, 3, 5, 16, 16, dtype="float32", layout="bshd")
    fo = adapter.forward(make_inputs(case), case, "cpu")
    assert fo.mutated_inputs == ("q",)


def test_softcap_and_fp8_are_not_expressible(good):
    assert "softcap" in good.supports(C("t", 1, 1, 1, 2, 2, 16, 16, dtype="float32", softcap=5.0), "cpu")


def test_paged_layouts_are_declined_not_failed(good):
    """An SDPA-signature function takes dense K/V: a paged case (SEMANTICS.md §16) is NOT_SUPPORTED, never a
    FAIL of a correct function (the engine judges a claimed case that raises as FAIL)."""
    from attention_conformance.cases import catalog
    from attention_conformance.running.engine import Runner

    paged = [c for c in catalog.cases("ci") if c.family == "paged"][:2]
    assert paged, "the ci profile has no paged case"
    for case in paged:
        reason = good.supports(case, "cpu")
        assert reason and "paged" in reason and "§16" in reason, (case.id, reason)
    from attention_conformance.adapters.registry import load

    runner = Runner([], "cpu")
    try:
        la = load("attention_conformance.examples.good_sdpa:attention", "cpu")
        outcomes = {runner.run_case(la, c).outcome for c in paged}
    finally:
        runner.close()
    assert outcomes == {"NOT_SUPPORTED"}, outcomes


class _Adapter(Adapter):
    name = "demo-adapter"
    capabilities = Capabilities(dtypes=frozenset({"float64"}))

    def forward(self, inputs, case, device):
        out, lse = reference(case, inputs)
        return ForwardOutput(out=out, lse=lse)


class _Protocol:
    name = "demo-protocol"
    capabilities = Capabilities(dtypes=frozenset({"float64"}))

    def forward(self, inputs, case, device):
        out, lse = reference(case, inputs)
        return ForwardOutput(out=out, lse=lse)


def test_load_impl_resolves_every_kind_of_attr():
    mod = types.ModuleType("demo_impls_for_load_impl")
    mod.cls = _Adapter
    mod.instance = _Adapter()
    mod.protocol = _Protocol()
    mod.factory = lambda: _Adapter()
    mod.ns = types.SimpleNamespace(fn=good_sdpa.attention)
    sys.modules[mod.__name__] = mod
    try:
        assert isinstance(load_impl(f"{mod.__name__}:cls"), _Adapter)
        assert load_impl(f"{mod.__name__}:instance") is mod.instance
        assert isinstance(load_impl(f"{mod.__name__}:factory"), _Adapter)
        wrapped = load_impl(f"{mod.__name__}:protocol")
        assert wrapped.name == "demo-protocol" and wrapped.capabilities.dtypes == {"float64"}
        case = C("t", 1, 1, 1, 2, 3, 4, 4, dtype="float64")
        assert wrapped.supports(case, "cpu") is None
        check_forward(wrapped, case)
        fn = load_impl(f"{mod.__name__}:ns.fn")
        assert isinstance(fn, SdpaFunctionAdapter) and fn.name == f"{mod.__name__}:ns.fn"
        with pytest.raises(AttributeError, match="no attribute 'missing'"):
            load_impl(f"{mod.__name__}:missing")
    finally:
        del sys.modules[mod.__name__]
    with pytest.raises(ValueError, match="MODULE:ATTR"):
        load_impl("no_colon_here")
    with pytest.raises(ImportError, match="cannot import module"):
        load_impl("surely_not_a_module_xyz:attention")
