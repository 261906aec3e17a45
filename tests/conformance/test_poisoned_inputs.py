"""Poisoned inputs judged fairly (SEMANTICS.md §17): planted NaN, dense masks, named findings.

- padded query rows reach an SDPA-signature function as fully masked rows (all False in the mask it
  gets), padded keys as keys masked out for every query: a NaN-safe function passes every
  ``nan_padding`` case, backward included; a correct dense one gets only the finding masked_nan;
- the message says what was planted and where ("K/V rows 20..63 of batch 1 are padding and hold
  NaN; out[1, 0, 0, :] is NaN");
- severity: FINDING, FAIL under strict or when the adapter claims NaN-safe masking; reading padding
  the adapter was told to skip (sequence lengths) is FAIL; NaN in a batch entry with no planted NaN is
  the kernel's own and FAIL;
- the ci profile: outcome counts of `torch-sdpa-math`, `good_sdpa` and a correct SDPA-signature function
  written here from scratch, on every case: no FAIL, FINDING only on ``nan_padding``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from attention_conformance.adapters.base import Adapter
from attention_conformance.adapters.registry import LoadedAdapter, load
from attention_conformance.adapters.third_party import wrap_sdpa_function
from attention_conformance.cases import catalog
from attention_conformance.cases.inputs import planted_nan
from attention_conformance.running.engine import Runner

NAN_CASES = catalog.select(catalog.cases("ci"), "nan_padding")


def scratch_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """softmax(scale q k^T + mask) v in float64, written from torch SDPA's documentation only: correct, dense
    (P V over every key, so 0 x NaN reaches the output where V holds NaN at masked-out keys)."""
    assert dropout_p == 0.0
    if q.shape[-3] != k.shape[-3]:
        assert enable_gqa
        g = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    s = (q.double() @ k.double().transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    visible = torch.ones(s.shape, dtype=torch.bool)
    if is_causal:
        visible = visible & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            visible = visible & attn_mask
        else:
            s = s + attn_mask.double()
    s = s.masked_fill(~visible, -math.inf)
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    den = p.sum(-1, keepdim=True)
    p = p / torch.where(den == 0, torch.ones_like(den), den)
    return (p @ v.double()).to(q.dtype)


def nan_safe_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """`scratch_sdpa` that keeps masked-out positions out of the arithmetic at O(L d) extra cost: query rows
    with no visible key and keys no query sees are zeroed before the products (SEMANTICS.md §6)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool and attn_mask.dim() == 4:
        row_dead = ~attn_mask.any(-1, keepdim=True)  # [B, 1 or Hq, Lq, 1]
        key_dead = ~attn_mask.any(-2).unsqueeze(-1)  # [B, 1 or Hq, Lk, 1]
        q = torch.where(row_dead, torch.zeros_like(q), q)
        if key_dead.shape[1] in (1, k.shape[1]):
            k = torch.where(key_dead, torch.zeros_like(k), k)
            v = torch.where(key_dead, torch.zeros_like(v), v)
    return scratch_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _run(adapter, cases, strict: bool = False):
    runner = Runner([LoadedAdapter(adapter.name, adapter.name, adapter)], "cpu", determinism="none", strict=strict)
    try:
        return [runner.run_case(runner.adapters[0], c) for c in cases]
    finally:
        runner.close()


def _counts(results) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        out[r.outcome] = out.get(r.outcome, 0) + 1
    return out


def test_padded_rows_reach_an_sdpa_function_as_masked_positions():
    seen = {}

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        seen.update(q=q.detach().clone(), mask=None if attn_mask is None else attn_mask.clone())
        return scratch_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    case = next(c for c in NAN_CASES if c.seqlens_q is not None and min(c.seqlens_q) < c.Lq)
    _run(wrap_sdpa_function(spy, "spy"), [case])
    mask = seen["mask"].expand(case.B, case.Hq, case.Lq, case.Lk)
    for b, (sq, sk) in enumerate(zip(case.seqlens_q, case.seqlens_k, strict=True)):
        assert not mask[b, :, sq:, :].any(), "padded query rows must be fully masked"
        assert not mask[b, :, :, sk:].any(), "padded keys must be masked for every query"
        assert torch.isnan(seen["q"][b, :, sq:]).all()  # the planted NaN is still there: the mask must keep it out


def test_nan_safe_function_passes_every_poisoned_case_backward_included():
    results = _run(wrap_sdpa_function(nan_safe_sdpa, "nan-safe"), NAN_CASES)
    assert {r.outcome for r in results} == {"PASS"}, [(r.case_id, r.outcome, r.message[:300]) for r in results]
    assert any(c.backward for c in NAN_CASES)


