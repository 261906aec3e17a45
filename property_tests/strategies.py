"""Hypothesis strategies for attention problems (oracles/SEMANTICS.md §1-§11).

Two levels, both public and usable from other projects::

    from attention_conformance.property_tests.strategies import attention_cases, attention_arrays

- `attention_cases` draws `conformance.cases.case.Case` objects (what to compute plus the input recipe:
  distribution, layout, seed). `conformance.cases.inputs.make_inputs(case)` turns one into arrays. Pass an
  adapter's `Capabilities` to draw only cases it claims: the strategy is built from the declaration (its dtypes,
  head dims up to 256 and its backward head dims, FP8 granularities, formats and tile shapes, sequence-length
  multiple and maximum, features, layouts), so a draw outside it is not made at all; only an `Exclusion` (a
  combination declined although each part is claimed) is filtered out after drawing.
- `attention_arrays` draws FP64 arrays (q, k, v, optional mask / bias arrays) plus the keyword
  arguments of `oracles.attention`, for properties of the oracle itself.

The lower-level strategies (`lengths`, `head_counts`, `head_dims`, `scales`, `softcaps`, `windows`,
`fp8_specs`, `varlen_seqlens`, `bool_masks`, ...) are the building blocks. Every draw is bounded by an
*element budget*: ``B * Hq * Lq * Lk * (d + dv)`` (the multiply-adds of one forward) stays below
``max_work``, so each example runs in milliseconds on a CPU. Shrinking goes towards the simplest
problem: B = H = 1, short sequences, d = dv, default scale, no mask, N(0, 1) values, seed 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from attention_conformance.adapters.base import Capabilities, capability_reason
from attention_conformance.cases.case import (
    ALIGNMENTS,
    DISTRIBUTIONS,
    LAYOUTS,
    PAGED_LAYOUTS,
    SINK_RECIPES,
    Case,
    FP8Spec,
)
from attention_conformance.cases.inputs import BIASES, MASKS, outlier_channels

__all__ = [
    "DEFAULT_MAX_WORK",
    "DEFAULT_TILE_SIZES",
    "DEFAULT_MAX_HEAD_DIM",
    "SMALL_HEAD_DIMS",
    "LARGE_HEAD_DIMS",
    "UndeclaredDraw",
    "declared_head_dims",
    "declared_or_reject",
    "MASK_RECIPES",
    "BIAS_RECIPES",
    "FP8_GRANULARITIES",
    "FP8_FORMATS",
    "special_lengths",
    "lengths",
    "head_counts",
    "head_dims",
    "float_dtypes",
    "scales",
    "softcaps",
    "alignments",
    "windows",
    "distributions",
    "layouts",
    "fp8_specs",
    "varlen_seqlens",
    "bool_masks",
    "value_arrays",
    "attention_shapes",
    "attention_cases",
    "edge_cases",
    "edge_kinds",
    "EDGE_KINDS",
    "attention_arrays",
    "sample_values",
    "sink_logits",
    "chunk_sizes",
    "cache_lengths",
]

#: forward multiply-adds ``B * Hq * Lq * Lk * (d + dv)`` allowed per example
DEFAULT_MAX_WORK = 1 << 19
#: tile sizes whose edges (tile - 1, tile, tile + 1) the length strategy favours
DEFAULT_TILE_SIZES = (16, 32, 64, 128)
#: mask recipe names of `conformance.cases.inputs.MASKS` (SEMANTICS.md §6); "full_rows" forces fully masked rows
MASK_RECIPES = tuple(MASKS)
#: bias recipe names of `conformance.cases.inputs.BIASES` (SEMANTICS.md §6); "neg_inf_rows" masks rows through -inf
BIAS_RECIPES = tuple(BIASES)
FP8_GRANULARITIES = ("per_tensor", "per_head", "per_tile")
FP8_FORMATS = ("e4m3fn", "e5m2")
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 37, 61, 67, 97, 127, 131, 193, 251, 257)
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: head dims drawn in half the draws, in shrinking order: small sizes, powers of two, sizes kernels special-case
SMALL_HEAD_DIMS = (8, 16, 4, 1, 2, 32, 24, 40, 64, 80, 96, 192)
#: the large head dims kernels are built for, drawn in a quarter of the draws
LARGE_HEAD_DIMS = (128, 256)
#: the largest head dim drawn where the declaration names none
DEFAULT_MAX_HEAD_DIM = 256
#: FP8 per-tile descale sizes drawn where the declaration names no tile shape
_FP8_TILE_SIZES = (16, 8, 32, 64, 128)
#: the smallest FP8 head dim drawn (the FP8 paths quantize in blocks of 8 elements and wider)
_FP8_MIN_HEAD_DIM = 8


class UndeclaredDraw(AssertionError):
    """A strategy built from a declaration drew a case the declaration does not claim (``strict=True``): a gap in
    the strategy, never the adapter's fault."""


