"""The FA3 backward launchers (attn_fa3_bwd, attn_fa3_bwd_deterministic and their builds) on random inputs, judged by
the conformance judge (`verdict.judge_outputs`).

`check_backward` draws q, k, v, dout of one case (`cases.FA3_BWD_CASES`; with ``nan_padding`` the padded rows of all
four hold NaN, SEMANTICS.md §7), computes O and LSE with attn_fa3_fwd, then dq, dk, dv with the backward launcher
under test, and hands all of it to the judge against the FP64 oracle (`oracles.attention_backward`, SEMANTICS.md §13)
under the a-priori bounds of conformance/TOLERANCES.md §3-§4 (the bounds account for the forward's own O and LSE
errors, which the backward reads). Beside the verdict: dq exactly 0 on query rows with no visible key (SEMANTICS.md
§8; the bound allows the output format's smallest normal there). `check_determinism` runs the deterministic launcher
twice and compares the bits, and judges both it and attn_fa3_bwd on those inputs.

The builds beside the default (``overlap``, ``atomic_dq``, ``block_m64``, ``dq_other``) are selected through
`kernels.cuda_lib.build_setting`, as the library selects them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from attention_conformance.calldata import CaseInputs
from attention_conformance.kernels.check.verdict import (
    device_case,
    dtype_name,
    judge_outputs,
    oracle,
    passed,
    to_numpy,
)

__all__ = ["BLOCK_M_ENV", "DQ_ENV", "DQ_SPLIT_ENV", "DQ_TURNS_D", "OVERLAP_ENV", "atomic_dq_build", "block_m64_build",
           "check_backward", "check_determinism", "dq_other_build", "overlap_build", "within"]

OVERLAP_ENV = "ATTN_FA3_BWD_OVERLAP"
DQ_ENV = "ATTN_FA3_BWD_DQ"  # "atomic": dQ by fp32 atomics from the consumers (the default is the TMA reduce-add)
BLOCK_M_ENV = "ATTN_FA3_BWD_BLOCK_M"  # "64": the TMA build's 64-row query tiles where it defaults to 128
#: "1": every tile's dQ split between the consumers (by rows at d = 64, by columns at d = 128), "0": one consumer
#: computes a tile's whole dQ, the two taking turns; by default turns at d = `DQ_TURNS_D`, split elsewhere
DQ_SPLIT_ENV = "ATTN_FA3_BWD_DQ_SPLIT"
DQ_TURNS_D = 64

Runs = Callable[..., Any]


def overlap_build(overlap: bool | None) -> contextlib.AbstractContextManager:
    """Within the block attn_fa3_bwd's atomics build runs with (True) or without (False) the GEMM / element-wise
    overlap; None: the default."""
    from attention_conformance.kernels import cuda_lib

    return cuda_lib.build_setting(OVERLAP_ENV, None if overlap is None else ("1" if overlap else "0"))


def atomic_dq_build() -> contextlib.AbstractContextManager:
    """Within the block both FA3 backward launchers add dQ with fp32 atomics from the consumers (the default build
    adds it through shared memory and a TMA reduce-add)."""
    from attention_conformance.kernels import cuda_lib

    return cuda_lib.build_setting(DQ_ENV, "atomic")


def block_m64_build() -> contextlib.AbstractContextManager:
    """Within the block the default FA3 backward build streams 64-row query tiles at every head dim (by default
    128-row tiles at d = `cases.ROWS128_D`)."""
    from attention_conformance.kernels import cuda_lib

    return cuda_lib.build_setting(BLOCK_M_ENV, "64")


def dq_other_build(d: int) -> contextlib.AbstractContextManager:
    """Within the block the default build at head dim ``d`` runs the dQ mode it does not run by default: the split at
    d = `DQ_TURNS_D`, the turns elsewhere."""
    from attention_conformance.kernels import cuda_lib

    return cuda_lib.build_setting(DQ_SPLIT_ENV, "1" if d == DQ_TURNS_D else "0")


@contextlib.contextmanager
def within(builds: list[Callable[[], contextlib.AbstractContextManager]]) -> Iterator[None]:
    """Within the block every build setting of ``builds`` (factories of `cuda_lib.build_setting` contexts)."""
    with contextlib.ExitStack() as stack:
        for build in builds:
            stack.enter_context(build())
        yield


def _name(spec: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in spec.items() if k != "dtype") + f",{dtype_name(spec['dtype'])}"


def _inputs(spec: dict, seed: int, device: str) -> dict:
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype_name(spec["dtype"]))
    B, Hq, Hkv, Lq, Lk, d = (spec[x] for x in ("B", "Hq", "Hkv", "Lq", "Lk", "d"))

    def rnd(H: int, L: int) -> Any:
        if spec.get("layout") == "bshd":
            return torch.randn(B, L, H, d, device=device, generator=g).to(dt).transpose(1, 2)
        return torch.randn(B, H, L, d, device=device, generator=g).to(dt)

    t = dict(q=rnd(Hq, Lq), k=rnd(Hkv, Lk), v=rnd(Hkv, Lk), dout=rnd(Hq, Lq))
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


def _launcher_backward(launcher: str) -> Runs:
    def run(q: Any, k: Any, v: Any, o: Any, lse: Any, dout: Any, **kw: Any) -> Any:
        from attention_conformance.kernels import cuda_bwd_lib

        return cuda_bwd_lib.backward(launcher, q, k, v, o, lse, dout, **kw)

    return run


def _case(spec: dict, seed: int) -> Any:
    return device_case(B=spec["B"], Hq=spec["Hq"], Hkv=spec["Hkv"], Lq=spec["Lq"], Lk=spec["Lk"], d=spec["d"],
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


def check_backward(spec: dict, launcher: str = "attn_fa3_bwd", seed: int = 0, overlap: bool | None = None,
                   atomic_dq: bool = False, block_m64: bool = False, dq_other: bool = False, *,
                   forward: Runs | None = None, backward: Runs | None = None, device: str = "cuda") -> dict:
    """One case of `cases.FA3_BWD_CASES` through ``launcher`` (in the build ``overlap`` / ``atomic_dq`` /
    ``block_m64`` / ``dq_other`` select). ``forward(t, kw) -> (o, lse)`` and ``backward(q, k, v, o, lse, dout, **kw)
    -> (dq, dk, dv)`` replace attn_fa3_fwd and the launcher when given (a CPU test's kernels). Returns ``case``,
    ``launcher`` (with the build), ``ok``, ``problems``, ``outcome``, ``usage`` and per gradient ``{"err", "usage"}``
    (max abs error, worst error over its bound)."""
    import torch

    t = _inputs(spec, seed, device)
    kw = _semantics(spec, device)
    o, lse = (forward or _fa3_forward)(t, kw)
    chosen = ((atomic_dq, atomic_dq_build), (block_m64, block_m64_build), (dq_other, lambda: dq_other_build(spec["d"])))
    with within([lambda: overlap_build(overlap)] + [build for on, build in chosen if on]):
        grads = (backward or _launcher_backward(launcher))(t["q"], t["k"], t["v"], o, lse, t["dout"], **kw)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    label = launcher if overlap is None else f"{launcher}[overlap={int(overlap)}]"
    label += "[atomic_dq]" if atomic_dq else ""
    label += "[block_m=64]" if block_m64 else ""
    label += f"[{DQ_SPLIT_ENV}={1 if spec['d'] == DQ_TURNS_D else 0}]" if dq_other else ""
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


def check_determinism(spec: dict, seed: int = 0, atomic_dq: bool = False, *, forward: Runs | None = None,
                      deterministic: Runs | None = None, any_order: Runs | None = None, device: str = "cuda") -> dict:
    """Two runs of attn_fa3_bwd_deterministic (``deterministic``) on the same inputs and one of attn_fa3_bwd
    (``any_order``): ``identical`` (every bit of dq, dk, dv), ``max_diff_vs_atomic`` (the largest difference between
    the two launchers, for tables), and ``ok`` / ``problems``: identical bits, and both launchers' results judged."""
    import torch

    t = _inputs(spec, seed, device)
    kw = _semantics(spec, device)
    o, lse = (forward or _fa3_forward)(t, kw)
    args = (t["q"], t["k"], t["v"], o, lse, t["dout"])
    det = deterministic or _launcher_backward("attn_fa3_bwd_deterministic")
    with within([atomic_dq_build] if atomic_dq else []):
        a = det(*args, **kw)
        b = det(*args, **kw)
        c = (any_order or _launcher_backward("attn_fa3_bwd"))(*args, **kw)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    same = all(torch.equal(x.contiguous().view(torch.int16), y.contiguous().view(torch.int16)) for x, y in zip(a, b))
    problems = [] if same else ["two runs of attn_fa3_bwd_deterministic differ"]
    verdict_det, reference = _judge(spec, seed, t, o, lse, a)
    verdict_any, _ = _judge(spec, seed, t, o, lse, c, reference)
    problems += [f"attn_fa3_bwd_deterministic: {m}" for m in verdict_det.failures]
    problems += [f"attn_fa3_bwd: {m}" for m in verdict_any.failures]
    diff = max(float((x.float() - y.float()).abs().max()) if x.numel() else 0.0 for x, y in zip(a, c))
    return {"case": f"{_name(spec)} seed={seed}" + (" [atomic_dq]" if atomic_dq else ""), "identical": same,
            "max_diff_vs_atomic": diff, "ok": same and passed(verdict_det) and passed(verdict_any),
            "problems": problems}
