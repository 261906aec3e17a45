"""A CUDA device of one architecture as FlashInfer's Python dispatch sees it, on a machine that has none.

flashinfer_prebuild.py's ``--offline-arch`` mode (its docstring says why the specs it records are the GPU host's)
runs the adapter's forwards on CPU tensors inside `offline_cuda`, which makes the questions FlashInfer's Python asks
before it picks a JIT module answer as on a GPU of that architecture:

- ``torch.version.cuda``: the CUDA version of the GPU host's torch build (FlashInfer gates sm90a / sm100a code on
  it: ``is_sm90a_supported`` needs >= 12.3);
- ``torch.cuda.is_available`` / ``device_count`` / ``current_device`` / ``get_device_capability`` /
  ``get_device_properties``: one device of that compute capability (properties: major, minor, name,
  multi_processor_count, total_memory);
- FlashInfer's own capability helpers, which refuse a non-CUDA tensor's device before asking torch
  (``flashinfer.utils.get_compute_capability``, ``device_support_pdl``), wherever a flashinfer module bound them;
- ``torch.empty(..., pin_memory=True)``: the batch wrappers' page-locked host buffers, which a CPU-only torch cannot
  allocate, are plain host buffers (they are filled by ``plan``, after the module is chosen).

Everything is restored on exit. Nothing here runs a kernel; it only lets FlashInfer's dispatch reach its JIT step.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

__all__ = ["OfflineArch", "offline_cuda", "parse_arch"]


@dataclass(frozen=True)
class OfflineArch:
    """A target as FLASHINFER_CUDA_ARCH_LIST spells it (``9.0a``): compute capability and nvcc suffix."""

    major: int
    minor: int
    suffix: str = ""

    @property
    def spelling(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def capability(self) -> tuple[int, int]:
        return self.major, self.minor


def parse_arch(text: str) -> OfflineArch:
    """`OfflineArch` of ``MAJOR.MINOR[SUFFIX]`` (``9.0a``, ``8.0``, ``12.0f``); ValueError naming the text."""
    m = re.fullmatch(r"(\d+)\.(\d+)([a-z]?)", text.strip())
    if m is None:
        raise ValueError(f"architecture {text!r}: expected MAJOR.MINOR[SUFFIX] as FLASHINFER_CUDA_ARCH_LIST spells "
                         "it, e.g. 9.0a")
    return OfflineArch(int(m.group(1)), int(m.group(2)), m.group(3))


#: the GPU host's properties that FlashInfer's Python reads (H200: 132 SMs, 141 GB)
H200_PROPERTIES = {"name": "NVIDIA H200", "multi_processor_count": 132, "total_memory": 150_754_820_096}


class _Patches:
    """setattr with the old values remembered, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def rebind(self, package: str, original: Callable, replacement: Callable) -> None:
        """`replacement` wherever a loaded module of `package` holds `original` under its name."""
        for mod_name, mod in list(sys.modules.items()):
            if (mod_name == package or mod_name.startswith(package + ".")) and \
                    getattr(mod, original.__name__, None) is original:
                self.set(mod, original.__name__, replacement)

    def undo(self) -> None:
        while self._undo:
            owner, name, value = self._undo.pop()
            setattr(owner, name, value)


@contextmanager
def offline_cuda(arch: OfflineArch, cuda_version: str, *, flashinfer: Any = None,
                 properties: dict | None = None) -> Iterator[None]:
    """Inside: torch (and `flashinfer`, the imported package, when given) see one CUDA device of `arch`, from a
    torch built for CUDA `cuda_version` (see the module docstring for what is answered and why)."""
    import torch

    props = SimpleNamespace(major=arch.major, minor=arch.minor, **(properties or H200_PROPERTIES))
    patches = _Patches()
    empty = torch.empty

    def host_empty(*args, pin_memory: bool = False, **kwargs):
        return empty(*args, **kwargs)

    try:
        patches.set(torch.version, "cuda", cuda_version)
        patches.set(torch.cuda, "is_available", lambda: True)
        patches.set(torch.cuda, "device_count", lambda: 1)
        patches.set(torch.cuda, "current_device", lambda: 0)
        patches.set(torch.cuda, "get_device_capability", lambda device=None: arch.capability)
        patches.set(torch.cuda, "get_device_properties", lambda device=None: props)
        patches.set(torch, "empty", host_empty)
        if flashinfer is not None:
            utils = flashinfer.utils
            patches.rebind("flashinfer", utils.get_compute_capability, lambda device: arch.capability)
            patches.rebind("flashinfer", utils.device_support_pdl, lambda device: arch.major >= 9)
        yield
    finally:
        patches.undo()
