#!/usr/bin/env python3
r"""Standalone repro: attention-conformance case hyp-fp8-b1h1x1-q2k1-d80-f8_e4m3fn-fp8-e4m3fn-per_tensor-e8b0e5 through
cudnn-fp8 on cuda.

The call: cuDNN's FP8 attention forward (cudnn-frontend sdpa_fp8 on torch's cuDNN): e4m3fn codes with per-tensor
descales, P scaled by 256 before its FP8 rounding, O as e4m3 codes of O x s_o, Stats as the LSE.

The case: B=1, Hq=1, Hkv=1, Lq=2, Lk=1, d=80, dv=80; FP8 e4m3fn codes with one descale per tensor (§10); scale=-1.0
(§2); inputs from seed 0 (NumPy PCG64).

Expected values: exact attention in float64, computed below (reference_attention; the § numbers cite
oracles/SEMANTICS.md of attention-conformance). Tolerance: per quantity, the largest per-element error bound the
harness computed for this case (its TOLERANCES.md), so a value beyond it fails the harness's check too.

Exit status: 1 while the defect stands (a value outside its tolerance, NaN/Inf where the expected value is finite, a
finite LSE on a row with no visible key, or the call raising), 0 once every compared value is within its tolerance,
2 when it cannot run here (needs CUDA, a missing library, inputs that differ from the harness's, the library
declining the call).

Needs numpy and torch (CUDA) and the library under test; imports nothing from attention-conformance. Written by
    python -m attention_conformance repro \
        '{"family":"hyp-fp8","B":1,"Hq":1,"Hkv":1,"Lq":2,"Lk":1,"d":80,"dv":80,"dtype":"float8_e4m3fn","scale":-1.0,"causal":false,"alignment":"bottom_right","window":null,"mask":null,"bias":null,"softcap":null,"seqlens_q":null,"seqlens_k":null,"distribution":"normal","layout":"contiguous","backward":false,"fp8":{"format":"e4m3fn","granularity":"per_tensor","tile_q":16,"tile_k":16,"incoherent":false,"hadamard_seed":0},"seed":0,"sinks":null,"chunk":null,"kv_append":null,"lse_grad":false,"note":"","id":"hyp-fp8-b1h1x1-q2k1-d80-f8_e4m3fn-fp8-e4m3fn-per_tensor-e8b0e5"}' \
        --impl cudnn-fp8 --device cuda --standalone
(the adapter's claim on this case: checked against cudnn-fp8's declared claims; cuDNN's check_support was not asked
(no cuda device where this file was written) (cuDNN's check_support runs again when the file builds the graph)).
"""

import hashlib
import math
import sys
import traceback

import numpy as np

CASE_ID = "hyp-fp8-b1h1x1-q2k1-d80-f8_e4m3fn-fp8-e4m3fn-per_tensor-e8b0e5"
LIBRARY = ("cuDNN's FP8 attention forward (cudnn-frontend sdpa_fp8 on torch's cuDNN): e4m3fn codes with "
           "per-tensor descales, P scaled by 256 before its FP8 rounding, O as e4m3 codes of O x s_o, Stats "
           "as the LSE")
