"""HBM traffic of attention kernels, measured with Nsight Compute, beside the seeds' IO arithmetic.

``python tools/hbm_traffic.py --out DIR [--configs seeds fa1_paper] [--impls ...]
[--no-ncu]``

One forward and one forward+backward of each implementation, at the seeds' configuration (B = 1, H = 1,
N = 16,384, d = 128, fp16) and at the FA1 paper's GPT-2 medium configuration (B = 64, H = 16, N = 1024,
d = 64, fp16):

- ``naive``: the seeds' three-step attention, separate operators: ``S = (q * scale) @ k^T``,
  ``P = softmax(S)``, ``O = P @ v`` (S and P are N x N per head in fp16); backward through autograd;
- ``torch-math``, ``torch-flash``, ``cudnn``: torch SDPA pinned to one backend (``sdpa_kernel``);
- ``cuda-fa1``, ``cuda-fa2`` (and ``cuda-fa3`` when `kernels.cuda_lib` exports ``attn_fa3_fwd``): the
  project's kernels through `kernels.cuda_lib`, backward scratch zeroed as the conformance adapter does;
- ``flash-attn-4``: ``flash_attn.cute.flash_attn_func`` when it imports.

What is missing here is skipped with its reason. The parent process runs one child under
``ncu --clock-control none --profile-from-start off --cache-control all --print-units base --metrics
dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --csv``; the child times each measurement
with CUDA events (outside the profiled ranges, `kernels.timing`), records its peak device memory
(`conformance.running.peak_memory.PeakMemory`), then runs it once more inside ``cudaProfilerStart/Stop`` preceded by a
marker kernel (``torch.cuda._sleep``: ``spin_kernel``), so each measurement's kernels are the ones between
two markers. ncu flushes the caches before every kernel (``--cache-control all``): bytes an earlier kernel
left in L2 are read from DRAM again, so the figures are per-kernel cold-cache DRAM traffic. Where ncu is
missing or reads no counters, the byte model (`byte_model`) stands in and the table says so.

GFLOPs follow the FlashAttention papers' convention: forward ``4 B H N^2 d``, backward 2.5x forward.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIGS",
    "IMPLS",
    "attribute",
    "PAPER_FA1",
    "byte_model",
    "flops",
    "main",
    "parse_ncu_csv",
    "rebuild",
    "render_markdown",
    "seeds_intermediate_bytes",
    "segments",
]

CONFIGS: dict[str, dict[str, int]] = {
    "seeds": dict(B=1, H=1, N=16384, d=128),  # [FA-anim] "算账 · 显存不只算容量"
    "fa1_paper": dict(B=64, H=16, N=1024, d=64),  # FA1 paper (Dao et al. 2022), GPT-2 medium
}
IMPLS = ("naive", "torch-math", "torch-flash", "cudnn", "cuda-fa1", "cuda-fa2", "cuda-fa3", "flash-attn-4")
PASSES = ("fwd", "fwd+bwd")
ELEM = 2  # fp16
#: FA1 paper (Dao et al. 2022), A100, GPT-2 medium fwd+bwd
PAPER_FA1 = {"standard": dict(gflops=66.6, hbm_gb=40.3, ms=41.7), "flashattention": dict(gflops=75.2, hbm_gb=4.4,
                                                                                          ms=7.3)}
MATERIALIZING = ("naive", "torch-math")
MARKER = "spin_kernel"
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")


# -- arithmetic (pure, tested on CPU) ---------------------------------------------------------------------

def seeds_intermediate_bytes(N: int, elem: int = ELEM) -> int:
    """The seeds' count for the naive forward: S written, S read + P written, P read = 4 N^2 elem per head.

    >>> seeds_intermediate_bytes(16384) == 2 * 2**30
    True
    """
    return 4 * N * N * elem


def flops(cfg: dict[str, int], pass_: str) -> float:
    """Forward ``4 B H N^2 d``; forward+backward 3.5x that (backward 2.5x forward)."""
    fwd = 4.0 * cfg["B"] * cfg["H"] * cfg["N"] ** 2 * cfg["d"]
    return fwd if pass_ == "fwd" else 3.5 * fwd


def byte_model(impl: str, cfg: dict[str, int], pass_: str, elem: int = ELEM) -> int:
    """Modelled HBM bytes (the fallback when no counters can be read).

    Materialising implementations (naive, torch-math): the N x N traffic per head, forward the seeds'
    ``4 N^2`` (S write, S read, P write, P read), backward ``7 N^2`` (read P for dV, write dP, read P and
    dP and write dS, read dS twice for dQ and dK), plus the N x d tensors. Fused kernels: the compulsory
    N x d traffic only (q, k, v read, o written, LSE; backward also dO read, dQ/dK/dV written and an fp32
    dQ accumulator written and read): a lower bound that assumes K/V re-reads hit L2.
    """
    B, H, N, d = cfg["B"], cfg["H"], cfg["N"], cfg["d"]
    nd = B * H * N * d * elem
    lse = B * H * N * 4
    bwd = pass_ != "fwd"
    if impl in MATERIALIZING:
        sq = B * H * N * N * elem
        total = 4 * sq + 4 * nd
        if bwd:
            total += 7 * sq + 5 * nd + 3 * nd  # reads q, k, v, dO, o-sized; writes dq, dk, dv
        return int(total)
    total = 4 * nd + lse
    if bwd:
        total += 4 * nd + lse + nd + 3 * nd + 2 * (B * H * N * d * 4)
    return int(total)


# -- ncu output --------------------------------------------------------------------------------------------

_UNITS = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0, "ns": 1e-9, "us": 1e-6, "ms": 1e-3,
          "s": 1.0}


def _value(text: str, unit: str) -> float:
    x = float(text.replace(",", "").strip() or "nan")
    return x * _UNITS.get(unit.strip().lower(), 1.0)


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Kernels in launch order from ``ncu --csv`` (details page, one row per metric): id, name, and the
    metrics of `METRICS` converted to bytes and seconds.

    >>> rows = ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\\n'
    ...         '"0","k","dram__bytes_read.sum","Kbyte","1,024"\\n')
    >>> parse_ncu_csv(rows)[0]["dram__bytes_read.sum"]
    1024000.0
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.startswith('"')]
    kernels: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(body))):
        kid = row.get("ID")
        if kid is None or row.get("Metric Name") is None:
            continue
        k = kernels.setdefault(kid, {"id": int(kid), "name": row.get("Kernel Name", "")})
        try:
            k[row["Metric Name"]] = _value(row.get("Metric Value", ""), row.get("Metric Unit", ""))
        except ValueError:
            k[row["Metric Name"]] = math.nan
    return sorted(kernels.values(), key=lambda k: k["id"])


def segments(kernels: Sequence[dict[str, Any]], marker: str = MARKER) -> list[list[dict[str, Any]]]:
    """Split kernels at each marker kernel: segment i = the kernels after marker i, before marker i + 1.

    >>> [len(s) for s in segments([{"name": "spin_kernel"}, {"name": "a"}, {"name": "spin_kernel"}])]
    [1, 0]
    """
    out: list[list[dict[str, Any]]] = []
    for k in kernels:
        if marker in k.get("name", ""):
            out.append([])
        elif out:
            out[-1].append(k)
    return out


# -- implementations (GPU; the child process) --------------------------------------------------------------

def _unavailable(impl: str, pass_: str = "fwd") -> str | None:
    """Why `impl` cannot run `pass_` here (no GPU, launcher not exported, package missing), else None."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if impl in ("cuda-fa1", "cuda-fa2", "cuda-fa3"):
        try:
            from attention_conformance.kernels import cuda_lib

            lib = cuda_lib.library(build_if_missing=False)
        except Exception as exc:
            return f"attention_conformance.kernels.cuda_lib: {exc}"
        tag = impl.split("-")[1]
        for name in (f"attn_{tag}_fwd",) + ((f"attn_{tag}_bwd",) if pass_ != "fwd" else ()):
            if getattr(lib, name, None) is None:
                path = cuda_lib.library_path()
                shown = path.name if path.is_absolute() else str(path)
                return f"the kernel library ({shown}) does not export {name} (not built on this branch)"
    if impl == "flash-attn-4":
        try:
            import flash_attn.cute  # noqa: F401
        except Exception as exc:
            return f"flash_attn.cute does not import: {type(exc).__name__}: {exc}"
    return None


