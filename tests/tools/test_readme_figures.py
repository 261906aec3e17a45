"""README figures are generated from the current report files (tools/readme_figures.py): the blocks in
README.md must equal what the data renders, so prose and data cannot drift apart."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import readme_figures as rf


def test_readme_blocks_match_the_data():
    text = rf.README.read_text()
    _, changed = rf.rewrite(text)
    assert not changed, (f"README.md blocks {changed} differ from the data: "
                         "run `python tools/readme_figures.py`")


def test_every_block_is_in_the_readme():
    text = rf.README.read_text()
    missing = [n for n in rf.BLOCKS if f"<!-- figures:{n} -->" not in text]
    assert not missing, f"README.md lacks the blocks {missing}"


def test_a_changed_report_changes_its_block(tmp_path):
    """The check can fail: a CPU report with another wall time and outcome renders a different block."""
    shutil.copytree(rf.REPORTS_DIR / "cpu", tmp_path / "cpu", ignore=shutil.ignore_patterns("*.html", "*.png"))
    rep = json.loads(gzip.decompress((tmp_path / "cpu" / "report.json.gz").read_bytes()))
    before = rf.render_block("cpu", tmp_path)
    rep["wall_seconds"] += 100.0
    name = rep["adapters"][0]["name"]
    rep["summary"]["by_adapter"][name]["FAIL"] = rep["summary"]["by_adapter"][name].get("FAIL", 0) + 1
    (tmp_path / "cpu" / "report.json.gz").write_bytes(gzip.compress(json.dumps(rep).encode()))
    after = rf.render_block("cpu", tmp_path)
    assert before != after and f"{rep['wall_seconds']:.0f} s" in after
    text = f"x\n<!-- figures:cpu -->\n{before}<!-- /figures -->\ny\n"
    new, changed = rf.rewrite(text, tmp_path)
    assert changed == ["cpu"] and after in new and new.startswith("x\n") and new.endswith("y\n")


def test_unknown_block_name_is_an_error():
    with pytest.raises(ValueError, match="figures:nope"):
        rf.rewrite("<!-- figures:nope -->\n<!-- /figures -->\n")
