"""The kernel properties honour declarations (property_tests/kernel_properties.py, strategies.py, known.py):

- for every built-in CPU adapter and every CUDA adapter's declaration (no GPU needed), each property's strategy draws
  only what the declaration claims (``strict``: a draw outside it raises) and reaches d = 128 and 256 where they are
  claimed, and never a backward head dim the backward does not claim;
- a draw the adapter declines after claiming it, or raises on, fails the property; a library refusal that the
  declaration announces (``library_check``) is rejected and counted, not passed;
- a failure an expectations entry expects, symptom included, is KNOWN (the property holds and records it); another
  symptom still fails; the same through pytest with ``--expect FILE``.

Toy adapters: tests/property/property_toys.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

from attention_conformance.adapters.base import Capabilities, capability_reason
from attention_conformance.adapters.registry import LoadedAdapter, load
from attention_conformance.property_tests.kernel_properties import (
    PropertyFailure,
    build_property,
    declaration,
    properties_for,
    property_strategy,
)
from attention_conformance.property_tests.known import KnownFindings, known_findings
from attention_conformance.verdict.expectations import Expectation, RunContext

HERE = Path(__file__).resolve().parent
CPU_BUILTINS = ("reference-fa1", "reference-fa2", "reference-fa3", "reference-fa3-fp8", "reference-splitkv",
                "torch-sdpa-math")
DRAWS = 25
#: a handful of examples, no shrinking (a failure's first example is enough here)
FEW = settings(max_examples=6, derandomize=True, database=None, deadline=None, phases=[Phase.explicit, Phase.generate],
               suppress_health_check=list(HealthCheck))


def _cuda_declarations() -> dict[str, Capabilities]:
    """The declarations of the CUDA adapters, read without a GPU."""
    from attention_conformance.adapters import cuda, cudnn_fp8, flash_attn, torch_flex, torch_sdpa

    out = {cls.name: cls.capabilities for cls in (cuda.CudaFA2, cuda.CudaSplitKV, cuda.CudaFA3,
                                                   cuda.CudaFA3FP8, cudnn_fp8.CudnnFP8, flash_attn.FlashAttn3,
                                                   flash_attn.FlashAttn4)}
    out["torch-flex"] = torch_flex.FlexAttention().caps_for("cuda")
    for cls in (torch_sdpa.SdpaFlash, torch_sdpa.SdpaCudnn):
        out[cls.name] = cls.cuda_caps
    return out


def _declarations() -> list:
    """One test per distinct declaration (reference-fa1, -fa2 and -fa3 declare the same), named by its adapters."""
    named: dict[tuple[Capabilities, str], list[str]] = {}
    for name in CPU_BUILTINS:
        named.setdefault((load(name).adapter.capabilities, "cpu"), []).append(name)
    for name, caps in _cuda_declarations().items():
        named.setdefault((caps, "cuda"), []).append(f"{name}@cuda")
    return [pytest.param(caps, device, id=",".join(names)) for (caps, device), names in named.items()]


def _draws(strategy, n: int = DRAWS) -> list:
    seen: list = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        seen.append(x)

    collect()
    return seen


@pytest.mark.parametrize("caps,device", _declarations())
def test_strategies_draw_only_what_the_declaration_claims(caps, device):
    """Every property's draws are claimed (strict: an unclaimed one raises), head dims included (the backward's
    own); FP8 per-tile draws only declared tile shapes; and each property draws d = 128 and d = 256 where claimed
    (fp8_offset: where 8, 16 and 32 are not)."""
    adapter = types.SimpleNamespace(capabilities=caps, name="declared")
    kinds = properties_for(adapter, device)
    assert kinds, "no property applies to the declaration"
    for kind in kinds:
        strategy = property_strategy(kind, adapter, device, strict=True)
        drawn = [x[0] if isinstance(x, tuple) else x for x in _draws(strategy)]
        backward = kind == "backward"
        for case in drawn:
            assert capability_reason(caps, case, device) is None, (kind, case.id)
            assert caps.takes_head_dim(case.d, backward) and caps.takes_head_dim(case.dv, backward), (kind, case.id)
        if caps.fp8_tiles is not None:
            tiles = {(c.fp8.tile_q, c.fp8.tile_k) for c in drawn if c.fp8 and c.fp8.granularity == "per_tile"}
            assert tiles <= caps.fp8_tiles, (kind, tiles)
        if kind == "edges" or (kind == "fp8_offset" and any(caps.takes_head_dim(x) for x in (8, 16, 32))):
            continue
        for d in (128, 256):
            if caps.takes_head_dim(d, backward):
                _reaches(strategy, d)


def _reaches(strategy, d: int) -> None:
    """``strategy`` draws a case with head dim ``d`` (Hypothesis' find: generation only, stops at the first)."""
    found = find(strategy, lambda x: (x[0] if isinstance(x, tuple) else x).d == d,
                 settings=settings(max_examples=300, derandomize=True, database=None, phases=[Phase.generate],
                                   suppress_health_check=list(HealthCheck)))
    assert (found[0] if isinstance(found, tuple) else found).d == d


def test_cuda_fa3_backward_draws_only_its_builds():
    from attention_conformance.adapters.cuda import FA3_BWD_HEAD_DIMS, FA3_DV_PAIRS

    caps = _cuda_declarations()["cuda-fa3"]
    drawn = _draws(property_strategy("backward", types.SimpleNamespace(capabilities=caps), "cuda", strict=True))
    dims = {c.d for c in drawn}
    assert dims <= FA3_BWD_HEAD_DIMS and len(dims) >= 2, dims  # the backward's builds (bwd_launch.cuh)
    assert all(c.dv == c.d or (c.d, c.dv) in FA3_DV_PAIRS for c in drawn), {(c.d, c.dv) for c in drawn}


def _loaded(toy) -> LoadedAdapter:
    return LoadedAdapter(f"property_toys:{type(toy).__name__}", toy.name, toy, None)


def test_a_claimed_draw_declined_by_supports_fails_the_property():
    from property_toys import DeclinesD64

    run = build_property("forward", DeclinesD64(), settings_obj=FEW, pinned=False)
    with pytest.raises(PropertyFailure, match="declined a claimed case") as info:
        run.test()
    assert "d = 64 not compiled" in str(info.value) and "Capabilities" in str(info.value)


def test_a_claimed_draw_that_raises_fails_the_property():
    from property_toys import RaisesD64

    run = build_property("forward", RaisesD64(), settings_obj=FEW, pinned=False)
    with pytest.raises(PropertyFailure, match="KernelUnsupported: head_dim=64"):
        run.test()


def test_a_refusal_the_declaration_announces_is_rejected_and_counted():
    from property_toys import LibraryDeclinesLong

    run = build_property("forward", LibraryDeclinesLong(), settings_obj=settings(FEW, max_examples=15), pinned=False)
    run.test()
    assert run.declined and all(case.Lk > 17 for case, _ in run.declined)
    assert run.examples_run > 0 and "refuses" in run.declined[0][1]


def _entry(**kw) -> Expectation:
    base = dict(id="toy-bias", adapters=("toy-biased",), reason="adds 0.01 to every output element",
                devices=("cpu",), symptom="out: error 0.01 >")
    base.update(kw)
    return Expectation(**base)


def test_a_known_finding_is_known_and_recorded():
    from property_toys import Biased

    known = KnownFindings((_entry(),), RunContext("cpu"), "toy-biased", "property_toys:Biased")
    run = build_property("forward", Biased(), settings_obj=FEW, pinned=False, known=known)
    run.test()
    assert run.known and run.known[0].expectation == "toy-bias" and run.examples_run == len(run.known)
    assert "out: error 0.01" in run.known[0].message


@pytest.mark.parametrize("entry,words", [
    (_entry(symptom="not what it says"), "this is another failure"),
    (_entry(where={"Lq": 9999}), "out: error 0.01"),   # out of the entry's scope
    (_entry(gpu="H200"), "out: error 0.01"),           # an entry for another machine
], ids=["other-symptom", "out-of-scope", "other-gpu"])
def test_a_failure_no_entry_expects_still_fails(entry, words):
    from property_toys import Biased

    known = KnownFindings((entry,), RunContext("cpu"), "toy-biased", "property_toys:Biased")
    run = build_property("forward", Biased(), settings_obj=FEW, pinned=False, known=known)
    with pytest.raises(PropertyFailure, match=words):
        run.test()
    assert not run.known


def test_known_findings_reads_expect_files(tmp_path):
    from property_toys import Biased

    f = tmp_path / "toy.toml"
    f.write_text('schema = 1\n[[expectation]]\nid = "toy-bias"\nadapters = ["toy-biased"]\ndevices = ["cpu"]\n'
                 'symptom = "out: error 0.01 >"\nreason = "adds 0.01"\n')
    known = known_findings(_loaded(Biased()), "cpu", [str(f)], default=True)
    assert [e.id for e in known.entries][-1] == "toy-bias" and known.ctx.device == "cpu"
    run = build_property("forward", Biased(), settings_obj=FEW, pinned=False, known=known)
    run.test()
    assert run.known


def test_pytest_expect_turns_a_property_failure_into_known(tmp_path):
    """``pytest tests/property/test_kernel_properties.py --impl property_toys:Biased --expect FILE`` (its forward
    property, the short ``mutants`` profile): passes, and the terminal summary lists the KNOWN draws."""
    f = tmp_path / "toy.toml"
    f.write_text('schema = 1\n[[expectation]]\nid = "toy-bias"\nadapters = ["toy-biased"]\n'
                 'symptom = "out: error 0.01 >"\nreason = "adds 0.01"\n')
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", HYPOTHESIS_PROFILE="mutants",
               PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-k", "forward",
           str(HERE / "test_kernel_properties.py"), "--impl", "property_toys:Biased", "--expect", str(f)]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "1 passed" in out, out[-3000:]
    assert "known findings" in out and "KNOWN toy-bias" in out, out[-3000:]