def _sdpa(backend_name: str) -> Callable:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def f(q, k, v):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v)

    return f


def _naive(q, k, v):
    import torch

    s = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-2, -1))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)


def _fa4(q, k, v):
    """flash_attn.cute on [B, N, H, d] tensors (its native layout, so no copy is measured)."""
    from flash_attn.cute import flash_attn_func

    res = flash_attn_func(q, k, v)
    return res[0] if isinstance(res, tuple | list) else res


def _ours(impl: str, q, k, v, dout, backward: bool) -> Callable[[], object]:
    import torch

    from attention_conformance.kernels import cuda_lib

    tag = {"cuda-fa1": "fa1", "cuda-fa2": "fa2", "cuda-fa3": "fa3"}[impl]
    fwd_name, bwd_name = f"attn_{tag}_fwd", f"attn_{tag}_bwd"
    if backward and getattr(cuda_lib.library(build_if_missing=False), bwd_name, None) is None:
        raise RuntimeError(f"the library does not export {bwd_name}")
    B, H, N, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device)
    fp = cuda_lib.fwd_params(q, k, v, o, lse)

    def fwd() -> object:
        cuda_lib.call(fwd_name, fp)
        return o

    if not backward:
        return fwd
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def fwd_bwd() -> object:
        fwd()
        f32 = dict(dtype=torch.float32, device=q.device)
        scratch = dict(dq_accum=torch.zeros(B, H, N, d, **f32), d_rowsum=torch.zeros(B, H, N, **f32),
                       dk_accum=torch.zeros(B, H, N, d, **f32), dv_accum=torch.zeros(B, H, N, d, **f32))
        bp = cuda_lib.bwd_params(q, k, v, o, lse, dout, dq, dk, dv, **scratch)
        cuda_lib.call(bwd_name, bp)
        return dq

    return fwd_bwd


