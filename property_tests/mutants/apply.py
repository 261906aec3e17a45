"""Apply a mutant's textual edits to a copy of a kernel module, in memory only.

A source mutant names a module (e.g. ``kernels.reference.fa2``) and one or more `Edit`s, each an
exact text that must occur **exactly once** in the module's source, or, with an ``after`` anchor
(e.g. ``"def backward("``), exactly once between the anchor and the next top-level ``def``, so a
line repeated in forward and backward can be targeted. The patched source is
compiled into a *fresh* module object under a new name; the file on disk and the module already in
``sys.modules`` are never touched. When the adapter's kernel module is not the patched one (e.g.
``_common`` patched, ``fa2`` used), a fresh copy of the kernel module is executed while the patched
module temporarily stands in for the original in ``sys.modules``, so its ``from ... import`` lines
bind the mutant.

`check_applies(mutant)` is what the "patches still apply" test calls: kernel edits that move or
reword a targeted line fail it loudly instead of silently disabling the mutant.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Edit", "PatchError", "source_of", "patched_source", "load_module", "load_with", "check_applies"]

_LOCK = threading.Lock()


class PatchError(ValueError):
    """An edit's text does not occur exactly once where it should (the kernel source changed)."""


@dataclass(frozen=True)
class Edit:
    """Replace the exact text ``old`` (found once, after ``after`` if given) by ``new``."""

    old: str
    new: str
    after: str | None = None


def source_of(module: str) -> tuple[str, Path]:
    """The current source text and path of ``module`` (read from disk, not from the imported object)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise PatchError(f"module {module!r} not found")
    path = Path(spec.origin)
    return path.read_text(encoding="utf-8"), path


def patched_source(module: str, edits: tuple[Edit, ...], label: str = "") -> str:
    """``module``'s source with every edit applied; `PatchError` names the edit that does not apply."""
    src, path = source_of(module)
    for n, e in enumerate(edits):
        start, stop = 0, len(src)
        if e.after is not None:
            start = src.find(e.after)
            if start < 0:
                raise PatchError(f"{label}: edit {n}: anchor {e.after!r} not found in {path}")
            nxt = src.find("\ndef ", start + 1)  # the anchor's scope ends at the next top-level def
            stop = len(src) if nxt < 0 else nxt
        region = src[start:stop]
        count = region.count(e.old)
        if count != 1:
            where = f"between {e.after!r} and the next top-level def " if e.after else ""
            raise PatchError(f"{label}: edit {n}: {e.old!r} occurs {count} times {where}in {path} (need exactly 1)")
        if e.old == e.new:
            raise PatchError(f"{label}: edit {n} changes nothing")
        src = src[:start] + region.replace(e.old, e.new, 1) + src[stop:]
    return src


def _exec_module(name: str, src: str, origin: Path, package: str, label: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = str(origin)
    mod.__package__ = package
    code = compile(src, f"<mutant {label}: {origin}>", "exec")
    exec(code, mod.__dict__)
    return mod


def load_module(module: str, edits: tuple[Edit, ...] = (), label: str = "copy") -> types.ModuleType:
    """A fresh module object executing ``module``'s (patched) source; never registered in sys.modules."""
    src = patched_source(module, edits, label) if edits else source_of(module)[0]
    origin = source_of(module)[1]
    package = module.rpartition(".")[0]
    importlib.import_module(module)  # make sure the package and the module's own imports are loaded
    return _exec_module(f"{module}__{label}", src, origin, package, label)


def load_with(module: str, replacements: dict[str, types.ModuleType], label: str) -> types.ModuleType:
    """A fresh copy of ``module`` whose imports of the modules in ``replacements`` bind the replacements."""
    importlib.import_module(module)
    for name in replacements:
        importlib.import_module(name)
    with _LOCK:
        saved = {}
        try:
            for name, repl in replacements.items():
                parent, _, attr = name.rpartition(".")
                saved[name] = (sys.modules[name], getattr(sys.modules[parent], attr, None) if parent else None)
                sys.modules[name] = repl
                if parent:
                    setattr(sys.modules[parent], attr, repl)
            return load_module(module, (), label)
        finally:
            for name, (orig, orig_attr) in saved.items():
                sys.modules[name] = orig
                parent, _, attr = name.rpartition(".")
                if parent and orig_attr is not None:
                    setattr(sys.modules[parent], attr, orig_attr)


def check_applies(module: str, edits: tuple[Edit, ...], label: str) -> None:
    """Raise `PatchError` unless every edit applies and the patched source still compiles."""
    src = patched_source(module, edits, label)
    try:
        compile(src, f"<mutant {label}>", "exec")
    except SyntaxError as exc:
        raise PatchError(f"{label}: patched {module} does not compile: {exc}") from exc
