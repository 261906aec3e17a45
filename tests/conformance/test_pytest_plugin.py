"""The installed pytest plugin (conformance/pytest_plugin.py, entry point ``pytest11``), run as a user would:
``python -m pytest --pyargs attention_conformance --impl ... --profile ci`` in an empty directory outside the repo,
so neither the repository's pyproject.toml nor any conftest.py is involved."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _pytest(cwd: Path, *args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(extra_path), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_plugin_is_registered_as_pytest11_entry_point():
    eps = [ep for ep in importlib.metadata.entry_points(group="pytest11")
           if ep.value == "attention_conformance.pytest_plugin"]
    assert eps, "the distribution is not installed with its pytest11 entry point (pip install -e .)"


def test_pyargs_from_any_directory_passes_cleanly(tmp_path):
    """The plugin's options and parametrization work with no repository files around; no warnings."""
    r = _pytest(tmp_path, "--pyargs", "attention_conformance", "--impl", "reference-fa2", "--profile", "ci",
                "-k", "worked", "-W", "error")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert " passed" in out and "warning" not in out.lower(), out[-3000:]


def test_pyargs_reports_a_broken_function(tmp_path):
    """The same command fails on a function with a planted tail-tile bug (conformance/examples/broken_sdpa.py)."""
    r = _pytest(tmp_path, "--pyargs", "attention_conformance", "--impl",
                "attention_conformance.examples.broken_sdpa:attention",
                "--profile", "ci", "-k", "tile_edges")
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "FAIL: attention_conformance.examples.broken_sdpa:attention" in out, out[-3000:]


def test_prefixed_options_when_another_plugin_owns_profile(tmp_path):
    """When another plugin already registered --profile, ours stay usable as --conformance-profile."""
    (tmp_path / "otherplug.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--profile', action='store_true')\n")
    r = _pytest(tmp_path, "-p", "otherplug", "--pyargs", "attention_conformance", "--conformance-impl", "reference-fa2",
                "--conformance-profile", "ci", "-k", "worked", extra_path=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and " passed" in out, out[-3000:]


@pytest.mark.parametrize("folder", ["", "conformance"])
def test_no_conftest_registers_the_options_twice(folder):
    """The options live in the plugin only: a conftest that re-registered them would clash with it."""
    path = Path(__file__).resolve().parents[2] / folder / "conftest.py"
    assert not path.exists() or "addoption" not in path.read_text(), f"{path} registers pytest options"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_findings_and_unused_expectations_are_summarised_with_and_without_xdist(tmp_path, workers):
    """The terminal summary lists the passing FINDINGs and warns of an expectations entry that matched nothing, the
    same under pytest-xdist (whose controller runs no test: the lines travel in the tests' reports) as without."""
    pytest.importorskip("xdist")
    entry = tmp_path / "mine.toml"
    entry.write_text('schema = 1\n\n[[expectation]]\nid = "never-matches"\nadapters = ["attention_conformance.'
                     'examples.good_sdpa:attention"]\nwhere = { Lq = 99999 }\noutcome = "FAIL"\n'
                     'reason = "matches nothing"\n')
    r = _pytest(tmp_path, "--pyargs", "attention_conformance", "--impl",
                "attention_conformance.examples.good_sdpa:attention", "--profile", "ci", "-k", "nan_padding",
                "--expect", str(entry), *workers)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "conformance: quality warnings and named findings (passing)" in out, out[-3000:]
    assert sum(line.startswith("FINDING nan_padding-") for line in out.splitlines()) >= 3, out[-3000:]
    assert "warning: expectation never-matches" in out and "matched no test of this session" in out, out[-3000:]


def test_gpu_tests_on_cuda_give_their_cached_device_memory_back(monkeypatch):
    """pytest-xdist's workers share the GPU: after each test marked gpu on a CUDA run, the idle cached blocks of the
    worker's torch are released (as the engine does after each call); not after other tests or on a CPU run."""
    from types import SimpleNamespace

    from attention_conformance import pytest_plugin
    from attention_conformance.running import cuda_context

    released = []
    monkeypatch.setattr(cuda_context, "release_cached", released.append)

    def item(gpu: bool, device: str):
        config = SimpleNamespace(getoption=lambda dest: device if dest == "conformance_device" else None)
        marker = object() if gpu else None
        return SimpleNamespace(config=config, get_closest_marker=lambda name: marker if name == "gpu" else None)

    pytest_plugin.pytest_runtest_teardown(item(True, "cuda"))
    pytest_plugin.pytest_runtest_teardown(item(False, "cuda"))
    pytest_plugin.pytest_runtest_teardown(item(True, "cpu"))
    assert released == ["cuda"]


_TIMED = '''
import json, os, time

import pytest

LOG = os.environ["GPU_ALONE_LOG"]


def _held(name, seconds):
    began = time.monotonic()
    time.sleep(seconds)
    with open(LOG, "a") as f:
        f.write(json.dumps([name, os.environ.get("PYTEST_XDIST_WORKER"), began, time.monotonic()]) + "\\n")


@pytest.mark.gpu
@pytest.mark.parametrize("i", range(8))
def test_kernel(i):
    _held(f"kernel{i}", 0.3)


@pytest.mark.gpu
@pytest.mark.gpu_alone
@pytest.mark.parametrize("i", range(2))
def test_timer(i):
    _held(f"timer{i}", 0.3)
'''


@pytest.mark.parametrize("device, alone", [("cuda", True), ("cpu", False)])
def test_a_gpu_alone_test_has_the_gpu_to_itself_under_xdist(tmp_path, monkeypatch, device, alone):
    """Under pytest-xdist on CUDA a test marked gpu_alone (one that times the GPU) runs while no other worker's gpu
    test does: the tests in flight end first and none starts before it has (tox -e gpu's 8 workers on an H100 had
    stretched a timed 0.2 ms kernel to 0.74 ms). On the CPU nothing is held: the tests overlap (the control that
    shows this test can see an overlap). The workers' GPU is not touched here: only the plugin's holds are tested."""
    pytest.importorskip("xdist")
    pytest.importorskip("fcntl")
    (tmp_path / "test_timed.py").write_text(_TIMED)
    log = tmp_path / "held.jsonl"
    monkeypatch.setenv("GPU_ALONE_LOG", str(log))
    r = _pytest(tmp_path, "test_timed.py", "-n", "3", "--device", device, "-p", "no:randomly")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "10 passed" in out, out[-3000:]
    held = [json.loads(line) for line in log.read_text().splitlines()]
    timers = [h for h in held if h[0].startswith("timer")]
    kernels = [h for h in held if h[0].startswith("kernel")]
    overlaps = [(t[0], k[0]) for t in timers for k in held if k is not t and k[2] < t[3] and t[2] < k[3]]
    assert len(timers) == 2 and len(kernels) == 8
    if alone:
        assert not overlaps, f"ran beside a gpu_alone test: {overlaps}"
        # the others did share the GPU: at least two kernel tests overlapped
        assert any(a[2] < b[3] and b[2] < a[3] for a in kernels for b in kernels if a is not b), held
    else:
        assert overlaps, held
