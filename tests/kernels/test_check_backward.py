"""kernels/check/backward.py on the CPU: the FA3 backward's device check, run with torch CPU tensors and a forward
and backward written here (the FP64 oracle rounded to the dtype). Correct kernels pass the listed cases (shrunk to
CPU sizes); a wrong gradient, dq left non-zero on a row with no visible key, and a non-deterministic launcher fail."""

from __future__ import annotations

import pytest

from attention_conformance import oracles
from attention_conformance.kernels.check.backward import check_backward, check_determinism
from attention_conformance.kernels.check.cases import FA3_BWD_CASES, FA3_BWD_DETERMINISM_CASES

torch = pytest.importorskip("torch")


def _sem(kw):
    lens = lambda x: None if x is None else [int(n) for n in x.tolist()]  # noqa: E731
    w = kw["window"]
    return dict(scale=kw["scale"], causal=kw["causal"], alignment=kw["alignment"],
                window=None if w == (None, None) else w, softcap=kw["softcap"], seqlens_q=lens(kw.get("seqlens_q")),
                seqlens_k=lens(kw.get("seqlens_k")))


def _f(x):
    return x.double().numpy()


def forward(t, kw):
    o, lse = oracles.attention(_f(t["q"]), _f(t["k"]), _f(t["v"]), **_sem(kw))
    return torch.from_numpy(o).to(t["q"].dtype), torch.from_numpy(lse).float()


def backward(q, k, v, o, lse, dout, **kw):
    g = oracles.attention_backward(_f(q), _f(k), _f(v), _f(dout), **_sem(kw))
    return tuple(torch.from_numpy(x).to(q.dtype) for x in g[:3])


def _small(spec):
    """A listed case at CPU size (its semantics kept: masked rows, varlen with NaN padding, Lk = 0)."""
    s = dict(spec, Lq=min(spec["Lq"], 48), Lk=min(spec["Lk"], 64) if spec["Lk"] else 0)
    if "seqlens_q" in s:
        s.update(seqlens_q=(48, 20), seqlens_k=(30, 64))
    if s.get("causal") and spec["Lq"] > spec["Lk"]:
        s.update(Lq=64, Lk=32)  # keep Lq > Lk: bottom-right causal leaves the first rows without a key
    return s


@pytest.mark.parametrize("index", [0, 3, 4, 6, 7, 10, 11])
def test_correct_kernels_pass_the_listed_cases(index):
    res = check_backward(_small(FA3_BWD_CASES[index]), seed=index, forward=forward, backward=backward, device="cpu")
    assert res["ok"] and res["outcome"] == "PASS", res
    assert all(res[g]["usage"] <= 1.0 for g in ("dq", "dk", "dv"))
    if index == 4:
        assert res["masked_rows"] > 0, "case 4 is the fully-masked-rows case"


def test_a_wrong_gradient_fails_and_names_it():
    def bad(*args, **kw):
        dq, dk, dv = backward(*args, **kw)
        return dq, dk * 1.1, dv

    res = check_backward(_small(FA3_BWD_CASES[0]), forward=forward, backward=bad, device="cpu")
    assert not res["ok"] and any(p.startswith("dk:") for p in res["problems"]), res


def test_dq_on_a_row_without_keys_must_be_zero():
    """The bound allows fp16's smallest normal there; SEMANTICS.md §8 asks for an exact 0."""
    def leaky(q, k, v, o, lse, dout, **kw):
        dq, dk, dv = backward(q, k, v, o, lse, dout, **kw)
        dq[torch.isneginf(lse)] = 1e-6
        return dq, dk, dv

    spec = dict(_small(FA3_BWD_CASES[4]), dtype="float16")
    res = check_backward(spec, forward=forward, backward=leaky, device="cpu")
    assert not res["ok"] and res["problems"] == ["dq: rows with no visible key must be exactly 0 (SEMANTICS.md §8)"]


def test_determinism():
    spec = dict(FA3_BWD_DETERMINISM_CASES[1], Lq=40, Lk=40)
    res = check_determinism(spec, forward=forward, deterministic=backward, any_order=backward, device="cpu")
    assert res["ok"] and res["identical"] and res["max_diff_vs_atomic"] == 0.0, res
    calls = []

    def wobbly(*args, **kw):
        calls.append(1)
        dq, dk, dv = backward(*args, **kw)
        dq.view(torch.int16)[0, 0, 0, 0] += len(calls)  # one last-bit difference per call
        return dq, dk, dv

    res = check_determinism(spec, forward=forward, deterministic=wobbly, any_order=backward, device="cpu")
    assert not res["ok"] and not res["identical"] and "differ" in res["problems"][0]
