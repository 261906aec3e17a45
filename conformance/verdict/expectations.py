"""Expectations: known outcomes of named implementations, as web-platform-tests metadata or CTS waivers.

An expectations file (TOML, ``schema = 1``) lists entries::

    [[expectation]]
    id = "torch-cpu-flash-causal-nonpositive-scale"   # unique in its file
    adapters = ["torch-sdpa-flash"]                     # adapter names or --impl specs (fnmatch patterns)
    versions = ">=2.13,<2.14"                           # optional: the adapter's version() (first x.y.z in it)
    devices = ["cpu"]                                   # optional: "cpu", "cuda"
    gpu = ["H100", "H200"]                              # optional: a substring (or a list) of a visible GPU's name
    cases = "scale and causal"                          # optional: a -k expression over case ids
    where = {family = "scale", causal = true, scale = {max = 0.0}}   # optional: Case fields (value, list, range)
                                                        # or the derived gqa_ratio, dv_ratio (dv / d), varlen
    outcome = "FAIL"                                    # expected outcome(s), `EXPECTABLE`; default FAIL
    symptom = "non-finite value(s)"                     # optional: a substring of the verdict's message
    finding = "masked_nan"                              # optional: a named finding the verdict must carry
    reason = "what is wrong, where it was measured"     # required
    link = "https://github.com/..."                     # optional: the upstream issue
    repro = "repros/torch-cpu-flash-causal-nonpositive-scale.py"  # optional: a standalone repro file, relative
                                                        # to this file (`repro --standalone` writes one)

A result is *in scope* of an entry when adapter, version, device, GPU and case match. In scope:

- the expected outcome (and symptom, and finding), when it is a failing one (FAIL, CRASH, TIMEOUT)
  -> KNOWN: not failing, shown in every report with the entry's reason and link, the raw outcome kept
  in ``expectation.raw_outcome``; an expected FINDING or QUALITY_WARNING (not failing anyway) stays
  what it is, the entry named beside it (a named finding keeps its own count, conformance/verdict/outcomes.py);
- PASS, or a QUALITY_WARNING or FINDING the entry does not expect -> UNEXPECTED_PASS: failing (the
  kernel or the harness changed; remove or narrow the entry);
- another failure (other outcome or symptom) -> unchanged, with a note naming the entry;
- NOT_SUPPORTED or HARNESS_ERROR -> unchanged.

An entry applicable to the run (adapter run, device, GPU, version match) that no result fell under is
*unused* and reported as a warning: expectations that match nothing are deleted, not kept.

`DEFAULT_FILE` (package data) holds the project's own findings for the built-in adapters and is applied
by default by ``conformance run`` and by the pytest suite (``--expect FILE`` adds a file,
``--no-expect`` shows raw outcomes). Verdict semantics: SEMANTICS.md §1; fully masked rows and
padding: §6, §7.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from attention_conformance.cases.case import Case
from attention_conformance.verdict.outcomes import (
    FAILING,
    FINDING,
    HARNESS_ERROR,
    KNOWN,
    NOT_SUPPORTED,
    OUTCOMES,
    PASS,
    QUALITY_WARNING,
    UNEXPECTED_PASS,
)

__all__ = ["DEFAULT_FILE", "EXPECTABLE", "KNOWN", "UNEXPECTED_PASS", "Expectation", "ExpectationError", "RunContext",
           "Decision", "RunExpectations", "load", "load_files", "specifier", "version_in", "version_of", "decide",
           "applicable", "apply", "concerns_family", "report_rows", "unused_labels"]

DEFAULT_FILE = Path(__file__).parents[1] / "expectations.toml"
#: verdicts that do not fail a run: in an entry's scope and not what it expects, they are UNEXPECTED_PASS
_PASSING = (PASS, QUALITY_WARNING, FINDING)
#: verdicts an entry never changes (the adapter declined the case; the harness itself raised)
_INERT = (NOT_SUPPORTED, HARNESS_ERROR)
#: what an entry may expect
EXPECTABLE = tuple(o for o in OUTCOMES if o not in (PASS, NOT_SUPPORTED, HARNESS_ERROR, KNOWN, UNEXPECTED_PASS))
#: what a ``where`` may name: the Case's fields and the quantities it derives from them
_DERIVED = ("gqa_ratio", "dv_ratio", "varlen")
_CASE_FIELDS = {f.name for f in dataclasses.fields(Case)} | set(_DERIVED)
_KEYS = {"id", "adapter", "adapters", "versions", "device", "devices", "gpu", "cases", "where", "outcome",
         "symptom", "finding", "reason", "link", "repro"}
#: a PEP 440 version inside free text ("torch 2.13.0+cpu", "flash-attn-4 4.0.0b36", "0.7.2.post1"): release,
#: pre-release, post-release, dev part, local label
_VERSION = re.compile(r"\d+(?:\.\d+)*(?:[.-]?(?:a|b|rc)\.?\d*)?(?:[.-]?post\.?\d*)?(?:[.-]?dev\.?\d*)?"
                      r"(?:\+[0-9A-Za-z.]+)?")


class ExpectationError(ValueError):
    """A malformed expectations file; the message names the file, the entry and the key."""


@dataclass(frozen=True)
class Expectation:
    """One entry of an expectations file (see the module docstring)."""

    id: str
    adapters: tuple[str, ...]
    reason: str
    source: str = ""
    versions: str | None = None
    devices: tuple[str, ...] | None = None
    gpu: tuple[str, ...] | None = None  # any of these substrings of a visible GPU's name
    cases: str | None = None
    where: dict[str, Any] = field(default_factory=dict)
    outcomes: tuple[str, ...] = ("FAIL",)
    symptom: str | None = None
    finding: str | None = None
    link: str | None = None
    repro: str | None = None  # a standalone repro file, relative to the expectations file (checked to exist)

    def label(self) -> str:
        return f"{self.id} ({self.source})" if self.source else self.id

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "reason": self.reason, "link": self.link, "repro": self.repro,
                "outcomes": list(self.outcomes), "symptom": self.symptom, "finding": self.finding}


@dataclass(frozen=True)
class RunContext:
    """What an entry is matched against besides the case: the run's device, GPU names, adapter versions."""

    device: str = "cpu"
    gpus: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)  # adapter name or spec -> version()


