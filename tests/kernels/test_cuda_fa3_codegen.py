"""What ptxas makes of the FA3 forward's main loops (CPU: nvcc for sm_90a, nothing runs).

ptxas serializes every wgmma of a kernel in which it has to place a warpgroup fence in a divergent path (remark
C7520). That happened to the persistent builds, whose consumers read the next work tile's index from shared memory
(not warp-uniform to ptxas, so every branch on the tile was divergent): they ran at half speed while passing every
check; and to the ablation build without warp specialisation, whose loads were issued by thread 0 in a branch between
the consumers' wgmmas. The index is now broadcast from lane 0 and every consumer thread runs that build's loader
(thread 0 alone issues); this compiles a persistent and a one-CTA-per-tile build of each head dim's shipped schedule
(hopper/fwd_defaults.cuh), the shipped builds of d = 96, 192 and (192, 128), the cluster builds, the build without
warp specialisation (the lab's no_ws), and the FP8 forward's shipped k-major d = 128 schedule with and without its
persistent loop and its shipped builds of d = 96 and 192, and fails on C7520.
"""

from __future__ import annotations

import subprocess

import pytest

# Schedules named as the lab's builds (kernels/cuda/lab/fa3_fwd_lab.cu): each head dim's shipped schedule with the
# persistent loop (pingpong at d = 256 too) and with one CTA per work tile; the cluster builds; no warp specialisation.
SCHEDULES = "".join(
    f"struct Persistent{d} : Fa3Default<{d}> {{ static constexpr Grid grid = Grid::kPersistent; "
    f"static constexpr bool pingpong = true; }};\n"
    f"struct OneCta{d} : Fa3Default<{d}> {{ static constexpr Grid grid = Grid::kOneCtaPerTile; }};\n"
    + (f"struct Cluster{d} : Fa3Default<{d}> {{ static constexpr Grid grid = Grid::kCluster2; }};\n" if d != 64 else "")
    for d in (64, 128, 256)) + (
    "struct NoWs : Fa3Schedule { static constexpr int consumer_warpgroups = 2; static constexpr int block_n = 128;\n"
    "  static constexpr QOperand q_operand = QOperand::kRegisters; static constexpr bool pingpong = false;\n"
    "  static constexpr Loads loads = Loads::kConsumerThreadZero; };\n")
BF16 = [f"fa3_fwd_kernel<Fa3Config<{d}, __nv_bfloat16, {s}{d}, ScoreScale::kFolded>>"
        for d in (64, 128, 256) for s in ("Persistent", "OneCta")]
CLUSTER2 = [f"fa3_fwd_kernel<Fa3Config<{d}, __nv_bfloat16, Cluster{d}, ScoreScale::kFolded>>" for d in (128, 256)]
NO_WS = ["fa3_fwd_kernel<Fa3Config<128, __nv_bfloat16, NoWs, ScoreScale::kFolded>>"]
# the shipped builds of d = 96, 192 and (d, dv) = (192, 128), whose schedules no other build here has
NEW_DIMS = [f"fa3_fwd_kernel<Fa3Config<{d}, __nv_bfloat16, Fa3Default<{d}, {dv}>, ScoreScale::kFolded, {dv}>>"
            for d, dv in ((96, 96), (192, 192), (192, 128))]
FP8_SCHEDULES = ("struct KMajor128Persistent : Fp8KMajorDefault<128> {\n"
                 "  static constexpr Grid grid = Grid::kPersistent; };\n")
FP8 = [f"fa3_fp8_fwd_kernel<Fa3Fp8Config<128, Fp8E4M3, {s}>>" for s in ("Fp8KMajorDefault<128>", "KMajor128Persistent")]
# the shipped FP8 builds of d = 96 and 192, whose tiles are d = 128's and d = 256's with padding columns
FP8 += [f"fa3_fp8_fwd_kernel<Fa3Fp8Config<{d}, Fp8E4M3, {s}<{d}>>>" for d in (96, 192)
        for s in ("Fp8KMajorDefault", "Fp8RowsDefault")]


@pytest.mark.parametrize("header, schedules, params, kernels", [
    ("hopper/fwd_defaults.cuh\"\n#include \"hopper/mainloop.cuh", SCHEDULES, "Fa3Params",
     BF16 + CLUSTER2 + NO_WS + NEW_DIMS),
    ("hopper/fp8_defaults.cuh\"\n#include \"hopper/fp8_mainloop.cuh", FP8_SCHEDULES, "Fa3Fp8Params", FP8),
], ids=["bf16", "fp8"])
def test_forward_builds_keep_their_wgmmas_asynchronous(tmp_path, header, schedules, params, kernels):
    from attention_conformance.kernels.build import CUDA_DIR, find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    src = tmp_path / "fa3_codegen.cu"
    src.write_text(f'#include "{header}"\nnamespace attn::hopper {{\n{schedules}' + "".join(
        f"template __global__ void {k}(const __grid_constant__ {params} P);\n" for k in kernels) + "}\n")
    out = subprocess.run([nvcc, "-O3", "-std=c++17", "-I", str(CUDA_DIR / "include"), "-gencode",
                          "arch=compute_90a,code=sm_90a", "-c", str(src), "-o", str(tmp_path / "fa3_codegen.o")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    serialized = [line for line in out.stderr.splitlines() if "C7520" in line]
    assert not serialized, "ptxas serialized the wgmmas of:\n" + "\n".join(serialized)