def test_without_impl_and_with_nothing_available_the_properties_skip_as_the_conformance_tests_do(tmp_path):
    """``pytest tests/property/test_kernel_properties.py --device cuda`` where no adapter runs on CUDA: skipped with the
    CLI's reason, as ``pytest conformance/`` is (it had been an error at collection once the property suite took the
    same default adapters); an ``--impl`` named that cannot run there still stops the session."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: adapters are available on cuda")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-rs",
           str(HERE / "test_kernel_properties.py"), "--device", "cuda"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "1 skipped" in out and "no adapter available on cuda" in out, out[-3000:]
    r = subprocess.run(cmd + ["--impl", "torch-sdpa-cudnn"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 4 and "--impl torch-sdpa-cudnn is unavailable on cuda" in out, out[-3000:]


def test_an_adapter_that_builds_per_shape_draws_fewer_examples_and_says_so():
    """Compiled FlexAttention and flash-attn-4 build a kernel per shape (seconds an example): their properties draw
    `profiles.build_per_shape_examples` examples, not the profile's count, and the run records why."""
    from attention_conformance.property_tests.profiles import build_per_shape_examples

    adapter = load("reference-fa2").adapter
    adapter.builds_per_shape = True
    run = build_property("forward", adapter, settings_obj=settings(FEW, max_examples=300), pinned=False)
    run.test()
    assert build_per_shape_examples(300) == 12 and build_per_shape_examples(100) == 8
    assert build_per_shape_examples(6) == 6
    assert 0 < run.examples_run <= 12 and "12 examples instead of the profile's 300" in run.budget
    plain = build_property("forward", load("reference-fa2").adapter, settings_obj=FEW, pinned=False)
    assert plain.budget == ""


