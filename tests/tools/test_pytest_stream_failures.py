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
