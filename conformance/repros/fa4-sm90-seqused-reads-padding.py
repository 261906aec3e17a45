#!/usr/bin/env python3
r"""Standalone repro: attention-conformance case nan_padding-b3h2x2-q64k64-d32-f16-nan_padding-08c23c through
flash-attn-4@seqused on cuda.

The call: flash-attn-4 (flash_attn.cute) flash_attn_varlen_func on [B, L, H, D] with seqused_q / seqused_k.

The case: B=3, Hq=2, Hkv=2, Lq=64, Lk=64, d=32, dv=32; float16 inputs; scale 1/sqrt(d) (§2); sequence lengths q (37,
64, 1), k (64, 20, 50) in padded tensors (§7); inputs 'nan_padding' (NaN in every padded row, §7); inputs from seed
1637511755 (NumPy PCG64).

Expected values: exact attention in float64, computed below (reference_attention; the § numbers cite
oracles/SEMANTICS.md of attention-conformance). Tolerance: per quantity, the largest per-element error bound the
harness computed for this case (its TOLERANCES.md), so a value beyond it fails the harness's check too.

Exit status: 1 while the defect stands (a value outside its tolerance, NaN/Inf where the expected value is finite, a
finite LSE on a row with no visible key, or the call raising), 0 once every compared value is within its tolerance,
2 when it cannot run here (needs CUDA, a missing library, inputs that differ from the harness's, the library
declining the call).

Needs numpy and torch (CUDA) and the library under test; imports nothing from attention-conformance. Written by
    python -m attention_conformance repro nan_padding-b3h2x2-q64k64-d32-f16-nan_padding-08c23c --impl \
        flash-attn-4@seqused --device cuda --standalone --out conformance/repros/fa4-sm90-seqused-reads-padding.py
(the adapter's claim on this case: checked against flash-attn-4@seqused's declared claims; the library was not asked
(no cuda device where this file was written)).
"""

import hashlib
import math
import sys
import traceback

import numpy as np

