"""Entry-point variants of built-in adapters: ``NAME@ENTRY`` selects one public spelling of a vendor's API.

The same semantics reached through another spelling of an API can be wrong in that spelling only
(flash-attention #1772: ``flash_attn_func`` vs ``flash_attn_varlen_func``), so an adapter that has several
spellings lists them in its ``entry_points`` class attribute and takes ``entry_point=`` in its constructor.
``torch-sdpa-math@causal_lower_right`` is then its own row in every report: the adapter calls only that
spelling and declines (NOT_SUPPORTED, with the reason) every case the spelling cannot express. Without
``@ENTRY`` an adapter picks the spelling per case (the behaviour its module docstring describes).
``@`` needs no quoting in a shell (``[...]`` would be a glob pattern).

What a spelling can express is stated once per adapter family, as a table of `Spelling` objects (the
arguments of the call and the case features those arguments can carry: a ``CausalBias`` carries one causal
alignment and nothing else, a dense boolean mask carries any mask but no additive bias, ...). The variant's
`Capabilities` are derived from it (`spelled_capabilities`: what the library claims, less what the spelling
cannot carry) and its declines worded from it (`spelling_reason`); ``supports`` restates none of it.
tests/conformance/test_variant_claims.py reads every claimed case's call back through the API's documented
semantics and checks that each feature of the case is in it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

from attention_conformance.adapters.base import Capabilities, capability_reason
from attention_conformance.cases.case import ALIGNMENTS, Case, page_size_of

__all__ = ["CARRIED", "SEPARATOR", "Spelling", "checked_entry_point", "spelled_capabilities", "spelling_reason",
           "split_variant", "square_alignment", "variant_name"]

SEPARATOR = "@"

#: the case features a spelling's arguments may or may not be able to carry. All but three are boolean
#: `Capabilities` fields of the same name; ``dense`` and ``paged`` stand for the dense and the paged (block
#: table, SEMANTICS.md §16) entries of ``Capabilities.layouts``; ``deterministic`` is a claim a spelling can
#: add (a ``deterministic=True`` argument), never one it takes away.
CARRIED = ("noncausal", "window", "chunk", "mask", "bias", "softcap", "sinks", "varlen", "query_lengths",
           "kv_append", "backward", "lse_grad", "dense", "paged")
_FLAGS = tuple(f for f in CARRIED if f not in ("dense", "paged"))


@dataclass(frozen=True)
class Spelling:
    """One public spelling of an API: the call, in words, and the case features its arguments can carry.

    Features outside `CARRIED` (dtypes, head dims, GQA, scale, LSE, ...) are the library's, whatever the
    spelling; ``alignments`` are the causal alignments the spelling can hold (SEMANTICS.md §4).
    """

    call: str
    carries: frozenset[str]
    alignments: frozenset[str] = frozenset(ALIGNMENTS)
    deterministic: bool = False  # the spelling asks for bitwise-reproducible results (adds the claim)
    #: the spelling passes an Lq x Lk tensor on every call (a dense mask, even of a case without one): the call's
    #: peak memory is then quadratic whatever the kernel does, so the library's linear-memory claim does not carry
    dense_argument: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.carries) - set(CARRIED)
        if unknown:
            raise ValueError(f"Spelling({self.call!r}) carries unknown features {sorted(unknown)}; known: {CARRIED}")


@lru_cache(maxsize=256)
def spelled_capabilities(caps: Capabilities | None, spelling: Spelling) -> Capabilities | None:
    """`caps` (what the library claims) less what `spelling` cannot carry; None stays None (no implementation)."""
    if caps is None:
        return None
    kept = {f: bool(getattr(caps, f)) and f in spelling.carries for f in _FLAGS}
    layouts = frozenset(x for x in caps.layouts
                        if ("paged" if page_size_of(x) is not None else "dense") in spelling.carries)
    return dataclasses.replace(caps, **kept, layouts=layouts, alignments=caps.alignments & spelling.alignments,
                               deterministic=caps.deterministic or spelling.deterministic,
                               memory=None if spelling.dense_argument else caps.memory)


def square_alignment(case: Case, alignments: frozenset[str]) -> Case:
    """`case` with its alignment replaced by one of `alignments` where both are the same mask (SEMANTICS.md §4:
    Lq == Lk, no per-sequence lengths, no KV append); `case` itself otherwise."""
    same = case.Lq == case.Lk and not case.varlen and case.kv_append is None
    if not same or case.alignment in alignments or not alignments:
        return case
    return case.replace(alignment=sorted(alignments)[0])


@lru_cache(maxsize=256)
def _carried(caps: Capabilities, spelling: Spelling) -> Capabilities:
    """`spelled_capabilities` with the spelling's own alignments (the library's are asked separately)."""
    return dataclasses.replace(spelled_capabilities(caps, spelling), alignments=spelling.alignments)


def spelling_reason(label: str, spelling: Spelling, caps: Capabilities, case: Case, device: str) -> str | None:
    """Why `case` cannot run through `spelling` of a library that claims `caps`, or None: the library's own
    decline, else the spelling's, which starts with `label` (which spelling) and the call.

    Each side is asked with the case in an alignment it holds where both are one mask (`square_alignment`): a
    backend that runs top-left causal only (``is_causal``) runs a square case spelled ``causal_lower_right``.
    """
    reason = capability_reason(caps, square_alignment(case, caps.alignments), device)
    if reason:
        return reason
    reason = capability_reason(_carried(caps, spelling), square_alignment(case, spelling.alignments), device)
    return f"{label} ({spelling.call}) cannot express this case: {reason}" if reason else None


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
