"""NaN in padded rows (SEMANTICS.md §7, §15; inputs recipe ``nan_padding``, catalog group ``nan_padding``).

Bug classes: "NaN in masked-out K still poisons output" (torch #101967)
and "NaN dQ at padded/out-of-bounds keys in varlen" (flash-attention #443, #752). The recipe puts NaN
in every padded row of q, k, v, dout; the oracle never reads them. A kernel told the sequence lengths
that reads them anyway (the NumPy references without their bounds checks) must FAIL with a message
naming the NaN; a dense SDPA-signature function, which receives the padding as masked-out positions
of a dense mask, gets the named finding masked_nan (SEMANTICS.md §17), FAIL under strict; a kernel that
bounds-checks its tile loads (the NumPy references) must PASS.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attention_conformance import oracles
from attention_conformance.adapters.registry import LoadedAdapter, load
from attention_conformance.cases import catalog
from attention_conformance.cases.case import DISTRIBUTIONS
from attention_conformance.cases.inputs import make_inputs
from attention_conformance.running.engine import Runner

NAN_CASES = catalog.select(catalog.cases("ci"), "nan_padding")
FWD_CASES = [c for c in NAN_CASES if not c.backward]
BWD_CASES = [c for c in NAN_CASES if c.backward]
REFERENCES = ("reference-fa1", "reference-fa2", "reference-fa3", "reference-splitkv")


def _run(adapter, case, strict: bool = False):
    runner = Runner([LoadedAdapter(adapter.name, adapter.name, adapter)], "cpu", determinism="none", strict=strict)
    try:
        return runner.run_case(runner.adapters[0], case)
    finally:
        runner.close()


def _padded(case, L: int, lens) -> np.ndarray:
    """bool [B, 1, L, 1]: True on padded rows."""
    lens = np.full(case.B, L) if lens is None else np.asarray(lens)
    return (np.arange(L)[None, :] >= lens[:, None])[:, None, :, None]


def naive_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """softmax(scale q k^T + mask) v over *all* Lk keys in float32 (empty rows -> 0): correct values,
    but it multiplies P = 0 by the padded V rows, as torch math does (torch #101967)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.float()
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isneginf(m), torch.zeros_like(m), m))
    p = p / p.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return (p @ v.float()).to(q.dtype)


def test_catalog_has_the_group():
    assert "nan_padding" in DISTRIBUTIONS
    assert FWD_CASES and BWD_CASES
    assert {c.dtype for c in NAN_CASES} >= {"float16", "bfloat16", "float32"}
    assert any(c.Hq != c.Hkv for c in NAN_CASES) and any(c.causal and c.alignment == "bottom_right" for c in NAN_CASES)
    assert any(c.seqlens_k is not None and 0 in c.seqlens_k for c in NAN_CASES)
    assert all(c.varlen and c.distribution == "nan_padding" for c in NAN_CASES)


@pytest.mark.parametrize("case", NAN_CASES, ids=lambda c: c.id)
def test_recipe_poisons_exactly_the_padding(case):
    """NaN on padded rows only; real rows are those of the ``normal`` twin (same seed)."""
    got = make_inputs(case)
    twin = make_inputs(case.replace(distribution="normal"))
    pq, pk = _padded(case, case.Lq, case.seqlens_q), _padded(case, case.Lk, case.seqlens_k)
    arrays = [("q", pq), ("k", pk), ("v", pk)] + ([("dout", pq)] if case.backward else [])
    for name, pad in arrays:
        x, ref = getattr(got, name), getattr(twin, name)
        pad = np.broadcast_to(pad, x.shape)
        assert np.array_equal(np.isnan(x), pad), f"{name}: NaN must be exactly on the padded rows ({case.id})"
        assert np.array_equal(x[~pad], ref[~pad]), f"{name}: real rows differ from the normal twin ({case.id})"