# ---------------------------------------------------------------------------------------------
# scalars
# ---------------------------------------------------------------------------------------------
def special_lengths(max_len: int, tile_sizes: Sequence[int] = DEFAULT_TILE_SIZES) -> list[int]:
    """1, small primes and tile +- 1 for every tile size, all <= max_len, sorted (shrinks to 1)."""
    out = {1}
    out.update(p for p in _PRIMES if p <= max_len)
    for t in tile_sizes:
        out.update(x for x in (t - 1, t, t + 1) if 1 <= x <= max_len)
    return sorted(out)


def lengths(
    max_len: int = 130, *, min_len: int = 1, tile_sizes: Sequence[int] = DEFAULT_TILE_SIZES, edges_only: bool = False,
    multiple: int | None = None,
) -> st.SearchStrategy[int]:
    """Sequence lengths in [min_len, max_len]: mostly 1, primes and tile edges, sometimes any integer
    (never, with ``edges_only``). With ``multiple`` (`Capabilities.seqlen_multiple`): multiples of it only, the
    tile edges among them favoured; at least one multiple even where ``max_len`` is below it."""
    if max_len < min_len:
        raise ValueError(f"lengths: max_len={max_len} < min_len={min_len}")
    if multiple is not None and multiple > 1:
        lo = -(-min_len // multiple)
        hi = max(lo, max_len // multiple)
        special = [x for x in special_lengths(hi * multiple, tile_sizes) if x % multiple == 0 and x >= min_len]
        special = special or [lo * multiple]
        if edges_only:
            return st.sampled_from(special)
        return st.one_of(st.sampled_from(special), st.integers(lo, hi).map(lambda k: k * multiple))
    special = [x for x in special_lengths(max_len, tile_sizes) if x >= min_len] or [min_len]
    if edges_only:
        return st.sampled_from(special)
    return st.one_of(st.sampled_from(special), st.integers(min_len, max_len))


def head_counts(*, max_hq: int = 8, gqa: bool = True) -> st.SearchStrategy[tuple[int, int]]:
    """(Hq, Hkv) with Hkv dividing Hq (SEMANTICS.md §9: GQA/MQA ratios 1, 2, 3, 4, 8, Hkv = 1); shrinks to (1, 1)."""
    top = max(1, max_hq)
    if not gqa:
        return st.integers(1, top).map(lambda h: (h, h))
    return st.sampled_from([(hkv * r, hkv) for hkv in range(1, top + 1) for r in (1, 2, 3, 4, 8) if r * hkv <= top])


def head_dims(
    allowed: Iterable[int] | None = None, *, min_dim: int = 1, max_dim: int = DEFAULT_MAX_HEAD_DIM
) -> st.SearchStrategy[int]:
    """Head dims of ``allowed`` (a declared set, e.g. `Capabilities.head_dims`), or with None any in [min_dim,
    max_dim]: half the draws a favoured one (`SMALL_HEAD_DIMS`), a quarter 128 or 256 (`LARGE_HEAD_DIMS`), a quarter
    any allowed value; shrinks towards 8. ValueError when nothing is allowed."""
    def ok(x: int) -> bool:
        return min_dim <= x <= max_dim and (allowed is None or x in pool)

    pool = set(allowed) if allowed is not None else set()
    if allowed is not None:
        choices = sorted(x for x in pool if ok(x))
        if not choices:
            raise ValueError(f"head_dims: none of {sorted(pool)} within {min_dim} .. {max_dim}")
        anything = st.sampled_from(choices)
    else:
        if min_dim > max_dim:
            raise ValueError(f"head_dims: min_dim={min_dim} > max_dim={max_dim}")
        anything = st.integers(min_dim, max_dim)
    small = [x for x in SMALL_HEAD_DIMS if ok(x)]
    large = [x for x in LARGE_HEAD_DIMS if ok(x)]
    favoured = st.sampled_from(small) if small else anything
    # one_of picks a branch uniformly: the favoured ones twice as often as each other branch
    return st.one_of(favoured, favoured, anything, st.sampled_from(large) if large else anything)


def declared_head_dims(caps: Capabilities | None, *, backward: bool = False, fp8: bool = False,
                       max_dim: int = DEFAULT_MAX_HEAD_DIM) -> st.SearchStrategy[int]:
    """`head_dims` of what ``caps`` declares for a forward (or, with ``backward``, a backward: its
    ``backward_head_dims``), FP8 ones at least 8, none above ``max_dim`` unless the declaration has nothing lower."""
    dims, lo, hi = caps.head_dim_bounds(backward) if caps is not None else (None, 1, None)
    lo = max(lo, _FP8_MIN_HEAD_DIM) if fp8 else lo
    hi = min(hi, max_dim) if hi is not None else max_dim
    if dims is not None and not any(lo <= x <= hi for x in dims):
        hi = min((x for x in dims if x >= lo), default=hi)
    return head_dims(dims, min_dim=lo, max_dim=max(hi, lo))


def float_dtypes(allowed: Sequence[str] | None = None) -> st.SearchStrategy[str]:
    """Storage dtypes (fp16, bf16, fp32, fp64), restricted to ``allowed`` when given."""
    opts = [d for d in _FLOAT_DTYPES if allowed is None or d in allowed]
    if not opts:
        raise ValueError(f"float_dtypes: none of {_FLOAT_DTYPES} in allowed={sorted(allowed or ())}")
    return st.sampled_from(opts)


def scales(d: int) -> st.SearchStrategy[float | None]:
    """Softmax scale (SEMANTICS.md §2): default (None = 1/sqrt(d)), 1/d, negative, large, or any in [-2, 2]."""
    return st.one_of(
        st.just(None),
        st.sampled_from([1.0 / d, -1.0 / math.sqrt(d), 4.0 / math.sqrt(d), 1.0]),
        st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False, width=32).filter(lambda x: abs(x) >= 0.01),
    )


def softcaps() -> st.SearchStrategy[float | None]:
    """Softcap c > 0 (SEMANTICS.md §3: s -> c * tanh(s / c)) or None."""
    return st.one_of(st.just(None), st.sampled_from([1.0, 5.0, 30.0, 50.0]), st.floats(0.25, 60.0, width=32))


def alignments() -> st.SearchStrategy[str]:
    """Causal alignment (SEMANTICS.md §4): "bottom_right" (flash-attn) or "top_left" (torch is_causal)."""
    return st.sampled_from(ALIGNMENTS)


def windows(Lq: int, Lk: int) -> st.SearchStrategy[tuple[int | None, int | None]]:
    """Sliding windows (left, right) around the aligned diagonal (SEMANTICS.md §5); None = unbounded."""
    span = max(Lq, Lk) + 1
    side = st.one_of(st.none(), st.integers(0, 4), st.integers(0, span))
    return st.tuples(side, side).filter(lambda w: w != (None, None))


def sink_logits(Hq: int) -> st.SearchStrategy[np.ndarray]:
    """One sink logit per query head (SEMANTICS.md §18): ordinary, large (up to 1e4), very negative, -inf."""
    one = st.one_of(st.floats(-4.0, 4.0, width=32), st.sampled_from([1e4, 40.0, -60.0, -1e4, -np.inf]))
    return st.lists(one, min_size=Hq, max_size=Hq).map(lambda xs: np.asarray(xs, dtype=np.float64))


def chunk_sizes(Lq: int, Lk: int) -> st.SearchStrategy[int]:
    """Chunk sizes (SEMANTICS.md §19) from 1 to past the longer sequence, favouring edges inside it."""
    span = max(Lq, Lk, 1)
    return st.one_of(st.integers(1, 4), st.integers(1, span + 1))


def cache_lengths(B: int, Lq: int, Lk: int) -> st.SearchStrategy[tuple[int, ...]]:
    """KV-append cache_seqlens (SEMANTICS.md §20): B lengths in [0, Lk - Lq] (the Lq new rows fit)."""
    return st.lists(st.integers(0, max(Lk - Lq, 0)), min_size=B, max_size=B).map(tuple)


def distributions(allowed: Sequence[str] = DISTRIBUTIONS) -> st.SearchStrategy[str]:
    """Input value recipes: normal, outliers (FA3 paper mix), large_logits, ties, tiny_lse, uniform."""
    return st.sampled_from(list(allowed))


def layouts(allowed: Sequence[str] = LAYOUTS) -> st.SearchStrategy[str]:
    """Memory layouts: contiguous, bshd (a transposed [B, L, H, D] tensor), kv_broadcast (stride-0 batch),
    and for adapters that claim them the paged K/V layouts paged64/128/256 (SEMANTICS.md §16)."""
    return st.sampled_from(list(allowed))


def fp8_specs(
    d: int,
    *,
    granularities: Sequence[str] = FP8_GRANULARITIES,
    formats: Sequence[str] = FP8_FORMATS,
    incoherent: bool | None = None,
    tiles: Iterable[tuple[int, int]] | None = None,
) -> st.SearchStrategy[FP8Spec]:
    """FP8 settings (SEMANTICS.md §10-§11): format, scaling granularity, tile sizes, incoherent processing.

    Incoherent processing needs a power-of-two head dim (Hadamard transform); it is never drawn
    otherwise. ``incoherent=None`` draws both. ``tiles``: the (tile_q, tile_k) shapes per-tile descales may have
    (`Capabilities.fp8_tiles`); None = any of 8 .. 128.
    """
    pow2 = d >= 1 and d & (d - 1) == 0
    if incoherent and not pow2:
        raise ValueError(f"fp8_specs: incoherent processing needs a power-of-two head dim; got d={d}")
    return _fp8_specs(pow2, tuple(granularities), tuple(formats), incoherent,
                      None if tiles is None else tuple(sorted(tiles)))


def _fp8_specs(pow2: bool, granularities: Sequence[str], formats: Sequence[str], incoherent: bool | None,
               tiles: Sequence[tuple[int, int]] | None) -> st.SearchStrategy[FP8Spec]:
    inc = st.just(False) if not pow2 else (st.booleans() if incoherent is None else st.just(bool(incoherent)))
    free = st.tuples(st.sampled_from(_FP8_TILE_SIZES), st.sampled_from(_FP8_TILE_SIZES))
    declared = st.sampled_from(sorted(tiles)) if tiles is not None else free

    @st.composite
    def _draw(draw) -> FP8Spec:
        fmt = draw(st.sampled_from(list(formats)))
        granularity = draw(st.sampled_from(list(granularities)))
        tile_q, tile_k = draw(declared if granularity == "per_tile" else free)
        return FP8Spec(format=fmt, granularity=granularity, tile_q=tile_q, tile_k=tile_k, incoherent=draw(inc),
                       hadamard_seed=draw(st.integers(0, 3)))

    return _draw()


def varlen_seqlens(B: int, Lq: int, Lk: int, *, allow_empty: bool = True,
                   query_lengths: bool = True) -> st.SearchStrategy[tuple]:
    """Per-batch real lengths ``(seqlens_q, seqlens_k)`` (SEMANTICS.md §7); each <= the padded length.

    At least one sequence keeps its full length, so the padded shape is the true maximum. ``query_lengths=False``
    (a declaration of key lengths only, `Capabilities.query_lengths`: a KV cache's spelling): seqlens_q is None.
    """
    lo = 0 if allow_empty else 1

    def made(sq: list[int], sk: list[int], full: int) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
        sq[full], sk[full] = Lq, Lk
        return (tuple(sq) if query_lengths else None), tuple(sk)

    return st.builds(made, st.lists(st.integers(min(lo, Lq), Lq), min_size=B, max_size=B),
                     st.lists(st.integers(min(lo, Lk), Lk), min_size=B, max_size=B), st.integers(0, B - 1))


# ---------------------------------------------------------------------------------------------
# arrays
# ---------------------------------------------------------------------------------------------
def sample_values(rng: np.random.Generator, shape: tuple[int, ...], distribution: str = "normal") -> np.ndarray:
    """FP64 values of one input tensor for the named distribution (see conformance.cases.case.DISTRIBUTIONS).

    normal: N(0, 1); outliers: N(0, 1) plus N(0, 10^2) on 0.1% of entries (at least one); large_logits:
    N(0, 1) * 30 (|q.k| reaches ~1e3-1e4); ties: a few distinct values, repeated; tiny_lse: N(0, 1)
    (callers pair it with a large negative bias); uniform: U(-1, 1); activations: N(0, 1) with the catalog
    recipe's outlier channels (`conformance.cases.inputs.outlier_channels`) at 8 |x| (its sink and attractor keys
    need q and k together, which one tensor's values cannot say).
    """
    if distribution == "normal" or distribution == "tiny_lse":
        return rng.standard_normal(shape)
    if distribution == "outliers":
        x = rng.standard_normal(shape)
        n = x.size
        k = max(1, int(round(0.001 * n)))
        idx = rng.choice(n, size=k, replace=False)
        x.reshape(-1)[idx] += 10.0 * rng.standard_normal(k)
        return x
    if distribution == "large_logits":
        return 30.0 * rng.standard_normal(shape)
    if distribution == "ties":
        return rng.choice(np.array([-1.0, 0.0, 0.5, 1.0]), size=shape)
    if distribution == "uniform":
        return rng.uniform(-1.0, 1.0, size=shape)
    if distribution == "activations":  # one tensor's share of the catalog recipe: its outlier channels
        x = rng.standard_normal(shape)
        ch = outlier_channels(shape[-1])
        x[..., ch] = 8.0 * np.abs(x[..., ch])
        return x
    raise ValueError(f"distribution={distribution!r} unknown; expected one of {DISTRIBUTIONS}")


def value_arrays(shape: tuple[int, ...], distribution: str | None = None) -> st.SearchStrategy[np.ndarray]:
    """A float64 array of ``shape`` from a seeded generator (shrinks by seed, then by distribution)."""
    dist = st.sampled_from(["normal", "uniform", "outliers", "ties", "large_logits"]) if distribution is None \
        else st.just(distribution)
    return st.builds(lambda seed, dd: sample_values(np.random.default_rng(seed), shape, dd),
                     st.integers(0, 2**32 - 1), dist)


def bool_masks(
    shape: tuple[int, ...], *, force_full_rows: bool | None = None, min_density: float = 0.0
) -> st.SearchStrategy[np.ndarray]:
    """Boolean masks (True = attend, SEMANTICS.md §6) of ``shape`` [..., Lq, Lk].

    Density is drawn in [min_density, 1]; with ``force_full_rows`` (or when drawn, if None) at least one
    row is entirely False, so the fully-masked-row contract (§8: O = 0, LSE = -inf) is exercised.
    """

    @st.composite
    def _draw(draw) -> np.ndarray:
        seed = draw(st.integers(0, 2**32 - 1))
        density = draw(st.sampled_from([0.5, 0.9, 0.1, 1.0]) | st.floats(min_density, 1.0))
        density = max(density, min_density)
        rng = np.random.default_rng(seed)
        m = rng.random(shape) < density
        full = draw(st.booleans()) if force_full_rows is None else force_full_rows
        if full and shape[-2] > 0:
            rows = m.reshape(-1, shape[-2], shape[-1])
            nrows = draw(st.integers(1, max(1, min(3, shape[-2]))))
            for r in rng.choice(shape[-2], size=nrows, replace=False):
                rows[:, r, :] = False
        return m

    return _draw()


# ---------------------------------------------------------------------------------------------
# shapes and cases
# ---------------------------------------------------------------------------------------------
def attention_shapes(
    *,
    max_work: int = DEFAULT_MAX_WORK,
    max_len: int = 130,
    max_batch: int = 3,
    max_hq: int = 8,
    gqa: bool = True,
    dims: Sequence[int] | st.SearchStrategy[int] | None = None,
    max_dim: int = 64,
    dv_ne_d: bool = True,
    tile_sizes: Sequence[int] = DEFAULT_TILE_SIZES,
    edges_only: bool = False,
    seqlen_multiple: int | None = None,
) -> st.SearchStrategy[dict[str, int]]:
    """Dicts {B, Hq, Hkv, Lq, Lk, d, dv} whose forward work ``B*Hq*Lq*Lk*(d+dv)`` is <= ``max_work`` (a length
    held to ``seqlen_multiple`` may take the budget past it: one multiple is the shortest length there is).

    ``dims``: a strategy for d and dv (e.g. `declared_head_dims`), or the head dims to sample from (those up to
    ``max_dim``), or None for `head_dims` up to ``max_dim``."""
    if isinstance(dims, st.SearchStrategy):
        dim_strategy = dims
    elif dims is not None:
        dim_strategy = st.sampled_from([x for x in sorted(dims) if x <= max_dim] or sorted(dims)[:1])
    else:
        dim_strategy = head_dims(max_dim=max_dim)

    @st.composite
    def _draw(draw) -> dict[str, int]:
        d = draw(dim_strategy)
        dv = draw(dim_strategy) if dv_ne_d and draw(st.booleans()) else d
        per = d + dv
        q_cap = max(1, min(max_len, max_work // per))
        Lq = draw(lengths(q_cap, tile_sizes=tile_sizes, edges_only=edges_only, multiple=seqlen_multiple))
        k_cap = max(1, min(max_len, max_work // (per * Lq)))
        Lk = draw(lengths(k_cap, tile_sizes=tile_sizes, edges_only=edges_only, multiple=seqlen_multiple))
        room = max(1, max_work // (per * Lq * Lk))
        hq, hkv = draw(head_counts(max_hq=max(1, min(max_hq, room)), gqa=gqa))
        B = draw(st.integers(1, max(1, min(max_batch, room // hq))))
        return dict(B=B, Hq=hq, Hkv=hkv, Lq=Lq, Lk=Lk, d=d, dv=dv)

    return _draw()


def declared_or_reject(caps: Capabilities | None, case: Case, device: str, strict: bool) -> Case:
    """``case`` when ``caps`` claims it. A case an `Exclusion` declines is filtered out (the strategy does not model
    combinations); any other undeclared case is a gap in the strategy: filtered out, or `UndeclaredDraw` when
    ``strict``."""
    if caps is None:
        return case
    reason = capability_reason(caps, case, device)
    if reason is None:
        return case
    if strict and not any(e.applies(case) for e in caps.excludes):
        raise UndeclaredDraw(f"drew {case.id}, which the declaration does not claim: {reason}")
    assume(False)
    return case


def _declared(caps: Capabilities, device: str) -> tuple[list[str], bool]:
    """(the plain dtypes, whether FP8 is declared); ValueError when ``caps`` declares neither on ``device``."""
    if str(device).split(":")[0] not in caps.devices:
        raise ValueError(f"the declaration claims devices {sorted(caps.devices)}, not {device!r}")
    plain = [x for x in _FLOAT_DTYPES if x in caps.dtypes]
    if not plain and not caps.fp8:
        raise ValueError("the declaration claims no dtype: neither a plain one nor an FP8 granularity")
    return plain, bool(caps.fp8)


def attention_cases(
    *,
    capabilities: Capabilities | None = None,
    device: str = "cpu",
    family: str = "hypothesis",
    dtypes: Sequence[str] | None = None,
    fp8: bool | None = None,
    backward: bool | None = None,
    max_work: int = DEFAULT_MAX_WORK,
    max_len: int = 260,
    max_batch: int = 3,
    max_hq: int = 8,
    max_dim: int = DEFAULT_MAX_HEAD_DIM,
    tile_sizes: Sequence[int] = DEFAULT_TILE_SIZES,
    features: bool = True,
    value_distributions: Sequence[str] = DISTRIBUTIONS,
    edges_only: bool = False,
    strict: bool = False,
    declared_only: bool = True,
) -> st.SearchStrategy[Case]:
    """`Case` objects, restricted to what ``capabilities`` claims on ``device`` when given.

    ``fp8``: True = only FP8 cases, False = none, None = both when the capabilities allow. ``backward``
    likewise. ``features=False`` draws only plain attention (no causal/window/mask/bias/softcap/varlen; causal
    where the declaration claims no non-causal attention).
    The strategy is built from the declaration (module docstring), so every drawn case satisfies
    ``capability_reason(capabilities, case, device) is None``; ``strict=True`` raises `UndeclaredDraw` for a draw
    it would otherwise have to filter out (tests of the strategy use it). ValueError when the declaration cannot
    give what is asked (``fp8=True`` without an FP8 granularity, ``backward=True`` without a backward, no dtype).
    ``declared_only=False`` leaves the final check to a caller that changes the draw first (`edge_cases`: a plain
    draw that an `Exclusion` declines, e.g. a spelling that takes only a windowed mask, gets its window there).
    """
    caps = capabilities
    plain, can_fp8 = _declared(caps, device) if caps is not None else (list(_FLOAT_DTYPES), True)
    plain = [x for x in plain if dtypes is None or x in dtypes]
    if fp8 and not can_fp8:
        raise ValueError("attention_cases(fp8=True) but the capabilities declare no FP8 granularity")
    if fp8 is False and not plain:
        raise ValueError(f"attention_cases(fp8=False) but no plain dtype is declared (and in dtypes={dtypes})")
    if backward and caps is not None and not caps.backward:
        raise ValueError("attention_cases(backward=True) but the capabilities declare no backward")
    if backward and (fp8 or not plain):
        raise ValueError("attention_cases(backward=True) needs a plain dtype: FP8 cases are forward only")
    if caps is not None and caps.max_seqlen is not None:
        max_len = min(max_len, caps.max_seqlen)
    multiple = caps.seqlen_multiple if caps is not None else None
    alignments_ = sorted(caps.alignments) if caps is not None else list(ALIGNMENTS)
    # a declaration of causal attention alone (a causal-only function, the `causal_lower_right` spellings): every draw
    # is causal, plain ones included (drawn non-causal and rejected, the edges property of such a spelling drew no
    # case at all: Hypothesis' Unsatisfiable)
    causal_only = caps is not None and not caps.noncausal
    query_lengths = caps is None or caps.query_lengths
    if causal_only and not alignments_:
        raise ValueError("the declaration claims neither non-causal attention nor a causal alignment")
    made: dict[tuple, st.SearchStrategy] = {}  # strategies built once per (backward, fp8) or power-of-two d

    def shapes(want_bwd: bool, want_fp8: bool) -> st.SearchStrategy[dict[str, int]]:
        key = ("shape", want_bwd, want_fp8)
        if key not in made:
            made[key] = attention_shapes(
                max_work=max_work, max_len=max_len, max_batch=max_batch, max_hq=max_hq, gqa=caps is None or caps.gqa,
                dims=declared_head_dims(caps, backward=want_bwd, fp8=want_fp8, max_dim=max_dim),
                dv_ne_d=(caps is None or caps.dv_ne_d) and not want_fp8, tile_sizes=tile_sizes,
                edges_only=edges_only, seqlen_multiple=multiple)
        return made[key]

    def fp8_for(pow2: bool) -> st.SearchStrategy[FP8Spec]:
        key = ("fp8", pow2)
        if key not in made:
            grans = [g for g in FP8_GRANULARITIES if caps is None or g in caps.fp8]
            fmts = [f for f in FP8_FORMATS if caps is None or not caps.fp8_formats or f in caps.fp8_formats]
            tiles = None if caps is None or caps.fp8_tiles is None else tuple(sorted(caps.fp8_tiles))
            made[key] = _fp8_specs(pow2, grans, fmts, None, tiles)
        return made[key]

    @st.composite
    def _draw(draw) -> Case:
        if fp8 is None and not backward:
            want_fp8 = draw(st.booleans()) if (can_fp8 and plain) else not plain
        else:
            want_fp8 = bool(fp8)
        can_bwd = (caps is None or caps.backward) and not want_fp8  # FP8 cases are forward only
        want_bwd = can_bwd and (draw(st.booleans()) if backward is None else bool(backward))
        shape = draw(shapes(want_bwd, want_fp8))
        d, Lq, Lk, B = shape["d"], shape["Lq"], shape["Lk"], shape["B"]
        kw: dict[str, Any] = {}
        if want_fp8:
            spec = draw(fp8_for(d >= 1 and d & (d - 1) == 0))
            kw["fp8"] = spec
            kw["dtype"] = "float8_e4m3fn" if spec.format == "e4m3fn" else "float8_e5m2"
        else:
            kw["dtype"] = draw(float_dtypes(plain))
        if caps is None or caps.custom_scale:
            kw["scale"] = draw(scales(d))
        if features:
            can_causal = bool(alignments_)
            if can_causal and (causal_only or draw(st.booleans())):
                kw["causal"] = True
                kw["alignment"] = draw(st.sampled_from(alignments_))
            elif caps is not None and alignments_:
                kw["alignment"] = alignments_[0]
            if (caps is None or caps.window) and alignments_ and draw(st.integers(0, 3)) == 3:
                kw["window"] = draw(windows(Lq, Lk))
                if "alignment" not in kw or not kw.get("causal"):
                    kw["alignment"] = draw(st.sampled_from(alignments_))
            if (caps is None or caps.mask) and draw(st.integers(0, 3)) == 3:
                kw["mask"] = draw(st.sampled_from(MASK_RECIPES))
            if (caps is None or caps.bias) and draw(st.integers(0, 4)) == 4:
                kw["bias"] = draw(st.sampled_from(BIAS_RECIPES))
            if (caps is None or caps.softcap) and draw(st.integers(0, 3)) == 3:
                kw["softcap"] = draw(softcaps())
            if (caps is None or caps.varlen) and draw(st.integers(0, 3)) == 3:
                kw["seqlens_q"], kw["seqlens_k"] = draw(varlen_seqlens(B, Lq, Lk, query_lengths=query_lengths))
            if not want_fp8 and (caps is None or caps.sinks) and draw(st.integers(0, 3)) == 3:
                kw["sinks"] = draw(st.sampled_from(SINK_RECIPES))
            if not want_fp8 and (caps is None or caps.chunk) and draw(st.integers(0, 3)) == 3:
                kw["chunk"] = draw(chunk_sizes(Lq, Lk))
            if (not want_fp8 and caps is not None and caps.kv_append and "bottom_right" in alignments_
                    and "seqlens_k" not in kw and Lk >= Lq and "seqlens_q" not in kw
                    and draw(st.integers(0, 3)) == 3):
                kw["kv_append"] = draw(cache_lengths(B, Lq, Lk))
                kw["causal"], kw["alignment"] = True, "bottom_right"
        elif causal_only:  # plain attention of a causal-only declaration
            kw["causal"], kw["alignment"] = True, draw(st.sampled_from(alignments_))
        if kw.get("seqlens_k") is not None and "nan_padding" in value_distributions and draw(st.booleans()):
            # padding exists: half the time fill it with NaN, so a kernel that reads padded rows shows it
            kw["distribution"] = "nan_padding"
        else:
            kw["distribution"] = draw(distributions(value_distributions))
        allowed_layouts = [x for x in LAYOUTS if caps is None or x in caps.layouts]
        if caps is not None and not want_fp8:  # paged K/V only where claimed (never with FP8 codes)
            allowed_layouts += [x for x in PAGED_LAYOUTS if x in caps.layouts]
        kw["layout"] = draw(layouts(allowed_layouts))
        kw["backward"] = want_bwd
        if want_bwd and (caps is None or caps.lse_grad) and draw(st.integers(0, 2)) == 2:
            kw["lse_grad"] = True  # an LSE cotangent: d sink's dLSE term, dS = P (dP - D + dlse) (§13, §18)
        kw["seed"] = draw(st.integers(0, 2**31 - 1))
        case = Case(family=family, **shape, **kw)
        return declared_or_reject(caps, case, device, strict) if declared_only else case

    return _draw()


EDGE_KINDS = ("mask_full_rows", "mask_none_visible", "bias_neg_inf_rows", "causal_lq_gt_lk", "varlen_empty",
              "window_narrow", "sink_empty_rows")


def edge_kinds(caps: Capabilities | None) -> list[str]:
    """The `EDGE_KINDS` ``caps`` claims (all of them without a declaration)."""
    kinds = []
    if caps is None or caps.mask:
        kinds += ["mask_full_rows", "mask_none_visible"]
    if caps is None or caps.bias:
        kinds.append("bias_neg_inf_rows")
    if caps is None or "bottom_right" in caps.alignments:
        kinds.append("causal_lq_gt_lk")
    if caps is None or caps.varlen:
        kinds.append("varlen_empty")
    if caps is None or (caps.window and caps.alignments):
        kinds.append("window_narrow")
    if caps is None or (caps.sinks and caps.mask):
        kinds.append("sink_empty_rows")
    return kinds


def edge_cases(
    *,
    capabilities: Capabilities | None = None,
    device: str = "cpu",
    family: str = "edges",
    max_len: int = 260,
    max_work: int = DEFAULT_MAX_WORK,
    tile_sizes: Sequence[int] = (16, 32, 64, 128, 256),
    strict: bool = False,
) -> st.SearchStrategy[Case]:
    """Forward cases in the bug-dense corner: lengths only at 1, primes and tile edges, and always at least
    one source of fully masked rows (SEMANTICS.md §8): a mask with empty rows or no visible entry, -inf bias
    rows, bottom-right causal with Lq > Lk, varlen with empty sequences, or a narrow window. Only kinds the
    ``capabilities`` claim are drawn (`edge_kinds`; ValueError when it claims none)."""
    caps = capabilities
    kinds = edge_kinds(caps)
    if not kinds:
        raise ValueError("edge_cases: the declaration claims no source of fully masked rows (mask, bias, "
                         "bottom-right causal, varlen, window)")
    base = attention_cases(capabilities=caps, device=device, family=family, fp8=False, backward=False,
                           max_len=max_len, max_work=max_work, max_batch=2, max_hq=4, tile_sizes=tile_sizes,
                           features=False, edges_only=True, strict=strict, declared_only=False)
    window_alignments = sorted(caps.alignments) if caps is not None else ["bottom_right"]

    @st.composite
    def _draw(draw) -> Case:
        kind = draw(st.sampled_from(kinds))
        case = draw(base)
        if kind == "mask_full_rows":
            case = case.replace(mask="full_rows")
        elif kind == "mask_none_visible":
            case = case.replace(mask="none_visible")
        elif kind == "bias_neg_inf_rows":
            case = case.replace(bias="neg_inf_rows")
        elif kind == "causal_lq_gt_lk":
            lq, lk = max(case.Lq, case.Lk), min(case.Lq, case.Lk)
            assume(lq > lk)
            case = case.replace(causal=True, alignment="bottom_right", Lq=lq, Lk=lk)
        elif kind == "varlen_empty":
            sq, sk = draw(varlen_seqlens(case.B, case.Lq, case.Lk, query_lengths=caps is None or caps.query_lengths))
            empty = draw(st.integers(0, case.B - 1))
            sk = tuple(0 if b == empty else x for b, x in enumerate(sk)) if case.B > 1 else sk
            case = case.replace(seqlens_q=sq, seqlens_k=sk)
        elif kind == "sink_empty_rows":  # no visible key with a sink: O = 0, LSE = the sink (§18)
            case = case.replace(mask="full_rows", sinks=draw(st.sampled_from(SINK_RECIPES)))
        else:
            w = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
            case = case.replace(window=w, alignment=draw(st.sampled_from(window_alignments)))
        return declared_or_reject(caps, case, device, strict)

    return _draw()


def attention_arrays(
    *,
    max_work: int = 1 << 15,
    max_len: int = 24,
    max_batch: int = 2,
    max_hq: int = 4,
    max_dim: int = 16,
    gqa: bool = True,
    dv_ne_d: bool = True,
    features: bool = True,
    mask: bool | None = None,
    bias: bool | None = None,
    varlen: bool | None = None,
    tile_sizes: Sequence[int] = (4, 8, 16),
    sinks: bool | None = False,
    chunk: bool | None = False,
) -> st.SearchStrategy[dict[str, Any]]:
    """FP64 arrays and oracle keywords for properties of the oracle itself.

    Draws ``{"q", "k", "v", "kwargs"}`` where kwargs are keyword arguments of `oracles.attention`:
    scale, causal, alignment, window, softcap, mask (bool array, sometimes with fully masked rows),
    bias (float array, broadcast shapes included) and seqlens_q / seqlens_k. ``mask``, ``bias``,
    ``varlen``, ``sinks`` (§18), ``chunk`` (§19): True forces the feature, False excludes it, None draws it
    sometimes (sinks and chunk default to False, so properties written before them see no change).
    """

    @st.composite
    def _draw(draw) -> dict[str, Any]:
        shape = draw(attention_shapes(max_work=max_work, max_len=max_len, max_batch=max_batch, max_hq=max_hq,
                                      gqa=gqa, max_dim=max_dim, dv_ne_d=dv_ne_d, tile_sizes=tile_sizes,
                                      dims=[1, 2, 3, 4, 5, 8, 16]))
        B, Hq, Hkv, Lq, Lk, d, dv = (shape[x] for x in ("B", "Hq", "Hkv", "Lq", "Lk", "d", "dv"))
        dist = draw(st.sampled_from(["normal", "uniform", "ties", "outliers"]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        q = sample_values(rng, (B, Hq, Lq, d), dist)
        k = sample_values(rng, (B, Hkv, Lk, d), dist)
        v = sample_values(rng, (B, Hkv, Lk, dv), dist)
        kw: dict[str, Any] = {"scale": draw(scales(d))}
        if features:
            if draw(st.booleans()):
                kw["causal"] = True
            kw["alignment"] = draw(alignments())
            if draw(st.integers(0, 2)) == 2:
                kw["window"] = draw(windows(Lq, Lk))
            if draw(st.integers(0, 2)) == 2:
                kw["softcap"] = draw(softcaps())
            use_mask = draw(st.integers(0, 2)) == 2 if mask is None else mask
            if use_mask:
                mshape = draw(st.sampled_from([(B, Hq, Lq, Lk), (Lq, Lk), (B, 1, Lq, Lk), (1, Hq, Lq, Lk)]))
                kw["mask"] = draw(bool_masks(mshape))
            use_bias = draw(st.integers(0, 3)) == 3 if bias is None else bias
            if use_bias:
                bshape = draw(st.sampled_from([(B, Hq, Lq, Lk), (Lq, Lk), (1, Hq, 1, Lk)]))
                kw["bias"] = rng.standard_normal(bshape)
            use_varlen = draw(st.integers(0, 3)) == 3 if varlen is None else varlen
            if use_varlen:
                kw["seqlens_q"], kw["seqlens_k"] = draw(varlen_seqlens(B, Lq, Lk))
            if draw(st.booleans()) if chunk is None else chunk:
                kw["chunk"] = draw(chunk_sizes(Lq, Lk))
        if draw(st.booleans()) if sinks is None else sinks:
            kw["sinks"] = draw(sink_logits(Hq))
        return {"q": q, "k": k, "v": v, "kwargs": kw, "shape": shape}

    return _draw()
