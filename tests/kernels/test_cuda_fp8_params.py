"""CPU tests of the FP8 forward's ABI (kernels/cuda/include/attn_params.h AttnFp8FwdParams, kernels/cuda_lib.py):
the ctypes mirror against the C header (gcc) and the compiled library, and `fp8_fwd_params`' argument checks."""

from __future__ import annotations

import pytest
from kernel_helpers import c_header_values, cuda_library_or_skip

from attention_conformance.kernels import cuda_lib

torch = pytest.importorskip("torch")


def _c_layout() -> list[int]:
    lines = ['printf("%d %zu\\n", ATTN_FP8_PARAMS_VERSION, sizeof(AttnFp8FwdParams));']
    lines += [f'printf("%zu\\n", offsetof(AttnFp8FwdParams, {n}));' for n, _ in cuda_lib.AttnFp8FwdParams._fields_]
    lines += ['printf("%zu\\n", sizeof(AttnFp8PackVtParams));']
    lines += [f'printf("%zu\\n", offsetof(AttnFp8PackVtParams, {n}));'
              for n, _ in cuda_lib.AttnFp8PackVtParams._fields_]
    lines += [f'printf("%d\\n", {c});' for c in ("ATTN_FP8_E4M3FN", "ATTN_FP8_E5M2", "ATTN_FP8_PER_TENSOR",
                                                 "ATTN_FP8_PER_HEAD", "ATTN_FP8_PER_TILE", "ATTN_FP8_V_ROWS",
                                                 "ATTN_FP8_V_KMAJOR")]
    lines += [f'printf("%d\\n", ATTN_FP8_VT_KEY({p}));' for p in range(16)]
    return c_header_values(lines)


def test_fp8_mirror_matches_c_header():
    c = _c_layout()
    n = len(cuda_lib.fp8_mirror_layout())
    assert c[:n] == cuda_lib.fp8_mirror_layout(), "attn_params.h AttnFp8FwdParams / AttnFp8PackVtParams and " \
                                                  "kernels/cuda_lib.py disagree"
    codes = [*cuda_lib.FP8_FORMAT_CODES.values(), *cuda_lib.FP8_GRANULARITY_CODES.values(),
             *cuda_lib.FP8_V_LAYOUT_CODES.values(), *cuda_lib.VT_KEY_ORDER]
    assert c[n:] == codes, f"enum values / ATTN_FP8_VT_KEY: header {c[n:]} vs cuda_lib {codes}"


def test_vt_key_order_is_a_permutation_of_each_16_key_group():
    assert sorted(cuda_lib.VT_KEY_ORDER) == list(range(16))
    # positions 4t + e of a thread's k32 A fragment hold its accumulator keys 2t + {0, 1} and 8 + 2t + {0, 1}
    for t in range(4):
        assert cuda_lib.VT_KEY_ORDER[4 * t:4 * t + 4] == (2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)


def test_pack_vt_reference_layout():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    v = rng.integers(1, 255, size=(2, 3, 37, 16)).astype(np.uint8)
    vt = cuda_lib.pack_vt_reference(v, seqlens_k=[37, 20])
    assert vt.shape == (2, 3, 16, 48)
    for b, n in ((0, 37), (1, 20)):
        for pos in range(48):
            key = 16 * (pos // 16) + cuda_lib.VT_KEY_ORDER[pos % 16]
            want = v[b, :, key, :] if key < n else np.zeros((3, 16), np.uint8)
            assert (vt[b, :, :, pos] == want).all(), (b, pos, key)


def test_fp8_mirror_matches_compiled_library():
    lib = cuda_library_or_skip()
    if getattr(lib, "attn_fp8_params_layout", None) is None:
        pytest.skip("library predates attn_fa3_fp8_fwd (rebuild it)")
    assert cuda_lib.compiled_fp8_layout() == cuda_lib.fp8_mirror_layout(), (
        "libattn_kernels.so was compiled with another AttnFp8FwdParams layout than kernels/cuda_lib.py mirrors")


def _tensors(B=1, Hq=2, Hkv=1, L=40, d=64, fmt=torch.float8_e4m3fn):
    q = torch.zeros(B, Hq, L, d).to(fmt)
    k = torch.zeros(B, Hkv, L, d).to(fmt)
    v = torch.zeros(B, Hkv, L, d).to(fmt)
    o = torch.zeros(B, Hq, L, d, dtype=torch.bfloat16)
    return q, k, v, o


def test_fp8_fwd_params_fills_the_struct():
    q, k, v, o = _tensors()
    ds = [torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1)]
    p = cuda_lib.fp8_fwd_params(q, k, v, o, None, *ds, format="e4m3fn", granularity="per_head", causal=True)
    assert p.format == 0 and p.granularity == 1 and p.tile_q == p.tile_k == 128
    assert p.fwd.dtype == cuda_lib.ATTN_BF16 and p.fwd.causal == 1 and p.fwd.head_dim == 64
    assert p.q_descale == ds[0].data_ptr() and p.fwd.q == q.data_ptr()


