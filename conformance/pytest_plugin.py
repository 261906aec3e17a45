"""The installed pytest plugin (entry point ``pytest11``): ``pytest --pyargs attention_conformance --impl X --profile
ci``.

Loaded by pytest for every run in an environment where this distribution is installed (disable it
with ``-p no:attention_conformance``). It provides:

- options ``--impl NAME_OR_MODULE:ATTR [...]`` (repeatable; ``all`` = every built-in adapter, those that cannot
  run here skipped with the reason; ``path/to/file.py:fn`` works too), ``--profile ci|full|gpu`` (case catalog
  profile, default ``ci``), ``--device cpu|cuda`` (default ``$CONFORMANCE_DEVICE`` or ``cpu``), ``--cases EXPR``
  (the conformance cases whose id EXPR selects, in the ``-k`` grammar of ``python -m attention_conformance run``;
  pytest's own ``-k`` still filters test ids), ``--expect FILE`` (repeatable) / ``--no-expect``, ``--strict``
  and ``--determinism none|sampled|all``: the options of ``run`` with the same meaning. Each also has a
  ``--conformance-`` prefixed name, which is the only one registered when another plugin (or pytest itself, for
  ``--strict``) already owns the short name;
- the markers ``gpu``, ``slow``, ``fp8``, ``backward`` the conformance cases carry, and ``gpu_alone``, for a test
  that times the GPU (below);
- ``ATTN_KERNELS_NO_BUILD=1``: the CUDA kernel library is never compiled inside a test (`kernels.cuda_lib`);
- under pytest-xdist with ``--device cuda``: worker ``gwN`` pinned to one GPU through
  ``CUDA_VISIBLE_DEVICES`` (`conformance.running.parallel.gpu_for_worker`); under pytest-xdist on any device, the
  conformance and property tests ordered largest estimated seconds first (`conformance.running.schedule`; other
  tests keep their places), the tests of one case spread apart, on CUDA and for the gpu profile handed to the
  workers one at a time (``--maxschedchunk 1`` unless given); the workers share each case's inputs and FP64
  oracle, and the memory family's raw results, through a folder the controller makes and removes
  (`conformance.running.oracle_store`); on CUDA they share the GPU through it too, and a call that ran out of
  device memory beside the others runs again alone, as the CLI re-runs it (`conformance.running.gpu_share`); every
  test marked ``gpu`` holds that share while it runs, one marked ``gpu_alone`` has the GPU to itself
  (`pytest_runtest_call`), and after each test marked ``gpu`` the process's idle cached device memory goes back to
  the card (`pytest_runtest_teardown`);
- one pool of worker processes per pytest process (`worker_pool`): the conformance tests and the property suite run an
  isolated adapter in the same process per library, as the CLI's workers do;
- the parametrization of ``conformance/test_conformance.py::test_case`` over (case, adapter) of the
  chosen profile, case-major so the shared oracle cache (one FP64 oracle result per case, shared by
  every adapter) stays small, and its session fixture ``conformance_session``.

One verdict whatever the front end: the adapters, the expectations with this machine's context (device, GPU
names, adapter versions), strictness and determinism come from `conformance.running.run_context.open_run`, and the
final outcome of each test from `ConformanceRun.decide` (the memory family's growth verdict over the series the
case belongs to, then the expectations), exactly as ``python -m attention_conformance run`` decides. Without
``--impl`` both run every built-in adapter available on the device. An adapter named with ``--impl`` that cannot
run here (unknown name, import error, wrong device) stops the session with the CLI's one-line message (pytest's
usage error), never a skip. Outcomes map to pytest as follows (each test also records its final outcome as the
user property ``conformance_outcome``, which junit XML carries):

==================================  ====================================================================
PASS, QUALITY_WARNING, FINDING       passed (warnings and named findings listed in the terminal summary)
KNOWN                                xfailed, with the expectations entry's reason and link
FAIL, UNEXPECTED_PASS                failed, with the message and the repro command
NOT_SUPPORTED                        skipped, with the adapter's reason
CRASH, TIMEOUT, HARNESS_ERROR        error (raised while setting the test up), with the message
==================================  ====================================================================

The test module ships inside the package (``conformance/test_conformance.py``) because
``pytest --pyargs attention_conformance`` collects the installed package directory; every other test of the
project lives under the repository's ``tests/``.
"""

