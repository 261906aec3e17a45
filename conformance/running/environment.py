"""This machine as a report states it: CPU, GPUs, driver, Python / numpy / torch / CUDA / cuDNN versions.

One job: probe the machine once per process (`environment`). The reports record it (report.json ``environment``,
SEMANTICS.md §1: a verdict is about an implementation on a machine), and the expectations match an entry's ``gpu``
field against its GPU names (`expectations.RunExpectations.for_run`).
"""

from __future__ import annotations

import copy
import functools
import os
import platform
import subprocess
import sys

__all__ = ["environment"]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def _environment() -> dict:
    """CPU, GPU, driver, numpy/torch/CUDA/cuDNN versions of this machine."""
    import numpy

    env: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "numpy": numpy.__version__,
        "torch": None, "cuda": None, "cudnn": None, "gpus": [], "driver": None,
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        from attention_conformance.running.matmul_precision import settings

        env["float32_matmul"] = settings()  # this process's at the first probe (calls note their own)
        try:
            env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        except Exception:
            env["cudnn"] = None
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                env["gpus"].append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                                    "memory_gib": round(p.total_memory / 2**30, 1)})
    except Exception as exc:
        env["torch_error"] = f"{type(exc).__name__}: {exc}"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            env["driver"] = out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return env


def environment() -> dict:
    """CPU, GPU, driver, numpy/torch/CUDA/cuDNN versions of this machine (probed once per process)."""
    return copy.deepcopy(_environment())
