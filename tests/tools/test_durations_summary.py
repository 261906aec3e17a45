"""tools/durations_summary.py: where a cut-off pytest session's time went, from the stream plugin's .durations file."""

from __future__ import annotations

import durations_summary as ds

LINES = [
    "12.00\tpassed\tsetup\tconformance/test_conformance.py::test_case[c1::torch-flex]\t12.5\tgw0",
    "0.50\tpassed\tsetup\tconformance/test_conformance.py::test_case[c1::cuda-fa1@x]\t13.0\tgw0",
    "1.00\tpassed\tcall\tkernels.py::test_x\t20.0\tgw0",  # gw0 waited 6 s before this test
    "30.00\tfailed\tcall\tprops.py::test_kernel_property[k]\t40.0\tgw1",
    "1.00\tpassed\tcall\told.py::test_four_columns",  # the older form: no time, no worker
    "55.00\trunning\t-\tprops.py::test_kernel_property[slow]\t60.0\t-",
]


def test_totals_groups_workers_and_stragglers(tmp_path):
    path = tmp_path / "failures.txt.durations"
    path.write_text("\n".join(LINES) + "\n")
    rows = ds.read(path)
    assert ds.group_of(rows[0].nodeid) == "conformance: torch-flex"
    assert ds.group_of(rows[1].nodeid) == "conformance: cuda-fa1@x"
    assert ds.group_of(rows[3].nodeid) == "props.py" and rows[4].at is None and rows[4].worker is None
    text = ds.summary(rows)
    assert text.startswith("44 worker-seconds in 5 reports")
    assert "gw0    busy    13.5 s of    19.5 s ( 69%), last report at 20 s" in text
    assert "gw1    busy    30.0 s of    30.0 s (100%)" in text
    assert "still running at the end (1):\n      55.0 s  props.py::test_kernel_property[slow]" in text


def test_a_missing_file_is_a_usage_error(tmp_path, capsys):
    assert ds.main([str(tmp_path / "nope.durations")]) == 2
    assert "no such file" in capsys.readouterr().err