from __future__ import annotations

import argparse
import os
from collections import OrderedDict
from typing import Any

import pytest

__all__ = ["cases_option", "device_option", "impl_option", "profile_option", "run_settings", "conformance_run",
           "conformance_run_or_skip", "ConformanceSession", "store_of", "worker_pool", "EXPECTATIONS_PROPERTY",
           "NOTABLE_PROPERTY", "OUTCOME_PROPERTY", "SummaryLines"]

_DESTS = {"impl": "conformance_impl", "profile": "conformance_profile", "device": "conformance_device",
          "cases": "conformance_cases", "expect": "conformance_expect", "no-expect": "conformance_no_expect",
          "strict": "conformance_strict", "determinism": "conformance_determinism"}
_MARKERS = (
    "gpu: needs a CUDA device (skipped cleanly without one)",
    "slow: long-running; excluded from the ci profile",
    "fp8: exercises FP8 paths",
    "backward: exercises gradients",
    "gpu_alone: times the GPU: under pytest-xdist on CUDA it runs with the GPU to itself, the other workers' gpu "
    "tests held back until it ends (conformance/running/gpu_share.py)",
)
#: the user property (junit XML ``property``) each conformance test records its final outcome under
OUTCOME_PROPERTY = "conformance_outcome"
#: user properties the terminal summary is made from: they travel with the test reports, so that under pytest-xdist
#: the controller, which runs no test, sees them: the line of a passing verdict a person should read
#: (QUALITY_WARNING, FINDING), and (the expectations entries that concern the test's adapter, the one its verdict
#: fell under or "")
NOTABLE_PROPERTY = "conformance_notable"
EXPECTATIONS_PROPERTY = "conformance_expectations"


def _add(group: Any, name: str, **kw: Any) -> None:
    """Register ``--NAME`` and ``--conformance-NAME``; only the prefixed one if ``--NAME`` is taken."""
    try:
        group.addoption(f"--{name}", f"--conformance-{name}", dest=_DESTS[name], **kw)
    except (ValueError, argparse.ArgumentError):
        group.addoption(f"--conformance-{name}", dest=_DESTS[name], **kw)


def pytest_addoption(parser: pytest.Parser) -> None:
    from attention_conformance.running.run_context import DETERMINISM

    group = parser.getgroup("conformance", "attention-conformance")
    _add(group, "impl", action="extend", nargs="+", default=None, metavar="NAME_OR_MODULE:ATTR",
         help="adapter(s) under test: built-in names, 'all', module:attr or path/to/file.py:attr "
              "(default: every built-in adapter available on the device)")
    _add(group, "profile", default="ci", choices=("ci", "full", "gpu"),
         help="conformance case profile (default ci)")
    _add(group, "device", default=None, choices=("cpu", "cuda"),
         help="device for adapters (default $CONFORMANCE_DEVICE or cpu)")
    _add(group, "cases", default=None, metavar="EXPR",
         help="conformance cases whose id EXPR selects (the -k grammar of `python -m attention_conformance run`)")
    _add(group, "expect", action="append", default=[], metavar="FILE",
         help="an expectations file on top of the shipped one (KNOWN verdicts xfail)")
    _add(group, "no-expect", action="store_true", default=False, help="apply no expectations (raw verdicts)")
    _add(group, "strict", action="store_true", default=False,
         help="named findings (e.g. masked_nan, SEMANTICS.md §17) are FAIL instead of FINDING")
    _add(group, "determinism", default="sampled", choices=DETERMINISM,
         help="bitwise-determinism repeats for adapters that declare it (default sampled)")


def impl_option(config: pytest.Config) -> list[str] | None:
    """The raw ``--impl`` values (None when not given)."""
    raw = config.getoption(_DESTS["impl"])
    return list(raw) if raw else None


def profile_option(config: pytest.Config) -> str:
    """The ``--profile`` value (default ``ci``)."""
    return config.getoption(_DESTS["profile"])