@dataclass(frozen=True)
class Decision:
    """The outcome after expectations: the new outcome, the entry, and what to add to the message."""

    outcome: str
    expectation: Expectation | None
    note: str = ""


# -- versions (PEP 440, through `packaging`) ------------------------------------------------------
def version_of(text: str) -> Version | None:
    """The first PEP 440 version in ``text`` ("torch 2.13.0+cpu" -> 2.13.0+cpu, "4.0.0b36"), a dotted one before a
    bare number (the 4 of "flash-attn-4 4.0.0b36" names the library), or None."""
    found = [m.group(0) for m in _VERSION.finditer(text or "")]
    for token in sorted(found, key=lambda t: "." not in t):  # stable: dotted ones first, each group in order
        try:
            return Version(token)
        except InvalidVersion:
            continue
    return None


def specifier(spec: str) -> SpecifierSet:
    """``spec`` as a `packaging` specifier set; `ExpectationError` naming the clause that is not one."""
    for clause in spec.split(","):
        try:
            SpecifierSet(clause)
        except InvalidSpecifier:
            raise ExpectationError(f"version clause {clause.strip()!r} of {spec!r}: expected a PEP 440 specifier, "
                                   "e.g. '>=2.13', '<2.14' or '==2.13.*'") from None
    return SpecifierSet(spec)


def version_in(version: str, spec: str | None) -> bool:
    """Whether ``version`` (any text holding a version, e.g. "torch 2.13.0+cpu", "4.0.0b36") meets ``spec``.

    ``spec``: PEP 440 specifiers, comma-separated (``>=2.13,<2.14``, ``==2.13.*``, ``!=2.13.1``, ``~=2.13``: at
    least 2.13, same major); pre-releases take part in comparisons (``>=4.0.0b30`` holds 4.0.0b36; ``<4.0.0`` does
    not, PEP 440's exclusive ordering). None or "" = any. A version that cannot be read meets no spec.
    """
    if not spec:
        return True
    specs = specifier(spec)
    have = version_of(version)
    return have is not None and specs.contains(have, prereleases=True)


# -- loading --------------------------------------------------------------------------------------
def _strings(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(x, str) and x for x in items):
        raise ExpectationError(f"{where}: expected a non-empty string or list of strings, got {value!r}")
    return tuple(items)


