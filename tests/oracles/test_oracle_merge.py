"""Split-KV partials and merge (SEMANTICS.md §14): every contiguous partition, any order, empty splits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from oracle_helpers import rand_qkv

from attention_conformance import oracles

TOL = 1e-12


def _partitions(L: int):
    """All 2^(L-1) partitions of [0, L) into non-empty contiguous splits, as edge lists."""
    for r in range(L):
        for cuts in itertools.combinations(range(1, L), r):
            yield [0, *cuts, L]


@pytest.mark.parametrize(
    "kw",
    [{}, {"causal": True}, {"window": (1, 0), "alignment": "top_left"}, {"seqlens_q": [2, 4], "seqlens_k": [5, 3]}],
    ids=["plain", "causal", "window_top_left", "varlen"],
)
def test_merge_every_partition_equals_dense(kw):
    L = 6
    q, k, v = rand_qkv(B=2, Hq=2, Hkv=1, Lq=4, Lk=L, d=3, dv=2, seed=8)
    out, lse = oracles.attention(q, k, v, **kw)
    rng = np.random.default_rng(0)
    count = 0
    for edges in _partitions(L):
        outs, lses = oracles.split_partials(q, k, v, edges, **kw)
        perm = rng.permutation(len(outs))  # any order (§14)
        mo, ml = oracles.merge_partials(outs[perm], lses[perm])
        np.testing.assert_array_equal(np.isneginf(ml), np.isneginf(lse), err_msg=f"edges={edges}")
        fin = np.isfinite(lse)
        err = max(np.abs(mo - out).max(), np.abs(ml[fin] - lse[fin]).max(initial=0.0))
        assert err <= TOL, f"edges={edges}, order={perm.tolist()}: max |merged - dense| = {err:.3e} > {TOL:g}"
        count += 1
    assert count == 2 ** (L - 1)


def test_merge_with_empty_splits_ignores_their_outputs():
    q, k, v = rand_qkv(B=1, Hq=2, Hkv=2, Lq=3, Lk=5, d=2, seed=1)
    out, lse = oracles.attention(q, k, v, causal=True)
    outs, lses = oracles.split_partials(q, k, v, [0, 0, 2, 2, 5, 5], causal=True)
    assert np.all(np.isneginf(lses[[0, 2, 4]]))
    outs[[0, 2, 4]] = np.nan  # garbage in empty splits must not matter (§14)
    mo, ml = oracles.merge_partials(outs[::-1], lses[::-1])
    np.testing.assert_allclose(mo, out, rtol=0, atol=TOL)
    np.testing.assert_allclose(ml, lse, rtol=0, atol=TOL)


def test_merge_all_empty_gives_zero_and_neg_inf():
    outs = np.full((3, 2, 4, 5), np.nan)
    lses = np.full((3, 2, 4), -np.inf)
    mo, ml = oracles.merge_partials(outs, lses)
    assert np.all(mo == 0) and np.all(np.isneginf(ml))


def test_merge_single_split_is_identity():
    outs = np.random.default_rng(0).standard_normal((1, 3, 2))
    lses = np.array([[0.5, -np.inf, 3.0]])
    mo, ml = oracles.merge_partials(outs, lses)
    np.testing.assert_array_equal(ml, lses[0])
    np.testing.assert_allclose(mo, np.where(np.isinf(lses[0])[:, None], 0.0, outs[0]), rtol=0, atol=1e-15)


def test_merge_of_merges_is_associative():
    q, k, v = rand_qkv(B=1, Hq=1, Hkv=1, Lq=4, Lk=6, d=2, seed=6)
    outs, lses = oracles.split_partials(q, k, v, [0, 1, 3, 4, 6])
    a = oracles.merge_partials(outs[:2], lses[:2])
    b = oracles.merge_partials(outs[2:], lses[2:])
    nested = oracles.merge_partials(np.stack([a[0], b[0]]), np.stack([a[1], b[1]]))
    flat = oracles.merge_partials(outs, lses)
    np.testing.assert_allclose(nested[0], flat[0], rtol=0, atol=TOL)
    np.testing.assert_allclose(nested[1], flat[1], rtol=0, atol=TOL)
