"""GPU checks of attn_fa1_fwd, attn_fa1_bwd and attn_fa2_bwd against a float64 autograd reference.

The reference implements oracles/SEMANTICS.md §3-§9 directly in torch float64 (score pipeline
scale -> softcap -> mask, causal in both alignments, window, GQA, varlen, fully masked rows: O = 0,
LSE = -inf, zero gradients) and differentiates it with autograd. A kernel passes a case when each
output's max abs error is within ``2 * baseline + atol``, where baseline is the error of the same
reference evaluated by torch in the input dtype (fp16/bf16 math; fp32 for the LSE) - the rule of
flash-attention's own test suite - and fully masked rows are exactly O = 0, LSE = -inf, dQ = 0.
Padded varlen rows of O/LSE are not compared (the kernels leave them unwritten, attn_params.h).

Run on a CUDA machine: ``python -m pytest -q -m gpu tests/kernels/test_cuda_bwd_device.py``, or
``python tests/kernels/test_cuda_bwd_device.py [--bench] [--out DIR]`` for the table and timings
(CUDA events, warm-up, median of >= 20) against torch SDPA's flash backend.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field

import pytest

torch = pytest.importorskip("torch")

__all__ = ["CASES", "BwdCase", "check_case", "reference"]

HAS_CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.backward]


@dataclass(frozen=True)
class BwdCase:
    """One shape / semantics point; ``id`` names it in failure messages."""

    id: str
    dtype: str
    d: int
    Lq: int
    Lk: int
    B: int = 2
    Hq: int = 4
    Hkv: int = 4
    causal: bool = False
    alignment: str = "bottom_right"
    window: tuple = (None, None)
    softcap: float = 0.0
    scale: float | None = None
    seqlens_q: tuple | None = None
    seqlens_k: tuple | None = None
    misaligned: bool = False  # q/k/v/dout rows not 16-byte aligned -> SIMT fallback in attn_fa2_bwd
    expect_masked_rows: bool = False
    extra: dict = field(default_factory=dict)


CASES = [
    BwdCase("bf16-d64-square", "bf16", 64, 128, 128),
    BwdCase("bf16-d128-causal-br-gqa-tails", "bf16", 128, 173, 301, Hkv=2, causal=True),
    BwdCase("fp16-d128-causal-tl-tails", "fp16", 128, 301, 173, causal=True, alignment="top_left"),
    BwdCase("bf16-d256-window-32-8", "bf16", 256, 200, 200, window=(32, 8)),
    BwdCase("fp16-d64-varlen-causal-gqa4", "fp16", 64, 128, 160, Hkv=1, causal=True,
            seqlens_q=(100, 37), seqlens_k=(80, 150)),
    BwdCase("bf16-d128-softcap", "bf16", 128, 96, 96, softcap=5.0, scale=0.5),
    BwdCase("bf16-d64-causal-br-masked-rows", "bf16", 64, 200, 100, causal=True, expect_masked_rows=True),
    BwdCase("fp16-d256-left-window-tl", "fp16", 256, 257, 257, window=(16, None), alignment="top_left", causal=True),
    BwdCase("bf16-d128-misaligned-fallback", "bf16", 128, 70, 90, misaligned=True, Hkv=2),
    BwdCase("bf16-d256-varlen-window-gqa", "bf16", 256, 96, 130, Hkv=2, window=(20, 40),
            seqlens_q=(96, 50), seqlens_k=(0, 130)),
    BwdCase("fp16-d64-long-causal", "fp16", 64, 1000, 1000, B=1, causal=True),
    # whole tiles, no masking: the unmasked epilogue of the d = 128 / 256 kernels
    BwdCase("bf16-d128-full-tiles", "bf16", 128, 256, 256, B=1),
    BwdCase("fp16-d256-full-tiles-gqa", "fp16", 256, 128, 128, B=1, Hkv=2),
]  # fmt: skip

_DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def visibility(c: BwdCase, device) -> torch.Tensor:
    """Bool [B, 1, Lq, Lk], True = key j visible to query i (SEMANTICS.md §4, §5, §7)."""
    i = torch.arange(c.Lq, device=device)[:, None]
    j = torch.arange(c.Lk, device=device)[None, :]
    left, right = c.window
    if c.causal:
        right = 0 if right is None else min(right, 0)
    out = []
    for b in range(c.B):
        sq = c.Lq if c.seqlens_q is None else c.seqlens_q[b]
        sk = c.Lk if c.seqlens_k is None else c.seqlens_k[b]
        off = sk - sq if c.alignment == "bottom_right" else 0
        vis = (i < sq) & (j < sk)
        if right is not None:
            vis &= j <= i + off + right
        if left is not None:
            vis &= j >= i + off - left
        out.append(vis)
    return torch.stack(out)[:, None]


def reference(c: BwdCase, q, k, v, dout, dtype):
    """(o, lse, dq, dk, dv) of the case's semantics computed in ``dtype`` with autograd."""
    q, k, v, dout = (t.detach().to(dtype) for t in (q, k, v, dout))
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    G = c.Hq // c.Hkv
    ke, ve = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    scale = c.scale if c.scale is not None else 1.0 / math.sqrt(c.d)
    s = scale * q @ ke.transpose(-1, -2)
    if c.softcap:
        s = c.softcap * torch.tanh(s / c.softcap)
    vis = visibility(c, q.device)
    s = s.masked_fill(~vis, -math.inf)
    m = s.amax(-1, keepdim=True)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    p = torch.exp(s - m_safe)
    l = p.sum(-1, keepdim=True)
    l_safe = torch.where(l > 0, l, torch.ones_like(l))
    o = (p @ ve) / l_safe
    lse = (torch.log(l) + m_safe).squeeze(-1)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout)
    return o.detach(), lse.detach(), dq, dk, dv


