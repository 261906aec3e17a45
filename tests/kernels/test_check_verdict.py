"""kernels/check/verdict.py on the CPU: a device check's case as a conformance Case, and the judge's verdict on
outputs handed over the way a launcher writes them."""

from __future__ import annotations

import numpy as np
import pytest

from attention_conformance import oracles
from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import FP8Spec
from attention_conformance.cases.inputs import round_to_dtype
from attention_conformance.kernels.check import cases
from attention_conformance.kernels.check.verdict import (
    device_case,
    dtype_name,
    judge_outputs,
    oracle,
    passed,
    real_rows,
)


def test_dtype_names():
    torch = pytest.importorskip("torch")
    assert dtype_name(torch.bfloat16) == "bfloat16" and dtype_name("float16") == "float16"
    with pytest.raises(ValueError, match="int8"):
        dtype_name("int8")


def test_device_case_carries_the_semantics():
    c = device_case(B=2, Hq=4, Hkv=2, Lq=5, Lk=7, d=64, dtype="bfloat16", causal=True, alignment="top_left",
                    window=[3, None], softcap=2.0, seqlens_q=np.array([5, 2]), seqlens_k=(7, 1), layout="bshd",
                    backward=True, nan_padding=True, seed=3)
    assert (c.dv, c.dtype, c.window, c.seqlens_q, c.seqlens_k) == (64, "bfloat16", (3, None), (5, 2), (7, 1))
    assert c.backward and c.distribution == "nan_padding" and c.layout == "bshd" and c.seed == 3
    f = device_case(B=1, Hq=1, Hkv=1, Lq=1, Lk=1, d=64, dtype=None, fp8=FP8Spec("e5m2", "per_head"))
    assert f.dtype == "float8_e5m2" and f.fp8.granularity == "per_head"


def test_every_listed_case_is_a_conformance_case():
    for spec in cases.FA3_BWD_CASES + cases.FA3_BWD_DETERMINISM_CASES:
        kw = {k: v for k, v in spec.items() if k not in ("nan_padding",)}
        assert device_case(**kw, backward=True, nan_padding=bool(spec.get("nan_padding"))).backward
    for spec in cases.FP8_CASES:
        fp8 = FP8Spec(spec.get("format", "e4m3fn"), spec["granularity"], incoherent=spec.get("incoherent", False))
        shape = {k: spec[k] for k in ("B", "Hq", "Hkv", "Lq", "Lk", "d")}
        assert device_case(**shape, dtype=None, fp8=fp8).fp8 == fp8


def test_real_rows():
    v = real_rows(2, 1, 4, [4, 1])
    assert v[0].all() and v[1, 0].tolist() == [True, False, False, False]
    assert real_rows(1, 2, 3).all()


def _problem(dtype="float16", **sem):
    rng = np.random.default_rng(0)
    q, k, v = (round_to_dtype(rng.standard_normal(s), dtype) for s in ((2, 2, 6, 64), (2, 2, 9, 64), (2, 2, 9, 64)))
    case = device_case(B=2, Hq=2, Hkv=2, Lq=6, Lk=9, d=64, dtype=dtype, **sem)
    out, lse = oracles.attention(q, k, v, **case.oracle_kwargs)
    return case, CaseInputs(q=q, k=k, v=v), round_to_dtype(out, dtype), lse.astype(np.float32)


def test_the_oracle_rounded_passes_and_a_wrong_output_fails_with_the_index():
    case, inputs, out, lse = _problem(causal=True, seqlens_q=(6, 3), seqlens_k=(9, 2))
    ref = oracle(case, inputs)
    assert passed(judge_outputs(case, ref, out, lse, out_dtype="float16"))
    bad = out.copy()
    bad[1, 0, 2, 5] += 0.05
    v = judge_outputs(case, ref, bad, lse, out_dtype="float16")
    assert not passed(v) and v.checks["out"] == "fail" and "[1, 0, 2, 5]" in v.message


def test_what_the_launcher_reports_reaches_the_verdict():
    case, inputs, out, lse = _problem(causal=True, alignment="top_left")
    ref = oracle(case, inputs)
    v = judge_outputs(case, ref, out, lse, out_dtype="float16", mutated=["k"], unwritten=3)
    assert v.checks["inputs_unchanged"] == "fail" and v.checks["out_fully_written"] == "fail"
    assert not passed(judge_outputs(case, ref, out, lse, out_dtype="bfloat16"))  # out_dtype check


def test_fully_masked_rows_keep_their_convention():
    case, inputs, out, lse = _problem(seqlens_k=(9, 0))  # batch 1 has no key: O = 0, LSE = -inf (SEMANTICS.md §8)
    ref = oracle(case, inputs)
    assert np.isneginf(lse[1]).all()
    plus = lse.copy()
    plus[1] = np.inf
    v = judge_outputs(case, ref, out, plus, out_dtype="float16")
    assert not passed(v) and v.checks["lse"] == "fail"
