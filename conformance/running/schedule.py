"""Expected seconds of a piece of work, so that parallel runs start the longest pieces first (issue 43).

Both front ends spread work over processes: ``run --workers N`` hands whole cases (every adapter of the run) to its
workers (`conformance.running.parallel`), pytest-xdist hands (case, adapter) tests and property tests to its workers
(`conformance.pytest_plugin`). Both order by the seconds estimated here, largest first, and hand out one piece at a
time, so that a run does not end on a tail of long pieces queued behind one worker.

The model, fitted to the H200's gpu-profile run (per-case ``seconds`` of reports/gpu/report.json.gz; every kernel
built once per process: 0.03-0.15 s median per case, 0.2-0.8 s per 1e9 of `catalog.estimated_cost`):

    seconds = CALL_SECONDS + SECONDS_PER_COST * estimated_cost(case) + SECONDS_PER_ELEMENT * io_elements(case)
              (+ BUILD_SECONDS, x BACKWARD_BUILD_FACTOR; float32: + FLOAT32_BUILD_SECONDS)

where ``BUILD_SECONDS`` (times ``BACKWARD_BUILD_FACTOR`` for a backward case) is added for an adapter that builds a
kernel for each new shape (``Adapter.builds_per_shape``:
compiled FlexAttention, median 2.75 s and mean 4.6 s per case on a cold Inductor cache, 20-33 s at most;
flash-attn-4's CUTLASS DSL, mean 1.85 s). Measured without it, the torch-flex tests of small cases sorted last and a
``tox -e gpu`` run spent its final minutes on them one after another in two workers (2026-12-04). A property test
costs its examples: ``build_per_shape_examples`` builds for such an adapter, else ``PROPERTY_EXAMPLE_SECONDS``
each. Only the order depends on these figures, never a verdict.

Of the cases that need the same build (`build_key`: the same shapes, dtype and features; another input distribution
or seed), only the first in the run's order pays it: the builds of compiled FlexAttention go to Inductor's on-disk
cache, where the others find them, in any process of the run. Estimated each at the full build, they sorted side by
side and compiled the same kernel at the same time in several workers (the H100's CLI run: same-shape float32 cases,
35-42 s each on 6 workers; 27 of the gpu profile's 280 flex cases repeat a build).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from attention_conformance.adapters.base import capability_reason
from attention_conformance.cases.case import Case
from attention_conformance.cases.catalog import estimated_cost

__all__ = ["CALL_SECONDS", "SECONDS_PER_COST", "BUILD_SECONDS", "BACKWARD_BUILD_FACTOR", "FLOAT32_BUILD_SECONDS",
           "SECONDS_PER_ELEMENT", "PROPERTY_EXAMPLE_SECONDS", "LONG_SECONDS", "io_elements", "claims",
           "build_key", "Builds", "build_seconds", "call_seconds", "adapter_seconds", "case_seconds",
           "property_seconds", "spread"]

#: one call of a kernel built before, oracle and judge included (median per case, H200)
CALL_SECONDS = 0.05
#: seconds per unit of `catalog.estimated_cost` (multiply-adds of the score matrices; backward x3)
SECONDS_PER_COST = 0.3e-9
#: seconds per element of a case's tensors (`io_elements`): least squares over the H200's gpu profile with
#: `SECONDS_PER_COST` (2.5e-10 there); the paged decoding case (4 x 16384 keys, 134 M elements) took 11-21 s per
#: adapter where its multiply-adds alone predicted 0.2 s
SECONDS_PER_ELEMENT = 1.1e-7
#: one kernel build (compiled FlexAttention on a cold Inductor cache; flash-attn-4's DSL is faster)
BUILD_SECONDS = 4.0
#: a backward build (forward and backward kernels) over a forward one: compiled FlexAttention's median per case 6.9 s
#: against 2.6 s on the H200's gpu profile, flash-attn-4's 4.0 against its forward's 1.7 s mean
BACKWARD_BUILD_FACTOR = 2.5
#: a float32 build, forward or backward: compiled FlexAttention's median per float32 case on the H200's gpu profile,
#: 14.4 s forward and 14.2 s backward (its float16 ones 2.5 s and 6.6 s); sorted as float16 builds, those 20 tests of
#: 14-34 s ran among the last
FLOAT32_BUILD_SECONDS = 14.0
#: one drawn example of a property test of a kernel built once (small shapes)
PROPERTY_EXAMPLE_SECONDS = 0.05
#: a piece estimated at least this long starts before the pieces no estimate covers (the pytest plugin: the
#: project's other tests, mostly short): compiled flex's and flash-attn-4's property tests, the largest cases
LONG_SECONDS = 10.0


def claims(adapter: Any, case: Case, device: str) -> bool:
    """Whether `adapter` declares `case`, from its declarations alone (no call into the library, no device probe):
    the adapter's own ``claim_reason`` where it has one (the per-device capabilities, what a spelling carries), else
    its `Capabilities`."""
    declared = getattr(adapter, "claim_reason", None)
    caps = getattr(adapter, "capabilities", None)
    try:
        if declared is not None:
            return declared(case, device) is None
        return caps is None or capability_reason(caps, case, device) is None
    except Exception:  # an estimate only: a declaration this check cannot read counts as claimed
        return True


def build_seconds(builds_per_shape: bool, backward: bool, dtype: str | None = None) -> float:
    """Expected seconds of the builds one call makes: none for a kernel built once; a float32 build costs
    `FLOAT32_BUILD_SECONDS` either way."""
    if not builds_per_shape:
        return 0.0
    if dtype == "float32":
        return FLOAT32_BUILD_SECONDS
    return BUILD_SECONDS * (BACKWARD_BUILD_FACTOR if backward else 1.0)


#: the fields of a `Case` that do not change its build: its family, inputs and note; the mask, bias and sink
#: recipes count as present or absent (their values reach a kernel as tensors, not as code)
_INPUT_FIELDS = ("family", "distribution", "seed", "note")
_RECIPE_FIELDS = ("mask", "bias", "sinks")


def build_key(case: Case) -> tuple:
    """What a kernel built per shape is built for, read from `case`: every field but its family, input
    distribution, seed and note, with the mask, bias and sink recipes as present or not. Cases of one key need one
    build (an estimate: a library may build for less, never for more)."""
    fields = dataclasses.asdict(case)
    return tuple((k, (v is not None) if k in _RECIPE_FIELDS else repr(v)) for k, v in sorted(fields.items())
                 if k not in _INPUT_FIELDS)


class Builds:
    """The builds a run's order has charged so far, per adapter: `first` says whether a (case, adapter) piece is
    the first of its `build_key` (it pays the build; later ones find it in the cache)."""

    def __init__(self) -> None:
        self._seen: set[tuple[Hashable, tuple]] = set()

    def first(self, adapter: Hashable, case: Case) -> bool:
        key = (adapter, build_key(case))
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


def call_seconds(case: Case, builds_per_shape: bool, cached: bool = False) -> float:
    """Expected seconds of one adapter on `case` (forward, backward where the case asks, oracle, judge);
    ``cached``: an earlier case of the run needed the same build (`Builds`), so this one pays none."""
    return (CALL_SECONDS + SECONDS_PER_COST * estimated_cost(case) + SECONDS_PER_ELEMENT * io_elements(case)
            + (0.0 if cached else build_seconds(builds_per_shape, case.backward, case.dtype)))


def io_elements(case: Case) -> int:
    """Elements of q, k, v and out (twice as many for a backward case: dout, dq, dk, dv): what crosses the worker
    pipe, gets snapshotted and is compared."""
    q, o = case.B * case.Hq * case.Lq * case.d, case.B * case.Hq * case.Lq * case.dv
    kv = case.B * case.Hkv * case.Lk * (case.d + case.dv)
    return (q + kv + o) * (2 if case.backward else 1)


def adapter_seconds(case: Case, adapter: Any, key: Hashable, builds: Builds | None = None) -> float:
    """`call_seconds` of `adapter` (``key`` names it in ``builds``) on `case`: with ``builds`` (one per run, the pieces
    given in the run's order) a build an earlier piece charged is not charged again."""
    per_shape = bool(getattr(adapter, "builds_per_shape", False))
    cached = per_shape and builds is not None and not builds.first(key, case)
    return call_seconds(case, per_shape, cached)


def case_seconds(case: Case, adapters: Iterable[Any], device: str, builds: Builds | None = None) -> float:
    """Expected seconds of `case` through every adapter of `adapters` that claims it (a ``run --workers`` piece;
    ``builds``: `adapter_seconds`)."""
    return sum(adapter_seconds(case, a, id(a), builds) for a in adapters if a is not None and claims(a, case, device))


def property_seconds(examples: int, builds_per_shape: bool, backward: bool = False) -> float:
    """Expected seconds of a property test drawing `examples` cases (``backward``: of gradients)."""
    return examples * (build_seconds(builds_per_shape, backward) if builds_per_shape else PROPERTY_EXAMPLE_SECONDS)


#: how far `spread` looks ahead for a piece whose key is not among the last ``window`` handed out
SPREAD_LOOKAHEAD = 256


def spread(keys: Sequence[Hashable | None], window: int) -> list[int]:
    """An order of the pieces ``0 .. len(keys) - 1`` (given in the order wanted) in which any ``window`` consecutive
    places hold no two pieces of the same key, where the next `SPREAD_LOOKAHEAD` pieces offer another; where none
    does, the piece whose key came longest ago. A piece of key None conflicts with none. The order is otherwise kept.

    The pytest plugin's (case, adapter) tests of one case share the case's inputs and oracle through the workers'
    store (`running.oracle_store`): with ``window`` the number of tests the workers hold at once, the workers start
    on different cases and the later tests of a case find its oracle made, where in plain largest-first order every
    worker would start on the first large case's adapters together, one computing its oracle while the others
    wait."""
    pending = list(range(len(keys)))
    last: dict[Hashable, int] = {}  # key -> the place it last took
    order: list[int] = []
    while pending:
        here = len(order)
        best, best_gap = 0, -1
        for j, i in enumerate(pending[:SPREAD_LOOKAHEAD]):
            gap = window if keys[i] is None or keys[i] not in last else here - last[keys[i]]
            if gap >= window:
                best = j
                break
            if gap > best_gap:
                best, best_gap = j, gap
        i = pending.pop(best)
        if keys[i] is not None:
            last[keys[i]] = here
        order.append(i)
    return order
