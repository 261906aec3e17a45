"""Entry-point variants claim only what their call expresses (conformance/adapters/variants.py).

For every variant of every built-in adapter that has spellings (plain NAME too: its per-case spelling) and every
case of the ``gpu`` and ``full`` profiles that the variant claims on CUDA or on the CPU - its ``claim_reason``,
the part of ``supports`` that depends on the declarations only, so no GPU, library or dispatcher is needed here -
the adapter's translation makes the call it would make (`sdpa_args`, `flex_args`, ``call_for``; no kernel runs),
`call_meaning` reads that call back through the API's documented semantics, and every feature of the case must be
in it: which keys each query sees (causal and its alignment, window, chunk, boolean mask, padding), the additive
bias, softcap, scale, GQA, dropout, sinks, paged K/V, FP8 descales, KV append. A spelling that claims a case its
arguments cannot carry (a CausalBias for a chunked case: the H200's harness-caused FAILs) fails here, on the CPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from functools import cache

import numpy as np
import pytest
from call_meaning import Meaning, read_flash_attn, read_flex, read_sdpa

from attention_conformance import oracles
from attention_conformance.adapters import BUILTIN
from attention_conformance.adapters.flash_attn import FlashAttn2, FlashAttn3, FlashAttn4
from attention_conformance.adapters.torch_flex import FlexAttention, flex_args
from attention_conformance.adapters.torch_sdpa import (
    SDPA_SPELLINGS,
    SdpaAdapter,
    SdpaCudnn,
    SdpaEfficient,
    SdpaFlash,
    SdpaMath,
    sdpa_args,
)
from attention_conformance.cases import catalog
from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import Case, page_size_of
from attention_conformance.cases.inputs import effective_scale, make_bias, make_inputs, make_mask, make_sinks

torch = pytest.importorskip("torch")

CASES: dict[str, Case] = {c.id: c for profile in ("gpu", "full") for c in catalog.cases(profile)}
#: cases with more score entries (B * Lq * Lk) are not translated here (a dense mask of one takes seconds); they
#: carry no feature the smaller cases lack (`test_cases_too_large_to_translate_here_are_plain`)
MAX_ENTRIES = 2 ** 21
CHECKED = (SdpaMath, SdpaFlash, SdpaEfficient, SdpaCudnn, FlexAttention, FlashAttn2, FlashAttn3, FlashAttn4)
VARIANTS = [(cls, entry) for cls in CHECKED for entry in (None, *getattr(cls, "entry_points", ()))]
#: scaled scores at which the call's and the case's score maps (softcap, §3) are compared
SCORES = np.array([-60.0, -4.0, -0.5, 0.0, 0.75, 3.0, 45.0])


def _adapter(cls, entry):
    return cls() if entry is None else cls(entry)


def _devices(adapter) -> tuple[str, ...]:
    if isinstance(adapter, SdpaAdapter):
        return ("cuda", "cpu") if adapter.backend_caps("cpu") is not None else ("cuda",)
    return ("cuda", "cpu") if isinstance(adapter, FlexAttention) else ("cuda",)


def claimed(adapter, case: Case) -> bool:
    return any(adapter.claim_reason(case, device) is None for device in _devices(adapter))


@cache
def arrays(case: Case) -> CaseInputs:
    """The arrays a translation reads: mask, bias, sinks by the case's recipes (`make_inputs` is slow for large
    paged cases and the translations never read q, k, v) and, for FP8 cases, the quantizer's descales."""
    rng = np.random.default_rng(case.seed)
    none = np.empty(0)
    fp8 = make_inputs(case).fp8 if case.fp8 is not None else None
    return CaseInputs(q=none, k=none, v=none, mask=make_mask(case, rng), bias=make_bias(case, rng),
                      sinks=make_sinks(case), fp8=fp8)


@cache
def asked(case: Case) -> Meaning:
    """What `case` asks for (SEMANTICS.md; visibility by `oracles.visibility`, §4, §5, §7, §19, and the mask, §6)."""
    a = arrays(case)
    vis = oracles.visibility(case.Lq, case.Lk, causal=case.causal, alignment=case.alignment, window=case.window,
                             seqlens_q=case.seqlens_q, seqlens_k=case.effective_seqlens_k, chunk=case.chunk)
    vis = vis.reshape((-1, 1, case.Lq, case.Lk))
    if a.mask is not None:
        vis = vis & a.mask.reshape((-1,) * (4 - a.mask.ndim) + a.mask.shape)
    cap = case.softcap
    return Meaning(vis, a.bias, (lambda x: cap * np.tanh(x / cap)) if cap else (lambda x: x), effective_scale(case),
                   gqa=case.Hq != case.Hkv, sinks="sinks" if case.sinks is not None else None,
                   paged=page_size_of(case.layout) is not None, fp8_descales=case.fp8 is not None,
                   kv_append=case.kv_append is not None)


