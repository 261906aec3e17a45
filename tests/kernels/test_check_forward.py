"""kernels/check/forward.py on the CPU: the device check of the forward launchers, run with torch CPU tensors and a
kernel written here. A correct kernel (the FP64 oracle rounded to the dtype, padded rows left alone) passes every
case; each broken one fails with a message that names what broke."""

from __future__ import annotations

import pytest

from attention_conformance import oracles
from attention_conformance.kernels.check.forward import check_forward

torch = pytest.importorskip("torch")


def _lens(x):
    return None if x is None else [int(n) for n in x.tolist()]


def correct(q, k, v, o, lse, *, scale, causal, alignment, window, softcap, seqlens_q, seqlens_k, **_):
    """A correct launcher: the oracle, O rounded to the dtype, LSE to float32, only the real rows written."""
    f = lambda x: x.double().numpy()  # noqa: E731
    out, ls = oracles.attention(f(q), f(k), f(v), scale=scale, causal=causal, alignment=alignment, window=window,
                                softcap=softcap, seqlens_q=_lens(seqlens_q), seqlens_k=_lens(seqlens_k))
    lens = _lens(seqlens_q)
    for b in range(q.shape[0]):
        n = q.shape[2] if lens is None else lens[b]
        o[b, :, :n] = torch.from_numpy(out[b, :, :n]).to(o.dtype)
        lse[b, :, :n] = torch.from_numpy(ls[b, :, :n]).float()


CASES = [
    dict(B=2, Hq=4, Hkv=2, Lq=33, Lk=47, d=64, dtype=torch.bfloat16),
    dict(B=3, Hq=4, Hkv=2, Lq=20, Lk=30, d=64, dtype="float16", varlen=True, causal=True),
    dict(B=2, Hq=2, Hkv=1, Lq=30, Lk=12, d=64, dtype="float16", causal=True, bottom_right=True),  # masked rows
    dict(B=2, Hq=4, Hkv=1, Lq=19, Lk=50, d=64, dtype="bfloat16", window=(10, 3), softcap=5.0, layout="bshd"),
    dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=0, d=64, dtype="float16"),
]


@pytest.mark.parametrize("spec", CASES, ids=range(len(CASES)))
def test_a_correct_kernel_passes(spec):
    res = check_forward("attn_fa2_fwd", runner=correct, device="cpu", seed=1, **spec)
    assert res["ok"] and res["outcome"] == "PASS" and not res["problems"], res
    assert res["usage"] <= 1.0 and "fa2_fwd B" in res["case"] and "seed=1" in res["case"]


def test_split_kv_names_its_split_count():
    res = check_forward("attn_splitkv_fwd", runner=correct, device="cpu", num_splits=3, **CASES[0])
    assert res["ok"] and res["case"].startswith("splitkv_fwd") and "S=3" in res["case"]


def _broken(change):
    def run(q, k, v, o, lse, **kw):
        correct(q, k, v, o, lse, **change(q, k, v, o, lse, kw))

    return run


def _no_softcap(q, k, v, o, lse, kw):
    return dict(kw, softcap=None)


def _scale_off(q, k, v, o, lse, kw):
    return dict(kw, scale=kw["scale"] * 1.05)


def _top_left(q, k, v, o, lse, kw):
    return dict(kw, alignment="top_left")


@pytest.mark.parametrize("change, spec, words", [
    (_no_softcap, CASES[3], "out:"),
    (_scale_off, CASES[0], "out:"),
    (_top_left, CASES[2], "out:"),
])
def test_a_kernel_with_other_semantics_fails_on_values(change, spec, words):
    res = check_forward("attn_fa2_fwd", runner=_broken(change), device="cpu", **spec)
    assert not res["ok"] and res["outcome"] == "FAIL" and any(words in p for p in res["problems"]), res


def test_positive_inf_lse_on_fully_masked_rows_fails():
    def run(q, k, v, o, lse, **kw):
        correct(q, k, v, o, lse, **kw)
        lse[torch.isneginf(lse)] = float("inf")

    res = check_forward("attn_fa2_fwd", runner=run, device="cpu", **CASES[2])
    assert not res["ok"] and any(p.startswith("lse:") for p in res["problems"]), res


def test_writes_outside_the_real_rows_are_seen():
    def padded(q, k, v, o, lse, **kw):
        correct(q, k, v, o, lse, **kw)
        o[1:, :, -1] = 0.0  # the last row of batches 1, 2: padding where their length is below Lq

    res = check_forward("attn_fa2_fwd", runner=padded, device="cpu", seed=5, **CASES[1])
    assert not res["ok"] and any("padded query rows" in p for p in res["problems"]), res

    def past_the_end(q, k, v, o, lse, **kw):
        correct(q, k, v, o, lse, **kw)
        torch.as_strided(o, (o.numel() + 1,), (1,), o.storage_offset())[-1] = 0.0

    res = check_forward("attn_fa2_fwd", runner=past_the_end, device="cpu", **CASES[0])
    assert not res["ok"] and any("guard band" in p for p in res["problems"]), res


def test_an_unwritten_row_and_a_changed_input_fail():
    def lazy(q, k, v, o, lse, **kw):
        correct(q, k, v, o, lse, **kw)
        o[0, 1, 3] = float("nan")
        k[0, 0, 0, 0] += 1.0

    res = check_forward("attn_fa2_fwd", runner=lazy, device="cpu", **CASES[0])
    msgs = " | ".join(res["problems"])
    assert not res["ok"] and "NaN poison" in msgs and "inputs changed by the call: ['k']" in msgs, msgs
