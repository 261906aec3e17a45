"""Markdown table of a pytest-benchmark JSON written by ``tox -e bench`` (tests/kernels/test_cuda_bench.py).

One row per benchmark group (a shape) and implementation (ours, torch-flash, torch-cudnn, flash-attn-4; the FP8
groups: ours-fp8-vt (V k-major) and ours-fp8 (V as rows) beside ours-bf16 and cuDNN's FP8 forward, cudnn-fp8):
GPU time in ms (``extra_info`` ``gpu_ms``: `kernels.timing`, CUDA-graph replay; the method beside it) and the rate
(TFLOPs/s or TB/s) from it, the host time of one call, the wall time the earlier timer reported, then the speed of
ours (ours-fp8-vt, else ours-fp8, in the FP8 groups) relative to each other implementation; where the benchmark also
timed ours beside it in alternating rounds (``extra_info`` ``paired_ours_over_impl``: the FA3 forward's cuDNN and
FA4 rows, cudnn-fp8), that paired ratio too. A JSON from before the GPU timer gives its CUDA-event wall time, said so.
With ``--previous`` (the run this one replaces) a last column says how far each row's GPU time moved: this run's
over the previous one's, for the rows both runs have.

    python tools/bench_table.py reports/latest/pytest_bench.json \
        --previous reports/benchmarks/pytest_bench.json > table.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

__all__ = ["header", "rows_of", "previous_line", "markdown", "main"]

OTHERS = ("torch-flash", "torch-cudnn", "flash-attn-4", "ours-fp8", "ours-bf16", "cudnn-fp8")


def _impl(name: str) -> str:
    m = re.search(r"\[(?:.*-)?(ours-fp8-vt|ours-fp8|ours-bf16|ours|torch-flash|torch-cudnn|flash-attn-4|cudnn-fp8)\]$",
                  name)
    if m:
        return m.group(1)
    m = re.search(r"\[(fwd|bwd)\]$", name)
    return f"ours-{m.group(1)}" if m else name


def rows_of(data: dict) -> dict[str, dict[str, dict]]:
    """group -> implementation -> {"ms", "rate", "unit", "host_us", "wall_ms", "method", "paired"} from a
    pytest-benchmark JSON: GPU time and its rate where the run recorded them (``gpu_ms``), else (a run before the GPU
    timer) the CUDA-event wall time, ``method`` saying which; "paired": the speed ratio ours / impl timed in
    alternating rounds, or None."""
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        if "gpu_ms" in info:
            ms, method = info["gpu_ms"], info.get("gpu_method", "gpu")
            unit = "TB/s" if "TBps" in info else "TFLOPs/s"
            rate = info.get("TBps", info.get("tflops"))
        else:
            ms, method = info.get("cuda_event_median_ms", b["stats"]["median"] * 1e3), "wall (events)"
            unit = "TB/s" if "TBps_cuda_event" in info else "TFLOPs/s"
            rate = info.get("TBps_cuda_event", info.get("tflops_cuda_event"))
        out[b.get("group") or b["name"]][_impl(b["name"])] = {
            "ms": ms, "rate": rate, "unit": unit, "host_us": info.get("host_us"),
            "host_queued_us": info.get("host_queued_us"), "wall_ms": info.get("wall_ms"),
            "method": method, "paired": info.get("paired_ours_over_impl")}
    return out


def _gpus(data: dict) -> str:
    """The run's GPUs by name (running.environment's entries: {"index", "name", "capability", "memory_gib"} each)."""
    gpus = data.get("machine_info", {}).get("attention_conformance", {}).get("gpus") or []
    return ", ".join(g.get("name", "?") if isinstance(g, dict) else str(g) for g in gpus) or "no GPU recorded"


def _commit(data: dict, long: bool = True) -> str:
    """The run's commit, short, and whether its tree was dirty."""
    commit = data.get("commit_info", {})
    if commit.get("id") == "unversioned":  # pytest-benchmark's word where the run's folder had no git metadata
        return "unknown" + (" (run from a copy without git metadata; reports/index.md names the commit that brought "
                            "it)" if long else "")
    return (commit.get("id") or "?")[:7] + (" (dirty tree)" if commit.get("dirty") else "")


