"""Tiny NumPy adapters for the engine's own tests: a correct emulated kernel with switchable bugs.

`EmulatedKernel` computes attention the way a FlashAttention kernel does (key tiles, online
softmax with running max m, sum l and unnormalised output o), with each intermediate rounded to a
chosen format, so a test can turn one precision or semantics bug on at a time:

- ``acc``: format of the l / o accumulators (correct: float32; bug: bfloat16);
- ``p_fmt``: format P is rounded to before the PV product (correct: the input dtype; bug: FP8);
- ``score_fmt``: format the scores are rounded to (correct: float32; bug: bfloat16);
- misc behaviours: mutate an input, return NaN, wrong shape, LSE +inf on empty rows, raise,
  nondeterminism, crash (os.abort), hang.

Semantics (SEMANTICS.md §3-§9) come from `oracles.visibility`; only the arithmetic is emulated.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np

from attention_conformance.adapters.base import Adapter, BackwardOutput, Capabilities, ForwardOutput
from attention_conformance.cases.inputs import round_to_dtype

ALL_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})


def _r(x, fmt):
    return round_to_dtype(x, fmt) if fmt != "float64" else np.asarray(x, dtype=np.float64)


class EmulatedKernel(Adapter):
    name = "toy-emulated"
    capabilities = Capabilities(dtypes=ALL_DTYPES, mask=True, bias=True, window=True, softcap=True,
                                varlen=True, lse=True, backward=True, deterministic=True)

    def __init__(self, acc: str = "float32", p_fmt: str | None = None, score_fmt: str = "float32",
                 tile: int = 64, behaviour: str = "correct", lse_empty: float = -math.inf,
                 declare_plus_inf: bool = True):
        self.acc, self.p_fmt, self.score_fmt, self.tile = acc, p_fmt, score_fmt, tile
        self.behaviour, self.lse_empty = behaviour, lse_empty
        self.declare_plus_inf = declare_plus_inf  # False: writes +inf on empty rows but declares -inf
        self.calls = 0

    def version(self) -> str:
        return "toy"

    def forward(self, inputs, case, device):
        from attention_conformance import oracles

        self.calls += 1
        b = self.behaviour
        if b == "raise":
            raise RuntimeError("toy kernel failure")
        if b == "abort":
            os.abort()
        if b == "hang":
            time.sleep(3600)
        if b == "mutate":
            inputs.q[..., 0] += 1.0
        dt = case.dtype
        acc = "float64" if dt == "float64" else self.acc
        sfmt = "float64" if dt == "float64" else self.score_fmt
        pfmt = self.p_fmt or dt
        q, k, v = inputs.q, inputs.k, inputs.v
        B, Hq, Lq, _ = q.shape
        Hkv, Lk, dv = k.shape[1], k.shape[2], v.shape[3]
        scale = case.scale if case.scale is not None else 1.0 / math.sqrt(q.shape[3])
        vis = np.broadcast_to(oracles.visibility(Lq, Lk, causal=case.causal, alignment=case.alignment,
                                                 window=case.window, seqlens_q=case.seqlens_q,
                                                 seqlens_k=case.seqlens_k), (B, Hq, Lq, Lk))
        if inputs.mask is not None:
            vis = vis & inputs.mask
        out = np.zeros((B, Hq, Lq, dv))
        lse = np.full((B, Hq, Lq), -np.inf)
        g = Hq // Hkv
        for bi in range(B):
            for h in range(Hq):
                s = _r(_r(q[bi, h].astype(np.float32) @ k[bi, h // g].T.astype(np.float32), "float32") * scale,
                       sfmt) if dt != "float64" else (q[bi, h] @ k[bi, h // g].T) * scale
                if case.softcap:
                    s = case.softcap * np.tanh(s / case.softcap)
                if inputs.bias is not None:
                    s = s + np.broadcast_to(inputs.bias, (B, Hq, Lq, Lk))[bi, h]
                s = np.where(vis[bi, h], s, -np.inf)
                m = np.full(Lq, -np.inf)
                l_ = np.zeros(Lq)
                o = np.zeros((Lq, dv))
                for t0 in range(0, Lk, self.tile):
                    blk = s[:, t0:t0 + self.tile]
                    m_new = np.maximum(m, blk.max(axis=1, initial=-np.inf))
                    safe = np.where(np.isneginf(m_new), 0.0, m_new)
                    alpha = np.exp(m - safe)
                    p = _r(np.exp(blk - safe[:, None]), "float32" if acc != "float64" else "float64")
                    l_ = _r(alpha * l_, acc)
                    for j in range(p.shape[1]):  # one rounding per accumulated key: a real accumulator
                        l_ = _r(l_ + p[:, j], acc)
                    pr = _r(p, pfmt)
                    o = _r(alpha[:, None] * o, acc)
                    for j in range(p.shape[1]):
                        o = _r(o + pr[:, j:j + 1] * v[bi, h // g, t0 + j][None, :], acc)
                    m = m_new
                empty = l_ == 0
                out[bi, h] = _r(np.where(empty[:, None], 0.0, o / np.where(empty, 1.0, l_)[:, None]), dt)
                with np.errstate(divide="ignore"):
                    lse[bi, h] = np.where(empty, self.lse_empty, m + np.log(np.where(empty, 1.0, l_)))
        if b == "nan":
            out[0, 0, 0, 0] = np.nan
        if b == "nondeterministic":
            out = out + (self.calls % 2) * 2.0**-30 * np.abs(out)
        if b == "wrong_shape":
            out = out[:, :, :-1]
        declared = "+inf" if self.lse_empty > 0 and self.declare_plus_inf else "-inf"
        return ForwardOutput(out=out, lse=lse, out_dtype=dt, lse_convention=declared)

    def backward(self, inputs, case, device):
        from attention_conformance import oracles

        kw = dict(case.oracle_kwargs, mask=inputs.mask, bias=inputs.bias)
        dq, dk, dv = oracles.attention_backward(inputs.q, inputs.k, inputs.v, inputs.dout, **kw)
        dq, dk, dv = (_r(x, case.dtype) for x in (dq, dk, dv))
        if self.behaviour == "bad_dq":
            dq = dq * 1.01
        return BackwardOutput(dq=dq, dk=dk, dv=dv)


def make(**kw):
    """Factory used by ``module:attr`` specs in worker tests."""
    return EmulatedKernel(**kw)


class Aborting(EmulatedKernel):
    name = "toy-abort"
    isolate = True

    def __init__(self):
        super().__init__(behaviour="abort")


class Hanging(EmulatedKernel):
    name = "toy-hang"
    isolate = True

    def __init__(self):
        super().__init__(behaviour="hang")


class IsolatedCorrect(EmulatedKernel):
    name = "toy-isolated"
    isolate = True


class AbortsInProcessOnEmptyRows(EmulatedKernel):
    """Not isolated: kills the process that runs it on cases with fully masked rows (``mask="full_rows"``).

    Under ``run --workers N`` that process is a pool worker, so the parallel runner must turn the lost
    case into CRASH, restart the worker, and go on (issue 7)."""

    name = "toy-abort-in-process"
    isolate = False

    def forward(self, inputs, case, device):
        if case.mask == "full_rows":
            os.abort()
        return super().forward(inputs, case, device)


class ZeroLseOnEmptyRows(EmulatedKernel):
    """Right outputs, but LSE = 0 (not -inf) on fully masked rows, undeclared: an LSE-only failure."""

    name = "toy-zero-lse"

    def __init__(self):
        super().__init__(lse_empty=0.0)


class MutatesQ(EmulatedKernel):
    """Right outputs computed after adding 1 to q in place: an inputs-unchanged-only failure."""

    name = "toy-mutates-q"

    def __init__(self):
        super().__init__(behaviour="mutate")


class OracleToy(Adapter):
    """Returns the FP64 oracle's own answer, rounded to the output dtype: a correct kernel of any dtype
    (FP8 included: bf16 output), with one switchable deviation per subclass. Used to send the same
    (case, result) pairs through every entry point of the judge (tests/conformance/test_judge.py)."""

    name = "toy-oracle"
    capabilities = Capabilities(dtypes=ALL_DTYPES | {"float8_e4m3fn", "float8_e5m2"}, mask=True, bias=True,
                                window=True, softcap=True, varlen=True, lse=True, backward=True, deterministic=True,
                                fp8=frozenset({"per_tensor", "per_head", "per_tile"}))
    behaviour = "correct"
    lse_empty = -math.inf
    declared = "-inf"

    def __init__(self):
        self.calls = 0

    def _kw(self, inputs, case):
        return dict(case.oracle_kwargs, mask=inputs.mask, bias=inputs.bias)

    def forward(self, inputs, case, device):
        from attention_conformance import oracles

        self.calls += 1
        if self.behaviour == "raise":
            raise RuntimeError("toy kernel failure")
        out, lse = oracles.attention(inputs.q, inputs.k, inputs.v, **self._kw(inputs, case))
        out_dt = "bfloat16" if case.fp8 is not None else case.dtype
        out = _r(out, out_dt)
        lse = np.where(np.isneginf(lse), self.lse_empty, lse)
        if self.behaviour == "mutate":
            inputs.k[..., 0] += 1.0
        if self.behaviour == "nondeterministic":
            out = out + (self.calls % 2) * 2.0**-30 * np.abs(out)
        if self.behaviour == "nan":
            out[0, 0, 0, :] = np.nan
        return ForwardOutput(out=out, lse=lse, out_dtype=out_dt, lse_convention=self.declared)

    def backward(self, inputs, case, device):
        from attention_conformance import oracles

        dq, dk, dv = oracles.attention_backward(inputs.q, inputs.k, inputs.v, inputs.dout, **self._kw(inputs, case))
        dq, dk, dv = (_r(x, case.dtype) for x in (dq, dk, dv))
        if self.behaviour == "bad_dq":
            dq = dq * 1.01 + 0.01
        return BackwardOutput(dq=dq, dk=dk, dv=dv)


class OraclePlusInfLse(OracleToy):
    """+inf LSE on fully masked rows, declared (the FA2 convention, SEMANTICS.md §8): passes."""

    name = "toy-oracle-plus-inf"
    lse_empty = math.inf
    declared = "+inf"


class IsolatedOraclePlusInfLse(OraclePlusInfLse):
    """The same, in a worker process: the declaration must reach the judge from there too."""

    name = "toy-oracle-plus-inf-isolated"
    isolate = True


class OracleUndeclaredPlusInfLse(OracleToy):
    """+inf LSE on fully masked rows while declaring -inf: fails check lse."""

    name = "toy-oracle-undeclared-plus-inf"
    lse_empty = math.inf


class OracleMutatesK(OracleToy):
    name = "toy-oracle-mutates-k"
    behaviour = "mutate"


class OracleRaises(OracleToy):
    name = "toy-oracle-raises"
    behaviour = "raise"


class OracleNondeterministic(OracleToy):
    name = "toy-oracle-nondeterministic"
    behaviour = "nondeterministic"


class OracleNaN(OracleToy):
    name = "toy-oracle-nan"
    behaviour = "nan"


class OracleBadDq(OracleToy):
    name = "toy-oracle-bad-dq"
    behaviour = "bad_dq"


class OracleGarbagePaddedGrads(OracleToy):
    """Correct, but writes 1e3 into the padded rows of dq (query rows) and dk, dv (key rows), as an API told
    the lengths may leave them unwritten (SEMANTICS.md §7): passes."""

    name = "toy-oracle-garbage-padded-grads"

    def backward(self, inputs, case, device):
        res = super().backward(inputs, case, device)
        for b in range(case.B):
            sq = case.Lq if case.seqlens_q is None else case.seqlens_q[b]
            sk = case.Lk if case.seqlens_k is None else case.seqlens_k[b]
            res.dq[b, :, sq:] = 1e3
            res.dk[b, :, sk:] = 1e3
            res.dv[b, :, sk:] = 1e3
        return res


class OracleBadPaddedKeyGradAtEdge(OracleToy):
    """Wrong dk in the last *valid* key row of each sequence (the row before the padding): fails check dk."""

    name = "toy-oracle-bad-dk-at-edge"

    def backward(self, inputs, case, device):
        res = super().backward(inputs, case, device)
        for b in range(case.B):
            sk = case.Lk if case.seqlens_k is None else case.seqlens_k[b]
            if sk:
                res.dk[b, :, sk - 1] += 0.5
        return res


class OracleDeclines(OracleToy):
    """The library refuses the call itself (`CallDeclined`): NOT_SUPPORTED with its words, never FAIL."""

    name = "toy-oracle-declines"

    def forward(self, inputs, case, device):
        from attention_conformance import CallDeclined

        raise CallDeclined("toy library: no kernel for this shape")


class OracleDeclinesBackward(OracleToy):
    """A right forward, a backward the library refuses: NOT_SUPPORTED (the case needs the backward)."""

    name = "toy-oracle-declines-backward"

    def backward(self, inputs, case, device):
        from attention_conformance import CallDeclined

        raise CallDeclined("toy library: no backward kernel for this shape")


ANY_DEVICE = frozenset({"cpu", "cuda"})


class OracleOnAnyDevice(OracleToy):
    """The oracle's answer, claimed on CUDA too (the arithmetic is NumPy's): for the engine's CUDA-only paths."""

    name = "toy-oracle-any-device"
    capabilities = dataclasses.replace(OracleToy.capabilities, devices=ANY_DEVICE)


