"""`python -m attention_conformance.oracles.lab` (the seed lab, [FA-anim] "动手 · CPU 参考实现"): PASS on the real
kernel,
FAIL with exit 1 for each of the seed's three planted edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attention_conformance.oracles import lab

ROOT = Path(__file__).resolve().parents[2]


def test_lab_cli_passes():
    r = subprocess.run(
        [sys.executable, "-m", "attention_conformance.oracles.lab", "--length", "7", "--block", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "PASS"
    assert any(line.startswith("forward max") for line in lines)
    assert sum(line.startswith(("dQ", "dK", "dV")) for line in lines) == 3


def test_lab_cli_fails_with_exit_1_on_a_mutation():
    r = subprocess.run(
        [sys.executable, "-m", "attention_conformance.oracles.lab", "--length", "7", "--block", "3", "--mutate",
         "drop-alpha"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 1 and r.stdout.strip().splitlines()[-1] == "FAIL", r.stdout + r.stderr


@pytest.mark.parametrize("block", [1, 2, 3, 7, 8])
def test_lab_passes_for_every_block(block, capsys):
    assert lab.main(["--length", "7", "--block", str(block)]) == 0
    assert capsys.readouterr().out.strip().endswith("PASS")


@pytest.mark.parametrize("mutation", ["drop-alpha", "drop-scale", "causal-strict"])
def test_each_seed_edit_makes_the_lab_fail(mutation, capsys):
    assert lab.main(["--length", "7", "--block", "3", "--mutate", mutation]) == 1
    assert capsys.readouterr().out.strip().endswith("FAIL")


def test_drop_alpha_is_a_forward_bug_not_a_backward_one():
    r = lab.run_lab(7, 3, mutate="drop-alpha")
    assert r["forward_err"] > 1e-6 and not r["passed"]
