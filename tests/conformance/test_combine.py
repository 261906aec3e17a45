"""``merge`` of runs over other adapters (conformance/reporting/merge.py) and ``merge --reexpect``.

A device report is assembled from several runs (the torch backends in one, a vendor library installed in another,
a re-run of some cases after a fix): joined, it must say what one run with every adapter would have said, a later
result must replace an earlier one for the same (case, adapter), and expectations written after a run must be
applicable to it without running it again.
"""

from __future__ import annotations

import json

import pytest

from attention_conformance import cli

SUBSET = "tile_edges or scale-b1h2x2-q45k45"  # incl. the shipped expectations' KNOWN (torch CPU flash, scale <= 0)
A = ["torch-sdpa-flash", "reference-fa2"]
B = ["attention_conformance.examples.broken_sdpa:attention"]


def _run(tmp_path, name: str, impls: list[str], *extra: str) -> tuple[int, dict, str]:
    out = tmp_path / name
    code = cli.main(["run", "--impl", *impls, "-k", SUBSET, "--report-dir", str(out), "--quiet", "--profile", "ci",
                     "--determinism", "none", *extra])
    return code, json.loads((out / "report.json").read_text()), str(out / "report.json")


def _outcomes(rep: dict) -> list[tuple[str, str, str]]:
    return sorted((r["case_id"], r["spec"], r["outcome"]) for r in rep["results"])


def _merge(tmp_path, name: str, *args: str) -> tuple[int, dict]:
    out = tmp_path / name
    code = cli.main(["merge", *args, "--report-dir", str(out)])
    return code, json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("combine")
    one = _run(tmp, "one", A + B)
    a = _run(tmp, "a", A)
    b = _run(tmp, "b", B)
    return tmp, one, a, b


def test_runs_over_other_adapters_join_into_what_one_run_says(runs):
    tmp, (code1, one, _), (_, _, pa), (_, _, pb) = runs
    code, merged = _merge(tmp, "ab", pa, pb)
    assert _outcomes(merged) == _outcomes(one)
    assert code == code1 == 1  # the broken function fails
    assert merged["summary"]["by_outcome"] == one["summary"]["by_outcome"]
    assert [a["spec"] for a in merged["adapters"]] == [a["spec"] for a in one["adapters"]]
    assert not merged["partial"], merged.get("missing_results")
    assert [m["replaced"] for m in merged["merged_from"]] == [0, 0]
    # catalog order, as a run writes it
    assert [r["case_id"] for r in merged["results"]][::3] == [r["case_id"] for r in one["results"]][::3]


def test_a_later_report_replaces_earlier_results_and_a_missing_adapter_case_is_partial(runs, tmp_path):
    tmp, _, (_, a, pa), (_, _, pb) = runs
    code, rerun, prerun = _run(tmp_path, "rerun", ["reference-fa2"], "-k", "tile_edges-b1h2x2-q1k129")
    rerun_ids = {r["case_id"] for r in rerun["results"]}
    _, merged = _merge(tmp_path, "abr", pa, pb, prerun)
    assert merged["merged_from"][2]["replaced"] == len(rerun_ids) > 0
    by_key = {(r["case_id"], r["spec"]): r for r in merged["results"]}
    for r in rerun["results"]:
        assert by_key[(r["case_id"], r["spec"])]["seconds"] == r["seconds"]
    _, only_rerun = _merge(tmp_path, "r_plus_b", prerun, pb)
    assert only_rerun["partial"] and only_rerun["missing_results"]["reference-fa2"] > 0
    # the report says which adapter lacks how many results, not that a run stopped
    from attention_conformance.reporting.digest import partial_text

    why = partial_text(only_rerun)
    assert f"reference-fa2 {only_rerun['missing_results']['reference-fa2']}" in why and "lack results" in why
    assert "lack results" in (tmp_path / "r_plus_b" / "report.md").read_text()


def test_reexpect_applies_an_expectations_file_written_after_the_run(runs, tmp_path):
    tmp, _, _, (_, b, pb) = runs
    failing = sorted({r["case_id"] for r in b["results"] if r["outcome"] == "FAIL"})
    assert failing, "the broken example must fail some case of the subset"
    exp = tmp_path / "later.toml"
    exp.write_text(f'schema = 1\n[[expectation]]\nid = "broken-later"\nadapters = ["*broken_sdpa*"]\n'
                   f'cases = "{failing[0].rsplit("-", 1)[0]}"\noutcome = "FAIL"\nreason = "written after the run"\n')
    _, plain = _merge(tmp_path, "plain", pb)
    _, again = _merge(tmp_path, "again", pb, "--reexpect", "--expect", str(exp))
    known = [r for r in again["results"] if r["outcome"] == "KNOWN"]
    assert {r["case_id"] for r in known} == {failing[0]}
    assert known[0]["expectation"]["raw_outcome"] == "FAIL"
    assert again["summary"]["by_outcome"]["FAIL"] == plain["summary"]["by_outcome"]["FAIL"] - 1
    # applying again is idempotent: the earlier expectation is undone before the entries are applied
    _, twice = _merge(tmp_path, "twice", str(tmp_path / "again" / "report.json"), "--reexpect", "--expect", str(exp))
    assert _outcomes(twice) == _outcomes(again)
    assert all(not r["message"].startswith("KNOWN (broken-later") or r["message"].count("KNOWN (broken-later") == 1
               for r in twice["results"])