DEVICE = "cuda"
SEQLENS_Q = None  # query lengths (§7); None: every row is real
SEQLENS_K = None  # key lengths (§7); None: every key is real
# per quantity: the harness's error bound of each compared element (a quantity of more than 4096
# elements: the largest of them)
TOLERANCE = {
    "out": np.array([
        1.1380960231525383, 0.2847071112568846, 0.7398478642679, 0.42693859657282685,
        1.4794515879108, 0.17092192300413078, 0.31315340832007305, 2.048377529174569,
        0.2847071112568846, 1.0243108348997845, 0.17092192300413078, 0.032246224821087015,
        0.9105256466470307, 0.796740458394277, 0.6829552701415231, 0.7398478642679,
        0.5691700818887692, 0.1424756259409423, 0.6829552701415231, 2.048377529174569,
        0.5691700818887692, 0.37004600244645, 0.9105256466470307, 0.2847071112568846,
        0.005133347932735516, 0.6260626760151461, 0.5122774877623922, 0.15669877447253652,
        1.2518812114052922, 0.6829552701415231, 2.2759479056800767, 0.8536330525206537,
        0.6829552701415231, 1.1380960231525383, 0.796740458394277, 0.018023076289492786,
        0.02869043768818846, 0.6260626760151461, 1.1380960231525383, 1.2518812114052922,
        0.37004600244645, 0.31315340832007305, 0.185145071535725, 0.45538489363601536,
        2.5035182821855844, 0.09980618034615962, 0.9105256466470307, 0.8536330525206537,
        0.5691700818887692, 0.6260626760151461, 1.0243108348997845, 1.2518812114052922,
        0.5122774877623922, 0.6260626760151461, 0.796740458394277, 0.45538489363601536,
        0.2562608141936961, 0.2562608141936961, 1.0243108348997845, 0.6829552701415231,
        1.0243108348997845, 0.5122774877623922, 0.45538489363601536, 3.186229411702108,
        0.21359136859891342, 0.021578863422391348, 0.12825247740934806, 0.5122774877623922,
        0.04646937335268125, 0.34159970538326156, 0.22781451713050768, 0.3984922995096385,
        1.0243108348997845, 0.9105256466470307, 0.8536330525206537, 0.1424756259409423,
        0.6829552701415231, 0.2562608141936961, 0.796740458394277, 0.5691700818887692,
        1.0561117603364933, 0.26421104555287334, 0.6865580934374708, 0.39619449801681,
        1.3728720462499415, 0.15862428358172403, 0.2906077360456607, 1.9008058561056884,
        0.26421104555287334, 0.9505249983653442, 0.15862428358172403, 0.029940417429385757,
        0.8449382363941947, 0.7393514744230455, 0.6337647124518961, 0.6865580934374708,
        0.5281779504807467, 0.13222759308893667, 0.6337647124518961, 1.9008058561056884,
        0.5281779504807467, 0.3434011170312354, 0.8449382363941947, 0.26421104555287334,
        0.0047810718034478235, 0.5809713314663214, 0.4753845694951721, 0.14542593833533035,
        1.1616985223076428, 0.6337647124518961, 2.1119793800479867, 0.79214485540862,
        0.6337647124518961, 1.0561117603364933, 0.7393514744230455, 0.016742072182992083,
        0.026640831117787336, 0.5809713314663214, 1.0561117603364933, 1.1616985223076428,
        0.3434011170312354, 0.2906077360456607, 0.1718226288281177, 0.42259118850959737,
        2.3231529039902856, 0.09263255734975569, 0.8449382363941947, 0.79214485540862,
        0.5281779504807467, 0.5809713314663214, 0.9505249983653442, 1.1616985223076428,
        0.4753845694951721, 0.5809713314663214, 0.7393514744230455, 0.42259118850959737,
        0.23781435506008605, 0.23781435506008605, 0.9505249983653442, 0.6337647124518961,
        0.9505249983653442, 0.4753845694951721, 0.42259118850959737, 2.956673475817182,
        0.198219319320905, 0.020041658494590504, 0.11902924784254303, 0.4753845694951721,
        0.04313876267577942, 0.31700442653844807, 0.21141766456729869, 0.36979780752402275,
        0.9505249983653442, 0.8449382363941947, 0.79214485540862, 0.13222759308893667,
        0.6337647124518961, 0.23781435506008605, 0.7393514744230455, 0.5281779504807467
    ]).reshape((1, 1, 2, 80)),
    "lse": np.array([
        0.3920398284331289, 0.359973317921594
    ]).reshape((1, 1, 2)),
}
LSE_PLUS_INF_OK = False  # +inf passes as the LSE of a row with no visible key
# SHA-256 of the harness's inputs for this case (input_digest): make_inputs() must give exactly these
INPUTS_SHA256 = "956c7b69f1294f9baf0d6d9b07e8f247533e88ece2ec6eb6759e377237d1f356"


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


def quantize_per_tensor(x, fmt):
    """(codes, descale) of ``x`` with one scale for the tensor (SEMANTICS.md §10): descale = amax / fmax (1 when
    amax = 0), codes = ``x / descale`` rounded to the FP8 format ``fmt`` ("e4m3fn" or "e5m2"), as float64."""
    fmax = 448.0 if fmt == "e4m3fn" else 57344.0
    amax = float(np.max(np.abs(x))) if x.size else 0.0
    descale = amax / fmax if amax > 0 else 1.0
    return round_to(x / descale, "float8_" + fmt), np.float64(descale)


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
    float64 arrays whose values are exact in FP8. The digest check in main() proves they are the harness's."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 2, 80))
    k = rng.standard_normal((1, 1, 1, 80))
    v = rng.standard_normal((1, 1, 1, 80))
    # FP8 (SEMANTICS.md §10): float32 values quantized with one scale per tensor; q, k, v dequantized
    q, k, v = (round_to(x, "float32") for x in (q, k, v))
    (q8, q_descale), (k8, k_descale), (v8, v_descale) = (quantize_per_tensor(x, "e4m3fn") for x in (q, k, v))
    q, k, v = q8 * q_descale, k8 * k_descale, v8 * v_descale
    return {
        "q": q,
        "k": k,
        "v": v,
        "q8": q8,
        "k8": k8,
        "v8": v8,
        "q_descale": q_descale,
        "k_descale": k_descale,
        "v_descale": v_descale,
    }


