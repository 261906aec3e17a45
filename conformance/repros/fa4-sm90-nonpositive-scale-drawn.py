#!/usr/bin/env python3
r"""Standalone repro: attention-conformance case pinned-b1h5x5-q1k1-d8-f16-bwd-c8c497 through flash-attn-4 on cuda.

The call: flash-attn-4 (flash_attn.cute) flash_attn_func(q, k, v) on [B, L, H, D].

The case: B=1, Hq=5, Hkv=5, Lq=1, Lk=1, d=8, dv=8; float16 inputs; scale=-1.0 (§2); forward and backward (§13);
inputs from seed 0 (NumPy PCG64).

Expected values: exact attention in float64, computed below (reference_attention; the § numbers cite
oracles/SEMANTICS.md of attention-conformance). Tolerance: per quantity, the largest per-element error bound the
harness computed for this case (its TOLERANCES.md), so a value beyond it fails the harness's check too.

Exit status: 1 while the defect stands (a value outside its tolerance, NaN/Inf where the expected value is finite, a
finite LSE on a row with no visible key, or the call raising), 0 once every compared value is within its tolerance,
2 when it cannot run here (needs CUDA, a missing library, inputs that differ from the harness's, the library
declining the call).

Needs numpy and torch (CUDA) and the library under test; imports nothing from attention-conformance. Written by
    python -m attention_conformance repro \
        '{"family": "pinned", "B": 1, "Hq": 5, "Hkv": 5, "Lq": 1, "Lk": 1, "d": 8, "dv": 8, "dtype": "float16", "scale": -1.0, "causal": false, "alignment": "top_left", "window": null, "mask": null, "bias": null, "softcap": null, "seqlens_q": null, "seqlens_k": null, "distribution": "normal", "layout": "contiguous", "backward": true, "fp8": null, "seed": 0, "sinks": null, "chunk": null, "kv_append": null, "lse_grad": false, "note": "", "id": "pinned-b1h5x5-q1k1-d8-f16-bwd-c8c497"}' \
        --impl flash-attn-4 --standalone --device cuda --out \
        conformance/repros/fa4-sm90-nonpositive-scale-drawn.py
(the adapter's claim on this case: checked against flash-attn-4's declared claims; the library was not asked (no
cuda device where this file was written)).
"""

import hashlib
import math
import sys
import traceback

import numpy as np

