"""CPU-side checks of the FA1 / FA2-backward launchers (kernels/cuda/fa1.cu, fa2_bwd.cu); no GPU needed.

- argument validation: each launcher rejects unsupported head dims / dtypes / split-KV with
  ATTN_ERR_UNSUPPORTED and inconsistent arguments with ATTN_ERR_INVALID, and the message names the
  argument and its value (attn_params.h); these paths run before any CUDA call, so they work on a
  machine without a GPU once the library is built (`python -m attention_conformance.kernels.build`);
- the GPU test's reference mask (test_cuda_bwd_device.visibility) equals the oracle's
  (oracles.masking.visibility, SEMANTICS.md §4/§5/§7), so the GPU checks judge the contract's semantics;
- `kernels.cuda_bwd_lib.bwd_scratch` allocates the scratch shapes attn_params.h documents.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernel_helpers import cuda_library_or_skip  # noqa: E402

from attention_conformance.kernels import cuda_lib  # noqa: E402
from attention_conformance.kernels.cuda_bwd_lib import bwd_scratch  # noqa: E402

LAUNCHERS = ("attn_fa1_fwd", "attn_fa1_bwd", "attn_fa2_bwd")


def _lib_or_skip():
    lib = cuda_library_or_skip("kernel library not built")
    missing = [n for n in LAUNCHERS if getattr(lib, n, None) is None]
    if missing:
        pytest.skip(f"library lacks {missing}")
    return lib


def _params(launcher: str, **overrides):
    """A parameter struct that passes validation except for ``overrides`` (pointers are dummies)."""
    bwd = cuda_lib.AttnBwdParams()
    f = bwd.fwd
    dummy = 0x1000
    f.q = f.k = f.v = f.o = f.lse = dummy
    f.batch, f.heads_q, f.heads_kv, f.seqlen_q, f.seqlen_k = 1, 4, 2, 8, 8
    f.head_dim = f.head_dim_v = 64
    f.scale, f.dtype, f.window_left, f.window_right = 0.125, cuda_lib.ATTN_BF16, -1, -1
    bwd.dout = bwd.dq = bwd.dk = bwd.dv = dummy
    bwd.dq_accum = bwd.d_rowsum = bwd.dk_accum = bwd.dv_accum = dummy
    for k, v in overrides.items():
        setattr(bwd if hasattr(bwd, k) and k != "fwd" and not hasattr(f, k) else f, k, v)
    return f if launcher.endswith("_fwd") else bwd


BAD = [
    ("head_dim", dict(head_dim=96, head_dim_v=96), cuda_lib.KernelUnsupported, "head_dim=96"),
    ("head_dim_v", dict(head_dim_v=128), cuda_lib.KernelUnsupported, "head_dim_v=128"),
    ("dtype", dict(dtype=7), cuda_lib.KernelUnsupported, "dtype=7"),
    ("num_splits", dict(num_splits=4), cuda_lib.KernelUnsupported, "num_splits=4"),
    ("heads", dict(heads_q=4, heads_kv=3), cuda_lib.KernelError, "heads_q=4"),
    ("window", dict(window_left=-2), cuda_lib.KernelError, "window=(-2, -1)"),
    ("softcap", dict(softcap=-1.0), cuda_lib.KernelError, "softcap=-1"),
    ("null q", dict(q=None), cuda_lib.KernelError, "NULL"),
]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("name,overrides,exc,needle", BAD, ids=[b[0] for b in BAD])
def test_launcher_rejects_with_named_argument(launcher, name, overrides, exc, needle):
    _lib_or_skip()
    with pytest.raises(exc) as info:
        cuda_lib.call(launcher, _params(launcher, **overrides), stream=0)
    msg = str(info.value)
    assert needle in msg and launcher in msg, f"{launcher} with {overrides}: message {msg!r} lacks {needle!r}"
    if exc is cuda_lib.KernelError:
        assert info.value.code == 2, f"{launcher} with {overrides}: expected ATTN_ERR_INVALID, got {msg!r}"


@pytest.mark.parametrize("launcher", ["attn_fa1_bwd", "attn_fa2_bwd"])
@pytest.mark.parametrize(
    "overrides,needle",
    [(dict(lse=None), "lse is NULL"), (dict(dk_accum=None), "GQA"), (dict(d_rowsum=None), "d_rowsum")],
    ids=["no-lse", "gqa-no-accum", "no-rowsum"],
)
def test_backward_rejects_missing_buffers(launcher, overrides, needle):
    _lib_or_skip()
    with pytest.raises(cuda_lib.KernelError) as info:
        cuda_lib.call(launcher, _params(launcher, **overrides), stream=0)
    assert info.value.code == 2 and needle in str(info.value), f"{launcher} {overrides}: {info.value}"


def test_empty_batch_is_a_no_op():
    _lib_or_skip()
    for launcher in LAUNCHERS:
        cuda_lib.call(launcher, _params(launcher, batch=0, q=None, k=None, v=None, o=None), stream=0)


@pytest.mark.parametrize(
    "kw",
    [
        dict(Lq=7, Lk=11, causal=True),
        dict(Lq=11, Lk=7, causal=True, alignment="top_left"),
        dict(Lq=9, Lk=9, window=(2, 1)),
        dict(Lq=9, Lk=13, window=(3, None), causal=True),
        dict(Lq=8, Lk=10, causal=True, seqlens_q=(8, 3), seqlens_k=(0, 10)),
    ],
)
def test_device_reference_mask_matches_oracle(kw):
    from attention_conformance.oracles.masking import visibility as oracle_vis
    from tests.kernels.test_cuda_bwd_device import BwdCase, visibility

    c = BwdCase("m", "bf16", 64, kw["Lq"], kw["Lk"], **{k: v for k, v in kw.items() if k not in ("Lq", "Lk")})
    mine = visibility(c, "cpu").numpy()
    ref = oracle_vis(
        c.Lq, c.Lk, causal=c.causal, alignment=c.alignment, window=c.window,
        seqlens_q=c.seqlens_q, seqlens_k=c.seqlens_k,
    )  # fmt: skip
    ref = np.broadcast_to(ref, mine.shape)
    bad = np.argwhere(mine != ref)
    assert bad.size == 0, f"{c}: reference mask differs from oracles.masking.visibility at [b, 0, i, j] = {bad[:5]}"


@pytest.mark.parametrize("hkv", [4, 2])
def test_bwd_scratch_shapes(hkv):
    q, k = torch.empty(2, 4, 5, 64), torch.empty(2, hkv, 7, 64)
    s = bwd_scratch(q, k)
    assert s["dq_accum"].shape == (2, 4, 5, 64) and s["d_rowsum"].shape == (2, 4, 5)
    assert all(t.dtype == torch.float32 for t in s.values())
    if hkv == 4:
        assert "dk_accum" not in s, "MHA needs no dK/dV scratch"
    else:
        assert s["dk_accum"].shape == s["dv_accum"].shape == (2, 4, 7, 64)
