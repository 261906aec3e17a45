"""The tests run where the package is installed from its wheel, as ``tox -e py`` runs them (and any runner that installs
the wheel; ``tox -e gpu`` / ``bench`` install the checkout editable): the wheel has no ``kernels.cuda.lab`` (the lab
build's Python side stays in the checkout, test_wheel_contents.py), and tox calls the ``pytest`` script, which does
not put the checkout's root on sys.path (so the checkout's ``conformance/`` folder is not importable as a top-level
``conformance``). Every test module must collect there, and a test of the lab must skip, not fail.

Checked in a subprocess made like a tox env: the lab's module unimportable (``sys.modules[...] = None``) and the
working directory off sys.path. An editable install run with ``python -m pytest`` (CI's, a developer's) has both,
which is how a module-level import of the lab, and a test importing ``conformance.examples``, once made ``tox -e
gpu`` and ``tox -e bench`` stop at collection (and ``tox -e py`` lose 2,191 tests) on a runner.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB = "attention_conformance.kernels.cuda.lab"
#: the tests that use the lab (by their source): run, not only collected, without it
LAB_USERS = ("tests/kernels/test_cuda_lab_params.py", "tests/kernels/test_cuda_sanitize_cases.py",
             "tests/tools/test_ab_libs_inproc.py", "tests/tools/test_vendor_rows.py",
             "tests/tools/test_fa3_check_bench.py", "tests/kernels/test_generated_wgmma.py")


def _pytest_as_tox_runs_it(*args: str) -> subprocess.CompletedProcess:
    code = ("import os, sys\n"
            f"sys.modules[{LAB!r}] = None\n"
            "sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]  # as the pytest script runs\n"
            "import pytest\n"
            f"sys.exit(pytest.main({list(args)!r}))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_every_test_module_collects_without_the_lab():
    r = _pytest_as_tox_runs_it("--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "error" not in r.stdout.splitlines()[-1], r.stdout.splitlines()[-1]


def test_the_lab_tests_skip_without_the_lab():
    r = _pytest_as_tox_runs_it("-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs",
                                *LAB_USERS)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "failed" not in r.stdout.splitlines()[-1] and "skipped" in r.stdout.splitlines()[-1], r.stdout[-2000:]
    assert "not in the installed package" in r.stdout, r.stdout[-2000:]
