"""torch SDPA (math, CPU flash) and FlexAttention adapters against the FP64 oracle on small CPU cases.

Covers SEMANTICS.md §4 (both causal alignments; bottom-right through a boolean mask), §5 windows,
§6 masks and biases, §7 varlen, §8 fully masked rows (out = 0, LSE conventions by name), §9 GQA and
dv != d, §12 LSE (CPU flash op and flex, natural log), §13 backward, and the bshd / kv_broadcast
layouts; plus the unavailable reasons of the CUDA-only SDPA backends.
"""

from __future__ import annotations

import numpy as np
import pytest
from adapter_helpers import check_backward, check_forward

from attention_conformance.adapters.torch_flex import FlexAttention
from attention_conformance.adapters.torch_sdpa import SdpaCudnn, SdpaEfficient, SdpaFlash, SdpaMath, sdpa_plan
from attention_conformance.cases.case import Case

torch = pytest.importorskip("torch")

C = Case  # family, B, Hq, Hkv, Lq, Lk, d, dv
FORWARD_CASES = [
    C("t", 2, 4, 2, 5, 70, 16, 16, dtype="float32"),  # GQA, Lk past a 64 tile
    C("t", 2, 4, 2, 9, 5, 16, 16, dtype="float32", causal=True, alignment="bottom_right"),  # empty rows
    C("t", 2, 4, 1, 5, 9, 16, 16, dtype="float32", causal=True, alignment="top_left"),  # native is_causal
    C("t", 1, 2, 2, 6, 6, 16, 16, dtype="float64", window=(2, 1)),
    C("t", 2, 2, 1, 6, 9, 16, 16, dtype="float32", mask="full_rows"),
    C("t", 2, 2, 2, 6, 9, 16, 16, dtype="bfloat16", bias="neg_inf_rows"),
    C("t", 2, 2, 2, 6, 9, 16, 16, dtype="float16", seqlens_q=(4, 6), seqlens_k=(9, 3), causal=True),
    C("t", 2, 4, 2, 5, 7, 16, 16, dtype="float32", layout="bshd", mask="random_heads"),
    C("t", 3, 2, 1, 5, 7, 16, 16, dtype="float64", layout="kv_broadcast", scale=-0.5),
]
BACKWARD_CASES = [
    C("t", 2, 4, 2, 5, 7, 16, 16, dtype="float32", layout="bshd", backward=True, causal=True),
    C("t", 3, 4, 2, 5, 7, 16, 16, dtype="float64", layout="kv_broadcast", backward=True, mask="full_rows"),
    C("t", 2, 2, 2, 6, 9, 16, 16, dtype="float64", seqlens_q=(4, 6), seqlens_k=(9, 3), backward=True, causal=True),
]


@pytest.mark.parametrize("adapter", [SdpaMath(), SdpaFlash()], ids=lambda a: a.name)
@pytest.mark.parametrize("case", FORWARD_CASES, ids=lambda c: c.id)
def test_sdpa_forward_matches_oracle(adapter, case):
    fo, _ = check_forward(adapter, case)
    assert fo.kernels == ()  # CPU: no profiler claim
    if adapter.name == "torch-sdpa-flash":
        assert fo.lse is not None
    else:
        assert fo.lse is None


@pytest.mark.backward
@pytest.mark.parametrize("adapter", [SdpaMath(), SdpaFlash()], ids=lambda a: a.name)
@pytest.mark.parametrize("case", BACKWARD_CASES, ids=lambda c: c.id)
def test_sdpa_backward_matches_oracle(adapter, case):
    check_backward(adapter, case)


def test_sdpa_math_dv_ne_d_and_flash_declines_it_with_torchs_reason():
    case = C("t", 1, 2, 2, 4, 6, 16, 8, dtype="float32")
    check_forward(SdpaMath(), case)
    assert "dv=8 != d=16" in SdpaFlash().supports(case, "cpu")
    said = SdpaFlash()._torch_refusal(case, "cpu")  # torch's dispatcher, asked directly
    assert said is not None and "same last dimension" in said