def called(adapter, case: Case) -> Meaning:
    """What the call `adapter` would make for `case` means."""
    a, B, Lq, Lk, d = arrays(case), case.B, case.Lq, case.Lk, case.d
    if isinstance(adapter, SdpaAdapter):
        return read_sdpa(sdpa_args(adapter.entry_point, case, a.mask, a.bias), B, Lq, Lk, d)
    if isinstance(adapter, FlexAttention):
        return read_flex(flex_args(case, a.mask, a.bias, "cpu", torch.float64), B, case.Hq, Lq, Lk, d)
    return read_flash_attn(adapter.call_for(case, a, want_lse=True), B, Lq, Lk, d)


def _visible_and_bias(m: Meaning, shape: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray | None]:
    """Which keys take part (an additive -inf removes one) and the bias they get, broadcast to `shape`."""
    vis = np.broadcast_to(m.visible, shape)
    if m.bias is None:
        return vis, None
    bias = np.broadcast_to(m.bias.reshape((-1,) * (4 - m.bias.ndim) + m.bias.shape), shape)
    return vis & (bias != -math.inf), bias


def _entry(vis: bool, bias: float | None) -> str:
    return "key masked" if not vis else ("key visible" if bias is None else f"key visible, bias {bias:.6g}")


def differences(got: Meaning, want: Meaning, case: Case) -> list[str]:
    """Each feature of `case` (as `want`) that the call (`got`) does not carry, in words; [] when none."""
    out = []
    heads = max(x.shape[1] for x in (got.visible, want.visible, got.bias, want.bias) if x is not None and x.ndim == 4)
    shape = (case.B, heads, case.Lq, case.Lk)
    (gv, gb), (wv, wb) = _visible_and_bias(got, shape), _visible_and_bias(want, shape)
    rows = np.ones((case.B, 1, case.Lq, 1), dtype=bool)
    for b, n in enumerate(case.seqlens_q or ()):
        rows[b, :, int(n):] = False  # padded query rows are not compared (SEMANTICS.md §7, §17)
    bad = (gv != wv) & rows
    if gb is not None or wb is not None:
        zero = np.zeros(shape)
        bad |= gv & wv & rows & ~np.isclose(zero if gb is None else gb, zero if wb is None else wb, rtol=1e-6, atol=0)
    if bad.any():
        b, h, i, j = (int(x) for x in np.argwhere(bad)[0])
        g, w = (None if x is None else float(x[b, h, i, j]) for x in (gb, wb))
        out.append(f"scores: {int(bad.sum())} (b, h, query, key) entries differ, the first at [{b}, {h}, {i}, {j}]: "
                   f"{_entry(gv[b, h, i, j], g)} in the call, {_entry(wv[b, h, i, j], w)} in the case")
    if not np.allclose(got.transform(SCORES), want.transform(SCORES), rtol=1e-6, atol=1e-9):
        out.append(f"softcap: the call maps scaled scores {SCORES.tolist()} to {got.transform(SCORES).tolist()}, "
                   f"the case to {want.transform(SCORES).tolist()}")
    if not math.isclose(got.scale, want.scale, rel_tol=1e-12, abs_tol=0.0):
        out.append(f"scale: {got.scale!r} in the call, {want.scale!r} in the case")
    if want.gqa and not got.gqa:
        out.append(f"GQA: Hq={case.Hq} query heads over Hkv={case.Hkv} key/value heads, but the call does not group")
    for name in ("dropout_p", "sinks", "paged", "fp8_descales", "kv_append"):
        if getattr(got, name) != getattr(want, name):
            out.append(f"{name}: {getattr(got, name)!r} in the call, {getattr(want, name)!r} in the case")
    return out


_CHECKED: dict[tuple, list[str]] = {}


def check(adapter, case: Case) -> list[str]:
    """`differences` between the call `adapter` makes for `case` and the case, cached per translation and case
    (the four SDPA backends share one translation per spelling)."""
    if isinstance(adapter, SdpaAdapter):
        key = ("sdpa", adapter.entry_point, case.id)
    else:
        key = (adapter.name, case.id)
    if key not in _CHECKED:
        _CHECKED[key] = differences(called(adapter, case), asked(case), case)
    return _CHECKED[key]


def _id(variant) -> str:
    cls, entry = variant
    return cls.name if entry is None else f"{cls.name}@{entry}"


@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
def test_every_claimed_case_is_called_with_every_feature_it_has(variant):
    adapter = _adapter(*variant)
    failures, n = [], 0
    for case in CASES.values():
        if case.B * case.Lq * case.Lk > MAX_ENTRIES or not claimed(adapter, case):
            continue
        n += 1
        diffs = check(adapter, case)
        if diffs:
            failures.append(f"{case.id}: " + "; ".join(diffs))
    assert n, f"{adapter.name} claims no case of the gpu and full profiles"
    assert not failures, (f"{adapter.name} claims {len(failures)} case(s) its call does not express:\n  "
                          + "\n  ".join(failures[:12]))


