"""tools/pytest_stream_failures.py keeps what says why a test failed: a Hypothesis failure's message comes before its
falsifying example's 40 lines, which the last lines alone (as it kept before) would have been."""

from __future__ import annotations

import pytest_stream_failures


def test_the_message_comes_first_then_where_it_was_raised():
    example = [f"E            field_{i}={i}," for i in range(40)]
    text = "\n".join(["    def test_kernel_property(kind):", ">       run.test()",
                      "E   PropertyFailure: cuda-fa2: property 'backward' failed [FAIL]: dq: error 3e-3 > tolerance",
                      "E     Falsifying example: test(", *example, "", "property_tests/kernel_properties.py:356: "
                      "PropertyFailure"])
    kept = pytest_stream_failures.message_lines(text)
    assert kept[0].startswith("E   PropertyFailure: cuda-fa2") and "dq: error" in kept[0]
    assert len(kept) <= 30 + 1 + 10 and kept[30] == "..."
    assert kept[-1] == "property_tests/kernel_properties.py:356: PropertyFailure"


def test_a_report_without_error_lines_keeps_its_last_lines():
    text = "\n".join(f"line {i}" for i in range(100))
    assert pytest_stream_failures.message_lines(text) == [f"line {i}" for i in range(60, 100)]


def test_under_xdist_only_the_controller_writes(tmp_path, monkeypatch):
    """Workers load the plugin too (-p): had they written, every report would be in the file twice."""
    from types import SimpleNamespace

    path = tmp_path / "failures.txt"
    monkeypatch.setattr(pytest_stream_failures, "_PATH", str(path))
    report = SimpleNamespace(when="call", failed=True, duration=1.0, outcome="failed", nodeid="t::x",
                             longreprtext="E   boom")
    for config in (SimpleNamespace(workerinput={}), SimpleNamespace()):  # a worker, then the controller
        pytest_stream_failures.pytest_configure(config)
        pytest_stream_failures.pytest_runtest_logreport(report)
    assert path.read_text() == "=== t::x [call]\nE   boom\n"
    assert path.with_name("failures.txt.durations").read_text().count("t::x") == 1


def test_the_case_and_repro_lines_are_kept_past_a_long_traceback():
    """A property whose call raised: 30 lines of traceback come first, then the case and its repro command."""
    traceback = [f"E         File \"x.py\", line {i}, in f" for i in range(40)]
    text = "\n".join(["E   PropertyFailure: flash-attn-4: property 'edges' failed [FAIL in forward]", *traceback,
                      "E     case: hyp-edge-b1h1x1-q2k1-d8-f16 (B=1 Hq=1 Hkv=1 Lq=2 Lk=1 d=8 dv=40 dtype=float16)",
                      "E     repro: python -m attention_conformance repro '{}' --impl flash-attn-4 --device cuda --run",
                      "property_tests/kernel_properties.py:356: PropertyFailure"])
    kept = pytest_stream_failures.message_lines(text)
    assert any(ln.lstrip("E ").startswith("case: hyp-edge-b1h1x1-q2k1") for ln in kept)
    assert any(ln.lstrip("E ").startswith("repro: python -m attention_conformance") for ln in kept)
    assert kept.index("...") < [i for i, ln in enumerate(kept) if "case: " in ln][0]


def test_every_setup_and_call_is_written_with_when_and_on_which_worker(tmp_path, monkeypatch):
    """A conformance test decides its verdict while it is set up: where a run's time went is in its setups, all of
    them (the H100's cut-off tox -e gpu had 1,570 s of 3,800 worker-seconds written when only setups over 0.5 s were);
    the time each report arrived and its worker give each worker's timeline. Short teardowns are left out."""
    from types import SimpleNamespace

    path = tmp_path / "failures.txt"
    monkeypatch.setattr(pytest_stream_failures, "_PATH", str(path))
    pytest_stream_failures.pytest_configure(SimpleNamespace())
    gw3 = SimpleNamespace(gateway=SimpleNamespace(id="gw3"))
    for when, duration, nodeid in (("setup", 12.5, "t::slow"), ("setup", 0.01, "t::fast"), ("teardown", 0.2, "t::td"),
                                   ("teardown", 9.0, "t::slow_td")):
        pytest_stream_failures.pytest_runtest_logreport(SimpleNamespace(
            when=when, failed=False, duration=duration, outcome="passed", nodeid=nodeid, longreprtext="", node=gw3))
    rows = [ln.split("\t") for ln in path.with_name("failures.txt.durations").read_text().splitlines()]
    assert [(r[0], r[2], r[3], r[5]) for r in rows] == [("12.50", "setup", "t::slow", "gw3"),
                                                        ("0.01", "setup", "t::fast", "gw3"),
                                                        ("9.00", "teardown", "t::slow_td", "gw3")]
    assert all(float(r[4]) >= 0 for r in rows)


def test_outcomes_are_written_once_and_the_tests_still_running_at_the_end_are_named(tmp_path, monkeypatch):
    """The conformance outcome of each test (for tools/compare_front_ends.py when no junit XML comes back), and the
    stragglers of a session cut off at its limit, with the seconds they had run."""
    from types import SimpleNamespace

    path = tmp_path / "failures.txt"
    monkeypatch.setattr(pytest_stream_failures, "_PATH", str(path))
    pytest_stream_failures.pytest_configure(SimpleNamespace())
    done = "conformance/test_conformance.py::test_case[c1::a]"
    stuck = "property-suite::test_kernel_property[x]"
    for nodeid in (done, stuck):
        pytest_stream_failures.pytest_runtest_logstart(nodeid, None)
    for when in ("setup", "call", "teardown"):
        pytest_stream_failures.pytest_runtest_logreport(SimpleNamespace(
            when=when, failed=False, duration=0.1, outcome="passed", nodeid=done, longreprtext="",
            user_properties=[("conformance_outcome", "PASS")]))
    pytest_stream_failures.pytest_keyboard_interrupt(None)
    pytest_stream_failures.pytest_sessionfinish(None, 2)  # after the interrupt: nothing written twice
    assert path.with_name("failures.txt.outcomes").read_text() == f"PASS\t{done}\n"
    running = [ln.split("\t") for ln in path.with_name("failures.txt.durations").read_text().splitlines()
               if "\trunning\t" in ln]
    assert [(r[1], r[3]) for r in running] == [("running", stuck)]