CASE_ID = "nan_padding-b3h2x2-q64k64-d32-f16-nan_padding-08c23c"
LIBRARY = "flash-attn-4 (flash_attn.cute) flash_attn_varlen_func on [B, L, H, D] with seqused_q / seqused_k"
DEVICE = "cuda"
SEQLENS_Q = [37, 64, 1]  # query lengths (§7); None: every row is real
SEQLENS_K = [64, 20, 50]  # key lengths (§7); None: every key is real
# per quantity: the harness's error bound of each compared element (a quantity of more than 4096
# elements: the largest of them)
TOLERANCE = {
    "out": 0.00274483123052244,
    "lse": np.array([
        0.0005588577170277631, 0.000475442792573659, 0.0004620219033215349, 0.0005215528050379881,
        0.00042491375275420106, 0.0005188064371879312, 0.0004985210119859821,
        0.00048504690914752874, 0.0004782360058048933, 0.0005064849236677711, 0.0005194918198079873,
        0.0005600018507965871, 0.0005242188015645528, 0.0005236888407625613, 0.0004655759807719633,
        0.0005416427459943702, 0.0005284539468279207, 0.0004868449580169544, 0.0004863737282509898,
        0.000512443768831968, 0.0004459603731341781, 0.0005592176172945756, 0.0005587712495209353,
        0.0005075740764401543, 0.0004726069591779275, 0.0004937179853721429, 0.0005598270071022564,
        0.0005201627819426617, 0.0005159568140719853, 0.00053866979063213, 0.0005580491837082742,
        0.0004996565615764091, 0.00047910684160506296, 0.000542289692755815, 0.0005131684854159388,
        0.000559077738558007, 0.0005313123492230335, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0005598513753106591, 0.0004549527764596033, 0.0004771016141539467, 0.00047383255529292393,
        0.0005013977336152987, 0.00047202645465792395, 0.0005002913692213364, 0.0005448677936718655,
        0.0005401958345933673, 0.0005296274885470058, 0.0005013579878671821, 0.0005351920328645032,
        0.0005589050445475534, 0.000507446934795912, 0.00047089275865691034, 0.0005378867391763516,
        0.0005561835089731631, 0.0004642517600659003, 0.0004709185828076435, 0.0005081994459978942,
        0.0004913592786091618, 0.0004595964267697716, 0.0004891224656869847, 0.0004870563949431432,
        0.00046340125742229215, 0.0005110265265074634, 0.0005590598793719045, 0.000559230135475792,
        0.00046535922872035666, 0.0005584459455270713, 0.0005250120034196077, 0.0005473689410605451,
        0.0005023572607218121, 0.0005593382404881373, 0.00044300745255883116, 0.0004837029760598494,
        0.0005472982426007276, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0005571465363110483,
        0.000556533909186344, 0.0005574301337361186, 0.0005572154083465036, 0.0005570551090604217,
        0.0005582289809744839, 0.0005556475416987127, 0.0005568824811805507, 0.0005567452604673779,
        0.0005566788080490364, 0.0005576315995884057, 0.0005572012840075842, 0.0005568687228333157,
        0.0005581060255078148, 0.000557078513499343, 0.0005562924645080035, 0.0005572209892502293,
        0.0005572299124551628, 0.0005573855081292013, 0.0005577776070113545, 0.0005556826823622384,
        0.0005580667095874825, 0.0005568156870087277, 0.0005567253674946097, 0.0005586655346413359,
        0.0005582192742434452, 0.0005582508293074289, 0.0005573229802122449, 0.0005568492292078831,
        0.0005581061633125491, 0.0005586232503129061, 0.0005577876073035868, 0.0005579388737821791,
        0.0005572126187825451, 0.0005572992269838973, 0.0005585278836817453, 0.000558621541348691,
        0.0005560681279223828, 0.000558079179657285, 0.0005567149496433193, 0.0005575028751769696,
        0.00055693959605168, 0.0005571346388994022, 0.0005567676098971661, 0.0005568041895965097,
        0.000556976221393631, 0.0005571860991687004, 0.0005567009219267125, 0.000556537477258759,
        0.0005568432531205236, 0.0005584488744293763, 0.0005574555301106043, 0.0005568587317047388,
        0.0005586250242632401, 0.0005571671669645537, 0.0005548497371878748, 0.000559703225804576,
        0.0005575454717163487, 0.0005567471789489518, 0.0005583013087780647, 0.0005561552648593042,
        0.0005574436258116247, 0.0005580205663513782, 0.000558266525655602, 0.0005579397065117299,
        0.0005576322023641048, 0.00055774833942405, 0.0005576429586792601, 0.0005573523918030146,
        0.0005570485939773714, 0.0005543725005669438, 0.0005582244404815796, 0.0005569891219198943,
        0.0005563696498205353, 0.0005597240656990896, 0.0005572379204969926, 0.0005574810773607245,
        0.0005582904804807178, 0.0005577147080198324, 0.0005556365390619844, 0.0005581427569074407,
        0.0005569457333367485, 0.0005568592283150419, 0.0005564088800212734, 0.0005571353326670961,
        0.0005566215803059492, 0.0005568213203121781, 0.000557487667389398, 0.0005574514126598117,
        0.0005571483018799711, 0.0005571125227955243, 0.0005585742112905774, 0.0005564955426754669,
        0.0005587690467862649, 0.0005558563050305311, 0.0005567521437103466, 0.0005584291184520837,
        0.0005572212370465178, 0.0005561362449827746, 0.0005579216520199993, 0.0005570013866888746,
        0.0005572567902800054, 0.0005595551882848429, 0.0005568986682450731, 0.000557497679462078,
        0.0005571096835806978, 0.0005581368875304558, 0.0005574938379752723, 0.0005559546420622223,
        0.0005569739071943005, 0.0005593427321554023, 0.0005588828375391674, 0.0005591275394664492,
        0.0005576770571851251, 0.0005562872805154081, 0.0005583555949488919, 0.000555302793017058,
        0.0005584877636622903, 0.000557408977735894, 0.0005580424963674671, 0.0005578492126330492,
        0.0005586252366395544, 0.0005563345372867983, 0.0005596473851152068, 0.0005570730028931763,
        0.0005574814953663643, 0.0005570265517556354, 0.0005575876679017327, 0.00047555749834072593,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.000558455703161009, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0
    ]).reshape((3, 2, 64)),
}
LSE_PLUS_INF_OK = True  # +inf passes as the LSE of a row with no visible key
# SHA-256 of the harness's inputs for this case (input_digest): make_inputs() must give exactly these
INPUTS_SHA256 = "853c53763c812b4354bc57bb0e6cc95dc94920c162273648c73751dc108f193d"


class LibraryDeclined(Exception):
    """The library refused the call itself before computing anything (torch SDPA's "No available kernel")."""


