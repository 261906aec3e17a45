"""What ptxas makes of the FA3 forward's main loops (CPU: nvcc for sm_90a, nothing runs).

ptxas serializes every wgmma of a kernel in which it has to place a warpgroup fence in a divergent path (remark
C7520). That happened to the persistent builds, whose consumers read the next work tile's index from shared memory
(not warp-uniform to ptxas, so every branch on the tile was divergent): they ran at half speed through several
validated libraries while passing every check (docs/fa3_forward.md); and to the ablation build without warp
specialisation, whose loads were issued by thread 0 in a branch between the consumers' wgmmas. The index is now
broadcast from lane 0 and every consumer thread runs that build's loader (thread 0 alone issues); this compiles a
persistent and a one-CTA-per-tile build of each head dim (the shapes fa3_fwd.cu's defaults use), the ablation build,
and the FP8 forward's d = 128 default with and without its persistent loop, and fails on C7520.
"""

from __future__ import annotations

import subprocess

import pytest

# (head dim, consumer warpgroups, keys per tile): fa3_fwd.cu kDefaultWGs / kDefaultN
SHAPES = ((64, 3, 128), (128, 3, 80), (256, 2, 80))


def _pingpong(d: int, persistent: str) -> str:
    """fa3_fwd.cu kDefaultPingpong: every default build but d = 256 with one CTA per work tile."""
    return "true" if d != 256 or persistent == "true" else "false"


BF16 = [f"fa3_fwd_kernel<Fa3Config<{d}, __nv_bfloat16, {wgs}, true, true, {_pingpong(d, p)}, {p}, false, {bn}>>"
        for d, wgs, bn in SHAPES for p in ("true", "false")]
# fa3_fwd.cu launch_cluster2 (variant cluster2): the one-CTA-per-tile builds in clusters of two, K / V multicast
CLUSTER2 = [f"fa3_fwd_kernel<Fa3Config<{d}, __nv_bfloat16, {wgs}, true, true, {_pingpong(d, 'false')}, false, false, "
            f"{bn}, 0, false, 0, false, 2>>" for d, wgs, bn in SHAPES if d != 64]
# fa3_fwd.cu dispatch_variant ATTN_FA3_NO_WS: no producer warpgroup, no pingpong
NO_WS = ["fa3_fwd_kernel<Fa3Config<128, __nv_bfloat16, 2, false, true, false, false, false, 128>>"]
# fa3_fp8_fwd.cu KMajor<128, Fp8E4M3, 128, 3[, -1, true]>: three consumer warpgroups, V k-major
FP8 = [f"fa3_fp8_fwd_kernel<Fa3Fp8Config<128, Fp8E4M3, kFp8ProbeNone, false, false, true, true, 0, -1, 3, {p}>>"
       for p in ("false", "true")]


@pytest.mark.parametrize("header, params, kernels", [
    ("hopper/mainloop.cuh", "Fa3Params", BF16 + CLUSTER2 + NO_WS),
    ("hopper/fp8_mainloop.cuh", "Fa3Fp8Params", FP8),
], ids=["bf16", "fp8"])
def test_forward_builds_keep_their_wgmmas_asynchronous(tmp_path, header, params, kernels):
    from attention_conformance.kernels.build import CUDA_DIR, find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    src = tmp_path / "fa3_codegen.cu"
    src.write_text(f'#include "{header}"\nnamespace attn::hopper {{\n' + "".join(
        f"template __global__ void {k}(const __grid_constant__ {params} P);\n" for k in kernels) + "}\n")
    out = subprocess.run([nvcc, "-O3", "-std=c++17", "-I", str(CUDA_DIR / "include"), "-gencode",
                          "arch=compute_90a,code=sm_90a", "-c", str(src), "-o", str(tmp_path / "fa3_codegen.o")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    serialized = [line for line in out.stderr.splitlines() if "C7520" in line]
    assert not serialized, "ptxas serialized the wgmmas of:\n" + "\n".join(serialized)
