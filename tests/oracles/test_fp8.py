"""FP8 quantization and incoherent processing: oracles.fp8 and oracles.hadamard (SEMANTICS.md §10-§11)."""

from __future__ import annotations

import itertools
import re

import ml_dtypes
import numpy as np
import pytest

from attention_conformance.oracles import fp8, hadamard

ML = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
FMAX = {"e4m3fn": 448.0, "e5m2": 57344.0}


def _grid(fmt: str) -> np.ndarray:
    """Every finite value of the format, from its bit patterns."""
    bits = np.arange(256, dtype=np.uint8).view(ML[fmt]).astype(np.float64)
    return np.unique(bits[np.isfinite(bits)])


def _qkv(seed=0, B=2, Hq=4, Hkv=2, Lq=37, Lk=45, d=16, dv=8, outliers=True):
    rng = np.random.default_rng(seed)
    arrs = [rng.standard_normal((B, Hq, Lq, d)), rng.standard_normal((B, Hkv, Lk, d)),
            rng.standard_normal((B, Hkv, Lk, dv))]
    if outliers:
        for a in arrs:
            a[rng.random(a.shape) < 0.01] *= 30.0
    return arrs


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_round_fp8_matches_ml_dtypes_on_float32_values(fmt):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(20000) * s for s in (1e-4, 1e-2, 1, 30, 300)]).astype(np.float32)
    x = x[np.abs(x) <= FMAX[fmt]]  # ml_dtypes does not saturate; inside the range the roundings must agree
    got = fp8.round_fp8(x.astype(np.float64), fmt)
    want = x.astype(ML[fmt]).astype(np.float64)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{fmt}: round_fp8({x[bad[0]]!r}) = {got[bad[0]]!r}, ml_dtypes gives {want[bad[0]]!r}"


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_every_grid_value_is_a_fixed_point_and_results_are_representable(fmt):
    grid = _grid(fmt)
    assert grid.max() == FMAX[fmt] and grid.min() == -FMAX[fmt]
    assert np.array_equal(fp8.round_fp8(grid, fmt), grid), f"{fmt}: a grid value moved under rounding"
    x = np.random.default_rng(2).standard_normal(5000) * 100
    r = fp8.round_fp8(x, fmt)
    assert np.isin(r, grid).all(), f"{fmt}: rounded values not on the grid, e.g. {r[~np.isin(r, grid)][:3]}"


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_round_to_nearest_even_ties_exact(fmt):
    grid = _grid(fmt)
    lo, hi = grid[:-1], grid[1:]
    mid = (lo + hi) / 2  # exact in float64
    r = fp8.round_fp8(mid, fmt)
    # the even neighbour has an even code: mantissa lsb 0
    codes_lo = np.abs(lo).astype(ML[fmt]).view(np.uint8)
    expect = np.where(codes_lo % 2 == 0, lo, hi)
    bad = np.flatnonzero(r != expect)
    assert bad.size == 0, f"{fmt}: tie {mid[bad[0]]!r} rounded to {r[bad[0]]!r}, expected {expect[bad[0]]!r}"
    # just above / below a tie goes to the nearest, with no double rounding through float32
    assert fp8.round_fp8(np.array([1.0625 + 1e-12]), "e4m3fn")[0] == 1.125
    assert fp8.round_fp8(np.array([1.0625 - 1e-12]), "e4m3fn")[0] == 1.0


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_saturation(fmt):
    m = FMAX[fmt]
    x = np.array([m, m * 1.01, m * 1.2, 1e30, np.inf, -m * 1.2, -np.inf, np.nan])
    r = fp8.round_fp8(x, fmt)
    assert np.array_equal(r[:7], [m, m, m, m, m, -m, -m]), f"{fmt}: saturation gave {r}"
    assert np.isnan(r[7]), "NaN must stay NaN"
    assert fp8.fp8_max(fmt) == m


@pytest.mark.parametrize("incoherent", [False, True])
@pytest.mark.parametrize("granularity", ["per_tensor", "per_head", "per_tile"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_quantize_attention_inputs_contract(fmt, granularity, incoherent):
    q, k, v = _qkv()
    out = fp8.quantize_attention_inputs(q, k, v, format=fmt, granularity=granularity, tile_q=16, tile_k=8,
                                        incoherent=incoherent, seed=3)
    B, Hq, Lq, _ = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    nq, nk = -(-Lq // 16), -(-Lk // 8)  # 3 and 6 tiles, each with a short last tile
    shapes = {"per_tensor": ((), (), ()), "per_head": ((B, Hkv), (B, Hkv), (B, Hkv)),
              "per_tile": ((B, Hq, nq), (B, Hkv, nk), (B, Hkv, nk))}[granularity]
    grid = _grid(fmt)
    for name, shape in zip("qkv", shapes):
        codes, desc = out[name + "8"], out[name + "_descale"]
        assert desc.shape == shape, f"{granularity}: {name}_descale shape {desc.shape} != {shape}"
        assert codes.dtype == np.float64 and np.isin(codes, grid).all(), f"{name}8 not on the {fmt} grid"
        assert np.abs(codes).max() == FMAX[fmt], f"{name}8: the block amax must map to +-fmax exactly"
        group = Hq // Hkv if name == "q" else 1
        tile = 16 if name == "q" else 8
        assert np.array_equal(out[name], fp8.dequantize(codes, desc, group=group, tile=tile)), f"{name} != dq * {name}8"
    if granularity == "per_head":  # Q's descale is shared by the query heads of a kv group
        group_amax = np.abs(out["q"]).reshape(B, Hkv, -1).max(axis=2)
        assert np.allclose(out["q_descale"], group_amax / FMAX[fmt], rtol=0.07), "Q descale not per (b, kv group)"
    assert out["format"] == fmt and out["granularity"] == granularity and out["incoherent"] == incoherent
    assert (out["signs"] is not None) == incoherent
    # quantization error is bounded by the format's relative precision of the block scale
    src_q = hadamard.random_hadamard(q, out["signs"]) if incoherent else q
    rel = {"e4m3fn": 2.0**-4, "e5m2": 2.0**-3}[fmt]
    assert np.abs(out["q"] - src_q).max() <= rel * np.abs(src_q).max() + 1e-12
    assert np.array_equal(out["v"], fp8.dequantize(out["v8"], out["v_descale"], tile=8))


def test_zero_block_gets_descale_one_and_inputs_unchanged():
    q, k, v = _qkv(outliers=False)
    q[0] = 0.0
    before = [a.copy() for a in (q, k, v)]
    out = fp8.quantize_attention_inputs(q, k, v, granularity="per_head")
    assert np.all(out["q_descale"][0] == 1.0) and np.all(out["q8"][0] == 0.0)
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v), before)), "inputs were modified"


