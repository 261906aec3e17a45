"""Adapter loading: built-in names (lazily imported) and third-party ``module:attr`` specs.

`load(spec, device)` never raises for an adapter that cannot run here: it returns a `LoadedAdapter`
whose ``reason`` says why (the ImportError message, no CUDA device, ...). ``attr`` may be:

- an `Adapter` instance, or an `Adapter` subclass (instantiated with no arguments);
- a zero-argument factory returning an `Adapter`;
- a plain function with torch SDPA's signature ``(q, k, v, attn_mask=None, dropout_p=0.0,
  is_causal=False, scale=None, enable_gqa=False)``; it is wrapped by
  `conformance.adapters.third_party.wrap_sdpa_function`, which probes each feature once.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from dataclasses import dataclass

from attention_conformance.adapters import BUILTIN
from attention_conformance.adapters.base import Adapter
from attention_conformance.adapters.variants import split_variant, variant_name

__all__ = ["LoadedAdapter", "load", "load_many", "resolve_specs", "builtin_names", "closest_builtin", "spec_error",
           "entry_point_names"]


@dataclass
class LoadedAdapter:
    """An adapter spec resolved on this machine: the instance, or why it is unavailable."""

    spec: str  # what the user passed: a built-in name or module:attr
    name: str
    adapter: Adapter | None = None
    reason: str | None = None  # None = available on the requested device

    @property
    def available(self) -> bool:
        return self.adapter is not None and self.reason is None

    @property
    def isolate(self) -> bool:
        return bool(self.adapter is not None and getattr(self.adapter, "isolate", False))


def builtin_names() -> list[str]:
    return list(BUILTIN)


def closest_builtin(name: str) -> str | None:
    """The built-in adapter name closest to ``name`` (difflib), or None when none is close."""
    close = difflib.get_close_matches(name, builtin_names(), n=1, cutoff=0.5)
    return close[0] if close else None


def spec_error(spec: str) -> str | None:
    """Why ``spec`` names no adapter at all (one line: the built-in names, the closest one), or None.

    A spec is a built-in name, ``all``, or ``module:attr``; whether a ``module:attr`` imports is `load`'s job.
    """
    if spec in BUILTIN or spec == "all" or ":" in spec:
        return None
    try:
        base, entry = split_variant(spec)
    except ValueError as exc:
        return str(exc)
    if entry is not None and base in BUILTIN:
        names = entry_point_names(base)
        if spec in names:
            return None
        return f"{spec!r}: unknown entry point {entry!r} of {base}; its entry points are {', '.join(names) or 'none'}"
    hint = closest_builtin(base)
    did = f"; did you mean {hint}?" if hint else ""
    return (f"unknown adapter {spec!r}: not a built-in name ({', '.join(builtin_names())}, all) "
            f"nor module:attr or path/to/file.py:attr{did}")


def entry_point_names(base: str) -> list[str]:
    """``base@ENTRY`` for every entry point the built-in adapter `base` lists (none: [])."""
    if base not in BUILTIN:
        raise ValueError(f"{base!r} is not a built-in adapter ({', '.join(BUILTIN)})")
    cls = _import_attr(BUILTIN[base])
    return [variant_name(base, e) for e in getattr(cls, "entry_points", ()) or ()]


def _import_attr(target: str):
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected a built-in adapter name or module:attr, got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _is_sdpa_function(obj) -> bool:
    if not callable(obj) or isinstance(obj, type):
        return False
    try:
        params = [p for p in inspect.signature(obj).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return len(params) >= 3


def _instantiate(obj, spec: str) -> Adapter:
    if isinstance(obj, Adapter):
        return obj
    if isinstance(obj, type) and issubclass(obj, Adapter):
        return obj()
    if _is_sdpa_function(obj):
        from attention_conformance.adapters.third_party import wrap_sdpa_function

        return wrap_sdpa_function(obj, spec)
    if callable(obj):
        made = obj()
        if isinstance(made, Adapter):
            return made
        raise TypeError(f"{spec}: factory returned {type(made).__name__}, not an Adapter")
    raise TypeError(f"{spec}: {type(obj).__name__} is neither an Adapter, an Adapter subclass, a factory, "
                    "nor a function with torch SDPA's signature (q, k, v, attn_mask=None, ...)")


def _load_third_party(spec: str) -> Adapter:
    """``module:attr``: the adapters package's loader (protocol objects, SDPA functions), else ours."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        from attention_conformance.adapters.third_party import load_impl
    except ImportError:
        return _instantiate(_import_attr(spec), spec)
    return load_impl(spec)


def _load_variant(base: str, entry: str) -> Adapter:
    """``base@entry``: the built-in adapter class `base` constructed with ``entry_point=entry``."""
    cls = _import_attr(BUILTIN[base])
    entries = tuple(getattr(cls, "entry_points", ()) or ())
    if entry not in entries:
        raise ValueError(f"{base} has no entry point {entry!r} ("
                         + (f"its entry points: {', '.join(entries)}" if entries else "it has a single spelling")
                         + ")")
    return cls(entry_point=entry)


def load(spec: str, device: str = "cpu") -> LoadedAdapter:
    """Resolve one spec; failures become a `LoadedAdapter` with ``reason`` set.

    ``NAME@ENTRY`` (`conformance.adapters.variants`) is built-in NAME calling one public spelling only."""
    try:
        base, entry = split_variant(spec) if ":" not in spec else (spec, None)
    except ValueError as exc:
        return LoadedAdapter(spec, spec, None, str(exc))
    target = BUILTIN.get(spec, spec)
    name = spec
    try:
        if entry is not None and base in BUILTIN:
            adapter = _load_variant(base, entry)
        elif spec in BUILTIN:
            adapter = _instantiate(_import_attr(target), spec)
        else:
            adapter = _load_third_party(spec)
    except ImportError as exc:
        return LoadedAdapter(spec, name, None, f"import failed: {type(exc).__name__}: {exc}")
    except Exception as exc:  # a broken third-party module must not take down `list`
        return LoadedAdapter(spec, name, None, f"could not load {target}: {type(exc).__name__}: {exc}")
    if (spec in BUILTIN or entry is not None) and adapter.name and adapter.name != spec:
        name = spec
    elif adapter.name:
        name = adapter.name
    try:
        reason = adapter.unavailable_reason(device)
    except Exception as exc:
        reason = f"unavailable_reason raised {type(exc).__name__}: {exc}"
    return LoadedAdapter(spec, name, adapter, reason)


def resolve_specs(specs: list[str] | None) -> tuple[list[str], bool]:
    """Expand ``all``; return (specs, explicit). No specs = every built-in (the caller keeps the available)."""
    if not specs:
        return builtin_names(), False
    out: list[str] = []
    for s in specs:
        for part in s.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                out.extend(n for n in builtin_names() if n not in out)
            elif part not in out:
                out.append(part)
    explicit = not any(s.strip() == "all" for s in specs)
    return out, explicit


def load_many(specs: list[str], device: str) -> list[LoadedAdapter]:
    return [load(s, device) for s in specs]
