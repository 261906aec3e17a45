"""The run context: one place where a front end (the CLI, the pytest plugin, the property suite) turns its
options into adapters, expectations and an engine, and one function that turns raw verdicts into final ones.

Every front end goes through `open_run`:

- `resolve_adapters` applies the ``--impl`` rules (SEMANTICS.md §1: a verdict is about an implementation the
  user named): no ``--impl`` = every built-in adapter available on the device; ``all`` = every built-in, the
  unavailable ones listed as NOT_SUPPORTED; an adapter named explicitly that cannot run here (unknown name,
  import error, wrong device) is a `UsageError` with one line saying why, never a silent skip;
- `ConformanceRun` holds the loaded adapters, the expectations with the run's context (device, the GPU names
  of this machine, each adapter's version: `expectations.RunContext`) and the settings the engine needs
  (strictness, determinism sampling, timeout);
- `ConformanceRun.decide` is the one decision: the memory family's cross-case growth verdict
  (`growth.apply_growth`), then the expectations (KNOWN / UNEXPECTED_PASS), on raw `engine.CaseResult`s.
  The CLI applies it to the whole run; the pytest plugin to each test's results (with the memory series the
  test belongs to); the property suite to each drawn case.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from attention_conformance.adapters.registry import LoadedAdapter
from attention_conformance.verdict.outcomes import KNOWN, UNEXPECTED_PASS

__all__ = ["UsageError", "check_specs", "RunSettings", "ConformanceRun", "resolve_adapters", "open_run",
           "default_device",
           "one_line", "DETERMINISM"]

#: ``--determinism`` choices: no repeat, a fixed quarter of the cases, every case
DETERMINISM = ("none", "sampled", "all")


class UsageError(Exception):
    """A usage error: the CLI prints it as one ``error:`` line and exits 2; the plugin raises pytest's."""


def one_line(text: object) -> str:
    """``text`` flattened to one line (an exception message may hold newlines)."""
    return " ".join(str(text).split())


def default_device() -> str:
    """``$CONFORMANCE_DEVICE``, else ``cpu``: the device when ``--device`` is not given."""
    return os.environ.get("CONFORMANCE_DEVICE", "cpu")


@dataclass(frozen=True)
class RunSettings:
    """What a front end's options say about a run (the CLI's and the plugin's options of the same names)."""

    device: str = "cpu"
    profile: str = "ci"
    strict: bool = False  # named findings are FAIL (SEMANTICS.md §17)
    determinism: str = "sampled"
    timeout: float = 300.0  # seconds per call of an isolated adapter
    expect_files: tuple[str, ...] = ()
    default_expect: bool = True  # the shipped conformance/expectations.toml

    def __post_init__(self) -> None:
        if self.determinism not in DETERMINISM:
            raise UsageError(f"--determinism {self.determinism!r}: expected one of {', '.join(DETERMINISM)}")
        if self.expect_files and not self.default_expect:
            raise UsageError("--expect and --no-expect exclude each other")


def check_specs(specs: Iterable[str]) -> None:
    """`UsageError` for the first ``--impl`` spec that names no adapter (unknown name: the closest built-in)."""
    from attention_conformance.adapters.registry import spec_error

    for spec in (part.strip() for s in specs for part in s.split(",")):  # "a,b" as `resolve_specs` reads it
        problem = spec_error(spec) if spec else None
        if problem:
            raise UsageError(f"--impl: {problem}")


def resolve_adapters(impl: Sequence[str] | None, device: str) -> list[LoadedAdapter]:
    """The adapters a run uses, by the one set of ``--impl`` rules (module docstring); `UsageError` otherwise."""
    from attention_conformance.adapters.registry import builtin_names, load_many, resolve_specs

    check_specs(list(impl or []))
    specs, explicit = resolve_specs(list(impl) if impl else None)
    loaded = load_many(specs, device)
    if not impl:
        loaded = [la for la in loaded if la.available]
    broken = [la for la in loaded if la.adapter is None and la.spec not in builtin_names()]
    if broken:  # a module:attr (or file.py:attr) the user named that cannot be imported or is not an adapter
        raise UsageError("; ".join(f"--impl {la.spec}: {one_line(la.reason)}" for la in broken))
    missing = [la for la in loaded if not la.available]
    if explicit and missing:  # named but cannot run here: a CI job must not pass without testing it
        raise UsageError("; ".join(f"--impl {la.spec} is unavailable on {device}: {one_line(la.reason)}"
                                   for la in missing)
                         + f" (see `python -m attention_conformance list --device {device}`)")
    if not loaded:
        raise UsageError(f"no adapter available on {device} (try `python -m attention_conformance list`)")
    return loaded


