"""The case catalog: deterministic lists of `Case` per profile (issue 3, item 3).

Profiles:

- ``ci``: small shapes for the CPU (every CPU adapter together in <= 5 min on 2 cores);
- ``full``: ``ci`` plus longer lengths, every dtype crossed with the main groups, more backward;
- ``gpu``: ``ci`` plus large shapes (L up to 16384, d up to 256) meant for a CUDA device (a run
  over five CUDA backends fits in minutes; ``--profile full --device cuda`` runs the rest), and the
  full paged-K/V decoding set plus two long paged caches.

The ``pairs`` group is generated, not listed: a pairwise covering design over `conformance.cases.features`, so
every pair of feature values some adapter can claim meets in a case (`conformance.reporting.coverage` checks it).
Each group below is one generator of cases; `cases(profile)` concatenates them, gives each case a
seed derived from its semantic fields (stable across runs and machines) and drops duplicates.
`select(cases, expr)` filters by a ``-k`` expression over the case ids (`conformance.cases.selection`).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Iterable, Iterator

from attention_conformance.cases import covering, features, selection
from attention_conformance.cases.case import Case, FP8Spec

__all__ = ["PROFILES", "GROUPS", "cases", "case_by_id", "select", "estimated_cost", "case_marks"]

PROFILES = ("ci", "full", "gpu")

TILE_EDGES_CI = (1, 2, 5, 63, 64, 65, 127, 128, 129)
TILE_EDGES_FULL = TILE_EDGES_CI + (31, 97, 251, 255, 257, 509, 1021)
HEAD_DIMS = (32, 64, 80, 96, 128, 192, 256)


def _mk(family: str, **kw) -> Case:
    base = dict(B=1, Hq=2, Hkv=2, Lq=33, Lk=33, d=32, dtype="float16")
    base.update(kw)
    if "dv" not in base:
        base["dv"] = base["d"]
    return Case(family=family, **base)


# -- groups ----------------------------------------------------------------------------------------

def _worked(profile: str) -> Iterator[Case]:
    """The seed documents' worked examples (explicit inputs, `conformance.cases.inputs.WORKED`)."""
    one = dict(B=1, Hq=1, Hkv=1, Lq=1, d=1)
    for dt in ("float64", "float32", "float16", "bfloat16"):
        yield _mk("worked", Lk=4, distribution="worked:online_softmax", dtype=dt, note="O ~ 4.966", **one)
        yield _mk("worked", Lk=4, distribution="worked:split_k", dtype=dt, note="O ~ 1.612955", **one)
    for dt in ("float64", "float32", "bfloat16"):
        yield _mk("worked", Lk=2, distribution="worked:exercise1", dtype=dt, note="O = 4, not 6", **one)
    for dt in ("float64", "float32", "float16"):
        yield _mk("worked", Lk=2, distribution="worked:one_query_two_keys", dtype=dt, backward=True,
                  note="P=[1/4,3/4], O=5, dS=[-1.5,1.5]", **one)
    for dt in ("float64", "float32"):
        yield _mk("worked", B=1, Hq=1, Hkv=1, Lq=5, Lk=5, d=4, causal=True, dtype=dt,
                  note="N=5, tile=4 causal tail")
    yield _mk("worked", Lk=4, distribution="worked:split_k", dtype="float64", backward=True,
              note="gradient ~ [0.016012, 0.380898, -0.509337, 0.112427]", **one)


def _tile_edges(profile: str) -> Iterator[Case]:
    lengths = TILE_EDGES_CI if profile == "ci" else TILE_EDGES_FULL
    for L in lengths:
        yield _mk("tile_edges", Lq=L, Lk=L, d=64)
        yield _mk("tile_edges", Lq=L, Lk=L, d=64, causal=True)
    pairs = [(1, 129), (129, 1), (65, 127), (127, 65), (64, 129), (129, 64), (5, 257), (257, 5)]
    if profile != "ci":
        pairs += [(255, 257), (257, 255), (1, 1021), (1021, 63), (31, 509)]
    for lq, lk in pairs:
        yield _mk("tile_edges", Lq=lq, Lk=lk, d=64)


def _causal_alignment(profile: str) -> Iterator[Case]:
    pairs = [(17, 64), (64, 17), (1, 33), (33, 1), (48, 80), (80, 48), (63, 65), (65, 63)]
    dtypes = ("float16",) if profile == "ci" else ("float16", "bfloat16", "float32")
    for dt in dtypes:
        for lq, lk in pairs:
            for al in ("bottom_right", "top_left"):
                yield _mk("causal_alignment", Lq=lq, Lk=lk, causal=True, alignment=al, dtype=dt)