def expected_values(inp):
    """The expected values in float64 (SEMANTICS.md): out and lse."""
    return reference_attention(
        inp["q"], inp["k"], inp["v"], scale=-1.0, causal=False, alignment="bottom_right",
        window=None, chunk=None, softcap=None, mask=inp.get("mask"), bias=inp.get("bias"),
        seqlens_q=None, seqlens_k=None, sinks=inp.get("sinks"))


def cannot_run_here():
    """Why this file cannot make its call here (exit status 2), or None."""
    try:
        import torch
    except ImportError as exc:
        return f"needs torch ({exc})"
    if not torch.cuda.is_available():
        return ("needs CUDA: cuDNN's FP8 attention runs on CUDA (sm90 and newer); "
                f"torch {torch.__version__} sees no CUDA device")
    try:
        import cudnn  # noqa: F401
    except ImportError as exc:
        return f"needs nvidia-cudnn-frontend (import cudnn: {exc})"
    return None


def versions():
    """The versions this run used, for the report."""
    import cudnn
    import torch

    parts = [f"torch {torch.__version__}"]
    parts.append(f"cudnn-frontend {getattr(cudnn, '__version__', '?')}, cuDNN {torch.backends.cudnn.version()}")
    parts.append(f"{torch.cuda.get_device_name()} (sm{''.join(map(str, torch.cuda.get_device_capability()))})")
    return ", ".join(parts)


def run_library(inp):
    """The call under test: cuDNN's FP8 attention forward (cudnn-frontend sdpa_fp8 on torch's cuDNN): e4m3fn codes with
    per-tensor descales, P scaled by 256 before its FP8 rounding, O as e4m3 codes of O x s_o, Stats as the LSE.
    Returns float64 arrays."""
    import cudnn
    import torch

    torch.backends.cudnn.version()  # torch loads its cuDNN library first; the frontend then uses it
    _, q = as_tensor(inp["q8"], torch.float8_e4m3fn, DEVICE, "contiguous", False)
    _, k = as_tensor(inp["k8"], torch.float8_e4m3fn, DEVICE, "contiguous", False)
    _, v = as_tensor(inp["v8"], torch.float8_e4m3fn, DEVICE, "contiguous", False)
    descales = [float(np.float32(inp[n])) for n in ("q_descale", "k_descale", "v_descale")]
    v_max = float(np.abs(inp["v8"]).max()) * descales[2]
    s_o = float(2.0 ** np.floor(np.log2(256.0 / v_max))) if v_max > 0 else 1.0  # O as codes of O * s_o
    f32 = cudnn.data_type.FLOAT
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3, intermediate_data_type=f32, compute_data_type=f32)
    fp8 = cudnn.data_type.FP8_E4M3
    t = {n: graph.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=fp8)
         for n, x in (("q", q), ("k", k), ("v", v))}
    scalars = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    t.update({n: graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32) for n in scalars})
    o, stats, amax_s, amax_o = graph.sdpa_fp8(
        *(t[n] for n in ("q", "k", "v", *scalars)), generate_stats=True, attn_scale=-1.0,
        use_causal_mask=False, use_causal_mask_bottom_right=False, name="sdpa_fp8")
    o.set_output(True).set_dim([1, 1, 2, 80]).set_stride([160, 160, 80, 1])
    o.set_data_type(cudnn.data_type.FP8_E4M3)
    stats.set_output(True).set_data_type(f32)
    for a in (amax_s, amax_o):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
    try:  # cuDNN's own refusal of the graph: it computed nothing
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()
    except Exception as exc:
        raise LibraryDeclined(f"cuDNN declines sdpa_fp8: {exc}") from None

    def scalar(x):
        return torch.full((1, 1, 1, 1), float(x), dtype=torch.float32, device=DEVICE)

    out = torch.empty((1, 1, 2, 80), dtype=torch.float8_e4m3fn, device=DEVICE)
    lse = torch.empty((1, 1, 2, 1), dtype=torch.float32, device=DEVICE)
    nan = float("nan")
    data = {t["q"]: q, t["k"]: k, t["v"]: v, o: out, stats: lse, amax_s: scalar(nan), amax_o: scalar(nan)}
    values = [*descales, 1.0 / 256.0, 256.0, s_o]  # descale_s, scale_s: P's max offset; scale_o
    data.update({t[n]: scalar(x) for n, x in zip(scalars, values)})
    workspace = torch.empty(max(graph.get_workspace_size(), 1), dtype=torch.uint8, device=DEVICE)
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    graph.execute(data, workspace, handle=handle)
    torch.cuda.synchronize()
    return {"out": out.to(torch.float64).cpu().numpy() / s_o, "lse": lse[..., 0].to(torch.float64).cpu().numpy()}


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
