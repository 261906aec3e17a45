"""The FA3 FP8 forward (attn_fa3_fp8_fwd, its builds, V as rows or k-major) on quantized random inputs, judged by the
conformance judge, and its agreement with the NumPy model of the kernel (kernels/reference/fa3.py:forward_fp8).

`quantized_inputs` draws q, k, v (N(0, 1); ``outliers``: four channels of Q and K times 20, the case incoherent
processing is for, SEMANTICS.md §11) and quantizes them with `oracles.fp8.quantize_attention_inputs` (§10-§11), as
the engine quantizes an FP8 case. `check_fp8` runs the launcher on the codes and descales into O / LSE buffers
poisoned with NaN between guard bands; `judge_fp8` then gives

- the judge's verdict against the FP64 oracle on the dequantized inputs, under the FP8 precision model of
  conformance/TOLERANCES.md (P rounded to the FP8 format, FP8 tensor-core accumulation ``FP8_ACCUMULATOR_U``);
- the agreement with `forward_fp8` on the same codes and descales, which models the kernel's rounding (P rounded
  against the running maxima of the same key tiles, in the same order): relative error of O at most
  `MODEL_REL_ERR` and |LSE| difference at most `MODEL_LSE_ERR`, each plus what the FP8 tensor cores' truncated running
  sum can move a score (`accumulator_score_error`; the model sums Q K^T exactly). A kernel that keeps to the
  contract but no longer computes what the model says (a changed tile, a dropped max offset) fails here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import FP8Spec
from attention_conformance.kernels.check.guard import guard_ok, guarded
from attention_conformance.kernels.check.verdict import (
    device_case,
    judge_outputs,
    oracle,
    passed,
    real_rows,
    rel_err,
    to_numpy,
)

__all__ = ["FP8_STEP_U", "MODEL_LSE_ERR", "MODEL_REL_ERR", "accumulator_score_error", "case_name", "check_fp8",
           "fp8_case", "judge_fp8", "quantized_inputs"]

#: Relative error of one k32 FP8 wgmma step's running sum. An H200 run on outlier inputs after the Hadamard
#: transform (scores up to 638) deviated from the exactly summing model by 0.40 in the LSE: what a running sum
#: truncated to ~12 significant bits gives (2^-11 relative), 4x the tolerance policy's rounding model
#: (FP8_ACCUMULATOR_U = 2^-13, whose gamma(d) bound still covers it 3.5x over).
FP8_STEP_U = 2.0**-11
#: the model agreement: relative Frobenius error of O against `forward_fp8` on the same codes (the two round P at
#: the same points; what is left is the order of the fp32 sums and P codes that a last-bit difference of a score
#: moves across a rounding boundary, 2^-4 relative each for e4m3 but rare)
MODEL_REL_ERR = 2e-2
#: the model agreement: |LSE - LSE_model| (natural log) on rows with a key, before the accumulator's score error
MODEL_LSE_ERR = 2e-3


def quantized_inputs(*, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int, granularity: str,
                     format: str = "e4m3fn", incoherent: bool = False, outliers: bool = False, varlen: bool = False,
                     seed: int = 0) -> tuple[dict, list[int] | None, list[int] | None]:
    """``(qi, seqlens_q, seqlens_k)``: the quantized inputs of one case (`oracles.fp8.quantize_attention_inputs`'s
    dict: codes, descales, the dequantized q, k, v) and, with ``varlen``, random real lengths (batch 0 full)."""
    from attention_conformance.oracles import fp8

    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) for s in ((B, Hq, Lq, d), (B, Hkv, Lk, d), (B, Hkv, Lk, d)))
    if outliers:
        q[..., :4] *= 20.0
        k[..., :4] *= 20.0
    sq = sk = None
    if varlen:
        sq = [int(x) for x in rng.integers(0, Lq + 1, B)]
        sk = [int(x) for x in rng.integers(0, Lk + 1, B)]
        sq[0], sk[0] = Lq, Lk
    spec = FP8Spec(format=format, granularity=granularity, incoherent=incoherent)
    return fp8.quantize_attention_inputs(q, k, v, **spec.quantize_kwargs()), sq, sk


def fp8_case(*, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int, granularity: str, format: str = "e4m3fn",
             causal: bool = False, bottom_right: bool = True, window: Any = None, softcap: float | None = None,
             incoherent: bool = False, layout: str = "contiguous", seqlens_q: Any = None, seqlens_k: Any = None,
             seed: int = 0) -> Any:
    """The conformance `Case` of one FP8 check (128 x 128 descale blocks per tile, as the kernel takes them)."""
    return device_case(B=B, Hq=Hq, Hkv=Hkv, Lq=Lq, Lk=Lk, d=d, dtype=None,
                       fp8=FP8Spec(format=format, granularity=granularity, incoherent=incoherent), causal=causal,
                       alignment="bottom_right" if bottom_right else "top_left", window=window, softcap=softcap,
                       seqlens_q=seqlens_q, seqlens_k=seqlens_k, layout=layout, seed=seed)


def accumulator_score_error(qi: dict, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int) -> np.ndarray:
    """[B, Hq, Lq]: per query row, the largest score error over its keys that FP8 tensor-core accumulation allows,
    ``(d / 32) FP8_STEP_U scale dq_i dk_j sum_c |q_ic| |k_jc|`` (one truncation of the running sum per k32 wgmma
    step), in natural-log units; 0 where there is no key."""
    from attention_conformance.kernels.reference.fa3 import expand_descale

    out = np.zeros((B, Hq, Lq))
    if Lk == 0:
        return out
    dq = expand_descale(qi["q_descale"], B, Hq, Hkv, Lq, 128).astype(np.float64)
    dk = expand_descale(qi["k_descale"], B, Hkv, Hkv, Lk, 128).astype(np.float64)
    q8, k8 = (np.abs(np.asarray(qi[n], dtype=np.float64)) for n in ("q8", "k8"))
    for b in range(B):
        for h in range(Hq):
            hk = h // (Hq // Hkv)
            sig = (q8[b, h] @ k8[b, hk].T) * dq[b, h][:, None] * dk[b, hk][None, :]
            out[b, h] = sig.max(axis=1)
    return out * (d / 32) * FP8_STEP_U / math.sqrt(d)


def judge_fp8(case: Any, qi: dict, out: Any, lse: Any, *, block_k: int, mutated: list[str] | tuple[str, ...] = (),
              unwritten: int = 0) -> dict:
    """The verdict on one FP8 launch (``out`` bf16 values [B, Hq, Lq, d], ``lse`` [B, Hq, Lq]) and its agreement
    with `forward_fp8` run with key tiles of ``block_k`` (the build's tile P is rounded against). Returns ``ok``,
    ``problems``, ``outcome``, ``usage`` and the error figures of the lab tables."""
    from attention_conformance.kernels.reference.fa3 import forward_fp8

    sem = dict(case.oracle_kwargs)
    sem.pop("scale")
    ref = oracle(case, CaseInputs(q=qi["q"], k=qi["k"], v=qi["v"], fp8=qi))
    ko, kl = to_numpy(out), to_numpy(lse)
    verdict = judge_outputs(case, ref, ko, kl, out_dtype="bfloat16", mutated=mutated, unwritten=unwritten)
    model_o, model_lse = forward_fp8(qi["q8"], qi["k8"], qi["v8"], qi["q_descale"], qi["k_descale"], qi["v_descale"],
                                     format=case.fp8.format, block_q=128, block_k=block_k, **sem)
    valid = real_rows(case.B, case.Hq, case.Lq, case.seqlens_q)
    kv, mv, ov = ko[valid], np.asarray(model_o, dtype=np.float64)[valid], ref.out[valid]
    err_model = rel_err(kv, mv)
    max_model = float(np.abs(kv - mv).max() / max(np.abs(mv).max(), 1e-30)) if kv.size else 0.0
    s_err = accumulator_score_error(qi, case.B, case.Hq, case.Hkv, case.Lq, case.Lk, case.d)[valid]
    # a score error e moves a row's output by about e relative (exactly so for a one-hot softmax row)
    o_allow = float(np.sqrt(np.mean(s_err**2))) if s_err.size else 0.0
    problems = list(verdict.failures)
    if not err_model <= MODEL_REL_ERR + o_allow:
        problems.append(f"model agreement: rel err of O vs forward_fp8 {err_model:.3e} > {MODEL_REL_ERR:g} + "
                        f"{o_allow:.1e} (accumulator)")
    lr, lk = np.asarray(model_lse, dtype=np.float64)[valid], kl[valid]
    fin = np.isfinite(lr) & np.isfinite(lk)
    lse_dev = np.abs(lr[fin] - lk[fin])
    worst = float((lse_dev / (MODEL_LSE_ERR + s_err[fin])).max()) if fin.any() else 0.0
    if worst > 1.0:
        problems.append(f"model agreement: |LSE - LSE of forward_fp8| up to {float(lse_dev.max()):.3e}, {worst:.2f} x "
                        f"its bound {MODEL_LSE_ERR:g} + accumulator error")
    return dict(ok=passed(verdict) and len(problems) == len(verdict.failures), problems=problems,
                outcome=verdict.outcome, usage=verdict.usage, rel_err_vs_reference=err_model,
                max_err_vs_reference=max_model, rel_err_vs_oracle=rel_err(kv, ov),
                reference_rel_err_vs_oracle=rel_err(mv, ov),
                lse_err_vs_reference=float(lse_dev.max()) if fin.any() else 0.0)


def case_name(*, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int, granularity: str, format: str = "e4m3fn",
              causal: bool = False, bottom_right: bool = True, window: Any = None, softcap: float | None = None,
              varlen: bool = False, layout: str = "contiguous", incoherent: bool = False, outliers: bool = False,
              variant: str | None = None, v_layout: str = "rows") -> str:
    """``fp8 e4m3fn per_tile B2 H4/2 q300 k260 d128 causalTL ...``: one line naming the case and the build."""
    return (f"fp8 {format} {granularity} B{B} H{Hq}/{Hkv} q{Lq} k{Lk} d{d}"
            + (" causal" + ("BR" if bottom_right else "TL") if causal else "") + (f" win{window}" if window else "")
            + (f" cap{softcap}" if softcap else "") + (" varlen" if varlen else "")
            + (f" {layout}" if layout != "contiguous" else "") + (" had" if incoherent else "")
            + (" outliers" if outliers else "") + (f" [{variant}]" if variant else "")
            + (" vt-kmajor" if v_layout == "kmajor" else ""))


def check_fp8(*, B: int, Hq: int, Hkv: int, Lq: int, Lk: int, d: int, granularity: str, format: str = "e4m3fn",
              causal: bool = False, bottom_right: bool = True, window: Any = None, softcap: float | None = None,
              varlen: bool = False, layout: str = "contiguous", incoherent: bool = False, outliers: bool = False,
              seed: int = 0, variant: str | None = None, v_layout: str = "rows") -> dict:
    """One case of `cases.FP8_CASES` through ``attn_fa3_fp8_fwd`` (``variant``: that named build of the lab
    library, `kernels.cuda.lab.FP8_VARIANTS`; None: the shipped one; ``v_layout="kmajor"``: V packed by
    `cuda_lib.pack_vt` first, checked against `cuda_lib.pack_vt_reference`). Returns `judge_fp8`'s dict, with
    ``case`` and the guard-band, padded-row and pack_vt findings among ``problems``."""
    import torch

    from attention_conformance.kernels import cuda_lib

    shape = dict(B=B, Hq=Hq, Hkv=Hkv, Lq=Lq, Lk=Lk, d=d)
    qi, sq, sk = quantized_inputs(**shape, granularity=granularity, format=format, incoherent=incoherent,
                                  outliers=outliers, varlen=varlen, seed=seed)
    alignment = "bottom_right" if bottom_right else "top_left"

    def dev(x: Any, dtype: Any) -> Any:
        t = torch.from_numpy(np.ascontiguousarray(x)).to(dtype)
        if layout == "bshd":
            t = t.transpose(1, 2).contiguous().transpose(1, 2)
        return t.cuda()

    tdt = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[format]
    q8, k8, v8 = dev(qi["q8"], tdt), dev(qi["k8"], tdt), dev(qi["v8"], tdt)
    ds = [torch.from_numpy(np.array(qi[n], dtype=np.float32)).cuda() for n in ("q_descale", "k_descale", "v_descale")]
    oflat, o = guarded((B, Hq, Lq, d), torch.bfloat16, "cuda")
    lflat, lse = guarded((B, Hq, Lq), torch.float32, "cuda")
    before = [t.view(torch.uint8).clone() for t in (q8, k8, v8)]
    lens = {n: (None if x is None else torch.tensor(x, dtype=torch.int32, device="cuda"))
            for n, x in (("seqlens_q", sq), ("seqlens_k", sk))}
    extra = []
    vin = v8
    if v_layout == "kmajor":
        vin = cuda_lib.pack_vt(v8, seqlens_k=lens["seqlens_k"])
        if not np.array_equal(vin.view(torch.uint8).cpu().numpy(),
                              cuda_lib.pack_vt_reference(v8.view(torch.uint8).cpu().numpy(), seqlens_k=sk)):
            extra.append("pack_vt differs from pack_vt_reference")
    p = cuda_lib.fp8_fwd_params(q8, k8, vin, o, lse, *ds, format=format, granularity=granularity, causal=causal,
                                alignment=alignment, window=window, softcap=softcap, v_layout=v_layout, **lens)
    if variant in (None, "default"):
        cuda_lib.call("attn_fa3_fp8_fwd", p)
        key_tile = cuda_lib.fp8_key_tile
    else:  # a named build of the lab library (a checkout's `kernels.build --lab`)
        from attention_conformance.kernels.cuda import lab

        lab.call_fp8_fwd(p, variant)
        key_tile = lambda params: lab.fp8_key_tile(params, variant)  # noqa: E731
    # the model rounds P against the running maxima of the build's key tiles (per-tile descales: 128-key blocks,
    # which the kernel's tiles of 64 or 128 never straddle)
    block_k = 128 if granularity == "per_tile" else key_tile(p)
    torch.cuda.synchronize()
    case = fp8_case(**shape, granularity=granularity, format=format, causal=causal, bottom_right=bottom_right,
                    window=window, softcap=softcap, incoherent=incoherent, layout=layout, seqlens_q=sq, seqlens_k=sk,
                    seed=seed)
    out = to_numpy(o)
    valid = real_rows(B, Hq, Lq, sq)
    mutated = [n for n, t, b in zip(("q8", "k8", "v8"), (q8, k8, v8), before)
               if not torch.equal(t.view(torch.uint8), b)]
    res = judge_fp8(case, qi, out, lse, block_k=block_k, mutated=mutated, unwritten=int(np.isnan(out[valid]).sum()))
    if not (guard_ok(oflat) and guard_ok(lflat)):
        extra.append("guard band changed: the launcher wrote past O or LSE")
    if (~valid).any() and not np.isnan(out[~valid]).all():
        extra.append("padded query rows of O written (SEMANTICS.md §7: a launcher leaves them)")
    res["problems"] += extra
    res["ok"] = res["ok"] and not extra
    res["case"] = case_name(**shape, granularity=granularity, format=format, causal=causal, bottom_right=bottom_right,
                            window=window, softcap=softcap, varlen=varlen, layout=layout, incoherent=incoherent,
                            outliers=outliers, variant=variant, v_layout=v_layout) + f" seed={seed}"
    return res