def test_recipe_without_padding_kv_broadcast_and_fp8():
    plain = catalog._mk("unit", Lq=9, Lk=11, distribution="nan_padding")
    assert all(np.isfinite(getattr(make_inputs(plain), n)).all() for n in ("q", "k", "v"))
    bc = catalog._mk("unit", B=3, Lq=9, Lk=11, seqlens_k=(11, 4, 7), seqlens_q=(9, 2, 9), layout="kv_broadcast",
                     distribution="nan_padding")
    inp = make_inputs(bc)
    assert all(np.array_equal(inp.k[b], inp.k[0], equal_nan=True) for b in range(3))  # still one shared K
    assert np.isnan(inp.k[:, :, 11:]).all() and np.isfinite(inp.k[:, :, :11]).all()  # max(seqlens_k) = 11
    assert np.isnan(inp.q[1, :, 2:]).all() and np.isfinite(inp.q[1, :, :2]).all()
    fp8 = catalog._mk("unit", Lq=16, Lk=16, d=16, dtype="float8_e4m3fn", seqlens_k=(9,), seqlens_q=(16,),
                      distribution="nan_padding", fp8=catalog.FP8Spec("e4m3fn", "per_tensor"))
    assert np.isfinite(make_inputs(fp8).k).all()  # the kernel reads the quantized codes: no NaN recipe


@pytest.mark.parametrize("case", BWD_CASES, ids=lambda c: c.id)
def test_oracle_never_reads_the_padding(case):
    """The oracle on NaN padding equals the oracle on the normal twin on real rows; dk, dv finite (§7, §13)."""
    got, twin = make_inputs(case), make_inputs(case.replace(distribution="normal"))
    res = {}
    for tag, inp in (("nan", got), ("twin", twin)):
        kw = dict(case.oracle_kwargs, mask=inp.mask, bias=inp.bias)
        out, lse = oracles.attention(inp.q, inp.k, inp.v, **kw)
        res[tag] = (out, lse) + oracles.attention_backward(inp.q, inp.k, inp.v, inp.dout, **kw)
    real = ~_padded(case, case.Lq, case.seqlens_q)[..., 0]  # [B, 1, Lq]
    for i, name in enumerate(("out", "lse", "dq")):
        a, b = res["nan"][i], res["twin"][i]
        sel = np.broadcast_to(real if a.ndim == 3 else real[..., None], a.shape)
        np.testing.assert_allclose(a[sel], b[sel], rtol=1e-12, atol=1e-300, err_msg=f"{name} ({case.id})")
    for i, name in ((3, "dk"), (4, "dv")):
        assert np.isfinite(res["nan"][i]).all(), f"{name} not finite ({case.id})"
        np.testing.assert_allclose(res["nan"][i], res["twin"][i], rtol=1e-12, atol=1e-300, err_msg=name)


@pytest.mark.parametrize("case", FWD_CASES, ids=lambda c: c.id)
def test_dense_sdpa_reading_masked_kv_is_the_named_finding(case):
    """The naive SDPA passes the normal twin; on the NaN-padded case its NaN (0 x NaN in P V, from keys the
    dense mask masks out) is the named finding masked_nan, naming what was planted; FAIL under strict."""
    from attention_conformance.adapters.third_party import wrap_sdpa_function

    adapter = wrap_sdpa_function(naive_sdpa, "naive-sdpa")
    ok = _run(adapter, case.replace(distribution="normal"))
    assert ok.outcome == "PASS", ok.message
    found = _run(adapter, case)
    assert found.outcome == "FINDING" and "masked_nan:out" in found.findings, found.message
    assert "are padding and hold NaN" in found.message and "got nan" in found.message, found.message
    strict = _run(adapter, case, strict=True)
    assert strict.outcome == "FAIL" and "--strict" in strict.message, strict.message


@pytest.mark.parametrize("spec", REFERENCES)
def test_reference_kernels_pass(spec):
    """The references bounds-check their tile loads (kernels/reference/_common.py): PASS on every case."""
    adapter = load(spec).adapter
    outcomes = {c.id: _run(adapter, c) for c in NAN_CASES}
    bad = {k: (r.outcome, r.message) for k, r in outcomes.items() if r.outcome not in ("PASS", "NOT_SUPPORTED")}
    assert not bad, bad
    assert sum(r.outcome == "PASS" for r in outcomes.values()) >= len(FWD_CASES)


@pytest.mark.parametrize("module, line, case_list, quantity", [
    ("attention_conformance.kernels.reference._common", "self.v = self.load_k_rows(self.v)", FWD_CASES, "out"),
    ("attention_conformance.kernels.reference._common", "self.q = self.load_q_rows(self.q)", BWD_CASES, "dk"),
    ("attention_conformance.kernels.reference.fa2", "dO = p.load_q_rows(dO)", BWD_CASES, "dk"),
], ids=["padded_v_read", "padded_q_read_bwd", "padded_dout_read_bwd"])
def test_reference_without_bounds_check_fails(module, line, case_list, quantity):
    """Drop one bounds-checked load from reference-fa2: some nan_padding case FAILS on `quantity`, naming NaN."""
    from attention_conformance.property_tests.mutants.apply import Edit
    from attention_conformance.property_tests.mutants.catalog import Mutant
    from attention_conformance.property_tests.mutants.runner import build_adapter

    lhs = line.split(" = ")[0]
    mutant = Mutant("no_bounds_check", "reads padded rows", "§7", "reference-fa2", module,
                    (Edit(line, f"{lhs} = {lhs}"),))
    adapter = build_adapter(mutant)
    results = [_run(adapter, c) for c in case_list]
    failed = [r for r in results if r.outcome == "FAIL"]
    assert failed, [(r.case_id, r.outcome) for r in results]
    assert any(f"{quantity}:" in r.message and "got nan" in r.message for r in failed), failed[0].message


