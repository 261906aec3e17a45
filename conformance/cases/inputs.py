"""Input recipes: turn a `Case` into FP64 arrays, deterministically from ``case.seed``.

Every value is rounded to ``case.dtype`` first (SEMANTICS.md §1: the oracle is evaluated on the
*same, already rounded* values the kernel sees), then widened to float64. The recipes:

Distributions (``case.distribution``, see `conformance.cases.case.DISTRIBUTIONS`):

- ``normal``: q, k, v, dout ~ N(0, 1).
- ``outliers``: N(0, 1) plus, on 0.1% of the entries, an extra N(0, 10^2) (FA3 paper, Table 3).
- ``large_logits``: q, k ~ N(0, c^2) with ``scale * c^2`` about 1600, so |s| reaches ~1e4 and the
  unscaled q.k^T passes the fp16 range (65504) for d >= 64 (torch #160841, #119131).
- ``ties``: keys repeat (two distinct key rows per head, alternating) so scores tie exactly; every
  fourth query row is zero, giving a constant score row (P uniform).
- ``tiny_lse``: q ~ c*1 + N(0, 1/4), k ~ -sign(scale)*c*1 + N(0, 1/4) with c chosen so every score
  is about -200: LSE is far below -88.7 (exp underflows in fp32; torch #196678).
- ``activations``: what LLM activations look like to an attention kernel rather than Gaussian noise (bugs that
  only real activations show: TransformerEngine #3216). N(0, 1), then two outlier channels (`outlier_channels`:
  0 and d // 3; "massive activations") at 8 |x| in every query and 2 x in the keys; key 0 an attention sink whose
  logit is about +10 for every query, with a value row scaled by 0.05 (sink tokens carry little value); the last key
  an attractor at about +13, so the row maximum jumps in the last key tile, often a tail tile (the online softmax's
  rescale, the tail's masking). The logit targets follow the case's scale (its sign included).
- ``uniform``: q, k ~ U(-sqrt 3, sqrt 3) (unit variance), v ~ U(0, 1): a positive V makes
  accumulators grow linearly, which exposes low-precision accumulation (stagnation).
- ``nan_padding``: ``normal`` values, then every padded row of a varlen case is NaN: q and dout rows
  ``i >= seqlens_q[b]``, k and v rows ``j >= seqlens_k[b]`` (SEMANTICS.md §7: padded rows are never
  read; §15: non-finite padding is not an input error). A kernel that reads padded K/V (``P = 0``
  times ``V = NaN`` is NaN; torch #101967) or padded Q / dout (NaN dQ, dK; flash-attention #443,
  #752) gets NaN in the compared rows. Without seqlens nothing is padded and nothing is NaN; with
  ``kv_broadcast`` only keys padded in every sequence are NaN; FP8 cases get no NaN (`poison_padding`).
- ``worked:<name>``: the explicit tiny inputs of the seed documents' worked examples (`WORKED`).

Masks (``case.mask``): ``random`` [B, 1, Lq, Lk] with ~30% masked and at least one visible key per
row; ``random_heads`` the same per head [B, Hq, Lq, Lk]; ``full_rows`` like ``random`` but rows 0,
Lq // 2 and Lq - 1 fully masked (SEMANTICS.md §8); ``key_padding`` [B, 1, 1, Lk] masking the last
third of the keys of odd batches; ``none_visible`` every entry False.

Biases (``case.bias``): ``random`` N(0, 1) [B, Hq, Lq, Lk]; ``alibi`` -slope_h * |i + Lk - Lq - j|
[1, Hq, Lq, Lk]; ``neg_inf_rows`` random with rows 1 and Lq - 2 set to -inf (masking through bias,
§6). Biases are rounded to the case dtype (torch requires a float mask of the query dtype).

FP8 cases (``case.fp8``): q, k, v are made in float32 from the distribution, quantized by
`oracles.fp8.quantize_attention_inputs`, and `CaseInputs.q/k/v` are its dequantized values.

Paged layouts (``case.layout`` in `conformance.cases.case.PAGED_LAYOUTS`, SEMANTICS.md §16): q, k, v are made
exactly as for ``contiguous`` (same values, so the oracle sees the dense logical K/V), and
`paged_storage` also stores K and V in pages behind a block table (`CaseInputs.paged`), from a random
stream of its own: a seeded page permutation (never the identity), extra decoy pages, and NaN in every
page, slot or table entry a correct kernel does not read (flash-attention #2709).

Sinks (``case.sinks``, SEMANTICS.md §18; `make_sinks`): one logit per query head, rounded to the case dtype:
``small`` N(0, 1); ``large`` head 0 at 1e4 and the others in [8, 40]; ``very_negative`` head 0 at -1e4 and the
others in [-90, -60]. An ``lse_grad`` backward case also gets ``dlse`` ~ N(0, 1) [B, Hq, Lq]. Both come from
random streams of their own, so the q, k, v, dout of a case do not depend on them.

KV-cache append (``case.kv_append`` = cache_seqlens, §20; `kv_append_storage`): q, k, v are made as for any
case with Lk = the cache capacity; the cache handed to the kernel keeps slots ``j < cache_seqlens[b]`` and
holds NaN in every other slot (where the new rows go and past them); the new rows ``k_new``, ``v_new`` are
the dense rows ``cache_seqlens[b] .. cache_seqlens[b] + Lq - 1``. The oracle's k, v are the appended caches:
NaN past ``cache_seqlens[b] + Lq``, so a kernel that reads past the new length fails (flash-attention #1417).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attention_conformance.cases.calldata import CaseInputs
from attention_conformance.cases.case import Case, page_size_of
from attention_conformance.oracles.formats import GRID, round_once

__all__ = ["make_inputs", "round_to_dtype", "WORKED", "MASKS", "BIASES", "effective_scale",
           "outlier_channels",
           "poison_padding", "paged_storage", "PlantedNaN", "planted_nan", "make_sinks", "kv_append_storage"]

MASKS = ("random", "random_heads", "full_rows", "key_padding", "none_visible")
BIASES = ("random", "alibi", "neg_inf_rows")


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round ``x`` to ``dtype`` once (round to nearest, ties to even, from float64) and return float64; FP8 saturates at
    +-max (SEMANTICS.md §1, §10): `oracles.formats.round_once`, on the format's grid, so that the inputs, and a
    standalone repro's digest of them, are the same whatever ml_dtypes the machine has."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "float64":
        return x.copy()
    if dtype not in GRID:
        raise ValueError(f"dtype={dtype!r} is not a case dtype (float64, float32, float16, bfloat16, float8_e4m3fn, "
                         "float8_e5m2)")
    return round_once(x, dtype, saturate=dtype.startswith("float8"))


def effective_scale(case: Case) -> float:
    return case.scale if case.scale is not None else 1.0 / math.sqrt(case.d)


# -- worked examples of the seed documents -------------------------------------------------------
# d = 1, q = 1 and scale = 1 make the scores equal to the key values, so a worked example given as
# scores and values maps directly onto q, k, v.

def _worked(scores, values, dout=None) -> dict[str, np.ndarray]:
    Lk = len(scores)
    out = {
        "q": np.ones((1, 1, 1, 1)),
        "k": np.asarray(scores, dtype=np.float64).reshape(1, 1, Lk, 1),
        "v": np.asarray(values, dtype=np.float64).reshape(1, 1, Lk, 1),
    }
    if dout is not None:
        out["dout"] = np.full((1, 1, 1, 1), float(dout))
    return out


WORKED: dict[str, Callable[[], dict[str, np.ndarray]]] = {
    # [FA-anim] "Online softmax · 数字跟着走": blocks [1, 2] / [3, 0], values [2, 8] / [4, 10]; O ~ 4.966
    "online_softmax": lambda: _worked([1.0, 2.0, 3.0, 0.0], [2.0, 8.0, 4.0, 10.0], dout=1.0),
    # [FA-anim] exercise 1: block A s=0, v=10; block B s=ln 3, v=2; O = 4 (the wrong average is 6)
    "exercise1": lambda: _worked([0.0, math.log(3.0)], [10.0, 2.0], dout=1.0),
    # [FA-anim] "演算 · 一个 query，两个 key": q=1, k=[0, ln 3], v=[2, 6], dO=2; P=[1/4, 3/4], O=5
    "one_query_two_keys": lambda: _worked([0.0, math.log(3.0)], [2.0, 6.0], dout=2.0),
    # [FA2-ch] split-K example: scores [1, 2, 4, 0], values [2, 5, 1, 9]; O ~ 1.612955
    "split_k": lambda: _worked([1.0, 2.0, 4.0, 0.0], [2.0, 5.0, 1.0, 9.0], dout=1.0),
}


# -- distributions -------------------------------------------------------------------------------

def _normal(rng, shape):
    return rng.standard_normal(shape)


def _with_outliers(rng, shape):
    x = rng.standard_normal(shape)
    hit = rng.random(shape) < 1e-3
    return x + hit * rng.normal(0.0, 10.0, shape)


def outlier_channels(d: int) -> list[int]:
    """The channels the ``activations`` recipe makes outliers: the first, and the one a third of the way in."""
    return sorted({0, d // 3})


def _activations(case: Case, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """The ``activations`` recipe on N(0, 1) draws, in place (see the module docstring)."""
    ch = outlier_channels(case.d)
    # a key holding u in each outlier channel adds about scale * u * E[8 |x|] * len(ch) to every query's logit
    unit = 1.0 / (effective_scale(case) * 8.0 * math.sqrt(2.0 / math.pi) * len(ch))
    q[..., ch] = 8.0 * np.abs(q[..., ch])
    k[..., ch] = 2.0 * k[..., ch]
    k[:, :, 0, ch] = 10.0 * unit
    k[:, :, -1, ch] = 13.0 * unit
    v[:, :, 0, :] = 0.05 * v[:, :, 0, :]


def _make_qkv(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    qs = (case.B, case.Hq, case.Lq, case.d)
    kvb = 1 if case.layout == "kv_broadcast" else case.B
    ks = (kvb, case.Hkv, case.Lk, case.d)
    vs = (kvb, case.Hkv, case.Lk, case.dv)
    dist = case.distribution
    if dist.startswith("worked:"):
        name = dist.split(":", 1)[1]
        if name not in WORKED:
            raise ValueError(f"unknown worked example {name!r}; known: {sorted(WORKED)}")
        arrays = WORKED[name]()
        shape_ok = arrays["q"].shape == qs and arrays["k"].shape == ks and arrays["v"].shape == vs
        if not shape_ok:
            raise ValueError(
                f"worked example {name!r} has q{arrays['q'].shape} k{arrays['k'].shape} v{arrays['v'].shape}; "
                f"case {case.id} expects q{qs} k{ks} v{vs}"
            )
        return arrays
    if dist == "normal":
        q, k, v = _normal(rng, qs), _normal(rng, ks), _normal(rng, vs)
    elif dist == "outliers":
        q, k, v = _with_outliers(rng, qs), _with_outliers(rng, ks), _with_outliers(rng, vs)
    elif dist == "large_logits":
        c = math.sqrt(1600.0 / abs(effective_scale(case)) / math.sqrt(case.d))
        q, k, v = c * _normal(rng, qs), c * _normal(rng, ks), _normal(rng, vs)
    elif dist == "ties":
        q = _normal(rng, qs)
        q[:, :, ::4, :] = 0.0
        distinct = _normal(rng, (kvb, case.Hkv, 2, case.d))
        k = distinct[:, :, np.arange(case.Lk) % 2, :]
        v = _normal(rng, vs)
    elif dist == "tiny_lse":
        sc = effective_scale(case)
        c = math.sqrt(200.0 / max(abs(sc), 1e-30) / case.d)
        sign = 1.0 if sc >= 0 else -1.0
        q = c + 0.25 * _normal(rng, qs)
        k = -sign * c + 0.25 * _normal(rng, ks)
        v = _normal(rng, vs)
    elif dist == "nan_padding":  # the NaNs go in after rounding, in `poison_padding`
        q, k, v = _normal(rng, qs), _normal(rng, ks), _normal(rng, vs)
    elif dist == "activations":
        q, k, v = _normal(rng, qs), _normal(rng, ks), _normal(rng, vs)
        _activations(case, q, k, v)
    elif dist == "uniform":
        r3 = math.sqrt(3.0)
        q, k = rng.uniform(-r3, r3, qs), rng.uniform(-r3, r3, ks)
        v = rng.uniform(0.0, 1.0, vs)
    else:
        raise ValueError(f"unknown distribution {dist!r} in case {case.id}")
    return {"q": q, "k": k, "v": v}


# -- masks and biases ----------------------------------------------------------------------------

def _random_mask(rng, shape) -> np.ndarray:
    m = rng.random(shape) >= 0.3
    if shape[-1] > 0:
        # at least one visible key per row, so only the recipes that ask for empty rows get them
        first = rng.integers(0, shape[-1], size=shape[:-1])
        np.put_along_axis(m, first[..., None], True, axis=-1)
    return m


def make_mask(case: Case, rng: np.random.Generator) -> np.ndarray | None:
    name = case.mask
    B, Hq, Lq, Lk = case.B, case.Hq, case.Lq, case.Lk
    if name is None:
        return None
    if name == "random":
        return _random_mask(rng, (B, 1, Lq, Lk))
    if name == "random_heads":
        return _random_mask(rng, (B, Hq, Lq, Lk))
    if name == "full_rows":
        m = _random_mask(rng, (B, 1, Lq, Lk))
        for i in sorted({0, Lq // 2, Lq - 1}):
            m[:, :, i, :] = False
        return m
    if name == "key_padding":
        m = np.ones((B, 1, 1, Lk), dtype=bool)
        m[1::2, :, :, Lk - Lk // 3:] = False
        return m
    if name == "none_visible":
        return np.zeros((B, 1, Lq, Lk), dtype=bool)
    raise ValueError(f"unknown mask recipe {name!r} in case {case.id}; known: {MASKS}")


def make_bias(case: Case, rng: np.random.Generator) -> np.ndarray | None:
    name = case.bias
    B, Hq, Lq, Lk = case.B, case.Hq, case.Lq, case.Lk
    if name is None:
        return None
    if name == "random":
        bias = rng.standard_normal((B, Hq, Lq, Lk))
    elif name == "alibi":
        slopes = 2.0 ** (-8.0 * (np.arange(Hq) + 1) / Hq)
        i = np.arange(Lq)[:, None] + (Lk - Lq)
        j = np.arange(Lk)[None, :]
        bias = -slopes[None, :, None, None] * np.abs(i - j)[None, None]
    elif name == "neg_inf_rows":
        bias = rng.standard_normal((B, Hq, Lq, Lk))
        for i in sorted({min(1, Lq - 1), max(Lq - 2, 0)}):
            bias[:, :, i, :] = -np.inf
    else:
        raise ValueError(f"unknown bias recipe {name!r} in case {case.id}; known: {BIASES}")
    dtype = "bfloat16" if case.fp8 is not None else case.dtype
    finite = np.isfinite(bias)
    out = np.where(finite, round_to_dtype(np.where(finite, bias, 0.0), dtype), bias)
    return out


# -- padding guard values ------------------------------------------------------------------------

def poison_padding(case: Case, q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray | None):
    """Copies of q, k, v, dout with NaN in the padded rows (SEMANTICS.md §7), for ``nan_padding``.

    Rows ``i >= seqlens_q[b]`` of q and dout and rows ``j >= seqlens_k[b]`` of k and v become NaN; the
    real rows are unchanged. A case without seqlens has no padding and comes back unchanged. With the
    ``kv_broadcast`` layout (one K/V shared by the batch) only the key rows padded in *every* sequence,
    ``j >= max_b seqlens_k[b]``, become NaN, so K and V stay identical across the batch. FP8 cases come
    back unchanged: the kernel reads the quantized codes (``CaseInputs.fp8``), made before this step.
    """
    if case.fp8 is not None or not case.varlen:
        return q, k, v, dout
    q, k, v = (np.array(x, dtype=np.float64) for x in (q, k, v))
    dout = None if dout is None else np.array(dout, dtype=np.float64)
    shared_k = None
    if case.seqlens_k is not None and case.layout == "kv_broadcast":
        shared_k = max(int(n) for n in case.seqlens_k) if case.B else 0
    for b in range(case.B):
        if case.seqlens_q is not None:
            q[b, :, int(case.seqlens_q[b]):, :] = np.nan
            if dout is not None:
                dout[b, :, int(case.seqlens_q[b]):, :] = np.nan
        if case.seqlens_k is not None:
            sk = int(case.seqlens_k[b]) if shared_k is None else shared_k
            k[b, :, sk:, :] = np.nan
            v[b, :, sk:, :] = np.nan
    return q, k, v, dout


def _rows(lo: int, hi: int) -> str:
    return f"row {lo}" if hi == lo + 1 else f"rows {lo}..{hi - 1}"


@dataclass(frozen=True)
class PlantedNaN:
    """Where a case's inputs hold NaN on purpose (SEMANTICS.md §7, §16, §17), for failure messages.

    ``kind``: ``"padding"`` (the ``nan_padding`` recipe: padded rows of q, k, v, dout), ``"paged"``
    (decoy pages, tail slots and unused block-table entries of a paged K/V cache) or ``"kv_append"`` (cache
    slots past cache_seqlens + Lq, SEMANTICS.md §20); ``kv_batches`` /
    ``q_batches``: the batch entries with planted NaN in K/V (or their pages) / in q and dout rows;
    ``where``: one sentence per batch entry, e.g. ``{1: "K/V rows 40..63 of batch 1 are padding and
    hold NaN"}``.
    """

    kind: str
    kv_batches: frozenset[int]
    q_batches: frozenset[int]
    where: dict[int, str]

    def reachable(self, quantity: str) -> frozenset[int]:
        """Batch entries of `quantity` that planted NaN can reach: out, lse and dq rows read K/V only (their
        own q rows are real); dk and dv sum over every query row, padded ones included (SEMANTICS.md §13)."""
        if quantity in ("dk", "dv"):
            return self.kv_batches | self.q_batches
        return self.kv_batches

    def describe(self, batches) -> str:
        """The sentences of `batches` (those with planted NaN), joined; every batch when none is listed."""
        chosen = [b for b in sorted(set(batches)) if b in self.where] or sorted(self.where)
        return "; ".join(self.where[b] for b in chosen)


def planted_nan(case: Case) -> PlantedNaN | None:
    """Where `make_inputs` plants NaN for `case` (`poison_padding`, `paged_storage`, `kv_append_storage`), or None
    when it plants none."""
    B, Lq, Lk = case.B, case.Lq, case.Lk
    where: dict[int, list[str]] = {}
    kv: set[int] = set()
    qb: set[int] = set()
    kind = None
    if case.distribution == "nan_padding" and case.varlen and case.fp8 is None:
        kind = "padding"
        shared_k = None
        if case.seqlens_k is not None and case.layout == "kv_broadcast":
            shared_k = max(int(n) for n in case.seqlens_k) if B else 0
        for b in range(B):
            parts = []
            if case.seqlens_q is not None and int(case.seqlens_q[b]) < Lq:
                parts.append(f"q{'/dout' if case.backward else ''} {_rows(int(case.seqlens_q[b]), Lq)}")
                qb.add(b)
            if case.seqlens_k is not None:
                sk = int(case.seqlens_k[b]) if shared_k is None else shared_k
                if sk < Lk:
                    parts.append(f"K/V {_rows(sk, Lk)}")
                    kv.add(b)
            if parts:
                where[b] = [" and ".join(parts) + f" of batch {b} are padding and hold NaN (SEMANTICS.md §7)"]
    page_size = page_size_of(case.layout)
    if page_size is not None:
        kind = "paged"
        pages = -(-Lk // page_size)
        for b in range(B):
            n = Lk if case.seqlens_k is None else min(int(case.seqlens_k[b]), Lk)
            used = -(-n // page_size)
            parts = ["the pool's decoy pages"]
            if n % page_size:
                slots = _rows(n % page_size, page_size).replace("row", "slot")
                parts.append(f"{slots} of batch {b}'s last page (keys >= {n})")
            if used < pages:
                parts.append(f"the pages block_table[{b}, {used}:] names")
            where.setdefault(b, []).append(", ".join(parts) + f" hold NaN; batch {b} must not read them "
                                           "(SEMANTICS.md §16)")
            kv.add(b)
    if case.kv_append is not None:
        kind = "kv_append"
        for b, c in enumerate(int(n) for n in case.kv_append):
            if c + Lq < Lk:
                where.setdefault(b, []).append(
                    f"cache slots {c + Lq}..{Lk - 1} of batch {b} (past cache_seqlens[{b}] + {Lq} new rows) hold NaN "
                    "(SEMANTICS.md §20)")
                kv.add(b)
    if kind is None or not where:
        return None
    return PlantedNaN(kind, frozenset(kv), frozenset(qb), {b: "; ".join(w) for b, w in where.items()})


# -- paged K/V storage -------------------------------------------------------------------------------

_PAGED_STREAM = 0x9A6ED  # second seed word of the paging generator: paging never shifts the main stream


def _page_permutation(rng: np.random.Generator, num_pages: int, dense_index: np.ndarray) -> np.ndarray:
    """A random permutation of the pool slots that is not the identity and does not place the real pages
    (enumerated batch-major) at their dense index ``b * pages_per_seq + p`` either (SEMANTICS.md §16)."""
    n_real = len(dense_index)
    perm = rng.permutation(num_pages)
    for _ in range(64):
        real = perm[:n_real]
        if n_real == 0 or not ((real == np.arange(n_real)).all() or (real == dense_index).all()):
            return perm
        perm = rng.permutation(num_pages)
    return np.roll(np.arange(num_pages), 1)  # num_pages >= n_real + 2, so this moves every page


def paged_storage(case: Case, k: np.ndarray, v: np.ndarray) -> dict:
    """K/V of a paged case stored in pages behind a block table (SEMANTICS.md §16), for `CaseInputs.paged`.

    Returns ``dict(k_pool, v_pool, block_table, page_size)``: ``k_pool`` [num_pages, Hkv, page_size, d] and
    ``v_pool`` [num_pages, Hkv, page_size, dv] float64, ``block_table`` int32 [B, ceil(Lk / page_size)];
    key j < seqlens_k[b] of batch b is ``pool[block_table[b, j // page_size], :, j % page_size]`` and equals
    ``k[b, :, j]`` / ``v[b, :, j]``. Batch b owns ceil(seqlens_k[b] / page_size) real pages; their pool
    slots are a seeded random permutation (never the identity), and the pool holds decoy pages too.
    NaN (like ``nan_padding``): every decoy page, every slot of a real page at or past the sequence's
    length (j >= seqlens_k[b], or j >= Lk), and every table entry past the real pages points at a decoy.
    Deterministic in ``case.seed``, from a generator of its own (the dense inputs are not changed).
    """
    page_size = page_size_of(case.layout)
    if page_size is None:
        raise ValueError(f"case {case.id}: layout {case.layout!r} is not paged")
    if case.fp8 is not None:
        raise ValueError(f"case {case.id}: paged layouts are not combined with FP8 (the codes would need pages)")
    B, Hkv, Lk, d = k.shape
    dv = v.shape[3]
    pages_per_seq = -(-Lk // page_size)
    lens = [Lk if case.seqlens_k is None else min(int(case.seqlens_k[b]), Lk) for b in range(B)]
    need = [-(-n // page_size) for n in lens]  # pages holding real keys, per sequence
    dense_index = np.array([b * pages_per_seq + p for b in range(B) for p in range(need[b])], dtype=np.int64)
    n_real = len(dense_index)
    num_pages = n_real + 2 + n_real // 4
    rng = np.random.default_rng([case.seed, _PAGED_STREAM])
    slot = _page_permutation(rng, num_pages, dense_index)
    decoys = slot[n_real:]
    k_pool = np.full((num_pages, Hkv, page_size, d), np.nan)
    v_pool = np.full((num_pages, Hkv, page_size, dv), np.nan)
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
    return dict(k_pool=k_pool, v_pool=v_pool, block_table=table, page_size=page_size)


# -- sinks, LSE cotangent, KV append ----------------------------------------------------------------

_SINK_STREAM = 0x5157  # second seed words of the sink / dlse generators: they never shift the main stream
_DLSE_STREAM = 0xD15E


def make_sinks(case: Case) -> np.ndarray | None:
    """The sink logits [Hq] of ``case.sinks`` (SEMANTICS.md §18), rounded to the case dtype (bf16 for FP8)."""
    if case.sinks is None:
        return None
    rng = np.random.default_rng([case.seed, _SINK_STREAM])
    H = case.Hq
    if case.sinks == "small":
        s = rng.standard_normal(H)
    elif case.sinks == "large":
        s = rng.uniform(8.0, 40.0, H)
        s[:1] = 1e4
    elif case.sinks == "very_negative":
        s = rng.uniform(-90.0, -60.0, H)
        s[:1] = -1e4
    else:
        raise ValueError(f"unknown sink recipe {case.sinks!r} in case {case.id}")
    return round_to_dtype(s, "bfloat16" if case.fp8 is not None else case.dtype)


def make_dlse(case: Case) -> np.ndarray | None:
    """The LSE cotangent [B, Hq, Lq] of an ``lse_grad`` backward case, N(0, 1) rounded to the case dtype."""
    if not (case.backward and case.lse_grad):
        return None
    rng = np.random.default_rng([case.seed, _DLSE_STREAM])
    return round_to_dtype(rng.standard_normal((case.B, case.Hq, case.Lq)), case.dtype)


def kv_append_storage(case: Case, k: np.ndarray, v: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """(``CaseInputs.kv_append``, appended k, appended v) for a KV-append case (SEMANTICS.md §20).

    ``k``, ``v`` are the dense rows [B, Hkv, Lk, D]. The cache keeps rows ``j < cache_seqlens[b]`` and is NaN
    elsewhere; the new rows are rows ``cache_seqlens[b] .. + Lq - 1``; the appended k, v (what the oracle sees)
    equal the dense rows below ``cache_seqlens[b] + Lq`` and are NaN past it.
    """
    lens = np.asarray(case.kv_append, dtype=np.int32)
    Ln = case.Lq
    k_cache = np.full(k.shape, np.nan)
    v_cache = np.full(v.shape, np.nan)
    k_new = np.empty(k.shape[:2] + (Ln, k.shape[3]))
    v_new = np.empty(v.shape[:2] + (Ln, v.shape[3]))
    k_app, v_app = np.full(k.shape, np.nan), np.full(v.shape, np.nan)
    for b, c in enumerate(int(x) for x in lens):
        k_cache[b, :, :c] = k[b, :, :c]
        v_cache[b, :, :c] = v[b, :, :c]
        k_new[b] = k[b, :, c:c + Ln]
        v_new[b] = v[b, :, c:c + Ln]
        k_app[b, :, :c + Ln] = k[b, :, :c + Ln]
        v_app[b, :, :c + Ln] = v[b, :, :c + Ln]
    store = dict(k_cache=k_cache, v_cache=v_cache, k_new=k_new, v_new=v_new, cache_seqlens=lens)
    return store, k_app, v_app


# -- entry point -----------------------------------------------------------------------------------

def make_inputs(case: Case) -> CaseInputs:
    """FP64 inputs for `case`, exactly representable in ``case.dtype`` (SEMANTICS.md §1).

    Deterministic: the same case always gives the same arrays (NumPy PCG64 seeded by ``case.seed``).
    Paged layouts also get `CaseInputs.paged` (`paged_storage`, SEMANTICS.md §16); sink, ``lse_grad`` and
    KV-append cases `CaseInputs.sinks`, ``dlse``, ``kv_append`` (§18, §20).
    """
    rng = np.random.default_rng(case.seed)
    raw = _make_qkv(case, rng)
    if case.layout == "kv_broadcast" and raw["k"].shape[0] == 1 and case.B != 1:
        raw["k"] = np.broadcast_to(raw["k"], (case.B,) + raw["k"].shape[1:])
        raw["v"] = np.broadcast_to(raw["v"], (case.B,) + raw["v"].shape[1:])
    dout = raw.get("dout")
    if case.backward and dout is None:
        dout = rng.standard_normal((case.B, case.Hq, case.Lq, case.dv))
    mask = make_mask(case, rng)
    bias = make_bias(case, rng)
    fp8 = None
    if case.fp8 is not None:
        from attention_conformance.oracles import fp8 as fp8mod

        spec = case.fp8
        q32, k32, v32 = (round_to_dtype(raw[n], "float32") for n in ("q", "k", "v"))
        fp8 = fp8mod.quantize_attention_inputs(q32, np.ascontiguousarray(k32), np.ascontiguousarray(v32),
                                               **spec.quantize_kwargs())
        q, k, v = (np.ascontiguousarray(fp8[n], dtype=np.float64) for n in ("q", "k", "v"))
        dout_r = None if dout is None else round_to_dtype(dout, "bfloat16")
    else:
        q, k, v = (round_to_dtype(raw[n], case.dtype) for n in ("q", "k", "v"))
        dout_r = None if dout is None else round_to_dtype(dout, case.dtype)
    for name, arr in (("q", q), ("k", k), ("v", v)):
        if not np.isfinite(arr).all():
            raise ValueError(f"recipe {case.distribution!r} overflowed {case.dtype} in {name} for case {case.id}")
    if case.distribution == "nan_padding":
        q, k, v, dout_r = poison_padding(case, q, k, v, dout_r)
    kv_store = None
    if case.kv_append is not None:
        kv_store, k, v = kv_append_storage(case, k, v)
    paged = paged_storage(case, k, v) if page_size_of(case.layout) is not None else None
    return CaseInputs(q=q, k=k, v=v, dout=dout_r, mask=mask, bias=bias, fp8=fp8, paged=paged,
                      sinks=make_sinks(case), dlse=make_dlse(case), kv_append=kv_store)