def test_fp8_fwd_params_kmajor_points_v_at_vt():
    q, k, _, o = _tensors(L=40)
    vt = torch.zeros(1, 1, 64, 48).to(torch.float8_e4m3fn)
    ds = [torch.ones(()), torch.ones(()), torch.ones(())]
    p = cuda_lib.fp8_fwd_params(q, k, vt, o, None, *ds, format="e4m3fn", granularity="per_tensor", v_layout="kmajor")
    assert p.v_layout == 1 and p.vt_keys == 48 and p.fwd.v == vt.data_ptr()
    assert (p.fwd.v_batch_stride, p.fwd.v_head_stride, p.fwd.v_row_stride) == (64 * 48, 64 * 48, 48)
    with pytest.raises(cuda_lib.KernelError, match="vt_keys a multiple of 16"):
        cuda_lib.fp8_fwd_params(q, k, vt[..., :40], o, None, *ds, format="e4m3fn", granularity="per_tensor",
                                v_layout="kmajor")
    with pytest.raises(cuda_lib.KernelError, match="v_layout"):
        cuda_lib.fp8_fwd_params(q, k, vt, o, None, *ds, format="e4m3fn", granularity="per_tensor", v_layout="cols")


@pytest.mark.parametrize("bad, word", [
    (dict(format="e4m3"), "format"),
    (dict(granularity="per_row"), "granularity"),
    (dict(format="e5m2"), "q8.dtype"),
    (dict(granularity="per_tile"), "q_descale"),
])
def test_fp8_fwd_params_names_the_bad_argument(bad, word):
    q, k, v, o = _tensors()
    ds = [torch.ones(()), torch.ones(()), torch.ones(())]
    kw = dict(format="e4m3fn", granularity="per_tensor")
    kw.update(bad)
    with pytest.raises(cuda_lib.KernelError, match=word):
        cuda_lib.fp8_fwd_params(q, k, v, o, None, *ds, **kw)


def fp8_key_tile_params(d: int, granularity: str, v_layout: str):
    """FP8 forward params (CPU tensors; validation needs no device) of head dim d for the key-tile queries."""
    q, k, v, o = _tensors(L=64, d=d)
    B, Hkv, Lk = 1, 1, 64
    if v_layout == "kmajor":
        v = torch.zeros(B, Hkv, d, Lk).to(torch.float8_e4m3fn)
    shape = {"per_tensor": (), "per_head": (B, Hkv)}.get(granularity)
    ds = ([torch.ones(shape)] * 3 if shape is not None
          else [torch.ones(B, 2, 1), torch.ones(B, Hkv, 1), torch.ones(B, Hkv, 1)])
    return cuda_lib.fp8_fwd_params(q, k, v, o, None, *ds, format="e4m3fn", granularity=granularity, v_layout=v_layout)


@pytest.mark.parametrize("d, granularity, v_layout, want", [
    (128, "per_tensor", "rows", 128),
    (256, "per_head", "rows", 64),
    (64, "per_tensor", "kmajor", 128),
    (128, "per_head", "kmajor", 128),
    (128, "per_tile", "kmajor", 128),
    (256, "per_tensor", "kmajor", 128),
    (256, "per_tile", "kmajor", 128),
    (96, "per_tile", "rows", 128),  # d = 128's tiles
    (96, "per_head", "kmajor", 128),
    (192, "per_tile", "rows", 64),  # d = 256's tiles
    (192, "per_tensor", "kmajor", 128),
])
def test_fp8_key_tile_names_the_build(d, granularity, v_layout, want):
    """attn_fa3_fp8_key_tile (no device needed) reports the key tile of the shipped build fa3_fp8_fwd.cu picks (the
    lab builds' tiles: test_cuda_lab_params.py)."""
    lib = cuda_library_or_skip()
    if getattr(lib, "attn_fa3_fp8_key_tile", None) is None:
        pytest.skip("library predates attn_fa3_fp8_key_tile (rebuild it)")
    assert cuda_lib.fp8_key_tile(fp8_key_tile_params(d, granularity, v_layout)) == want


def test_fp8_kmajor_without_keys_passes_the_launcher_checks():
    """Lk = 0 with V k-major: pack_vt's [B, Hkv, d, 0] tensor has no row stride to speak of; the params must still
    pass the launcher's stride checks (attn_fa3_fp8_key_tile validates them without a device)."""
    lib = cuda_library_or_skip()
    if getattr(lib, "attn_fa3_fp8_key_tile", None) is None:
        pytest.skip("library predates attn_fa3_fp8_key_tile (rebuild it)")
    q = torch.zeros(1, 2, 5, 64).to(torch.float8_e4m3fn)
    k = torch.zeros(1, 2, 0, 64).to(torch.float8_e4m3fn)
    vt = torch.zeros(1, 2, 64, 0).to(torch.float8_e4m3fn)
    o = torch.zeros(1, 2, 5, 64, dtype=torch.bfloat16)
    ds = [torch.ones(())] * 3
    p = cuda_lib.fp8_fwd_params(q, k, vt, o, None, *ds, format="e4m3fn", granularity="per_tensor", v_layout="kmajor")
    assert p.vt_keys == 0 and cuda_lib.fp8_key_tile(p) == 128
