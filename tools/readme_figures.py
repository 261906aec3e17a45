"""README figures from the current report files, so prose and data cannot drift (lab tool; not installed).

    python tools/readme_figures.py           # rewrite every <!-- figures:NAME --> ... <!-- /figures --> block
    python tools/readme_figures.py --check   # exit 1 (and name the blocks) when README.md differs from the data

Blocks (each rendered from files listed in reports/index.md):

- ``cpu``: the CPU conformance report (reports/cpu/report.json.gz): wall time, machine, outcomes per adapter;
- ``gpu``: the H200 conformance report(s) (every reports/gpu/**/report.json.gz: the joined gpu profile, and runs
  of other adapter sets): outcomes per adapter;
- ``bench``: the CUDA kernels against torch-flash and cuDNN (reports/benchmarks/cuda_fwd.json; the FA2 backward's
  rows of fa3_bwd_side_by_side.json), per head dim and causality at the largest N timed, and split-KV decoding;
- ``workers``: the gpu profile with one worker per GPU (reports/benchmarks/workers.json);
- ``fp8``: FA3 Table 3 reproduced (the table of reports/benchmarks/fp8_accuracy.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from bench_shapes import dims_label  # tools/, beside these scripts
from timing_md import FA3_REFS, by_gpu_time

from attention_conformance.verdict.outcomes import OUTCOMES, SHORT

__all__ = ["BLOCKS", "README", "render_block", "rewrite", "main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
REPORTS_DIR = REPO_ROOT / "reports"
README = REPO_ROOT / "README.md"
_BLOCK = re.compile(r"(<!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.S)
_COLS = OUTCOMES  # every outcome, in the order and with the short names of conformance/verdict/outcomes.py
_SHORT = tuple(SHORT[o] for o in OUTCOMES)


def _rel(p: Path, root: Path) -> str:
    """``reports/...``: the path of a file under ``root`` (the reports folder) as the README names it."""
    return "reports/" + p.relative_to(root).as_posix() if p != root else "reports"


def _load(p: Path) -> dict:
    """A JSON file, gzip-compressed when its name ends in .gz (the conformance reports)."""
    raw = p.read_bytes()
    return json.loads(gzip.decompress(raw) if p.suffix == ".gz" else raw)


def _outcome_rows(rep: dict, prefix: list[str] | None = None, ran_only: bool = False) -> list[str]:
    """One table row per adapter of `rep`; with `ran_only`, none for an adapter whose every case is NOT_SUPPORTED
    (not installed there, CPU only): the report itself lists them with the reason."""
    by = rep.get("summary", {}).get("by_adapter", {})
    rows = []
    for a in rep.get("adapters", []):
        c = by.get(a["name"], {})
        if ran_only and not any(n for k, n in c.items() if k != "NOT_SUPPORTED"):
            continue
        rows.append("| " + " | ".join([*(prefix or []), f"`{a['name']}`", *(str(c.get(k, 0)) for k in _COLS)]) + " |")
    return rows


def _cpu(root: Path) -> str:
    p = root / "cpu" / "report.json.gz"
    rep = _load(p)
    env = rep.get("environment", {})
    s = rep.get("summary", {})
    lines = [f"`{' '.join(rep.get('command', []))}` ({_rel(p, root)}, {rep.get('created', '?')[:10]}): "
             f"{s.get('cases')} cases x {len(rep.get('adapters', []))} adapters in "
             f"**{rep.get('wall_seconds', 0):.0f} s** "
             f"on {env.get('cpu', '?')} ({env.get('cpu_count', '?')} cores), "
             f"torch {env.get('torch', '?')}:", "",
             "| adapter | " + " | ".join(_SHORT) + " |", "|---|" + "---|" * len(_SHORT)]
    return "\n".join(lines + _outcome_rows(rep)) + "\n"


def _gpu(root: Path) -> str:
    reports = sorted((root / "gpu").rglob("report.json.gz"))
    lines = ["| report | adapter | " + " | ".join(_SHORT) + " |", "|---|---|" + "---|" * len(_SHORT)]
    heads = []
    for p in reports:
        rep = _load(p)
        env = rep.get("environment", {})
        gpus = ", ".join(g.get("name", "?") for g in env.get("gpus", [])) or "no GPU"
        heads.append(f"`{_rel(p, root)}` ({rep.get('created', '?')[:10]}, {rep.get('profile')} profile, {gpus}, torch "
                     f"{env.get('torch', '?')}, cuDNN {env.get('cudnn', '?')}, {rep.get('wall_seconds', 0):.0f} s)")
        lines += _outcome_rows(rep, [f"`{_rel(p.parent, root)}/`"], ran_only=True)
    return "\n".join([*(f"- {h}" for h in heads), "", *lines]) + "\n"


def _bench(root: Path) -> str:
    fwd = _load(root / "benchmarks" / "cuda_fwd.json")
    bwd = _load(root / "benchmarks" / "fa3_bwd_side_by_side.json")  # its FA2 column: our FA2 backward
    def run(doc: dict, name: str, rows: list[dict]) -> str:  # the card, date and timer of one file's rows
        env = doc.get("env", {})
        timer = "GPU time" if by_gpu_time(rows) else "CUDA events around each launch, host time included"
        return (f"`reports/benchmarks/{name}`: {env.get('gpu', '?')}, {env.get('date', '?')}, driver "
                f"{env.get('driver', '?')}, torch {env.get('torch', '?')}, cuDNN {env.get('cudnn', '?')}, {timer}")

    fa2_bwd = [r for r in bwd.get("bench", []) if r.get("bwd_fa2_tflops") and r.get("dv", r["d"]) == r["d"]]
    bwd_src = (run(bwd, "fa3_bwd_side_by_side.json", bwd.get("bench", [])) if fa2_bwd else
               "not in `reports/benchmarks/fa3_bwd_side_by_side.json` (its run left the FA2 column out; "
               "`pytest_bench.md` has it)")
    lines = ["bf16, B=4, H=16; TFLOPs/s, the candidates of each file timed in the same run:", "",
             f"- FA2 forward and decoding: {run(fwd, 'cuda_fwd.json', fwd.get('bench', []))}",
             f"- FA2 backward: {bwd_src}", "",
             "| kernel | N | d | causal | ours | torch-flash | cuDNN | ours / flash | ours / cuDNN |",
             "|---|---|---|---|---|---|---|---|---|"]
    best: dict[tuple[int, bool], dict] = {}
    for r in fwd.get("bench", []):
        if "N" in r and r["N"] >= best.get((r["d"], r["causal"]), {}).get("N", 0):
            best[(r["d"], r["causal"])] = r  # per (d, causal): the largest N timed
    for r in sorted(best.values(), key=lambda r: (r["d"], r["causal"])):
        lines.append(f"| FA2 fwd | {r['N']} | {r['d']} | {r['causal']} | {r['ours_tflops']:.0f} | "
                     f"{r['flash_tflops']:.0f} | {r['cudnn_tflops']:.0f} | {r['ours_tflops'] / r['flash_tflops']:.2f}x "
                     f"| {r['ours_tflops'] / r['cudnn_tflops']:.2f}x |")
    for r in sorted(fa2_bwd, key=lambda r: (r["d"], r["causal"], r["N"])):
        ours, fl, cu = r["bwd_fa2_tflops"], r["bwd_flash_tflops"], r["bwd_cudnn_tflops"]
        lines.append(f"| FA2 bwd | {r['N']} | {r['d']} | {r['causal']} | {ours:.0f} | {fl:.0f} | {cu:.0f} | "
                     f"{ours / fl:.2f}x | {ours / cu:.2f}x |")
    dec = [r for r in fwd.get("bench", []) if r.get("kernel") == "splitkv_decode"]
    if dec:
        lines += ["", "Split-KV decoding (TB/s of K and V read; Lq=1):", "",
                  "| B | Lk | Hq / Hkv | d | ours | torch-flash | cuDNN | FlashInfer paged | ours / flash "
                  "| ours / cuDNN | ours / FlashInfer |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in dec:
            ours, refs = r["ours_TBps"], [r.get(f"{k}_TBps") for k in ("flash", "cudnn", "flashinfer_paged")]
            tbps = " | ".join(f"{t:.2f}" if t else "n/a" for t in refs)
            rel = " | ".join(f"{ours / t:.2f}x" if t else "n/a" for t in refs)
            lines.append(f"| {r['B']} | {r['Lk']} | {r['Hq']} / {r['Hkv']} | {r['d']} | {ours:.2f} | {tbps} | {rel} |")
    return "\n".join(lines) + "\n"


def _fa3(root: Path) -> str:
    rep = _load(root / "benchmarks" / "fa3_side_by_side.json")
    env = rep.get("env", {})
    names = " | ".join(n for _, n in FA3_REFS)
    ratios = " | ".join(f"ours / {n}" for _, n in FA3_REFS if n != "torch-flash")
    lines = [f"{env.get('gpu', '?')}, {env.get('date', '?')}, driver {env.get('driver', '?')}, CUDA "
             f"{env.get('cuda', '?')}, torch {env.get('torch', '?')}, cuDNN {env.get('cudnn', '?')}, flash-attn-4 "
             f"{env.get('fa4', '?')}; bf16, forward (`reports/benchmarks/fa3_side_by_side.json`; TFLOPs/s by GPU "
             "time, all timed in the same run; n/a: that library declined or has no build of the row):", "",
             f"| B, H, N, d | causal | FA3 (ours) | {names} | {ratios} |",
             "|---|---|---|" + "---|" * (2 * len(FA3_REFS) - 1)]
    for r in rep.get("bench", []):
        ours = r["fa3_tflops"]
        others = [r.get(f"{k}_tflops") for k, _ in FA3_REFS]
        dims = dims_label(r)
        tflops = " | ".join(f"{t:.0f}" if t else "n/a" for t in others)
        rel = " | ".join(f"{ours / t:.2f}x" if t else "n/a"
                         for (_, n), t in zip(FA3_REFS, others) if n != "torch-flash")
        lines.append(f"| {r['B']}, {r['H']}, {r['N']}, {dims} | {r['causal']} | {ours:.0f} | {tflops} | {rel} |")
    return "\n".join(lines) + "\n"


def _workers(root: Path) -> str:
    w = _load(root / "benchmarks" / "workers.json")
    (n1, n2), (t1, t2) = w["workers"], w["wall_seconds"]
    same = "the same" if w.get("outcomes_equal") else "a DIFFERENT"
    pairs = sum(w.get("by_outcome", {}).values())
    return (f"On {len(w.get('gpus', []))} x {(w.get('gpus') or ['?'])[0]} the gpu profile ({pairs} (case, adapter) "
            f"pairs) took **{t2:.0f} s** with `--workers {n2}` against {t1:.0f} s with {n1} "
            f"({t2 / t1:.2f}x), with {same} outcome for every pair (`reports/benchmarks/workers.json`).\n")


def _fp8(root: Path) -> str:
    text = (root / "benchmarks" / "fp8_accuracy.md").read_text().splitlines()
    table = [ln for ln in text if ln.startswith("|")]
    gain = [ln for ln in text if ln.startswith("incoherent processing gain")]
    return "\n".join([*table, "", *gain, ""]) if table else "(reports/benchmarks/fp8_accuracy.md has no table)\n"


BLOCKS: dict[str, Callable[[Path], str]] = {"cpu": _cpu, "gpu": _gpu, "bench": _bench, "fa3": _fa3,
                                            "workers": _workers, "fp8": _fp8}


def render_block(name: str, root: Path = REPORTS_DIR) -> str:
    """The body of block ``name`` from the files under ``root`` (reports/)."""
    return BLOCKS[name](root)


def rewrite(text: str, root: Path = REPORTS_DIR) -> tuple[str, list[str]]:
    """``text`` with every known block re-rendered, and the names of the blocks that changed.

    Raises ValueError for a block name this module does not know."""
    changed: list[str] = []

    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in BLOCKS:
            raise ValueError(f"README block <!-- figures:{name} -->: unknown name (known: {', '.join(BLOCKS)})")
        body = render_block(name, root)
        if body != m.group("body"):
            changed.append(name)
        return m.group(1) + body + m.group(4)

    return _BLOCK.sub(sub, text), changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/readme_figures.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report blocks that differ from the data (exit 1)")
    ap.add_argument("--readme", type=Path, default=README)
    args = ap.parse_args(argv)
    try:
        new, changed = rewrite(args.readme.read_text())
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.check:
        if changed:
            print(f"{args.readme}: blocks {changed} differ from the data; "
                  "run `python tools/readme_figures.py`",
                  file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(new)
    print(f"{args.readme}: {len(changed)} block(s) updated {changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
