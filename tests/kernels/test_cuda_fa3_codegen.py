"""What ptxas makes of the FA3 forward's main loop (CPU: nvcc for sm_90a, nothing runs).

ptxas serializes every wgmma of a kernel in which it has to place a warpgroup fence in a divergent path (remark
C7520). That happened to the persistent builds, whose consumers read the next work tile's index from shared memory
(not warp-uniform to ptxas, so every branch on the tile was divergent): they ran at half speed for three sessions
while passing every check (NOTES_FA3.md session 15). The index is now broadcast from lane 0; this compiles a
persistent and a one-CTA-per-tile build of each head dim (the shapes fa3_fwd.cu's defaults use) and fails on C7520.
"""

from __future__ import annotations

import subprocess

import pytest

# (head dim, consumer warpgroups, keys per tile): fa3_fwd.cu kDefaultWGs / kDefaultN
SHAPES = ((64, 3, 128), (128, 3, 80), (256, 2, 80))


def test_default_and_persistent_builds_keep_their_wgmmas_asynchronous(tmp_path):
    from attention_conformance.kernels.build import CUDA_DIR, find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    kernels = [f"Fa3Config<{d}, __nv_bfloat16, {wgs}, true, true, true, {persistent}, false, {bn}>"
               for d, wgs, bn in SHAPES for persistent in ("true", "false")]
    src = tmp_path / "fa3_codegen.cu"
    src.write_text('#include "hopper/mainloop.cuh"\nnamespace attn::hopper {\n' + "".join(
        f"template __global__ void fa3_fwd_kernel<{k}>(const __grid_constant__ Fa3Params P);\n" for k in kernels)
        + "}\n")
    out = subprocess.run([nvcc, "-O3", "-std=c++17", "-I", str(CUDA_DIR / "include"), "-gencode",
                          "arch=compute_90a,code=sm_90a", "-c", str(src), "-o", str(tmp_path / "fa3_codegen.o")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    serialized = [line for line in out.stderr.splitlines() if "C7520" in line]
    assert not serialized, "ptxas serialized the wgmmas of:\n" + "\n".join(serialized)
