"""Kernel properties: Hypothesis draws cases an adapter claims and judges them against the oracle.

One property per kind of work an adapter declares (see `properties_for`):

- ``forward``: plain dtypes (fp16/bf16/fp32/fp64), every feature the capabilities claim;
- ``backward``: the same with ``backward=True`` (dq, dk, dv checked);
- ``fp8``: FP8 cases (format, granularity, incoherent processing) for FP8 adapters;
- ``edges``: lengths at tile edges only, always with a source of fully masked rows
  (`strategies.edge_cases`: empty mask rows, -inf bias rows, bottom-right causal with Lq > Lk, empty
  varlen sequences, narrow windows);
- ``fp8_offset``: FP8 adapters on *peaked* rows (one dominant key, hundreds of keys whose probability
  is ~2^-11 .. 2^-13 of it), judged with the subnormal floor of P lowered by the max offset 2^8 of
  SEMANTICS.md §10 (P~ = P * 256 before the FP8 rounding keeps those probabilities out of the
  subnormals; a kernel without the offset flushes them and loses their mass).

Every strategy is built from the adapter's declaration (`Capabilities`: dtypes, head dims incl. 128 and 256,
backward head dims, FP8 granularities, formats and tile shapes, sequence-length multiple, features, layouts;
`property_tests.strategies`), so a case outside it is never drawn. Each example runs
`property_tests.kernel_check.evaluate` (the engine's checks and tolerance policy), calls ``target()`` on the
tolerance usage ratio (error / tolerance) so Hypothesis hunts the worst case, and ``event()`` for statistics.

What an example's verdict does to the property:

- a pass (PASS, QUALITY_WARNING, FINDING): holds;
- a failure that a known-findings entry expects (`property_tests.known`, with its symptom): KNOWN, recorded in
  `PropertyRun.known`, the property holds;
- any other failure: `PropertyFailure`, whose message carries the minimal case, the failing check, the
  expectations entry whose symptom did not match (if one was in scope) and a one-line repro command;
- NOT_SUPPORTED on a claimed draw: `PropertyFailure` (the adapter declined what its declaration claims: a limit
  written only in ``supports()``), except for an adapter whose declaration names a ``library_check`` (the
  library's own run-time refusal, e.g. torch's SDPA dispatcher): then the draw is rejected and counted in
  `PropertyRun.declined`, never a silent pass.

`PINNED` holds ``@example`` cases: every bug found so far is replayed first on every run (those the declaration
claims).

The test module (`test_kernel_properties.py`) and the mutant runner both build their tests here.
"""

from __future__ import annotations

import json
import shlex
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import event, example, given, reject, settings, target
from hypothesis import seed as fixed_seed
from hypothesis import strategies as st

from attention_conformance.adapters.base import Adapter, Capabilities, capability_reason
from attention_conformance.cases.case import LAYOUTS, Case, FP8Spec
from attention_conformance.property_tests.kernel_check import evaluate
from attention_conformance.property_tests.known import KnownFindings
from attention_conformance.property_tests.profiles import build_per_shape_examples, shard_examples
from attention_conformance.property_tests.strategies import (
    FP8_FORMATS,
    FP8_GRANULARITIES,
    attention_cases,
    declared_or_reject,
    edge_cases,
    edge_kinds,
)
from attention_conformance.verdict.judge import Verdict
from attention_conformance.verdict.outcomes import KNOWN, NOT_SUPPORTED

__all__ = ["KINDS", "PINNED", "KnownHit", "PropertyFailure", "PropertyRun", "build_property", "check_fp8_offset",
           "declaration", "offset_model", "peaked_fp8_cases", "peaked_inputs", "properties_for", "property_strategy",
           "repro_command"]

KINDS = ("forward", "backward", "fp8", "edges", "fp8_offset")
#: log2 of the FP8 max offset of SEMANTICS.md §10 (P~ = exp2((s - m) log2 e + 8))
FP8_MAX_OFFSET_LOG2 = 8


class PropertyFailure(AssertionError):
    """A kernel property failed; ``case`` and ``verdict`` describe the (shrunk) counterexample."""

    def __init__(self, message: str, case: Case, verdict: Verdict):
        super().__init__(message)
        self.case = case
        self.verdict = verdict


