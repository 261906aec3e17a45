"""tools/timing_md.py: which timer a benchmark set was measured by, read from its rows; a table's header line and
the commit it names (tools/checkout_commit.py)."""

from checkout_commit import ROOT, checkout_commit
from timing_md import by_gpu_time, env_line, replaced_set_note


def test_a_set_with_a_method_per_candidate_is_gpu_time():
    assert by_gpu_time([{"d": 64, "fa3_ms": 1.0, "fa3_method": "cuda_graph"}])
    assert by_gpu_time([{"d": 64}, {"d": 128, "ours_method": "back_to_back"}])


def test_a_set_without_methods_is_the_wall_timer():
    assert not by_gpu_time([{"d": 64, "ours_ms": 1.0, "ratio_vs_flash": 1.2}])
    assert not by_gpu_time([])


def test_host_table_shows_the_queued_host_time_where_a_set_has_it():
    from timing_md import host_table

    old = [{"d": 64, "fa3_host_us": 9.04, "fa3_wall_ms": 1.5, "fa3_method": "cuda_graph"}]
    lines = host_table(old, lambda r: f"d{r['d']}")
    assert "| fa3 host us / wall ms | method |" in lines[2] and lines[4] == "| d64 | 9.0 / 1.500 | cuda_graph |"
    new = [{**old[0], "fa3_host_queued_us": 7.25, "fa4_host_us": 300.0, "fa4_method": "cuda_graph"}]
    lines = host_table(new, lambda r: f"d{r['d']}")
    assert "queued: behind queued GPU work" in lines[0]
    assert "| fa3 host us / queued us / wall ms | fa4 host us / queued us / wall ms |" in lines[2]
    assert lines[4] == "| d64 | 9.0 / 7.2 / 1.500 | 300.0 / - / - | cuda_graph |"


def test_replaced_set_note_names_the_other_card_and_what_the_change_is_made_of():
    gpu_rows = [{"ours_ms": 1.0, "ours_method": "cuda_graph"}]
    note = replaced_set_note(gpu_rows, {"date": "monday", "gpu": "H100"}, "H200", "unused")
    assert note == ("the set this one replaces (monday, H100), by GPU time as this one: the change is the card "
                    "(H100 then, H200 now), the run (clocks, power) and the kernels' own changes in between.")
    same = replaced_set_note(gpu_rows, {"date": "monday", "gpu": "H200"}, "H200", "unused")
    assert same == ("the set this one replaces (monday), by GPU time as this one: the change is the run (clocks, "
                    "power) and the kernels' own changes in between.")


def test_replaced_set_note_of_a_wall_timer_set_says_how_that_timer_charged():
    note = replaced_set_note([{"ours_ms": 1.0}], {}, "H200", "timed by the wall timer")
    assert note == "the set this one replaces, timed by the wall timer."


def test_a_tables_header_line_names_its_commit():
    """env_line: date, commit (short; dirty marked), driver and versions, then the caller's extras; a stored set from
    before the commit was recorded says "not recorded"."""
    env = dict(date="2026-12-07 08:00 UTC", driver="580.159.04", cuda="13.0", torch="2.11.0+cu130", cudnn=91900,
               commit="0123456789abcdef0123456789abcdef01234567-dirty")
    line = env_line(env, "FA4 4.0.0b36")
    assert line == ("Date 2026-12-07 08:00 UTC; commit 0123456 (dirty tree); driver 580.159.04; CUDA 13.0; "
                    "torch 2.11.0+cu130; cuDNN 91900; FA4 4.0.0b36."), line
    assert "commit not recorded;" in env_line({k: v for k, v in env.items() if k != "commit"})


def test_the_commit_comes_from_git_or_from_what_the_checkout_carried(tmp_path):
    """checkout_commit: git describe in a checkout (this one), build/carry/commit in a copy without git metadata,
    None where neither is there."""
    if (ROOT / ".git").exists():
        assert len(checkout_commit().removesuffix("-dirty")) == 40
    assert checkout_commit(tmp_path) is None
    (tmp_path / "build" / "carry").mkdir(parents=True)
    (tmp_path / "build" / "carry" / "commit").write_text("fedcba9876543210fedcba9876543210fedcba98\n")
    assert checkout_commit(tmp_path) == "fedcba9876543210fedcba9876543210fedcba98"


def test_the_script_prints_what_prepare_local_carries():
    """``python tools/checkout_commit.py`` (prepare_local.sh writes its output to build/carry/commit) prints the
    function's answer for this checkout."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "tools" / "checkout_commit.py")], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert out.strip() == (checkout_commit() or "")
