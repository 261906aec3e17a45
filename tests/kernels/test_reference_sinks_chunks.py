"""Sinks (oracles/SEMANTICS.md §18), chunked masks (§19) and KV append (§20) in the NumPy reference kernels.

float64 runs must match the FP64 oracle to 1e-12 (forward, dq/dk/dv and d sink, with and without an LSE
cotangent); bf16 runs must stay finite and within the forward bound of test_reference_forward.py on the
cases that break a kernel whose sink is not in the running max (empty rows, a sink of 1e4).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import BWD_KERNELS, KERNELS, UNIT_ROUNDOFF

from attention_conformance import oracles
from attention_conformance.kernels import emulate
from attention_conformance.kernels.reference import splitkv

SHAPE = dict(B=2, Hq=4, Hkv=2, Lq=37, Lk=53, d=16, dv=8)
SINKS = np.array([0.3, -2.0, 6.0, -np.inf])
CASES = {
    "sinks": {"sinks": SINKS},
    "sinks_large": {"sinks": np.array([1e4, 40.0, 1e4, 0.0])},
    "sinks_very_negative": {"sinks": np.full(4, -1e4)},
    "sinks_empty_rows_br": {"sinks": SINKS, "causal": True, "_shape": {"Lq": 53, "Lk": 37}},
    "sinks_varlen_no_keys": {"sinks": SINKS, "seqlens_q": (37, 20), "seqlens_k": (0, 53), "causal": True},
    "chunk_causal": {"chunk": 16, "causal": True},
    "chunk_off_tile": {"chunk": 7, "causal": True, "alignment": "top_left"},
    "chunk_window_noncausal": {"chunk": 5, "window": (3, 3)},
    "chunk_sinks_softcap": {"chunk": 9, "causal": True, "sinks": SINKS, "softcap": 2.0},
}


def _make(name: str, seed: int = 0):
    spec = dict(CASES[name])
    shape = dict(SHAPE)
    shape.update(spec.pop("_shape", {}))
    rng = np.random.default_rng(seed)
    B, Hq, Hkv, Lq, Lk, d, dv = (shape[x] for x in ("B", "Hq", "Hkv", "Lq", "Lk", "d", "dv"))
    q = rng.standard_normal((B, Hq, Lq, d))
    k = rng.standard_normal((B, Hkv, Lk, d))
    v = rng.standard_normal((B, Hkv, Lk, dv))
    dout = rng.standard_normal((B, Hq, Lq, dv))
    dlse = rng.standard_normal((B, Hq, Lq))
    return q, k, v, dout, dlse, spec


def _knobs(kernel: str, dtype: str) -> dict:
    knobs = {"block_q": 16, "block_k": 16, "dtype": dtype}
    if kernel == "splitkv":
        knobs["num_splits"] = 3
    return knobs


def _real(spec, B, Lq, Hq=4):
    """Boolean [B, Hq, Lq]: the real (non-padded) query rows."""
    sq = np.asarray(spec.get("seqlens_q", [Lq] * B))
    return np.broadcast_to((np.arange(Lq)[None, :] < sq[:, None])[:, None], (B, Hq, Lq))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_forward_float64_matches_oracle(kernel, name):
    q, k, v, _, _, spec = _make(name)
    ref_out, ref_lse = oracles.attention(q, k, v, **spec)
    out, lse = KERNELS[kernel].forward(q, k, v, **spec, **_knobs(kernel, "float64"))
    real = _real(spec, q.shape[0], q.shape[2])
    np.testing.assert_allclose(out[real], ref_out[real], rtol=0, atol=1e-12, err_msg=f"{kernel}/{name} out")
    np.testing.assert_allclose(lse[real], ref_lse[real], rtol=1e-15, atol=1e-12, err_msg=f"{kernel}/{name} lse")


@pytest.mark.backward
@pytest.mark.parametrize("with_dlse", [False, True], ids=["dout", "dout_dlse"])
@pytest.mark.parametrize("name", [n for n in CASES if n != "sinks_large"])
@pytest.mark.parametrize("kernel", list(BWD_KERNELS))
def test_backward_float64_matches_oracle(kernel, name, with_dlse):
    """dq, dk, dv (and d sink with its dlse term) against the oracle's analytic backward (§13, §18)."""
    q, k, v, dout, dlse, spec = _make(name, seed=1)
    dlse = dlse if with_dlse else None
    ref = oracles.attention_backward(q, k, v, dout, dlse=dlse, **spec)
    mod = BWD_KERNELS[kernel]
    out, lse = mod.forward(q, k, v, **spec, **_knobs(kernel, "float64"))
    got = mod.backward(q, k, v, out, lse, dout, dlse=dlse, **spec, **_knobs(kernel, "float64"))
    assert len(got) == len(ref) == (4 if "sinks" in spec else 3)
    for gname, a, b in zip(("dq", "dk", "dv", "dsinks"), got, ref):
        err = float(np.abs(a - b).max())
        assert err <= 1e-11 * max(1.0, float(np.abs(b).max())), f"{kernel}/{name}: {gname} error {err:.3e}"


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_bf16_sink_rows_are_finite_and_within_bound(kernel):
    """bf16: empty rows give O = 0 and LSE = the sink; a sink of 1e4 never gives +inf or NaN (PR #2752)."""
    for name in ("sinks_empty_rows_br", "sinks_large", "sinks_varlen_no_keys"):
        q, k, v, _, _, spec = _make(name, seed=2)
        q, k, v = (emulate.round_to(x, "bfloat16").astype(np.float64) for x in (q, k, v))
        ref_out, ref_lse = oracles.attention(q, k, v, **spec)
        out, lse = KERNELS[kernel].forward(q, k, v, **spec, **_knobs(kernel, "bfloat16"))
        real = _real(spec, q.shape[0], q.shape[2])
        assert np.isfinite(out[real]).all(), f"{kernel}/{name}: non-finite out"
        # only head 3's sink is -inf ("no sink"): its empty rows keep LSE = -inf (§8), every other row is finite
        np.testing.assert_array_equal(np.isneginf(lse[real]), np.isneginf(ref_lse[real]))
        assert not np.isnan(lse[real]).any() and not np.isposinf(lse[real]).any(), f"{kernel}/{name}: NaN/+inf LSE"
        bound = 4 * UNIT_ROUNDOFF["bfloat16"] * np.abs(v).max()
        assert np.abs(out[real] - ref_out[real]).max() <= bound, f"{kernel}/{name}: out"
        fin = real & np.isfinite(ref_lse)
        assert np.abs(lse[fin] - ref_lse[fin]).max() <= 1e-4 * max(1.0, np.abs(ref_lse[fin]).max())