def _masked_rows(profile: str) -> Iterator[Case]:
    """Fully masked rows (SEMANTICS.md §8) from every source."""
    for dt in ("float16", "float32"):
        yield _mk("masked_rows", Lq=40, Lk=40, mask="full_rows", dtype=dt)
    yield _mk("masked_rows", Lq=40, Lk=24, causal=True, alignment="bottom_right", note="rows 0..15 see no key")
    yield _mk("masked_rows", Lq=40, Lk=24, causal=True, alignment="bottom_right", dtype="bfloat16")
    yield _mk("masked_rows", Lq=48, Lk=16, window=(3, 3), note="window leaves rows 0..28 empty")
    yield _mk("masked_rows", B=2, Lq=16, Lk=24, seqlens_k=(24, 0), note="batch 1 has no keys")
    yield _mk("masked_rows", Lq=20, Lk=20, bias="neg_inf_rows", note="-inf bias rows")
    yield _mk("masked_rows", Lq=9, Lk=9, mask="none_visible")
    if profile != "ci":
        yield _mk("masked_rows", Lq=130, Lk=65, causal=True, dtype="bfloat16")
        yield _mk("masked_rows", B=3, Lq=70, Lk=70, seqlens_q=(70, 33, 1), seqlens_k=(0, 70, 5), causal=True)


def _decoding(profile: str) -> Iterator[Case]:
    lks = (257, 1000) if profile == "ci" else (257, 1000, 4097, 8191)
    for lk in lks:
        for lq in (1, 2, 3, 4):
            yield _mk("decoding", Hq=8, Hkv=2, Lq=lq, Lk=lk, d=64, causal=True)
    yield _mk("decoding", B=3, Hq=8, Hkv=2, Lq=1, Lk=300, d=64, causal=True, seqlens_k=(300, 200, 1),
              note="cache lengths differ per sequence")
    yield _mk("decoding", Hq=4, Hkv=1, Lq=1, Lk=64, d=64, causal=True, alignment="top_left",
              note="top-left Lq=1 sees only key 0")
    yield _mk("decoding", Hq=8, Hkv=1, Lq=4, Lk=500, d=128, causal=True, dtype="bfloat16")


def _gqa(profile: str) -> Iterator[Case]:
    combos = [(4, 4), (4, 2), (8, 2), (16, 2), (4, 1), (8, 1)]
    dtypes = ("float16",) if profile == "ci" else ("float16", "bfloat16")
    for dt in dtypes:
        for hq, hkv in combos:
            yield _mk("gqa", Hq=hq, Hkv=hkv, Lq=37, Lk=53, causal=True, dtype=dt)


def _head_dims(profile: str) -> Iterator[Case]:
    for d in HEAD_DIMS:
        yield _mk("head_dims", Lq=33, Lk=47, d=d)
    for d, dv in ((64, 32), (32, 64), (128, 96), (96, 128), (192, 128)):
        yield _mk("head_dims", Lq=33, Lk=47, d=d, dv=dv, causal=True)
    if profile != "ci":  # the family has its own profile (_OWN_PROFILE): these run in full and gpu
        for d in HEAD_DIMS:
            yield _mk("head_dims", Lq=129, Lk=255, d=d, dtype="bfloat16", causal=True)
        yield _mk("head_dims", Lq=129, Lk=255, d=192, dv=128, dtype="bfloat16", causal=True)
        yield _mk("head_dims", Lq=129, Lk=255, d=96, dtype="bfloat16", causal=True, backward=True)
        # the wide backward builds of the FA3 backward (hopper/bwd_wide.cuh): d = 192, 256 and (192, 128)
        yield _mk("head_dims", Lq=129, Lk=255, d=192, dtype="bfloat16", causal=True, backward=True)
        yield _mk("head_dims", Lq=129, Lk=255, d=256, dtype="bfloat16", causal=True, backward=True)
        yield _mk("head_dims", Lq=129, Lk=255, d=192, dv=128, dtype="bfloat16", causal=True, backward=True)


def _scales(profile: str) -> Iterator[Case]:
    d = 64
    for sc in (None, 1.0 / d, -1.0 / math.sqrt(d), 1.0, 4.0):
        yield _mk("scale", Lq=45, Lk=45, d=d, scale=sc)
        yield _mk("scale", Lq=45, Lk=61, d=d, scale=sc, causal=True)
    # Square causal with a non-positive scale goes through backends' native causal path (not a mask):
    # a kernel that masks with -inf before multiplying by the scale turns masked keys into +inf/NaN.
    for sc in (-1.0 / math.sqrt(d), 0.0):
        yield _mk("scale", Lq=45, Lk=45, d=d, scale=sc, causal=True)


def _softcap(profile: str) -> Iterator[Case]:
    yield _mk("softcap", Lq=40, Lk=40, d=64, softcap=30.0)
    yield _mk("softcap", Lq=40, Lk=40, d=64, softcap=2.0, causal=True)
    yield _mk("softcap", Lq=40, Lk=56, d=64, softcap=5.0, scale=1.0)
    yield _mk("softcap", Lq=40, Lk=40, d=64, softcap=5.0, scale=1.0, dtype="bfloat16", causal=True)
    yield _mk("softcap", Lq=40, Lk=40, d=64, softcap=20.0, distribution="large_logits", dtype="float32")


def _distributions(profile: str) -> Iterator[Case]:
    dtypes = ("float16", "bfloat16", "float32")
    for dist in ("outliers", "large_logits", "ties", "tiny_lse", "uniform", "activations"):
        for dt in dtypes:
            yield _mk("distribution", Lq=65, Lk=129, d=64, distribution=dist, dtype=dt)
        yield _mk("distribution", Lq=65, Lk=129, d=64, distribution=dist, causal=True)


