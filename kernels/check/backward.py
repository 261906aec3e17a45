"""The FA3 backward launchers (attn_fa3_bwd, attn_fa3_bwd_deterministic and their builds) on random inputs, judged by
the conformance judge (`verdict.judge_outputs`).

`check_backward` draws q, k, v, dout of one case (`cases.FA3_BWD_CASES`, `cases.FA3_BWD_WIDE_CASES`; ``dv`` the head dim
of v and dout, d when absent; with ``nan_padding`` the padded rows of all four hold NaN, SEMANTICS.md §7), computes O
and LSE with attn_fa3_fwd, then dq, dk, dv with the backward launcher under test, and hands all of it to the judge
against the FP64 oracle (`oracles.attention_backward`, SEMANTICS.md §13) under the a-priori bounds of
conformance/TOLERANCES.md §3-§4 (the bounds account for the forward's own O and LSE errors, which the backward reads).
Beside the verdict: dq exactly 0 on query rows with no visible key (SEMANTICS.md §8; the bound allows the output
format's smallest normal there). `check_determinism` runs the deterministic launcher twice and compares the bits, and
judges both it and attn_fa3_bwd on those inputs.

The builds beside the shipped one are the lab build's named FA3 backward variants (``atomic_dq``,
``atomic_dq_other_overlap``, ``rows64``, ``other_dq_split``: `kernels.cuda.lab.FA3_BWD_VARIANTS`, a checkout's
``python -m attention_conformance.kernels.build --lab``); ``variant="default"`` is the shipped library.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.kernels.check.verdict import (
    device_case,
    dtype_name,
    judge_outputs,
    oracle,
    passed,
    to_numpy,
)

__all__ = ["check_backward", "check_determinism"]

Runs = Callable[..., Any]


def _name(spec: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in spec.items() if k != "dtype") + f",{dtype_name(spec['dtype'])}"


def _inputs(spec: dict, seed: int, device: str) -> dict:
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype_name(spec["dtype"]))
    B, Hq, Hkv, Lq, Lk, d = (spec[x] for x in ("B", "Hq", "Hkv", "Lq", "Lk", "d"))
    dv = spec.get("dv", d)

    def rnd(H: int, L: int, n: int) -> Any:
        if spec.get("layout") == "bshd":
            return torch.randn(B, L, H, n, device=device, generator=g).to(dt).transpose(1, 2)
        return torch.randn(B, H, L, n, device=device, generator=g).to(dt)

    t = dict(q=rnd(Hq, Lq, d), k=rnd(Hkv, Lk, d), v=rnd(Hkv, Lk, dv), dout=rnd(Hq, Lq, dv))
    if spec.get("nan_padding"):
        for b in range(B):
            for name, lens in (("q", "seqlens_q"), ("dout", "seqlens_q"), ("k", "seqlens_k"), ("v", "seqlens_k")):
                t[name][b, :, spec[lens][b]:] = float("nan")
    return t


def _semantics(spec: dict, device: str) -> dict:
    import torch

    kw: dict[str, Any] = dict(scale=spec.get("scale"), causal=spec.get("causal", False),
                              alignment=spec.get("alignment", "bottom_right"), window=spec.get("window", (None, None)),
                              softcap=spec.get("softcap"))
    for n in ("seqlens_q", "seqlens_k"):
        if n in spec:
            kw[n] = torch.tensor(spec[n], dtype=torch.int32, device=device)
    return kw


def _fa3_forward(t: dict, kw: dict) -> tuple[Any, Any]:
    """O and LSE of attn_fa3_fwd (the forward the FA3 backward is paired with)."""
    import torch

    from attention_conformance.kernels import cuda_lib

    q = t["q"]
    o = torch.zeros(*q.shape[:3], t["v"].shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full(q.shape[:3], -math.inf, dtype=torch.float32, device=q.device)
    cuda_lib.call("attn_fa3_fwd", cuda_lib.fwd_params(q, t["k"], t["v"], o, lse, **kw))
    return o, lse


def _launcher_backward(launcher: str, variant: str = "default") -> Runs:
    """``launcher`` of the shipped library, or, for another ``variant``, that named build of the lab library (the
    deterministic dQ order when ``launcher`` is attn_fa3_bwd_deterministic)."""
    def run(q: Any, k: Any, v: Any, o: Any, lse: Any, dout: Any, **kw: Any) -> Any:
        from attention_conformance.kernels import cuda_bwd_lib

        call = None
        if variant != "default":
            from attention_conformance.kernels.cuda import lab

            def call(name: str, params: Any) -> None:
                lab.call_fa3_bwd(params, variant, deterministic=name.endswith("_deterministic"))

        return cuda_bwd_lib.backward(launcher, q, k, v, o, lse, dout, call=call, **kw)

    return run


def _case(spec: dict, seed: int) -> Any:
    return device_case(B=spec["B"], Hq=spec["Hq"], Hkv=spec["Hkv"], Lq=spec["Lq"], Lk=spec["Lk"], d=spec["d"],
                       dv=spec.get("dv"),
                       dtype=spec["dtype"], scale=spec.get("scale"), causal=spec.get("causal", False),
                       alignment=spec.get("alignment", "bottom_right"), window=spec.get("window"),
                       softcap=spec.get("softcap"), seqlens_q=spec.get("seqlens_q"), seqlens_k=spec.get("seqlens_k"),
                       layout=spec.get("layout", "contiguous"), backward=True,
                       nan_padding=bool(spec.get("nan_padding")), seed=seed)


def _judge(spec: dict, seed: int, t: dict, o: Any, lse: Any, grads: Any, reference: Any = None) -> tuple[Any, Any]:
    """(verdict, oracle) of one backward result; ``reference`` reuses an oracle of the same inputs."""
    case = _case(spec, seed)
    if reference is None:
        reference = oracle(case, CaseInputs(**{n: to_numpy(t[n]) for n in ("q", "k", "v", "dout")}))
    return judge_outputs(case, reference, o, lse, out_dtype=dtype_name(spec["dtype"]), grads=grads), reference


def check_backward(spec: dict, launcher: str = "attn_fa3_bwd", seed: int = 0, variant: str = "default", *,
                   forward: Runs | None = None, backward: Runs | None = None, device: str = "cuda") -> dict:
    """One case of `cases.FA3_BWD_CASES` through ``launcher`` (of the lab build ``variant`` unless "default").
    ``forward(t, kw) -> (o, lse)`` and ``backward(q, k, v, o, lse, dout, **kw) -> (dq, dk, dv)`` replace
    attn_fa3_fwd and the launcher when given (a CPU test's kernels). Returns ``case``, ``launcher`` (with the build),
    ``ok``, ``problems``, ``outcome``, ``usage`` and per gradient ``{"err", "usage"}`` (max abs error, worst error over
    its bound)."""
    import torch

    t = _inputs(spec, seed, device)
    kw = _semantics(spec, device)
    o, lse = (forward or _fa3_forward)(t, kw)
    grads = (backward or _launcher_backward(launcher, variant))(t["q"], t["k"], t["v"], o, lse, t["dout"], **kw)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    label = launcher if variant == "default" else f"{launcher}[lab {variant}]"
    verdict, _ = _judge(spec, seed, t, o, lse, grads)
    extra = []
    lse_np, dq = to_numpy(lse), to_numpy(grads[0])
    masked = np.isneginf(lse_np)
    if "seqlens_q" in spec:
        masked &= np.arange(spec["Lq"])[None, None, :] < np.asarray(spec["seqlens_q"])[:, None, None]
    if masked.any() and not (dq[masked] == 0).all():
        extra.append("dq: rows with no visible key must be exactly 0 (SEMANTICS.md §8)")
    res: dict = {"case": f"{_name(spec)} seed={seed}", "launcher": label, "ok": passed(verdict) and not extra,
                 "problems": list(verdict.failures) + extra, "outcome": verdict.outcome, "usage": verdict.usage,
                 "masked_rows": int(masked.sum())}
    for name in ("dq", "dk", "dv"):
        st = verdict.stats.get(name, {})
        res[name] = dict(err=float(st.get("max_err") or 0.0), usage=float(st.get("max_ratio") or 0.0))
    return res


def check_determinism(spec: dict, seed: int = 0, variant: str = "default", *, forward: Runs | None = None,
                      deterministic: Runs | None = None, any_order: Runs | None = None, device: str = "cuda") -> dict:
    """Two runs of attn_fa3_bwd_deterministic (``deterministic``) on the same inputs and one of attn_fa3_bwd
    (``any_order``), both of the lab build ``variant`` unless "default": ``identical`` (every bit of dq, dk, dv),
    ``max_diff_vs_atomic`` (the largest difference between the two launchers, for tables), and ``ok`` / ``problems``:
    identical bits, and both launchers' results judged."""
    import torch

    t = _inputs(spec, seed, device)
    kw = _semantics(spec, device)
    o, lse = (forward or _fa3_forward)(t, kw)
    args = (t["q"], t["k"], t["v"], o, lse, t["dout"])
    det = deterministic or _launcher_backward("attn_fa3_bwd_deterministic", variant)
    a = det(*args, **kw)
    b = det(*args, **kw)
    c = (any_order or _launcher_backward("attn_fa3_bwd", variant))(*args, **kw)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    same = all(torch.equal(x.contiguous().view(torch.int16), y.contiguous().view(torch.int16)) for x, y in zip(a, b))
    problems = [] if same else ["two runs of attn_fa3_bwd_deterministic differ"]
    verdict_det, reference = _judge(spec, seed, t, o, lse, a)
    verdict_any, _ = _judge(spec, seed, t, o, lse, c, reference)
    problems += [f"attn_fa3_bwd_deterministic: {m}" for m in verdict_det.failures]
    problems += [f"attn_fa3_bwd: {m}" for m in verdict_any.failures]
    diff = max(float((x.float() - y.float()).abs().max()) if x.numel() else 0.0 for x, y in zip(a, c))
    return {"case": f"{_name(spec)} seed={seed}" + ("" if variant == "default" else f" [lab {variant}]"),
            "identical": same,
            "max_diff_vs_atomic": diff, "ok": same and passed(verdict_det) and passed(verdict_any),
            "problems": problems}
