"""``run --shard K/N`` and ``merge`` (conformance/running/shard.py, conformance/reporting/merge.py): a deterministic
cost-balanced split, an exact join."""

from __future__ import annotations

import json

import pytest

from attention_conformance import cli
from attention_conformance.cases import catalog
from attention_conformance.running import shard

ADAPTERS = ["torch-sdpa-math", "torch-sdpa-flash", "reference-fa2",
            "attention_conformance.examples.broken_sdpa:attention"]
SUBSET = "tile_edges or causal_alignment or scale-b1h2x2-q45k45"  # incl. the shipped expectations' KNOWN


def _run(tmp_path, name: str, *extra: str) -> tuple[int, dict]:
    out = tmp_path / name
    code = cli.main(["run", "--impl", *ADAPTERS, "-k", SUBSET, "--report-dir", str(out), "--quiet",
                     "--determinism", "none", *extra])
    return code, json.loads((out / "report.json").read_text())


def _outcomes(rep: dict) -> list[tuple[str, str, str]]:
    return [(r["case_id"], r["adapter"], r["outcome"]) for r in rep["results"]]


def test_plan_is_a_deterministic_balanced_partition():
    cases = catalog.cases("ci")
    costs = [catalog.estimated_cost(c) for c in cases]
    for n in (1, 2, 3, 7):
        bins = shard.plan(cases, n)
        assert bins == shard.plan(list(cases), n), "the split must not depend on anything but the selection"
        assert sorted(i for b in bins for i in b) == list(range(len(cases)))
        assert all(b == sorted(b) for b in bins), "each shard keeps catalog order"
        loads = [sum(costs[i] for i in b) for b in bins]
        # greedy LPT: no bin exceeds the mean by more than one case
        assert max(loads) <= sum(costs) / n + max(costs), (n, loads)
    two = [sum(costs[i] for i in b) for b in shard.plan(cases, 2)]
    assert max(two) / min(two) < 1.05, two


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1/0", "2", "a/b", "1/2/3"])
def test_bad_shard_spec_is_a_usage_error(spec, tmp_path, capsys):
    with pytest.raises(shard.ShardError, match="K/N"):
        shard.parse_spec(spec)
    assert cli.main(["run", "--impl", "reference-fa2", "-k", SUBSET, "--shard", spec,
                     "--report-dir", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--shard" in err[0], err


def test_two_and_three_shards_merged_equal_one_run(tmp_path):
    pytest.importorskip("torch")
    code, one = _run(tmp_path, "one")
    assert code == 1 and {o for _, _, o in _outcomes(one)} >= {"PASS", "FAIL", "KNOWN"}, "the subset holds all three"
    for n in (2, 3):
        paths = []
        for k in range(1, n + 1):
            _, part = _run(tmp_path, f"s{k}of{n}", "--shard", f"{k}/{n}")
            assert part["shard"]["index"] == k and part["summary"]["cases"] < one["summary"]["cases"]
            paths.append(str(tmp_path / f"s{k}of{n}" / "report.json"))
        merged_dir = tmp_path / f"merged{n}"
        assert cli.main(["merge", *paths[::-1], "--report-dir", str(merged_dir)]) == code
        merged = json.loads((merged_dir / "report.json").read_text())
        assert _outcomes(merged) == _outcomes(one), f"{n} shards merged differ from one run"
        assert merged["summary"]["by_outcome"] == one["summary"]["by_outcome"]
        assert merged["summary"]["by_adapter"] == one["summary"]["by_adapter"]
        assert "--shard" not in merged["command"] and len(merged["merged_from"]) == n
        for key in ("known", "unexpected_pass", "used", "unused"):
            assert merged["expectations"][key] == one["expectations"][key], key
        assert (merged_dir / "report.md").exists() and (merged_dir / "report.html").exists()


def test_merge_refuses_reports_that_are_not_the_shards_of_one_run(tmp_path, capsys):
    pytest.importorskip("torch")
    p = {}
    for name, args in (("a", ["--shard", "1/2"]), ("b", ["--shard", "2/2"]), ("c", ["--shard", "1/3"]),
                       ("whole", [])):
        cli.main(["run", "--impl", "reference-fa2", "-k", "tile_edges-b1h2x2-q1", "--report-dir",
                  str(tmp_path / name), "--quiet"] + args)
        p[name] = str(tmp_path / name / "report.json")
    capsys.readouterr()
    for paths, expect in (([p["a"]], "missing"), ([p["a"], p["a"], p["b"]], "both shard 1/2"),
                          ([p["a"], p["c"]], "another split"), ([p["a"], p["whole"]], "mix shards"),
                          ([str(tmp_path / "nope.json")], "cannot read")):
        assert cli.main(["merge", *paths, "--report-dir", str(tmp_path / "m")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expect in err[0], (expect, err)


def test_a_shard_with_no_case_still_merges(tmp_path):
    pytest.importorskip("torch")
    sel = ["run", "--impl", "reference-fa2", "-k", "tile_edges-b1h2x2-q1k1-", "--quiet"]
    assert len(catalog.select(catalog.cases("ci"), "tile_edges-b1h2x2-q1k1-")) == 2
    for k in (1, 2, 3):
        assert cli.main(sel + ["--shard", f"{k}/3", "--report-dir", str(tmp_path / str(k))]) == 0
    sizes = [json.loads((tmp_path / str(k) / "report.json").read_text())["summary"]["cases"] for k in (1, 2, 3)]
    assert sorted(sizes) == [0, 1, 1], sizes
    assert cli.main(["merge", *(str(tmp_path / str(k) / "report.json") for k in (1, 2, 3)),
                     "--report-dir", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "report.json").read_text())
    assert merged["summary"]["cases"] == 2 and merged["summary"]["by_outcome"]["PASS"] == 2
