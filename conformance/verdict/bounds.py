"""Tolerance policy: a-priori error bounds per output element (conformance/TOLERANCES.md).

`compute_oracle(case, inputs)` is the one pass per case: the FP64 oracle's values (`conformance.verdict.oracle_values`),
the bounds below, and, in the same blocks, the naive same-precision implementation (`conformance.verdict.naive`).
The precision model the bounds take is `conformance.verdict.precision`.

The bound is evaluated from the FP64 oracle's own quantities, one query block at a time (memory
bounded like the oracle, SEMANTICS.md §3): for every (batch, query head, query block) the scores
are rebuilt with `oracles.scores.score_block` (the oracle's own score pipeline, so the semantics
cannot drift), ``P = exp(s - LSE)`` comes from the oracle's LSE (§12), and the per-element
magnitudes of TOLERANCES.md are accumulated:

    A_ic  = sum_j P_ij |V_jc|                                  (PV magnitude)
    G_ic  = sum_j P_ij g_ij (|V_jc| + |O_ic|)                  (score-error propagation, per u_s)
    gb_i  = sum_j P_ij g_ij                                    (LSE error, per u_s)
    W_ic  = n_i (max_j |V_jc| + |O_ic|) / l_i                  (absolute P-rounding floor)
    g_ij  = gamma(d) sigma_ij + 3 |s_ij| + |m_i|,   sigma_ij = |scale| sum_k |q_ik| |k_jk|

and, for backward cases, the dQ/dK/dV bounds (TOLERANCES.md §4) with the case's precision model.

Sinks (SEMANTICS.md §18): ``P`` is taken against the LSE that includes the sink (rows sum to 1 - P_sink),
the naive implementation puts the sink in its max and sum, and sink backward cases get a bound on d sink:
``sum_i P_sink,i ((tol_LSE_i + u_a) |D_i - dlse_i| + dD_i) + gamma(rows) u_a sum_i P_sink,i |D_i - dlse_i|``
(the P_sink error from the kernel's LSE, the D error from its O, the accumulation over rows). ``lse_grad``
cases add the LSE cotangent to dS (``dS = P (dP - D + dlse)``) in the bound and the naive backward.

The same pass evaluates the *naive same-precision implementation* (`conformance.verdict.naive`), whose error is
the secondary criterion (QUALITY_WARNING at more than 2x).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attention_conformance.cases.case import Case
from attention_conformance.cases.inputs import round_to_dtype
from attention_conformance.verdict import naive
from attention_conformance.verdict.oracle_values import oracle_values
from attention_conformance.verdict.precision import (
    LAMBDA,
    PrecisionModel,
    gamma,
    precision_model,
    subnormal_half_spacing,
    unit_roundoff,
)

__all__ = [
    "OracleData",
    "compute_oracle",
    "forward_tolerance",
    "lse_tolerance",
]


@dataclass
class OracleData:
    """Everything the engine needs about one case, computed once per run (issue 3, item 8)."""

    case_id: str
    out: np.ndarray  # oracle O [B, Hq, Lq, dv]
    lse: np.ndarray  # oracle LSE [B, Hq, Lq]
    valid: np.ndarray  # bool [B, Hq, Lq]: rows that are compared (not padded, §7)
    A: np.ndarray
    G: np.ndarray
    gb: np.ndarray
    W: np.ndarray
    nkeys: np.ndarray  # visible keys per row [B, Hq, Lq]
    model: PrecisionModel
    naive_out: np.ndarray  # the naive same-precision implementation's O
    grads: dict[str, np.ndarray] = field(default_factory=dict)  # oracle dq, dk, dv
    grad_tol: dict[str, np.ndarray] = field(default_factory=dict)
    naive_grads: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: float = 0.0
    P2: np.ndarray | None = None  # sum_j P_ij^2 per row [B, Hq, Lq] (P-rounding error of l, LSE bound)
    valid_k: np.ndarray | None = None  # bool [B, Hkv, Lk]: key rows of dk, dv that are compared (not padded, §7)

    @property
    def lse_empty(self) -> np.ndarray:
        return np.isneginf(self.lse) & self.valid


def forward_tolerance(od: OracleData, model: PrecisionModel | None = None) -> np.ndarray:
    """Per-element bound on |O_kernel - O_oracle| (TOLERANCES.md §3)."""
    m = model or od.model
    absO = np.abs(od.out)
    accum = (gamma(np.maximum(od.nkeys, 1)) + 4.0)[..., None] * m.u_a
    return (
        m.u_out * absO
        + (m.u_p + accum) * (od.A + absO)
        + m.u_s * od.G
        + m.eta_p * od.W
        + m.floor
    )


def lse_tolerance(od: OracleData, model: PrecisionModel | None = None) -> np.ndarray:
    """Per-row bound on |LSE_kernel - LSE_oracle| for rows with a finite oracle LSE (TOLERANCES.md §3)."""
    m = model or od.model
    lse = np.where(np.isfinite(od.lse), od.lse, 0.0)
    u_lse = m.u_a if m.in_dtype != "float64" else unit_roundoff("float64")
    u_lse = max(u_lse, unit_roundoff("float32")) if m.in_dtype != "float64" else u_lse
    p_round = 0.0 if od.P2 is None else m.u_p * np.minimum(1.0, LAMBDA * np.sqrt(od.P2))
    return (m.u_s * od.gb + (gamma(np.maximum(od.nkeys, 1)) + 4.0) * m.u_a + p_round + u_lse * np.abs(lse)
            + m.floor)


#: score-block size (float64 elements) of the bound pass; several arrays of this size are alive at once
BLOCK_ELEMENTS = 1 << 21


def _score_block(p, b: int, h: int, r0: int, r1: int, qs, k, *, keep_tanh: bool = False):
    """Scores [r1 - r0, sk] of (b, h) over all real keys, -inf where invisible: the oracle's own pipeline.

    Calls `oracles.scores.score_block` (SEMANTICS.md §3); supports both its key-range signature
    ``(p, b, h, r0, r1, lo, hi, qs, k)`` and the earlier ``(p, b, h, r0, r1, qs, kt)``.
    """
    import inspect

    from attention_conformance.oracles.scores import score_block

    sk = int(p.seqlens_k[b])
    if "lo" in inspect.signature(score_block).parameters:
        return score_block(p, b, h, r0, r1, 0, sk, qs, k, keep_tanh=keep_tanh)
    return score_block(p, b, h, r0, r1, qs, k[:sk].T, keep_tanh=keep_tanh)


# -- the block pass -------------------------------------------------------------------------------

def compute_oracle(case: Case, inputs) -> OracleData:
    """Oracle O/LSE (and gradients), magnitudes, bounds and the naive implementation for `case`."""
    import time

    from attention_conformance.oracles.scores import row_blocks

    t0 = time.perf_counter()
    out, lse, grads, p = oracle_values(case, inputs)
    model = precision_model(case)

    B, Hq, Lq, dvdim = out.shape
    d = p.d
    gd = gamma(d)
    A = np.zeros_like(out)
    G = np.zeros_like(out)
    W = np.zeros_like(out)
    gb = np.zeros_like(lse)
    nkeys = np.zeros(lse.shape, dtype=np.float64)
    P2 = np.zeros(lse.shape, dtype=np.float64)
    valid = np.zeros(lse.shape, dtype=bool)
    valid_k = np.zeros(p.k.shape[:3], dtype=bool)  # key rows of dk, dv compared (§7)
    naive_out = np.zeros_like(out)
    in_dt = model.in_dtype
    out_dt = model.out_dtype
    p_dt = model.p_dtype
    acc = np.float64 if in_dt == "float64" else np.float32
    absscale = abs(p.scale)

    bwd = case.backward
    if bwd:
        dq_t = np.zeros_like(p.q)
        dk_t = np.zeros_like(p.k)
        dv_t = np.zeros_like(p.v)
        ndq = np.zeros(p.q.shape, dtype=acc)
        ndk = np.zeros(p.k.shape, dtype=acc)
        ndv = np.zeros(p.v.shape, dtype=acc)

    # pass 1: forward magnitudes and the naive forward
    for b in range(p.B):
        sq, sk = int(p.seqlens_q[b]), int(p.seqlens_k[b])
        valid[b, :, :sq] = True
        valid_k[b, :, :sk] = True
        if sq == 0:
            continue
        blocks = row_blocks(sq, sk, BLOCK_ELEMENTS)
        for h in range(p.Hq):
            hk = h // p.group
            qs = p.q[b, h, :sq] * p.scale
            kt = p.k[b, hk, :sk].T
            kfull = p.k[b, hk]
            vb = p.v[b, hk, :sk]
            absv = np.abs(vb)
            vmax = absv.max(axis=0) if sk else np.zeros(p.dv)
            aq = np.abs(p.q[b, h, :sq]) * absscale
            akt = np.abs(kt)
            q32 = p.q[b, h, :sq].astype(acc)
            k32 = p.k[b, hk, :sk].astype(acc)
            v32 = vb.astype(acc)
            sink = -np.inf if p.sinks is None else float(p.sinks[h])
            for r0, r1 in blocks:
                s, _ = _score_block(p, b, h, r0, r1, qs, kfull)
                vis = s > -np.inf
                L = lse[b, h, r0:r1]
                Lf = np.where(np.isfinite(L), L, 0.0)
                with np.errstate(invalid="ignore", over="ignore"):
                    P = np.where(vis, np.exp(np.where(vis, s, Lf[:, None]) - Lf[:, None]), 0.0)
                    p_sink = np.where(np.isfinite(L), np.exp(sink - Lf), 0.0)  # 0 without a sink (§18)
                rowsum = P.sum(axis=1) + p_sink
                drift = np.abs(rowsum - np.isfinite(L))
                if drift.size and drift.max() > 1e-9:  # P must be the oracle's softmax (same scores, same LSE)
                    i = int(np.argmax(drift))
                    raise RuntimeError(f"bound pass disagrees with the oracle: sum_j P = {rowsum[i]!r} at batch {b}, "
                                       f"head {h}, row {r0 + i} (LSE {L[i]!r}); case {case.id}")
                m = np.where(vis.any(axis=1), np.max(np.where(vis, s, -np.inf), axis=1, initial=-np.inf), 0.0)
                if sink > -np.inf:  # the kernel's running max includes the sink (§18): it sets the rounding scale
                    m = np.maximum(np.where(vis.any(axis=1), m, -np.inf), sink)
                sigma = aq[r0:r1] @ akt
                g = gd * sigma + 3.0 * np.abs(np.where(vis, s, 0.0)) + np.abs(m)[:, None]
                Pg = P * g
                Pg_sink = p_sink * (3.0 * abs(sink) + np.abs(m)) if sink > -np.inf else 0.0 * p_sink
                O = out[b, h, r0:r1]
                absO = np.abs(O)
                A[b, h, r0:r1] = P @ absv
                G[b, h, r0:r1] = Pg @ absv + absO * (Pg.sum(axis=1) + Pg_sink)[:, None]
                gb[b, h, r0:r1] = Pg.sum(axis=1) + Pg_sink
                P2[b, h, r0:r1] = (P * P).sum(axis=1)
                n = vis.sum(axis=1).astype(np.float64)
                nkeys[b, h, r0:r1] = n
                inv_l = np.where(np.isfinite(L), np.exp(np.minimum(m - Lf, 0.0)), 0.0)
                W[b, h, r0:r1] = (n * inv_l)[:, None] * (vmax[None, :] + absO)
                # naive same-precision implementation (secondary criterion)
                naive_out[b, h, r0:r1] = naive.forward_rows(p, b, h, r0, r1, q32, k32, v32, vis, sink, acc, p_dt,
                                                            out_dt)
    od = OracleData(case.id, out, lse, valid, A, G, gb, W, nkeys, model, naive_out, grads=grads, P2=P2,
                    valid_k=valid_k)
    if bwd:
        tol_o = forward_tolerance(od)
        sink_acc = None if p.sinks is None else [np.zeros(p.Hq) for _ in range(3)]  # bound, naive, |terms|
        _backward_pass(p, od, tol_o, dq_t, dk_t, dv_t, ndq, ndk, ndv, acc, gd, sink_acc)
        od.grad_tol = {"dq": dq_t, "dk": dk_t, "dv": dv_t}
        od.naive_grads = {
            "dq": round_to_dtype(ndq, out_dt), "dk": round_to_dtype(ndk, out_dt), "dv": round_to_dtype(ndv, out_dt)
        }
        if sink_acc is not None:
            bound, naive_ds, terms = sink_acc
            rows = max(int(np.sum(p.seqlens_q)), 1)
            od.grad_tol["dsinks"] = (bound + gamma(rows) * model.u_a * terms
                                     + unit_roundoff("float32") * np.abs(grads["dsinks"]) + model.floor)
            od.naive_grads["dsinks"] = naive_ds
    od.seconds = time.perf_counter() - t0
    return od


def _backward_pass(p, od: OracleData, tol_o, dq_t, dk_t, dv_t, ndq, ndk, ndv, acc, gd, sink_acc=None) -> None:
    """dQ/dK/dV bounds (TOLERANCES.md §4) and the naive same-precision backward, blockwise.

    ``sink_acc`` (sink cases): three [Hq] accumulators, the d sink bound (without the row-sum growth term),
    the naive same-precision d sink, and sum_i P_sink,i |D_i - dlse_i| (the growth term's magnitude)."""
    from attention_conformance.oracles.scores import row_blocks

    model = od.model
    u_s, u_a, u_p, u_out = model.u_s, model.u_a, model.u_p, model.u_out
    out, lse = od.out, od.lse
    absscale = abs(p.scale)
    gdv = gamma(p.dv)
    p_dt, out_dt = model.p_dtype, model.out_dtype
    eta_ds = subnormal_half_spacing(p_dt)  # dS rounded to T for the dQ / dK GEMMs
    tol_lse = lse_tolerance(od)
    for b in range(p.B):
        sq, sk = int(p.seqlens_q[b]), int(p.seqlens_k[b])
        if sink_acc is not None and sq > 0:
            _sink_bound(p, od, tol_o, tol_lse, b, sq, acc, sink_acc)
        if sq == 0 or sk == 0:
            continue
        blocks = row_blocks(sq, sk, BLOCK_ELEMENTS)
        gk = gamma(sq)  # terms in a dK / dV column sum (per query head; heads add below)
        gq = gamma(sk)
        for h in range(p.Hq):
            hk = h // p.group
            qs = p.q[b, h, :sq] * p.scale
            kfull = p.k[b, hk]
            vb = p.v[b, hk, :sk]
            absv, absk, absq = np.abs(vb), np.abs(p.k[b, hk, :sk]), np.abs(p.q[b, h, :sq])
            aq = absq * absscale
            dO = p.dout[b, h, :sq]
            absdo = np.abs(dO)
            q32 = p.q[b, h, :sq].astype(acc)
            k32 = p.k[b, hk, :sk].astype(acc)
            v32 = vb.astype(acc)
            do32 = dO.astype(acc)
            for r0, r1 in blocks:
                s, t = _score_block(p, b, h, r0, r1, qs, kfull, keep_tanh=True)
                vis = s > -np.inf
                L = lse[b, h, r0:r1]
                Lf = np.where(np.isfinite(L), L, 0.0)
                P = np.where(vis, np.exp(np.where(vis, s, Lf[:, None]) - Lf[:, None]), 0.0)
                m = np.where(vis.any(axis=1), np.max(np.where(vis, s, -np.inf), axis=1), 0.0)
                if p.sinks is not None and p.sinks[h] > -np.inf:  # the running max includes the sink (§18)
                    m = np.maximum(np.where(vis.any(axis=1), m, -np.inf), float(p.sinks[h]))
                sigma = aq[r0:r1] @ absk.T
                # P = exp(s - L) is recomputed from the kernel's own stored LSE, whose error is bounded
                # by the LSE tolerance (TOLERANCES.md §3, §4)
                eps = u_s * (gd * sigma + 3.0 * np.abs(np.where(vis, s, 0.0)) + np.abs(m)[:, None]) \
                    + tol_lse[b, h, r0:r1][:, None]
                epsbar = (P * eps).sum(axis=1)
                dP_err = P * (eps + epsbar[:, None])
                O = out[b, h, r0:r1]
                dOb = dO[r0:r1]
                dPm = dOb @ vb.T
                D = (dOb * O).sum(axis=1)
                if p.dlse is not None:
                    D = D - np.where(np.isfinite(L), p.dlse[b, h, r0:r1], 0.0)  # dS = P (dP - D + dlse)
                dS = P * (dPm - D[:, None])
                if t is not None:
                    dS_r = dS * (1.0 - t * t)
                else:
                    dS_r = dS
                tau = (u_a * gdv) * (absdo[r0:r1] @ absv.T)
                dD = (absdo[r0:r1] * tol_o[b, h, r0:r1]).sum(axis=1) + u_a * gdv * (absdo[r0:r1] * np.abs(O)).sum(1)
                e = dP_err * np.abs(dPm - D[:, None]) + P * (tau + dD[:, None]) + (u_p + 4 * u_a) * np.abs(dS)
                # a tiny P: the fp32 exp's flush (TOLERANCES.md §4: p_flush |dP - D|) and dS's subnormal rounding to T
                e = np.where(vis, e + model.p_flush * np.abs(dPm - D[:, None]) + eta_ds, 0.0)
                adS = np.abs(dS_r)
                dq_t[b, h, r0:r1] += absscale * (e @ absk + gq * u_a * (adS @ absk))
                dk_t[b, hk, :sk] += absscale * (e.T @ absq[r0:r1] + gk * u_a * (adS.T @ absq[r0:r1]))
                dv_t[b, hk, :sk] += ((dP_err + (u_p + 4 * u_a) * P + model.eta_p * vis).T @ absdo[r0:r1]
                                     + gk * u_a * (P.T @ absdo[r0:r1]))
                # naive same-precision backward
                gq_rows, gk_rows, gv_rows = naive.backward_rows(p, b, h, r0, r1, q32, k32, v32, do32, vis, L, O, acc,
                                                                p_dt, out_dt)
                ndq[b, h, r0:r1] += gq_rows
                ndk[b, hk, :sk] += gk_rows
                ndv[b, hk, :sk] += gv_rows
    grads = od.grads
    dq_t += u_out * np.abs(grads["dq"]) + model.floor
    dk_t += u_out * np.abs(grads["dk"]) + model.floor
    dv_t += u_out * np.abs(grads["dv"]) + model.floor



def _sink_bound(p, od: OracleData, tol_o, tol_lse, b: int, sq: int, acc, sink_acc) -> None:
    """Add batch b's share of the d sink bound and of the naive d sink (SEMANTICS.md §18).

    d sink_h = sum_i P_sink,i (dlse_i - D_i), P_sink = exp(sink_h - LSE_i), D_i = dout_i . O_i. The kernel's
    P_sink carries the error of its own LSE (tol_LSE, relative to P_sink) and of the exp (u_a); its D the
    error of its O (sum_c |dout_ic| tol_O_ic) and of the dot product (gamma(dv) u_a sum |dout O|).
    """
    bound, naive_ds, terms = sink_acc
    u_a = od.model.u_a
    gdv = gamma(p.dv)
    for h in range(p.Hq):
        sink = float(p.sinks[h])
        if sink == -np.inf:
            continue
        L = od.lse[b, h, :sq]
        O = od.out[b, h, :sq]
        dO = p.dout[b, h, :sq]
        dl = np.zeros(sq) if p.dlse is None else p.dlse[b, h, :sq]
        p_sink = np.exp(sink - L)
        Dm = (dO * O).sum(axis=1) - dl
        dD = (np.abs(dO) * tol_o[b, h, :sq]).sum(axis=1) + u_a * gdv * (np.abs(dO) * np.abs(O)).sum(axis=1)
        bound[h] += float(np.sum(p_sink * ((tol_lse[b, h, :sq] + u_a) * np.abs(Dm) + dD)
                                 + od.model.p_flush * np.abs(Dm)))  # a P_sink below 2^-126 flushed (TOLERANCES §4a)
        terms[h] += float(np.sum(p_sink * np.abs(Dm)))
        naive_ds[h] += naive.sink_grad(sink, L, O, dO, dl, acc, od.model.out_dtype)