CASE_ID = "pinned-b1h5x5-q1k1-d8-f16-bwd-c8c497"
LIBRARY = "flash-attn-4 (flash_attn.cute) flash_attn_func(q, k, v) on [B, L, H, D]"
DEVICE = "cuda"
SEQLENS_Q = None  # query lengths (§7); None: every row is real
SEQLENS_K = None  # key lengths (§7); None: every key is real
# per quantity: the harness's error bound of each compared element (a quantity of more than 4096
# elements: the largest of them)
TOLERANCE = {
    "out": np.array([
        0.0003385701726688062, 0.0009935815715225171, 0.0006171836930374264, 0.001667287038839671,
        0.0019419460447256398, 0.000989267555723261, 0.0009166482897691175, 0.001967830139521176,
        0.0011711070875214252, 0.0025470214877704733, 0.00048386838055630016, 0.002377457102152314,
        0.0006979793420571964, 0.001143085854304865, 0.00042854440728257864, 0.0015784927089006473,
        0.0002980511871542024, 0.000922846289090451, 0.0020347910951823422, 0.0021239191856512463,
        0.0008006545521572761, 0.0015179919254473262, 0.0003029029178853726, 0.00164233998714991,
        0.0013448414093494288, 0.0019436637891508401, 0.0011093333271253725, 0.0009743469873140231,
        0.0033696365065196687, 0.0006293420071046968, 0.0009161879792038141, 0.00022169044099887986,
        0.00017240552603820652, 0.0003585018213617258, 0.0010827684842424495, 0.0011768944096763531,
        0.002151924034209232, 0.00112947218770202, 0.001302635149759812, 0.0017754203324736179
    ]).reshape((1, 5, 1, 8)),
    "lse": np.array([
        0.0005533670974386951, 0.0005527222824106559, 0.0005531587760003731, 0.000552293785268887,
        0.0005527926027557584
    ]).reshape((1, 5, 1)),
    "dq": np.array([
        0.008081212247554702, 0.009705158113210656, 0.00863497156572857, 0.005038647005003887,
        0.0017456456663126436, 0.0020614129179679684, 0.009350503268986942, 0.012548618881811314,
        0.014204265636702972, 0.010386743263117292, 0.0028666841296081506, 0.00954351542959435,
        9.600994707225837e-05, 0.005212390648317424, 0.010172103450947816, 0.00316181387134118,
        0.004603101280447958, 0.007411908781442608, 0.012575575096402468, 0.007050813234941918,
        0.00467274113584452, 0.012420819862187887, 0.018435639965327943, 0.005299499834413574,
        0.002368884842321293, 0.0018754470475265397, 0.011170238841837425, 0.009326700414062585,
        0.004505401960755519, 0.015522086059818928, 0.0004261876910264991, 0.004858347050087876,
        0.008760038100608877, 0.005413291345264581, 0.015851248671983134, 0.011501747199803696,
        0.005794084275708306, 0.008163462509580372, 0.000485989489043796, 0.017408268654241922
    ]).reshape((1, 5, 1, 8)),
    "dk": np.array([
        0.0008621195631588288, 0.0009025626594299541, 0.004142676872228188, 0.0007295128725006197,
        0.003473810280051884, 0.0023647361400014086, 0.00836742492885805, 0.006096389522864088,
        0.0055841774658252664, 0.009995792176665746, 0.0049517565906830605, 0.0003853904081221769,
        0.01830541919065546, 0.0017781536536058081, 0.009842478025116121, 0.005810315839360964,
        0.005812771361225269, 0.003403748215284954, 0.004409657237679732, 0.011079607832328182,
        0.00141901233648295, 0.014494540000663275, 0.007086922789591987, 0.003775160777399949,
        0.00640034015882148, 0.000720665541652708, 0.005279825166475061, 0.006530552910225651,
        0.0032735207994450065, 0.0016064549163363445, 0.007147350153719092, 0.0015293552608996643,
        0.001440351770968382, 0.004749019233268305, 0.0019205739665835242, 0.0031412268602836876,
        0.0057263877547405325, 0.0011843743010589891, 0.00685607344839025, 0.012999532726215682
    ]).reshape((1, 5, 1, 8)),
    "dv": np.array([
        0.001707596826631852, 0.0018260104371490837, 0.00021913263839531266, 0.0030438331728995793,
        0.00034328828821564294, 0.001669826968104804, 0.003035666717001839, 0.0006015524559816743,
        0.0012479284885232728, 0.0022125342379481147, 0.0022390456010401294, 0.000621342618521618,
        0.0008099811635994148, 0.0028222955890644524, 9.009568887009302e-05, 0.0022370062654176667,
        0.0029915545636749474, 0.002465040631143167, 0.005003735716683999, 0.0026283007652615487,
        0.0007707065517458395, 0.0009467213838422195, 0.0008370309812314319, 0.0008610098134300692,
        0.0007273098490318958, 0.0008098301091470847, 0.004028120253639453, 0.0002882205637276189,
        0.0017379283432821108, 0.002314551395445036, 0.0006636368088195586, 0.0002352445942709544,
        0.0018354207557741628, 0.0011277060396421117, 8.512702969181514e-05, 0.003163150669900864,
        0.0006892084489551059, 0.0002825784157308186, 0.002537016900873372, 0.0050701053084699355
    ]).reshape((1, 5, 1, 8)),
}
LSE_PLUS_INF_OK = True  # +inf passes as the LSE of a row with no visible key
# SHA-256 of the harness's inputs for this case (input_digest): make_inputs() must give exactly these
INPUTS_SHA256 = "248387e9960966e9fd87cb67f1f0ee3f1dcf52b55269838595cb7bde61ce0d46"


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
    """The inputs of the case, as attention-conformance makes them (conformance/cases/inputs.py) from seed 0:
    float64 arrays whose values are exact in float16. The digest check in main() proves they are the harness's."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 5, 1, 8))
    k = rng.standard_normal((1, 5, 1, 8))
    v = rng.standard_normal((1, 5, 1, 8))
    dout = rng.standard_normal((1, 5, 1, 8))
    q, k, v = (round_to(x, "float16") for x in (q, k, v))  # exact in float16 (SEMANTICS.md §1)
    dout = round_to(dout, "float16")
    return {"q": q, "k": k, "v": v, "dout": dout}


def expected_values(inp):
    """The expected values in float64 (SEMANTICS.md): out and lse, and the gradients of the backward."""
    return reference_attention(
        inp["q"], inp["k"], inp["v"], scale=-1.0, causal=False, alignment="top_left",
        window=None, chunk=None, softcap=None, mask=inp.get("mask"), bias=inp.get("bias"),
        seqlens_q=None, seqlens_k=None, sinks=inp.get("sinks"), dout=inp["dout"])


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
    """The call under test: flash-attn-4 (flash_attn.cute) flash_attn_func(q, k, v) on [B, L, H, D], then its backward
    through autograd. Returns float64 arrays in [B, H, L, D] order."""
    import torch
    from flash_attn.cute import flash_attn_func

    def fa(requires_grad, want_lse):
        _, q = as_tensor(inp["q"], torch.float16, DEVICE, "contiguous", requires_grad)
        _, k = as_tensor(inp["k"], torch.float16, DEVICE, "contiguous", requires_grad)
        _, v = as_tensor(inp["v"], torch.float16, DEVICE, "contiguous", requires_grad)
        sink = None
        kw = dict(softmax_scale=-1.0, causal=False, return_lse=want_lse)
        res = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw)  # [B, L, H, D]
        out, lse = (res[0], res[1] if len(res) > 1 else None) if isinstance(res, (tuple, list)) else (res, None)
        out = out.transpose(1, 2)
        return (q, k, v, sink), out, (lse if want_lse else None)

    _, out, lse = fa(False, True)
    result = {"out": out, "lse": lse}
    leaves, out, lse = fa(True, False)  # the backward: autograd through the library's
    dout = inp["dout"].copy()
    _, dout = as_tensor(dout, torch.float16, DEVICE, "contiguous")
    grads = torch.autograd.grad([out], leaves if leaves[3] is not None else leaves[:3], grad_outputs=[dout])
    result.update(dq=grads[0], dk=grads[1], dv=grads[2])
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
