"""Plain functions that declare what they support (conformance/adapters/declared.py) or leave it to the probes.

Three correct functions with the limits real third-party kernels have (tests/conformance/claims_toys.py):
causal-only, head dims {64, 128}, fp16 only. Declared or not, each must get exactly its supported cases
run (the same verdict as the same computation without the limit) and every other case NOT_SUPPORTED
with a reason that says why: no FAIL blamed on a limit.
"""

from __future__ import annotations

import os

import pytest

from attention_conformance import cli
from attention_conformance.adapters import declared
from attention_conformance.adapters.registry import load
from attention_conformance.cases import catalog
from attention_conformance.running.engine import Runner

pytest.importorskip("torch")

from attention_conformance.adapters.sdpa_probes import candidate_shapes  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = ("tile_edges", "causal_alignment", "head_dims", "dtype", "gqa", "scale", "backward", "mask_bias",
            "window", "decoding")
CASES = [c for c in catalog.cases("ci") if c.family in FAMILIES]



def _native_causal(c) -> bool:
    """The SDPA signature says this case with is_causal=True and no attn_mask (top-left, or Lq == Lk)."""
    plain = c.mask is None and c.bias is None and c.window is None and not c.varlen
    return c.causal and plain and (c.alignment == "top_left" or c.Lq == c.Lk)


LIMITS = {
    "causal_only": (_native_causal, "causal attention only", "causal='only'"),
    "head_dims_64_128": (lambda c: c.d in (64, 128) and c.dv in (64, 128), "only 64 and 128 are compiled",
                         "head dim"),
    "fp16_only": (lambda c: c.dtype == "float16", "expected float16 inputs", "dtype"),
}


@pytest.fixture(scope="module")
def verdicts():
    import sys

    sys.path.insert(0, HERE)
    try:
        specs = ["claims_toys:unlimited"] + [f"claims_toys:{n}{s}" for n in LIMITS for s in ("", "_declared")]
        loaded = [load(s, "cpu") for s in specs]
        for la in loaded:
            assert la.available, (la.spec, la.reason)
        runner = Runner(loaded, "cpu", determinism="none")
        results = runner.run(CASES)
        runner.close()
    finally:
        sys.path.remove(HERE)
    return {(r.spec, r.case_id): r for r in results}


@pytest.mark.parametrize("name", list(LIMITS))
@pytest.mark.parametrize("suffix", ["_declared", ""])
def test_limited_function_runs_its_cases_and_declines_the_rest(verdicts, name, suffix):
    limit, raised, declared_word = LIMITS[name]
    spec = f"claims_toys:{name}{suffix}"
    ran = declined = 0
    for case in CASES:
        twin = verdicts[("claims_toys:unlimited", case.id)]
        r = verdicts[(spec, case.id)]
        if twin.outcome == "NOT_SUPPORTED":
            assert r.outcome == "NOT_SUPPORTED", (case.id, r.outcome, r.message)
        elif limit(case):
            assert r.outcome == twin.outcome, (case.id, r.outcome, r.message)
            ran += 1
        else:
            assert r.outcome == "NOT_SUPPORTED", (case.id, r.outcome, r.message[:300])
            assert r.message, case.id
            # declared: the reason names the declaration; probed: it quotes the function's own exception
            assert (declared_word in r.message) if suffix else (raised in r.message), (case.id, r.message)
            declined += 1
    assert ran >= 5 and declined >= 5, (ran, declined)


def test_probes_stay_inside_the_declaration():
    shapes = candidate_shapes(declared.Claims.make(causal="only", head_dims=(96,), seqlen_multiple=64))
    assert shapes and all(s.causal and s.d == 96 and s.Lq % 64 == 0 for s in shapes), shapes
    default = candidate_shapes(None)
    assert {(s.d, s.causal) for s in default} >= {(64, False), (64, True), (128, False), (128, True)}


def test_unavailable_reason_lists_every_probe_exception():
    import sys

    sys.path.insert(0, HERE)
    try:
        la = load("claims_toys:causal_only_declared", "cpu")
        assert la.available, la.reason
        from attention_conformance.adapters.third_party import wrap_sdpa_function

        def never(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            raise RuntimeError(f"no kernel for {tuple(q.shape)} causal={is_causal}")

        reason = wrap_sdpa_function(never, "never").unavailable_reason("cpu")
    finally:
        sys.path.remove(HERE)
    assert reason is not None
    for shape in candidate_shapes(None):
        assert shape.describe() in reason, (shape, reason)
    assert "no kernel for (1, 2, 128, 128) causal=True" in reason, reason


@pytest.mark.parametrize("spec,needle", [
    ("dtypes=int8", "dtypes"), ("causal=sometimes", "causal"), ("frobs=1", "unknown key"),
    ("head_dims", "not key=value"),
])
def test_bad_claims_spec_is_a_usage_error(tmp_path, capsys, spec, needle):
    code = cli.main(["run", "--impl", "attention_conformance.examples.good_sdpa:attention", "--claims", spec, "-k",
                     "tile_edges-b1h2x2-q64k64", "--report-dir", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err


def test_cli_claims_declare_for_a_function_one_cannot_edit(tmp_path, monkeypatch):
    import json

    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    code = cli.main(["run", "--impl", "claims_toys:head_dims_64_128", "--claims", "head_dims=64,128", "-k",
                     "head_dims", "--report-dir", str(tmp_path), "--quiet", "--determinism", "none"])
    rep = json.loads((tmp_path / "report.json").read_text())
    by = {r["case_id"]: r for r in rep["results"]}
    assert code == 0, [(r["case_id"], r["outcome"], r["message"][:200]) for r in rep["results"]]
    for case in catalog.select(catalog.cases("ci"), "head_dims"):
        r = by[case.id]
        if case.d in (64, 128) and case.dv in (64, 128):
            assert r["outcome"] == "PASS", (case.id, r["message"])
        else:
            assert r["outcome"] == "NOT_SUPPORTED" and "head dim" in r["message"], (case.id, r["message"])
    assert os.environ.get(declared.CLAIMS_ENV) is None, "--claims must not leak out of the run"


def test_cli_claims_reach_worker_processes(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(HERE)
    code = cli.main(["run", "--impl", "claims_toys:fp16_only", "--claims", "claims_toys:fp16_only=dtypes=float16",
                     "-k", "dtype-", "--workers", "2", "--report-dir", str(tmp_path), "--quiet",
                     "--determinism", "none"])
    rep = json.loads((tmp_path / "report.json").read_text())
    assert code == 0, [(r["case_id"], r["outcome"], r["message"][:200]) for r in rep["results"]]
    declined = [r for r in rep["results"] if r["outcome"] == "NOT_SUPPORTED"]
    assert declined and all("declared dtypes ['float16']" in r["message"] for r in declined), declined[:1]
    assert any(r["outcome"] == "PASS" for r in rep["results"])