def device_option(config: pytest.Config) -> str:
    """``--device``, else ``$CONFORMANCE_DEVICE``, else ``cpu``."""
    from attention_conformance.running.run_context import default_device

    return config.getoption(_DESTS["device"]) or default_device()


def cases_option(config: pytest.Config) -> str | None:
    """``--cases EXPR``: the conformance cases whose id EXPR selects (`conformance.cases.selection` grammar)."""
    return config.getoption(_DESTS["cases"])


def run_settings(config: pytest.Config) -> Any:
    """The `run_context.RunSettings` the options say (the CLI builds the same from its options of the same names)."""
    from attention_conformance.running.run_context import RunSettings, UsageError

    try:
        return RunSettings(device=device_option(config), profile=profile_option(config),
                           strict=config.getoption(_DESTS["strict"]),
                           determinism=config.getoption(_DESTS["determinism"]),
                           expect_files=tuple(config.getoption(_DESTS["expect"])),
                           default_expect=not config.getoption(_DESTS["no-expect"]))
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


_RUN = pytest.StashKey["Any"]()


def conformance_run(config: pytest.Config) -> Any:
    """This process's `run_context.ConformanceRun` (opened once): the adapters ``--impl`` names (default: every
    built-in available on the device) and the expectations in this machine's context. An unusable ``--impl`` or
    ``--expect`` is pytest's usage error with the CLI's message."""
    run = config.stash.get(_RUN, None)
    if run is None:
        from attention_conformance.running.run_context import UsageError, open_run

        try:
            run = open_run(run_settings(config), impl_option(config))
        except UsageError as exc:
            raise pytest.UsageError(f"attention_conformance: {exc}") from None
        config.stash[_RUN] = run
    return run


def conformance_run_or_skip(config: pytest.Config) -> tuple[Any, Any]:
    """(`conformance_run`, None), or (None, a skip mark with the CLI's message) where no ``--impl`` was given and no
    adapter is available on the device (``--device cuda`` without a GPU): a test parametrized over the run's adapters
    (the conformance tests, the property suite) is then one skipped test. An ``--impl`` or ``--expect`` that cannot be
    used stopped the session at configure (`pytest_configure`)."""
    try:
        return conformance_run(config), None
    except pytest.UsageError as exc:
        return None, pytest.mark.skip(reason=str(exc))


def _hands_out_one_at_a_time(config: pytest.Config) -> bool:
    """Whether xdist's ``--maxschedchunk`` becomes 1 (`pytest_configure`): under ``-n`` without the option given, on
    CUDA and for the gpu profile's large cases on any device, one test at a time to each xdist worker, so the
    largest-first order (pytest_collection_modifyitems) holds: by default xdist's --dist load hands each worker a
    quarter of its share up front, and the first worker would start with every long test (kernels built per shape
    take seconds each; on 2 CPU cores the gpu profile through 3 adapters took 95 s so, 58 s one at a time, the CLI
    70 s); a CPU run of the ci or full profile's many short tests keeps xdist's chunks, and with them its module
    fixtures on one worker (the same wall time either way there)."""
    return bool(getattr(config.option, "numprocesses", None) and getattr(config.option, "maxschedchunk", 0) is None
                and (device_option(config) == "cuda" or profile_option(config) == "gpu"))