def _layouts(profile: str) -> Iterator[Case]:
    for dt in ("float16", "bfloat16"):
        yield _mk("layout", B=2, Lq=33, Lk=65, d=64, layout="bshd", dtype=dt)
        yield _mk("layout", B=3, Lq=33, Lk=65, d=64, layout="kv_broadcast", dtype=dt)
    yield _mk("layout", B=2, Hq=4, Hkv=2, Lq=65, Lk=65, d=64, layout="bshd", causal=True)
    yield _mk("layout", B=3, Hq=4, Hkv=1, Lq=1, Lk=97, d=64, layout="kv_broadcast", causal=True,
              note="stride-0 K/V with kv_len % 32 == 1 (torch #191937)")


def _varlen(profile: str) -> Iterator[Case]:
    sq, sk = (37, 64, 1), (64, 20, 50)
    yield _mk("varlen", B=3, Lq=64, Lk=64, seqlens_q=sq, seqlens_k=sk)
    yield _mk("varlen", B=3, Lq=64, Lk=64, seqlens_q=sq, seqlens_k=sk, causal=True)
    yield _mk("varlen", B=3, Lq=64, Lk=64, seqlens_q=sq, seqlens_k=sk, causal=True, alignment="top_left")
    yield _mk("varlen", B=3, Lq=64, Lk=64, seqlens_q=sq)
    yield _mk("varlen", B=2, Lq=33, Lk=80, seqlens_k=(80, 17), causal=True, dtype="bfloat16")
    yield _mk("varlen", B=3, Hq=4, Hkv=2, Lq=64, Lk=64, seqlens_q=sq, seqlens_k=sk, window=(8, 0))


def _nan_padding(profile: str) -> Iterator[Case]:
    """Varlen with NaN in every padded row of q, k, v, dout (SEMANTICS.md §7; inputs ``nan_padding``).

    A kernel that reads padded keys (P = 0 times V = NaN, torch #101967) or padded queries / dO (NaN
    dQ, dK at padded positions, flash-attention #443, #752) returns NaN in compared rows and fails.
    """
    np_ = dict(distribution="nan_padding")
    sq, sk = (37, 64, 1), (64, 20, 50)
    yield _mk("nan_padding", B=3, Lq=64, Lk=64, seqlens_q=sq, seqlens_k=sk, dtype="float16", **np_)
    yield _mk("nan_padding", B=3, Lq=64, Lk=64, seqlens_q=sq, seqlens_k=sk, causal=True, dtype="bfloat16", **np_)
    yield _mk("nan_padding", B=2, Lq=33, Lk=80, seqlens_k=(80, 17), causal=True, dtype="float32", **np_,
              note="padding in K/V only (torch #101967)")
    yield _mk("nan_padding", B=3, Hq=4, Hkv=2, Lq=40, Lk=48, seqlens_q=(33, 20, 7), seqlens_k=(48, 0, 13),
              causal=True, dtype="float16", **np_, note="GQA; batch 1 has no keys")
    b = dict(backward=True, **np_)
    yield _mk("nan_padding", B=3, Lq=64, Lk=64, seqlens_q=sq, seqlens_k=sk, causal=True, dtype="float16", **b,
              note="NaN dQ at padded keys (flash-attention #443, #752)")
    yield _mk("nan_padding", B=3, Hq=4, Hkv=2, Lq=40, Lk=48, seqlens_q=(33, 20, 7), seqlens_k=(48, 0, 13),
              causal=True, dtype="bfloat16", **b, note="GQA backward; batch 1 has no keys")
    yield _mk("nan_padding", B=2, Lq=24, Lk=40, seqlens_q=(24, 9), seqlens_k=(31, 40), dtype="float32", **b)


