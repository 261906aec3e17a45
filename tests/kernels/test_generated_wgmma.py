"""The committed WGMMA wrapper headers are what kernels/cuda/include/hopper/gen_wgmma.py writes (no hand edits)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# the checkout's headers and their generator (gen_wgmma.py is a development tool, not in the wheel)
HOPPER = Path(__file__).resolve().parents[2] / "kernels" / "cuda" / "include" / "hopper"


def test_generated_headers_are_up_to_date():
    spec = importlib.util.spec_from_file_location("gen_wgmma", HOPPER / "gen_wgmma.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rendered = gen.render()
    assert set(rendered) == {"wgmma.cuh", "wgmma_fp8.cuh", "bwd_wgmma.cuh"}
    stale = [name for name, text in rendered.items() if (HOPPER / name).read_text() != text]
    assert not stale, f"{stale} differ from gen_wgmma.py's output: run `python {HOPPER / 'gen_wgmma.py'}` and commit"
