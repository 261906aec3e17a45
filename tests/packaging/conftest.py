"""The wheel the project builds, once per test session: from a copy of the files git would commit (tracked, and new
files not ignored), so a build tree of the checkout neither leaks in nor clashes with another build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run ``cmd``; fail the test with its output when it exits non-zero."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="session")
def run_ok():
    """`_run`: a command that must succeed."""
    return _run


def _source_copy(dest: Path) -> Path:
    """The files of the checkout that git would commit, copied under ``dest`` (the whole tree without git)."""
    try:
        listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT).stdout
        files = [f for f in listed.split("\0") if f]
    except (OSError, AssertionError):
        pytest.skip("not a git checkout: the wheel's sources are what git would commit")
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """Path of the built wheel (``pip wheel --no-deps``; without build isolation where this interpreter has the
    build backend pyproject.toml asks for, which keeps the build offline and to a few seconds)."""
    src = _source_copy(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheel")
    local_backend = subprocess.run([sys.executable, "-c", "import setuptools, sys; "
                                    "sys.exit(int(setuptools.__version__.split('.')[0]) < 68)"],
                                   capture_output=True).returncode == 0
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *(["--no-build-isolation"] * local_backend),
          "-w", str(out), str(src)])
    (whl,) = out.glob("attention_conformance-*.whl")
    return whl
