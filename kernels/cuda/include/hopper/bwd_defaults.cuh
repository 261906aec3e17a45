// The shipped main loop of the FA3 backward for each head dim (bwd_mainloop.cuh Fa3BwdSchedule). attn_fa3_bwd and
// attn_fa3_bwd_deterministic run these; the lab's builds (kernels/cuda/lab) derive from them.
#pragma once
#include "bwd_mainloop.cuh"
#include "bwd_sliced.cuh"
#include "bwd_wide.cuh"

namespace attn::hopper {

// The fastest measured on the H200 (docs/fa3_backward.md has the table of the alternatives). Both add dQ through shared
// memory and a TMA reduce-add issued by a producer warp (+8-10% non-deterministic, +36-48% deterministic over the
// consumers' atomics), without the GEMM / element-wise overlap. d = 64: 128-row query tiles, each tile's dQ computed by
// one consumer, the two taking turns (+7-8% over splitting it by rows), each turn one tile behind (the lab's
// alternate_dq takes the turns on the same tile: H200, B = 4, H = 16, N = 8192, bf16, the backward 1.038 / 1.024x it,
// non-causal / causal); d = 128: 80-row tiles, dQ^T = K^T dS^T split by
// head-dim columns between the consumers (H100, B = 4, H = 16, N = 8192, bf16: the backward 1.03-1.06x the 64-row
// tiles with dQ = dS K, the lab's rows64; with 64-row tiles taking turns was 2-7% slower than the column split). Both
// stage dK / dV through shared memory (Fa3BwdSchedule's DkvStore::kStaged: 1.010-1.021x the 4-byte stores, the lab's
// direct_dkv). D: the head dim of Q and K; DV: of V and O.
template <int D, int DV = D>
struct Fa3BwdDefault;

template <>
struct Fa3BwdDefault<64> : Fa3BwdSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
    static constexpr int block_m = 128;
    static constexpr DqSplit dq_split = DqSplit::kAlternateLagged;
};

template <>
struct Fa3BwdDefault<128> : Fa3BwdSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
    static constexpr DqForm dq_form = DqForm::kKtDsT;
    static constexpr int block_m = 80;
};

// d = 96: d = 128's schedule. Its shared-memory tiles are d = 128's (two 64-column blocks, the last 32 columns
// zero-filled by TMA: bwd_mainloop.cuh Fa3BwdConfig); the dK / dV accumulators have 96 columns (kAccDim); consumer
// 1's rows of dQ^T are half padding, whose box the dQ writer skips.
template <>
struct Fa3BwdDefault<96> : Fa3BwdDefault<128> {};

// The wide head dims, chosen by the reasoning in docs/fa3_backward.md (registers, 227 KB of shared memory) and the
// alternatives timed there:
// d = 256: bwd_wide.cuh (the consumers share 64 keys, consumer 0 holds dK, consumer 1 dV, S^T / dP^T split by
//   queries); dQ through shared memory and the TMA reduce-add, in 227 KB by one 16 KB buffer per consumer (its two
//   blocks in turn) and dO in one stage of its own (two Q stages kept): 1.48x the consumers' atomics in the backward
//   (H100, B = 4, H = 16, N = 8192, bf16: 412 against 279 TFLOPs/s; cuDNN 350), whose reds held 40% of the warps'
//   stall samples (ncu: lg throttle). float4 reds instead of float2 changed nothing (278).
// d = 192 and (192, 128): bwd_sliced.cuh's 96-key tiles shared by three consumers (each 32 keys for S / dP and a
//   64-column slice of dK^T, dV^T and dQ), dQ through shared memory and the TMA reduce-add: on the H200 (B = 4, H = 16,
//   N = 8192, bf16, in one process in alternating rounds) the backward 1.058 / 1.043x the 64-key wide tiling at
//   d = 192 (non-causal / causal), 1.142 / 1.113x at (192, 128) (the lab's shared_keys64).
template <>
struct Fa3BwdDefault<256> : Fa3BwdWideSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
    static constexpr DqStaging dq_staging = DqStaging::kBufferPerConsumer;
    static constexpr int do_stages = 1;
};

template <>
struct Fa3BwdDefault<192> : Fa3BwdSlicedSchedule {};

template <>
struct Fa3BwdDefault<192, 128> : Fa3BwdSlicedSchedule {};

// The main-loop configuration of schedule S for (D, DV) and element type Elem, by the schedule's tiling:
// bwd_mainloop.cuh's Fa3BwdConfig, bwd_wide.cuh's Fa3BwdWideConfig or bwd_sliced.cuh's Fa3BwdSlicedConfig.
template <int D, int DV, typename Elem, class S>
using Fa3BwdConfigOf = std::conditional_t<
    S::tiling == BwdTiling::kSharedKeys, Fa3BwdWideConfig<D, DV, Elem, S>,
    std::conditional_t<S::tiling == BwdTiling::kHeadDimSlices, Fa3BwdSlicedConfig<D, DV, Elem, S>,
                       Fa3BwdConfig<D, Elem, S>>>;

}  // namespace attn::hopper