def test_a_property_of_an_adapter_that_builds_per_shape_runs_as_shards_that_draw_different_examples():
    """One such property ran for over 450 s as one test on the H100 (compiled FlexAttention's backward); its examples
    now run as tests of `profiles.BUILD_PER_SHAPE_EXAMPLES_PER_SHARD` each, side by side under pytest-xdist. Together
    they draw the budget's count; under a derandomized profile each shard has a seed of its own (else every shard would
    draw the first one's examples); the pinned examples spread over the shards, every count-th from the shard's index
    (each builds a kernel of its own: in the first shard alone they made it the longest test of tox -e gpu)."""
    from attention_conformance.adapters.base import capability_reason
    from attention_conformance.property_tests import kernel_properties
    from attention_conformance.property_tests.profiles import build_per_shape_shards, shard_examples

    assert build_per_shape_shards(100) == 4 and build_per_shape_shards(300) == 6
    assert [shard_examples(8, i, 4) for i in range(4)] == [2, 2, 2, 2]
    assert [shard_examples(7, i, 3) for i in range(3)] == [3, 2, 2]
    with pytest.raises(ValueError):
        shard_examples(8, 4, 4)
    adapter = load("reference-fa2").adapter
    adapter.builds_per_shape = True
    seen = []
    for index in range(2):
        drawn = []
        real = kernel_properties.evaluate

        def spy(a, case, device, *rest, _drawn=drawn, _real=real):
            _drawn.append(case.id)
            return _real(a, case, device, *rest)

        kernel_properties.evaluate = spy
        try:
            run = build_property("forward", adapter, settings_obj=settings(FEW, max_examples=100, derandomize=True),
                                 shard=(index, 4))
            run.test()
        finally:
            kernel_properties.evaluate = real
        assert f"2 of 8 examples (shard {index + 1} of 4)" in run.budget
        pinned = {c for c in drawn if c.startswith("pinned")}
        mine = {c.id for c in kernel_properties.PINNED["forward"][index::4]
                if capability_reason(adapter.capabilities, c, "cpu") is None}
        assert pinned == mine and mine, (index, pinned, mine)  # this shard's share of the pinned examples
        seen.append({c for c in drawn if not c.startswith("pinned")})
    assert seen[0] and seen[1] and seen[0] != seen[1]