def test_the_check_fails_a_spelling_that_drops_the_chunk_mask(monkeypatch):
    """The H200's harness-caused FAILs, rebuilt: with ``causal_upper_left`` said to carry chunks (as it was
    claimed before), torch-sdpa-efficient@causal_upper_left claims the chunked cases and its call - a CausalBias,
    which has no chunk - fails the check on every one, first at the chunk edge (row 16 of q65k65 chunk16)."""
    spelling = SDPA_SPELLINGS["causal_upper_left"]
    monkeypatch.setitem(SDPA_SPELLINGS, "causal_upper_left",
                        dataclasses.replace(spelling, carries=spelling.carries | {"chunk"}))
    adapter = SdpaEfficient("causal_upper_left")
    found = {c.id: check(adapter, c) for c in CASES.values() if c.chunk is not None and claimed(adapter, c)}
    assert len(found) >= 5 and all(found.values()), found
    edge = next(i for i, c in CASES.items() if i in found and c.chunk == 16 and c.Lq == c.Lk == 65)
    assert found[edge][0].startswith("scores: ") and "the first at [0, 0, 16, 0]: key visible in the call, " \
        "key masked in the case" in found[edge][0], found[edge]
    monkeypatch.setitem(SDPA_SPELLINGS, "causal_upper_left", spelling)
    assert not any(claimed(adapter, CASES[i]) for i in found)  # the table as shipped claims none of them


@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
def test_supports_declines_what_claim_reason_declines(variant):
    """The check above judges `claim_reason`; `supports` must decline whatever it declines (on top of what this
    machine, the library or torch's dispatcher refuse)."""
    adapter = _adapter(*variant)
    adapter.unavailable_reason = lambda device: None
    adapter.claim_reason = lambda case, device: "declined by the declarations"
    case = next(iter(CASES.values()))
    assert adapter.supports(case, "cuda") == "declined by the declarations"


#: adapters whose calls are read back against the case in their own test module, by a stand-in of the library that
#: records the call and computes it with the library's documented semantics (the judge then compares with the
#: oracle, and each feature of the case is asserted in the recorded call)
CHECKED_ELSEWHERE = {"flashinfer": "tests/conformance/test_adapters_flashinfer.py",
                     "xformers": "tests/conformance/test_adapters_xformers.py"}


def test_every_builtin_adapter_with_spellings_is_checked():
    for name, target in BUILTIN.items():
        module, _, attr = target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        if getattr(cls, "entry_points", ()) and name not in CHECKED_ELSEWHERE:
            assert cls in CHECKED, f"{name} has entry points but no reader of its calls in this test"


def test_cases_too_large_to_translate_here_are_plain():
    """What the check skips: plain causal (either alignment) or non-causal problems with GQA, dtypes, head dims,
    backward; each of those features is in smaller cases that it does check."""
    big = [c for c in CASES.values() if c.B * c.Lq * c.Lk > MAX_ENTRIES]
    assert big
    for c in big:
        assert (c.mask, c.bias, c.window, c.chunk, c.softcap, c.sinks, c.fp8, c.kv_append) == (None,) * 8, c.id
        assert not c.varlen and page_size_of(c.layout) is None, c.id


def test_a_spelling_takes_claims_away_and_adds_only_determinism():
    from attention_conformance.adapters.variants import Spelling, spelled_capabilities

    caps = SdpaMath.cpu_caps
    spelled = spelled_capabilities(caps, SDPA_SPELLINGS["causal_lower_right"])
    lost = ("chunk", "window", "mask", "bias", "varlen", "noncausal")
    assert not any(getattr(spelled, f) for f in lost) and all(getattr(caps, f) for f in lost)
    assert spelled.alignments == {"bottom_right"} and spelled.backward and spelled.dtypes == caps.dtypes
    assert spelled_capabilities(caps, Spelling("all", frozenset(), deterministic=True)).deterministic
    assert spelled_capabilities(None, SDPA_SPELLINGS["bool_mask"]) is None
    with pytest.raises(ValueError, match="unknown features"):
        Spelling("x", frozenset({"alibi"}))


def test_square_causal_runs_through_a_spelling_of_the_other_alignment():
    """Lq == Lk: both alignments are one mask (SEMANTICS.md §4), so torch's CUDA flash backend (is_causal only:
    top-left) claims a square causal case spelled causal_lower_right, and declines a non-square one naming why."""
    adapter = SdpaFlash("causal_lower_right")
    square = Case("t", 1, 2, 2, 64, 64, 64, 64, dtype="float16", causal=True)
    assert adapter.claim_reason(square, "cuda") is None
    assert adapter.claim_reason(square.replace(alignment="top_left"), "cuda") is None
    assert adapter.claim_reason(square.replace(Lk=80), "cuda").startswith("causal alignment bottom_right not supported")
    reason = adapter.claim_reason(square.replace(causal=False), "cuda")
    assert reason.startswith("SDPA spelling causal_lower_right (attn_mask=torch.nn.attention.bias.causal_lower_right")
    assert reason.endswith("non-causal attention not supported (causal cases only)")