class BreaksCudaContext(OracleOnAnyDevice):
    """Raises as a kernel that wrote out of bounds would, and leaves the process as a sticky CUDA error does: from
    its first call on, `running.cuda_context.unusable` reports the context lost on CUDA (simulated in the process
    that made the call: a worker's, when isolated; tests restore the parent's with monkeypatch)."""

    name = "toy-breaks-cuda-context"
    behaviour = "raise"

    def forward(self, inputs, case, device):
        from attention_conformance.running import cuda_context

        cuda_context.unusable = lambda dev: ("AcceleratorError: CUDA error: an illegal memory access was encountered"
                                             if dev.startswith("cuda") else None)
        raise RuntimeError("CUDA error: an illegal memory access was encountered (toy)")


class IsolatedBreaksCudaContext(BreaksCudaContext):
    name = "toy-breaks-cuda-context-isolated"
    isolate = True


class OutOfMemoryBesideOthers(EmulatedKernel):
    """Raises MemoryError on empty-row cases while fewer than ``TOY_OOM_TIMES`` (default 1) calls have (counted in
    the file ``TOY_OOM_MARKER`` names, across processes): a call that runs out of device memory while other
    workers hold it, and runs later (the engine calls it a second time at once; `running.parallel` re-runs such a
    case alone at the end)."""

    name = "toy-oom-beside-others"
    isolate = False

    def forward(self, inputs, case, device):
        marker = os.environ["TOY_OOM_MARKER"]
        if case.mask == "full_rows":
            done = os.path.getsize(marker) if os.path.exists(marker) else 0
            if done < int(os.environ.get("TOY_OOM_TIMES", "1")):
                with open(marker, "a") as f:
                    f.write("x")
                raise MemoryError("out of memory (toy: the other workers hold the device)")
        return super().forward(inputs, case, device)


class SlowOnBigCases(EmulatedKernel):
    """Correct, and 2 s slower on a case of more than 2000 queries x keys: a case still running when another one's
    result comes back."""

    name = "toy-slow-on-big"
    isolate = True

    def forward(self, inputs, case, device):
        if case.Lq * case.Lk > 2000:
            time.sleep(2.0)
        return super().forward(inputs, case, device)