def repro_command(adapter_name: str, case: Case, device: str = "cpu") -> str:
    """A one-line shell command that re-runs ``case`` on ``adapter_name`` on ``device`` and prints the verdict: the
    repro command of every failure (``repro CASE --run``, the case given as JSON; exit 1 while it fails)."""
    payload = json.dumps(case.to_dict(), separators=(",", ":"), default=list)
    dev = "" if device == "cpu" else f" --device {shlex.quote(device)}"
    return f"python -m attention_conformance repro {shlex.quote(payload)} --impl {shlex.quote(adapter_name)}{dev} --run"


def _pin(family: str, **kw) -> Case:
    base = dict(B=1, Hq=1, Hkv=1, Lq=1, Lk=1, d=8, dv=8, dtype="float32")
    base.update(kw)
    return Case(family=family, **base)


#: Pinned counterexamples (replayed first, before any random example), by property kind. Each one is a
#: minimal case that exposed a bug (in a mutant of the catalog, or in a real kernel) during development.
PINNED: dict[str, tuple[Case, ...]] = {
    "forward": (
        # tail tile: Lk one past a 16-key tile, causal bottom-right with Lq < Lk (dropped / over-read tails)
        _pin("pinned", Lq=3, Lk=17, causal=True, alignment="bottom_right"),
        # a fully masked row from bottom-right causal with Lq > Lk (NaN, mean(V), LSE convention)
        _pin("pinned", Lq=3, Lk=2, causal=True, alignment="bottom_right"),
        # large logits: exp overflows without the max subtraction
        _pin("pinned", Lq=2, Lk=3, distribution="large_logits"),
        # GQA 2:1 with two kv heads (h % Hkv vs h // G)
        _pin("pinned", Hq=4, Hkv=2, Lq=2, Lk=2),
        # many keys in fp32 over three 128-key tiles: l accumulated in bf16 drifts past the fp32 bound, and a
        # wrong rescale factor (exp for exp2) shows when the running max grows in a later tile
        _pin("pinned", Lq=4, Lk=257, distribution="uniform"),
        # strided [B, L, H, D] input: a kernel that ignores strides reads the wrong rows
        _pin("pinned", Hq=2, Hkv=2, Lq=3, Lk=3, layout="bshd"),
        # REAL BUG (found by this suite, dev profile, 2026-11-29): torch 2.13 CPU SDPA flash backend returns
        # NaN for is_causal=True with a negative scale (fp16/bf16/fp32); cf. torch PR #105202 (math backend)
        _pin("pinned", Lq=2, Lk=2, dtype="float16", causal=True, scale=-0.35355339059327373),
        # FINDING (gpu profile, H200, torch 2.11+cu130): torch-sdpa-efficient LSE off by 8 fp32 ulps at
        # LSE ~ 1600 (large logits): error 9.8e-4 > bound 9.0e-4 (usage 1.09)
        _pin("pinned", Hq=8, Hkv=8, Lq=11, Lk=11, d=4, dv=4, distribution="large_logits"),
    ),
    "backward": (
        _pin("pinned", Hq=2, Hkv=1, Lq=2, Lk=2, backward=True),
        _pin("pinned", Lq=3, Lk=2, causal=True, backward=True),
        # torch 2.13 CPU SDPA flash backward, bf16, MQA 8:1: dv usage 1.04 under the backward bound of 15:25
        # (2026-11-29), 0.47 under the revised bound of conformance/verdict/bounds.py 15:44; kept as a regression case
        _pin("pinned", Hq=8, Hkv=1, Lq=1, Lk=7, dtype="bfloat16", backward=True),
        # REAL BUG (gpu profile, H200, torch 2.11+cu130): torch-sdpa-flash (CUDA) returns NaN outputs for a
        # negative scale even without causal (row max taken before scaling, as if scale > 0)
        _pin("pinned", Hq=5, Hkv=5, Lq=1, Lk=1, dtype="float16", scale=-1.0, alignment="top_left", backward=True),
        # REAL BUG (same run): torch-sdpa-cudnn backward gives NaN dq for a negative scale (Lq=1, Lk=2)
        _pin("pinned", Lq=1, Lk=2, dtype="float16", scale=-0.35355339059327373, backward=True),
    ),
    "fp8": (
        _pin("pinned", Lq=2, Lk=17, d=16, dv=16, dtype="float8_e4m3fn",
             fp8=FP8Spec(granularity="per_tensor", incoherent=True)),
        _pin("pinned", Lq=1, Lk=64, d=16, dv=16, dtype="float8_e4m3fn", distribution="uniform",
             fp8=FP8Spec(granularity="per_tensor")),
    ),
    "edges": (
        # FINDING (dev profile, 2026-11-29): the torch-sdpa-flash adapter claims this case, torch 2.13's CPU
        # flash backend raises "No available kernel" on it (d=1, [B, L, H, D] strided inputs, Lq=1)
        _pin("pinned", Hq=2, Hkv=2, Lq=1, Lk=2, d=1, dv=1, dtype="float16", distribution="ties", layout="bshd"),
        # FINDING (gpu profile, H200, torch 2.11+cu130): torch-sdpa-efficient returns LSE = 0 (not -inf) for a
        # fully masked row of a boolean mask (SEMANTICS.md §8)
        _pin("pinned", Lq=1, Lk=1, dtype="float16", mask="full_rows"),
        # FINDING (same run): torch-sdpa-cudnn returns a non-zero output (0.911) for an all-False mask row
        _pin("pinned", Lq=1, Lk=2, dtype="float16", mask="full_rows"),
    ),
    "fp8_offset": (),
}


