"""The committed WGMMA wrapper headers are what kernels/cuda/include/hopper/gen_wgmma.py writes (no hand edits)."""

from __future__ import annotations

import importlib.util

from attention_conformance.kernels.build import CUDA_DIR

HOPPER = CUDA_DIR / "include" / "hopper"


def test_generated_headers_are_up_to_date():
    spec = importlib.util.spec_from_file_location("gen_wgmma", HOPPER / "gen_wgmma.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rendered = gen.render()
    assert set(rendered) == {"wgmma.cuh", "wgmma_fp8.cuh", "bwd_wgmma.cuh"}
    stale = [name for name, text in rendered.items() if (HOPPER / name).read_text() != text]
    assert not stale, f"{stale} differ from gen_wgmma.py's output: run `python {HOPPER / 'gen_wgmma.py'}` and commit"
