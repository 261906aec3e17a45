"""tools/ncu_sass_stalls.py on a small source page written like ncu's CSV."""

from __future__ import annotations

import csv

import ncu_sass_stalls as ns

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_barrier",
          "stall_no_inst", "stall_long_sb", "stall_barrier (Not Issued)"]
ROWS = [
    ["0x0", "  HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24", "10", "8", "0", "2", "0", "0"],
    ["0x10", "  WARPGROUP.DEPBAR.LE gsb0, 0x0", "50", "8", "50", "0", "0", "40"],
    ["0x20", "  MUFU.EX2 R1, R1", "5", "8", "0", "5", "0", "0"],
    ["0x30", "  BSYNC B0", "30", "8", "0", "30", "0", "0"],
    ["0x40", "  BAR.SYNC.DEFER_BLOCKING 0x3, 0x100", "5", "8", "5", "0", "0", "0"],
    ["0x50", "  EXIT", "0", "8", "0", "0", "0", "0"],
]


def _write(tmp_path):
    path = tmp_path / "page.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "k"])
        w.writerow(HEADER)
        w.writerows(ROWS)
    return str(path)


def test_reads_samples_and_reasons(tmp_path):
    instrs = ns.read_source_page(_write(tmp_path))
    assert [i.samples for i in instrs] == [10, 50, 5, 30, 5, 0]
    assert instrs[1].stalls == {"barrier": 50}  # the "(Not Issued)" column is not a reason of its own
    assert instrs[3].stalls == {"no_inst": 30}


def test_summary_ranks_and_regions_split_at_landmarks(tmp_path):
    instrs = ns.read_source_page(_write(tmp_path))
    lines = ns.summary(instrs, top=2)
    assert lines[0] == "6 instructions, 100 samples"
    assert "barrier" in lines[1] and "55.0%" in lines[1]  # 50 + 5 of 100
    assert "WARPGROUP.DEPBAR" in lines[-2] and "BSYNC" in lines[-1]
    reg = ns.regions(instrs)
    assert reg[1].split()[0] == "0..1" and "60.0%" in reg[1]  # GEMM + its wait
    assert reg[2].split()[0] == "2..4" and "40.0%" in reg[2] and "no_inst 88%" in reg[2]


def test_not_a_source_page_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    assert ns.main([str(bad)]) == 2
    assert "not an ncu source page" in capsys.readouterr().err