def test_dense_function_gets_the_named_finding_with_what_and_where():
    results = _run(wrap_sdpa_function(scratch_sdpa, "scratch"), NAN_CASES)
    assert {r.outcome for r in results} == {"FINDING"}, [(r.case_id, r.outcome) for r in results]
    first = results[0]
    assert first.findings == ["masked_nan:out"]
    msg = first.message
    assert "K/V rows 20..63 of batch 1 are padding and hold NaN" in msg, msg
    assert "out[1, 0, 0, :] is NaN" in msg and "named finding masked_nan" in msg, msg
    assert "np.float64" not in msg
    bwd = [r for r in results if r.case.get("backward")]
    assert bwd and all("masked_nan:dk" in r.findings for r in bwd), [r.findings for r in bwd]  # dS = 0 x q = NaN
    strict = _run(wrap_sdpa_function(scratch_sdpa, "scratch"), NAN_CASES[:2], strict=True)
    assert {r.outcome for r in strict} == {"FAIL"}


def test_claiming_nan_safe_masking_makes_it_a_fail():
    adapter = wrap_sdpa_function(scratch_sdpa, "claims-nan-safe")
    caps = dataclasses.replace(adapter.caps_for("cpu"), nan_safe_masking=True)
    adapter.caps_for = lambda device: caps  # the function claims NaN-safe masking; it is dense
    (res,) = _run(adapter, NAN_CASES[:1])
    assert res.outcome == "FAIL" and "nan_safe_masking" in res.message, res.message


class _SeqlensReader(Adapter):
    """Told the sequence lengths (no dense mask), but multiplies every padded V row by zero: FAIL."""

    name = "toy-reads-padding"

    def __init__(self):
        self.capabilities = load("reference-fa2").adapter.capabilities

    def forward(self, inputs, case, device):
        ref = load("reference-fa2").adapter.forward(inputs, case, device)
        out = ref.out.copy()
        for b, sk in enumerate(case.seqlens_k or ()):
            if sk < case.Lk:
                out[b] = out[b] + 0.0 * inputs.v[b, :1, case.Lk - 1, :].sum()  # 0 x NaN
        return dataclasses.replace(ref, out=out)


def test_reading_padding_the_kernel_was_told_to_skip_is_a_fail():
    case = NAN_CASES[0]
    (res,) = _run(_SeqlensReader(), [case])
    assert res.outcome == "FAIL", res.message
    assert "given the sequence lengths and read padding" in res.message and "hold NaN" in res.message, res.message


def test_nan_in_a_batch_entry_without_planted_nan_is_the_kernels_own():
    case = next(c for c in NAN_CASES if set(range(c.B)) - planted_nan(c).reachable("out"))
    clean = sorted(set(range(case.B)) - planted_nan(case).reachable("out"))

    def nan_in_clean_batch(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        out = nan_safe_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa).clone()
        out[clean[0], 0, 0, 0] = float("nan")
        return out

    (res,) = _run(wrap_sdpa_function(nan_in_clean_batch, "own-nan"), [case])
    assert res.outcome == "FAIL" and "the kernel's own" in res.message, res.message
    assert "masked_nan" not in res.findings


def test_ci_profile_counts_for_sdpa_signature_functions():
    """`torch-sdpa-math`, `good_sdpa` and the from-scratch function on the whole ci profile: no FAIL, no
    HARNESS_ERROR; FINDING (masked_nan) exactly on the nan_padding cases; paged cases NOT_SUPPORTED."""
    cases = catalog.cases("ci")
    good = load("attention_conformance.examples.good_sdpa:attention").adapter
    for adapter in (load("torch-sdpa-math").adapter, good, wrap_sdpa_function(scratch_sdpa, "scratch")):
        results = _run(adapter, cases)
        counts = _counts(results)
        assert set(counts) <= {"PASS", "FINDING", "NOT_SUPPORTED"}, (adapter.name, counts)
        finding = {r.case_id for r in results if r.outcome == "FINDING"}
        assert finding == {c.id for c in NAN_CASES}, (adapter.name, finding)
        paged = [r for r in results if "paged" in r.case.get("layout", "")]
        assert paged and all(r.outcome == "NOT_SUPPORTED" for r in paged)
        assert np.isfinite(counts.get("PASS", 0))


def test_run_strict_turns_the_finding_into_a_fail(tmp_path, capsys):
    """``python -m attention_conformance run --strict``: masked_nan is FAIL (exit 1); without it FINDING (exit 0)."""
    import json

    from attention_conformance.cli import main

    case = next(c for c in NAN_CASES if not c.backward)
    argv = ["run", "--impl", "torch-sdpa-math", "-k", case.id, "--quiet"]
    assert main(argv + ["--report-dir", str(tmp_path / "plain")]) == 0
    assert main(argv + ["--report-dir", str(tmp_path / "strict"), "--strict"]) == 1
    plain = json.loads((tmp_path / "plain" / "report.json").read_text())
    strict = json.loads((tmp_path / "strict" / "report.json").read_text())
    assert plain["summary"]["by_outcome"]["FINDING"] == 1 and strict["summary"]["by_outcome"]["FAIL"] == 1
    assert plain["summary"]["findings_by_class"] == {"torch-sdpa-math": {"masked_nan": 1}}
    assert "masked_nan" in (tmp_path / "plain" / "report.md").read_text()
    assert "masked_nan" in (tmp_path / "plain" / "report.html").read_text()
    assert strict["strict"] is True