def _make(impl: str, cfg: dict[str, int], pass_: str) -> Callable[[], object]:
    """A zero-argument callable running one forward or one forward+backward of `impl` on fresh inputs."""
    import torch

    B, H, N, d = cfg["B"], cfg["H"], cfg["N"], cfg["d"]
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (B, N, H, d) if impl == "flash-attn-4" else (B, H, N, d)
    mk = lambda: torch.randn(*shape, device="cuda", dtype=torch.float16, generator=g)  # noqa: E731
    q, k, v, dout = mk(), mk(), mk(), mk()
    backward = pass_ != "fwd"
    if impl.startswith("cuda-"):
        return _ours(impl, q, k, v, dout, backward)
    fn = {"naive": _naive, "torch-math": _sdpa("MATH"), "torch-flash": _sdpa("FLASH_ATTENTION"),
          "cudnn": _sdpa("CUDNN_ATTENTION"), "flash-attn-4": _fa4}[impl]
    if not backward:
        def run() -> object:
            with torch.no_grad():
                return fn(q, k, v)
        return run
    for t in (q, k, v):
        t.requires_grad_(True)

    def run_bwd() -> object:
        out = fn(q, k, v)
        return torch.autograd.grad(out, (q, k, v), grad_outputs=dout)

    return run_bwd