def test_merge_usage_errors(runs, tmp_path, capsys):
    _, _, (_, _, pa), _ = runs
    assert cli.main(["merge", pa, "--expect", "x.toml", "--report-dir", str(tmp_path / "x")]) == 2
    assert "--expect needs --reexpect" in capsys.readouterr().err


def test_a_note_is_shown_at_the_top_of_the_joined_report(runs, tmp_path):
    _, _, (_, _, pa), (_, _, pb) = runs
    note = "the FAILs of case X were caused by the harness and are fixed in commit Y"
    _, merged = _merge(tmp_path, "noted", pa, pb, "--note", note)
    assert merged["notes"] == [note]
    assert f"**Note**: {note}" in (tmp_path / "noted" / "report.md").read_text()
    assert note in (tmp_path / "noted" / "report.html").read_text()


def test_a_joined_report_gives_each_runs_wall_time_and_workers(runs):
    """The header of a joined report says how each run was made (`digest.run_line`), not one wall time summed over
    runs and "workers 1"; a single run's header is unchanged."""
    tmp, (_, one, _), (_, _, pa), (_, _, pb) = runs
    _, merged = _merge(tmp, "walls", pa, pb)
    assert [m["workers"] for m in merged["merged_from"]] == [1, 1]
    md = (tmp / "walls" / "report.md").read_text()
    walls = ", ".join(f"{m['wall_seconds']:.0f}" for m in merged["merged_from"])
    assert f"joined from 2 runs (wall times {walls} s; workers 1, 1)" in md
    assert "joined from" not in (tmp / "one" / "report.md").read_text()
    assert f"wall time {one['wall_seconds']:.1f} s" in (tmp / "one" / "report.md").read_text()


def test_a_later_run_without_a_library_keeps_the_earlier_runs_results_of_it(runs, tmp_path):
    """A device report joins a full session (vendor libraries installed) with a later run on a machine that lacks
    one: that adapter's "adapter unavailable" NOT_SUPPORTED results and its version ("not installed") must not
    replace what the run that had the library said, or the expectations keyed on its version stop applying."""
    tmp, _, (_, a, pa), _ = runs
    later = json.loads(json.dumps(a))
    for ad in later["adapters"]:
        if ad["spec"] == "reference-fa2":
            ad.update(available=False, version="not installed", reason="not importable here")
    for r in later["results"]:
        r["seconds"] = -1.0
        if r["spec"] == "reference-fa2":
            r.update(outcome="NOT_SUPPORTED", message="adapter unavailable: not importable here")
    p = tmp_path / "later.json"
    p.write_text(json.dumps(later))
    _, merged = _merge(tmp_path, "kept", pa, str(p))
    assert _outcomes(merged) == _outcomes(a)
    spec = {r["spec"]: r["seconds"] for r in merged["results"]}
    assert spec["torch-sdpa-flash"] == -1.0 and spec["reference-fa2"] >= 0  # the loaded adapter's results replaced
    assert {ad["spec"]: ad["available"] for ad in merged["adapters"]}["reference-fa2"] is True
    assert merged["merged_from"][1]["kept_from_earlier"] == ["reference-fa2"]
    # alone, or first, the run without the library says what it says
    _, alone = _merge(tmp_path, "alone", str(p), pa)
    assert _outcomes(alone) == _outcomes(a) and alone["merged_from"][1]["kept_from_earlier"] == []


def test_a_joined_report_joined_again_lists_each_of_its_runs(runs, tmp_path):
    """Joining onto the current device report (itself a join of a session's runs) keeps each run's command, wall
    time and workers in ``merged_from``, not one entry for the joined file with workers None."""
    tmp, _, (_, _, pa), (_, _, pb) = runs
    _, ab = _merge(tmp_path, "ab", pa, pb)
    _, again = _merge(tmp_path, "ab_a", str(tmp_path / "ab" / "report.json"), pa)
    assert [m["workers"] for m in again["merged_from"]] == [1, 1, 1]
    assert [m["command"] for m in again["merged_from"][:2]] == [m["command"] for m in ab["merged_from"]]
    assert again["merged_from"][2]["replaced"] == len([r for r in ab["results"] if r["spec"] in A])
    assert _outcomes(again) == _outcomes(ab)
