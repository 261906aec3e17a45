"""Entry-point variants of built-in adapters: ``NAME@ENTRY`` selects one public spelling of a vendor's API.

The same semantics reached through another spelling of an API can be wrong in that spelling only
(flash-attention #1772: ``flash_attn_func`` vs ``flash_attn_varlen_func``), so an adapter that has several
spellings lists them in its ``entry_points`` class attribute and takes ``entry_point=`` in its constructor.
``torch-sdpa-math@causal_lower_right`` is then its own row in every report: the adapter calls only that
spelling and declines (NOT_SUPPORTED, with the reason) every case the spelling cannot express. Without
``@ENTRY`` an adapter picks the spelling per case (the behaviour its module docstring describes).
``@`` needs no quoting in a shell (``[...]`` would be a glob pattern).
"""

from __future__ import annotations

__all__ = ["SEPARATOR", "checked_entry_point", "split_variant", "variant_name"]

SEPARATOR = "@"


def split_variant(spec: str) -> tuple[str, str | None]:
    """``"torch-sdpa-math@is_causal"`` -> ``("torch-sdpa-math", "is_causal")``; no ``@`` -> (spec, None)."""
    base, sep, entry = spec.partition(SEPARATOR)
    if not sep:
        return spec, None
    if not base or not entry:
        raise ValueError(f"adapter variant {spec!r}: expected NAME{SEPARATOR}ENTRY_POINT")
    return base, entry


def variant_name(base: str, entry: str | None) -> str:
    """The report name of `base` called through `entry` (`base` itself when entry is None)."""
    return base if entry is None else f"{base}{SEPARATOR}{entry}"


def checked_entry_point(cls: type, entry: str | None) -> str | None:
    """`entry` if adapter class `cls` lists it in ``entry_points`` (or None: the per-case choice), else ValueError."""
    if entry is not None and entry not in cls.entry_points:
        raise ValueError(f"{cls.name} has no entry point {entry!r}; its entry points: {list(cls.entry_points)}")
    return entry