def _paged(profile: str) -> Iterator[Case]:
    """Decoding over a paged K/V cache (layouts ``paged64/128/256``, SEMANTICS.md §16; flash-attention #2709).

    Page pools hold decoy pages and NaN in every slot past each sequence's length, and table entries past
    its last page point at decoys (`conformance.cases.inputs.paged_storage`): a kernel that reads a slot, a page
    or a table entry it should not gets NaN (or another sequence's keys) into a compared row. Lengths have
    tails (257, 1000, 4096), sequences are short or empty, table rows are wider than the longest sequence,
    d is 64 or 128 and the dtype fp16/bf16, so CUDA split-KV kernels with page_size % kBlockN == 0 run them.
    """
    dec = dict(causal=True, alignment="bottom_right")
    yield _mk("paged", B=1, Hq=8, Hkv=2, Lq=1, Lk=257, d=64, layout="paged64", **dec,
              note="key 256 alone on the fifth page")
    yield _mk("paged", B=3, Hq=8, Hkv=2, Lq=1, Lk=1000, d=64, dtype="bfloat16", layout="paged64",
              seqlens_k=(700, 1, 0), **dec, note="short and empty caches; 16-entry table rows, 11 pages used")
    yield _mk("paged", B=2, Hq=4, Hkv=4, Lq=4, Lk=1000, d=128, layout="paged128", seqlens_k=(1000, 333), **dec)
    yield _mk("paged", B=2, Hq=4, Hkv=2, Lq=16, Lk=600, d=64, dtype="bfloat16", layout="paged256",
              seqlens_k=(600, 255), **dec)
    yield _mk("paged", B=2, Hq=4, Hkv=1, Lq=8, Lk=257, d=64, layout="paged128", seqlens_k=(257, 129),
              note="not causal")
    yield _mk("paged", B=4, Hq=4, Hkv=2, Lq=2, Lk=200, d=128, dtype="bfloat16", layout="paged64",
              seqlens_k=(64, 65, 63, 0), **dec, note="lengths at a page boundary")
    if profile == "ci":
        return
    yield _mk("paged", B=2, Hq=8, Hkv=2, Lq=1, Lk=4096, d=128, dtype="bfloat16", layout="paged256",
              seqlens_k=(4096, 3001), **dec)
    yield _mk("paged", B=1, Hq=8, Hkv=1, Lq=16, Lk=4096, d=64, layout="paged64", **dec)
    yield _mk("paged", B=2, Hq=4, Hkv=2, Lq=4, Lk=1000, d=64, layout="paged128", seqlens_k=(1000, 450),
              window=(200, 0))
    yield _mk("paged", B=2, Hq=4, Hkv=2, Lq=16, Lk=257, d=64, layout="paged64", seqlens_k=(257, 40),
              causal=True, alignment="top_left")
    yield _mk("paged", B=2, Hq=4, Hkv=2, Lq=3, Lk=1000, d=64, dtype="float32", layout="paged64",
              seqlens_k=(999, 500), **dec)
    yield _mk("paged", B=2, Hq=4, Hkv=2, Lq=65, Lk=300, d=64, layout="paged128", seqlens_q=(65, 30),
              seqlens_k=(300, 30), **dec, note="chunked prefill: varlen queries on a paged cache")
    yield _mk("paged", B=3, Hq=4, Hkv=2, Lq=4, Lk=513, d=128, dtype="bfloat16", layout="paged256",
              seqlens_k=(513, 256, 0), distribution="nan_padding", **dec)
    if profile != "gpu":
        return
    yield _mk("paged", B=4, Hq=32, Hkv=8, Lq=1, Lk=16384, d=128, dtype="bfloat16", layout="paged256",
              seqlens_k=(16384, 9000, 1, 0), **dec)
    yield _mk("paged", B=8, Hq=16, Hkv=2, Lq=4, Lk=8192, d=64, layout="paged128",
              seqlens_k=(8192, 8000, 4097, 4096, 1000, 257, 64, 0), **dec)


def _dtypes(profile: str) -> Iterator[Case]:
    for dt in ("float64", "float32", "float16", "bfloat16"):
        yield _mk("dtype", B=2, Lq=47, Lk=81, d=64, dtype=dt)
        yield _mk("dtype", B=2, Lq=47, Lk=81, d=64, dtype=dt, causal=True)


def _mask_bias(profile: str) -> Iterator[Case]:
    for m in ("random", "random_heads", "key_padding"):
        yield _mk("mask_bias", B=2, Lq=40, Lk=56, d=64, mask=m)
    for b in ("random", "alibi"):
        yield _mk("mask_bias", B=2, Lq=40, Lk=56, d=64, bias=b)
    yield _mk("mask_bias", B=2, Lq=40, Lk=56, d=64, mask="random", bias="random", causal=True)
    yield _mk("mask_bias", B=2, Lq=40, Lk=56, d=64, mask="random", dtype="bfloat16")
    yield _mk("mask_bias", B=1, Hq=4, Hkv=1, Lq=40, Lk=1, d=64, mask="random",
              note="bool mask + GQA + kv_len 1 (torch #177842)")


def _windows(profile: str) -> Iterator[Case]:
    for w in ((16, 0), (8, 8), (0, 0), (None, 4), (4, None)):
        yield _mk("window", Lq=70, Lk=70, d=64, window=w)
    yield _mk("window", Lq=70, Lk=70, d=64, window=(16, None), causal=True)
    yield _mk("window", Lq=30, Lk=90, d=64, window=(10, 5))
    yield _mk("window", Lq=30, Lk=90, d=64, window=(10, 5), alignment="top_left")
    yield _mk("window", Lq=70, Lk=70, d=64, window=(69, 0), note="(L-1, 0) == causal (FA #1133)")


