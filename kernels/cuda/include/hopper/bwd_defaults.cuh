// The shipped main loop of the FA3 backward for each head dim (bwd_mainloop.cuh Fa3BwdSchedule). attn_fa3_bwd and
// attn_fa3_bwd_deterministic run these; the lab's builds (kernels/cuda/lab) derive from them.
#pragma once
#include "bwd_mainloop.cuh"

namespace attn::hopper {

// The fastest measured on the H200 (NOTES_FA3_BWD.md has the table of the alternatives). Both add dQ through shared
// memory and a TMA reduce-add issued by a producer warp (+8-10% non-deterministic, +36-48% deterministic over the
// consumers' atomics), without the GEMM / element-wise overlap. d = 64: 128-row query tiles, each tile's dQ computed by one consumer, the two taking turns
// (+7-8% over splitting it by rows); d = 128: 64-row tiles, every tile's dQ split by columns between the consumers
// (the turns were 2-7% slower there).
template <int D>
struct Fa3BwdDefault;

template <>
struct Fa3BwdDefault<64> : Fa3BwdSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
    static constexpr int block_m = 128;
    static constexpr DqSplit dq_split = DqSplit::kAlternate;
};

template <>
struct Fa3BwdDefault<128> : Fa3BwdSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
};

// d = 96 (not yet timed against alternatives): d = 128's. Its tiles and dK / dV accumulators are d = 128's (two
// 64-column blocks, the last 32 columns zero-filled by TMA: bwd_mainloop.cuh Fa3BwdConfig), so its registers and
// shared memory are too; consumer 1's dQ column block is half padding, whose box the dQ writer skips.
template <>
struct Fa3BwdDefault<96> : Fa3BwdDefault<128> {};

}  // namespace attn::hopper
