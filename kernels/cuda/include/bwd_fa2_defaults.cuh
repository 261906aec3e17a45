// The shipped tile shapes of the FA2 backward main loop (bwd_fa2_kernel.cuh Fa2BwdTile) for each head dim:
// attn_fa2_bwd (fa2_bwd.cu, launcher fa2_bwd_launch.cuh launch_default_tc) runs Fa2BwdDefault<D>, or
// Fa2BwdSmall<D> where a block cannot have its shared memory (A100: 163 KB, sm_86 / sm_89: 99 KB). The lab's
// shapes (kernels/cuda/lab/fa2_bwd_lab.cu) derive from these. Measured on the H200 (docs/fa1_fa2.md, the table of
// alternatives): FA2's shapes for d = 64 / 128 (128 keys, 8 warps, one CTA per SM) ran 1.30x the 64 x 64 tiles
// with two CTAs per SM; one 16-warp CTA 1.17x two 8-warp CTAs at d = 256 (noise, 1.02x, at d = 128); the
// pipelined fragment loads 1.00x (ptxas interleaves LDSM and HMMA either way; left on in the shapes measured
// with them).
#pragma once
#include "bwd_fa2_kernel.cuh"

namespace attn::bwd {

template <int D>
struct Fa2BwdDefault;
template <int D>
struct Fa2BwdSmall;

// d = 64: FA2's shape, 128 keys x 128 rows, 8 warps (GEMM A, B, C split 4 x 2), pipelined fragment loads, 178 KB.
template <>
struct Fa2BwdDefault<64> : Fa2BwdTile {
    static constexpr int block_m = 128, dq_warps_m = 4;
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};

// d = 64 fallback: 64 x 64, 8 warps (2 x 4 each GEMM), two CTAs per SM, 75 KB.
template <>
struct Fa2BwdSmall<64> : Fa2BwdTile {
    static constexpr int block_n = 64;
    static constexpr int sdp_warps_m = 2, dkdv_warps_m = 2, dq_warps_m = 2;
    static constexpr int min_ctas_per_sm = 2;
};

// d = 128: FA2's shape, 128 keys x 64 rows, 8 warps (GEMM A, B 4 x 2, C 2 x 4), pipelined fragment loads, 173 KB.
template <>
struct Fa2BwdDefault<128> : Fa2BwdTile {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};

// d = 128 fallback: d = 64's, with one Q / dO buffer (the next copy overlapping GEMM C), 87 KB.
template <>
struct Fa2BwdSmall<128> : Fa2BwdSmall<64> {
    static constexpr int q_stages = 1;
};

// d = 256: 64 x 64, one CTA of 16 warps per SM (GEMM A 4 x 4, B, C 2 x 8), 217 KB.
template <>
struct Fa2BwdDefault<256> : Fa2BwdTile {
    static constexpr int block_n = 64, warps = 16;
    static constexpr int dkdv_warps_m = 2;
};

// d = 256 fallback: 64 keys x 32 rows, 8 warps (GEMM A, B 4 x 2, C 2 x 4), 143 KB.
template <>
struct Fa2BwdSmall<256> : Fa2BwdTile {
    static constexpr int block_n = 64, block_m = 32;
};

}  // namespace attn::bwd
