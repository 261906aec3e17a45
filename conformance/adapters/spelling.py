"""What the adapters of installed libraries with several entry points share (FlashInfer, xformers).

`LibraryAdapter`: the base: the ``NAME@ENTRY`` variant (`conformance.adapters.variants`), the library imported once on
demand (an import error is the unavailable reason; what the library logs while importing is kept in
``import_messages``, shown by ``list``, instead of being printed into every run: xformers warns on a machine where its
C++/CUDA extensions do not load, e.g. every CPU machine), its version from package metadata, the CUDA device check,
and ``supports`` = unavailable, else the declaration's decline (`claim_reason`), else the library's
(`library_reason`).

A spelling of a vendor API (a function, a wrapper class, an ``attn_bias`` type) can say some cases in several
equivalent ways and others not at all. The helpers here are about the *case*, never about one library:

- `sequence_lengths`: each sequence's query and key lengths (SEMANTICS.md §7).
- `equivalent_cases`: the forms of a case that describe the same attention (§4, §5): with every sequence square,
  top-left and bottom-right alignment are one mask (causal and windows); a causal mask that hides no key (one query
  row per sequence, bottom-right) is no mask. A spelling claims a case when it can express one of them.
- `kv_splits`: the key ranges of a split-KV call (§14).
- `mask_varies_over_heads`: whether a case's mask recipe differs between heads (APIs with one pattern for all heads).
- `union_capabilities`, `first_claim`: what a per-case adapter claims when it picks, per case, among spellings,
  and its pick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import logging
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import numpy as np

from attention_conformance.adapters import _torch_common as tc
from attention_conformance.adapters.base import Adapter, Capabilities, Exclusion, capability_reason
from attention_conformance.adapters.variants import checked_entry_point, variant_name
from attention_conformance.cases.case import ALIGNMENTS, Case

__all__ = [
    "LibraryAdapter",
    "logged",
    "causal_hides_nothing",
    "equivalent_cases",
    "first_claim",
    "kv_splits",
    "mask_varies_over_heads",
    "sequence_lengths",
    "union_capabilities",
]


def sequence_lengths(case: Case) -> tuple[list[int], list[int]]:
    """(query lengths, key lengths) of each sequence (``seqlens_*``, else Lq / Lk for every batch entry)."""
    sq = [int(n) for n in case.seqlens_q] if case.seqlens_q is not None else [case.Lq] * case.B
    sk = [min(int(n), case.Lk) for n in case.seqlens_k] if case.seqlens_k is not None else [case.Lk] * case.B
    return sq, sk


def causal_hides_nothing(case: Case, alignment: str) -> bool:
    """True when a causal mask of `alignment` keeps every key of every query row (SEMANTICS.md §4): bottom-right with
    at most one query per sequence, top-left with at most one key."""
    sq, sk = sequence_lengths(case)
    if alignment == "bottom_right":
        return all(n <= 1 for n in sq)
    return all(n <= 1 for n in sk)


def equivalent_cases(case: Case) -> list[Case]:
    """`case` and the other forms of it that mean the same attention, `case` first (SEMANTICS.md §4, §5):

    - every sequence square: top-left and bottom-right alignment are one mask (causal and windows);
    - a window whose right bound is 0 is causal already: causal with that window is the same mask;
    - under causal a window's right bound (any r >= 0) hides nothing causal does not: the window without it (no
      window at all when it has no left bound) is the same mask;
    - a causal mask that hides no key (one query row per sequence bottom-right, one key top-left) is no mask, and
      no mask is such a causal mask.
    """
    out = [case]
    sq, sk = sequence_lengths(case)
    if (case.causal or case.window is not None) and all(a == b for a, b in zip(sq, sk, strict=True)):
        out.append(case.replace(alignment="top_left" if case.alignment == "bottom_right" else "bottom_right"))
    if not case.causal and case.window is not None and case.window[1] == 0:
        out.append(case.replace(causal=True))
    if case.causal and case.window is not None and case.window[1] is not None:
        out.append(case.replace(window=None if case.window[0] is None else (case.window[0], None)))
    if case.causal and causal_hides_nothing(case, case.alignment):
        window = None if case.window is None else (case.window[0], None)  # right = 0 is vacuous there too
        out.append(case.replace(causal=False, window=window))
    if not case.causal and case.window is None:
        out.extend(case.replace(causal=True, alignment=a) for a in ALIGNMENTS if causal_hides_nothing(case, a))
    return out


def kv_splits(n: int) -> list[tuple[int, int]]:
    """Three uneven, non-empty key ranges covering [0, n) (one range [0, n) when n < 3)."""
    if n < 3:
        return [(0, n)]
    cuts = [0, max(1, n // 5), max(2, (3 * n) // 5), n]
    return [(cuts[i], cuts[i + 1]) for i in range(3)]


def mask_varies_over_heads(case: Case) -> bool:
    """Whether the case's mask recipe gives each head its own pattern (the recipe's own output shape says so)."""
    if case.mask is None:
        return False
    from attention_conformance.cases.inputs import make_mask

    tiny = case.replace(B=1, Lq=1, Lk=1, seqlens_q=None, seqlens_k=None, kv_append=None)
    return make_mask(tiny, np.random.default_rng(0)).shape[1] > 1


def union_capabilities(caps: Iterable[Capabilities], unclaimed: Exclusion | None = None) -> Capabilities:
    """A capability set claiming what any of `caps` claims (a per-case adapter picks, per case, a spelling that
    can): sets joined, flags or-ed, head-dim bounds widened, the spellings' run-time library checks named together; a
    field the spellings disagree on is left at None where None means "no claim" (``memory``), otherwise ValueError.
    The spellings' exclusions do not carry over: the one exclusion of the union is `unclaimed`, the combinations no
    spelling expresses."""
    caps = list(caps)
    if not caps:
        raise ValueError("union_capabilities of no capability sets")
    merged: dict[str, Any] = {}
    for f in dataclasses.fields(Capabilities):
        values = [getattr(c, f.name) for c in caps]
        if f.name == "excludes":
            merged[f.name] = (unclaimed,) if unclaimed is not None else ()
        elif f.name == "library_check":  # a run-time check of any spelling may decline what the union claims
            merged[f.name] = "; ".join(dict.fromkeys(v for v in values if v)) or None
        elif f.name in ("head_dims", "max_head_dim") and any(v is None for v in values):
            merged[f.name] = None  # one spelling takes any head dim (up to any bound)
        elif f.name == "max_head_dim":
            merged[f.name] = max(values)
        elif f.name == "min_head_dim":
            merged[f.name] = min(values)
        elif isinstance(values[0], frozenset):
            merged[f.name] = frozenset().union(*values)
        elif isinstance(values[0], bool):
            merged[f.name] = any(values)
        elif len(set(values)) == 1:
            merged[f.name] = values[0]
        elif f.default is None:
            merged[f.name] = None
        else:
            raise ValueError(f"spellings disagree on Capabilities.{f.name}: {sorted(set(map(str, values)))}")
    return Capabilities(**merged)


def first_claim(candidates: Iterable[tuple[str, Capabilities]], case: Case,
                device: str = "cuda") -> tuple[str | None, Case, dict[str, str]]:
    """(the first spelling whose capabilities claim an equivalent form of `case`, that form, {}) or (None, case,
    {spelling: its reason for `case` itself})."""
    reasons = {}
    for name, caps in candidates:
        for form in equivalent_cases(case):
            reason = capability_reason(caps, form, device)
            if reason is None:
                return name, form, {}
            reasons.setdefault(name, reason)
    return None, case, reasons


@contextlib.contextmanager
def logged(package: str) -> Iterator[list[str]]:
    """The messages `package`'s loggers emit at WARNING and above during the block, collected into the list it yields
    and not passed on to the root logger's handlers (the block's other logging is untouched)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(" ".join(record.getMessage().split()))

    logger = logging.getLogger(package)
    handler, propagate = Collect(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class LibraryAdapter(Adapter):
    """Base of an adapter over an installed library, one variant per entry point (``NAME@ENTRY``)."""

    isolate: ClassVar[bool] = True
    marks_code_under_test: ClassVar[bool] = True
    module_name: ClassVar[str] = ""  # what is imported (``flashinfer``, ``xformers.ops.fmha``)
    distribution: ClassVar[str] = ""  # whose package metadata gives the version
    min_cc: ClassVar[tuple[int, int]] = (8, 0)
    cc_text: ClassVar[str] = ""
    entry_points: ClassVar[tuple[str, ...]] = ()

    def __init__(self, entry_point: str | None = None) -> None:
        self.entry_point = checked_entry_point(type(self), entry_point)
        self.name = variant_name(type(self).name, entry_point)
        self._module: Any = None
        self._import_error: str | None = None
        self.import_messages: list[str] = []  # what the library logged (WARNING and above) while importing

    def module(self) -> Any:
        """The imported library module, or None (`_import_error` says why)."""
        if self._module is None and self._import_error is None:
            with logged(self.module_name.split(".")[0]) as self.import_messages:
                try:
                    self._module = self.import_library()
                except Exception as exc:  # ImportError, or a broken install raising at import
                    self._import_error = f"{self.module_name} is not importable ({type(exc).__name__}: {exc})"
        return self._module

    def import_library(self) -> Any:
        """Import ``module_name`` (a library whose import depends on its neighbours prepares it here: xformers)."""
        return importlib.import_module(self.module_name)

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def unavailable_reason(self, device: str) -> str | None:
        reason = tc.cuda_unavailable_reason(device, self.name, self.min_cc, self.cc_text)
        if reason:
            return reason
        if self.module() is None:
            return self._import_error
        return None

    def supports(self, case: Case, device: str) -> str | None:
        return self.unavailable_reason(device) or self.claim_reason(case, device) or self.library_reason(case, device)

    def claim_reason(self, case: Case, device: str) -> str | None:
        """The decline `supports` takes from the declarations alone (no library, no device): None = claimed."""
        raise NotImplementedError

    def library_reason(self, case: Case, device: str) -> str | None:
        """The library's own run-time decline of a claimed case, in its words (``Capabilities.library_check``);
        None when it takes the call (or the adapter asks nothing)."""
        return None
