"""Device check + benchmark of the CUDA forward kernels (FA2 forward, split-KV decoding) on one GPU (lab script).

``python tools/cuda_fwd_check_bench.py [--out DIR] [--quick] [--skip-bench]``

1. Correctness: the device check of `attention_conformance.kernels.check.forward` on every case below (fresh
   random inputs per case through attn_fa2_fwd / attn_splitkv_fwd, outputs poisoned with NaN between guard bands,
   the conformance judge's verdict against the FP64 oracle under the a-priori bounds of conformance/TOLERANCES.md).
2. Timing (CUDA events, warm-up, median of >= 20 launches) side by side with torch SDPA's flash
   and cuDNN backends on the same inputs; TFLOPs/s = 4*B*H*Lq*Lk*d (halved for causal).

Prints a short table last and writes JSON (and a Markdown table) under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from checkout_commit import checkout_commit
from timing_md import TIMING_NOTE, by_gpu_time, env_line, host_table
from vendor_rows import flashinfer_paged_decode_fn

from attention_conformance.kernels import cuda_lib
from attention_conformance.kernels.check.forward import check_forward
from attention_conformance.kernels.timing import time_round_robin

#: FA1 is timed at N up to this only: it runs at ~9 TFLOPs/s (14.7 ms a call at N = 2048, d = 128 in tox -e bench on
#: an H100), so ~0.23 s a call at N = 8192 and tens of seconds per row of rounds (on the H100 this step's 240 s
#: ended before its first row)
FA1_MAX_N = 2048
#: the copy that gives this card's copy bandwidth, the decode bar's reference (issue 40: 90% of it): the size of the
#: B = 4 decode row's K and V together
COPY_BYTES = 2 * 4 * 8 * 131072 * 128 * 2
#: the decode bar, as a fraction of the copy bandwidth
DECODE_BAR = 0.9
ROUNDS = 3  # each row's candidates timed in turn, ROUNDS times (odd rounds backwards); the median of the rounds

__all__ = ["correctness", "env_info", "main", "sdpa_fn", "time_fn"]


def correctness(quick):
    bf, hf = torch.bfloat16, torch.float16
    cases = []
    for d in (64, 128, 256):
        for dt in (bf, hf):
            cases.append(dict(B=2, Hq=4, Hkv=2, Lq=200, Lk=333, d=d, dtype=dt))
            cases.append(dict(B=2, Hq=4, Hkv=4, Lq=257, Lk=129, d=d, dtype=dt, causal=True))
            cases.append(dict(B=1, Hq=2, Hkv=1, Lq=300, Lk=77, d=d, dtype=dt, causal=True, bottom_right=False))
    more = [
        dict(B=2, Hq=8, Hkv=2, Lq=513, Lk=1000, d=128, dtype=bf, causal=True),
        dict(B=1, Hq=2, Hkv=2, Lq=1, Lk=1, d=128, dtype=bf),
        dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=64, dtype=hf),
        dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, d=128, dtype=bf, window=(50, 20)),
        dict(B=2, Hq=4, Hkv=1, Lq=190, Lk=500, d=64, dtype=hf, window=(30, None), causal=True),
        dict(B=2, Hq=4, Hkv=1, Lq=300, Lk=100, d=128, dtype=bf, window=(None, 5), bottom_right=False),
        dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=128, dtype=bf, varlen=True, causal=True),
        dict(B=3, Hq=4, Hkv=2, Lq=150, Lk=260, d=64, dtype=hf, varlen=True),
        dict(B=2, Hq=4, Hkv=2, Lq=128, Lk=256, d=128, dtype=bf, softcap=5.0, causal=True),
        dict(B=2, Hq=4, Hkv=2, Lq=100, Lk=300, d=256, dtype=hf, layout="bshd"),
        dict(B=2, Hq=4, Hkv=4, Lq=1024, Lk=1024, d=128, dtype=bf, causal=True),
    ]
    cases += more
    results = []
    for i, c in enumerate(cases):
        results.append(check_forward("attn_fa2_fwd", seed=i, **c))
    split_cases = [
        dict(B=1, Hq=32, Hkv=8, Lq=1, Lk=4099, d=128, dtype=bf),
        dict(B=2, Hq=32, Hkv=8, Lq=1, Lk=20000, d=128, dtype=bf, num_splits=7),
        dict(B=2, Hq=8, Hkv=2, Lq=16, Lk=3000, d=128, dtype=hf, causal=True),
        dict(B=2, Hq=16, Hkv=2, Lq=5, Lk=777, d=64, dtype=bf, causal=True, bottom_right=False),
        dict(B=2, Hq=4, Hkv=4, Lq=3, Lk=1000, d=256, dtype=hf, window=(100, 0)),
        dict(B=3, Hq=8, Hkv=2, Lq=4, Lk=900, d=128, dtype=bf, varlen=True),
        dict(B=1, Hq=8, Hkv=1, Lq=2, Lk=50, d=128, dtype=bf, num_splits=16),
        dict(B=1, Hq=4, Hkv=2, Lq=1, Lk=0, d=128, dtype=bf),
        dict(B=1, Hq=8, Hkv=2, Lq=1, Lk=2000, d=128, dtype=bf, softcap=10.0),
        dict(B=2, Hq=4, Hkv=2, Lq=40, Lk=600, d=128, dtype=bf, causal=True),
    ]
    for i, c in enumerate(split_cases):
        results.append(check_forward("attn_splitkv_fwd", seed=100 + i, **c))
    return results


def time_fn(fn, warmup=5, reps=25):
    """(median, min, max) GPU time per call in ms (`kernels.timing.measure`: graph replay, or back-to-back launches
    where the call cannot be captured), over the samples."""
    from attention_conformance.kernels.timing import measure

    t = measure(fn, reps=reps, warmup=warmup)
    return t.gpu_ms, min(t.gpu_samples_ms), max(t.gpu_samples_ms)


def sdpa_fn(backend, q, k, v, causal, gqa=False):
    from torch.nn.attention import sdpa_kernel

    def f():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    return f


def copy_row(nbytes: int = COPY_BYTES) -> dict:
    """This card's copy bandwidth: the faster of two copies of `nbytes` on the device, by GPU time, in TB/s of the bytes
    read and written (2 x `nbytes`): ``dst.copy_(src)`` (a device-to-device memcpy: captured in a CUDA graph it is a
    memcpy node, which the copy engines carry: 2.44 TB/s on an H100 where the same call launched eagerly took 2.99 by
    wall time) and ``torch.neg(src, out=dst)`` over float32 (an element-wise kernel: the SMs load and store every
    byte, as the decode kernel does). The reference of the decode rows (their reads over it, `DECODE_BAR`)."""
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    row: dict = dict(kernel="copy", bytes=nbytes)
    time_round_robin(row, [("copy", lambda: dst.copy_(src)), ("copy_sm", lambda: torch.neg(src, out=dst))], 0.0,
                     ROUNDS)
    for who in ("copy", "copy_sm"):
        if f"{who}_ms" in row:
            row[f"{who}_TBps"] = 2 * nbytes / row[f"{who}_ms"] / 1e9
    if "copy_TBps" in row or "copy_sm_TBps" in row:
        row["copy_by"] = max(("copy", "copy_sm"), key=lambda w: row.get(f"{w}_TBps", 0.0))
        row["bandwidth_TBps"] = row[f"{row['copy_by']}_TBps"]
    return row


def bench(quick, row_done=None):
    """This card's copy bandwidth (`copy_row`), the decode rows (split-KV, the TB/s bar: their reads over the copy
    bandwidth), then FA2 forward's rows at N = 8192 for each head dim, then the N sweep at d = 128; `row_done(rows so
    far)` after each row (a run its time limit cuts short keeps them)."""
    from torch.nn.attention import SDPBackend

    rows = [copy_row()]
    copy_tbps = rows[0].get("bandwidth_TBps")
    shapes = [(4, 16, 8192, d, c) for d in (128, 64, 256) for c in (False, True)]
    shapes += [(4, 16, n, 128, c) for n in (1024, 2048, 4096, 16384) for c in (False, True)]
    if quick:
        shapes = [(4, 16, 8192, 128, False), (4, 16, 8192, 128, True), (4, 16, 8192, 64, False),
                  (4, 16, 8192, 256, False)]
    # decoding: Lq=1, Lk=128k, Hq=32, Hkv=8, d=128, B=1 (and B=4)
    for B in (1, 4):
        Lk = 131072
        q = torch.randn(B, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, 8, Lk, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        lse = torch.empty(B, 32, 1, device="cuda", dtype=torch.float32)
        p = cuda_lib.fwd_params(q, k, v, o, lse)
        splits = cuda_lib.splitkv_num_splits(p)
        part_o = torch.empty(splits * B * 32 * 128, device="cuda", dtype=torch.float32)
        part_l = torch.empty(splits * B * 32, device="cuda", dtype=torch.float32)
        p2 = cuda_lib.fwd_params(q, k, v, o, lse, num_splits=splits, o_partial=part_o, lse_partial=part_l)
        bytes_moved = 2 * B * 8 * Lk * 128 * 2
        row = dict(kernel="splitkv_decode", B=B, Hq=32, Hkv=8, Lq=1, Lk=Lk, d=128, num_splits=splits)
        cands = [("ours", cuda_lib.bind("attn_splitkv_fwd", p2)),
                 ("ours_autoalloc", lambda p=p: cuda_lib.call("attn_splitkv_fwd", p)),
                 ("flash", sdpa_fn(SDPBackend.FLASH_ATTENTION, q, k, v, False, gqa=True)),
                 ("cudnn", sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, False, gqa=True))]
        fi, note = flashinfer_paged_decode_fn(q, k, v)
        row["flashinfer_paged" + ("_call" if fi is not None else "_declined")] = note
        if fi is not None:
            cands.append(("flashinfer_paged", fi))
        time_round_robin(row, cands, 0.0, ROUNDS)
        for name, _ in cands:
            if name + "_ms" in row:
                row[name + "_TBps"] = bytes_moved / row[name + "_ms"] / 1e9
        for ref in ("flash", "cudnn", "flashinfer_paged"):
            if ref + "_ms" in row and "ours_ms" in row:
                row["ratio_vs_" + ref] = row[ref + "_ms"] / row["ours_ms"]
        if copy_tbps and "ours_TBps" in row:
            row["ours_of_copy"] = row["ours_TBps"] / copy_tbps
        rows.append(row)
        if row_done is not None:
            row_done(rows)
        del q, k, v
    for B, H, N, d, causal in shapes:
        q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        p = cuda_lib.fwd_params(q, k, v, o, lse, causal=causal)
        flops = 4 * B * H * N * N * d / (2 if causal else 1)
        row = dict(kernel="fa2_fwd", B=B, H=H, N=N, d=d, causal=causal)
        cands = [("ours", cuda_lib.bind("attn_fa2_fwd", p)),
                 ("flash", sdpa_fn(SDPBackend.FLASH_ATTENTION, q, k, v, causal)),
                 ("cudnn", sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, causal))]
        if N <= FA1_MAX_N:  # FA1, the fp32 SIMT reference
            cands.insert(1, ("fa1", cuda_lib.bind("attn_fa1_fwd", p)))
        time_round_robin(row, cands, flops, ROUNDS)
        if "ours_ms" in row:
            for ref in ("fa1", "flash", "cudnn"):
                if ref + "_ms" in row:
                    row["ratio_vs_" + ref] = row[ref + "_ms"] / row["ours_ms"]
        rows.append(row)
        if row_done is not None:
            row_done(rows)
        del q, k, v, o
    return rows


def env_info():
    """Where and when a table is measured: date, GPU, driver, versions, the library and the checkout's commit."""
    props = torch.cuda.get_device_properties(0)
    drv = os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null").read().strip()
    return dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), gpu=props.name,
                sms=props.multi_processor_count, driver=drv, cuda=torch.version.cuda, torch=torch.__version__,
                cudnn=torch.backends.cudnn.version(), python=platform.python_version(),
                library=str(cuda_lib.library_path()), commit=checkout_commit())


def _row_key(r: dict) -> tuple:
    if r["kernel"] == "copy":
        return r["kernel"], r["bytes"]
    return r["kernel"], r["B"], r.get("N", r.get("Lk")), r["d"], bool(r.get("causal"))


def _row_label(r: dict) -> str:
    """A row's name in the host table and the before table."""
    if r["kernel"] == "splitkv_decode":
        return f"decode B{r['B']} Lk{r['Lk']}"
    if r["kernel"] == "copy":
        return f"copy {r['bytes'] / 2**30:.0f} GiB"
    return f"FA2 B{r['B']} H{r['H']} N{r['N']} d{r['d']}" + (" causal" if r["causal"] else "")


def before_section(env: dict, rows: list[dict], previous: dict) -> list[str]:
    """Each row beside the same row of the set this one replaces (`previous`: its JSON): ours and ours / flash then
    and now, and what differs between the two runs (card, timer), so that a changed figure says by how much."""
    nan = float("nan")
    old = {_row_key(r): r for r in previous.get("bench", [])}
    penv = previous.get("env", {})
    timer = ("GPU time, as this one" if by_gpu_time(previous.get("bench", [])) else
             "CUDA events around each launch, the call's host time included")
    card = f"{penv.get('gpu', '?')}" + (" (another card)" if penv.get("gpu") != env["gpu"] else "")
    out = ["", f"Before: the set this one replaces ({penv.get('date', '?')}, {card}; timer: {timer}).", "",
           "| row | ours then | ours now | ours / flash then | now | change |", "|---|---|---|---|---|---|"]
    for r in rows:
        o = old.get(_row_key(r))
        if o is None or r["kernel"] == "copy":  # the copy is the decode bar's reference, not a kernel of ours
            continue
        unit = "TBps" if r["kernel"] == "splitkv_decode" else "tflops"
        was, now = o.get("ratio_vs_flash", nan), r.get("ratio_vs_flash", nan)
        out.append(f"| {_row_label(r)} | {o.get('ours_' + unit, nan):.2f} | {r.get('ours_' + unit, nan):.2f} | "
                   f"{was:.2f} | {now:.2f} | {now - was:+.2f} |")
    return out + ["", "ours: TFLOPs/s (FA2 forward) or TB/s (decoding)."]


def markdown(env, rows, previous: dict | None = None):
    out = [f"# CUDA forward kernels vs torch SDPA ({env['gpu']})", "",
           env_line(env), "",
           "Reproduce: `python -m attention_conformance.kernels.build && "
           "python tools/cuda_fwd_check_bench.py --out DIR`", "",
           "| kernel | shape | causal | FA2 TFLOPs/s | FA1 | flash | cuDNN | FA2/FA1 | FA2/flash | FA2/cuDNN |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    nan = float("nan")
    for r in rows:
        if r["kernel"] == "fa2_fwd":
            out.append(f"| FA2 fwd | B{r['B']} H{r['H']} N{r['N']} d{r['d']} | {r['causal']} | "
                       + " | ".join(f"{r.get(k + '_tflops', nan):.0f}" for k in ("ours", "fa1", "flash", "cudnn"))
                       + " | " + " | ".join(f"{r.get('ratio_vs_' + k, nan):.2f}" for k in ("fa1", "flash", "cudnn"))
                       + " |")
    out += ["", "| decoding (split-KV) | splits | ours ms (TB/s) | flash ms | cuDNN ms | FlashInfer paged ms (TB/s) "
                "| ours/flash | ours/cuDNN | ours/FlashInfer |", "|---|---|---|---|---|---|---|---|---|"]
    dec = [r for r in rows if r["kernel"] == "splitkv_decode"]
    for r in dec:
        out.append(f"| B{r['B']} Hq32 Hkv8 Lq1 Lk{r['Lk']} d128 | {r['num_splits']} | "
                   f"{r.get('ours_ms', nan):.4f} ({r.get('ours_TBps', nan):.2f}) | "
                   f"{r.get('flash_ms', nan):.4f} | {r.get('cudnn_ms', nan):.4f} | "
                   f"{r.get('flashinfer_paged_ms', nan):.4f} ({r.get('flashinfer_paged_TBps', nan):.2f}) | "
                   f"{r.get('ratio_vs_flash', nan):.2f} | {r.get('ratio_vs_cudnn', nan):.2f} | "
                   f"{r.get('ratio_vs_flashinfer_paged', nan):.2f} |")
    notes = sorted({r.get("flashinfer_paged_call") or f"declined: {r['flashinfer_paged_declined']}"
                    for r in dec if "flashinfer_paged_call" in r or "flashinfer_paged_declined" in r})
    if notes:
        out += ["", "*FlashInfer paged*: " + "; ".join(notes) + ". TB/s: K and V bytes read once per call."]
    copy = next((r for r in rows if r["kernel"] == "copy" and "bandwidth_TBps" in r), None)
    if copy is not None:
        shares = ", ".join(f"B{r['B']} {r['ours_of_copy']:.0%}" for r in dec if "ours_of_copy" in r)
        out += ["", f"*Copy bandwidth* of this card: {copy['bandwidth_TBps']:.2f} TB/s, the faster of two copies of "
                    f"{copy['bytes'] / 2**30:.0f} GiB (bytes read + written, GPU time): an element-wise kernel "
                    f"(`torch.neg(src, out=dst)`, float32) {copy.get('copy_sm_TBps', nan):.2f} TB/s and "
                    f"`dst.copy_(src)` {copy.get('copy_TBps', nan):.2f} TB/s (a memcpy: in a CUDA graph the copy "
                    f"engines carry it); the decode rows read K and V at {shares or '-'} of it (the bar: "
                    f"{DECODE_BAR:.0%})."]
    out += ["", TIMING_NOTE, ""]
    out += host_table([r for r in rows if r["kernel"] == "fa2_fwd"], _row_label)
    out += [""] + host_table(dec + ([copy] if copy is not None else []), _row_label)
    if previous:
        out += before_section(env, rows, previous)
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "reports/latest/benchmarks"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--tag", default="", help="suffix of the output files (tuning variants)")
    ap.add_argument("--previous", default="", help="an earlier cuda_fwd.json: each row beside its figures")
    args = ap.parse_args(argv)
    prev = json.loads(Path(args.previous).read_text()) if args.previous else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = env_info()
    print(json.dumps(env), flush=True)
    t0 = time.time()
    res = [] if args.skip_check else correctness(args.quick)
    nbad = sum(not r["ok"] for r in res)
    for r in res:
        print(("OK  " if r["ok"] else "BAD ") + f"{r['case']:70s} err {r['rel_err']:.2e} lse {r['lse_err']:.1e} "
              + "; ".join(r["problems"]), flush=True)
    print(f"correctness: {len(res) - nbad}/{len(res)} ok ({time.time() - t0:.1f} s)", flush=True)

    def write(rows):
        (out / f"cuda_fwd{args.tag}.json").write_text(json.dumps(dict(env=env, correctness=res, bench=rows),
                                                                  indent=1))
        md = markdown(env, rows, prev)
        (out / f"cuda_fwd{args.tag}.md").write_text(md)
        return md

    rows = [] if args.skip_bench else bench(args.quick, row_done=write)
    print(write(rows))
    return 1 if nbad else 0


if __name__ == "__main__":
    sys.exit(main())