def test_cpu_flash_lse_convention_on_empty_rows_is_zero_and_translated():
    """The CPU flash op writes LSE = 0 on fully masked rows; the adapter maps it to -inf, names it "0"."""
    case = C("t", 1, 2, 2, 6, 9, 16, 16, dtype="float32", mask="full_rows")
    fo, _ = check_forward(SdpaFlash(), case)
    assert fo.lse_convention == "0"
    assert np.all(np.isneginf(fo.lse[:, :, [0, 3, 5]]))
    assert np.all(fo.out[:, :, [0, 3, 5]] == 0.0)


@pytest.mark.xfail(reason="torch 2.13 CPU flash SDPA with is_causal=True and scale <= 0 gives NaN in every row "
                          "with a causally masked key (consistent with -inf masking before the scale multiply); "
                          "found by this harness; the math backend and the same mask as attn_mask are correct. "
                          "strict: torch is pinned, so an XPASS means the harness stopped seeing the NaN",
                   strict=True)
@pytest.mark.parametrize("scale", [-0.3, 0.0])
def test_cpu_flash_native_causal_with_nonpositive_scale(scale):
    check_forward(SdpaFlash(), C("t", 1, 1, 1, 8, 8, 16, 16, dtype="float32", causal=True, scale=scale))


@pytest.mark.parametrize("scale", [-0.3, 0.0])
def test_math_and_masked_flash_are_right_with_nonpositive_scale(scale):
    case = C("t", 1, 1, 1, 8, 8, 16, 16, dtype="float32", causal=True, scale=scale)
    check_forward(SdpaMath(), case)
    check_forward(SdpaFlash(), case.replace(Lk=9, alignment="bottom_right"))  # non-square: bool-mask path


def test_sdpa_plan_uses_native_causal_only_where_it_means_the_case():
    tl = C("t", 1, 1, 1, 3, 5, 4, 4, causal=True, alignment="top_left")
    assert sdpa_plan(tl, None, None) == (True, None)
    sq = C("t", 1, 1, 1, 4, 4, 4, 4, causal=True, alignment="bottom_right")
    assert sdpa_plan(sq, None, None) == (True, None)
    br = C("t", 1, 1, 1, 5, 3, 4, 4, causal=True, alignment="bottom_right")
    is_causal, mask = sdpa_plan(br, None, None)
    assert is_causal is False and mask.shape == (1, 1, 5, 3)
    assert mask[0, 0].tolist()[:3] == [[False] * 3, [False] * 3, [True, False, False]]


def test_mutation_is_reported():
    case = C("t", 1, 2, 2, 4, 6, 16, 16, dtype="float32")
    adapter = SdpaMath()
    original = adapter._call

    def mutating_call(c):
        out = original(c)
        with torch.no_grad():
            c.t.k.mul_(2.0)
        return out

    adapter._call = mutating_call
    from attention_conformance.cases.inputs import make_inputs

    fo = adapter.forward(make_inputs(case), case, "cpu")
    assert fo.mutated_inputs == ("k",)


@pytest.mark.parametrize("cls", [SdpaEfficient, SdpaCudnn])
def test_cuda_only_sdpa_backends_are_unavailable_on_cpu(cls):
    reason = cls().unavailable_reason("cpu")
    assert reason is not None and "no CPU implementation" in reason
    assert cls().supports(C("t", 1, 1, 1, 2, 2, 8, 8), "cpu") == reason


FLEX_CASES = [
    C("t", 2, 4, 2, 9, 5, 16, 16, dtype="float32", causal=True, alignment="bottom_right"),
    C("t", 1, 2, 2, 5, 9, 16, 16, dtype="float64", causal=True, alignment="top_left", window=(1, None)),
    C("t", 2, 2, 1, 6, 9, 16, 8, dtype="float32", softcap=2.0, bias="random", mask="full_rows"),
    C("t", 2, 2, 2, 6, 9, 16, 16, dtype="bfloat16", seqlens_q=(4, 6), seqlens_k=(9, 3), causal=True,
      layout="bshd"),
]


@pytest.mark.parametrize("case", FLEX_CASES, ids=lambda c: c.id)
def test_flex_forward_and_lse_match_oracle(case):
    fo, _ = check_forward(FlexAttention(), case)
    assert fo.lse is not None and fo.lse_convention == "-inf"