def _repro(value: Any, base: Path | None, where_: str) -> str | None:
    """The ``repro`` key: a relative path to a file that exists beside the expectations file (`base`, its folder)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or Path(value).is_absolute():
        raise ExpectationError(f"{where_}: repro {value!r}: expected a path relative to the expectations file")
    if base is not None and not (base / value).is_file():
        raise ExpectationError(f"{where_}: repro {value!r}: no such file {base / value}")
    return value


def _entry(raw: dict, source: str, index: int, base: Path | None = None) -> Expectation:
    where_ = f"{source}: expectation #{index + 1}"
    if not isinstance(raw, dict):
        raise ExpectationError(f"{where_}: expected a table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ExpectationError(f"{where_}: unknown key(s) {unknown}; known: {sorted(_KEYS)}")
    ident = str(raw.get("id") or f"#{index + 1}")
    where_ = f"{source}: expectation {ident!r}"
    if "adapter" in raw and "adapters" in raw:
        raise ExpectationError(f"{where_}: give 'adapter' or 'adapters', not both")
    if "adapter" not in raw and "adapters" not in raw:
        raise ExpectationError(f"{where_}: 'adapters' is required")
    adapters = _strings(raw.get("adapters", raw.get("adapter")), f"{where_} adapters")
    if not isinstance(raw.get("reason"), str) or not raw["reason"].strip():
        raise ExpectationError(f"{where_}: 'reason' is required (what is wrong, where it was measured)")
    devices = raw.get("devices", raw.get("device"))
    devices_t = _strings(devices, f"{where_} devices") if devices is not None else None
    if devices_t is not None and not set(devices_t) <= {"cpu", "cuda"}:
        raise ExpectationError(f"{where_}: devices {list(devices_t)}: expected 'cpu' and/or 'cuda'")
    outcomes = _strings(raw.get("outcome", "FAIL"), f"{where_} outcome")
    bad = [o for o in outcomes if o not in EXPECTABLE]
    if bad:
        raise ExpectationError(f"{where_}: outcome {bad}: expected one of {list(EXPECTABLE)}")
    where = raw.get("where", {})
    if not isinstance(where, dict):
        raise ExpectationError(f"{where_}: 'where' must be a table of Case fields")
    unknown = sorted(set(where) - _CASE_FIELDS)
    if unknown:
        raise ExpectationError(f"{where_}: 'where' names unknown Case field(s) {unknown} (fields, or the derived "
                               f"{', '.join(_DERIVED)})")
    versions = raw.get("versions")
    if versions is not None:
        try:
            specifier(str(versions))
        except ExpectationError as exc:
            raise ExpectationError(f"{where_}: versions: {exc}") from None
    cases = raw.get("cases")
    if cases is not None:
        from attention_conformance.cases import catalog

        try:
            catalog.select([], str(cases))
        except ValueError as exc:
            raise ExpectationError(f"{where_}: cases {cases!r}: {exc}") from None
    gpu = None if raw.get("gpu") is None else _strings(raw["gpu"], f"{where_} gpu")
    return Expectation(id=ident, adapters=adapters, reason=raw["reason"].strip(), source=source,
                       versions=None if versions is None else str(versions), devices=devices_t,
                       gpu=gpu, cases=None if cases is None else str(cases), where=dict(where),
                       outcomes=outcomes, symptom=raw.get("symptom"), finding=raw.get("finding"),
                       link=raw.get("link"), repro=_repro(raw.get("repro"), base, where_))


def load(path: str | Path) -> list[Expectation]:
    """The entries of one expectations file; `ExpectationError` names the file and entry when malformed."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise ExpectationError(f"cannot read expectations file {p}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationError(f"{p}: not valid TOML: {exc}") from None
    if data.get("schema", 1) != 1:
        raise ExpectationError(f"{p}: schema {data.get('schema')!r}; this harness reads schema 1")
    unknown = sorted(set(data) - {"schema", "expectation"})
    if unknown:
        raise ExpectationError(f"{p}: unknown top-level key(s) {unknown}; entries go in [[expectation]] tables")
    source = p.name if p == DEFAULT_FILE else str(p)
    entries = [_entry(raw, source, i, p.parent) for i, raw in enumerate(data.get("expectation", []))]
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise ExpectationError(f"{p}: two expectations have id {e.id!r}")
        seen.add(e.id)
    return entries


def load_files(paths: Iterable[str | Path], default: bool = True) -> list[Expectation]:
    """`DEFAULT_FILE` (when ``default``) followed by the entries of ``paths``, in order."""
    out = load(DEFAULT_FILE) if default else []
    for p in paths:
        out.extend(load(p))
    return out


