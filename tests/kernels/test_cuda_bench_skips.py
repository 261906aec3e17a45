"""The benchmarks stay out of the conformance run (issue 43): none is marked ``gpu``, and under
``--benchmark-disable`` (pyproject's addopts) each skips with the reason before it makes any input.

Runs pytest in a subprocess over the real benchmark modules on the CPU, with ``torch.cuda.is_available`` faked to
True (plugin ``fake_cuda`` below): the modules' no-CUDA skip then does not apply, so a benchmark that reached its
workload would call CUDA on a CPU torch and fail; passing means every one skipped at its fixture."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK_MODULES = ["tests/kernels/test_cuda_bench.py", "tests/oracles/test_oracle_bench.py"]


def test_benchmarks_skip_before_their_workload_when_disabled_and_are_not_marked_gpu(tmp_path):
    (tmp_path / "fake_cuda.py").write_text("import torch\n\ntorch.cuda.is_available = lambda: True\n")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p))
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "fake_cuda", "-q", "-rs",
           "--benchmark-disable", "-m", "not gpu", *BENCHMARK_MODULES]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    summary = out.strip().splitlines()[-1]
    # every benchmark selected by -m "not gpu" (none deselected) and skipped, none run
    assert re.fullmatch(r"\d+ skipped in [\d.]+s( \(.*\))?", summary), out[-4000:]
    assert int(summary.split()[0]) >= 50, summary  # the parametrized CUDA benchmarks and the oracle's
    assert "no CUDA device" not in out and "pytest-benchmark is disabled" in out, out[-4000:]