def peaked_fp8_cases(caps: Capabilities, device: str = "cpu", *,
                     strict: bool = False) -> st.SearchStrategy[tuple[Case, float, int]]:
    """(case, peak, seed) for the fp8_offset property: rows with one dominant key and many keys ``peak`` nats below
    it (P = e^-peak in [2^-11, 2^-10.1], under the e4m3 flush threshold 2^-10), within the declaration ``caps``:
    its granularities, formats and per-tile shapes, head dims (8, 16, 32 where claimed, else the declared ones,
    e.g. 64, 128, 256), GQA, lengths (multiple, maximum) and a dense layout it claims."""
    grans = [g for g in FP8_GRANULARITIES if g in caps.fp8]
    if not grans:
        raise ValueError("peaked_fp8_cases: the declaration claims no FP8 granularity")
    fmts = [f for f in FP8_FORMATS if not caps.fp8_formats or f in caps.fp8_formats]
    dims = [x for x in (16, 8, 32) if caps.takes_head_dim(x)] or \
        sorted(x for x in (caps.head_dims or ()) if caps.takes_head_dim(x) and x >= 8) or [max(caps.min_head_dim, 8)]
    m = caps.seqlen_multiple or 1
    top = caps.max_seqlen or 4096

    def fits(n: int) -> bool:
        return n % m == 0 and n <= top

    lks = [n for n in (2048, 1025, 4096) if fits(n)] or [max(m, (min(2048, top) // m) * m)]
    lqs = [n for n in (1, 2, 3, 4) if fits(n)] or [m]
    layout = next((x for x in LAYOUTS if x in caps.layouts), "contiguous")  # dense: FP8 codes are never paged
    free = st.sampled_from([128, 64])
    tiles = st.sampled_from(sorted(caps.fp8_tiles)) if caps.fp8_tiles is not None else st.tuples(free, free)

    @st.composite
    def _draw(draw) -> tuple[Case, float, int]:
        granularity = draw(st.sampled_from(grans))
        tile_q, tile_k = draw(tiles if granularity == "per_tile" else st.tuples(free, free))
        d = draw(st.sampled_from(dims))
        spec = FP8Spec(format=draw(st.sampled_from(fmts)), granularity=granularity, tile_q=tile_q, tile_k=tile_k,
                       incoherent=draw(st.booleans()) and d & (d - 1) == 0)
        case = Case(family="hyp-fp8-peaked", B=1, Hq=draw(st.sampled_from([1, 2] if caps.gqa else [1])), Hkv=1,
                    Lq=draw(st.sampled_from(lqs)), Lk=draw(st.sampled_from(lks)), d=d, dv=d,
                    dtype="float8_" + spec.format, fp8=spec, layout=layout, seed=draw(st.integers(0, 2**16)))
        case = declared_or_reject(caps, case, device, strict)
        return case, draw(st.floats(7.0, 7.6)), draw(st.integers(0, 2**16))

    return _draw()


def peaked_inputs(case: Case, peak: float, seed: int):
    """FP8-quantized inputs with one dominant key per head (score 0) and the rest at score -peak."""
    import numpy as np

    from attention_conformance.adapters.base import CaseInputs
    from attention_conformance.oracles import fp8 as fp8mod

    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(case.d)
    q = np.zeros((case.B, case.Hq, case.Lq, case.d))
    q[..., 0] = 1.0
    k = 0.25 * rng.standard_normal((case.B, case.Hkv, case.Lk, case.d))  # invisible to q (q is e_0)
    k[..., 0] = -peak / scale
    dom = rng.integers(0, case.Lk)
    k[:, :, dom, 0] = 0.0
    v = rng.uniform(1.0, 3.0, (case.B, case.Hkv, case.Lk, case.dv))
    v[:, :, dom] = -rng.uniform(1.0, 3.0, case.dv)
    spec = case.fp8
    f = fp8mod.quantize_attention_inputs(q, k, v, **spec.quantize_kwargs())
    return CaseInputs(q=f["q"], k=f["k"], v=f["v"], fp8=f)


def offset_model(model):
    """`model` with the P floor eta_p lowered by the §10 max offset 2^8 (the fp8_offset property's bound)."""
    import dataclasses

    return dataclasses.replace(model, eta_p=model.eta_p * 2.0 ** -FP8_MAX_OFFSET_LOG2)


def check_fp8_offset(adapter: Adapter, case: Case, peak: float, seed: int, device: str) -> Verdict:
    """Forward on peaked rows, judged by `conformance.verdict.judge.judge` with the P floor lowered (`offset_model`)."""
    from attention_conformance.running.worker import call_adapter, collect_calls
    from attention_conformance.verdict.bounds import compute_oracle
    from attention_conformance.verdict.judge import judge

    reason = adapter.supports(case, device)
    if reason is not None:  # as the engine: a declined case is NOT_SUPPORTED, the adapter is never called
        return Verdict(outcome=NOT_SUPPORTED, message=reason)
    inputs = peaked_inputs(case, peak, seed)
    od = compute_oracle(case, inputs)
    results = collect_calls(lambda kind: call_adapter(adapter, kind, inputs, case, device), case, repeat=False)
    verdict = judge(case, od, results, device=device, capabilities=adapter.capabilities, model_adjust=offset_model)
    if verdict.failed:
        verdict.message = (f"{verdict.message}; peaked rows (peak={peak:.3f} nats, seed={seed}), P floor "
                           f"eta_p={verdict.tolerance_model.get('eta_p', float('nan')):.3g} (SEMANTICS.md §10 max "
                           f"offset 2^{FP8_MAX_OFFSET_LOG2}); case {case.id}")
    return verdict


@dataclass(frozen=True)
class KnownHit:
    """A draw whose failure an expectations entry expects: the case, the entry, the failure's first line."""

    case: Case
    expectation: str
    message: str


@dataclass
class PropertyRun:
    """A ready-to-call Hypothesis test plus the last failing case it saw (the shrunk one, after a run)."""

    kind: str
    adapter: Adapter
    test: Callable[[], None]
    last_failure: tuple[Case, Verdict] | None = None
    examples_run: int = 0  # examples judged (not those the library declined)
    events: Counter = field(default_factory=Counter)  # the same labels as event(), counted per example
    max_usage: float = 0.0
    known: list[KnownHit] = field(default_factory=list)  # failures an expectations entry expects (KNOWN)
    declined: list[tuple[Case, str]] = field(default_factory=list)  # claimed draws the library refused (rejected)
    budget: str = ""  # why fewer examples than the profile's are drawn ("" when the profile's count is)

    def event(self, label: str) -> None:
        self.events[label] += 1
        event(label)


def declaration(adapter: Adapter, device: str) -> Capabilities:
    """What ``adapter`` declares on ``device``: ``caps_for(device)`` where the declaration depends on the device (torch
    SDPA, FlexAttention, SDPA-signature functions), else ``capabilities``."""
    caps_for = getattr(adapter, "caps_for", None)
    caps = caps_for(device) if callable(caps_for) else None
    return caps if caps is not None else adapter.capabilities


def property_strategy(kind: str, adapter: Adapter, device: str = "cpu", *, strict: bool = False) -> st.SearchStrategy:
    """What property ``kind`` draws for ``adapter`` on ``device`` (cases; (case, peak, seed) for ``fp8_offset``), built
    from its declaration; ``strict``: a draw outside it other than an `Exclusion` raises `strategies.UndeclaredDraw`."""
    caps = declaration(adapter, device)
    if kind == "forward":
        return attention_cases(capabilities=caps, device=device, fp8=False, backward=False, family="hyp-fwd",
                               strict=strict)
    if kind == "backward":
        return attention_cases(capabilities=caps, device=device, fp8=False, backward=True, family="hyp-bwd",
                               max_work=1 << 17, strict=strict)
    if kind == "fp8":
        return attention_cases(capabilities=caps, device=device, fp8=True, backward=False, family="hyp-fp8",
                               strict=strict)
    if kind == "edges":
        return edge_cases(capabilities=caps, device=device, family="hyp-edge", strict=strict)
    if kind == "fp8_offset":
        return peaked_fp8_cases(caps, device, strict=strict)
    raise ValueError(f"unknown property kind {kind!r}; expected one of {KINDS}")


def properties_for(adapter: Adapter, device: str = "cpu") -> list[str]:
    """The property kinds ``adapter`` declares work for on ``device``."""
    caps = declaration(adapter, device)
    kinds = []
    if not caps.noncausal and not caps.alignments:  # a spelling that carries nothing here (no causal alignment)
        return kinds
    plain = [d for d in caps.dtypes if not d.startswith("float8")]
    if plain:
        kinds.append("forward")
        if caps.backward:
            kinds.append("backward")
        if edge_kinds(caps):
            kinds.append("edges")
    if caps.fp8 and any(x in caps.layouts for x in LAYOUTS):  # FP8 codes are drawn in dense layouts only
        kinds.extend(["fp8", "fp8_offset"])
    return kinds


def _shape_line(case: Case) -> str:
    return (f"  case: {case.id} (B={case.B} Hq={case.Hq} Hkv={case.Hkv} Lq={case.Lq} Lk={case.Lk} d={case.d} "
            f"dv={case.dv} dtype={case.dtype})")


def build_property(kind: str, adapter: Adapter, device: str = "cpu", *, adapter_name: str | None = None,
                   settings_obj: settings | None = None, pinned: bool = True,
                   known: KnownFindings | None = None, shard: tuple[int, int] | None = None) -> PropertyRun:
    """A Hypothesis test of property ``kind`` on ``adapter``; call ``run.test()`` to execute it.

    ``known``: the expectations entries in force (`property_tests.known.known_findings`); None = raw verdicts.
    ``shard``: (index, count) for an adapter that builds per shape, whose examples run as `count` tests
    (`profiles.build_per_shape_shards`): this one draws its share of them (`profiles.shard_examples`), from a seed of
    its own where the profile is derandomized, and the pinned examples spread over the shards (shard i replays every
    count-th from the i-th: each pinned case builds its own kernel, so the first shard alone took 174 s of an H100's
    tox -e gpu where its siblings took 10-37 s)."""
    name = adapter_name or adapter.name
    caps = declaration(adapter, device)
    run = PropertyRun(kind, adapter, lambda: None)

    def settle(case: Case, verdict: Verdict, repro: bool) -> bool:
        """True when the example holds (a pass, or a KNOWN failure); raises `PropertyFailure` otherwise."""
        line = f"\n  repro: {repro_command(name, case, device)}" if repro else ""
        if verdict.outcome == NOT_SUPPORTED:
            if caps.library_check:
                run.declined.append((case, verdict.message))
                run.event("declined by the library at run time (rejected)")
                reject()
            run.last_failure = (case, verdict)
            raise PropertyFailure(
                f"{name}: property {kind!r} failed [declined a claimed case]: the declaration (Capabilities) claims "
                f"this case and supports() or the call declined it: {verdict.message}\n  a limit the adapter states "
                f"only in supports() belongs in its Capabilities (backward_head_dims, fp8_tiles, seqlen_multiple, "
                f"excludes, ...)\n{_shape_line(case)}{line}", case, verdict)
        if not verdict.failed:
            return True
        decision = known.decide(case, verdict) if known is not None else None
        if decision is not None and decision.outcome == KNOWN:
            first = verdict.message.strip().splitlines()[0] if verdict.message.strip() else verdict.outcome
            run.known.append(KnownHit(case, decision.expectation.label(), first))
            run.event(f"KNOWN ({decision.expectation.id})")
            return False
        run.last_failure = (case, verdict)
        note = f"\n  {decision.note}" if decision is not None and decision.note else ""
        raise PropertyFailure(
            f"{name}: property {kind!r} failed [{verdict.outcome} in {verdict.check}]: {verdict.message}{note}\n"
            f"{_shape_line(case)}{line}", case, verdict)

    def check(case: Case) -> None:
        verdict = evaluate(adapter, case, device)
        holds = settle(case, verdict, repro=True)
        run.examples_run += 1
        run.event(f"dtype {case.fp8.format + '/' + case.fp8.granularity if case.fp8 else case.dtype}")
        feats = [f for f, on in (("causal", case.causal), ("window", case.window is not None),
                                 ("mask", case.mask is not None), ("bias", case.bias is not None),
                                 ("softcap", case.softcap is not None), ("varlen", case.varlen),
                                 ("gqa", case.Hq != case.Hkv)) if on]
        run.event(f"features {'+'.join(feats) or 'none'}")
        run.event(f"head dim {case.d}" if case.d in (128, 256) else "head dim < 128" if case.d < 128 else
                  "head dim other")
        if holds:
            run.max_usage = max(run.max_usage, verdict.usage)
            target(min(verdict.usage, 1e6), label=f"{kind} tolerance usage")

    if kind == "fp8_offset":
        def check_peaked(drawn: tuple[Case, float, int]) -> None:
            case, peak, seed = drawn
            verdict = check_fp8_offset(adapter, case, peak, seed, device)
            holds = settle(case, verdict, repro=False)  # the peaked inputs are not the case's own: no repro line
            run.examples_run += 1
            run.event(f"{case.fp8.format}/{case.fp8.granularity}" + (" +hadamard" if case.fp8.incoherent else ""))
            run.event(f"head dim {case.d}")
            if holds:
                run.max_usage = max(run.max_usage, verdict.usage)
                target(min(verdict.usage, 1e6), label="fp8_offset tolerance usage")

        test = given(drawn=property_strategy(kind, adapter, device))(check_peaked)
        run.test = _budgeted(run, test, settings_obj, shard)
        return run

    test = given(case=property_strategy(kind, adapter, device))(check)
    pins = PINNED.get(kind, ())
    if shard is not None:
        pins = pins[shard[0]::shard[1]]
    if pinned:
        for case in reversed(pins):
            if capability_reason(caps, case, device) is None:  # what the declaration claims (a decline then fails)
                test = example(case=case)(test)
    test = _budgeted(run, test, settings_obj, shard)
    run.test = test
    return run


def _budgeted(run: PropertyRun, test, settings_obj: settings | None, shard: tuple[int, int] | None = None):
    """``test`` under ``settings_obj``; for an adapter that builds a kernel per shape (``builds_per_shape``), with the
    example count `profiles.build_per_shape_examples` gives (of a ``shard``: its share, `profiles.shard_examples`,
    drawn from a seed of its own where the profile is derandomized; the first shard keeps the profile's seed),
    recorded in ``run.budget``."""
    if getattr(run.adapter, "builds_per_shape", False):
        profile = settings_obj.max_examples if settings_obj is not None else settings.default.max_examples
        n = build_per_shape_examples(profile)
        if shard is not None:
            index, count = shard
            total, n = n, shard_examples(n, index, count)
            run.budget = (f"{n} of {total} examples (shard {index + 1} of {count}) instead of the profile's "
                          f"{profile}: {run.adapter.name} builds a kernel for each new shape (seconds per example)")
            chosen = settings(settings_obj or settings.default, max_examples=n)
            if index > 0 and chosen.derandomize:  # the shards draw different examples
                test = fixed_seed(zlib.crc32(f"{run.kind} shard {index}".encode()))(test)
            return chosen(test)
        if n < profile:
            run.budget = (f"{n} examples instead of the profile's {profile}: {run.adapter.name} builds a kernel for "
                          f"each new shape (seconds per example)")
            settings_obj = settings(settings_obj or settings.default, max_examples=n)
    return settings_obj(test) if settings_obj is not None else test


#: per test node: (examples run, worst tolerance usage seen, event counts); tests/property/test_kernel_properties.py
#: fills it, the property suite's conftest prints it with --hypothesis-show-statistics
STATS: dict[str, tuple[int, float, dict[str, int]]] = {}