# -- matching -------------------------------------------------------------------------------------
def _field_matches(value: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if value is None:
            return False
        lo, hi = want.get("min"), want.get("max")
        return (lo is None or value >= lo) and (hi is None or value <= hi)
    if isinstance(want, list):
        return any(_field_matches(value, w) for w in want)
    if isinstance(value, tuple) and isinstance(want, list | tuple):
        return list(value) == list(want)
    return value == want


def _case_matches(e: Expectation, case: Case) -> bool:
    for name, want in e.where.items():
        if not _field_matches(getattr(case, name), want):
            return False
    if e.cases:
        from attention_conformance.cases import catalog

        return bool(catalog.select([case], e.cases))
    return True


def concerns_family(e: Expectation, family: str | None) -> bool:
    """Whether cases of catalog family ``family`` (None: any) can fall under ``e`` (its ``where`` names no family,
    or this one): an entry of the property suite's families is not unused in a run of the catalog alone."""
    return family is None or "family" not in e.where or _field_matches(family, e.where["family"])


def unused_labels(entries: Sequence[Expectation], used: Iterable[str],
                  seen: Iterable[tuple[str, str, str | None]], ctx: RunContext) -> list[str]:
    """Labels of the entries no result fell under although one of ``seen`` concerns them: (adapter, spec, case
    family or None) of what ran, `applicable` and `concerns_family`. Expectations that match nothing are deleted."""
    used, seen = set(used), list(seen)
    return [e.label() for e in entries if e.label() not in used
            and any(applicable(e, a, s, ctx) and concerns_family(e, f) for a, s, f in seen)]


def applicable(e: Expectation, adapter: str, spec: str, ctx: RunContext) -> bool:
    """Whether ``e`` concerns this adapter (name or spec) on this run's device, GPU and adapter version."""
    if not any(fnmatch.fnmatchcase(adapter, pat) or fnmatch.fnmatchcase(spec, pat) for pat in e.adapters):
        return False
    if e.devices is not None and ctx.device.split(":")[0] not in e.devices:
        return False
    if e.gpu is not None and not any(name.lower() in g.lower() for name in e.gpu for g in ctx.gpus):
        return False
    if e.versions:
        version = ctx.versions.get(adapter, ctx.versions.get(spec, ""))
        if not version_in(version, e.versions):
            return False
    return True


def _expected(e: Expectation, outcome: str, message: str, findings: Sequence[str]) -> bool:
    return (outcome in e.outcomes and (e.symptom is None or e.symptom in message)
            and (e.finding is None or _names_finding(e.finding, message, findings)))


def _names_finding(name: str, message: str, findings: Sequence[str]) -> bool:
    """Whether a verdict carries the named finding ``name``: in its findings (``masked_nan:out``), or named
    in its message, as the FAIL of a named finding under ``--strict`` is (SEMANTICS.md §17)."""
    return any(f == name or f.split(":", 1)[0] == name for f in findings) or \
        re.search(rf"\b{re.escape(name)}\b", message) is not None


def decide(entries: Sequence[Expectation], case: Case, adapter: str, spec: str, outcome: str, message: str,
           findings: Sequence[str], ctx: RunContext) -> Decision:
    """The outcome of one (case, adapter) verdict after ``entries`` (first matching entry wins)."""
    scope = [e for e in entries if applicable(e, adapter, spec, ctx) and _case_matches(e, case)]
    if not scope or outcome in _INERT:
        return Decision(outcome, None)
    for e in scope:
        if _expected(e, outcome, message, findings):
            link = f" ({e.link})" if e.link else ""
            if outcome not in FAILING:  # an expected FINDING / QUALITY_WARNING stays what it is, confirmed
                return Decision(outcome, e, f"expected by {e.label()}: {e.reason}{link}")
            return Decision(KNOWN, e, f"KNOWN ({e.label()}, raw outcome {outcome}): {e.reason}{link}")
    e = scope[0]
    want = "/".join(e.outcomes) + (f" with {e.symptom!r}" if e.symptom else "") + \
        (f" and finding {e.finding!r}" if e.finding else "")
    if outcome in _PASSING:
        return Decision(UNEXPECTED_PASS, e, f"UNEXPECTED_PASS: expected {want} by expectation {e.label()}, "
                                           f"got {outcome}; remove or narrow that entry ({e.reason})")
    return Decision(outcome, e, f"expectation {e.label()} expected {want}; this is another failure")


def apply(entries: Sequence[Expectation], items: Iterable[tuple[Case, Any]], ctx: RunContext) -> tuple[list, dict]:
    """``entries`` applied to ``(case, result)`` pairs (results with ``outcome``, ``message``, ``findings``,
    ``adapter``, ``spec``, ``expectation`` attributes, e.g. `conformance.running.engine.CaseResult`).

    Returns (new results: shallow copies where an entry applied, the others as they were, in order; usage
    summary ``{"files", "entries", "used": {label: results in scope}, "unused": [labels], "known",
    "unexpected_pass"}``). ``unused``: entries applicable to an adapter of the run under which no result fell.
    """
    used: dict[str, int] = {}
    known = unexpected = 0
    seen: set[tuple[str, str, str]] = set()  # (adapter, spec, case family) of every result
    out = []
    for case, r in items:
        seen.add((r.adapter, r.spec, case.family))
        v = decide(entries, case, r.adapter, r.spec, r.outcome, r.message, r.findings, ctx)
        if v.expectation is None:
            out.append(r)
            continue
        r = copy.copy(r)
        used[v.expectation.label()] = used.get(v.expectation.label(), 0) + 1
        r.expectation = {**v.expectation.to_dict(), "raw_outcome": r.outcome, "note": v.note,
                         "matched": v.outcome in (KNOWN, UNEXPECTED_PASS)}
        known += v.outcome == KNOWN
        unexpected += v.outcome == UNEXPECTED_PASS
        r.outcome = v.outcome
        r.message = f"{v.note}\n{r.message}" if r.message else v.note
        out.append(r)
    return out, {"files": sorted({e.source for e in entries}), "entries": len(entries), "used": used,
                 "unused": unused_labels(entries, used, seen, ctx), "known": known, "unexpected_pass": unexpected}


class RunExpectations:
    """The expectations of one run: the entries and the run's context (`run_context.ConformanceRun` counts which
    entries its verdicts fell under)."""

    def __init__(self, entries: Sequence[Expectation], ctx: RunContext):
        self.entries = list(entries)
        self.ctx = ctx

    @classmethod
    def for_run(cls, files: Sequence[str], *, default: bool, device: str, loaded: Sequence[Any]) -> RunExpectations:
        """`DEFAULT_FILE` (unless not ``default``) and ``files``, matched against the ``loaded`` adapters'
        versions on ``device`` (GPU names from `conformance.running.environment`)."""
        entries = load_files(files, default=default)
        gpus: tuple[str, ...] = ()
        if any(e.gpu for e in entries):  # this machine's GPU names, which an entry's `gpu` field is matched against
            from attention_conformance.running.environment import environment

            gpus = tuple(g["name"] for g in environment().get("gpus", []))
        versions: dict[str, str] = {}
        for la in loaded:
            if la.adapter is None:
                continue
            try:
                versions[la.name] = versions[la.spec] = str(la.adapter.version())
            except Exception as exc:  # an adapter whose version() raises matches no version range
                versions[la.name] = versions[la.spec] = f"version() raised {type(exc).__name__}"
        return cls(entries, RunContext(device, gpus, versions))

    def apply(self, results: Sequence[Any]) -> list:
        """``results`` (`CaseResult`s, raw outcomes) with the entries applied (`apply`), in order."""
        if not self.entries:
            return list(results)
        return apply(self.entries, [(Case.from_dict(r.case), r) for r in results], self.ctx)[0]


def report_rows(results: Iterable[dict]) -> list[dict]:
    """One row per expectations entry that verdicts of a report fell under (report.json ``results`` dicts):
    ``{"id", "source", "reason", "link", "repro", "adapters", "outcomes": {outcome: n}}``, most results first."""
    rows: dict[tuple[str, str], dict] = {}
    for r in results:
        e = r.get("expectation")
        if not e:
            continue
        row = rows.setdefault((e["id"], e.get("source", "")), {"id": e["id"], "source": e.get("source", ""),
                                                              "reason": e.get("reason", ""), "link": e.get("link"),
                                                              "repro": e.get("repro"), "adapters": [],
                                                              "outcomes": {}})
        if r["adapter"] not in row["adapters"]:
            row["adapters"].append(r["adapter"])
        row["outcomes"][r["outcome"]] = row["outcomes"].get(r["outcome"], 0) + 1
    return sorted(rows.values(), key=lambda x: (-sum(x["outcomes"].values()), x["id"]))
