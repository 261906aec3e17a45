"""GPU tests of attention sinks in the CUDA kernels (SEMANTICS.md §18): FA2 forward, split-KV, FA2 backward.

Marked ``gpu``; skipped without CUDA or the kernel library. Against the float64 oracle (`oracles.attention`,
`oracles.attention_backward` with ``sinks=`` / ``dlse=``):
- rows with no visible key get O = 0 and LSE = the sink exactly (not -inf / NaN: the sink left out of the
  running max, flash-attention PR #2752), a large sink (1e4) gives a finite LSE and O ~ 0, a head whose sink
  is -inf behaves as without a sink;
- split-KV adds the sink once: the result does not depend on the number of splits (a sink counted per
  split shifts the LSE by log(1 + (S - 1) P_sink));
- the backward's d sinks include the dLSE term (flash-attention #1973) and are bitwise reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_conformance import oracles

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


@pytest.fixture(scope="module")
def cuda_lib():
    from attention_conformance.kernels import cuda_lib

    try:
        cuda_lib.library()
    except cuda_lib.LibraryUnavailable as e:
        pytest.skip(str(e))
    return cuda_lib


def _inputs(B, Hq, Hkv, Lq, Lk, d, seed, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
                   for s in ((B, Hq, Lq, d), (B, Hkv, Lk, d), (B, Hkv, Lk, d), (B, Hq, Lq, d)))
    return q, k, v, do


def _forward(cuda_lib, launcher, q, k, v, sinks, causal, num_splits=0):
    B, Hq, Lq, _ = q.shape
    dev = [t.cuda() for t in (q, k, v)]
    o = torch.full((B, Hq, Lq, v.shape[-1]), float("nan"), dtype=q.dtype, device="cuda")
    lse = torch.full((B, Hq, Lq), float("nan"), device="cuda")
    s = torch.tensor(sinks, dtype=torch.float32, device="cuda")
    p = cuda_lib.fwd_params(*dev, o, lse, causal=causal, sinks=s, num_splits=num_splits)
    cuda_lib.call(launcher, p)
    torch.cuda.synchronize()
    return o.double().cpu().numpy(), lse.double().cpu().numpy()


SINKS = [0.5, 1e4, -math.inf, -1.25]  # small, large, "no sink", negative; Hq = 4


@pytest.mark.parametrize("launcher", ["attn_fa2_fwd", "attn_splitkv_fwd"])
def test_forward_with_sinks_matches_the_oracle_including_empty_rows(cuda_lib, launcher):
    q, k, v, _ = _inputs(2, 4, 2, 40, 24, 64, seed=3)
    out, lse = _forward(cuda_lib, launcher, q, k, v, SINKS, causal=True)
    n = [t.double().numpy() for t in (q, k, v)]
    want_out, want_lse = oracles.attention(*n, causal=True, sinks=np.array(SINKS))
    assert np.abs(out - want_out).max() <= 5e-3
    finite = np.isfinite(want_lse)
    assert np.array_equal(np.isfinite(lse), finite) and np.all(np.isneginf(lse[~finite]))
    assert np.all(np.abs(lse[finite] - want_lse[finite]) <= 1e-3 + 2e-7 * np.abs(want_lse[finite]))
    empty = 40 - 24  # bottom-right causal: rows 0..15 see no key
    for h, sink in enumerate(SINKS):
        if math.isfinite(sink):
            assert np.all(lse[:, h, :empty] == np.float32(sink)), (launcher, h, lse[:, h, :empty])
        assert np.all(out[:, h, :empty] == 0.0)
    assert np.abs(out[:, 1]).max() == 0.0  # sink 1e4: every P underflows against it


def test_splitkv_adds_the_sink_once_whatever_the_number_of_splits(cuda_lib):
    q, k, v, _ = _inputs(1, 4, 1, 1, 2048, 128, seed=7)
    n = [t.double().numpy() for t in (q, k, v)]
    _, free = oracles.attention(*n)
    sinks = [float(x) for x in np.round(free[0, :, 0], 2)]  # P_sink ~ 1/2: a sink counted S times is visible
    want_out, want_lse = oracles.attention(*n, sinks=np.array(sinks))
    for splits in (1, 3, 8):
        out, lse = _forward(cuda_lib, "attn_splitkv_fwd", q, k, v, sinks, causal=False, num_splits=splits)
        assert np.abs(lse - want_lse).max() <= 1e-4, (splits, lse.ravel(), want_lse.ravel())
        assert np.abs(out - want_out).max() <= 3e-3, splits


def _backward(cuda_lib, q, k, v, do, sinks, dlse, causal):
    B, Hq, Lq, d = q.shape
    Lk = k.shape[2]
    qd, kd, vd, dod = (t.cuda() for t in (q, k, v, do))
    s = torch.tensor(sinks, dtype=torch.float32, device="cuda")
    o = torch.empty(B, Hq, Lq, d, dtype=q.dtype, device="cuda")
    lse = torch.empty(B, Hq, Lq, device="cuda")
    cuda_lib.call("attn_fa2_fwd", cuda_lib.fwd_params(qd, kd, vd, o, lse, causal=causal, sinks=s))
    dq, dk, dv = torch.empty_like(qd), torch.empty_like(kd), torch.empty_like(vd)
    ds = torch.full((Hq,), float("nan"), device="cuda")
    f32 = dict(device="cuda", dtype=torch.float32)
    p = cuda_lib.bwd_params(qd, kd, vd, o, lse, dod, dq, dk, dv, dq_accum=torch.empty(B, Hq, Lq, d, **f32),
                            d_rowsum=torch.empty(B, Hq, Lq, **f32), dk_accum=torch.empty(B, Hq, Lk, d, **f32),
                            dv_accum=torch.empty(B, Hq, Lk, d, **f32), causal=causal, sinks=s,
                            dlse=None if dlse is None else torch.tensor(dlse, **f32), dsinks=ds)
    cuda_lib.call("attn_fa2_bwd", p)
    torch.cuda.synchronize()
    return [t.double().cpu().numpy() for t in (dq, dk, dv, ds)]


@pytest.mark.parametrize("with_dlse", [False, True], ids=["no_dlse", "dlse"])
def test_backward_dsinks_match_the_oracle_and_are_deterministic(cuda_lib, with_dlse):
    q, k, v, do = _inputs(2, 4, 2, 40, 24, 64, seed=11)
    sinks = [0.5, 2.0, -math.inf, -1.25]
    dlse = np.random.default_rng(5).standard_normal((2, 4, 40)).astype(np.float32) if with_dlse else None
    got = _backward(cuda_lib, q, k, v, do, sinks, dlse, causal=True)
    n = [t.double().numpy() for t in (q, k, v, do)]
    want = oracles.attention_backward(*n, causal=True, sinks=np.array(sinks),
                                      dlse=None if dlse is None else dlse.astype(np.float64))
    for name, g, w in zip(("dq", "dk", "dv", "dsinks"), got, want):
        bound = 2e-2 * max(1.0, float(np.abs(w).max()))
        assert np.abs(g - w).max() <= bound, (name, float(np.abs(g - w).max()), bound)
    assert got[3][2] == 0.0, "a -inf sink has no gradient"
    again = _backward(cuda_lib, q, k, v, do, sinks, dlse, causal=True)
    assert np.array_equal(got[3], again[3]), "d sinks must be bitwise reproducible"
