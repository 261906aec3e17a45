"""bench_table.py: the markdown of a `tox -e bench` JSON (CPU; a made-up pytest-benchmark document)."""

from __future__ import annotations

from bench_table import markdown, rows_of


def _bench(name: str, group: str, ms: float, **extra) -> dict:
    return dict(name=name, group=group, stats=dict(median=ms / 1e3),
                extra_info=dict(cuda_event_median_ms=ms, tflops_cuda_event=100.0 / ms, **extra))


DOC = dict(version="5.2.3", datetime="2026-12-02", machine_info=dict(node="h200"), benchmarks=[
    _bench("test_fa3_fwd_8k[128-full-ours]", "fa3-fwd d128 full", 2.0),
    _bench("test_fa3_fwd_8k[128-full-torch-cudnn]", "fa3-fwd d128 full", 2.2, paired_ours_over_impl=1.08),
    _bench("test_fa3_fwd_8k[128-full-flash-attn-4]", "fa3-fwd d128 full", 1.96, paired_ours_over_impl=1.003),
])


def test_sequential_and_paired_ratios_side_by_side():
    """The sequential ratio is the other benchmark's time over ours; the paired one is carried from extra_info, and
    left empty where the benchmark has none."""
    rows = rows_of(DOC)["fa3-fwd d128 full"]
    assert rows["flash-attn-4"]["paired"] == 1.003 and rows["ours"]["paired"] is None
    md = markdown(DOC).splitlines()
    assert any(line.startswith("| shape |") and "paired (alternating rounds)" in line for line in md)
    fa4 = next(line for line in md if "| flash-attn-4 |" in line)
    assert fa4.endswith("| 0.98 | 1.00 |"), fa4
    ours = next(line for line in md if "| ours |" in line)
    assert ours.endswith("|  |  |"), ours


def test_fp8_groups_compare_ours_fp8_vt_with_cudnn_fp8():
    """In an FP8 group ours is ours-fp8-vt; cuDNN's FP8 forward (cudnn-fp8) gets both ratios against it."""
    doc = dict(DOC, benchmarks=[
        _bench("test_fa3_fp8_fwd_8k[128-full-ours-fp8-vt]", "fa3-fp8-fwd d128 full", 2.4),
        _bench("test_fa3_fp8_fwd_8k[128-full-ours-bf16]", "fa3-fp8-fwd d128 full", 3.6),
        _bench("test_fa3_fp8_fwd_8k[128-full-cudnn-fp8]", "fa3-fp8-fwd d128 full", 2.45, paired_ours_over_impl=1.02),
    ])
    rows = rows_of(doc)["fa3-fp8-fwd d128 full"]
    assert set(rows) == {"ours-fp8-vt", "ours-bf16", "cudnn-fp8"}
    line = next(x for x in markdown(doc).splitlines() if "| cudnn-fp8 |" in x)
    assert line.endswith("| 1.02 | 1.02 |"), line


def test_gpu_time_is_the_headline_with_host_and_wall_time_beside_it():
    """A run of the GPU timer (``gpu_ms``, ``tflops`` from it, ``host_us``, ``wall_ms``, ``gpu_method``): the table's
    ms and rate are GPU time, the host time and the wall time stand beside them, and the method is named; a JSON from
    before the GPU timer is labelled wall time."""
    doc = dict(DOC, benchmarks=[
        dict(name="test_fa3_fwd_8k[128-full-ours]", group="g", stats=dict(median=2.3e-3),
             extra_info=dict(gpu_ms=2.0, tflops=50.0, host_us=7.1, wall_ms=2.3, gpu_method="cuda_graph",
                             cuda_event_median_ms=2.3, tflops_cuda_event=43.5)),
        _bench("test_fa3_fwd_8k[128-full-flash-attn-4]", "g", 2.6),
    ])
    rows = rows_of(doc)["g"]
    assert rows["ours"]["ms"] == 2.0 and rows["ours"]["rate"] == 50.0 and rows["ours"]["method"] == "cuda_graph"
    assert rows["flash-attn-4"]["method"] == "wall (events)"
    ours = next(line for line in markdown(doc).splitlines() if "| ours |" in line)
    assert "| 2.000 | 50.0 TFLOPs/s | 7 | 2.300 | cuda_graph |" in ours, ours
    doc["benchmarks"][0]["extra_info"]["host_queued_us"] = 5.2  # behind queued work, where the run measured it
    ours = next(line for line in markdown(doc).splitlines() if "| ours |" in line)
    assert "| 50.0 TFLOPs/s | 7 / 5 | 2.300 |" in ours, ours