def _backward(profile: str) -> Iterator[Case]:
    b = dict(backward=True, d=64)
    for dt in ("float64", "float32", "float16", "bfloat16"):
        yield _mk("backward", Lq=33, Lk=47, dtype=dt, **b)
    yield _mk("backward", Lq=47, Lk=33, causal=True, **b)
    yield _mk("backward", Lq=33, Lk=47, causal=True, alignment="top_left", **b)
    yield _mk("backward", Hq=8, Hkv=2, Lq=33, Lk=47, causal=True, **b)
    yield _mk("backward", Lq=33, Lk=47, mask="random", **b)
    yield _mk("backward", Lq=33, Lk=47, mask="full_rows", **b)
    yield _mk("backward", Lq=33, Lk=47, softcap=5.0, **b)
    yield _mk("backward", Lq=33, Lk=47, bias="random", **b)
    yield _mk("backward", Lq=33, Lk=47, window=(8, 8), **b)
    yield _mk("backward", Lq=33, Lk=47, d=64, dv=32, backward=True)
    yield _mk("backward", B=3, Lq=64, Lk=64, seqlens_q=(37, 64, 1), seqlens_k=(64, 20, 50), causal=True, **b)
    yield _mk("backward", Lq=40, Lk=24, causal=True, dtype="bfloat16", **b)
    yield _mk("backward", Lq=33, Lk=47, scale=-0.125, dtype="float32", **b)
    if profile != "ci":
        for L in (127, 128, 129, 255, 257):
            yield _mk("backward", Lq=L, Lk=L, causal=True, dtype="bfloat16", **b)
        yield _mk("backward", Lq=129, Lk=129, d=256, dtype="bfloat16", backward=True, note="d=256 bwd (FA #1306)")


def _fp8(profile: str) -> Iterator[Case]:
    specs = [
        FP8Spec("e4m3fn", "per_tensor"),
        FP8Spec("e4m3fn", "per_head"),
        FP8Spec("e4m3fn", "per_tile", tile_q=32, tile_k=32),
        FP8Spec("e4m3fn", "per_tile", tile_q=32, tile_k=32, incoherent=True, hadamard_seed=1),
        FP8Spec("e4m3fn", "per_tensor", incoherent=True, hadamard_seed=2),
        FP8Spec("e5m2", "per_tensor"),
        FP8Spec("e5m2", "per_tile", tile_q=32, tile_k=32),
    ]
    for spec in specs:
        dt = "float8_" + spec.format
        yield _mk("fp8", Lq=64, Lk=96, d=64, dtype=dt, fp8=spec)
    yield _mk("fp8", Hq=4, Hkv=2, Lq=64, Lk=128, d=64, dtype="float8_e4m3fn", causal=True,
              fp8=FP8Spec("e4m3fn", "per_head"))
    yield _mk("fp8", Lq=64, Lk=96, d=64, dtype="float8_e4m3fn", distribution="outliers",
              fp8=FP8Spec("e4m3fn", "per_tile", tile_q=32, tile_k=32, incoherent=True, hadamard_seed=3))
    if profile != "ci":  # the family has its own profile (_OWN_PROFILE): these run in full and gpu
        # The FA3 paper's block quantization: descale blocks of 128 query rows / 128 keys (its B_r x d, B_c x d),
        # over several blocks and a partial last one, so a kernel whose tiles are those blocks meets them.
        yield _mk("fp8", Hq=4, Hkv=2, Lq=300, Lk=520, d=128, dtype="float8_e4m3fn", causal=True,
                  fp8=FP8Spec("e4m3fn", "per_tile", tile_q=128, tile_k=128))
        yield _mk("fp8", Lq=257, Lk=384, d=128, dtype="float8_e4m3fn", distribution="outliers",
                  fp8=FP8Spec("e4m3fn", "per_tile", tile_q=128, tile_k=128, incoherent=True, hadamard_seed=4))
        yield _mk("fp8", Lq=200, Lk=333, d=64, dtype="float8_e5m2", window=(40, 8),
                  fp8=FP8Spec("e5m2", "per_tile", tile_q=128, tile_k=128))
        yield _mk("fp8", Hq=4, Hkv=1, Lq=200, Lk=300, d=256, dtype="float8_e4m3fn", causal=True,
                  alignment="top_left", fp8=FP8Spec("e4m3fn", "per_tile", tile_q=128, tile_k=128))
        # Per-tensor descales (the only granularity of cuDNN's FP8 API) with what the cases above pair them with:
        # GQA, both causal alignments, several tiles with a partial last one, d = 128 / 256, e5m2, a bshd layout.
        yield _mk("fp8", Hq=4, Hkv=2, Lq=300, Lk=520, d=128, dtype="float8_e4m3fn", causal=True,
                  fp8=FP8Spec("e4m3fn", "per_tensor"))
        yield _mk("fp8", Hq=4, Hkv=1, Lq=200, Lk=300, d=256, dtype="float8_e5m2", causal=True, alignment="top_left",
                  layout="bshd", fp8=FP8Spec("e5m2", "per_tensor"))
        # Head dims that are not powers of two (no incoherent processing: its Hadamard rotation needs one).
        yield _mk("fp8", Hq=4, Hkv=2, Lq=300, Lk=520, d=96, dtype="float8_e4m3fn", causal=True,
                  fp8=FP8Spec("e4m3fn", "per_tile", tile_q=128, tile_k=128))
        yield _mk("fp8", Lq=200, Lk=333, d=96, dtype="float8_e5m2", window=(40, 8), fp8=FP8Spec("e5m2", "per_head"))
        yield _mk("fp8", Hq=4, Hkv=1, Lq=200, Lk=300, d=192, dtype="float8_e4m3fn", causal=True, alignment="top_left",
                  layout="bshd", fp8=FP8Spec("e4m3fn", "per_tensor"))
        yield _mk("fp8", Hq=4, Hkv=2, Lq=257, Lk=384, d=192, dtype="float8_e5m2",
                  fp8=FP8Spec("e5m2", "per_tile", tile_q=128, tile_k=128))


