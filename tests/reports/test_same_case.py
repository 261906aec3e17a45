"""What the other adapters got on a failing case (reporting/digest.py `others_line`), and the cases every adapter that
ran them failed (`failed_by_all`: the harness is the first suspect there), in report.md and report.html."""

from __future__ import annotations

from attention_conformance.reporting.digest import by_case, failed_by_all, others_line


def _r(case: str, adapter: str, outcome: str) -> dict:
    return {"case_id": case, "adapter": adapter, "outcome": outcome}


RESULTS = [
    _r("c1", "a", "FAIL"), _r("c1", "b", "PASS"), _r("c1", "c", "PASS"), _r("c1", "d", "NOT_SUPPORTED"),
    _r("c2", "a", "FAIL"), _r("c2", "b", "FAIL"), _r("c2", "c", "CRASH"), _r("c2", "d", "NOT_SUPPORTED"),
    _r("c3", "a", "FAIL"), _r("c3", "b", "FAIL"),  # two adapters are too few to blame the harness
]


def test_others_line_groups_the_other_adapters_by_outcome():
    cases = by_case(RESULTS)
    assert others_line(RESULTS[0], cases) == "the same case: PASS on b, c"
    assert others_line(RESULTS[4], cases) == "the same case: FAIL on b; CRASH on c"
    assert others_line(_r("c9", "a", "FAIL"), cases) is None


def test_cases_every_adapter_failed():
    assert failed_by_all(RESULTS) == [("c2", ["a", "b", "c"])]
    assert failed_by_all(RESULTS, minimum=2) == [("c2", ["a", "b", "c"]), ("c3", ["a", "b"])]


def test_the_reports_carry_both(tmp_path):
    import pytest

    pytest.importorskip("torch")
    from attention_conformance.cli import main

    (tmp_path / "ignores_causal.py").write_text(
        "from attention_conformance.examples.good_sdpa import attention as good\n"
        "def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):\n"
        "    return good(q, k, v, attn_mask=attn_mask, scale=scale, enable_gqa=enable_gqa)\n")
    impls = [f"{tmp_path / 'ignores_causal.py'}:attention", "attention_conformance.examples.broken_sdpa:attention",
             "torch-sdpa-math"]
    code = main(["run", "--impl", *impls, "-k", "causal_alignment-b1h2x2-q33k1", "--report-dir", str(tmp_path / "r"),
                 "--quiet"])
    md = (tmp_path / "r" / "report.md").read_text()
    # the broken example drops the only key (Lk % 64 == 1); the function that ignores is_causal passes these cases
    lines = [line for line in md.splitlines() if line.startswith("- the same case: ")]
    assert code == 1 and lines and all(line.endswith("ignores_causal.py:attention, torch-sdpa-math")
                                       for line in lines), md[-3000:]
    assert "Cases every adapter that ran them failed" not in md  # torch-sdpa-math passes them
    assert "the same case: " in (tmp_path / "r" / "report.html").read_text()