def _every_spelling() -> list:
    """(declaration, device) of every built-in adapter and entry-point spelling on each device it declares (read
    without the library where the declaration does not need it), one param per distinct declaration."""
    from attention_conformance.adapters.registry import BUILTIN, _import_attr

    named: dict[tuple[Capabilities, str], list[str]] = {}
    for base, target in sorted(BUILTIN.items()):
        entries = tuple(getattr(_import_attr(target), "entry_points", ()) or ())
        for spec in (base, *(f"{base}@{e}" for e in entries)):
            adapter = load(spec, "cuda").adapter
            for device in ("cpu", "cuda"):
                try:
                    caps = declaration(adapter, device)
                except Exception:  # a declaration that needs the library or the device: read where they are
                    continue
                if device in caps.devices:
                    named.setdefault((caps, device), []).append(f"{spec}@{device}" if "@" not in spec
                                                                else f"{spec}/{device}")
    return [pytest.param(caps, device, id=names[0] + (f"+{len(names) - 1}" if len(names) > 1 else ""))
            for (caps, device), names in named.items()]


@pytest.mark.parametrize("caps,device", _every_spelling())
def test_every_spellings_properties_draw_declared_cases(caps, device):
    """Each property of each built-in spelling draws cases its declaration claims, and draws at all (a causal-only
    spelling's edges had drawn none: every plain draw non-causal; xformers' local-attention spellings' none: the
    plain draw had no window; FA2 / FA3's KV-cache spelling drew query lengths it cannot take; FA3's paged one drew
    FP8 codes in a dense layout it does not take; the CUDA flash backend's causal_lower_right, which carries nothing
    there, had properties)."""
    adapter = types.SimpleNamespace(capabilities=caps, name="declared")
    for kind in properties_for(adapter, device):
        drawn = _draws(property_strategy(kind, adapter, device, strict=True), 8)
        assert drawn, kind
        for x in drawn:
            case = x[0] if isinstance(x, tuple) else x
            assert capability_reason(caps, case, device) is None, (kind, case.id)
