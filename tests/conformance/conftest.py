"""Fixtures shared by the conformance tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def toy_path():
    """tests/conformance on PYTHONPATH, so that isolated workers and repro-snippet subprocesses import the
    toy adapters (engine_toys.py) by module name."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, old) if p)
    yield
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


class CliResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys) -> Callable[..., CliResult]:
    """``python -m attention_conformance ARGS`` in this process (`conformance.cli.main`, whose return value the module
    passes to sys.exit; argparse's own errors exit 2): what a test reads of a command's output and exit status, without
    a child interpreter importing torch again. Tests of the process boundary itself run the module in a child."""
    from attention_conformance.cli import main

    def run(*argv: str) -> CliResult:
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run
