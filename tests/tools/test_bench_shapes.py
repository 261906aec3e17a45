"""bench_shapes.py: the head dims of the benchmark scripts' rows (``--head-dims``) and their labels (CPU)."""

from __future__ import annotations

from bench_shapes import dims_label, parse_head_dims, row_key


def test_head_dims_parse_d_and_d_by_dv():
    assert parse_head_dims("64, 128,192x128,256X256") == [(64, 64), (128, 128), (192, 128), (256, 256)]


def test_a_label_names_dv_only_where_it_differs():
    assert dims_label(dict(d=128)) == "128" and dims_label(dict(d=96, dv=96)) == "96"
    assert dims_label(dict(d=192, dv=128)) == "192x128"


def test_a_row_key_is_its_shape_with_dv_defaulting_to_d():
    assert row_key(dict(B=4, H=16, N=8192, d=128, causal=1, fa3_ms=1.0)) == (4, 16, 8192, 128, 128, True)
    assert row_key(dict(B=1, H=2, N=3, d=192, dv=128, causal=False)) == (1, 2, 3, 192, 128, False)