@pytest.mark.parametrize("d", [1, 2, 4, 16, 128])
def test_fwht_equals_dense_hadamard(d):
    x = np.random.default_rng(d).standard_normal((3, 5, d))
    H = hadamard.hadamard_matrix(d)
    assert np.array_equal(H, H.T) and np.array_equal(H @ H.T, d * np.eye(d))
    assert np.allclose(hadamard.fwht(x), x @ H, atol=1e-12), f"FWHT != x @ H_{d}"


@pytest.mark.parametrize("d", [8, 64])
def test_random_hadamard_is_orthogonal_and_keeps_qk(d):
    signs = hadamard.hadamard_signs(d, seed=5)
    assert set(np.unique(signs)) <= {-1.0, 1.0} and signs.shape == (d,)
    assert np.array_equal(signs, hadamard.hadamard_signs(d, seed=5)), "signs must be a function of the seed"
    assert not np.array_equal(signs, hadamard.hadamard_signs(d, seed=6)) or d < 8
    M = hadamard.random_hadamard(np.eye(d), signs)
    assert np.allclose(M, hadamard.hadamard_matrix(d) * signs / np.sqrt(d), atol=1e-15), "M != H diag(s) / sqrt(d)"
    assert np.allclose(M @ M.T, np.eye(d), atol=1e-12), "M must be orthogonal"
    q, k, _ = _qkv(d=d)
    qm, km = hadamard.random_hadamard(q, signs), hadamard.random_hadamard(k, signs)
    assert np.allclose(qm[:, :2] @ np.swapaxes(km, -1, -2), q[:, :2] @ np.swapaxes(k, -1, -2), atol=1e-10)


def test_incoherent_processing_spreads_outliers():
    q = np.zeros((1, 1, 4, 64))
    q[0, 0, :, 3] = 100.0
    qm = hadamard.random_hadamard(q, hadamard.hadamard_signs(64, 0))
    assert np.allclose(np.abs(qm), 100.0 / 8.0), "a single outlier channel must spread evenly over d entries"


def test_errors_name_the_argument():
    q, k, v = _qkv()
    shapes = rf"q.shape={re.escape(str(q.shape))}, k.shape={re.escape(str(k.shape))}"
    with pytest.raises(ValueError, match=rf"format='e3m4' is not a known FP8 format.*{shapes}"):
        fp8.quantize_attention_inputs(q, k, v, format="e3m4")
    with pytest.raises(ValueError, match=rf"granularity='per_row' is not known.*{shapes}"):
        fp8.quantize_attention_inputs(q, k, v, granularity="per_row")
    with pytest.raises(ValueError, match=r"format='e3m4' is not a known FP8 format.*x.shape=\("):
        fp8.quantize(q, format="e3m4")
    with pytest.raises(ValueError, match=r"power of two.*q.shape=\(2, 4, 37, 12\)"):
        fp8.quantize_attention_inputs(q[..., :12], k[..., :12], v, incoherent=True)
    with pytest.raises(ValueError, match="rank 4"):
        fp8.quantize_attention_inputs(q[0], k, v)
    with pytest.raises(ValueError, match="tile_q"):
        fp8.quantize_attention_inputs(q, k, v, granularity="per_tile", tile_q=0)
    with pytest.raises(ValueError, match="Hq"):
        fp8.quantize_attention_inputs(q[:, :3], k, v)
    with pytest.raises(ValueError, match="format"):
        fp8.round_fp8(np.ones(2), "int8")
    with pytest.raises(ValueError, match="signs"):
        hadamard.random_hadamard(q, np.ones(3))


@pytest.mark.parametrize("fmt,gran", list(itertools.product(["e4m3fn", "float8_e5m2"], ["per_tile"])))
def test_format_aliases(fmt, gran):
    q, k, v = _qkv()
    out = fp8.quantize_attention_inputs(q, k, v, format=fmt, granularity=gran)
    assert out["format"] in ("e4m3fn", "e5m2")
