"""kernels/check/fp8.py on the CPU: the FA3 FP8 check's inputs and judgement, fed the NumPy FP8 model's own output
(kernels/reference/fa3.py:forward_fp8) as the kernel's. The model passes every listed case (shrunk to CPU sizes); an
output with an absolute error of 0.25 (the FP8 bound scales with sum_j P |V|, not with |O|) fails the judge, and one
off by 3% at d = 64 passes the contract's bound but not the agreement with the model."""

from __future__ import annotations

import numpy as np
import pytest

from attention_conformance.kernels.check.cases import FP8_CASES
from attention_conformance.kernels.check.fp8 import accumulator_score_error, fp8_case, judge_fp8, quantized_inputs
from attention_conformance.kernels.reference.fa3 import forward_fp8

SHAPE = ("B", "Hq", "Hkv", "Lq", "Lk", "d")


def _run_model(spec, seed):
    s = dict(spec, Lq=min(spec["Lq"], 150), Lk=min(spec["Lk"], 200), Hq=min(spec["Hq"], 4), Hkv=min(spec["Hkv"], 2))
    shape = {k: s[k] for k in SHAPE}
    fmt = s.get("format", "e4m3fn")
    qi, sq, sk = quantized_inputs(**shape, granularity=s["granularity"], format=fmt,
                                  incoherent=s.get("incoherent", False), outliers=s.get("outliers", False),
                                  varlen=s.get("varlen", False), seed=seed)
    case = fp8_case(**shape, granularity=s["granularity"], format=fmt, causal=s.get("causal", False),
                    bottom_right=s.get("bottom_right", True), window=s.get("window"), softcap=s.get("softcap"),
                    incoherent=s.get("incoherent", False), seqlens_q=sq, seqlens_k=sk, seed=seed)
    sem = dict(case.oracle_kwargs)
    sem.pop("scale")
    o, lse = forward_fp8(qi["q8"], qi["k8"], qi["v8"], qi["q_descale"], qi["k_descale"], qi["v_descale"],
                         format=fmt, block_q=128, block_k=128, **sem)
    return case, qi, np.asarray(o, dtype=np.float64), np.asarray(lse, dtype=np.float64)


@pytest.mark.parametrize("index", [0, 2, 4, 6, 9, 10, 13])
def test_the_model_passes_the_listed_cases(index):
    case, qi, o, lse = _run_model(FP8_CASES[index], index)
    res = judge_fp8(case, qi, o, lse, block_k=128)
    assert res["ok"] and res["outcome"] == "PASS" and res["rel_err_vs_reference"] == 0.0, res


def test_wrong_outputs_fail():
    case, qi, o, lse = _run_model(FP8_CASES[3], 3)  # d = 64, per tile
    far = judge_fp8(case, qi, o + 0.25, lse, block_k=128)
    assert not far["ok"] and far["outcome"] == "FAIL", far
    near = judge_fp8(case, qi, o * 1.03, lse, block_k=128)
    # within the contract's bound, but not what the kernel computes
    assert near["outcome"] in ("PASS", "QUALITY_WARNING") and not near["ok"], near
    assert near["problems"][0].startswith("model agreement: rel err of O")
    shifted = judge_fp8(case, qi, o, lse + 8 * np.log(2.0), block_k=128)  # the max offset left in the LSE
    assert not shifted["ok"] and any(p.startswith("lse:") for p in shifted["problems"]), shifted


def test_accumulator_score_error_grows_with_the_scores():
    case, qi, _, _ = _run_model(FP8_CASES[0], 0)
    plain = accumulator_score_error(qi, case.B, case.Hq, case.Hkv, case.Lq, case.Lk, case.d)
    big = dict(qi, q_descale=np.asarray(qi["q_descale"]) * 4)
    assert plain.shape == (case.B, case.Hq, case.Lq) and (plain > 0).all()
    assert np.allclose(accumulator_score_error(big, case.B, case.Hq, case.Hkv, case.Lq, case.Lk, case.d), 4 * plain)
    assert not accumulator_score_error(qi, case.B, case.Hq, case.Hkv, case.Lq, 0, case.d).any()
