"""Work order of parallel runs (conformance/running/schedule.py, issue 43): a kernel built per shape counts, a case
an adapter does not claim costs nothing, and the pytest plugin orders conformance and property tests by it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attention_conformance import pytest_plugin
from attention_conformance.adapters.base import Capabilities
from attention_conformance.cases import catalog
from attention_conformance.running import schedule

SMALL = catalog._seeded(catalog._mk("unit", Lq=17, Lk=33, d=16, dtype="float32"))
BIG = catalog._seeded(catalog._mk("unit", Lq=4096, Lk=4096, d=128, dtype="float32"))
F16 = catalog._seeded(catalog._mk("unit", Lq=17, Lk=33, d=16, dtype="float16"))


def _adapter(builds: bool, dtypes=("float32",)):
    return SimpleNamespace(capabilities=Capabilities(dtypes=frozenset(dtypes)), builds_per_shape=builds)


def test_a_kernel_built_per_shape_outweighs_a_large_case_of_a_kernel_built_once():
    assert schedule.call_seconds(SMALL, builds_per_shape=True) > schedule.call_seconds(BIG, builds_per_shape=False)
    assert schedule.call_seconds(BIG, False) > schedule.call_seconds(SMALL, False)


def test_a_case_costs_only_through_the_adapters_that_claim_it():
    once, built = _adapter(False), _adapter(True)
    assert schedule.case_seconds(SMALL, [once, built], "cpu") == pytest.approx(
        schedule.call_seconds(SMALL, False) + schedule.call_seconds(SMALL, True))
    assert schedule.case_seconds(F16, [once, built], "cpu") == 0.0  # float16 is declared by neither
    assert schedule.claims(SimpleNamespace(), F16, "cpu")  # no declaration to read: counted as claimed
    # the adapter's own declared decline (per-device capabilities, what a spelling carries) comes first
    spelling = SimpleNamespace(capabilities=Capabilities(dtypes=frozenset({"float32"})),
                               claim_reason=lambda case, device: "this spelling cannot carry it")
    assert not schedule.claims(spelling, SMALL, "cpu") and schedule.case_seconds(SMALL, [spelling], "cpu") == 0.0


def test_a_property_test_costs_its_examples():
    assert schedule.property_seconds(8, True) == 8 * schedule.BUILD_SECONDS
    assert schedule.property_seconds(100, False) == 100 * schedule.PROPERTY_EXAMPLE_SECONDS
    # a gradient's build (forward and backward kernels) costs more than a forward's; a kernel built once, nothing
    assert schedule.property_seconds(8, True, backward=True) == (
        8 * schedule.BUILD_SECONDS * schedule.BACKWARD_BUILD_FACTOR)
    assert schedule.property_seconds(100, False, backward=True) == 100 * schedule.PROPERTY_EXAMPLE_SECONDS
    bwd = catalog._seeded(catalog._mk("unit", Lq=17, Lk=33, d=16, dtype="float16", backward=True))
    assert schedule.call_seconds(bwd, True) - schedule.call_seconds(bwd, False) == pytest.approx(
        schedule.BUILD_SECONDS * schedule.BACKWARD_BUILD_FACTOR)


class _Item:
    def __init__(self, nodeid: str, params: dict | None, skip: bool = False):
        self.nodeid = nodeid
        self.callspec = None if params is None else SimpleNamespace(params=params)
        self._skip = skip

    def get_closest_marker(self, name):
        return object() if (name == "skip" and self._skip) else None


def _one_xdist_worker(monkeypatch) -> tuple[SimpleNamespace, SimpleNamespace]:
    """The plugin as one xdist worker of one (nothing spread; this suite's own xdist aside) over two adapters: "once"
    (a kernel built once) and "built" (a kernel built per shape)."""
    once = SimpleNamespace(spec="once", available=True, adapter=_adapter(False))
    built = SimpleNamespace(spec="built", available=True, adapter=_adapter(True))
    run = SimpleNamespace(loaded=[once, built])
    monkeypatch.setattr(pytest_plugin, "conformance_run", lambda config: run)
    monkeypatch.setattr(pytest_plugin, "device_option", lambda config: "cpu")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    return once, built


def test_the_plugin_orders_conformance_and_property_tests_by_seconds_in_their_slots(monkeypatch):
    """Under xdist, the long tests first (a per-shape build before a large case of a kernel built once), a skipped or
    unclaimed one last, other tests where they were."""
    once, built = _one_xdist_worker(monkeypatch)
    items = [
        _Item("t/plain_test::plain", None),
        _Item("c::small-once", {"conformance_case": SMALL, "conformance_spec": "once"}),
        _Item("c::big-once", {"conformance_case": BIG, "conformance_spec": "once"}),
        _Item("t/param_test::param[1]", {"x": 1}),
        _Item("c::f16-built", {"conformance_case": F16, "conformance_spec": "built"}),  # not claimed
        _Item("c::small-built", {"conformance_case": SMALL, "conformance_spec": "built"}),
        _Item("p::built-prop", {"impl_kind": (built, "forward", None)}),
        _Item("p::unavailable", {"impl_kind": (built, None, None)}, skip=True),
    ]
    pytest_plugin.pytest_collection_modifyitems(SimpleNamespace(option=SimpleNamespace()), items)
    # the per-shape builds (a float32 one: 14 s) are long and go before every other test
    assert [i.nodeid for i in items] == [
        "p::built-prop", "c::small-built", "t/plain_test::plain", "t/param_test::param[1]", "c::big-once",
        "c::small-once", "c::f16-built", "p::unavailable"]


def test_tests_estimated_long_go_before_the_tests_without_an_estimate(monkeypatch):
    """tests/ is collected before conformance/: a long property test (a kernel built per shape, 8 examples) goes ahead
    of the kernels' device tests instead of waiting behind them; the short estimated ones stay in their slots."""
    once, built = _one_xdist_worker(monkeypatch)
    assert schedule.property_seconds(8, True) >= schedule.LONG_SECONDS > schedule.call_seconds(BIG, False)
    items = [
        _Item("k/device_test::t1", None),
        _Item("k/device_test::t2", {"x": 2}),
        _Item("p::small-once", {"impl_kind": (once, "forward", None)}),
        _Item("p::built-prop", {"impl_kind": (built, "forward", None)}),
        _Item("c::big-once", {"conformance_case": BIG, "conformance_spec": "once"}),
    ]
    pytest_plugin.pytest_collection_modifyitems(SimpleNamespace(option=SimpleNamespace()), items)
    assert [i.nodeid for i in items] == [
        "p::built-prop", "k/device_test::t1", "k/device_test::t2", "p::small-once",
        "c::big-once"]


def test_a_shard_of_a_property_is_estimated_at_its_share_of_the_examples(monkeypatch):
    """A sharded property (an adapter that builds per shape) counts the examples of its shard, the 3-tuple's (index,
    count); the whole property's estimate is the sum of its shards'."""
    from hypothesis import settings

    from attention_conformance.property_tests.profiles import build_per_shape_examples, build_per_shape_shards

    once, built = _one_xdist_worker(monkeypatch)
    config = SimpleNamespace(option=SimpleNamespace())
    profile = settings().max_examples  # the active Hypothesis profile's, as the plugin reads it
    n = build_per_shape_shards(profile)
    whole = pytest_plugin._estimated_seconds(config, _Item("p::whole", {"impl_kind": (built, "backward", None)}), {})
    shards = [pytest_plugin._estimated_seconds(config, _Item(f"p::s{i}", {"impl_kind": (built, "backward", (i, n))}),
                                               {}) for i in range(n)]
    assert whole == schedule.property_seconds(build_per_shape_examples(profile), True, backward=True)
    assert sum(shards) == pytest.approx(whole) and max(shards) < whole


def test_without_xdist_the_order_is_pytests(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    items = [_Item("c::small", {"conformance_case": SMALL, "conformance_spec": "x"}),
             _Item("c::big", {"conformance_case": BIG, "conformance_spec": "x"})]
    pytest_plugin.pytest_collection_modifyitems(SimpleNamespace(option=SimpleNamespace(numprocesses=None)), items)
    assert [i.nodeid for i in items] == ["c::small", "c::big"]


def test_under_xdist_the_plugin_hands_out_one_test_at_a_time(tmp_path):
    """``-n 2 --device cuda`` without ``--maxschedchunk``: the plugin sets it to 1 in pytest_configure and xdist's
    controller hands out by it (a run of its own: the value the session ends with)."""
    pytest.importorskip("xdist")
    import os
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(
        "def pytest_sessionfinish(session):\n"
        "    import os\n"
        "    if 'PYTEST_XDIST_WORKER' not in os.environ:\n"
        "        print('MAXSCHEDCHUNK', session.config.option.maxschedchunk)\n")
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # not a worker of this run's
    p = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-s", "-p", "no:randomly",
                        "-p", "no:cacheprovider", "--device", "cuda", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert "MAXSCHEDCHUNK 1" in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize("device, profile, option, want", [
    ("cuda", "ci", {}, True), ("cpu", "gpu", {}, True),  # CUDA, or the gpu profile's large cases on any device
    ("cuda", "ci", {"maxschedchunk": 7}, False),  # a value the user gives stays
    ("cpu", "ci", {}, False), ("cpu", "full", {}, False),  # a CPU run of another profile keeps xdist's chunks
    ("cuda", "gpu", {"numprocesses": None}, False),  # no -n: nothing to hand out
])
def test_the_one_at_a_time_rule(device, profile, option, want):
    from types import SimpleNamespace

    from attention_conformance import pytest_plugin

    values = {pytest_plugin._DESTS["device"]: device, pytest_plugin._DESTS["profile"]: profile}
    config = SimpleNamespace(option=SimpleNamespace(**{"numprocesses": 2, "maxschedchunk": None, **option}),
                             getoption=values.__getitem__)
    assert pytest_plugin._hands_out_one_at_a_time(config) is want


def test_spread_keeps_a_key_out_of_each_window_and_the_order_otherwise():
    keys = ["a", "a", "a", "b", "b", "c", None, "d"]
    order = schedule.spread(keys, 3)
    assert sorted(order) == list(range(len(keys)))
    picked = [keys[i] for i in order]
    assert picked == ["a", "b", "c", "a", "b", None, "a", "d"]
    # any 3 consecutive places hold distinct keys (a None piece takes a place too)
    assert all(len({k for k in picked[j:j + 3] if k is not None}) == len([k for k in picked[j:j + 3] if k])
               for j in range(len(picked) - 2))
    # where no piece is far enough from its key's last place, the one whose key came longest ago
    assert [["x", "y"][i // 3] for i in schedule.spread(["x"] * 3 + ["y"] * 3, 4)] == ["x", "y", "x", "y", "x", "y"]
    assert schedule.spread(keys, 1) == list(range(len(keys)))  # one worker: nothing to spread
    assert schedule.spread(["a", "a"], 4) == [0, 1]  # nothing else to take: the order stands


def test_under_xdist_the_tests_of_one_case_are_spread_over_the_workers(monkeypatch):
    """The (case, adapter) tests of one case, of equal estimates, do not start together in the first wave: each
    worker starts on another case and the later tests find its oracle made (`running.oracle_store`)."""
    a, b, c = (SimpleNamespace(spec=s, available=True, adapter=_adapter(False)) for s in "abc")
    run = SimpleNamespace(loaded=[a, b, c])
    monkeypatch.setattr(pytest_plugin, "conformance_run", lambda config: run)
    monkeypatch.setattr(pytest_plugin, "device_option", lambda config: "cpu")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    items = [_Item(f"c::{case.id[:3]}-{x.spec}", {"conformance_case": case, "conformance_spec": x.spec})
             for case in (BIG, SMALL) for x in (a, b, c)]
    pytest_plugin.pytest_collection_modifyitems(SimpleNamespace(option=SimpleNamespace()), items)
    cases = [i.callspec.params["conformance_case"].id for i in items]
    # the largest first; 2 workers hold up to 4 tests (running and next): the first 4 as spread as 2 cases allow
    assert cases[:2] == [BIG.id, SMALL.id] and sorted(cases[:4]) == sorted([BIG.id, SMALL.id] * 2)


def test_a_float32_build_is_expected_to_take_as_long_as_measured():
    """Compiled FlexAttention's float32 builds took 14 s (median) on the H200 against 2.5 s in float16: they sort
    ahead of the float16 builds, forward or backward, so they do not form a run's tail."""
    f32 = catalog._mk("unit", Lq=65, Lk=129, d=64, dtype="float32")
    f16 = catalog._mk("unit", Lq=65, Lk=129, d=64, dtype="float16")
    f16_bwd = catalog._mk("unit", Lq=65, Lk=129, d=64, dtype="float16", backward=True)
    assert schedule.call_seconds(f32, True) > schedule.call_seconds(f16_bwd, True) > schedule.call_seconds(f16, True)
    assert schedule.build_seconds(True, False, "float32") == schedule.build_seconds(True, True, "float32") == 14.0
    assert schedule.call_seconds(f32, False) == schedule.call_seconds(f16, False)  # a kernel built once: no build


def test_a_case_with_large_tensors_and_few_multiply_adds_is_expected_to_take_seconds():
    """The paged decoding case of the gpu profile (one query, 4 x 16384 keys) moves its tensors through the worker
    pipe, the snapshots and the comparison: 11-21 s per adapter on the H200, where its multiply-adds predicted 0.2 s."""
    case = next(c for c in catalog.cases("gpu") if c.id.startswith("paged-b4h32x8-q1k16384"))
    assert schedule.io_elements(case) > 1e8
    assert schedule.call_seconds(case, False) > 10


def test_cases_of_one_build_charge_it_once_and_the_repeats_sort_after_the_builds(monkeypatch):
    """Two cases that differ only in their inputs (distribution, seed) need one build: the first in collection order
    is charged it, the other not, so the repeat runs after the builds (Inductor's cache has it by then) and not
    beside the first in another worker, compiling the same kernel (the H100's CLI run: 35-42 s each, 6 at once)."""
    import dataclasses

    first = catalog._seeded(catalog._mk("distribution", Lq=65, Lk=129, d=64, dtype="float32"))
    again = dataclasses.replace(first, family="other", distribution="outliers", seed=first.seed + 1)
    wider = dataclasses.replace(first, Lk=130)
    masked, masked_again = (dataclasses.replace(first, mask=m) for m in ("random", "full_rows"))
    assert schedule.build_key(first) == schedule.build_key(again) != schedule.build_key(wider)
    # a recipe's values reach the kernel as a tensor: present or not decides the build, not which recipe
    assert schedule.build_key(masked) == schedule.build_key(masked_again) != schedule.build_key(first)

    builds = schedule.Builds()
    assert builds.first("flex", first) and not builds.first("flex", again) and builds.first("fa4", again)
    assert schedule.call_seconds(again, True, cached=True) == schedule.call_seconds(again, False)

    # the CLI's pieces (`case_seconds` with the run's Builds): the repeat costs what a kernel built once costs
    built, once = _adapter(True), _adapter(False)
    builds = schedule.Builds()
    assert schedule.case_seconds(first, [built, once], "cpu", builds) == pytest.approx(
        schedule.call_seconds(first, True) + schedule.call_seconds(first, False))
    assert schedule.case_seconds(again, [built, once], "cpu", builds) == pytest.approx(
        2 * schedule.call_seconds(again, False))

    # the plugin: the repeat of the build goes after a smaller case of its own build
    la = SimpleNamespace(spec="flex", available=True, adapter=_adapter(True))
    monkeypatch.setattr(pytest_plugin, "conformance_run", lambda config: SimpleNamespace(loaded=[la]))
    monkeypatch.setattr(pytest_plugin, "device_option", lambda config: "cpu")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    items = [_Item(f"c::{name}", {"conformance_case": case, "conformance_spec": "flex"})
             for name, case in (("first", first), ("again", again), ("small", SMALL))]
    pytest_plugin.pytest_collection_modifyitems(SimpleNamespace(option=SimpleNamespace()), items)
    assert [i.nodeid for i in items] == ["c::first", "c::small", "c::again"]