def pytest_configure(config: pytest.Config) -> None:
    expr = cases_option(config)
    if expr:
        from attention_conformance.cases.selection import SelectorError, parse

        try:
            parse(expr)
        except SelectorError as exc:
            raise pytest.UsageError(f"--cases: {exc}") from None
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    os.environ.setdefault("ATTN_KERNELS_NO_BUILD", "1")
    if _hands_out_one_at_a_time(config):
        config.option.maxschedchunk = 1
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # N xdist workers share the cores, as run --workers N does (`running.parallel.share_cores`)
        from attention_conformance.running.parallel import share_cores_here

        share_cores_here(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))
    if worker and device_option(config) == "cuda" and "CONFORMANCE_NO_GPU_PINNING" not in os.environ:
        from attention_conformance.running.parallel import gpu_for_worker

        gpu = gpu_for_worker(int(worker.removeprefix("gw") or 0))
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    config.stash[_LINES] = lines = SummaryLines()
    config.pluginmanager.register(lines, "attention_conformance_summary")
    if not worker and getattr(config.option, "numprocesses", None):
        # the workers' shared store of inputs and oracles (`running.oracle_store`), handed to them at their start
        from attention_conformance.running.oracle_store import new_folder

        config.stash[_STORE] = new_folder()
        config.pluginmanager.register(_StoreHandOver(config.stash[_STORE]), "attention_conformance_store")
    run_settings(config)  # --expect with --no-expect, a bad --determinism: usage errors now
    if impl_option(config) or config.getoption(_DESTS["expect"]):
        conformance_run(config)  # an --impl named explicitly that cannot run here stops the session now


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not {"conformance_case", "conformance_spec"} <= set(metafunc.fixturenames):
        return
    from attention_conformance.cases import catalog
    from attention_conformance.cases.selection import SelectorError

    config = metafunc.config
    device = device_option(config)
    run, skip = conformance_run_or_skip(config)
    if run is None:
        metafunc.parametrize(("conformance_case", "conformance_spec"),
                             [pytest.param(None, None, id="no-adapter", marks=skip)])
        return
    specs = [la.spec for la in run.loaded]
    try:
        cases = catalog.select(catalog.cases(profile_option(config)), cases_option(config))
    except SelectorError as exc:
        raise pytest.UsageError(f"--cases: {exc}") from None
    params = []
    for case in cases:
        marks = [getattr(pytest.mark, m) for m in catalog.case_marks(case)]
        if device == "cuda" and "gpu" not in catalog.case_marks(case):
            marks.append(pytest.mark.gpu)
        for spec in specs:
            params.append(pytest.param(case, spec, id=f"{case.id}::{spec}", marks=marks))
    metafunc.parametrize(("conformance_case", "conformance_spec"), params)


_SESSION = pytest.StashKey["ConformanceSession"]()


class SummaryLines:
    """What the terminal summary says, gathered from the conformance tests' reports (`NOTABLE_PROPERTY`,
    `EXPECTATIONS_PROPERTY`) in the process that prints it: the only one, or pytest-xdist's controller."""

    def __init__(self) -> None:
        self.notable: list[str] = []
        self.applicable: dict[str, None] = {}  # labels of entries concerning an adapter some test ran, in order
        self.used: set[str] = set()

    def add(self, report: Any) -> None:
        for name, value in getattr(report, "user_properties", ()):
            if name == NOTABLE_PROPERTY:
                self.notable.append(str(value))
            elif name == EXPECTATIONS_PROPERTY:
                labels, used = value
                self.applicable.update(dict.fromkeys(labels))
                if used:
                    self.used.add(used)

    def unused(self) -> list[str]:
        return [label for label in self.applicable if label not in self.used]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Each test's properties, once: its teardown report carries every property its setup and call added."""
        if report.when == "teardown":
            self.add(report)


_LINES = pytest.StashKey[SummaryLines]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What an implementation's signature implies for the calls (`ConformanceRun.adapter_notes`), the passing
    verdicts a person should still read (QUALITY_WARNING, FINDING: one line each, in a section of
    their own rather than as Python warnings), and the expectations entries that matched no test of this
    session (delete them: they match nothing). Made from the tests' reports, so the same with and without
    pytest-xdist."""
    lines = config.stash.get(_LINES, None)
    if lines is None:
        return
    run = config.stash.get(_RUN, None)
    notes = run.adapter_notes() if run is not None and not os.environ.get("PYTEST_XDIST_WORKER") else []
    if notes:
        terminalreporter.section("conformance: notes on the implementations under test")
        for line in notes:
            terminalreporter.write_line(line)
    if lines.notable:
        terminalreporter.section("conformance: quality warnings and named findings (passing)")
        for line in lines.notable:
            terminalreporter.write_line(line)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for label in lines.unused():
            terminalreporter.write_line(f"warning: expectation {label} matched no test of this session")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Under pytest-xdist on CUDA, a test marked ``gpu`` runs holding the workers' share of the GPU, and one marked
    ``gpu_alone`` with the GPU to itself: the tests in flight on the other workers end first and none starts until it
    has (`running.gpu_share`). A test that times the GPU beside 8 workers' kernels read its 0.2 ms kernel as 0.74 ms
    and 0.45 ms of GPU time (tox -e gpu's command on an H100, 2026-12-07): the harness's FAIL, not the timer's."""
    share = _gpu_share(item)
    if share is None:
        return (yield)
    if item.get_closest_marker("gpu_alone") is not None:
        with share.alone():
            return (yield)
    with share.shared():
        return (yield)


