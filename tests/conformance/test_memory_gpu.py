"""The CUDA side of conformance/running/peak_memory.py (``pytest -m gpu tests/conformance/test_memory_gpu.py``).

Skipped cleanly without a CUDA device: torch's allocator peak of a known allocation, the driver's view
of an allocation made outside torch (CuPy's own pool), and the peaks the math and flash backends record
through `call_adapter` at N and 4N.
"""

from __future__ import annotations

import time

import pytest

from attention_conformance.cases import catalog
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.running import peak_memory
from attention_conformance.running.worker import call_adapter
from attention_conformance.verdict import growth

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

MIB = 2**20


def test_torch_allocator_peak_of_a_known_allocation():
    with peak_memory.PeakMemory("cuda") as pm:
        x = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
        del x
    rec = pm.record
    assert rec is not None and 64 * MIB <= rec.torch_peak_bytes < 66 * MIB
    assert rec.driver_source in ("nvml-process", "mem_get_info-device")


def test_driver_view_sees_memory_allocated_outside_torch():
    cupy = pytest.importorskip("cupy")
    with peak_memory.PeakMemory("cuda") as pm:
        buf = cupy.empty(512 * MIB, dtype=cupy.uint8)
        buf.fill(1)
        cupy.cuda.runtime.deviceSynchronize()
        time.sleep(0.05)  # many sampling intervals
        del buf
        cupy.get_default_memory_pool().free_all_blocks()
    rec = pm.record
    assert rec.torch_peak_bytes < MIB, rec
    assert rec.driver_samples > 5 and rec.outside_torch_bytes >= 500 * MIB, rec


def test_math_backend_peak_grows_faster_than_flash():
    from attention_conformance.adapters.torch_sdpa import SdpaFlash, SdpaMath

    small, large = (catalog._seeded(catalog._mk("memory", Hq=4, Hkv=4, Lq=n, Lk=n, d=64)) for n in (1024, 4096))
    peaks = {}
    for adapter in (SdpaMath(), SdpaFlash()):
        got = []
        assert call_adapter(adapter, "forward", make_inputs(small), small, "cuda").error is None  # warm-up
        for case in (small, large):
            res = call_adapter(adapter, "forward", make_inputs(case), case, "cuda")
            assert res.error is None, res.error
            got.append(res.memory["torch_peak_bytes"])
            assert res.memory["io_bytes"] == peak_memory.io_bytes(case)
        peaks[adapter.name] = growth.growth_exponent([1024, 4096], got)
    assert peaks["torch-sdpa-math"] > growth.LINEAR_MAX_EXPONENT > peaks["torch-sdpa-flash"], peaks
