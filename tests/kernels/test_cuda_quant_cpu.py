"""CPU tests of the FP8 input kernels' host side (kernels/cuda_quant.py, kernels/cuda/include/attn_quant.h).

- the Python checks reject bad arguments with a ValueError naming the argument and the shape, before any
  library or GPU is touched (CPU tensors get as far as the device check);
- the signs handed to the kernel are the oracle's `hadamard_signs(d, seed)` (SEMANTICS.md §11), checked to be
  exactly +-1;
- with the library (CI builds it, no GPU needed): the ctypes mirrors match the compiled layout, and the
  launchers reject bad parameters with a status and a message naming the field (validation runs before any
  CUDA call).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import cuda_library_exporting_or_skip

from attention_conformance.kernels import cuda_lib, cuda_quant
from attention_conformance.oracles import fp8

torch = pytest.importorskip("torch")


def _x(shape=(1, 2, 8, 64), dtype=torch.bfloat16):
    return torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("kwargs,match", [
    (dict(format="e3m4"), "format='e3m4'"),
    (dict(granularity="per_row"), "granularity='per_row'"),
    (dict(granularity="per_head", group=3), r"group=3.*\(1, 2, 8, 64\)"),
    (dict(granularity="per_head", group=0), "group=0"),
    (dict(granularity="per_tile", tile=0), "tile=0"),
    (dict(signs=np.ones(32)), r"signs must have shape \(64,\)"),
    (dict(signs=np.r_[np.ones(63), 0.0]), r"signs\[63\]=0\.0"),
])
def test_quantize_rejects_bad_arguments_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cuda_quant.quantize(_x(), **kwargs)


@pytest.mark.parametrize("x,match", [
    (torch.zeros(2, 8, 64), r"rank 4 .*\(2, 8, 64\)"),
    (torch.zeros(1, 1, 8, 64, dtype=torch.int32), "x.dtype=int32"),
    (torch.zeros(1, 1, 8, 48), r"head dim d=48 .*power of two"),
    (torch.zeros(1, 1, 8, 1024), "d=1024"),
    (torch.zeros(1, 1, 64, 8).transpose(2, 3), r"x.stride\(-1\)=8"),
    (np.zeros((1, 1, 8, 64)), "must be a torch tensor"),
])
def test_quantize_rejects_bad_tensors(x, match):
    with pytest.raises(ValueError, match=match):
        cuda_quant.quantize(x)


def test_valid_arguments_reach_the_device_check():
    """Everything else valid: a CPU tensor is refused as such (the library is never loaded for it)."""
    with pytest.raises(ValueError, match=r"x must be a CUDA tensor; got device cpu \(shape \(1, 2, 8, 64\)\)"):
        cuda_quant.quantize(_x(), format="float8_e5m2", granularity="per_tile", tile=3, signs=np.ones(64))
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        cuda_quant.hadamard(_x(dtype=torch.float32), fp8.hadamard_signs(64, 0))


def test_hadamard_checks_signs_and_out_dtype():
    with pytest.raises(ValueError, match=r"out_dtype=float16: must be x's dtype \(bfloat16\) or float32"):
        cuda_quant.hadamard(_x(), np.ones(64), out_dtype=torch.float16)
    with pytest.raises(ValueError, match=r"signs\[2\]=2\.0"):
        cuda_quant.hadamard(_x(), np.r_[1.0, -1.0, 2.0, np.ones(61)])


@pytest.mark.parametrize("shapes,kw,match", [
    (((1, 4, 8, 64), (1, 3, 8, 64), (1, 3, 8, 64)), {}, "Hq=4 is not a multiple of Hkv=3"),
    (((1, 2, 8, 64), (2, 2, 8, 64), (2, 2, 8, 64)), {}, "shapes do not agree"),
    (((1, 2, 8, 64), (1, 2, 8, 128), (1, 2, 8, 128)), {}, "head dims differ"),
    (((1, 2, 8, 64),) * 3, dict(tile_k=0), "tile_k=0"),
    (((1, 2, 8, 64),) * 3, dict(format="e4m3"), "format='e4m3'"),
])
def test_quantize_attention_inputs_checks_shapes(shapes, kw, match):
    q, k, v = (torch.zeros(s, dtype=torch.float16) for s in shapes)
    with pytest.raises(ValueError, match=match):
        cuda_quant.quantize_attention_inputs(q, k, v, **kw)


def test_signs_are_the_oracles_and_exactly_pm1():
    for d in (32, 64, 128, 256, 512):
        for seed in (0, 1, 7):
            s = fp8.hadamard_signs(d, seed)
            packed = cuda_quant.check_signs(s, d)
            assert packed.dtype == np.float32 and packed.flags["C_CONTIGUOUS"]
            np.testing.assert_array_equal(packed, s)
    assert not np.array_equal(fp8.hadamard_signs(128, 0), fp8.hadamard_signs(128, 1))


def test_descale_shapes_follow_semantics_10():
    assert cuda_quant.descale_shape((2, 4, 200, 64), "per_tensor") == ()
    assert cuda_quant.descale_shape((2, 4, 200, 64), "per_head", group=2) == (2, 2)
    assert cuda_quant.descale_shape((2, 4, 200, 64), "per_tile", tile=64) == (2, 4, 4)
    assert cuda_quant.descale_shape((2, 4, 0, 64), "per_tile", tile=64) == (2, 4, 0)


# -- with the library (no GPU needed) ----------------------------------------------------------------------

def _lib_with_quant():
    return cuda_library_exporting_or_skip("attn_fp8_quantize")


def test_ctypes_mirror_matches_the_compiled_layout():
    _lib_with_quant()
    assert cuda_quant.compiled_layout() == cuda_quant.mirror_layout()


def _quant_params(**over):
    p = cuda_quant.Fp8QuantParams()
    p.x, p.codes, p.descale = 16, 16, 16  # never dereferenced: validation fails first
    p.x_batch_stride, p.x_head_stride, p.x_row_stride = 1024, 512, 64
    p.c_batch_stride, p.c_head_stride, p.c_row_stride = 1024, 512, 64
    p.batch, p.heads, p.seqlen, p.head_dim = 1, 2, 8, 64
    p.x_dtype, p.format, p.granularity, p.group, p.tile = 1, 0, 0, 1, 128
    for k, v in over.items():
        setattr(p, k, v)
    return p


@pytest.mark.parametrize("over,code,match", [
    (dict(format=7), 2, "format=7"),
    (dict(granularity=5), 2, "granularity=5"),
    (dict(granularity=1, group=3), 2, "group=3 with heads=2"),
    (dict(granularity=2, tile=0), 2, "tile=0"),
    (dict(head_dim=48), 1, "head_dim=48"),
    (dict(x_dtype=9), 1, "x_dtype=9"),
    (dict(x_row_stride=-64), 2, "x_row_stride=-64"),
    (dict(descale=None), 2, "descale is NULL"),
    (dict(seqlen=-1), 2, "seqlen=-1"),
])
def test_quantize_launcher_validates_by_name(over, code, match):
    _lib_with_quant()
    with pytest.raises(cuda_lib.KernelError, match=match) as e:
        cuda_lib.call("attn_fp8_quantize", _quant_params(**over), stream=0)
    assert e.value.code == code


def test_quantize_launcher_checks_every_sign():
    _lib_with_quant()
    s = np.ones(64, dtype=np.float32)
    s[41] = -0.5
    with pytest.raises(cuda_lib.KernelError, match=r"signs\[41\]=-0\.5"):
        cuda_lib.call("attn_fp8_quantize", _quant_params(signs=s.ctypes.data), stream=0)


def test_hadamard_launcher_needs_signs_and_a_supported_out_dtype():
    _lib_with_quant()
    p = cuda_quant.HadamardParams()
    p.batch, p.heads, p.seqlen, p.head_dim, p.x_dtype, p.y_dtype = 1, 1, 8, 64, 1, 1
    with pytest.raises(cuda_lib.KernelError, match="signs is NULL"):
        cuda_lib.call("attn_hadamard", p, stream=0)
    p.y_dtype = 0
    with pytest.raises(cuda_lib.KernelUnsupported, match="y_dtype=0 with x_dtype=1"):
        cuda_lib.call("attn_hadamard", p, stream=0)
