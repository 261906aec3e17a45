"""Fast unit tests of the property-testing machinery (property_tests/): strategies, patching, verdicts."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings

from attention_conformance.adapters.base import Capabilities, capability_reason
from attention_conformance.cases.case import Case
from attention_conformance.property_tests.kernel_check import evaluate
from attention_conformance.property_tests.kernel_properties import repro_command
from attention_conformance.property_tests.mutants.apply import (
    Edit,
    PatchError,
    check_applies,
    load_module,
    load_with,
    patched_source,
)
from attention_conformance.property_tests.strategies import DEFAULT_MAX_WORK, attention_cases, special_lengths

FA2 = "attention_conformance.kernels.reference.fa2"
COMMON = "attention_conformance.kernels.reference._common"


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(case=attention_cases())
def test_attention_cases_respect_the_element_budget(case):
    """Every drawn case is valid: work <= budget, Hkv | Hq, seqlens within range, FP8 dtype matches the spec."""
    assert case.B * case.Hq * case.Lq * case.Lk * (case.d + case.dv) <= DEFAULT_MAX_WORK, case.id
    assert case.Hq % case.Hkv == 0, case.id
    if case.seqlens_q is not None:
        assert len(case.seqlens_q) == case.B and all(0 <= x <= case.Lq for x in case.seqlens_q), case.id
    if case.fp8 is not None:
        assert case.dtype == "float8_" + case.fp8.format, case.id
        assert not case.fp8.incoherent or case.d & (case.d - 1) == 0, case.id


CAPS = Capabilities(dtypes=frozenset({"float32"}), window=False, mask=True, gqa=False,
                    alignments=frozenset({"top_left"}), layouts=frozenset({"contiguous"}),
                    head_dims=frozenset({16, 32}))


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(case=attention_cases(capabilities=CAPS))
def test_attention_cases_draw_only_claimed_cases(case):
    """With capabilities, only cases the adapter claims are drawn (capability_reason is None)."""
    assert capability_reason(CAPS, case, "cpu") is None, (case.id, capability_reason(CAPS, case, "cpu"))


def test_special_lengths_cover_tile_edges():
    assert special_lengths(130, (64, 128)) [:3] == [1, 2, 3]
    assert {63, 64, 65, 127, 128, 129} <= set(special_lengths(130, (64, 128)))


def test_patch_must_match_exactly_once():
    with pytest.raises(PatchError, match="occurs 0 times"):
        patched_source(FA2, (Edit("this text is not in fa2", "x"),), "t")
    with pytest.raises(PatchError, match="occurs 2 times"):
        patched_source(FA2, (Edit("kv_head = np.arange(p.Hq) // p.group", "x"),), "t")  # forward and backward
    with pytest.raises(PatchError, match="anchor"):
        patched_source(FA2, (Edit("s = s * p.scale", "s = s", after="def nowhere("),), "t")
    check_applies(FA2, (Edit("kv_head = np.arange(p.Hq) // p.group", "kv_head = 0", after="def backward("),), "t")


def test_mutated_module_is_a_fresh_copy():
    """Loading a mutant never touches the file on disk or the module in sys.modules."""
    import attention_conformance.kernels.reference.fa2 as original

    before = open(original.__file__, encoding="utf-8").read()
    mod = load_module(FA2, (Edit("s = s * p.scale", "s = s", after="def forward("),), "unit")
    assert mod is not original and sys.modules[FA2] is original
    assert open(original.__file__, encoding="utf-8").read() == before
    q = np.random.default_rng(0).standard_normal((1, 1, 3, 4))
    out_o, _ = original.forward(q, q, q, dtype="float64")
    out_m, _ = mod.forward(q, q, q, dtype="float64")
    assert not np.allclose(out_o, out_m), "the mutant (scale dropped) computes the same output"


def test_load_with_injects_and_restores_dependencies():
    import attention_conformance.kernels.reference as pkg
    import attention_conformance.kernels.reference._common as common

    patched = load_module(COMMON, (Edit("ok = ok & (j <= diag + self.right)", "ok = ok & (j < diag + self.right)"),),
                          "unit")
    fa2 = load_with(FA2, {COMMON: patched}, "unit")
    assert fa2.Problem is patched.Problem
    assert sys.modules[COMMON] is common and pkg._common is common


class _Broken:
    """Wraps a correct adapter and adds 1e-2 to the output: must FAIL; unwrapped it must PASS."""

    def __init__(self, base, delta):
        self.base, self.delta = base, delta
        self.name, self.capabilities = base.name, base.capabilities

    def supports(self, case, device):
        return self.base.supports(case, device)

    def unavailable_reason(self, device):
        return None

    def forward(self, inputs, case, device):
        fo = self.base.forward(inputs, case, device)
        fo.out = fo.out + self.delta
        return fo


def test_evaluate_fails_a_wrong_output_and_passes_a_correct_one():
    from attention_conformance.adapters.registry import load

    base = load("reference-fa2").adapter
    case = Case(family="unit", B=1, Hq=2, Hkv=1, Lq=5, Lk=7, d=8, dv=8, dtype="float32", causal=True, seed=3)
    assert evaluate(base, case).outcome == "PASS"
    v = evaluate(_Broken(base, 1e-2), case)
    assert v.failed and v.check == "out" and v.usage > 1, v


def test_repro_command_round_trips(tmp_path):
    import json
    import shlex

    from attention_conformance.cli import main

    case = Case(family="unit", B=1, Hq=1, Hkv=1, Lq=2, Lk=3, d=4, dv=4, dtype="float32", window=(1, None))
    cmd = repro_command("reference-fa2", case)
    args = shlex.split(cmd)
    assert args[:4] == ["python", "-m", "attention_conformance", "repro"] and args[-1] == "--run"
    payload = json.loads(args[4])
    assert Case.from_dict(payload) == case
    assert main(args[3:]) == 0  # the command as printed: the case re-runs in a child interpreter and passes
    # a property that failed on CUDA re-runs there: the command names the device (default cpu)
    cuda = shlex.split(repro_command("cuda-fa3", case, "cuda"))
    assert cuda[cuda.index("--device") + 1] == "cuda" and "--device" not in args


def test_runner_rejects_unknown_steps():
    from attention_conformance.property_tests.mutants.catalog import MUTANTS
    from attention_conformance.property_tests.mutants.runner import run_mutant

    with pytest.raises(ValueError, match="unknown step"):
        run_mutant(MUTANTS[0], order=("bogus",))


def test_cli_exit_status_follows_the_score(monkeypatch, capsys):
    """Exit 0 only when every mutant is killed: a catalog holding only the unmutated kernel gives 0/1 and exit 1."""
    from attention_conformance.property_tests.mutants import cli
    from attention_conformance.property_tests.mutants.catalog import MUTANTS, Mutant

    control = Mutant("control_identity", "none", "-", "reference-fa2", wrapper="identity")
    monkeypatch.setattr(cli, "MUTANTS", (control,))
    assert cli.main(["--order", "pinned"]) == 1
    assert "mutation score: 0/1 (0%)" in capsys.readouterr().out
    monkeypatch.setattr(cli, "MUTANTS", MUTANTS[:1])
    assert cli.main(["--order", "pinned"]) == 0
    assert "mutation score: 1/1 (100%)" in capsys.readouterr().out
    assert cli.main(["--order", "bogus"]) == 2