def _accumulation(profile: str) -> Iterator[Case]:
    """Long key ranges with positive V: low-precision accumulation of l or O stagnates here."""
    for dt in ("bfloat16", "float16", "float32"):
        yield _mk("accumulation", B=1, Hq=1, Hkv=1, Lq=8, Lk=4096, d=64, distribution="uniform", dtype=dt)
    yield _mk("accumulation", B=1, Hq=1, Hkv=1, Lq=16, Lk=2048, d=64, distribution="normal", dtype="bfloat16")


@functools.lru_cache(maxsize=1)
def _pair_rows() -> tuple[tuple[tuple[str, str], ...], ...]:
    """The covering design of the ``pairs`` family (computed once per process)."""
    factors = [(f.name, f.values) for f in features.PAIRWISE]
    rows = covering.covering_rows(factors, lambda a, x, b, y: features.forbidden(a, x, b, y) is None)
    return tuple(tuple(r.items()) for r in rows)


def _pairs(profile: str) -> Iterator[Case]:
    """Every pair of feature values that can meet, at least once together (`conformance.cases.features`).

    A pairwise covering design (`conformance.cases.covering`) over the features of `conformance.cases.features.PAIRWISE`
    (dtype, FP8 granularity, causal alignment, window bounds, mask, bias, softcap, GQA/MQA, dv vs d, varlen,
    layout incl. paged, backward, split-KV decoding shape) under `conformance.cases.features.CONSTRAINTS`, each
    row realized with small shapes (B=2, Hq=4, d=32, Lq x Lk = 24 x 40, 40 x 24, 2 x 160 or, paged, 24 x 100).
    Bugs that live in a combination of two features (a window ignored only with GQA, softcap skipped only with
    a bias) meet one of these cases; `conformance.reporting.coverage` checks that every claimable pair is covered.
    """
    for n, row in enumerate(_pair_rows()):
        yield features.realize("pairs", dict(row), index=n)


def _large(profile: str) -> Iterator[Case]:
    """Large shapes for a GPU run (the oracle still runs on the CPU, one query block at a time)."""
    if profile != "gpu":
        return
    shapes = [
        (1, 2, 2, 1024, 1024, 64, False, "float16"),
        (1, 2, 2, 2048, 2048, 128, True, "bfloat16"),
        (1, 4, 1, 4096, 4096, 128, True, "bfloat16"),
        (1, 1, 1, 4096, 4096, 256, False, "bfloat16"),
        (1, 1, 1, 8192, 8192, 128, True, "bfloat16"),
        (1, 1, 1, 8192, 8192, 64, True, "float16"),
        (1, 1, 1, 16384, 16384, 128, True, "bfloat16"),
        (1, 8, 1, 1, 16384, 128, True, "bfloat16"),
        (2, 8, 2, 4, 8192, 128, True, "float16"),
        (1, 2, 2, 2000, 3001, 96, True, "float16"),
    ]
    for B, hq, hkv, lq, lk, d, causal, dt in shapes:
        yield _mk("large", B=B, Hq=hq, Hkv=hkv, Lq=lq, Lk=lk, d=d, causal=causal, dtype=dt)
    yield _mk("large", Lq=2048, Lk=2048, d=128, causal=True, dtype="bfloat16", backward=True)
    yield _mk("large", Lq=4096, Lk=4096, d=64, dtype="float16", backward=True, Hq=1, Hkv=1)
    yield _mk("large", Lq=1024, Lk=1024, d=256, causal=True, dtype="bfloat16", backward=True)
    yield _mk("large", Lq=4096, Lk=4096, d=128, distribution="outliers", dtype="bfloat16", Hq=1, Hkv=1)
    yield _mk("large", Lq=64, Lk=16384, d=64, distribution="uniform", dtype="bfloat16", Hq=1, Hkv=1)


def _memory(profile: str) -> Iterator[Case]:
    """One shape at N, 2N, 4N: the growth exponent of peak device memory (conformance/verdict/growth.py, CUDA only)."""
    if profile != "gpu":
        return
    for n in (1024, 2048, 4096):
        yield _mk("memory", B=1, Hq=4, Hkv=4, Lq=n, Lk=n, d=64, dtype="float16")


