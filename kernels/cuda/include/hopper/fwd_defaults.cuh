// The shipped schedule of the FA3 forward for each head dim (config.cuh Fa3Schedule): the fastest measured on the
// H200 (B=4 H=16 N=8192, causal and not, builds timed in one process in alternating rounds; docs/fa3_forward.md has the
// table of the alternatives). attn_fa3_fwd runs these; the lab's builds (kernels/cuda/lab) derive from them.
//
// All: a producer warpgroup, intra-warpgroup overlap, a K / V ring as deep as shared memory allows (3, 3, 2 stages).
// d = 64: three consumer warpgroups (192 query rows), key tiles of 128, pingpong, the persistent loop (1.4% over one
//   CTA per work tile, geometric mean of 8 rows), O rescaled after every key tile (the lazy rescale measured
//   0.97-1.00x here: 32 multiplications of O a key tile cost little).
// d = 128: three consumer warpgroups, key tiles of 80 (O, S and P in 160 registers; 96 keys spill), Q from shared
//   memory (3-8% faster than two warpgroups with 128-key tiles and Q in registers), pingpong, one CTA per work tile
//   (the persistent loop measured 0.97-1.02x), the lazy rescale (1.03-1.06x O rescaled every key tile).
// d = 256: two consumer warpgroups, key tiles of 80, one CTA per work tile (the persistent loop measured 0.94-0.99x:
//   its Q is single-buffered, and a Q freed after the last S = Q K^T with O written from registers did not change
//   that), no pingpong (1.005-1.015x with it; flash-attn-4's sm90 forward issues no named barrier per key tile there
//   either: ncu, 29 BAR per CTA against 1684), the lazy rescale (1.02-1.04x).
//
// d = 96: d = 128's schedule with O += P V over dv's 96 columns (m64n96, PvColumns::kHeadDim) and key tiles of 112.
//   Q, K and V take two 64-column blocks in shared memory as at d = 128 (the second block's last 32 columns
//   zero-filled by TMA, config.cuh); S = Q K^T runs its 6 real k-steps. O is 48 registers, so S and P of 112 keys fit
//   beside it (48 + 56 + 28 of 160; no spill with the scale folded); Q 48 KB + 3 stages of 2 x 28 KB. Measured on an
//   H100 (B=4 H=16 N=8192 bf16, in one process in alternating rounds) against d = 128's schedule with m64n128 P V
//   (the lab's d96_whole_blocks): 1.09x, causal 1.08x; against m64n96 with 80 / 96 keys (d96_n80, d96_n96):
//   1.03-1.05x / 1.03-1.07x.
// The head dims below were chosen by the reasoning above (registers, 227 KB of shared memory, the wgmma N of the key
// tile a multiple of 16) and not yet timed against alternatives:
// d = 192: d = 256's schedule with key tiles of 112: two consumer warpgroups (O alone is 96 registers: with S and P of
//   even a 64-key tile it exceeds the 160 of three), no pingpong, the lazy rescale; 112 keys since O + S + P = 96 + 56
//   + 28 of 240 registers and Q 48 KB + 2 stages of 2 x 42 KB = 216 KB fit, where 128-key tiles need 240 KB.
// (d, dv) = (192, 128): d = 128's schedule. O, S and P take d = 128's registers; Q 72 KB + 3 stages of 30 + 20 KB =
//   222 KB (+ 2 KB barriers), so the three warpgroups keep their 3-stage ring; S = Q K^T runs 12 k-steps.
#pragma once
#include "config.cuh"

namespace attn::hopper {

// D: the head dim of Q and K; DV: of V and O.
template <int D, int DV = D>
struct Fa3Default;

template <>
struct Fa3Default<64> : Fa3Schedule {
    static constexpr int consumer_warpgroups = 3;
    static constexpr Grid grid = Grid::kPersistent;
    static constexpr int block_n = 128;
};

template <>
struct Fa3Default<128> : Fa3Schedule {
    static constexpr int consumer_warpgroups = 3;
    static constexpr int block_n = 80;
    static constexpr Rescale rescale = Rescale::kLazy;
};

template <>
struct Fa3Default<256> : Fa3Schedule {
    static constexpr int consumer_warpgroups = 2;
    static constexpr int block_n = 80;
    static constexpr bool pingpong = false;
    static constexpr Rescale rescale = Rescale::kLazy;
};

template <>
struct Fa3Default<96> : Fa3Default<128> {
    static constexpr PvColumns pv_columns = PvColumns::kHeadDim;
    static constexpr int block_n = 112;
};

template <>
struct Fa3Default<192> : Fa3Default<256> {
    static constexpr int block_n = 112;
};

template <>
struct Fa3Default<192, 128> : Fa3Default<128> {};

}  // namespace attn::hopper