def _inputs(c: BwdCase, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = _DT[c.dtype]

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", generator=g).to(dt)

    if c.misaligned:  # rows of d + 4 elements: row stride not a multiple of 8 -> not 16-byte aligned

        def rnd_view(B, H, L):
            return rnd(B, H, L, c.d + 4)[..., 2 : 2 + c.d]

        q, k, v, dout = (
            rnd_view(c.B, c.Hq, c.Lq),
            rnd_view(c.B, c.Hkv, c.Lk),
            rnd_view(c.B, c.Hkv, c.Lk),
            rnd_view(c.B, c.Hq, c.Lq),
        )
    else:
        q, k, v, dout = (
            rnd(c.B, c.Hq, c.Lq, c.d),
            rnd(c.B, c.Hkv, c.Lk, c.d),
            rnd(c.B, c.Hkv, c.Lk, c.d),
            rnd(c.B, c.Hq, c.Lq, c.d),
        )
    return q, k, v, dout


def _kwargs(c: BwdCase) -> dict:
    kw = dict(scale=c.scale, causal=c.causal, alignment=c.alignment, window=c.window, softcap=c.softcap or None)
    if c.seqlens_q is not None:
        kw["seqlens_q"] = torch.tensor(c.seqlens_q, dtype=torch.int32, device="cuda")
    if c.seqlens_k is not None:
        kw["seqlens_k"] = torch.tensor(c.seqlens_k, dtype=torch.int32, device="cuda")
    return kw


def _row_valid(c: BwdCase) -> torch.Tensor:
    """Bool [B, 1, Lq, 1]: rows inside the real query length (padded rows are unspecified for O/LSE)."""
    i = torch.arange(c.Lq, device="cuda")
    sq = torch.tensor(c.seqlens_q or (c.Lq,) * c.B, device="cuda")
    return (i[None, :] < sq[:, None])[:, None, :, None]


def _err(x, ref, valid=None) -> float:
    d = (x.double() - ref.double()).abs()
    if valid is not None:
        d = torch.where(valid, d, torch.zeros_like(d))
    d = torch.nan_to_num(d, nan=math.inf)
    return float(d.max()) if d.numel() else 0.0


def check_case(c: BwdCase, seed: int = 0) -> dict:
    """Run FA1 fwd, FA1 bwd and FA2 bwd on one case; return errors, bounds and the verdict."""
    from attention_conformance.kernels import cuda_bwd_lib as L

    q, k, v, dout = _inputs(c, seed)
    ref = reference(c, q, k, v, dout, torch.float64)
    base = list(reference(c, q, k, v, dout, _DT[c.dtype]))  # same math in the input dtype (FA suite rule)
    base[1] = reference(c, q, k, v, dout, torch.float32)[1]  # LSE baseline: fp32 (kernels write fp32 LSE)
    kw = _kwargs(c)
    o, lse = L.fa1_forward(q, k, v, **kw)
    valid = _row_valid(c)
    res: dict = {"case": c.id, "fails": []}
    fin = torch.isfinite(ref[1])

    def judge(name, x, r, b, vmask=None, atol=2e-3):
        e, eb = _err(x, r, vmask), _err(b, r, vmask)
        tol = 2 * eb + atol
        res[name] = {"err": e, "baseline": eb, "tol": tol}
        if not e <= tol:
            res["fails"].append(f"{name}: max|err|={e:.3e} > tol={tol:.3e} (baseline {eb:.3e})")

    judge("fa1_fwd.o", o, ref[0], base[0], valid)
    zero = torch.zeros_like(lse)
    judge(
        "fa1_fwd.lse",
        torch.where(fin, lse, zero),
        torch.where(fin, ref[1], zero.double()),
        torch.where(fin, base[1], zero),
        valid[..., 0],
        atol=1e-3,
    )
    masked = (~fin) & valid[..., 0]
    if bool(masked.any()):
        if not bool((lse[masked] == -math.inf).all()):
            res["fails"].append("fa1_fwd.lse: fully masked rows must be -inf")
        if not bool((o[masked.unsqueeze(-1).expand_as(o)] == 0).all()):
            res["fails"].append("fa1_fwd.o: fully masked rows must be 0")
    if c.expect_masked_rows and not bool(masked.any()):
        res["fails"].append("case was meant to contain fully masked rows but has none")
    # Backward on the kernel's own forward (O, LSE), as a training step would run it.
    o_in = torch.where(valid, o, torch.zeros_like(o))
    for launcher in ("attn_fa1_bwd", "attn_fa2_bwd"):
        dq, dk, dv = L.backward(launcher, q, k, v, o_in, lse, dout, **kw)
        tag = launcher[5:]
        for name, x, r, b in (("dq", dq, ref[2], base[2]), ("dk", dk, ref[3], base[3]), ("dv", dv, ref[4], base[4])):
            judge(f"{tag}.{name}", x, r, b)
            if not bool(torch.isfinite(x).all()):
                res["fails"].append(f"{tag}.{name}: non-finite values")
        if bool(masked.any()) and not bool((dq[masked.unsqueeze(-1).expand_as(dq)] == 0).all()):
            res["fails"].append(f"{tag}.dq: fully masked rows must have dq = 0")
    res["ok"] = not res["fails"]
    return res


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fa1_fwd_and_backwards_match_fp64(case: BwdCase):
    try:
        from attention_conformance.kernels import cuda_lib

        cuda_lib.library()
    except Exception as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"kernel library unavailable: {e}")
    res = check_case(case)
    assert res["ok"], f"{case.id} ({asdict(case)}): " + "; ".join(res["fails"]) + f"\nrepro: check_case({case!r})"