@pytest.mark.parametrize("spec", ["torch-sdpa-math", "torch-sdpa-flash", "torch-flex"])
def test_torch_cpu_finding_is_recorded(spec):
    """torch 2.13 on CPU lets NaN at masked-out (padded) K/V through 0 x NaN (torch #101967 class): the named
    finding masked_nan, confirmed by the shipped expectations entry (it stays FINDING); under --strict it is
    a FAIL the entry does not waive."""
    from attention_conformance.verdict.expectations import RunExpectations

    la = load(spec)
    expect = RunExpectations.for_run([], default=True, device="cpu", loaded=[la])
    case = FWD_CASES[0]
    res = _run(la.adapter, case)
    assert res.outcome == "FINDING" and "masked_nan:out" in res.findings, res.message
    (seen,) = expect.apply([res])
    assert seen.outcome == "FINDING" and seen.expectation["id"] == "torch-cpu-nan-in-masked-rows", seen.message
    strict = _run(la.adapter, case, strict=True)
    assert strict.outcome == "FAIL" and "got nan" in strict.message, strict.message
    (still,) = expect.apply([strict])
    assert still.outcome == "FAIL" and "another failure" in still.message, "--strict must keep the finding a FAIL"
    clean = _run(la.adapter, case.replace(distribution="normal"))
    assert clean.outcome == "PASS" and expect.apply([clean])[0].outcome == "PASS"


def test_nan_lse_of_a_keyless_row_is_graded_as_nan_elsewhere():
    """A sequence with no keys (seqlens_k 0) hands its rows only masked-out padding, where the case planted NaN:
    torch 2.13's CPU flash kernel returns LSE NaN there (0 x NaN), as it returns out NaN. The LSE's NaN is the named
    finding masked_nan like out's (it had been a FAIL: `checks.compare_lse` kept NaN on a keyless row out of the
    non-finite count, so the judge never asked whether planted NaN could reach it; the property suite drew this
    case); FAIL under strict; without planted NaN the row's LSE is right."""
    case = catalog._seeded(catalog._mk("unit", B=2, Lq=1, Lk=1, d=8, dtype="float16", seqlens_q=(1, 1),
                                       seqlens_k=(0, 1), distribution="nan_padding"))
    adapter = load("torch-sdpa-flash").adapter
    found = _run(adapter, case)
    assert found.outcome == "FINDING" and "masked_nan:lse" in found.findings, found.message
    assert _run(adapter, case, strict=True).outcome == "FAIL"
    assert _run(adapter, case.replace(distribution="normal")).outcome == "PASS"


def test_nan_lse_of_a_keyless_row_that_no_planted_nan_reaches_fails():
    """The same NaN LSE where nothing was planted (no padding: every row of the case is real, its keyless rows are
    bottom-right causal ones) is the kernel's own: FAIL."""
    from attention_conformance.verdict import checks

    ref = np.array([[[-np.inf, 0.5]]])
    got = np.array([[[np.nan, 0.5]]])
    stats, msg, _ = checks.compare_lse(got, ref, np.full(ref.shape, 1e-3), np.ones(ref.shape, bool))
    assert msg is not None and "must have LSE = -inf" in msg and stats.nonfinite == 1
    from attention_conformance.adapters.base import Capabilities
    from attention_conformance.verdict.judge import Verdict, _Judgement

    case = catalog._seeded(catalog._mk("unit", B=1, Lq=2, Lk=1, d=8, dtype="float16", causal=True))
    j = _Judgement(Verdict(outcome="PASS"), case, Capabilities(dtypes=frozenset({"float16"}), padding_as_mask=True),
                   strict=False)
    j.lse(stats, msg)
    assert j.v.checks["lse"] == "fail" and not j.v.findings and "must have LSE = -inf" in j.v.failures[0]