def _gpu_share(item: pytest.Item) -> Any:
    """The share of the GPU a test marked ``gpu`` or ``gpu_alone`` holds (`pytest_runtest_call`); None off CUDA, for a
    run of one process and for other tests."""
    if item.get_closest_marker("gpu") is None and item.get_closest_marker("gpu_alone") is None:
        return None
    if device_option(item.config) != "cuda":
        return None
    store = store_of(item.config)
    if store is None:
        return None
    from attention_conformance.running.gpu_share import GpuShare

    return GpuShare.of_run(store.folder, "cuda")


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """After a test marked ``gpu`` on a CUDA run, this process's idle cached device memory goes back to the GPU
    (`running.cuda_context.release_cached`), as the engine releases it after each call: pytest-xdist's workers share
    the card, and a kernel test's cached blocks (GBs after a large shape) made other workers' cases run out of memory
    (tox -e gpu on the H100)."""
    if item.get_closest_marker("gpu") is not None and device_option(item.config) == "cuda":
        from attention_conformance.running.cuda_context import release_cached

        release_cached("cuda")


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        pool.close()
    folder = config.stash.get(_STORE, None)
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


_STORE = pytest.StashKey[str]()
#: the `workerinput` key of the store's folder
_STORE_INPUT = "attention_conformance_store"


class _StoreHandOver:
    """pytest-xdist's controller: gives each worker the run's store folder."""

    def __init__(self, folder: str):
        self.folder = folder

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_STORE_INPUT] = self.folder


_POOL = pytest.StashKey["Any"]()


def worker_pool(config: pytest.Config) -> Any:
    """This pytest process's `running.worker.WorkerPool`: the conformance tests and the property suite run an
    isolated adapter in one worker process per library (closed when the session ends)."""
    pool = config.stash.get(_POOL, None)
    if pool is None:
        from attention_conformance.running.worker import WorkerPool

        pool = config.stash[_POOL] = WorkerPool()
    return pool


def store_of(config: pytest.Config) -> Any:
    """The `running.oracle_store.OracleStore` this pytest-xdist worker shares with the others; None elsewhere."""
    folder = getattr(config, "workerinput", {}).get(_STORE_INPUT)
    if not folder:
        return None
    from attention_conformance.running.oracle_store import OracleStore

    return OracleStore(folder)


def _case_of(item: pytest.Item) -> Any:
    cs = getattr(item, "callspec", None)
    return cs.params.get("conformance_case") if cs is not None else None


