"""The functions a standalone repro file carries (`conformance.reproduce.standalone` copies their source verbatim).

A standalone repro runs where only NumPy, torch and the library under test are installed, so nothing here imports
attention_conformance (tests/conformance/test_repro_standalone.py checks it): plain NumPy for the inputs, the
float64 expected values and the comparison, torch imported inside the few functions that make tensors. The rules
they implement are the harness's own, written out again because the file must stand alone; the harness's code is
the authority and the tests hold each function to it (input digests equal `conformance.cases.inputs.make_inputs`'s,
expected values equal `oracles.attention` / `oracles.attention_backward`):

- `round_to`: one round to nearest, ties to even, from float64 (SEMANTICS.md §1, §10), as the harness rounds
  (`oracles.formats.round_once`; torch's own float64 -> bfloat16 / float16 conversion, and some ml_dtypes versions'
  cast, round through float32 first and break ties otherwise);
- `input_digest`: SHA-256 over the named input arrays, which the file compares with the harness's before the call;
- `visible`, `dense_visibility`: which key each query sees (§4 causal alignment, §5 windows, §7 padding, §19 chunks,
  §6 the boolean mask), for the expected values and for the dense masks an SDPA-signature call is handed (§17);
- `reference_attention`: exact attention and its gradients in float64 (§3, §8, §12, §13, §18);
- `check_values`, `check_lse`: the comparison at the worst element, against one tolerance per quantity;
- `paged_storage`, `quantize_per_tensor`, `as_tensor`, `pack_varlen`, `unpack_varlen`, `unpack_varlen_lse`: paged
  K/V storage (§16), FP8 per-tensor codes (§10), tensors in the case's layout, packed varlen sequences.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

__all__ = [
    "LibraryDeclined",
    "as_tensor",
    "check_lse",
    "check_values",
    "compared",
    "dense_visibility",
    "input_digest",
    "pack_varlen",
    "paged_storage",
    "quantize_per_tensor",
    "reference_attention",
    "round_to",
    "unpack_varlen",
    "unpack_varlen_lse",
    "visible",
]


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


def dense_visibility(B, Lq, Lk, seqlens_q, seqlens_k, mask, *, causal, alignment, window, chunk):
    """bool [B, 1 or Hq, Lq, Lk], True = attend: `visible` per sequence, and-ed with the boolean ``mask``; padded keys
    and padded query rows (i >= seqlens_q[b]) are False (SEMANTICS.md §7, §17: how padding reaches an API with
    torch SDPA's signature, which takes no lengths)."""
    vis = np.zeros((B, 1, Lq, Lk), dtype=bool)
    for b in range(B):
        sq = Lq if seqlens_q is None else int(seqlens_q[b])
        sk = Lk if seqlens_k is None else int(seqlens_k[b])
        vis[b, 0, :sq, :sk] = visible(sq, sk, np.arange(sq), causal=causal, alignment=alignment, window=window,
                                      chunk=chunk)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        vis = vis & np.broadcast_to(m, (B, m.shape[1], Lq, Lk))
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
    finite = sel & np.isfinite(observed)
    if not finite.any():  # nothing finite to compare: the NaN/Inf line says it all
        return bool(bad.any()), lines or [f"{name}: nothing to compare"]
    tol = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), err.shape)  # one bound, or one per element
    usage = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
    i = np.unravel_index(int(np.argmax(np.where(finite, usage, -1.0))), usage.shape)  # the worst finite element
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


def _page_permutation(rng, num_pages, dense_index):
    """A seeded permutation of the pool's pages that is not the identity and leaves no real page at its dense index."""
    n_real = len(dense_index)
    perm = rng.permutation(num_pages)
    for _ in range(64):
        real = perm[:n_real]
        if n_real == 0 or not ((real == np.arange(n_real)).all() or (real == dense_index).all()):
            return perm
        perm = rng.permutation(num_pages)
    return np.roll(np.arange(num_pages), 1)


def paged_storage(seed, page_size, k, v, seqlens_k):
    """K/V stored in pages behind a block table (SEMANTICS.md §16), as attention-conformance stores them.

    k_pool [num_pages, Hkv, page_size, d], v_pool [num_pages, Hkv, page_size, dv], block_table int32 [B, pages];
    key j of batch b is pool[block_table[b, j // page_size], :, j % page_size]. The real pages sit at a seeded
    random permutation of the pool; decoy pages, the slots past each sequence's length and the table entries past its
    used pages (they name decoys) hold NaN: a kernel told the lengths must not read them.
    """
    B, Hkv, Lk, d = k.shape
    pages_per_seq = -(-Lk // page_size)
    lens = [Lk if seqlens_k is None else min(int(seqlens_k[b]), Lk) for b in range(B)]
    need = [-(-n // page_size) for n in lens]
    dense_index = np.array([b * pages_per_seq + p for b in range(B) for p in range(need[b])], dtype=np.int64)
    n_real = len(dense_index)
    num_pages = n_real + 2 + n_real // 4
    rng = np.random.default_rng([seed, 0x9A6ED])
    slot = _page_permutation(rng, num_pages, dense_index)
    decoys = slot[n_real:]
    k_pool = np.full((num_pages, Hkv, page_size, d), np.nan)
    v_pool = np.full((num_pages, Hkv, page_size, v.shape[3]), np.nan)
    table = np.empty((B, pages_per_seq), dtype=np.int32)
    i = 0
    for b in range(B):
        for p in range(need[b]):
            j0, j1 = p * page_size, min((p + 1) * page_size, lens[b])
            k_pool[slot[i], :, : j1 - j0] = k[b, :, j0:j1]
            v_pool[slot[i], :, : j1 - j0] = v[b, :, j0:j1]
            table[b, p] = slot[i]
            i += 1
        table[b, need[b]:] = rng.choice(decoys, size=pages_per_seq - need[b])
    return {"k_pool": k_pool, "v_pool": v_pool, "block_table": table}


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


def pack_varlen(x, lengths):
    """[B, H, L, D] -> [sum(lengths), H, D]: the first lengths[b] rows of each batch entry, concatenated."""
    import torch

    return torch.cat([x[b, :, : int(n)].transpose(0, 1) for b, n in enumerate(lengths)], dim=0)


def unpack_varlen(packed, lengths, L):
    """[total, H, D] -> [B, H, L, D], zeros past each sequence's length."""
    import torch

    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    outs = [torch.nn.functional.pad(packed[offsets[b]: offsets[b + 1]].transpose(0, 1), (0, 0, 0, L - int(n)))
            for b, n in enumerate(lengths)]
    return torch.stack(outs, dim=0)


def unpack_varlen_lse(lse, lengths, L):
    """A varlen LSE, [H, total] or [B, H, max_seqlen], to [B, H, L] with -inf past each sequence's length."""
    import torch

    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    heads = lse.shape[0] if lse.dim() == 2 else lse.shape[1]
    out = torch.full((len(lengths), heads, L), float("-inf"), dtype=lse.dtype, device=lse.device)
    for b, n in enumerate(lengths):
        out[b, :, : int(n)] = lse[:, offsets[b]: offsets[b + 1]] if lse.dim() == 2 else lse[b, :, : int(n)]
    return out
