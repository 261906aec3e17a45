"""The feature model: what a case exercises, named once for the reports and for pair coverage.

Each `Feature` reads one aspect of a `Case` as a value (``value_of``), names it for the report's
adapter x feature matrix (``label``), and writes a value into the keyword arguments of a generated case
(``apply``, used by the ``pairs`` catalog family). `FEATURES` lists them; `CONSTRAINTS` lists the value
pairs no case may combine, each with its reason. The report labels (`labels`, what
`conformance.running.engine.features_of` returns), the covering design of the catalog's ``pairs`` family
(`conformance.cases.catalog`) and the pair coverage of a profile (`conformance.reporting.coverage`) all read this
module.

The pairwise features (SEMANTICS.md section in brackets): dtype [§1], FP8 granularity [§10], causal
alignment none / top_left / bottom_right [§4], window left / right / both bounds [§5], boolean mask and
additive bias [§6], softcap [§3], GQA / MQA [§9], dv > d and dv < d [§9], varlen [§7], layout incl. paged
K/V [§1, §16], backward [§13], split-KV (a decoding shape: few queries, many keys, the regime where
split-KV kernels split, [§14]), attention sinks [§18], chunked attention [§19]. Four more features only
label reports: the input distribution, Lq != Lk, KV-cache append (§20: one decoding API, claimed by the
split-KV kernels only; its own catalog family crosses it with sinks, chunks, GQA, MLA shapes) and the LSE
cotangent of a backward case (``dlse``, §13, §18).

**Adding a feature** is a change to this module only: append a `Feature` to `FEATURES` (its values, the
first one being what a case without the feature has; ``value_of``; ``label``; ``apply``; a ``stage`` if its
``apply`` reads fields another feature writes), and add to `CONSTRAINTS` the value pairs that cannot
meet. The ``pairs`` family then covers the new feature against every other one, the coverage test
(`tests/conformance/test_coverage.py`) demands it, and `python -m attention_conformance cases --coverage` shows it.
Ids of the other catalog cases do not change (only the ``pairs`` cases are regenerated).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from attention_conformance.cases.case import Case, FP8Spec, page_size_of

__all__ = ["Feature", "Constraint", "FEATURES", "PAIRWISE", "CONSTRAINTS", "feature", "values_of", "labels",
           "forbidden", "consistent", "realize", "dv_relation", "DECODE_MAX_LQ", "DECODE_MIN_LK"]

#: a case is a decoding (split-KV) shape when Lq <= DECODE_MAX_LQ and Lk >= max(DECODE_MIN_LK, 8 * Lq)
DECODE_MAX_LQ = 16
DECODE_MIN_LK = 128

Kwargs = dict[str, Any]


@dataclass(frozen=True)
class Feature:
    """One aspect of a case: its values, how to read it, how to label it, how to write it."""

    name: str
    values: tuple[str, ...]  # values[0]: what a case without the feature has
    value_of: Callable[[Case], str]
    label: Callable[[Case], str | None]  # the report label, None for no label
    apply: Callable[[Kwargs, str, Mapping[str, str]], None] | None = None  # (case kwargs, value, whole row)
    pairwise: bool = True  # part of the pair-coverage model
    stage: int = 1  # apply order: 0 shapes, 1 semantics, 2 what depends on the shapes

    @property
    def plain(self) -> str:
        return self.values[0]


@dataclass(frozen=True)
class Constraint:
    """Value pairs that no case combines: ``a`` = (feature, values) and ``b`` = (feature, values)."""

    a: tuple[str, frozenset[str]]
    b: tuple[str, frozenset[str]]
    reason: str

    def forbids(self, f1: str, v1: str, f2: str, v2: str) -> bool:
        (fa, va), (fb, vb) = self.a, self.b
        return (f1 == fa and v1 in va and f2 == fb and v2 in vb) or (f1 == fb and v1 in vb and f2 == fa and v2 in va)


# -- reading a case ----------------------------------------------------------------------------------

_FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
_DENSE_DTYPES = ("float64", "float32", "float16", "bfloat16")


def _window_value(case: Case) -> str:
    if case.window is None:
        return "none"
    left, right = case.window
    return {(False, False): "none", (True, False): "left", (False, True): "right", (True, True): "both"}[
        (left is not None, right is not None)]


def _heads_value(case: Case) -> str:
    if case.Hq == case.Hkv:
        return "mha"
    return "mqa" if case.Hkv == 1 else "gqa"


def dv_relation(d: int, dv: int) -> str:
    """The ``dv`` feature's value for head dims d and dv: "eq", "gt" (dv > d) or "lt"."""
    return "eq" if dv == d else ("gt" if dv > d else "lt")


def _dv_value(case: Case) -> str:
    return dv_relation(case.d, case.dv)


def _layout_value(case: Case) -> str:
    return "paged" if page_size_of(case.layout) is not None else case.layout


def _split_value(case: Case) -> str:
    decode = case.Lq <= DECODE_MAX_LQ and case.Lk >= max(DECODE_MIN_LK, 8 * case.Lq)
    return "decode" if decode else "off"


# -- writing a generated case (the ``pairs`` family) --------------------------------------------------------

