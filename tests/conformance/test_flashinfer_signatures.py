"""Every call the FlashInfer adapter and its standalone repro files make binds to the installed FlashInfer's signatures.

Where FlashInfer's Python imports (it does on a CPU machine: ``bash tools/device/fi_xf.sh offline-prebuild`` puts
0.7.2.post1 in /tmp/fx-site-offline, then ``PYTHONPATH=/tmp/fx-site-offline``), each FlashInfer function and wrapper
method the adapter calls is replaced by a stub that binds the call's arguments to the real function's signature
(``inspect.Signature.bind``: a keyword FlashInfer does not take, a missing positional argument, fail) and returns
zeros of the output's shape; the adapter then runs every gpu-profile case it claims through every spelling, and the
standalone repro files of some of them run their ``run_library``. Skipped where FlashInfer is not installed (CI): the
stand-in tests (test_adapters_flashinfer.py) check what the calls mean, this what they are called with.
"""

from __future__ import annotations

import inspect
import types

import pytest

flashinfer = pytest.importorskip("flashinfer", reason="FlashInfer's Python is not installed here")
torch = pytest.importorskip("torch")

from attention_conformance.adapters import _torch_common as tc  # noqa: E402
from attention_conformance.adapters import flashinfer as fi  # noqa: E402
from attention_conformance.adapters.base import capability_reason  # noqa: E402
from attention_conformance.cases import catalog  # noqa: E402
from attention_conformance.cases.inputs import make_inputs  # noqa: E402

WRAPPERS = ("BatchPrefillWithRaggedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
            "BatchDecodeWithPagedKVCacheWrapper", "BatchAttentionWithAttentionSinkWrapper")


def _binding_stub(real) -> types.ModuleType:
    """A ``flashinfer`` whose functions and wrappers bind their arguments to `real`'s and return zeros."""
    stub = types.ModuleType("flashinfer")

    def single_prefill_with_kv_cache(q, k, v, *a, **kw):
        inspect.signature(real.single_prefill_with_kv_cache).bind(q, k, v, *a, **kw)
        return torch.zeros(*q.shape[:2], v.shape[-1], dtype=q.dtype), torch.zeros(q.shape[:2])

    def single_decode_with_kv_cache(q, k, v, *a, **kw):
        inspect.signature(real.single_decode_with_kv_cache).bind(q, k, v, *a, **kw)
        return torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype), torch.zeros(q.shape[0])

    def merge_state(*a, **kw):
        inspect.signature(real.merge_state).bind(*a, **kw)
        return a[0], a[1]

    def merge_states(v, s, *a, **kw):
        inspect.signature(real.merge_states).bind(v, s, *a, **kw)
        return v[:, 0], s[:, 0]

    def wrapper(cls):
        class Bound:
            def __init__(self, *a, **kw):
                inspect.signature(cls.__init__).bind(None, *a, **kw)

            def plan(self, *a, **kw):
                inspect.signature(cls.plan).bind(None, *a, **kw)

            def run(self, q, *a, **kw):
                inspect.signature(cls.run).bind(None, q, *a, **kw)
                return torch.zeros(*q.shape, dtype=q.dtype), torch.zeros(q.shape[:2])

        return Bound

    stub.single_prefill_with_kv_cache = single_prefill_with_kv_cache
    stub.single_decode_with_kv_cache = single_decode_with_kv_cache
    stub.merge_state, stub.merge_states = merge_state, merge_states
    for name in WRAPPERS:
        setattr(stub, name, wrapper(getattr(real, name)))
    stub.aot = real.aot
    return stub


@pytest.fixture
def bound(monkeypatch):
    import flashinfer.aot  # noqa: F401  (the declarations read the real ahead-of-time list)

    real = flashinfer
    monkeypatch.setattr(tc, "cuda_unavailable_reason", lambda *a, **k: None)
    monkeypatch.setitem(__import__("sys").modules, "flashinfer", _binding_stub(real))
    return real


def _claimed(adapter, limit=3e6):
    for case in catalog.cases("gpu"):
        if case.B * case.Hq * case.Lq * case.Lk <= limit and capability_reason(adapter.capabilities, case, "cuda") \
                is None and adapter.claim_reason(case, "cuda") is None:
            yield case


@pytest.mark.parametrize("entry", [None, *fi.SPELLINGS])
def test_the_adapters_calls_bind_to_flashinfers_signatures(bound, entry):
    adapter = fi.FlashInfer(entry)
    made = 0
    for case in _claimed(adapter):
        adapter.forward(make_inputs(case), case, "cpu")  # a TypeError here is a call FlashInfer would refuse
        made += 1
    assert made, f"{adapter.name} claimed no gpu-profile case"


@pytest.mark.parametrize("entry", [None, *fi.SPELLINGS])
def test_the_standalone_files_calls_bind_to_flashinfers_signatures(bound, entry):
    from attention_conformance.reproduce.standalone import standalone

    spec = "flashinfer" + (f"@{entry}" if entry else "")
    for case in list(_claimed(fi.FlashInfer(entry)))[:4]:
        mod = types.ModuleType("standalone_repro")
        exec(compile(standalone(case, spec, "cuda"), "standalone_repro.py", "exec"), mod.__dict__)
        mod.DEVICE = "cpu"
        mod.run_library(mod.make_inputs())
