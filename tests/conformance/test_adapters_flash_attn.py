"""flash-attention adapters without flash-attention: unavailable reasons and the argument translation
(windows §5, varlen packing §7, varlen LSE layouts §12, FA3 FP8 descales §10), tested with plain torch.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance.adapters.flash_attn import (
    FlashAttn2,
    FlashAttn3,
    FlashAttn4,
    cu_seqlens,
    fa3_descales,
    fa_window,
    pack_varlen,
    unpack_varlen,
    unpack_varlen_lse,
)
from conformance.case import Case

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("cls,module", [(FlashAttn2, "flash_attn"), (FlashAttn3, "flash_attn_interface"),
                                        (FlashAttn4, "flash_attn.cute")])
def test_unavailable_reasons_name_device_and_module(cls, module):
    adapter = cls()
    reason = adapter.unavailable_reason("cpu")
    assert reason and "runs on CUDA only" in reason
    if adapter.module() is None:
        assert f"{module}" in reason and "not importable" in reason
    case = Case("t", 1, 1, 1, 2, 2, 64, 64)
    assert adapter.supports(case, "cpu") == reason
    if not torch.cuda.is_available():
        assert "needs a CUDA device" in adapter.unavailable_reason("cuda")


def test_window_translation():
    c = Case("t", 1, 1, 1, 4, 8, 16, 16)
    assert fa_window(c) == (-1, -1)
    assert fa_window(c, None) == (None, None)
    assert fa_window(c.replace(window=(3, None))) == (3, -1)
    assert fa_window(c.replace(window=(None, 2)), None) == (None, 2)
    assert fa_window(c.replace(causal=True)) == (-1, 0)
    assert fa_window(c.replace(causal=True, window=(5, 7))) == (5, 0)
    with pytest.raises(ValueError, match="left=-2"):
        fa_window(c.replace(window=(-2, 0)))


def test_varlen_pack_unpack_roundtrip_and_gradients():
    lengths = [3, 0, 5]
    assert cu_seqlens(lengths) == [0, 3, 3, 8]
    x = torch.randn(3, 2, 6, 4, dtype=torch.float64, requires_grad=True)
    packed = pack_varlen(x, lengths)
    assert packed.shape == (8, 2, 4)
    assert torch.equal(packed[3:8], x[2, :, :5].transpose(0, 1))
    back = unpack_varlen(packed, lengths, 6)
    assert back.shape == x.shape
    keep = torch.zeros(3, 1, 6, 1, dtype=torch.bool)
    for b, n in enumerate(lengths):
        keep[b, :, :n] = True
    assert torch.equal(back, torch.where(keep, x, torch.zeros_like(x)))
    (g,) = torch.autograd.grad(back.sum(), x)
    assert torch.equal(g, keep.expand_as(x).to(g.dtype))


def test_varlen_lse_layouts():
    lengths = [2, 3]
    flat = torch.arange(2 * 5, dtype=torch.float32).reshape(2, 5)  # (H, total)
    out = unpack_varlen_lse(flat, lengths, 4)
    assert out.shape == (2, 2, 4)
    assert out[1, :, :3].tolist() == flat[:, 2:5].tolist() and torch.isneginf(out[1, :, 3]).all()
    padded = torch.arange(2 * 2 * 4, dtype=torch.float32).reshape(2, 2, 4)  # (B, H, max_seqlen)
    out2 = unpack_varlen_lse(padded, lengths, 4)
    assert torch.equal(out2[0, :, :2], padded[0, :, :2]) and torch.isneginf(out2[0, :, 2:]).all()
    with pytest.raises(ValueError, match="unexpected varlen LSE shape"):
        unpack_varlen_lse(torch.zeros(5), lengths, 4)


@pytest.mark.fp8
@pytest.mark.parametrize("granularity", ["per_tensor", "per_head"])
def test_fa3_descales_from_the_oracle_quantizer(granularity):
    from oracles import fp8

    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 4, 5, 16)), rng.standard_normal((2, 2, 7, 16)), rng.standard_normal((2, 2, 7, 16))
    quant = fp8.quantize_attention_inputs(q, k, v, granularity=granularity)
    ds, rounded = fa3_descales(quant, 2, 2)
    for name in ("q_descale", "k_descale", "v_descale"):
        assert ds[name].shape == (2, 2) and ds[name].dtype == np.float32
        want = np.broadcast_to(quant[name], (2, 2))
        assert np.allclose(ds[name].astype(np.float64), want, rtol=2.0 ** -24, atol=0.0)
    assert 0.0 <= rounded <= 2.0 ** -24
    with pytest.raises(ValueError, match="shape"):
        fa3_descales({**quant, "q_descale": np.ones((2, 4))}, 2, 2)
    exact, rounded = fa3_descales({"q_descale": np.full((2, 2), 0.5), "k_descale": np.float64(2.0),
                                   "v_descale": np.full((2, 2), 1.0 + 2.0 ** -40)}, 2, 2)
    assert exact["k_descale"].tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert rounded == pytest.approx(2.0 ** -40)