def _set_split(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    # prefill shapes alternate Lq < Lk and Lq > Lk (bottom-right then leaves leading rows empty, §8)
    if value == "decode":
        kw.update(Lq=2, Lk=160)  # 5 key tiles of 32 (3 splits of the split-KV reference), 3 pages of 64
    else:
        kw.update(Lq=24, Lk=40) if kw["_index"] % 2 == 0 else kw.update(Lq=40, Lk=24)


def _set_heads(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    kw.update(Hq=4, Hkv={"mha": 4, "gqa": 2, "mqa": 1}[value])


def _set_dv(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    kw.update(d=32, dv={"eq": 32, "gt": 64, "lt": 16}[value])


def _set_causal(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    kw.update(causal=value != "none", alignment="bottom_right" if value == "none" else value)


def _set_window(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    kw["window"] = {"none": None, "left": (8, None), "right": (None, 6), "both": (8, 6)}[value]


def _set_flag(field: str, on: Any) -> Callable[[Kwargs, str, Mapping[str, str]], None]:
    def apply(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
        kw[field] = on(row) if value == "on" else (False if field == "backward" else None)

    return apply


def _set_dtype(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    kw["dtype"] = value


def _set_fp8(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    if value == "none":
        kw["fp8"] = None
        return
    fmt = kw["dtype"].removeprefix("float8_")
    tiles = dict(tile_q=32, tile_k=32) if value == "per_tile" else {}
    kw["fp8"] = FP8Spec(fmt, value, **tiles)


def _set_varlen(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    if value == "off":
        kw.update(seqlens_q=None, seqlens_k=None)
        return
    lq, lk = kw["Lq"], kw["Lk"]
    kw.update(seqlens_q=(lq, max(1, lq // 2)) if lq > 1 else None, seqlens_k=(lk - lk // 4 - 1, lk))


def _set_layout(kw: Kwargs, value: str, row: Mapping[str, str]) -> None:
    kw["layout"] = "paged64" if value == "paged" else value
    if value == "paged" and row["split_kv"] == "off":
        kw.update(Lq=24, Lk=100)  # chunked prefill on a paged cache: two pages, the second one partial


FEATURES: tuple[Feature, ...] = (
    Feature("dtype", _DENSE_DTYPES + _FP8_DTYPES, lambda c: c.dtype, lambda c: f"dtype:{c.dtype}", _set_dtype),
    Feature("causal", ("none", "top_left", "bottom_right"), lambda c: c.alignment if c.causal else "none",
            lambda c: f"causal:{c.alignment}" if c.causal else None, _set_causal),
    Feature("window", ("none", "left", "right", "both"), _window_value,
            lambda c: "window" if c.window is not None else None, _set_window),
    Feature("mask", ("off", "on"), lambda c: "on" if c.mask else "off", lambda c: "mask" if c.mask else None,
            _set_flag("mask", lambda row: "random" if row["heads"] == "mha" else "random_heads")),
    Feature("bias", ("off", "on"), lambda c: "on" if c.bias else "off", lambda c: "bias" if c.bias else None,
            _set_flag("bias", lambda row: "random")),
    Feature("softcap", ("off", "on"), lambda c: "on" if c.softcap else "off",
            lambda c: "softcap" if c.softcap else None, _set_flag("softcap", lambda row: 2.0)),
    Feature("heads", ("mha", "gqa", "mqa"), _heads_value, lambda c: "gqa" if c.Hq != c.Hkv else None, _set_heads,
            stage=0),
    Feature("dv", ("eq", "gt", "lt"), _dv_value, lambda c: "dv!=d" if c.dv != c.d else None, _set_dv, stage=0),
    Feature("varlen", ("off", "on"), lambda c: "on" if c.varlen else "off",
            lambda c: "varlen" if c.varlen else None, _set_varlen, stage=2),
    Feature("layout", ("contiguous", "bshd", "kv_broadcast", "paged"), _layout_value,
            lambda c: f"layout:{c.layout}" if c.layout != "contiguous" else None, _set_layout),
    Feature("distribution", ("normal",), lambda c: c.distribution.split(":")[0],
            lambda c: "dist:" + c.distribution.split(":")[0] if c.distribution != "normal" else None,
            pairwise=False),
    Feature("backward", ("off", "on"), lambda c: "on" if c.backward else "off",
            lambda c: "backward" if c.backward else None, _set_flag("backward", lambda row: True)),
    Feature("fp8", ("none", "per_tensor", "per_head", "per_tile"),
            lambda c: "none" if c.fp8 is None else c.fp8.granularity, lambda c: "fp8" if c.fp8 is not None else None,
            _set_fp8, stage=2),
    Feature("lq_ne_lk", ("eq", "ne"), lambda c: "ne" if c.Lq != c.Lk else "eq",
            lambda c: "Lq!=Lk" if c.Lq != c.Lk else None, pairwise=False),
    Feature("split_kv", ("off", "decode"), _split_value, lambda c: None, _set_split, stage=0),
    Feature("sinks", ("off", "on"), lambda c: "off" if c.sinks is None else "on",
            lambda c: f"sinks:{c.sinks}" if c.sinks is not None else None, _set_flag("sinks", lambda row: "small")),
    Feature("chunk", ("off", "on"), lambda c: "off" if c.chunk is None else "on",
            lambda c: "chunk" if c.chunk is not None else None, _set_flag("chunk", lambda row: 7)),
    Feature("kv_append", ("off",), lambda c: "off" if c.kv_append is None else "on",
            lambda c: "kv_append" if c.kv_append is not None else None, pairwise=False),
    Feature("dlse", ("off",), lambda c: "on" if c.lse_grad else "off", lambda c: "dlse" if c.lse_grad else None,
            pairwise=False),
)

#: the features of the pair-coverage model, in `FEATURES` order
PAIRWISE: tuple[Feature, ...] = tuple(f for f in FEATURES if f.pairwise)


def _c(fa: str, va: tuple[str, ...], fb: str, vb: tuple[str, ...], reason: str) -> Constraint:
    return Constraint((fa, frozenset(va)), (fb, frozenset(vb)), reason)


_FP8_ON = ("per_tensor", "per_head", "per_tile")

#: value pairs no case combines (a generated case never holds one; coverage does not ask for them)
CONSTRAINTS: tuple[Constraint, ...] = (
    _c("dtype", _FP8_DTYPES, "fp8", ("none",), "an FP8 dtype needs FP8 scaling settings (SEMANTICS.md §10)"),
    _c("dtype", _DENSE_DTYPES, "fp8", _FP8_ON, "FP8 scaling applies to FP8 dtypes only (SEMANTICS.md §10)"),
    _c("fp8", _FP8_ON, "backward", ("on",), "FP8 attention is forward only (SEMANTICS.md §10)"),
    _c("fp8", _FP8_ON, "layout", ("paged",), "FP8 is not combined with paging (SEMANTICS.md §16)"),
    _c("sinks", ("on",), "fp8", _FP8_ON, "no built-in adapter claims FP8 with sinks; drop this when one does"),
    _c("chunk", ("on",), "fp8", _FP8_ON, "no built-in adapter claims FP8 with chunks; drop this when one does"),
    _c("layout", ("paged",), "backward", ("on",),
       "no built-in adapter claims a paged backward (SEMANTICS.md §16 defines paged storage for the forward); "
       "drop this constraint when one does"),
)


def feature(name: str) -> Feature:
    """The feature called ``name``; KeyError lists the names."""
    for f in FEATURES:
        if f.name == name:
            return f
    raise KeyError(f"unknown feature {name!r}; known: {[f.name for f in FEATURES]}")


def values_of(case: Case, features: tuple[Feature, ...] = PAIRWISE) -> dict[str, str]:
    """The value of every feature of ``features`` (default: the pairwise ones) for ``case``."""
    return {f.name: f.value_of(case) for f in features}


def labels(case: Case) -> list[str]:
    """The report labels of ``case`` (the columns of the adapter x feature matrix), in `FEATURES` order."""
    out = []
    for f in FEATURES:
        lab = f.label(case)
        if lab:
            out.append(lab)
    return out


def _forbidden_table() -> dict[tuple[tuple[str, str], tuple[str, str]], Constraint]:
    table = {}
    for c in CONSTRAINTS:
        (fa, va), (fb, vb) = c.a, c.b
        for x in va:
            for y in vb:
                table.setdefault(((fa, x), (fb, y)), c)
                table.setdefault(((fb, y), (fa, x)), c)
    return table


_FORBIDDEN = _forbidden_table()


def forbidden(f1: str, v1: str, f2: str, v2: str) -> Constraint | None:
    """The constraint forbidding (f1=v1, f2=v2), or None."""
    return _FORBIDDEN.get(((f1, v1), (f2, v2)))


def consistent(row: Mapping[str, str]) -> bool:
    """No two values of the (partial) row are forbidden together."""
    items = list(row.items())
    for i, (f1, v1) in enumerate(items):
        for f2, v2 in items[i + 1:]:
            if forbidden(f1, v1, f2, v2) is not None:
                return False
    return True


def realize(family: str, row: Mapping[str, str], index: int = 0, **base: Any) -> Case:
    """The case holding every value of ``row`` (a full assignment of `PAIRWISE`), from small base shapes.

    ``index`` (the row's number in its design) varies what the features leave open (Lq < Lk or Lq > Lk); it
    travels in the keyword arguments as ``_index`` while the features write them, and is removed after.
    """
    kw: Kwargs = dict(B=2, Hq=4, Hkv=4, Lq=24, Lk=40, d=32, dv=32, dtype="float16", _index=index)
    kw.update(base)
    for f in sorted(PAIRWISE, key=lambda f: f.stage):
        if f.apply is not None:
            f.apply(kw, row[f.name], row)
    kw.pop("_index")
    case = Case(family=family, **kw)
    got = values_of(case)
    if got != dict(row):
        wrong = {k: (row[k], got[k]) for k in row if got.get(k) != row[k]}
        raise ValueError(f"realize: the {family} case {case.id} does not hold its row: {wrong} (wanted, got)")
    return case
