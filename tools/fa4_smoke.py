"""Smoke test of every flash-attn-4 entry point on the GPU host, and probes of its sm90 limits.

Run on a machine with flash-attn-4 importable (tools/run_fa4.sh installs it):

    python3 tools/fa4_smoke.py --out DIR

Each probe calls FA4 directly (not through the harness) on small random bf16 inputs, compares with an FP32
torch reference (max |error|), and records the CUDA kernels the torch profiler saw and any exception FA4
raised, one JSON line per probe in DIR/fa4_smoke.jsonl plus a summary on stdout. A probe that raises
tells the adapter what to decline (conformance/adapters/flash_attn.py `FlashAttn4`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import traceback

import torch


def _ref(q, k, v, *, causal=False, window=None, softcap=None, scale=None, seqused_k=None, sink=None):
    """FP32 attention on [B, L, H, D] tensors (bottom-right causal/window, GQA by repetition)."""
    q, k, v = (x.float().transpose(1, 2) for x in (q, k, v))  # [B, H, L, D]
    B, Hq, Lq, d = q.shape
    g = Hq // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    Lk = k.shape[2]
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(d))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Lq, device=q.device)[:, None]
    j = torch.arange(Lk, device=q.device)[None, :]
    lens = seqused_k if seqused_k is not None else torch.full((B,), Lk, device=q.device)
    vis = torch.ones(B, 1, Lq, Lk, dtype=torch.bool, device=q.device)
    for b in range(B):
        n = int(lens[b])
        off = n - Lq
        m = j < n
        left, right = window if window is not None else (None, None)
        if causal:
            right = 0
        if right is not None:
            m = m & (j <= i + off + right)
        if left is not None:
            m = m & (j >= i + off - left)
        vis[b, 0] = m
    s = s.masked_fill(~vis, float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink.float()[None, :, None, None].expand(B, Hq, Lq, 1)], dim=-1)
        p = torch.softmax(s, -1)[..., :-1]
    else:
        p = torch.softmax(s, -1).nan_to_num(0.0)
    lse = torch.logsumexp(s, -1)
    return (p @ v).transpose(1, 2), lse


def _profiled(fn):
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        res = fn()
        torch.cuda.synchronize()
    names, others = [], set()
    for e in prof.events():
        if not str(getattr(e, "device_type", "")).endswith("CUDA"):
            continue
        if "flash" in e.name.lower() or "cutlass" in e.name:  # FA4's kernels; torch's own only counted
            if e.name not in names:
                names.append(e.name)
        else:
            others.add(e.name)
    return res, names, len(others)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import flash_attn.cute as fa

    info = {
        "flash-attn-4 (metadata)": importlib.metadata.version("flash-attn-4"),
        "flash_attn.cute.__version__": getattr(fa, "__version__", None),
        "nvidia-cutlass-dsl": importlib.metadata.version("nvidia-cutlass-dsl"),
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
    }
    print(json.dumps(info))
    dev, bf = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=bf, generator=gen)

    results = []

    def probe(name, fn):
        rec = {"probe": name}
        try:
            (err, extra), kernels, others = _profiled(fn)
            rec.update(ok=True, max_err=err, kernels=kernels, other_kernels=others, **extra)
        except Exception as exc:  # what FA4 raises is the finding
            rec.update(ok=False, error=f"{type(exc).__name__}: {str(exc).strip()[:300]}",
                       where=traceback.format_exc().strip().splitlines()[-3][:200])
        results.append(rec)
        status = f"ok err={rec['max_err']:.3g}" if rec["ok"] else f"RAISES {rec['error'][:160]}"
        print(f"{name:48s} {status}", flush=True)

    def dense(B=2, Lq=200, Lk=300, Hq=4, Hkv=2, d=64, dv=None, **kw):
        dv = dv or d

        def run():
            q, k, v = rnd(B, Lq, Hq, d), rnd(B, Lk, Hkv, d), rnd(B, Lk, Hkv, dv)
            out, lse = fa.flash_attn_func(q, k, v, return_lse=True, **kw)
            ro, rl = _ref(q, k, v, causal=kw.get("causal", False), window=kw.get("window_size"),
                          softcap=kw.get("softcap"), scale=kw.get("softmax_scale"), sink=kw.get("learnable_sink"))
            fin = torch.isfinite(rl)
            lerr = (lse.float() - rl)[fin].abs().max().item() if fin.any() else 0.0
            return (out.float() - ro).abs().max().item(), {"lse_err": lerr, "lse_shape": list(lse.shape)}
        return run

    probe("func d64", dense())
    probe("func d128 causal", dense(d=128, causal=True))
    probe("func d256", dense(d=256))
    probe("func d96 window(50,10)", dense(d=96, window_size=(50, 10)))
    probe("func d64 softcap 30", dense(softcap=30.0))
    probe("func d8", dense(d=8))
    probe("func d40 (not mult of 16)", dense(d=40))
    probe("func d128 dv64", dense(d=128, dv=64))
    probe("func d64 dv128", dense(d=64, dv=128))
    probe("func d192 dv128", dense(d=192, dv=128))
    probe("func scale -0.1", dense(softmax_scale=-0.1))
    probe("func scale 0", dense(softmax_scale=0.0))
    probe("func learnable_sink", dense(learnable_sink=torch.randn(4, device=dev, dtype=torch.float32)))

    def kv_broadcast():
        q = rnd(3, 100, 4, 64)
        k1, v1 = rnd(1, 150, 2, 64), rnd(1, 150, 2, 64)
        k, v = k1.expand(3, -1, -1, -1), v1.expand(3, -1, -1, -1)
        out, _ = fa.flash_attn_func(q, k, v, return_lse=True)
        ro, _ = _ref(q, k, v)
        return (out.float() - ro).abs().max().item(), {}
    probe("func kv_broadcast (batch stride 0)", kv_broadcast)

    def varlen(d=64, causal=False):
        def run():
            lens_q = [37, 0, 129]  # key lengths 50, 17, 200 (ck)
            cq = torch.tensor([0, 37, 37, 166], dtype=torch.int32, device=dev)
            ck = torch.tensor([0, 50, 67, 267], dtype=torch.int32, device=dev)
            q, k, v = rnd(166, 4, d), rnd(267, 2, d), rnd(267, 2, d)
            out, lse = fa.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=129,
                                                 max_seqlen_k=200, causal=causal, return_lse=True)
            err = 0.0
            for b in range(3):
                if lens_q[b] == 0:
                    continue
                qb = q[cq[b]:cq[b + 1]][None]
                kb, vb = k[ck[b]:ck[b + 1]][None], v[ck[b]:ck[b + 1]][None]
                ro, _ = _ref(qb, kb, vb, causal=causal)
                err = max(err, (out[cq[b]:cq[b + 1]].float() - ro[0]).abs().max().item())
            return err, {"lse_shape": list(lse.shape)}
        return run
    probe("varlen_func cu_seqlens d64", varlen())
    probe("varlen_func cu_seqlens d128 causal", varlen(128, True))

    def seqused(nan_pad: bool):
        def run():
            B, L, used_q, used_k = 3, 160, [160, 33, 1], [160, 70, 5]
            q, k, v = rnd(B, L, 4, 64), rnd(B, L, 2, 64), rnd(B, L, 2, 64)
            if nan_pad:
                for b in range(B):
                    k[b, used_k[b]:] = float("nan")
                    v[b, used_k[b]:] = float("nan")
            sq = torch.tensor(used_q, dtype=torch.int32, device=dev)
            sk = torch.tensor(used_k, dtype=torch.int32, device=dev)
            out, lse = fa.flash_attn_varlen_func(q, k, v, seqused_q=sq, seqused_k=sk, return_lse=True)
            err = 0.0
            for b in range(B):
                ro, _ = _ref(q[b:b + 1, :used_q[b]], k[b:b + 1, :used_k[b]], v[b:b + 1, :used_k[b]])
                err = max(err, (out[b, :used_q[b]].float() - ro[0]).abs().nan_to_num(float("inf")).max().item())
            return err, {"lse_shape": list(lse.shape)}
        return run
    probe("varlen_func seqused_q/k", seqused(False))
    probe("varlen_func seqused_k, NaN past seqused_k", seqused(True))

    def paged(page_size, d=64, nan_tail=False, Lq=4):
        def run():
            B, lens, Hkv = 2, [300, 129], 2
            pages = [-(-n // page_size) for n in lens]
            n_pages = sum(pages) + 3
            kc = torch.full((n_pages, page_size, Hkv, d), float("nan"), device=dev, dtype=bf)
            vc = torch.full((n_pages, page_size, Hkv, d), float("nan"), device=dev, dtype=bf)
            perm = torch.randperm(n_pages, generator=torch.Generator().manual_seed(1)).tolist()
            table = torch.full((B, max(pages)), perm[-1], dtype=torch.int32)
            ks, vs, i = [], [], 0
            for b in range(B):
                kb, vb = rnd(lens[b], Hkv, d), rnd(lens[b], Hkv, d)
                ks.append(kb)
                vs.append(vb)
                for p in range(pages[b]):
                    slot = perm[i]
                    i += 1
                    table[b, p] = slot
                    chunk = slice(p * page_size, min((p + 1) * page_size, lens[b]))
                    n = chunk.stop - chunk.start
                    if not nan_tail:
                        kc[slot].zero_()
                        vc[slot].zero_()
                    kc[slot, :n] = kb[chunk]
                    vc[slot, :n] = vb[chunk]
            q = rnd(B, Lq, 4, d)
            sk = torch.tensor(lens, dtype=torch.int32, device=dev)
            out, lse = fa.flash_attn_varlen_func(q, kc, vc, page_table=table.to(dev), seqused_k=sk, causal=True,
                                                 return_lse=True)
            err = 0.0
            for b in range(B):
                ro, _ = _ref(q[b:b + 1], ks[b][None], vs[b][None], causal=True)
                err = max(err, (out[b].float() - ro[0]).abs().nan_to_num(float("inf")).max().item())
            return err, {"lse_shape": list(lse.shape)}
        return run
    for ps in (64, 128, 256):
        probe(f"paged page_size {ps} d64 (finite tail)", paged(ps))
    probe("paged page_size 128 d64, NaN tail", paged(128, nan_tail=True))
    probe("paged page_size 64 d64, NaN tail", paged(64, nan_tail=True))
    probe("paged page_size 64 d128 (finite tail)", paged(64, d=128))
    probe("paged page_size 64 d40", paged(64, d=40))

    def backward(d=64, dv=None, Hkv=2, deterministic=False, causal=True, twice=False):
        dv = dv or d

        def run():
            q, k, v = rnd(2, 200, 4, d), rnd(2, 300, Hkv, d), rnd(2, 300, Hkv, dv)
            do = rnd(2, 200, 4, dv)

            def grads():
                qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
                out, _ = fa.flash_attn_func(qq, kk, vv, causal=causal, deterministic=deterministic)
                return torch.autograd.grad(out, (qq, kk, vv), do)
            g = grads()
            qq, kk, vv = (x.float().clone().requires_grad_(True) for x in (q, k, v))
            ro, _ = _ref(qq, kk, vv, causal=causal)
            rg = torch.autograd.grad(ro, (qq, kk, vv), do.float())
            err = max((a.float() - b).abs().max().item() for a, b in zip(g, rg))
            extra = {}
            if twice:
                same = all(torch.equal(a, b) for a, b in zip(g, grads()))
                extra["bitwise_repeat"] = same
            return err, extra
        return run
    probe("backward d64 causal GQA", backward())
    probe("backward d128 dv64 MHA", backward(128, 64, Hkv=4))
    probe("backward d128 dv64 GQA", backward(128, 64))
    probe("backward d256", backward(256, Hkv=4))
    probe("backward deterministic=True x2 bitwise", backward(deterministic=True, twice=True))
    probe("backward deterministic=False x2 bitwise", backward(deterministic=False, twice=True))

    with open(os.path.join(args.out, "fa4_smoke.jsonl"), "w") as f:
        f.write(json.dumps(info) + "\n")
        for r in results:
            f.write(json.dumps(r) + "\n")
    print(f"{sum(r['ok'] for r in results)}/{len(results)} probes ran")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