def test_flex_lse_is_natural_log():
    """In float64 the LSE agrees with the oracle's natural-log LSE to 1e-12 (a base-2 LSE would be off by 1/ln 2)."""
    fo, _ = check_forward(FlexAttention(), C("t", 1, 2, 2, 4, 7, 16, 16, dtype="float64", scale=0.9))
    assert np.all(np.abs(fo.lse) > 1e-3)  # nonzero, so a scale factor would show


def test_flex_declares_no_cpu_backward():
    case = C("t", 1, 1, 1, 3, 3, 16, 16, dtype="float32", backward=True)
    assert FlexAttention().supports(case, "cpu") == "backward not supported"


@pytest.mark.backward
def test_varlen_padded_rows_are_fully_masked_rows():
    """Padded query rows reach an SDPA-signature function as fully masked rows (SEMANTICS.md §17), whatever their
    bias (a -inf bias row here: rows 1 and 4, padded since seqlens_q = 1): a function that returns 0 there (§8)
    passes forward and backward; a naive softmax (NaN on fully masked rows) fails dk with a message saying why."""
    from attention_conformance.adapters.registry import LoadedAdapter
    from attention_conformance.adapters.third_party import wrap_sdpa_function
    from attention_conformance.examples.good_sdpa import attention as good
    from attention_conformance.running.engine import Runner

    def naive(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if attn_mask is not None:
            s = s + attn_mask if attn_mask.dtype != torch.bool else s.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v  # NaN on rows with no finite score

    case = C("t", 2, 2, 2, 6, 9, 16, 16, dtype="float64", seqlens_q=(1, 1), seqlens_k=(9, 4), bias="neg_inf_rows",
             backward=True)
    check_backward(wrap_sdpa_function(good, "good"), case)
    check_forward(FlexAttention(), case.replace(backward=False))
    adapter = wrap_sdpa_function(naive, "naive")
    la = LoadedAdapter("naive", "naive", adapter)
    res = Runner([la], "cpu").run_case(la, case)
    assert res.outcome == "FAIL" and res.checks["dk"] == "fail", res.message
    assert "fully masked rows" in res.message, res.message


# -- the four SDPA spellings (NAME@ENTRY): each on the cases it can express, declining the rest ---------
SPELLING_CASES = [
    (C("t", 2, 4, 2, 5, 9, 16, 16, dtype="float32"), {"is_causal", "bool_mask"}),  # no masking at all
    (C("t", 2, 4, 1, 5, 9, 16, 16, dtype="float32", causal=True, alignment="top_left"),
     {"is_causal", "bool_mask", "causal_upper_left"}),
    (C("t", 2, 4, 2, 5, 9, 16, 16, dtype="float32", causal=True, alignment="bottom_right"),
     {"bool_mask", "causal_lower_right"}),
    (C("t", 1, 2, 2, 7, 7, 16, 16, dtype="float64", causal=True, alignment="bottom_right"),  # square: one mask
     {"is_causal", "bool_mask", "causal_upper_left", "causal_lower_right"}),
    (C("t", 2, 2, 1, 6, 9, 16, 16, dtype="float32", mask="full_rows"), {"bool_mask"}),
    (C("t", 2, 2, 2, 6, 9, 16, 16, dtype="float32", bias="neg_inf_rows"), set()),
    (C("t", 2, 2, 2, 6, 9, 16, 16, dtype="float32", seqlens_q=(4, 6), seqlens_k=(9, 3), causal=True),
     {"bool_mask"}),
    (C("t", 1, 2, 2, 6, 9, 16, 16, dtype="float32", window=(2, 1)), {"bool_mask"}),
]
SPELLINGS = ("is_causal", "bool_mask", "causal_upper_left", "causal_lower_right")


@pytest.mark.parametrize("cls", [SdpaMath, SdpaFlash], ids=["math", "flash"])
@pytest.mark.parametrize("entry", SPELLINGS)
@pytest.mark.parametrize("case,expressible", SPELLING_CASES, ids=[c.id + str(i) for i, (c, _) in
                                                                   enumerate(SPELLING_CASES)])
def test_each_sdpa_spelling_runs_what_it_expresses(cls, entry, case, expressible):
    adapter = cls(entry)
    assert adapter.name == f"{cls.name}@{entry}"
    if cls is SdpaFlash and case.dv != case.d:
        pytest.skip("CPU flash: dv == d only")
    if entry not in expressible:
        reason = adapter.supports(case, "cpu")
        assert reason is not None and reason.startswith(f"SDPA spelling {entry} ("), reason
        return
    fo, _ = check_forward(adapter, case)
    spelled = {"is_causal": "spelling: is_causal=", "bool_mask": "dense boolean attn_mask",
               "causal_upper_left": "bias.causal_upper_left", "causal_lower_right": "bias.causal_lower_right"}
    assert any(spelled[entry] in n for n in fo.notes), fo.notes


def test_causal_bias_spellings_hand_torch_a_causal_bias_object(monkeypatch):
    """The causal_* spellings must reach SDPA as torch.nn.attention.bias.CausalBias objects (not as the
    adapter's own dense mask), and bool_mask as a boolean tensor even where no key is masked."""
    from torch.nn.attention.bias import CausalBias

    seen = []
    real = SdpaMath._call

    def spy(self, c):
        seen.append((type(c.call_mask), c.args.is_causal))
        return real(self, c)

    monkeypatch.setattr(SdpaMath, "_call", spy)
    br = C("t", 1, 2, 2, 5, 9, 16, 16, dtype="float32", causal=True)
    check_forward(SdpaMath("causal_lower_right"), br)
    check_forward(SdpaMath("causal_upper_left"), br.replace(alignment="top_left"))
    check_forward(SdpaMath("bool_mask"), br.replace(causal=False))
    check_forward(SdpaMath("is_causal"), br.replace(alignment="top_left"))
    assert seen == [(CausalBias, False), (CausalBias, False), (torch.Tensor, False), (type(None), True)]


@pytest.mark.backward
@pytest.mark.parametrize("entry", ["causal_lower_right", "bool_mask"])
def test_sdpa_spellings_backward(entry):
    check_backward(SdpaMath(entry), C("t", 2, 4, 2, 5, 9, 16, 16, dtype="float64", causal=True, backward=True))


def test_sdpa_entry_point_names_load_through_the_registry():
    from attention_conformance.adapters.registry import entry_point_names, load

    assert entry_point_names("torch-sdpa-math") == [f"torch-sdpa-math@{e}" for e in SPELLINGS]
    la = load("torch-sdpa-flash@causal_upper_left", "cpu")
    assert la.available and la.name == "torch-sdpa-flash@causal_upper_left"
    assert la.adapter.entry_point == "causal_upper_left"
    bad = load("torch-sdpa-math@upper_left", "cpu")
    assert bad.adapter is None and "is_causal, bool_mask, causal_upper_left, causal_lower_right" in bad.reason
    assert load("reference-fa2@func", "cpu").reason.endswith("(it has a single spelling)")


def test_cli_runs_a_spelling_on_its_own_row_and_refuses_an_unknown_one(tmp_path, capsys):
    from attention_conformance.cli import main

    rc = main(["run", "--impl", "torch-sdpa-math@causal_lower_right", "torch-sdpa-math@nope", "-k", "causal_alignment",
               "--report-dir", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "torch-sdpa-math@nope" in err[0] and "causal_lower_right" in err[0]
    rc = main(["run", "--impl", "torch-sdpa-math@causal_lower_right", "-k", "causal_alignment",
               "--report-dir", str(tmp_path), "--quiet"])
    assert rc == 0
    import json

    report = json.loads((tmp_path / "report.json").read_text())
    assert [a["name"] for a in report["adapters"]] == ["torch-sdpa-math@causal_lower_right"]
    outcomes = {r["outcome"] for r in report["results"]}
    assert outcomes == {"PASS", "NOT_SUPPORTED"}
    assert all("--impl torch-sdpa-math@causal_lower_right" in r["repro"] for r in report["results"]
               if r["outcome"] != "NOT_SUPPORTED")  # a declined case stores no repro (nothing ran)
