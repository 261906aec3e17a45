// The shipped schedule of the FA3 forward for each head dim (config.cuh Fa3Schedule): the fastest measured on the
// H200 (B=4 H=16 N=8192, causal and not, builds timed in one process in alternating rounds; NOTES_FA3.md has the
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
#pragma once
#include "config.cuh"

namespace attn::hopper {

template <int D>
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

}  // namespace attn::hopper
