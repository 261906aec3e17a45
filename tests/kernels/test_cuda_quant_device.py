"""GPU tests of the FP8 input kernels (kernels/cuda/hadamard.cu through kernels/cuda_quant.py): bit-compatibility
with oracles/fp8.py (SEMANTICS.md §10, §11).

The kernels compute in float64 with the oracle's operations in the oracle's order, so nothing is exempt: every
code equals the oracle's (NaN where the oracle has NaN), every float64 descale equals the oracle's, every float32
descale is its rounding, and the standalone transform equals the oracle's float64 transform rounded once. The
tests count mismatches and require zero. Marked ``gpu``; skipped without a CUDA device or the kernel library.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import cuda_library_exporting_or_skip

from attention_conformance.kernels.emulate import round_exact
from attention_conformance.oracles import fp8

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@pytest.fixture(scope="module")
def cq():
    cuda_library_exporting_or_skip("attn_fp8_quantize")
    from attention_conformance.kernels import cuda_quant

    return cuda_quant


def _paper_inputs(shape, seed, outliers=True):
    """N(0, 1) plus N(0, 10^2) on 0.1% of the entries (FA3 Table 3's distribution)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if outliers:
        x += np.where(rng.random(shape) < 1e-3, rng.normal(0.0, 10.0, shape), 0.0)
    return x


def _gpu(x, dtype, layout="bhsd"):
    """x as a CUDA tensor of ``dtype`` (values rounded by torch) in [B, H, L, D] (or a [B, L, H, D] view)."""
    t = torch.from_numpy(np.ascontiguousarray(x)).to(TORCH_DTYPES[dtype])
    if layout == "bshd":
        t = t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.cuda()


def _mismatches(got, ref):
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    same = (got == ref) & (np.signbit(got) == np.signbit(ref)) | (np.isnan(got) & np.isnan(ref))
    return int((~same).sum()), np.argwhere(~same)[:3].tolist()


def _compare(cq, got, ref, what):
    """Codes and descales of one `cuda_quant.quantize_attention_inputs` result against the oracle's dict."""
    problems = []
    for n in ("q", "k", "v"):
        bad, where = _mismatches(got[f"{n}8"].cpu().double().numpy(), ref[f"{n}8"])
        if bad:
            problems.append(f"{n}8: {bad} of {ref[f'{n}8'].size} codes differ, first at {where}")
        d64 = got[f"{n}_descale64"].cpu().numpy()
        bad, where = _mismatches(d64, ref[f"{n}_descale"])
        if bad:
            problems.append(f"{n}_descale64: {bad} differ from the oracle's float64 descale, first at {where}")
        bad, where = _mismatches(got[f"{n}_descale"].cpu().double().numpy(),
                                 np.asarray(ref[f"{n}_descale"], dtype=np.float32))
        if bad:
            problems.append(f"{n}_descale: {bad} are not the float32 rounding of the oracle's, first at {where}")
    if got["incoherent"]:
        np.testing.assert_array_equal(got["signs"], ref["signs"])
    assert not problems, f"{what}: " + "; ".join(problems)


QUANT_CASES = [  # shape (B, Hq, Hkv, Lq, Lk, d), tiles (tile_q, tile_k)
    dict(shape=(2, 4, 2, 200, 333, 128), tiles=(128, 128)),   # GQA, short last tiles
    dict(shape=(1, 2, 1, 64, 96, 64), tiles=(32, 32)),        # the conformance catalog's FP8 tiles
    dict(shape=(2, 2, 2, 130, 77, 256), tiles=(64, 48)),      # d = 256, unequal tiles
    dict(shape=(1, 3, 3, 5, 9, 32), tiles=(1, 4)),            # d = 32, tiny tiles
]


@pytest.mark.parametrize("case", range(len(QUANT_CASES)))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("granularity", ["per_tensor", "per_head", "per_tile"])
@pytest.mark.parametrize("incoherent", [False, True], ids=["plain", "hadamard"])
def test_codes_and_descales_equal_the_oracle(cq, case, dtype, granularity, incoherent):
    spec = QUANT_CASES[case]
    B, Hq, Hkv, Lq, Lk, d = spec["shape"]
    seed = 17 * case + 3
    q = _gpu(_paper_inputs((B, Hq, Lq, d), seed), dtype, layout="bshd" if case == 0 else "bhsd")
    k = _gpu(_paper_inputs((B, Hkv, Lk, d), seed + 1), dtype)
    v = _gpu(_paper_inputs((B, Hkv, Lk, d), seed + 2), dtype)
    for fmt in ("e4m3fn", "e5m2"):
        kw = dict(format=fmt, granularity=granularity, tile_q=spec["tiles"][0], tile_k=spec["tiles"][1],
                  incoherent=incoherent, seed=seed)
        got = cq.quantize_attention_inputs(q, k, v, **kw)
        ref = fp8.quantize_attention_inputs(*(t.cpu().double().numpy() for t in (q, k, v)), **kw)
        _compare(cq, got, ref, f"case {case} {dtype} {kw}")


def test_round_half_even_ties_and_subnormals(cq):
    """Values that land exactly on e4m3 / e5m2 midpoints (descale 1: amax = fmax) and in the subnormal range."""
    for fmt in ("e4m3fn", "e5m2"):
        fdt = torch.float8_e4m3fn if fmt == "e4m3fn" else torch.float8_e5m2
        grid = np.unique(torch.arange(256, dtype=torch.uint8).view(fdt).double().numpy())
        grid = grid[np.isfinite(grid)]
        mids = (grid[1:] + grid[:-1]) / 2
        vals = np.concatenate([grid, mids])
        vals = vals[np.abs(vals) <= fp8.fp8_max(fmt)]
        x32 = vals.astype(np.float32)  # midpoints of 3- or 2-bit grids are exact in float32
        assert np.array_equal(x32.astype(np.float64), vals)
        n = -(-x32.size // 64) * 64
        x = np.zeros(n)
        x[:x32.size] = x32
        x[-1] = fp8.fp8_max(fmt)  # amax = fmax: descale exactly 1, so x / descale is the tie itself
        t = torch.from_numpy(x.reshape(1, 1, -1, 64)).float().cuda()
        codes, descale, _ = cq.quantize(t, format=fmt, granularity="per_tensor")
        ref, ref_d = fp8.quantize(x.reshape(1, 1, -1, 64), format=fmt, granularity="per_tensor")
        assert float(ref_d) == 1.0 and float(descale) == 1.0
        bad, where = _mismatches(codes.cpu().double().numpy(), ref)
        assert bad == 0, f"{fmt}: {bad} of {x.size} tie / subnormal codes differ from round_fp8, first at {where}"


def test_nan_inf_and_zero_blocks_follow_the_oracle(cq):
    """A NaN makes its block's amax NaN, so descale 1 (the oracle's where(amax > 0)); inf saturates; zeros: 1."""
    x = _paper_inputs((1, 2, 128, 64), 5)
    x[0, 0, 3, 7] = np.nan
    x[0, 1, 70, 1] = np.inf
    x[0, 1, 0:64] = 0.0
    for granularity in ("per_tensor", "per_head", "per_tile"):
        t = torch.from_numpy(x).float().cuda()
        codes, descale, descale64 = cq.quantize(t, granularity=granularity, tile=64)
        ref, ref_d = fp8.quantize(x.astype(np.float32).astype(np.float64), granularity=granularity, tile=64)
        assert _mismatches(codes.cpu().double().numpy(), ref)[0] == 0, granularity
        assert _mismatches(descale64.cpu().numpy(), ref_d)[0] == 0, (granularity, descale64, ref_d)


@pytest.mark.parametrize("d", [32, 64, 128, 256, 512])
@pytest.mark.parametrize("dtype,out", [("float16", None), ("bfloat16", None), ("float32", None),
                                       ("bfloat16", "float32"), ("float16", "float32")])
def test_hadamard_alone_is_the_oracle_transform_rounded_once(cq, d, dtype, out):
    x = _gpu(_paper_inputs((2, 3, 37, d), d), dtype, layout="bshd")
    signs = fp8.hadamard_signs(d, seed=d + 1)
    y = cq.hadamard(x, signs, out_dtype=None if out is None else TORCH_DTYPES[out])
    ref = fp8.random_hadamard(x.cpu().double().numpy(), signs)
    ref = round_exact(ref, out or dtype)
    bad, where = _mismatches(y.cpu().double().numpy(), ref)
    assert bad == 0, f"d={d} {dtype}->{out or dtype}: {bad} of {ref.size} entries differ, first at {where}"


def test_other_seed_gives_other_codes(cq):
    """The signs matter: a different seed changes the rotated codes (a kernel ignoring the signs fails here)."""
    q = _gpu(_paper_inputs((1, 1, 64, 128), 1), "bfloat16")
    a = cq.quantize_attention_inputs(q, q, q, incoherent=True, seed=0)
    b = cq.quantize_attention_inputs(q, q, q, incoherent=True, seed=1)
    assert not torch.equal(a["q8"].view(torch.uint8), b["q8"].view(torch.uint8))
    ref = fp8.quantize_attention_inputs(*(q.cpu().double().numpy(),) * 3, incoherent=True, seed=1)
    assert _mismatches(b["q8"].cpu().double().numpy(), ref["q8"])[0] == 0


def test_launcher_rejects_bad_signs_on_the_device_path(cq):
    from attention_conformance.kernels import cuda_lib

    x = torch.zeros(1, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
    p = cq.HadamardParams()
    y = torch.empty_like(x)
    s = np.ones(64, dtype=np.float32)
    s[9] = 0.5
    p.x, p.y = x.data_ptr(), y.data_ptr()
    p.x_batch_stride, p.x_head_stride, p.x_row_stride = x.stride(0), x.stride(1), x.stride(2)
    p.y_batch_stride, p.y_head_stride, p.y_row_stride = y.stride(0), y.stride(1), y.stride(2)
    p.batch, p.heads, p.seqlen, p.head_dim = 1, 1, 8, 64
    p.x_dtype = p.y_dtype = 1
    p.signs = s.ctypes.data
    with pytest.raises(cuda_lib.KernelError, match=r"signs\[9\]"):
        cuda_lib.call("attn_hadamard", p)