def test_the_header_says_where_when_and_what_each_figure_means():
    """Commit, GPU, driver and versions from the JSON's machine_info (tests/conftest.py's hook: the GPUs as
    running.environment lists them, a dict each), the command, and the meaning of GPU ms, host us and the ratios."""
    doc = dict(DOC, commit_info=dict(id="0123456789abcdef", dirty=True),
               machine_info=dict(python_version="3.12.3", attention_conformance=dict(
                   gpus=[dict(index=0, name="NVIDIA H200", capability="9.0", memory_gib=139.8)],
                   driver="580.159.04", torch="2.11.0+cu130", **{"flash-attn-4": "4.0.0b36"})))
    head = "\n".join(markdown(doc).splitlines()[:8])
    for text in ("tox -e bench", "commit 0123456 (dirty tree)", "NVIDIA H200", "driver 580.159.04",
                 "torch 2.11.0+cu130", "flash-attn-4 4.0.0b36", "3 benchmarks", "GPU ms is the headline"):
        assert text in head, (text, head)


def test_a_run_outside_a_git_checkout_says_its_commit_is_unknown():
    """pytest-benchmark writes ``unversioned`` where the run's folder has no git metadata (the device runner's
    snapshot): the header says the commit is unknown instead of a truncated "unversi"."""
    head = "\n".join(markdown(dict(DOC, commit_info=dict(id="unversioned", dirty=False))).splitlines()[:8])
    assert "commit unknown" in head and "unversi" not in head, head


def test_previous_run_column_says_how_far_each_row_moved():
    """With the run it replaces, each row gets this run's GPU ms over the previous one's (empty for a row the previous
    run lacks), and the header names that run and warns when its GPU differs."""
    h100 = dict(gpus=[dict(name="NVIDIA H100 80GB HBM3")])
    h200 = dict(gpus=[dict(name="NVIDIA H200")])
    old = dict(DOC, datetime="2026-12-01", machine_info=dict(attention_conformance=h100),
               benchmarks=DOC["benchmarks"][:2] + [_bench("test_fa3_fwd_8k[128-full-ours]", "fa3-fwd d64 full", 1.0)])
    old["benchmarks"][0] = _bench("test_fa3_fwd_8k[128-full-ours]", "fa3-fwd d128 full", 2.5)
    new = dict(DOC, machine_info=dict(attention_conformance=h200))
    md = markdown(new, old).splitlines()
    assert any(line.startswith("| shape |") and line.endswith("| vs previous |") for line in md)
    ours = next(line for line in md if "| ours |" in line)
    assert ours.endswith("| 0.80 |"), ours
    fa4 = next(line for line in md if "| flash-attn-4 |" in line)
    assert fa4.endswith("|  |"), fa4
    note = next(line for line in md if line.startswith("- *vs previous*"))
    assert "2026-12-01, NVIDIA H100 80GB HBM3" in note and "different GPUs" in note
    assert "different GPUs" not in next(x for x in markdown(new, new).splitlines() if x.startswith("- *vs previous*"))
    assert "vs previous" not in markdown(new)


def test_a_copy_without_git_metadata_names_the_commit_its_checkout_wrote(tmp_path):
    """tests/conftest.py's commit hook: pytest-benchmark's ``unversioned`` becomes the commit in build/carry/commit
    (prepare_local.sh's ``git describe --dirty``); a run with git metadata, or without the file, is left as it was."""
    import importlib.util
    from pathlib import Path
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).parents[1] / "conftest.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    config = SimpleNamespace(rootpath=tmp_path)
    info = dict(id="unversioned", dirty=False)
    hooks.pytest_benchmark_update_commit_info(config, info)
    assert info == dict(id="unversioned", dirty=False)
    (tmp_path / "build" / "carry").mkdir(parents=True)
    (tmp_path / "build" / "carry" / "commit").write_text("0123456789abcdef0123456789abcdef01234567-dirty\n")
    hooks.pytest_benchmark_update_commit_info(config, info)
    assert info["id"] == "0123456789abcdef0123456789abcdef01234567" and info["dirty"] is True
    assert "commit 0123456 (dirty tree)" in markdown(dict(DOC, commit_info=info))
    versioned = dict(id="fedcba9876543210", dirty=False)
    hooks.pytest_benchmark_update_commit_info(config, versioned)
    assert versioned == dict(id="fedcba9876543210", dirty=False)