def _sinks(profile: str) -> Iterator[Case]:
    """Attention sinks (SEMANTICS.md §18; flash-attention PR #2752, #1973, #2102): small, large (1e4: +inf LSE when
    the sink is not in the running max) and very negative logits, rows with no visible key (O = 0, LSE = sink),
    GQA/MQA, decoding through a split-KV combine (the sink joins once), backward with d sink, with and without
    an LSE cotangent."""
    for recipe in ("small", "large", "very_negative"):
        yield _mk("sinks", Lq=65, Lk=65, d=64, causal=True, sinks=recipe)
    yield _mk("sinks", Lq=40, Lk=24, causal=True, sinks="large", dtype="bfloat16", note="rows 0..15 see no key")
    yield _mk("sinks", Lq=40, Lk=40, mask="full_rows", sinks="small", note="empty rows: O = 0, LSE = sink")
    yield _mk("sinks", Lq=40, Lk=40, mask="full_rows", sinks="very_negative", dtype="float32")
    yield _mk("sinks", B=2, Lq=16, Lk=24, seqlens_k=(24, 0), sinks="small", note="batch 1 has no keys")
    yield _mk("sinks", Hq=8, Hkv=2, Lq=37, Lk=53, causal=True, sinks="small", note="GQA: one sink per query head")
    yield _mk("sinks", Hq=8, Hkv=1, Lq=1, Lk=257, d=64, causal=True, sinks="small", dtype="bfloat16",
              note="decoding, MQA")
    yield _mk("sinks", Lq=33, Lk=47, causal=True, sinks="small", backward=True)
    yield _mk("sinks", Lq=33, Lk=47, causal=True, sinks="small", backward=True, lse_grad=True,
              note="d sink needs its dLSE term")
    yield _mk("sinks", Hq=4, Hkv=2, Lq=40, Lk=24, causal=True, sinks="small", backward=True, lse_grad=True,
              dtype="bfloat16", note="GQA; rows 0..15 see no key: their d sink share is dlse")
    if profile != "ci":
        for dt in ("bfloat16", "float32"):
            for recipe in ("small", "large", "very_negative"):
                yield _mk("sinks", Hq=4, Hkv=1, Lq=129, Lk=129, d=64, causal=True, sinks=recipe, dtype=dt)
        yield _mk("sinks", Lq=65, Lk=129, d=64, window=(16, 0), sinks="small", backward=True, lse_grad=True)
        yield _mk("sinks", Lq=64, Lk=64, d=64, sinks="large", backward=True, lse_grad=True, dtype="bfloat16")


def _mla(profile: str) -> Iterator[Case]:
    """MLA shapes (DeepSeek-style latent attention): d=192/dv=128 and d=576/dv=512, decoding with Hkv = 1."""
    yield _mk("mla", Hq=4, Hkv=1, Lq=1, Lk=257, d=576, dv=512, causal=True, dtype="bfloat16")
    yield _mk("mla", Hq=4, Hkv=1, Lq=2, Lk=129, d=576, dv=512, causal=True, scale=1.0 / math.sqrt(192))
    yield _mk("mla", Hq=8, Hkv=1, Lq=1, Lk=300, d=192, dv=128, causal=True)
    yield _mk("mla", Lq=33, Lk=33, d=192, dv=128, causal=True, dtype="bfloat16")
    yield _mk("mla", Lq=33, Lk=47, d=192, dv=128, causal=True, backward=True)
    if profile != "ci":
        yield _mk("mla", B=2, Hq=16, Hkv=1, Lq=4, Lk=1000, d=576, dv=512, causal=True, dtype="bfloat16")
        yield _mk("mla", Hq=4, Hkv=1, Lq=1, Lk=257, d=576, dv=512, causal=True, sinks="small", dtype="bfloat16")
        yield _mk("mla", Hq=4, Hkv=4, Lq=129, Lk=129, d=192, dv=128, causal=True, dtype="bfloat16", backward=True)


def _chunked(profile: str) -> Iterator[Case]:
    """Chunked attention (SEMANTICS.md §19; Llama 4 ``attention_chunk``) across chunk edges, tile edges and both
    causal alignments; with a window, with sinks, decoding where the new queries straddle a chunk edge."""
    yield _mk("chunked", Lq=65, Lk=65, d=64, causal=True, chunk=16, note="edges at 16, 32, 48, 64")
    yield _mk("chunked", Lq=65, Lk=65, d=64, causal=True, chunk=64, note="the edge at the tile edge")
    yield _mk("chunked", Lq=40, Lk=53, causal=True, chunk=7, alignment="top_left")
    yield _mk("chunked", Lq=40, Lk=53, causal=True, chunk=7, note="bottom-right: aligned positions 13..52")
    yield _mk("chunked", Lq=4, Lk=98, d=64, causal=True, chunk=32, Hq=4, Hkv=1, note="queries at 94..97: edge 96")
    yield _mk("chunked", Lq=48, Lk=48, chunk=12, window=(5, 5), note="non-causal: the chunk's right edge too")
    yield _mk("chunked", Lq=48, Lk=48, causal=True, chunk=10, sinks="small", dtype="bfloat16")
    yield _mk("chunked", Lq=33, Lk=47, causal=True, chunk=9, backward=True)
    if profile != "ci":
        yield _mk("chunked", Lq=257, Lk=257, d=64, causal=True, chunk=128, dtype="bfloat16")
        yield _mk("chunked", B=3, Lq=64, Lk=64, causal=True, chunk=20, seqlens_q=(37, 64, 1), seqlens_k=(64, 20, 50))
        yield _mk("chunked", Lq=129, Lk=129, d=64, causal=True, chunk=33, backward=True, dtype="bfloat16")


