"""Expectations (conformance/verdict/expectations.py): the file format, version ranges, KNOWN / UNEXPECTED_PASS."""

from __future__ import annotations

import textwrap

import pytest

from attention_conformance.adapters import BUILTIN
from attention_conformance.adapters.registry import entry_point_names
from attention_conformance.cases import catalog
from attention_conformance.running.engine import CaseResult
from attention_conformance.verdict import expectations as ex

SCALE = next(c for c in catalog.cases("ci") if c.family == "scale" and c.causal and c.scale == 0.0)
OTHER = next(c for c in catalog.cases("ci") if c.family == "tile_edges")
CPU = ex.RunContext("cpu", (), {"torch-sdpa-flash": "torch 2.13.0+cpu"})


def _file(tmp_path, body: str, name: str = "user.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def _result(case, outcome: str, message: str = "", adapter: str = "torch-sdpa-flash") -> CaseResult:
    return CaseResult(case.id, adapter, adapter, outcome, case.family, [], message=message)


ENTRY = """
    schema = 1
    [[expectation]]
    id = "flash-scale"
    adapters = ["torch-sdpa-flash"]
    versions = ">=2.13,<2.14"
    devices = ["cpu"]
    where = { family = "scale", causal = true, scale = { max = 0.0 } }
    symptom = "non-finite"
    reason = "NaN with causal and scale <= 0"
    link = "https://example.org/issue/1"
"""


def test_shipped_file_loads_and_names_only_builtin_adapters():
    entries = ex.load_files([])
    assert entries, "the shipped expectations file is empty"
    for e in entries:
        assert e.reason and e.source == "expectations.toml"
        for a in e.adapters:  # a built-in, or one of its entry points (NAME@ENTRY)
            name, _, entry = a.partition("@")
            assert name in BUILTIN and (not entry or a in entry_point_names(name)), a
        assert e.versions, f"{e.id}: an upstream finding is pinned to the versions it was measured on"
    assert ex.load_files([], default=False) == []


@pytest.mark.parametrize("version,spec,ok", [
    ("torch 2.13.0+cpu", "==2.13.*", True), ("torch 2.13.0+cpu", "==2.12.*", False),
    ("2.13.1", ">=2.13,<2.14", True), ("2.14.0", ">=2.13,<2.14", False), ("4.0.0b36", "<4.0.1", True),
    ("4.0.0b36", "<4.0.0", False),  # PEP 440: "<V" holds no pre-release of V itself
    ("2.11.0+cu130", "==2.11.*", True), ("flash-attn-4 4.0.0b36", "==4.0.0b36", True),
    ("4.0.0b36", ">=4.0.0b30", True), ("4.0.0", ">4.0.0b36", True), ("2.6.3", "!=2.6.3", False),
    ("unknown", ">=1", False), ("anything", None, True), ("2.13", "~=2.12", True), ("2.13", "==2.13.*", True),
    # post-releases are read whole (FlashInfer 0.7.2.post1 once met no "==0.7.2.post1" entry: read as 0.7.2)
    ("0.7.2.post1", "==0.7.2.post1", True), ("0.7.2", "==0.7.2.post1", False), ("0.7.2.post1", "==0.7.2.*", True),
    ("1.2.3.dev4", "==1.2.3.dev4", True),
])
def test_version_ranges(version, spec, ok):
    assert ex.version_in(version, spec) is ok


@pytest.mark.parametrize("body,needle", [
    ('[[expectation]]\nadapters = ["x"]\n', "'reason' is required"),
    ('[[expectation]]\nreason = "r"\n', "'adapters' is required"),
    ('[[expectation]]\nadapters = ["x"]\nreason = "r"\nbogus = 1\n', "unknown key(s) ['bogus']"),
    ('[[expectation]]\nadapters = ["x"]\nreason = "r"\noutcome = "PASS"\n', "expected one of"),
    ('[[expectation]]\nadapters = ["x"]\nreason = "r"\nversions = "about 2"\n', "version clause"),
    ('[[expectation]]\nadapters = ["x"]\nreason = "r"\nversions = ">=2, about"\n', "version clause"),
    ('[[expectation]]\nadapters = ["x"]\nreason = "r"\nwhere = {colour = 1}\n', "unknown Case field"),
    ('[[expectation]]\nadapters = ["x"]\nreason = "r"\ndevices = ["tpu"]\n', "devices"),
    ('[[expectation]]\nid = "a"\nadapters = ["x"]\nreason = "r"\n[[expectation]]\nid = "a"\nadapters = ["y"]\n'
     'reason = "r"\n', "two expectations have id 'a'"),
    ("schema = 2\n", "schema 2"),
    ("[[expectation]\n", "not valid TOML"),
])
def test_malformed_files_are_errors_naming_the_file(tmp_path, body, needle):
    p = _file(tmp_path, body)
    with pytest.raises(ex.ExpectationError) as err:
        ex.load(p)
    assert needle in str(err.value) and str(p) in str(err.value), str(err.value)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(ex.ExpectationError, match="cannot read expectations file"):
        ex.load(tmp_path / "nope.toml")


def test_matched_failure_is_known_and_a_pass_is_unexpected(tmp_path):
    entries = ex.load(_file(tmp_path, ENTRY))
    v = ex.decide(entries, SCALE, "torch-sdpa-flash", "torch-sdpa-flash", "FAIL", "out: 10 non-finite value(s)", [],
                  CPU)
    assert v.outcome == ex.KNOWN and "NaN with causal" in v.note and "https://example.org/issue/1" in v.note
    v = ex.decide(entries, SCALE, "torch-sdpa-flash", "torch-sdpa-flash", "PASS", "", [], CPU)
    assert v.outcome == ex.UNEXPECTED_PASS and "flash-scale" in v.note
    # another failure than the expected one stays what it is, with a note
    v = ex.decide(entries, SCALE, "torch-sdpa-flash", "torch-sdpa-flash", "FAIL", "lse: error 3 > tolerance", [],
                  CPU)
    assert v.outcome == "FAIL" and "another failure" in v.note
    v = ex.decide(entries, SCALE, "torch-sdpa-flash", "torch-sdpa-flash", "CRASH", "CRASH: died", [], CPU)
    assert v.outcome == "CRASH"
    assert ex.decide(entries, SCALE, "torch-sdpa-flash", "torch-sdpa-flash", "NOT_SUPPORTED", "no", [],
                     CPU).outcome == "NOT_SUPPORTED"


def test_an_expected_finding_stays_a_finding_and_its_absence_is_unexpected(tmp_path):
    entries = ex.load(_file(tmp_path, """
        [[expectation]]
        id = "masked"
        adapters = ["torch-sdpa-flash"]
        outcome = ["FINDING", "FAIL"]
        finding = "masked_nan"
        reason = "0 x NaN"
    """))
    args = (SCALE, "torch-sdpa-flash", "torch-sdpa-flash")
    v = ex.decide(entries, *args, "FINDING", "masked_nan:out", ["masked_nan:out"], CPU)
    assert v.outcome == "FINDING" and v.expectation is not None and "0 x NaN" in v.note
    strict = "out: NaN ...; NaN from masked-out positions of a dense mask (masked_nan) is a FAIL under --strict"
    assert ex.decide(entries, *args, "FAIL", strict, [], CPU).outcome == ex.KNOWN
    assert ex.decide(entries, *args, "FAIL", "out: error 3 > tolerance", [], CPU).outcome == "FAIL"
    assert ex.decide(entries, *args, "PASS", "", [], CPU).outcome == ex.UNEXPECTED_PASS
    only_fail = ex.load(_file(tmp_path, ENTRY, "fail.toml"))
    assert ex.decide(only_fail, *args, "FINDING", "masked_nan:out", ["masked_nan:out"], CPU).outcome == \
        ex.UNEXPECTED_PASS, "a FINDING where an entry expects FAIL: the entry is stale"


@pytest.mark.parametrize("case,adapter,ctx", [
    (OTHER, "torch-sdpa-flash", CPU),  # another case
    (SCALE, "torch-sdpa-math", ex.RunContext("cpu", (), {"torch-sdpa-math": "torch 2.13.0"})),  # another adapter
    (SCALE, "torch-sdpa-flash", ex.RunContext("cuda", ("NVIDIA H200",), {"torch-sdpa-flash": "torch 2.13.0"})),
    (SCALE, "torch-sdpa-flash", ex.RunContext("cpu", (), {"torch-sdpa-flash": "torch 2.14.0"})),  # newer torch
])
def test_out_of_scope_results_are_untouched(tmp_path, case, adapter, ctx):
    entries = ex.load(_file(tmp_path, ENTRY))
    for outcome in ("FAIL", "PASS"):
        v = ex.decide(entries, case, adapter, adapter, outcome, "out: 1 non-finite value(s)", [], ctx)
        assert v.outcome == outcome and v.expectation is None


def test_selectors_gpu_and_case_expression(tmp_path):
    entries = ex.load(_file(tmp_path, """
        [[expectation]]
        id = "h200-only"
        adapters = ["torch-sdpa-*"]
        gpu = "H200"
        cases = "scale and causal"
        reason = "r"
    """))
    h200 = ex.RunContext("cuda", ("NVIDIA H200",), {})
    a100 = ex.RunContext("cuda", ("NVIDIA A100-SXM4-80GB",), {})
    assert ex.decide(entries, SCALE, "torch-sdpa-cudnn", "torch-sdpa-cudnn", "FAIL", "x", [], h200).outcome == "KNOWN"
    assert ex.decide(entries, SCALE, "torch-sdpa-cudnn", "torch-sdpa-cudnn", "FAIL", "x", [], a100).outcome == "FAIL"
    assert ex.decide(entries, OTHER, "torch-sdpa-cudnn", "torch-sdpa-cudnn", "FAIL", "x", [], h200).outcome == "FAIL"


def test_an_entry_names_several_gpus(tmp_path):
    """A defect of one architecture's code path, seen on each of its cards (sm90: an H100 and an H200)."""
    entries = ex.load(_file(tmp_path, """
        [[expectation]]
        id = "hopper"
        adapters = ["torch-sdpa-*"]
        gpu = ["H100", "H200"]
        reason = "r"
    """))
    assert entries[0].gpu == ("H100", "H200")
    cards = (("NVIDIA H100 80GB HBM3", "KNOWN"), ("NVIDIA H200", "KNOWN"), ("NVIDIA A100-SXM4-80GB", "FAIL"))
    for name, outcome in cards:
        ctx = ex.RunContext("cuda", (name,), {})
        got = ex.decide(entries, SCALE, "torch-sdpa-cudnn", "torch-sdpa-cudnn", "FAIL", "x", [], ctx).outcome
        assert got == outcome, name
    with pytest.raises(ex.ExpectationError, match="gpu: expected a non-empty string or list of strings"):
        ex.load(_file(tmp_path, """
            [[expectation]]
            id = "bad"
            adapters = ["x"]
            gpu = []
            reason = "r"
        """))


def test_apply_counts_and_reports_unused_entries(tmp_path):
    entries = ex.load(_file(tmp_path, ENTRY + """
    [[expectation]]
    id = "never-matches"
    adapters = ["torch-sdpa-flash"]
    where = { family = "scale", Lq = 99999 }
    reason = "stale"

    [[expectation]]
    id = "other-adapter"
    adapters = ["torch-sdpa-cudnn"]
    reason = "not run here: not reported as unused"

    [[expectation]]
    id = "property-families"
    adapters = ["torch-sdpa-flash"]
    where = { family = ["pinned", "hyp-fwd"] }
    reason = "the property suite's draws: no case of those families ran here, so not reported as unused"
    """))
    raw = [_result(SCALE, "FAIL", "out: 3 non-finite value(s) where the oracle is finite"), _result(OTHER, "PASS")]
    out, summary = ex.apply(entries, [(SCALE, raw[0]), (OTHER, raw[1])], CPU)
    assert [r.outcome for r in out] == ["KNOWN", "PASS"] and raw[0].outcome == "FAIL", "apply must not mutate"
    assert out[0].expectation["raw_outcome"] == "FAIL" and out[0].expectation["link"] == "https://example.org/issue/1"
    assert summary["known"] == 1 and summary["unexpected_pass"] == 0
    assert summary["unused"] == [f"never-matches ({tmp_path / 'user.toml'})"], summary



def test_where_matches_a_derived_quantity(tmp_path):
    """``where`` may name what a Case derives (dv_ratio = dv / d): flash-attn-4's sm90 crash at dv > 2 d is one
    region, not a list of drawn head dims."""
    entries = ex.load(_file(tmp_path, """
    [[expectation]]
    id = "wide-dv"
    adapters = ["torch-sdpa-flash"]
    where = { dv_ratio = { min = 2.01 } }
    symptom = "illegal memory access"
    reason = "r"
    """))
    wide, at_two = OTHER.replace(d=32, dv=80), OTHER.replace(d=32, dv=64)
    assert wide.dv_ratio == 2.5 and at_two.dv_ratio == 2.0
    crash = "CUDA error: an illegal memory access was encountered"
    out, _ = ex.apply(entries, [(wide, _result(wide, "FAIL", crash)), (at_two, _result(at_two, "PASS"))], CPU)
    assert [r.outcome for r in out] == ["KNOWN", "PASS"]


# -- through the command line ----------------------------------------------------------------------
SCALE_CASES = "scale-b1h2x2-q45k45"


def _run(tmp_path, name, *args):
    import json

    from attention_conformance import cli

    out = tmp_path / name
    code = cli.main(["run", "--report-dir", str(out), "--quiet", "--determinism", "none", *args])
    rep = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return code, rep, out


def test_cli_known_failure_passes_the_run_and_is_shown_with_its_reason(tmp_path, capsys):
    pytest.importorskip("torch")
    code, rep, out = _run(tmp_path, "default", "--impl", "torch-sdpa-flash", "-k", SCALE_CASES)
    known = [r for r in rep["results"] if r["outcome"] == "KNOWN"]
    assert code == 0 and known, [(r["case_id"], r["outcome"]) for r in rep["results"]]
    assert all(r["expectation"]["raw_outcome"] == "FAIL" and r["expectation"]["id"] ==
               "torch-cpu-flash-causal-nonpositive-scale" for r in known)
    assert rep["summary"]["by_outcome"]["KNOWN"] == len(known) and rep["expectations"]["known"] == len(known)
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (md, html):
        assert "torch-cpu-flash-causal-nonpositive-scale" in text and "native causal path" in text
    raw_code, raw, _ = _run(tmp_path, "raw", "--impl", "torch-sdpa-flash", "-k", SCALE_CASES, "--no-expect")
    assert raw_code == 1 and "KNOWN" not in {r["outcome"] for r in raw["results"]}
    assert sorted(r["case_id"] for r in raw["results"] if r["outcome"] == "FAIL") == sorted(r["case_id"]
                                                                                             for r in known)


def test_cli_user_file_and_unexpected_pass(tmp_path, capsys):
    pytest.importorskip("torch")
    broken = "attention_conformance.examples.broken_sdpa:attention"
    user = _file(tmp_path, f"""
        [[expectation]]
        id = "broken-tail-tile"
        adapters = ["{broken}"]
        cases = "tile_edges"
        symptom = "tolerance"
        reason = "drops the last key tile when Lk % 64 == 1"
        link = "https://example.org/broken/1"

        [[expectation]]
        id = "stale"
        adapters = ["reference-fa2"]
        cases = "tile_edges-b1h2x2-q64k64"
        reason = "claims a failure that does not happen"

        [[expectation]]
        id = "unused"
        adapters = ["reference-fa2"]
        cases = "no-such-case"
        reason = "matches nothing"

        [[expectation]]
        id = "drawn"
        adapters = ["reference-fa2"]
        where = {{ family = "hyp-edge" }}
        reason = "a property family: this run of the catalog has none of its cases, so it is not unused here"
    """)
    sel = "tile_edges and q1k129 or tile_edges-b1h2x2-q64k64"
    code, rep, out = _run(tmp_path, "user", "--impl", broken, "reference-fa2", "-k", sel, "--expect", str(user))
    outcomes = {(r["adapter"], r["case_id"]): r["outcome"] for r in rep["results"]}
    assert code == 1, outcomes
    assert {o for (a, _), o in outcomes.items() if a == broken} >= {"KNOWN"}
    assert {o for (a, _), o in outcomes.items() if a == "reference-fa2" and "q64k64" in _} == {"UNEXPECTED_PASS"}
    assert any("stale" in r["message"] and "remove or narrow" in r["message"] for r in rep["results"]
               if r["outcome"] == "UNEXPECTED_PASS")
    err = capsys.readouterr().err
    assert "expectation unused" in err and "matched no result" in err, err
    assert rep["expectations"]["unused"] == [f"unused ({user})"]


@pytest.mark.parametrize("args,needle", [
    (["--expect", "/no/such/file.toml"], "cannot read expectations file"),
    (["--expect", "x.toml", "--no-expect"], "exclude each other"),
])
def test_cli_expectation_usage_errors(tmp_path, capsys, args, needle):
    code, _, _ = _run(tmp_path, "err", "--impl", "reference-fa2", "-k", "tile_edges-b1h2x2-q64k64", *args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err