def _estimated_seconds(config: pytest.Config, item: pytest.Item, by_spec: dict[str, Any],
                       builds: Any = None) -> float | None:
    """`conformance.running.schedule`'s seconds for a conformance test or a property test (0 where it skips at
    collection or its adapter, from `by_spec`, does not claim the case); None for any other test. ``builds``
    (`schedule.Builds`, the tests given in collection order): a build an earlier test charged is not charged again."""
    from attention_conformance.running import schedule

    cs = getattr(item, "callspec", None)
    if cs is None:
        return None
    if item.get_closest_marker("skip") is not None:
        return 0.0 if {"conformance_case", "impl_kind"} & set(cs.params) else None
    case = cs.params.get("conformance_case")
    if case is not None:
        la = by_spec.get(cs.params.get("conformance_spec"))
        if la is None or not la.available or not schedule.claims(la.adapter, case, device_option(config)):
            return 0.0
        return schedule.adapter_seconds(case, la.adapter, la.spec, builds)
    impl_kind = cs.params.get("impl_kind")
    if isinstance(impl_kind, tuple) and len(impl_kind) == 3:
        loaded, kind, shard = impl_kind  # shard: (index, count) of a sharded property, or None
        if kind is None or getattr(loaded, "adapter", None) is None:
            return 0.0
        from hypothesis import settings

        from attention_conformance.property_tests.profiles import build_per_shape_examples, shard_examples

        per_shape = bool(getattr(loaded.adapter, "builds_per_shape", False))
        examples = build_per_shape_examples(settings().max_examples) if per_shape else settings().max_examples
        if shard is not None:
            examples = shard_examples(examples, *shard)
        return schedule.property_seconds(examples, per_shape, backward=kind == "backward")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist: the conformance and property tests largest estimated seconds first
    (`conformance.running.schedule`: a kernel built per shape counts, once per build), the tests of one case spread
    apart (`schedule.spread`), in the slots they occupy; other tests keep their places, except that the ordered tests
    up to the last one estimated at `schedule.LONG_SECONDS` or more go before all of them (the longest pieces start
    first; the short ones fill the end). Each worker identical (xdist compares the collections)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and not getattr(config.option, "numprocesses", None):
        return
    # the run's adapters by spec (looked up once; only a session with conformance tests has opened the run)
    by_spec = ({x.spec: x for x in conformance_run(config).loaded}
               if any(_case_of(item) is not None for item in items) else {})
    from attention_conformance.running.schedule import Builds

    builds = Builds()  # of the tests needing one build, the first in collection order pays it
    estimates = {i: sec for i, item in enumerate(items)
                 if (sec := _estimated_seconds(config, item, by_spec, builds)) is not None}
    if not estimates:
        return
    slots = sorted(estimates)
    ordered = sorted(slots, key=lambda i: (-estimates[i], items[i].nodeid))
    # the tests of one case apart by twice the number of workers (xdist keeps two tests handed to each worker: the
    # one running and the next), so that no two run together: they share its oracle (`running.oracle_store`)
    from attention_conformance.running.schedule import LONG_SECONDS, spread

    cases = [_case_of(items[i]) for i in ordered]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or getattr(config.option, "numprocesses", None) or 1)
    window = 2 * workers if workers > 1 else 1
    ordered = [ordered[j] for j in spread([c.id if c is not None else None for c in cases], window)]
    # the ordered run up to its last long test goes ahead of the tests without an estimate (tests/ is collected before
    # conformance/: on the H100 the kernels' ~600 device tests went first, and compiled flex's 327 s property test
    # started late and ended the run), the spread's interleaving kept; the rest fills the later slots in order
    moved = [items[i] for i in ordered]
    cut = 1 + max((j for j, i in enumerate(ordered) if estimates[i] >= LONG_SECONDS), default=-1)
    fill = dict(zip(slots[cut:], moved[cut:]))
    dropped = set(slots[:cut])
    items[:] = moved[:cut] + [fill.get(i, item) for i, item in enumerate(items) if i not in dropped]