def _child(plan_path: str, log_path: str, reps: int) -> int:
    """Run every planned measurement: time it, measure its peak memory, then run it once profiled."""
    import torch

    from attention_conformance.kernels.timing import cuda_event_times_ms
    from attention_conformance.running.peak_memory import PeakMemory

    plan = json.loads(Path(plan_path).read_text())
    with open(log_path, "w") as log:
        for item in plan:
            rec = dict(item)
            reason = _unavailable(item["impl"], item["pass"])
            if reason:
                rec.update(status="skipped", reason=reason)
                log.write(json.dumps(rec) + "\n")
                log.flush()
                continue
            fn = None
            try:
                fn = _make(item["impl"], CONFIGS[item["config"]], item["pass"])
                with PeakMemory("cuda", sample_driver=False) as pm:
                    fn()
                times = cuda_event_times_ms(fn, reps=reps, warmup=2)
                torch.cuda.synchronize()
                torch.cuda.cudart().cudaProfilerStart()
                try:
                    torch.cuda._sleep(1000)  # the marker kernel: this measurement's kernels follow it
                    rec["profiled"] = True
                    fn()
                    torch.cuda.synchronize()
                finally:
                    torch.cuda.cudart().cudaProfilerStop()
                times.sort()
                rec.update(status="ran", ms=times[len(times) // 2], ms_min=times[0], reps=len(times),
                           peak_bytes=pm.record.torch_peak_bytes if pm.record else None)
            except Exception as exc:
                rec.update(status="error", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            fn = None  # drop the inputs before the next measurement
            torch.cuda.empty_cache()
            log.write(json.dumps(rec) + "\n")
            log.flush()
    return 0


# -- parent ------------------------------------------------------------------------------------------------

def find_ncu() -> str | None:
    """ncu from $NCU, $PATH, /usr/local/cuda/bin or /opt/nvidia/nsight-compute/*/."""
    for c in [os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu",
              *sorted(str(p) for p in Path("/opt/nvidia/nsight-compute").glob("*/ncu"))[::-1]]:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def _versions() -> dict[str, Any]:
    v: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        import torch

        v.update(torch=torch.__version__, cuda=torch.version.cuda,
                 cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
        if torch.cuda.is_available():
            v["gpu"] = torch.cuda.get_device_name(0)
    except Exception as exc:
        v["torch_error"] = str(exc)
    for cmd, key in ((["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], "driver"),):
        try:
            v[key] = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            v[key] = None
    ncu = find_ncu()
    if ncu:
        try:
            v["ncu"] = subprocess.run([ncu, "--version"], capture_output=True, text=True,
                                      timeout=30).stdout.strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError, IndexError):
            v["ncu"] = ncu
    try:
        import flash_attn

        v["flash_attn"] = getattr(flash_attn, "__version__", "?")
    except Exception:
        v["flash_attn"] = None
    return v


def attribute(log: list[dict[str, Any]], segs: list[list[dict[str, Any]]] | None) -> tuple[list[dict], str]:
    """One row per measurement: measured bytes where a segment matches, else the byte model."""
    profiled = [r for r in log if r.get("profiled")]
    note = ""
    if segs is not None and len(segs) != len(profiled):
        note = (f"ncu gave {len(segs)} marker segments for {len(profiled)} profiled measurements: counters not "
                "attributed, byte model used")
        segs = None
    it = iter(segs or [])
    rows = []
    for r in log:
        cfg = CONFIGS[r["config"]]
        row = dict(impl=r["impl"], config=r["config"], **{"pass": r["pass"]}, status=r["status"],
                   reason=r.get("reason"), gflops=flops(cfg, r["pass"]) / 1e9, ms=r.get("ms"),
                   peak_bytes=r.get("peak_bytes"), model_bytes=byte_model(r["impl"], cfg, r["pass"]))
        seg = next(it) if (segs is not None and r.get("profiled")) else None
        if r["status"] == "ran" and seg is not None:
            row.update(source="ncu", kernels=len(seg),
                       read_bytes=sum(k.get("dram__bytes_read.sum", 0.0) for k in seg),
                       write_bytes=sum(k.get("dram__bytes_write.sum", 0.0) for k in seg),
                       kernel_ms=sum(k.get("gpu__time_duration.sum", 0.0) for k in seg) * 1e3,
                       kernel_names=sorted({k["name"][:120] for k in seg}))
        elif r["status"] == "ran":
            row.update(source="model", read_bytes=None, write_bytes=None)
        rows.append(row)
    return rows, note


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.3f}"


def render_markdown(rep: dict[str, Any]) -> str:
    """The table: GFLOPs, HBM GB read + written, ms per implementation and pass, with the anchors beside."""
    v = rep.get("env") or rep.get("versions") or {}
    lines = [f"# HBM traffic per attention kernel ({v.get('gpu', 'no GPU')})", "",
             f"- created {rep['created']}; command `{rep['command']}`",
             f"- torch {v.get('torch')}, CUDA {v.get('cuda')}, cuDNN {v.get('cudnn')}, driver {v.get('driver')}, "
             f"ncu {v.get('ncu')}, flash_attn {v.get('flash_attn')}",
             "- GB = 1e9 bytes of DRAM traffic summed over the pass's kernels (ncu flushes L2 before each kernel, "
             "so re-reads across kernels count; writes still held in L2 when the last kernel ends are not counted, "
             "which is why a 4 MiB output can read as 0.000 written); kernel ms = ncu's summed kernel durations "
             "(cold L2); ms = median CUDA-event time of the whole pass outside ncu, launch overheads included; "
             "peak GiB = torch allocator peak during one pass above what was allocated before it (inputs, and the "
             "outputs cuda-fa1/fa2 write into, are allocated before: 0.000)", ""]
    for name, cfg in CONFIGS.items():
        rows = [r for r in rep["rows"] if r["config"] == name]
        if not rows:
            continue
        lines += [f"## {name}: B={cfg['B']}, H={cfg['H']}, N={cfg['N']}, d={cfg['d']}, fp16", ""]
        pc = rep.get("per_config", {}).get(name)
        if pc:
            lines += [f"Bytes: {pc['source']}" + (f" ({pc['note']})" if pc.get("note") else "") + ".", ""]
        if name == "seeds":
            lines += [f"Seeds' arithmetic (naive forward, intermediates only): "
                      f"{seeds_intermediate_bytes(cfg['N']) / 2**30:.0f} GiB = "
                      f"{seeds_intermediate_bytes(cfg['N']) / 1e9:.3f} GB per head.", ""]
        if name == "fa1_paper":
            p = PAPER_FA1
            lines += [f"FA1 paper, A100, fwd+bwd: standard {p['standard']['gflops']} GFLOPs, {p['standard']['hbm_gb']} "
                      f"GB HBM, {p['standard']['ms']} ms; FlashAttention {p['flashattention']['gflops']} GFLOPs, "
                      f"{p['flashattention']['hbm_gb']} GB, {p['flashattention']['ms']} ms. (The paper's GFLOPs do "
                      "not follow the 4BHN^2d convention used in this table's column, and its standard attention "
                      "also masks and applies dropout, each one more N x N pass; `naive` here is the three steps "
                      "alone.)", ""]
        lines += ["| impl | pass | GFLOPs | HBM GB read | HBM GB written | HBM GB total | model GB | kernels | "
                  "kernel ms | ms | peak GiB | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if r["status"] != "ran":
                lines.append(f"| {r['impl']} | {r['pass']} | {r['gflops']:.1f} | | | | {_gb(r['model_bytes'])} "
                             f"| | | | | {r['status']}: {(r['reason'] or '')[:140]} |")
                continue
            rb, wb = r.get("read_bytes"), r.get("write_bytes")
            tot = None if rb is None else rb + wb
            peak = "-" if r.get("peak_bytes") is None else f"{r['peak_bytes'] / 2**30:.3f}"
            kms = "-" if r.get("kernel_ms") is None else f"{r['kernel_ms']:.3f}"
            lines.append(f"| {r['impl']} | {r['pass']} | {r['gflops']:.1f} | {_gb(rb)} | {_gb(wb)} | {_gb(tot)} | "
                         f"{_gb(r['model_bytes'])} | {r.get('kernels', '-')} | {kms} | "
                         f"{r['ms']:.3f} | {peak} | {r.get('source', '')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _plan(configs: Sequence[str], impls: Sequence[str]) -> list[dict[str, str]]:
    return [dict(config=c, impl=i, **{"pass": p}) for c in configs for i in impls for p in PASSES]


def _measure_config(name: str, impls: Sequence[str], out: Path, reps: int, ncu: str | None, timeout: float,
                    env: dict[str, str]) -> tuple[list[dict], str, str]:
    """One child process (under ncu when given) for one configuration: (rows, bytes source, note)."""
    plan_path, log_path = out / f"hbm_plan_{name}.json", out / f"hbm_log_{name}.jsonl"
    csv_path = out / f"ncu_{name}.csv"
    plan_path.write_text(json.dumps(_plan([name], impls)))
    for p in (log_path, csv_path):
        p.unlink(missing_ok=True)
    child = [sys.executable, __file__, "--out", str(out),
             "--reps", str(reps),
             "--child", str(plan_path), str(log_path)]
    note, segs, source = "", None, "model (no ncu)"
    if ncu is not None:
        cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--cache-control", "all",
               "--print-units", "base", "--metrics", ",".join(METRICS), "--csv", "--log-file", str(csv_path)] + child
        try:
            p = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
            with open(out / "ncu_stderr.txt", "a") as f:
                f.write(f"== {name}: exit {p.returncode}\n{(p.stdout or '')[-8000:]}{(p.stderr or '')[-8000:]}\n")
            kernels = parse_ncu_csv(csv_path.read_text()) if csv_path.exists() else []
            if kernels and any(k.get("dram__bytes_read.sum", 0) > 0 for k in kernels):
                segs, source = segments(kernels), "ncu"
            else:
                note = f"ncu ran (exit {p.returncode}) but reported no DRAM counters (ncu_stderr.txt)"
                source = "model (ncu read no counters)"
        except subprocess.TimeoutExpired:
            note, source = f"the ncu run exceeded {timeout:.0f} s; measurements not logged were not run", \
                "model (ncu timed out)"
    if ncu is None or (segs is None and not log_path.exists()):
        try:
            subprocess.run(child, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            note += f"; the timing run exceeded {timeout:.0f} s"
    log = [json.loads(x) for x in log_path.read_text().splitlines() if x.strip()] if log_path.exists() else []
    rows, seg_note = attribute(log, segs)
    if seg_note:
        note, source = seg_note, "model (ncu segments did not match)"
    return rows, source, note


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/hbm_traffic.py",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for hbm_traffic.json and hbm_traffic.md")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=list(IMPLS))
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per measurement (default 10)")
    ap.add_argument("--no-ncu", action="store_true", help="time only; bytes from the model")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds for each configuration's child process (default 300)")
    ap.add_argument("--rebuild", metavar="RAW_DIR",
                    help="run nothing: recompute the table from the files an earlier run left in RAW_DIR")
    ap.add_argument("--child", nargs=2, metavar=("PLAN", "LOG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child[0], args.child[1], args.reps)
    if args.rebuild:
        rebuild(Path(args.rebuild), Path(args.out))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                                  os.environ.get("PYTHONPATH", "")) if p))
    ncu = None if args.no_ncu else find_ncu()
    t0 = time.time()
    rows: list[dict] = []
    per_config: dict[str, dict[str, str]] = {}
    for name in args.configs:
        got, source, note = _measure_config(name, args.impls, out, args.reps, ncu, args.timeout, env)
        rows += got
        per_config[name] = {"source": source, "note": note}
    rep = {"created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "command": "python tools/hbm_traffic.py "
                      + " ".join(sys.argv[1:] if argv is None else argv),
           "env": _versions(), "per_config": per_config, "seconds": round(time.time() - t0, 1),
           "configs": CONFIGS, "paper_fa1": PAPER_FA1, "metrics": METRICS, "rows": rows}
    rep["env"]["date"] = rep["created"]
    rep["method"] = {"command": rep["command"]}
    return _write(out, rep)


def rebuild(raw: Path, out: Path | None = None) -> dict[str, Any]:
    """Recompute the rows of an earlier run from the files it left in `raw` (child logs, ncu CSVs) and write the
    table to `out` (default `raw`), keeping the run's versions, command and date (from ``hbm_traffic.json`` in
    `out`, else in `raw`): the parser can change without a new device run."""
    out = raw if out is None else out
    prev = out / "hbm_traffic.json" if (out / "hbm_traffic.json").is_file() else raw / "hbm_traffic.json"
    rep = json.loads(prev.read_text())
    rows: list[dict] = []
    for name, pc in rep.get("per_config", {}).items():
        log_path, csv_path = raw / f"hbm_log_{name}.jsonl", raw / f"ncu_{name}.csv"
        log = [json.loads(x) for x in log_path.read_text().splitlines() if x.strip()] if log_path.exists() else []
        kernels = parse_ncu_csv(csv_path.read_text()) if csv_path.exists() else []
        segs = segments(kernels) if pc.get("source") == "ncu" and kernels else None
        got, note = attribute(log, segs)
        rows += got
        if note:
            pc.update(source="model (ncu segments did not match)", note=note)
    if "versions" in rep:  # the first H200 run wrote "versions"; reports.index reads "env" and "method"
        rep["env"] = dict(rep.pop("versions"), date=rep["created"])
        rep["method"] = {"command": rep["command"]}
    rep["rows"] = rows
    rep["rebuilt"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    _write(out, rep)
    return rep


def _write(out: Path, rep: dict[str, Any]) -> int:
    (out / "hbm_traffic.json").write_text(json.dumps(rep, indent=1))
    md = render_markdown(rep)
    (out / "hbm_traffic.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