def _time_ms(fn, warmup: int = 5, reps: int = 20) -> float:
    from attention_conformance.kernels.timing import cuda_event_median_ms

    return cuda_event_median_ms(fn, reps, warmup)


def bench(B=4, H=16, N=8192, d=128, causal=False, reps=20, variants=("default",)) -> dict:
    """Median ms of attn_fa2_bwd vs torch SDPA flash backward on the same inputs (bf16)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attention_conformance.kernels import cuda_bwd_lib as L
    from attention_conformance.kernels import cuda_lib

    q, k, v, dout = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
    o, lse = out[0], out[1]
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        og = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
    t_torch = _time_ms(lambda: torch.autograd.grad(og, (qg, kg, vg), dout, retain_graph=True), reps=reps)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    scratch = L.bwd_scratch(q, k)
    p = L.bwd_params(q, k, v, o, lse, dout, dq, dk, dv, causal=causal, alignment="top_left", **scratch)
    flops = 2.5 * 4 * B * H * N * N * d / (2 if causal else 1)
    row = {
        "B": B,
        "H": H,
        "N": N,
        "d": d,
        "causal": causal,
        "torch_flash_bwd_ms": t_torch,
        "torch_flash_bwd_tflops": flops / t_torch / 1e9,
    }
    tq, tk, tv = torch.autograd.grad(og, (qg, kg, vg), dout, retain_graph=True)
    try:  # cuDNN's backward on the same inputs (its own forward's o / stats), where torch offers it
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            oc = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        t_cudnn = _time_ms(lambda: torch.autograd.grad(oc, (qg, kg, vg), dout, retain_graph=True), reps=reps)
        row["cudnn_bwd_ms"], row["cudnn_bwd_tflops"] = t_cudnn, flops / t_cudnn / 1e9
    except Exception as e:  # pragma: no cover - depends on the torch build
        row["cudnn_bwd_error"] = f"{type(e).__name__}: {e}"[:200]
    for var in variants:
        if var == "default":
            os.environ.pop("ATTN_FA2_BWD_VARIANT", None)
        else:
            os.environ["ATTN_FA2_BWD_VARIANT"] = var
        t = _time_ms(lambda: cuda_lib.call("attn_fa2_bwd", p), reps=reps)
        row[f"fa2_bwd_{var}_ms"] = t
        row[f"fa2_bwd_{var}_tflops"] = flops / t / 1e9
        row[f"ratio_{var}"] = t_torch / t
        # Same-inputs agreement with torch's flash gradients (both bf16): sanity check of the big shape.
        dq.fill_(float("nan")), dk.fill_(float("nan")), dv.fill_(float("nan"))
        cuda_lib.call("attn_fa2_bwd", p)
        row[f"diff_{var}"] = [float((a.float() - b.float()).abs().max()) for a, b in ((dq, tq), (dk, tk), (dv, tv))]
    os.environ.pop("ATTN_FA2_BWD_VARIANT", None)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--fa1", action="store_true", help="with --bench: also time the FA1 reference kernels")
    ap.add_argument("--variants", default="", help="comma-separated ATTN_FA2_BWD_VARIANT values to re-check")
    ap.add_argument(
        "--bench-variants",
        default="",
        help="ATTN_FA2_BWD_VARIANT values to time too (needs a library built with -DATTN_BWD_TUNING_VARIANTS)",
    )
    ap.add_argument("--only", default="", help="comma-separated case ids (default: all)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    only = [x for x in args.only.split(",") if x]
    cases = [c for c in CASES if not only or c.id in only]
    results = []
    for i, c in enumerate(cases):
        results.append(check_case(c, seed=i))
        print(results[-1], flush=True)
    report = {"correctness": results, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    lines = []
    for r in results:
        worst = max((v["err"] / v["tol"] for k, v in r.items() if isinstance(v, dict)), default=0)
        lines.append(
            f"{'PASS' if r['ok'] else 'FAIL'} {r['case']:34s} worst err/tol={worst:.2f} " + "; ".join(r["fails"])
        )
    for var in [v for v in args.variants.split(",") if v]:
        os.environ["ATTN_FA2_BWD_VARIANT"] = var
        for i, c in enumerate(cases):
            r = check_case(c, seed=100 + i)
            ok = not [f for f in r["fails"] if f.startswith("fa2_bwd")]
            lines.append(f"{'PASS' if ok else 'FAIL'} variant={var} {c.id}: " + "; ".join(r["fails"]))
        os.environ.pop("ATTN_FA2_BWD_VARIANT", None)
    if args.bench:
        rows = []
        for kw in (
            dict(N=8192, d=128),
            dict(N=8192, d=128, causal=True),
            dict(N=8192, d=64),
            dict(N=8192, d=256),
        ):
            var = tuple(["default"] + [v for v in args.bench_variants.split(",") if v])
            rows.append(bench(**kw, variants=var))
        report["bench"] = rows
        for r in rows:
            extra = "  ".join(
                f"{k[8:]}={r[k]:.2f}ms({r[k.replace('_ms', '_tflops')]:.0f}TF, x{r['ratio_' + k[8:-3]]:.2f})"
                for k in r
                if k.startswith("fa2_bwd_") and k.endswith("_ms")
            )
            cudnn = f"cudnn {r['cudnn_bwd_ms']:.2f}ms" if "cudnn_bwd_ms" in r else r.get("cudnn_bwd_error", "")
            lines.append(
                f"N={r['N']} d={r['d']} causal={r['causal']}: torch-flash bwd {r['torch_flash_bwd_ms']:.2f}ms "
                f"({r['torch_flash_bwd_tflops']:.0f}TF)  {cudnn}  {extra}"
            )
        # FA1 reference forward/backward, reported only (fp32 SIMT).
        from attention_conformance.kernels import cuda_bwd_lib as L

        if not args.fa1:
            return _finish(args, report, lines, results)
        q, k, v, dout = (torch.randn(4, 16, 2048, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        t1 = _time_ms(lambda: L.fa1_forward(q, k, v), warmup=2, reps=5)
        o, lse = L.fa1_forward(q, k, v)
        t2 = _time_ms(lambda: L.backward("attn_fa1_bwd", q, k, v, o, lse, dout), warmup=2, reps=5)
        fl = 4 * 4 * 16 * 2048 * 2048 * 128
        report["fa1"] = {
            "shape": "4x16x2048x128 bf16",
            "fwd_ms": t1,
            "fwd_tflops": fl / t1 / 1e9,
            "bwd_ms": t2,
            "bwd_tflops": 2.5 * fl / t2 / 1e9,
        }
        lines.append(f"FA1 {report['fa1']}")
    return _finish(args, report, lines, results)


def _finish(args, report, lines, results) -> int:
    if "bench" in report:
        for r in report["bench"]:
            lines.append(str({k: v for k, v in r.items() if k.startswith("diff_")}))
    with open(os.path.join(args.out, "bwd_results.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print("\n".join(lines))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    sys.exit(main())