def test_splitkv_adds_the_sink_once():
    """With many splits (some empty), the combine counts the sink once: equal to the one-split result."""
    q, k, v, _, _, spec = _make("sinks")
    one = splitkv.forward(q, k, v, **spec, block_k=8, dtype="float64", num_splits=1)
    many = splitkv.forward(q, k, v, **spec, block_k=8, dtype="float64", num_splits=11)
    np.testing.assert_allclose(many[0], one[0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(many[1], one[1], rtol=0, atol=1e-13)


def test_splitkv_kv_append_reads_nothing_past_the_sequence():
    """New rows are written at cache_seqlens[b]; NaN in every slot past cache_seqlens + Ln changes nothing,
    and the caller's cache is left as it was (§20)."""
    rng = np.random.default_rng(4)
    B, Hq, Hkv, Lc, Ln, d, dv = 3, 4, 1, 80, 2, 16, 8
    lens = np.array([5, 0, 70])
    kc = np.full((B, Hkv, Lc, d), np.nan)
    vc = np.full((B, Hkv, Lc, dv), np.nan)
    for b in range(B):
        kc[b, :, : lens[b]] = rng.standard_normal((Hkv, lens[b], d))
        vc[b, :, : lens[b]] = rng.standard_normal((Hkv, lens[b], dv))
    kn, vn = rng.standard_normal((B, Hkv, Ln, d)), rng.standard_normal((B, Hkv, Ln, dv))
    q = rng.standard_normal((B, Hq, Ln, d))
    before = kc.copy()
    out, lse = splitkv.forward(q, kc, vc, k_new=kn, v_new=vn, cache_seqlens=lens, causal=True, sinks=SINKS,
                               dtype="float64", block_k=16, num_splits=4)
    np.testing.assert_array_equal(kc, before)
    k, v, seqlens_k = oracles.kv_append(kc, vc, kn, vn, lens)
    ref_out, ref_lse = oracles.attention(q, k, v, seqlens_k=seqlens_k, causal=True, sinks=SINKS)
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lse, ref_lse, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="cache_seqlens"):
        splitkv.forward(q, kc, vc, k_new=kn, v_new=vn, cache_seqlens=[5, 0, 79], dtype="float64")


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_argument_errors(kernel):
    q, k, v, _, _, _ = _make("sinks")
    with pytest.raises(ValueError, match=r"sinks shape \(3,\) must be \[Hq\]"):
        KERNELS[kernel].forward(q, k, v, sinks=np.zeros(3), dtype="float64")
    with pytest.raises(ValueError, match=r"chunk=0 must be an int >= 1"):
        KERNELS[kernel].forward(q, k, v, chunk=0, dtype="float64")
