"""``python -m attention_conformance.reporting.fp8_accuracy --impl NAME`` (FA3 Table 3 through an adapter), on the CPU
at a small N: the adapter path, the CUDA-quantizer column read from a file, and the usage errors (exit 2)."""

from __future__ import annotations

import numpy as np
import pytest

from attention_conformance.oracles import fp8
from attention_conformance.reporting import fp8_accuracy as fa

torch = pytest.importorskip("torch")

N = 256


def test_reference_adapter_equals_the_numpy_reference(tmp_path, capsys):
    """reference-fa3-fp8 is the NumPy reference's kernel: through the adapter and the engine's FP8 view its RMSE
    must be the reference's exactly (a wrong descale, tile or quantization on the adapter path breaks this)."""
    out = tmp_path / "t.md"
    assert fa.main(["--impl", "reference-fa3-fp8", "--seqlen", str(N), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for name in fa.FP8_METHODS:
        assert f"| {name} |" in text
    assert text.rstrip().splitlines()[-1].startswith("incoherent processing gain: ")
    assert out.read_text() in text
    result = fa.impl_table("reference-fa3-fp8", N=N)
    for name, row in result["rows"].items():
        assert row["impl"] == row["reference"], (name, row)
        assert 1e-3 < row["impl"] < 5e-2, (name, row)  # FP8-sized errors, not zero, not garbage


def _oracle_npz(path, meta):
    """A --gpu-quantizer file holding the oracle's own codes (what a bit-compatible CUDA quantizer writes)."""
    B, H, n, d, seed, tile, _ = (int(x) for x in meta)
    q, k, v = fa.make_inputs(B, H, n, d, seed)
    rows = []
    for name in fa.FP8_METHODS:
        case = fa.fp8_case(name, B, H, n, d, seed, tile)
        qi = fp8.quantize_attention_inputs(*(x.astype(np.float32).astype(np.float64) for x in (q, k, v)),
                                           format="e4m3fn", granularity=case.fp8.granularity, tile_q=tile,
                                           tile_k=tile, incoherent=case.fp8.incoherent, seed=seed)
        codes = {c: torch.from_numpy(qi[f"{c}8"]).to(torch.float8_e4m3fn).view(torch.uint8).numpy() for c in "qkv"}
        descales = {c: np.asarray(qi[f"{c}_descale"], dtype=np.float32) for c in "qkv"}
        rows.append((codes, descales, {"code_mismatches": 0, "descale_mismatches": 0, "codes": 3 * q.size}))
    fa.write_quantizer_npz(str(path), meta, "oracle (test)", rows)


def test_gpu_quantizer_column_from_a_file(tmp_path, capsys):
    meta = fa.shape_meta(1, 1, N, 128, 0, 128, "e4m3fn")
    npz = tmp_path / "q.npz"
    _oracle_npz(npz, meta)
    result = fa.impl_table("reference-fa3-fp8", N=N, gpu_quantizer=str(npz))
    for name, row in result["rows"].items():
        # same codes; float32 descales instead of float64 and float32-rounded inputs: the RMSE barely moves
        assert row["gpu"] == pytest.approx(row["impl"], rel=0.02), (name, row)
        assert row["gpu_stats"]["code_mismatches"] == 0
    text = fa.render_impl(result, "test", "cmd")
    assert f"0 of {3 * N * 128}" in text and "NumPy reference's:" in text
    # a file for another shape is refused (one line, exit 2)
    assert fa.main(["--impl", "reference-fa3-fp8", "--seqlen", "128", "--gpu-quantizer", str(npz),
                    "--out", str(tmp_path / "x.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds B, H, N, d, seed, tile, format" in err[0]


@pytest.mark.parametrize("argv,match", [
    (["--impl", "no-such-kernel"], "unknown adapter 'no-such-kernel'"),
    (["--impl", "reference-fa2"], "does not run the FP8 row"),
    (["--impl", "reference-fa3-fp8", "--device", "cuda"], "cannot run here"),
    (["--gpu-quantizer", "x.npz"], "need --impl"),
])
def test_usage_errors_are_one_line_and_exit_2(argv, match, capsys, tmp_path):
    assert fa.main([*argv, "--seqlen", "64", "--out", str(tmp_path / "x.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "x.md").exists()