def header(data: dict) -> list[str]:
    """What the table is, where and when it was measured (the run's commit, GPU, driver and versions: the JSON's
    machine_info, which tests/conftest.py fills with `running.environment`), and what each figure means."""
    info = data.get("machine_info", {})
    env = info.get("attention_conformance", {})
    rev, gpus = _commit(data), _gpus(data)
    versions = "; ".join(f"{k} {env[k]}" for k in ("driver", "cuda", "torch", "cudnn", "flash-attn-4",
                                                     "nvidia-cudnn-frontend") if env.get(k))
    return [
        "# tox -e bench: our CUDA kernels beside torch SDPA (flash, cuDNN), cuDNN's FP8 forward and flash-attn-4", "",
        "- Command: `tox -e bench` (`python -m pytest -m benchmark_only --benchmark-enable --benchmark-json=JSON`, "
        "tests/kernels/test_cuda_bench.py), then `python tools/bench_table.py JSON`; "
        f"{len(data.get('benchmarks', []))} benchmarks.",
        f"- {data.get('datetime', '?')}, commit {rev}; {gpus}" + (f"; {versions}" if versions else "")
        + f"; Python {info.get('python_version', '?')}, pytest-benchmark {data.get('version', '?')}.",
        "- GPU ms is the headline: GPU time of one call without host launch overhead (`kernels/timing.py`, the method "
        "in *timed by*); host us is the CPU time of issuing one call from a drained GPU (after the /: behind queued "
        "work, as a training step issues its calls, where measured), wall ms the per-call time of event, call, event, "
        "synchronize (the earlier timer). *speed ours / impl* > 1: ours is faster (the other's GPU time over ours, "
        "measured one after the other); *paired*: the same ratio from alternating rounds in one process, where the "
        "benchmark took it.", "",
    ]


def previous_line(data: dict, previous: dict) -> str:
    """The header line of the *vs previous* column: which run it compares with, and that a change of card is in it."""
    when = f"{previous.get('datetime', '?')}, {_gpus(previous)}, commit {_commit(previous, long=False)}"
    cards = "" if _gpus(data) == _gpus(previous) else " The runs used different GPUs: the ratio holds the cards' too."
    return f"- *vs previous*: this run's GPU ms over that of the run it replaces ({when}), for the rows both have; " \
        f"< 1: faster now.{cards}"


def markdown(data: dict, previous: dict | None = None) -> str:
    rows = rows_of(data)
    before = rows_of(previous) if previous is not None else None
    lines = header(data) + ([previous_line(data, previous), ""] if previous is not None else []) + [
        "| shape | impl | GPU ms | rate | host us / call | wall ms | timed by | speed ours / impl | paired "
        "(alternating rounds) |" + (" vs previous |" if before is not None else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if before is not None else ""),
    ]
    for group, impls in rows.items():
        ours = impls.get("ours") or impls.get("ours-fp8-vt") or impls.get("ours-fp8")
        for name, r in impls.items():
            ratio = ""
            if ours and name in OTHERS and r is not ours and r["ms"]:
                ratio = f"{r['ms'] / ours['ms']:.2f}"  # time ratio = speed of ours relative to it
            rate = f"{r['rate']:.1f} {r['unit']}" if r["rate"] is not None else ""
            paired = f"{r['paired']:.2f}" if r.get("paired") is not None else ""
            host = f"{r['host_us']:.0f}" if r.get("host_us") is not None else ""
            if host and r.get("host_queued_us") is not None:
                host += f" / {r['host_queued_us']:.0f}"
            wall = f"{r['wall_ms']:.3f}" if r.get("wall_ms") is not None else ""
            line = f"| {group} | {name} | {r['ms']:.3f} | {rate} | {host} | {wall} | {r['method']} | {ratio} " \
                f"| {paired} |"
            if before is not None:
                old = before.get(group, {}).get(name)
                line += f" {r['ms'] / old['ms']:.2f} |" if old and old["ms"] else "  |"
            lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--previous", type=Path, help="the pytest-benchmark JSON of the run this one replaces")
    args = ap.parse_args(argv)
    previous = json.loads(args.previous.read_text()) if args.previous else None
    sys.stdout.write(markdown(json.loads(args.json.read_text()), previous))
    return 0


if __name__ == "__main__":
    sys.exit(main())