def _kv_append(profile: str) -> Iterator[Case]:
    """KV-cache append (SEMANTICS.md §20, `flash_attn_with_kvcache`): the new rows go to cache_seqlens[b] and
    every slot past cache_seqlens + Lq holds NaN (flash-attention #1417: output depended on the cache length)."""
    yield _mk("kv_append", B=3, Hq=8, Hkv=2, Lq=1, Lk=300, d=64, causal=True, kv_append=(299, 100, 0))
    yield _mk("kv_append", B=2, Hq=4, Hkv=1, Lq=4, Lk=129, d=64, causal=True, kv_append=(60, 125), dtype="bfloat16")
    yield _mk("kv_append", B=2, Hq=4, Hkv=2, Lq=2, Lk=100, d=64, causal=True, kv_append=(31, 64), sinks="small")
    yield _mk("kv_append", B=2, Hq=4, Hkv=2, Lq=3, Lk=100, d=64, causal=True, kv_append=(30, 61), chunk=32,
              note="the new queries straddle a chunk edge")
    if profile != "ci":
        yield _mk("kv_append", B=2, Hq=8, Hkv=1, Lq=1, Lk=1000, d=128, causal=True, kv_append=(999, 512),
                  dtype="bfloat16")
        yield _mk("kv_append", B=2, Hq=4, Hkv=1, Lq=1, Lk=300, d=576, dv=512, causal=True, kv_append=(200, 17),
                  dtype="bfloat16", note="MLA decode step")


GROUPS: dict[str, Callable[[str], Iterable[Case]]] = {
    "worked": _worked,
    "tile_edges": _tile_edges,
    "causal_alignment": _causal_alignment,
    "masked_rows": _masked_rows,
    "decoding": _decoding,
    "gqa": _gqa,
    "head_dims": _head_dims,
    "scale": _scales,
    "softcap": _softcap,
    "distribution": _distributions,
    "layout": _layouts,
    "varlen": _varlen,
    "nan_padding": _nan_padding,
    "paged": _paged,
    "dtype": _dtypes,
    "mask_bias": _mask_bias,
    "window": _windows,
    "backward": _backward,
    "fp8": _fp8,
    "accumulation": _accumulation,
    "sinks": _sinks,
    "mla": _mla,
    "chunked": _chunked,
    "kv_append": _kv_append,
    "pairs": _pairs,
    "large": _large,
    "memory": _memory,
}


#: groups that build their gpu cases themselves (the others run their ci cases in the gpu profile)
_OWN_PROFILE = ("large", "paged", "memory", "fp8", "head_dims")


def _seeded(case: Case) -> Case:
    """Give the case a seed derived from its other semantic fields (stable across machines)."""
    unseeded = case.replace(seed=0)
    return case.replace(seed=zlib.crc32(repr(unseeded.key()).encode()) & 0x7FFFFFFF)


def cases(profile: str = "ci") -> list[Case]:
    """Every case of `profile`, in catalog order, ids unique."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILES}")
    seen: dict[str, Case] = {}
    base = "ci" if profile == "gpu" else profile
    for name, gen in GROUPS.items():
        for c in gen(profile if name in _OWN_PROFILE else base):
            for variant in _profile_variants(c, profile):
                variant = _seeded(variant)
                seen.setdefault(variant.id, variant)
    return list(seen.values())


def _profile_variants(case: Case, profile: str) -> Iterator[Case]:
    """The case itself and, in the gpu profile, a d=64 twin of every small-head structural case.

    The structural groups (causal alignment, masked rows, GQA, varlen, ...) use d=32 to stay cheap on
    the CPU, but production GPU kernels are compiled for head dims 64/128/256 only and would decline
    every one of them; the twin makes sure those semantics are exercised on such kernels too.
    """
    yield case
    if profile == "gpu" and case.d == 32 and case.dv == 32 and case.family != "head_dims":
        yield case.replace(d=64, dv=64)


def case_by_id(case_id: str) -> Case:
    """Rebuild a case from its id (searches every profile; ids are unique)."""
    for profile in PROFILES[::-1]:
        for c in cases(profile):
            if c.id == case_id:
                return c
    raise KeyError(f"no case with id {case_id!r} in any profile {PROFILES}")


def select(items: Iterable[Case], expr: str | None) -> list[Case]:
    """Cases whose id the ``-k`` expression selects (`conformance.cases.selection`: names as case-insensitive
    substrings of the id, joined by and/or/not and parentheses; parsed, never evaluated).

    Raises `conformance.cases.selection.SelectorError` (a ValueError, one line) for a malformed expression.
    """
    return selection.select(items, expr, key=lambda c: c.id)


def estimated_cost(case: Case) -> float:
    """Relative cost (score-matrix multiply-adds), used to order work largest first."""
    work = case.B * case.Hq * max(case.Lq, 1) * max(case.Lk, 1) * (case.d + case.dv)
    return float(work * (3 if case.backward else 1))


def case_marks(case: Case) -> tuple[str, ...]:
    """pytest markers of a case: fp8, backward, slow (big), gpu (too big for a CPU run)."""
    marks = []
    if case.fp8 is not None:
        marks.append("fp8")
    if case.backward:
        marks.append("backward")
    cost = estimated_cost(case)
    if cost > 5e7:
        marks.append("slow")
    if case.family in ("large", "memory"):
        marks.append("gpu")
    return tuple(marks)