class ConformanceSession:
    """One engine `Runner` per pytest session over the run's adapters, a small window of cached oracles, the raw
    results of the memory family (its growth verdict spans a series of cases), and the final verdict of a test."""

    def __init__(self, run: Any, cases: list[Any], store: Any = None, workers: Any = None):
        from attention_conformance.running.gpu_share import GpuShare

        self.run = run
        self.device = run.device
        self.cases = cases  # the profile's cases: a memory case's series is looked up among them
        self.store = store  # under pytest-xdist: oracles and the memory family's raw results shared by the workers
        # under pytest-xdist on a GPU: the workers' cases share it, and a call that ran out of memory beside them
        # runs again alone (`running.gpu_share`), as the CLI re-runs it alone
        self.share = GpuShare.of_run(store.folder if store is not None else None, self.device)
        self.runner = run.runner(store=store, share=self.share, workers=workers)  # `worker_pool`: shared
        self.by_spec = {la.spec: la for la in run.loaded}
        self.ran: dict[str, Any] = {}  # spec -> LoadedAdapter that some test ran
        self.recent: OrderedDict[str, None] = OrderedDict()
        self.raw: dict[tuple[str, str], Any] = {}  # (case id, spec) -> raw result, memory family only
        self._applicable: dict[tuple[str, str], tuple[str, ...]] = {}  # (spec, family) -> labels concerning it

    def touch(self, case_id: str, keep: int = 4) -> None:
        """Mark ``case_id`` in use; evict the oracle results of cases older than the last ``keep``."""
        self.recent[case_id] = None
        self.recent.move_to_end(case_id)
        while len(self.recent) > keep:
            old, _ = self.recent.popitem(last=False)
            self.runner.cache.evict(old)

    def _run_case(self, la: Any, case: Any) -> Any:
        from attention_conformance.running import gpu_share

        with gpu_share.shared(self.share):
            return self.runner.run_case(la, case)

    def _raw(self, la: Any, case: Any) -> Any:
        from attention_conformance.verdict import growth

        if case.family != growth.FAMILY:
            self.touch(case.id)
            return self._run_case(la, case)
        key = (case.id, la.spec)
        if key not in self.raw:
            self.touch(case.id)
            if self.store is None:
                self.raw[key] = self._run_case(la, case)
            else:  # the series' other tests, in other workers, need this result too
                self.raw[key] = self.store.fetch(f"raw {case.id} {la.spec}", lambda: self._run_case(la, case))
        return self.raw[key]

    def applicable(self, spec: str, family: str) -> tuple[str, ...]:
        """Labels of the expectations entries that concern adapter `spec` on cases of `family` (once per pair)."""
        key = (spec, family)
        if key not in self._applicable:
            self._applicable[key] = tuple(self.run.applicable(self.by_spec[spec], (family,)))
        return self._applicable[key]

    def result(self, case: Any, spec: str) -> Any:
        """The final `engine.CaseResult` of ``spec`` on ``case``: `ConformanceRun.decide` over the case's result,
        with the other cases of its memory-growth series (`growth.series_of`) when it has one."""
        from attention_conformance.verdict import growth

        la = self.by_spec[spec]
        self.ran[spec] = la
        series = growth.series_of(case, self.cases)
        raw = [self._raw(la, c) for c in series]
        return next(r for r in self.run.decide(raw) if r.case_id == case.id)


@pytest.fixture(scope="session")
def conformance_session(request: pytest.FixtureRequest):
    """The session's `ConformanceSession` (closed at the end of the session)."""
    from attention_conformance.cases import catalog

    config = request.config
    s = ConformanceSession(conformance_run(config), catalog.cases(profile_option(config)), store_of(config),
                           worker_pool(config))
    config.stash[_SESSION] = s
    yield s
    s.runner.close()


@pytest.fixture
def conformance_result(conformance_session, conformance_case, conformance_spec, request):
    """The final verdict of (case, adapter), decided while the test is set up (`ConformanceSession.result`)."""
    from attention_conformance.verdict.outcomes import (
        CRASH,
        FINDING,
        HARNESS_ERROR,
        NOT_SUPPORTED,
        QUALITY_WARNING,
        TIMEOUT,
    )

    result = conformance_session.result(conformance_case, conformance_spec)
    props = request.node.user_properties
    props.append((OUTCOME_PROPERTY, result.outcome))
    props.append((EXPECTATIONS_PROPERTY, (conformance_session.applicable(conformance_spec, conformance_case.family),
                                          conformance_session.run.label_of(result) or "")))
    if result.outcome in (QUALITY_WARNING, FINDING):
        first = result.message.strip().splitlines()[0] if result.message.strip() else ""
        props.append((NOTABLE_PROPERTY, f"{result.outcome} {conformance_case.id} on {conformance_spec}: {first}"))
    if result.outcome == NOT_SUPPORTED:
        pytest.skip(f"NOT_SUPPORTED: {result.message}")
    if result.outcome in (CRASH, TIMEOUT, HARNESS_ERROR):
        # failing while the test is set up: pytest reports an error, not a failure
        pytest.fail(f"{result.outcome}: {conformance_spec} on {conformance_case.id}\n{result.message}\n"
                    f"repro: {result.repro}", pytrace=False)
    return result
