"""tools/vendor_rows.py: FlashInfer's page pool holds each sequence's keys in order; without the libraries each
candidate declines with the reason (the bench table then says why its column is empty)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
vendor_rows = pytest.importorskip("vendor_rows")


def test_the_page_pool_holds_every_sequence_in_order():
    B, H, L, d, ps = 2, 3, 32, 4, 8
    k = torch.randn(B, H, L, d)
    v = torch.randn(B, H, L, d)
    p = vendor_rows.paged_layout(torch, k, v, ps)
    assert p["k_cache"].shape == (B * L // ps, ps, H, d)
    assert p["kv_indptr"].tolist() == [0, 4, 8] and p["kv_last_page_len"].tolist() == [ps, ps]
    for b in range(B):
        for j in range(L // ps):
            page = int(p["kv_indices"][int(p["kv_indptr"][b]) + j])
            assert torch.equal(p["k_cache"][page], k[b, :, j * ps:(j + 1) * ps].transpose(0, 1))
            assert torch.equal(p["v_cache"][page], v[b, :, j * ps:(j + 1) * ps].transpose(0, 1))
    with pytest.raises(ValueError, match="multiple of page_size"):
        vendor_rows.paged_layout(torch, k[:, :, :30], v[:, :, :30], ps)


@pytest.mark.parametrize("make", ["flashinfer_prefill_fn", "xformers_fn"])
def test_a_library_that_does_not_import_declines_with_the_reason(make, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_vendor(name, *args, **kwargs):
        if name.split(".")[0] in ("flashinfer", "xformers"):
            raise ImportError(f"No module named '{name}'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vendor)
    q = torch.randn(1, 2, 16, 8)
    fn, why = getattr(vendor_rows, make)(q, q, q, True)
    assert fn is None and "does not import" in why


def test_the_decode_candidate_declines_without_flashinfer(monkeypatch):
    import builtins

    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **kw: (_ for _ in ()).throw(ImportError(name))
                        if name.startswith("flashinfer") else real(name, *a, **kw))
    q = torch.randn(1, 4, 1, 8)
    k = torch.randn(1, 2, 32, 8)
    fn, why = vendor_rows.flashinfer_paged_decode_fn(q, k, k)
    assert fn is None and "flashinfer does not import" in why


def test_the_decode_table_has_flashinfer_beside_ours_with_what_was_called():
    bench = pytest.importorskip("cuda_fwd_check_bench")
    env = dict(gpu="H200", date="today", driver="x", cuda="13.0", torch="2.11", cudnn=1)
    row = dict(kernel="splitkv_decode", B=1, Hq=32, Hkv=8, Lq=1, Lk=131072, d=128, num_splits=8,
               ours_ms=0.02, ours_TBps=4.0, ours_host_us=7.0, ours_wall_ms=0.03, ours_method="cuda_graph",
               flashinfer_paged_ms=0.025, flashinfer_paged_TBps=3.2, flashinfer_paged_host_us=30.0,
               flashinfer_paged_wall_ms=0.05, flashinfer_paged_method="cuda_graph", ratio_vs_flashinfer_paged=1.25,
               flashinfer_paged_call="flashinfer.BatchDecodeWithPagedKVCacheWrapper (NHD, page size 16, planned once)")
    md = bench.markdown(env, [row])
    assert "| 0.0250 (3.20) |" in md and "| 1.25 |" in md
    assert "*FlashInfer paged*: flashinfer.BatchDecodeWithPagedKVCacheWrapper" in md
    assert "GPU time" in md and "decode B1 Lk131072" in md


def test_the_forward_table_has_a_column_per_stack_and_says_why_one_is_empty():
    # tools/fa3_check_bench.py drives the lab build too (kernels.cuda.lab): a checkout's, not in the wheel tox installs
    pytest.importorskip("attention_conformance.kernels.cuda.lab", reason="kernels.cuda.lab (the lab build's Python "
                        "side) is not in the installed package; run tools' tests from a checkout (pip install -e .)")
    bench = pytest.importorskip("fa3_check_bench")
    env = dict(gpu="H200", date="today", driver="x", cuda="13.0", torch="2.11", cudnn=1)
    row = dict(B=4, H=16, N=8192, d=128, causal=True, fa3_ms=1.0, fa3_tflops=550.0, fa3_host_us=7.0,
               xformers_ms=1.25, xformers_tflops=440.0, ratio_vs_xformers=1.25,
               xformers_call="xformers.ops.memory_efficient_attention (BMHK, LowerTriangularMask; dispatched to fa2F)",
               flashinfer_declined="flashinfer does not import (ModuleNotFoundError: No module named 'flashinfer')")
    md = bench.markdown(env, [row], [])
    assert "| FlashInfer | xformers |" in md and "| /FlashInfer | /xformers |" in md and "| 1.25 |" in md
    assert "*FlashInfer*: no row ran (declined: flashinfer does not import" in md
    assert "*xformers*: xformers.ops.memory_efficient_attention" in md


def test_flashinfer_rows_only_at_the_head_dims_its_release_builds(monkeypatch):
    """FlashInfer's candidates run at the (d, dv) pairs of its FA2 / FA3 builds (`flashinfer.aot`'s default config,
    as the adapter reads it), (192, 128) included; another shape is left out with the reason, before any call."""
    import sys
    import types

    fi = types.ModuleType("fakefi")
    aot = types.ModuleType("fakefi.aot")
    aot.get_default_config = lambda: {"fa2_head_dim": [(64, 64), (128, 128), (256, 256)],
                                      "fa3_head_dim": [(192, 128), (128, 128), (64, 64), (256, 256)]}
    fi.__version__ = "0.0-test"
    monkeypatch.setitem(sys.modules, "fakefi", fi)
    monkeypatch.setitem(sys.modules, "fakefi.aot", aot)
    assert vendor_rows._unshipped(fi, 128, 128) is None and vendor_rows._unshipped(fi, 192, 128) is None
    why = vendor_rows._unshipped(fi, 96, 96)
    assert why is not None and "not (96, 96)" in why and "(192, 128)" in why and "0.0-test" in why
    monkeypatch.setitem(sys.modules, "flashinfer", fi)  # the candidates themselves decline it, calling nothing
    q = torch.randn(1, 2, 16, 96)
    assert vendor_rows.flashinfer_prefill_fn(q, q, q, False) == (None, why)
    assert vendor_rows.flashinfer_paged_decode_fn(q[:, :, :1], q, q) == (None, why)


def test_the_decode_rows_are_read_against_this_card_s_copy_bandwidth():
    """Issue 40's decode bar is 90% of the card's copy bandwidth: the set measures that copy and says each decode
    row's share of it (H100 and H200 differ by 1.4x in bandwidth, so a TB/s figure alone is not the bar)."""
    bench = pytest.importorskip("cuda_fwd_check_bench")
    env = dict(gpu="H100", date="today", driver="x", cuda="13.0", torch="2.11", cudnn=1)
    tbps = 2 * (2 << 30) / 1.3 / 1e9
    copy = dict(kernel="copy", bytes=2 << 30, copy_ms=1.6, copy_TBps=2 * (2 << 30) / 1.6 / 1e9, copy_sm_ms=1.3,
                copy_sm_TBps=tbps, copy_by="copy_sm", bandwidth_TBps=tbps, copy_host_us=9.0, copy_wall_ms=1.31,
                copy_method="cuda_graph", copy_sm_host_us=9.0, copy_sm_wall_ms=1.31, copy_sm_method="cuda_graph")
    dec = dict(kernel="splitkv_decode", B=4, Hq=32, Hkv=8, Lq=1, Lk=131072, d=128, num_splits=8, ours_ms=0.7,
               ours_TBps=3.07, ours_of_copy=3.07 / tbps, ours_host_us=9.0, ours_wall_ms=0.72,
               ours_method="cuda_graph")
    md = bench.markdown(env, [copy, dec], {"env": {"gpu": "H200", "date": "before"}, "bench": [dec]})
    assert f"*Copy bandwidth* of this card: {tbps:.2f} TB/s, the faster of" in md
    assert f"element-wise kernel (`torch.neg(src, out=dst)`, float32) {tbps:.2f} TB/s" in md
    assert f"at B4 {dec['ours_of_copy']:.0%} of it (the bar: 90%)" in md
    assert "| copy 2 GiB |" in md  # its host time in the host table; not in the before table
    assert md.count("copy 2 GiB") == 1
