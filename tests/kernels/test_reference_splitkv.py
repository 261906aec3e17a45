"""Split-KV (Flash-Decoding) reference: partials and combine (oracles/SEMANTICS.md §14).

float64 emulation: the combined output equals the oracle to 1e-12 for any number of splits
(including more splits than K/V tiles, i.e. empty splits), each split's partial equals the oracle's
partial over the same key range, and `combine` equals `oracles.merge_partials`.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import make_case

from attention_conformance import oracles
from attention_conformance.kernels.reference import splitkv


@pytest.mark.parametrize("num_splits", [1, 2, 3, 4, 7, 64])
@pytest.mark.parametrize("name", ["plain", "causal_br_lq_gt_lk", "varlen_causal", "everything", "all_masked_rows"])
def test_any_number_of_splits_matches_oracle(name, num_splits):
    arrays, kw, _ = make_case(name)
    ref_out, ref_lse = oracles.attention(arrays["q"], arrays["k"], arrays["v"], **kw)
    out, lse = splitkv.forward(arrays["q"], arrays["k"], arrays["v"], **kw, block_k=8, dtype="float64",
                               num_splits=num_splits)
    err = np.abs(out - ref_out).max()
    assert err <= 1e-12, f"splitkv {name} num_splits={num_splits}: max |O - O_ref| = {err:.3e} > 1e-12"
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), f"{name}/{num_splits}: -inf LSE pattern differs"
    fin = np.isfinite(ref_lse)
    lerr = np.abs(lse[fin] - ref_lse[fin]).max()
    assert lerr <= 1e-12, f"splitkv {name} num_splits={num_splits}: max |LSE - LSE_ref| = {lerr:.3e} > 1e-12"


@pytest.mark.parametrize("num_splits", [2, 5, 9])
def test_partials_match_oracle_partials(num_splits):
    arrays, kw, shape = make_case("everything")
    ranges = splitkv.split_ranges(shape["Lk"], 8, num_splits)
    outs, lses = splitkv.forward_partials(arrays["q"], arrays["k"], arrays["v"], **kw, block_k=8, dtype="float64",
                                          num_splits=num_splits)
    bounds = [r[0] for r in ranges] + [ranges[-1][1]]
    ref_outs, ref_lses = oracles.split_partials(arrays["q"], arrays["k"], arrays["v"], bounds, **kw)
    assert outs.shape == ref_outs.shape, f"partials shape {outs.shape} != oracle {ref_outs.shape}"
    for s in range(num_splits):
        empty = np.isneginf(ref_lses[s])
        assert np.array_equal(np.isneginf(lses[s]), empty), f"split {s} {ranges[s]}: -inf LSE pattern differs"
        err = np.abs(outs[s] - ref_outs[s])[~empty].max(initial=0.0)
        assert err <= 1e-12, f"split {s} keys {ranges[s]}: max |O_s - ref| = {err:.3e} > 1e-12"
        assert np.all(outs[s][empty] == 0), f"split {s}: empty rows of a partial must be 0"


def test_split_ranges_cover_keys_in_whole_tiles():
    for Lk in (0, 1, 7, 8, 9, 100):
        for n in (1, 2, 3, 13):
            r = splitkv.split_ranges(Lk, 8, n)
            assert len(r) == n and r[0][0] == 0 and r[-1][1] == Lk, f"Lk={Lk} n={n}: ranges {r}"
            assert all(a[1] == b[0] for a, b in zip(r, r[1:])), f"Lk={Lk} n={n}: not contiguous {r}"
            assert all(s % 8 == 0 for s, _ in r if s < Lk), f"Lk={Lk} n={n}: split not at a tile start {r}"
    with pytest.raises(ValueError, match="num_splits"):
        splitkv.split_ranges(10, 8, 0)


def test_combine_matches_oracle_merge_with_empty_splits():
    rng = np.random.default_rng(3)
    outs = rng.standard_normal((4, 2, 3, 5, 6))
    lses = rng.standard_normal((4, 2, 3, 5)) * 3
    lses[1] = -np.inf
    lses[:, 0, 0, 0] = -np.inf
    outs[1] = np.nan  # an empty split's O must be selected out, not multiplied (§14)
    out, lse = splitkv.combine(outs, lses)
    ref_out, ref_lse = oracles.merge_partials(outs, lses)
    assert np.isfinite(out).all(), "combine let the NaN partial of an empty split through"
    assert np.abs(out - ref_out).max() <= 1e-12, f"combine vs merge_partials: {np.abs(out - ref_out).max():.3e}"
    assert lse[0, 0, 0] == -np.inf and np.all(out[0, 0, 0] == 0), "all-empty row must give O = 0, LSE = -inf"
    fin = np.isfinite(ref_lse)
    assert np.abs(lse[fin] - ref_lse[fin]).max() <= 1e-12


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_splits_agree_with_fa2_in_low_precision(dtype):
    from attention_conformance.kernels.reference import fa2

    arrays, kw, _ = make_case("causal_br_lq_gt_lk")
    base, _ = fa2.forward(arrays["q"], arrays["k"], arrays["v"], **kw, block_k=8, dtype=dtype)
    for n in (1, 2, 5):
        out, _ = splitkv.forward(arrays["q"], arrays["k"], arrays["v"], **kw, block_k=8, dtype=dtype, num_splits=n)
        if n == 1:
            assert np.array_equal(out, base), "one split must reproduce the FA2 loop bit for bit"
        err = np.abs(np.asarray(out, np.float64) - np.asarray(base, np.float64)).max()
        assert err <= 4 * 2.0**-8 * np.abs(arrays["v"]).max(), f"num_splits={n}: {err:.3e} from FA2 in {dtype}"