@dataclass
class ConformanceRun:
    """The adapters, settings and expectations of one run, and the one decision over its raw verdicts."""

    settings: RunSettings
    loaded: list[LoadedAdapter]
    expectations: Any = None  # expectations.RunExpectations
    #: label of each entry some decided verdict fell under -> how many (`unused` lists the applicable others)
    used: dict[str, int] = field(default_factory=dict)
    known: int = 0
    unexpected_pass: int = 0
    #: the catalog families of the results `decide` saw (an entry of other families is not unused)
    families: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.expectations is None:
            from attention_conformance.verdict.expectations import ExpectationError, RunExpectations

            try:
                self.expectations = RunExpectations.for_run(list(self.settings.expect_files),
                                                            default=self.settings.default_expect,
                                                            device=self.settings.device, loaded=self.loaded)
            except ExpectationError as exc:
                raise UsageError(f"--expect: {one_line(exc)}") from None

    @property
    def device(self) -> str:
        return self.settings.device

    @property
    def unavailable(self) -> list[LoadedAdapter]:
        """Adapters of the run that cannot run here (only with ``--impl all``: their cases are NOT_SUPPORTED)."""
        return [la for la in self.loaded if not la.available]

    def runner(self, adapters: Sequence[LoadedAdapter] | None = None, **kw: Any):
        """An `engine.Runner` over ``adapters`` (default: the run's) with the run's settings."""
        from attention_conformance.running.engine import Runner

        s = self.settings
        return Runner(self.loaded if adapters is None else list(adapters), s.device, timeout=s.timeout,
                      determinism=s.determinism, strict=s.strict, **kw)

    def decide(self, results: Sequence[Any], *, record: bool = True) -> list:
        """The final verdicts of raw ``results`` (`engine.CaseResult`s of this run): the memory family's
        growth verdict over the results given, then the expectations. The raw results are not changed.
        ``record``: count the entries used (`summary`, `unused`); a partial report of a run passes False."""
        import copy

        from attention_conformance.verdict import growth

        results = [copy.deepcopy(r) for r in results]
        self.families.update(r.family for r in results)
        growth.apply_growth(results, growth.claims_of(self.loaded))
        out = self._expect(results)
        for r in out if record else ():
            if r.expectation:
                label = _label(r.expectation)
                self.used[label] = self.used.get(label, 0) + 1
                self.known += r.outcome == KNOWN
                self.unexpected_pass += r.outcome == UNEXPECTED_PASS
        return out

    def _expect(self, results: Sequence[Any]) -> list:
        return self.expectations.apply(results)

    @property
    def summary(self) -> dict[str, Any]:
        """The expectations' usage over what `decide` saw (report.json ``expectations``)."""
        entries = self.expectations.entries
        return {"files": sorted({e.source for e in entries}), "entries": len(entries), "used": dict(self.used),
                "unused": self.unused(), "known": self.known, "unexpected_pass": self.unexpected_pass}

    def adapter_notes(self) -> list[str]:
        """One line per note an adapter of the run makes about the calls it will make: what a plain function's
        signature implies against torch SDPA's keywords (`adapters.sdpa_signature`). The CLI prints them before
        the run, the plugin in its terminal summary; each failure of that adapter repeats them."""
        return [f"note: {la.spec}: {n}" for la in self.loaded if la.adapter is not None
                for n in getattr(la.adapter, "signature_notes", ())]

    def warnings(self) -> list[str]:
        """One line per entry that matched no verdict of the run (delete it, or it hides nothing)."""
        return [f"warning: expectation {label} matched no result of this run" for label in self.unused()]

    def unused(self, ran: Iterable[LoadedAdapter] | None = None) -> list[str]:
        """Labels of entries applicable to an adapter that ran (default: every loaded one) under which no
        verdict fell: expectations that match nothing are deleted, not kept."""
        from attention_conformance.verdict.expectations import unused_labels

        families = tuple(self.families) or (None,)
        seen = [(la.name, la.spec, f) for la in (self.loaded if ran is None else ran) if la.adapter is not None
                for f in families]
        return unused_labels(self.expectations.entries, self.used, seen, self.expectations.ctx)

    def applicable(self, la: LoadedAdapter, families: Iterable[str] | None = None) -> list[str]:
        """Labels of the entries that concern adapter ``la`` in this run's context (device, GPU, versions), and with
        ``families`` cases of one of those catalog families (`expectations.concerns_family`)."""
        from attention_conformance.verdict.expectations import applicable, concerns_family

        if la.adapter is None:
            return []
        ctx = self.expectations.ctx
        fams = (None,) if families is None else tuple(families)
        return [e.label() for e in self.expectations.entries if applicable(e, la.name, la.spec, ctx)
                and any(concerns_family(e, f) for f in fams)]

    @staticmethod
    def label_of(result: Any) -> str | None:
        """The label of the expectations entry a decided verdict fell under, or None."""
        return _label(result.expectation) if getattr(result, "expectation", None) else None

    def progress_outcome(self, result: Any) -> str:
        """The outcome a progress line counts for a raw result: after the expectations (a failure an entry
        expects is counted KNOWN, as the final line reports it), without recording it as used."""
        return self._expect([result])[0].outcome


def _label(expectation: dict) -> str:
    source = expectation.get("source") or ""
    return f"{expectation['id']} ({source})" if source else expectation["id"]


def open_run(settings: RunSettings, impl: Sequence[str] | None) -> ConformanceRun:
    """Resolve ``impl`` on ``settings.device`` and load the expectations: the run every front end uses."""
    return ConformanceRun(settings, resolve_adapters(impl, settings.device))