def round_to(x, dtype):
    """``x`` rounded once to ``dtype`` (round to nearest, ties to even) and widened back to float64.

    float32 / float16: NumPy's direct conversion. bfloat16 and FP8: on the format's grid, within the binade of |x|
    (clamped at the smallest normal exponent) x / quantum is rounded half to even; FP8 saturates at +-max
    (SEMANTICS.md §1, §10). NaN stays NaN.
    """
    x = np.asarray(x, dtype=np.float64)
    if dtype == "float64":
        return x.copy()
    if dtype in ("float32", "float16"):
        return x.astype(dtype).astype(np.float64)
    mbits, emin, fmax = {"bfloat16": (7, -126, None), "float8_e4m3fn": (3, -6, 448.0),
                         "float8_e5m2": (2, -14, 57344.0)}[dtype]
    if fmax is not None:
        x = np.clip(x, -fmax, fmax)
    _, ex = np.frexp(np.abs(x))
    quantum = np.ldexp(1.0, (np.maximum(ex.astype(np.int64) - 1, emin) - mbits).astype(np.int32))
    out = np.round(x / quantum) * quantum
    return out if fmax is None else np.clip(out, -fmax, fmax)


def input_digest(arrays):
    """SHA-256 over the named arrays in name order: the name, the shape, and the values as float64 (integer arrays as
    int64, boolean ones as bool) bytes."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        kind = bool if a.dtype == bool else np.int64 if a.dtype.kind in "iu" else np.float64
        a = np.ascontiguousarray(a, dtype=kind)
        h.update(f"{name}{list(a.shape)}{a.dtype.str}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def visible(sq, sk, rows, *, causal, alignment, window, chunk):
    """bool [len(rows), sk]: which of a sequence's sk real keys its query rows ``rows`` (each < sq) see.

    The aligned diagonal is c(i) = i + sk - sq ("bottom_right") or i ("top_left") (SEMANTICS.md §4); causal keeps
    j <= c(i); a window (left, right) keeps c(i) - left <= j <= c(i) + right, None = unbounded (§5); a chunk C keeps
    floor(c(i) / C) == floor(j / C) (§19). The boolean mask and -inf bias entries (§6) are the caller's.
    """
    c = np.asarray(rows, dtype=np.int64)[:, None] + (sk - sq if alignment == "bottom_right" else 0)
    j = np.arange(sk, dtype=np.int64)[None, :]
    left, right = window if window is not None else (None, None)
    if causal:
        right = 0 if right is None else min(right, 0)
    vis = np.ones((len(c), sk), dtype=bool)
    if right is not None:
        vis &= j <= c + right
    if left is not None:
        vis &= j >= c - left
    if chunk is not None:
        vis &= (c // chunk) == (j // chunk)
    return vis


def _plane(a, b, h, Lq, Lk):
    """Batch b, head h of a mask or bias broadcastable to [B, H, Lq, Lk], as [Lq, Lk]."""
    return np.broadcast_to(a[b if a.shape[0] > 1 else 0, h if a.shape[1] > 1 else 0], (Lq, Lk))


def reference_attention(q, k, v, *, scale, causal, alignment, window, chunk, softcap, mask, bias, seqlens_q,
                        seqlens_k, sinks, dout=None, dlse=None):
    """Exact attention in float64, as attention-conformance's contract defines it (oracles/SEMANTICS.md).

    Scores s = scale * q.k (§2), then softcap c * tanh(s / c) (§3), plus bias, then -inf where a key is not visible
    (`visible`, the boolean mask, -inf bias; §4-§7, §19); LSE = log sum exp over the visible keys (with the sink
    exp(sinks[h]) in the sum, §18), P = exp(s - LSE), out = P v; a row with no visible key has out = 0 and LSE = -inf
    (the sink's logit with a sink) (§8). GQA: query head h reads kv head h // (Hq / Hkv) (§9). Padded rows
    (i >= seqlens_q[b]) are 0 / -inf and padded keys never read (§7). With ``dout``, the gradients of
    sum(out * dout) + sum(lse * dlse) (§13, §18): dq, dk, dv (summed over each kv head's query heads) and, with
    sinks, dsinks. Returns a dict of float64 arrays: out, lse (and dq, dk, dv, dsinks).
    """
    B, Hq, Lq, d = q.shape
    Hkv, Lk, dv_dim = k.shape[1], k.shape[2], v.shape[3]
    group = Hq // Hkv
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = np.zeros((B, Hq, Lq, dv_dim))
    lse = np.full((B, Hq, Lq), -np.inf)
    grads = None
    if dout is not None:
        grads = {"dq": np.zeros(q.shape), "dk": np.zeros(k.shape), "dv": np.zeros(v.shape)}
        if sinks is not None:
            grads["dsinks"] = np.zeros(Hq)
    for b in range(B):
        sq = Lq if seqlens_q is None else int(seqlens_q[b])
        sk = Lk if seqlens_k is None else int(seqlens_k[b])
        step = max(1, (1 << 22) // max(sk, 1))  # rows per block: about 4M scores at a time
        for h in range(Hq):
            hk = h // group
            kb, vb = k[b, hk, :sk], v[b, hk, :sk]
            sink = -np.inf if sinks is None else float(sinks[h])
            for r0 in range(0, sq, step):
                r1 = min(sq, r0 + step)
                s = (scale * q[b, h, r0:r1]) @ kb.T
                t = None
                if softcap is not None:
                    t = np.tanh(s / softcap)
                    s = softcap * t
                if bias is not None:
                    s = s + _plane(bias, b, h, Lq, Lk)[r0:r1, :sk]
                vis = visible(sq, sk, np.arange(r0, r1), causal=causal, alignment=alignment, window=window,
                              chunk=chunk)
                if mask is not None:
                    vis &= _plane(mask, b, h, Lq, Lk)[r0:r1, :sk]
                vis &= s > -np.inf
                s = np.where(vis, s, -np.inf)
                m = np.maximum(s.max(axis=1, initial=-np.inf), sink)
                mf = np.where(np.isfinite(m), m, 0.0)
                e = np.where(vis, np.exp(s - mf[:, None]), 0.0)
                total = e.sum(axis=1) + np.exp(sink - mf)
                has = total > 0
                L = np.where(has, mf + np.log(np.where(has, total, 1.0)), -np.inf)
                P = e / np.where(has, total, 1.0)[:, None]
                O = P @ vb
                out[b, h, r0:r1], lse[b, h, r0:r1] = O, L
                if grads is None:
                    continue
                dO = dout[b, h, r0:r1]
                D = (dO * O).sum(axis=1)
                if dlse is not None:
                    D = D - np.where(has, dlse[b, h, r0:r1], 0.0)
                dS = P * (dO @ vb.T - D[:, None])
                if t is not None:
                    dS = dS * (1.0 - t * t)
                grads["dq"][b, h, r0:r1] = scale * (dS @ kb)
                grads["dk"][b, hk, :sk] += scale * (dS.T @ q[b, h, r0:r1])
                grads["dv"][b, hk, :sk] += P.T @ dO
                if sinks is not None:
                    grads["dsinks"][h] -= float(np.sum(np.where(has, np.exp(sink - L), 0.0) * D))
    result = {"out": out, "lse": lse}
    result.update(grads or {})
    return result


def _where(name, index):
    return f"{name}[{', '.join(str(int(i)) for i in index)}]"


def check_values(name, expected, observed, tolerance, compared):
    """(defect, report lines) for one quantity: NaN/Inf where the expected value is finite is a defect, and so is an
    |observed - expected| above ``tolerance`` on a compared element (``compared``: bool, broadcastable)."""
    observed = np.asarray(observed, dtype=np.float64)
    if observed.shape != expected.shape:
        return True, [f"{name}: shape {list(observed.shape)}, expected {list(expected.shape)}"]
    sel = np.broadcast_to(compared, expected.shape) & np.isfinite(expected)
    bad = sel & ~np.isfinite(observed)
    err = np.where(sel & np.isfinite(observed), np.abs(observed - expected), 0.0)
    lines = []
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        lines.append(f"{name}: {int(bad.sum())} of {int(sel.sum())} compared values are NaN/Inf where the expected "
                     f"value is finite; first at {_where(name, i)}: expected {float(expected[i])!r}, observed "
                     f"{float(observed[i])!r}")
    if err.size == 0:
        return bool(bad.any()), lines or [f"{name}: nothing to compare"]
    tol = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), err.shape)  # one bound, or one per element
    usage = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
    i = np.unravel_index(int(np.argmax(usage)), usage.shape)
    over = bool((err > tol).any())
    lines.append(f"{name}: worst |observed - expected| against its tolerance at {_where(name, i)}: {err[i]:.6g}, "
                 f"expected {float(expected[i])!r}, observed {float(observed[i])!r}, tolerance {tol[i]:.6g} "
                 f"({'EXCEEDED' if over else 'within'})")
    return bool(bad.any()) or over, lines


def check_lse(expected, observed, tolerance, compared, plus_inf_ok=False):
    """`check_values` on the rows with a finite expected LSE; a compared row whose expected LSE is -inf (no visible
    key, SEMANTICS.md §8) must be -inf too, or +inf where ``plus_inf_ok`` (FA2's convention, which the harness
    accepts from an adapter that reports it)."""
    observed = np.asarray(observed, dtype=np.float64)
    if observed.shape != expected.shape:
        return True, [f"lse: shape {list(observed.shape)}, expected {list(expected.shape)}"]
    rows = np.broadcast_to(compared, expected.shape)
    allowed = np.isinf(observed) if plus_inf_ok else np.isneginf(observed)
    empty = rows & np.isneginf(expected) & ~allowed
    lines = []
    if empty.any():
        i = np.unravel_index(int(np.argmax(empty)), empty.shape)
        lines.append(f"lse: {int(empty.sum())} row(s) with no visible key have a finite LSE, expected -inf "
                     f"(SEMANTICS.md §8); first at {_where('lse', i)}: observed {float(observed[i])!r}")
    defect, more = check_values("lse", np.where(np.isfinite(expected), expected, 0.0),
                                np.where(np.isfinite(expected), observed, 0.0), tolerance,
                                rows & np.isfinite(expected))
    return defect or bool(empty.any()), lines + more


def compared(name, shape, seqlens_q, seqlens_k):
    """bool, broadcastable to ``shape``: the compared elements of quantity ``name`` (SEMANTICS.md §7: padding is not
    compared): query rows i < seqlens_q[b] of out, lse and dq, key rows j < seqlens_k[b] of dk and dv, all of dsinks."""
    if name == "dsinks":
        return np.ones(shape, dtype=bool)
    lens = seqlens_k if name in ("dk", "dv") else seqlens_q
    rows = np.ones((shape[0], 1, shape[2]), dtype=bool)
    if lens is not None:
        rows = np.arange(shape[2])[None, None, :] < np.asarray(lens)[:, None, None]
    return rows if len(shape) == 3 else rows[..., None]


def as_tensor(array, dtype, device, layout="contiguous", requires_grad=False):
    """(leaf, view): float64 ``array`` [B, H, L, D] as a tensor of torch ``dtype`` on ``device`` (exact: the values are
    representable). Layouts: contiguous; bshd, a contiguous [B, L, H, D] tensor transposed to [B, H, L, D];
    kv_broadcast, batch entry 0 expanded over the batch with stride 0. Gradients are taken with respect to the view."""
    import torch

    if layout == "bshd":
        leaf = torch.from_numpy(np.ascontiguousarray(array.transpose(0, 2, 1, 3))).to(dtype).to(device)
        leaf.requires_grad_(requires_grad)
        return leaf, leaf.transpose(1, 2)
    if layout == "kv_broadcast":
        leaf = torch.from_numpy(np.ascontiguousarray(array[:1])).to(dtype).to(device).requires_grad_(requires_grad)
        return leaf, leaf.expand(array.shape[0], *leaf.shape[1:])
    leaf = torch.from_numpy(np.ascontiguousarray(array)).to(dtype).to(device).requires_grad_(requires_grad)
    return leaf, leaf


def make_inputs():
    """The inputs of the case, as attention-conformance makes them (conformance/cases/inputs.py) from seed 1637511755:
    float64 arrays whose values are exact in float16. The digest check in main() proves they are the harness's."""
    rng = np.random.default_rng(1637511755)
    q = rng.standard_normal((3, 2, 64, 32))
    k = rng.standard_normal((3, 2, 64, 32))
    v = rng.standard_normal((3, 2, 64, 32))
    q, k, v = (round_to(x, "float16") for x in (q, k, v))  # exact in float16 (SEMANTICS.md §1)
    # padded rows hold NaN (SEMANTICS.md §7: never read)
    for b, n in enumerate([37, 64, 1]):
        q[b, :, n:, :] = np.nan
    for b, n in enumerate([64, 20, 50]):
        k[b, :, n:, :] = np.nan
        v[b, :, n:, :] = np.nan
    return {"q": q, "k": k, "v": v}


def expected_values(inp):
    """The expected values in float64 (SEMANTICS.md): out and lse."""
    return reference_attention(
        inp["q"], inp["k"], inp["v"], scale=None, causal=False, alignment="bottom_right",
        window=None, chunk=None, softcap=None, mask=inp.get("mask"), bias=inp.get("bias"),
        seqlens_q=[37, 64, 1], seqlens_k=[64, 20, 50], sinks=inp.get("sinks"))


def cannot_run_here():
    """Why this file cannot make its call here (exit status 2), or None."""
    try:
        import torch
    except ImportError as exc:
        return f"needs torch ({exc})"
    if not torch.cuda.is_available():
        return ("needs CUDA: flash-attn-4 runs on CUDA (sm90 (Hopper); the claims here are FA4's sm90 path); "
                f"torch {torch.__version__} sees no CUDA device")
    try:
        import flash_attn.cute  # noqa: F401
    except ImportError as exc:
        return f"needs flash-attn-4 (import flash_attn.cute: {exc})"
    return None


def versions():
    """The versions this run used, for the report."""
    import torch

    parts = [f"torch {torch.__version__}"]
    try:
        import importlib.metadata

        parts.append(f"flash-attn-4 {importlib.metadata.version('flash-attn-4')}")
    except Exception:  # no distribution metadata
        parts.append("flash-attn-4 (version unknown)")
    parts.append(f"{torch.cuda.get_device_name()} (sm{''.join(map(str, torch.cuda.get_device_capability()))})")
    return ", ".join(parts)


def run_library(inp):
    """The call under test: flash-attn-4 (flash_attn.cute) flash_attn_varlen_func on [B, L, H, D] with seqused_q /
    seqused_k. Returns float64 arrays in [B, H, L, D] order."""
    import torch
    from flash_attn.cute import flash_attn_varlen_func

    def fa(requires_grad, want_lse):
        _, q = as_tensor(inp["q"], torch.float16, DEVICE, "contiguous", requires_grad)
        _, k = as_tensor(inp["k"], torch.float16, DEVICE, "contiguous", requires_grad)
        _, v = as_tensor(inp["v"], torch.float16, DEVICE, "contiguous", requires_grad)
        sink = None
        kw = dict(softmax_scale=None, causal=False, return_lse=want_lse,
                  seqused_q=torch.tensor([37, 64, 1], dtype=torch.int32, device=DEVICE),
                  seqused_k=torch.tensor([64, 20, 50], dtype=torch.int32, device=DEVICE))
        res = flash_attn_varlen_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw)  # [B, L, H, D]
        out, lse = (res[0], res[1] if len(res) > 1 else None) if isinstance(res, (tuple, list)) else (res, None)
        out = out.transpose(1, 2)
        return (q, k, v, sink), out, (lse if want_lse else None)

    _, out, lse = fa(False, True)
    result = {"out": out, "lse": lse}
    return {name: t.detach().to("cpu", torch.float64).numpy() for name, t in result.items()}


def main():
    """Make the inputs, check they are the harness's, compute the expected values, call the library, compare."""
    print(f"case {CASE_ID}: {LIBRARY}, on {DEVICE}")
    reason = cannot_run_here()
    if reason:
        print(f"cannot run here: {reason}", file=sys.stderr)
        return 2
    print(f"versions: {versions()}")
    inp = make_inputs()
    digest = input_digest(inp)
    if digest != INPUTS_SHA256:
        print(f"cannot run here: the inputs made here (SHA-256 {digest}) are not the harness's ({INPUTS_SHA256}); "
              f"numpy {np.__version__}", file=sys.stderr)
        return 2
    expected = expected_values(inp)
    try:
        observed = run_library(inp)
    except LibraryDeclined as exc:
        print(f"cannot run here: the library declined the call: {' '.join(str(exc).split())[:600]}", file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()
        print(f"DEFECT: the call raised {type(exc).__name__} on a case this spelling accepts; exit status 1")
        return 1
    defect = False
    for name, got in observed.items():
        rows = compared(name, expected[name].shape, SEQLENS_Q, SEQLENS_K)
        if name == "lse":
            bad, lines = check_lse(expected[name], got, TOLERANCE[name], rows, plus_inf_ok=LSE_PLUS_INF_OK)
        else:
            bad, lines = check_values(name, expected[name], got, TOLERANCE[name], rows)
        defect = defect or bad
        print("\n".join(lines))
    if defect:
        print("DEFECT: see the EXCEEDED / NaN lines above; exit status 1")
        return 1
    print("no defect: every compared value is within its tolerance; exit status 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
