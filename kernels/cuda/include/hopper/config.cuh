// Tile shapes, shared-memory layout and the feature switches of the FA3 forward: Fa3Config<D, Elem, Schedule, Scale>
// derives every constant the kernel (mainloop.cuh) reads from a schedule, a traits struct naming each choice
// (Fa3Schedule below; the shipped schedule of each head dim is fa3_fwd.cu's, the ablation builds the lab's), so every
// build of the ablation table comes from the same source and says by name what it changes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "schedule.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace attn::hopper {

// A forward schedule: derive from it and override the members that differ (C++ name hiding), e.g.
//     struct TwoWarpgroups : Fa3Schedule { static constexpr int consumer_warpgroups = 2; };
struct Fa3Schedule {
    // Consumer warpgroups of 64 query rows each (1 to 3): the CTA's tile is 64 * consumer_warpgroups rows.
    static constexpr int consumer_warpgroups = 2;
    // kProducerWarpgroup: a producer warpgroup (one thread issues every TMA load) beside the consumers, setmaxnreg
    // moving registers from the producer to the consumers; kConsumerThreadZero: thread 0 of the first consumer
    // warpgroup issues the loads between its own GEMMs.
    static constexpr Loads loads = Loads::kProducerWarpgroup;
    // Intra-warpgroup overlap: S(j) = Q K(j)^T and O += P(j-1) V(j-1) in flight together while the softmax of S(j)
    // runs; otherwise S, softmax, P V in sequence.
    static constexpr bool intra_wg_overlap = true;
    // Pingpong: the consumer warpgroups take turns issuing their GEMMs (named barriers), so one warpgroup's softmax
    // runs while the other's GEMMs use the tensor cores.
    static constexpr bool pingpong = true;
    static constexpr Grid grid = Grid::kOneCtaPerTile;
    // Keys per K / V tile (a multiple of 16, at most 256) and the K / V ring depth (0: 3 where Q and three (K, V)
    // stages fit the 227 KB a block may use, else 2).
    static constexpr int block_n = 128;
    static constexpr int kv_stages = 0;
    static constexpr Rescale rescale = Rescale::kEager;
    // kRegisters: Q read from shared memory into registers once per tile (ldmatrix) and S = Q K^T as an RS wgmma, so
    // the tensor cores fetch only K from shared memory (d = 128 only: 32 more registers per thread; in the
    // two-warpgroup build with 128-key tiles measured +2-6% on the H200; with 176-key tiles, and with three
    // warpgroups, it spills).
    static constexpr QOperand q_operand = QOperand::kSharedMemory;
    // O += P V over dv in whole 64-column blocks or over dv itself (schedule.cuh PvColumns; differs at d = 96 only).
    static constexpr PvColumns pv_columns = PvColumns::kWholeBlocks;
    // The consumer loop's stages (schedule.cuh RunEveryStage; a lab timing build leaves one out).
    using Stages = RunEveryStage;
};

// D: the head dim of Q and K; DV: of V and O (dv != d: Q K^T and P V of different widths). Shared memory holds each in
// whole 64-column (128-byte) blocks: a head dim that is not a multiple of 64 (96) takes the next whole block, whose
// columns past the tensor TMA fills with zeros (tma_host.cuh: the map's extent is the real head dim), so S = Q K^T
// runs over the D / 16 real k-steps only and O += P V over whole blocks, whose padding columns of O stay 0 and are
// never stored (epilogue.cuh), or over dv's columns alone (Fa3Schedule::pv_columns).
template <int D, typename Elem_, class Schedule, ScoreScale kScale, int DV = D>
struct Fa3Config {
    using Elem = Elem_;
    using Stages = typename Schedule::Stages;
    static constexpr int kHeadDim = D;
    static constexpr int kHeadDimV = DV;
    static constexpr int kConsumerWGs = Schedule::consumer_warpgroups;
    static constexpr bool kWS = Schedule::loads == Loads::kProducerWarpgroup;
    static constexpr bool kOverlap = Schedule::intra_wg_overlap, kPingpong = Schedule::pingpong;
    static constexpr bool kPersistent = Schedule::grid == Grid::kPersistent;
    static constexpr bool kPrescale = kScale == ScoreScale::kPrescaled;
    // The lazy rescale: a row keeps its running maximum until a key tile's exceeds it by more than 8 in log2 units
    // (P <= 2^8; softmax.cuh), and a warp skips O *= corr when every row of it kept its maximum (a vote): exact in
    // real arithmetic; on standard normal inputs the maxima stop moving after the first key tiles, so O is rescaled
    // almost never.
    static constexpr bool kSkipRescale = Schedule::rescale == Rescale::kLazy;
    static constexpr int kMaxStale = kSkipRescale ? 8 : 0;
    struct Softmax : SoftmaxOptions {
        static constexpr int max_stale = kMaxStale;
    };
    static constexpr bool kQRegs = Schedule::q_operand == QOperand::kRegisters;
    // A consumer waits for the K / V stages its GEMMs read before it takes its pingpong turn (FA3's order: the
    // turn's critical section is then the wgmma issue alone), or inside the turn. Before, in one process against
    // inside (H200, B=4 H=16 N=8192): d = 64 1.00-1.03x, d = 128 0.98-0.99x, d = 256 0.99-1.00x; so d = 64 only.
    static constexpr bool kWaitBeforeTurn = D == 64;
    // Grid::kCluster2: clusters of two CTAs on query tiles m, m + 1 of one head, which see the same key tiles (no
    // causal mask, window or varlen: the launcher decides); each CTA loads half the column blocks of every K / V tile
    // and multicasts them to both (scheduler.cuh cluster_tile), so each K / V byte leaves L2 once per two query tiles.
    static constexpr int kClusterM = Schedule::grid == Grid::kCluster2 ? 2 : 1;
    static_assert(kClusterM == 1 || (kClusterM == 2 && kWS && D >= 128 && D % 128 == 0 && DV == D),
                  "clusters of two: a producer warpgroup, an even number of 64-column blocks, dv = d");
    static_assert(!kQRegs || D == 128, "Q in registers: built for head dim 128");
    static_assert(D % 16 == 0 && DV % 16 == 0 && D <= 256 && DV <= 256, "head dims: multiples of 16 up to 256");
    // O is written through the Q tile's rows in shared memory (epilogue.cuh): its blocks must fit Q's.
    static_assert(DV <= 64 * ((D + 63) / 64), "dv: at most d's whole 64-column blocks");
    static_assert(kConsumerWGs >= 1 && kConsumerWGs <= 3, "one to three consumer warpgroups");
    static_assert(!kPingpong || kConsumerWGs >= 2, "pingpong needs two or more consumer warpgroups");
    static_assert(!kPersistent || kWS, "the persistent loop runs with a producer warpgroup");
    static_assert(!kWS || kConsumerWGs >= 2, "warp specialisation is built with two or three consumer warpgroups");

    static constexpr int kBlockM = 64 * kConsumerWGs;  // query rows per CTA (64 per consumer warpgroup)
    static constexpr int kBlockN = Schedule::block_n;  // keys per K/V tile
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "key tile: a multiple of 16 up to 256");
    static constexpr int kColBlocks = (D + 63) / 64;    // 64-column (128-byte) blocks per row of Q and K
    static constexpr int kColBlocksV = (DV + 63) / 64;  // ... of V and O
    // S = Q K^T (loops.cuh ConsumerSteps::gemm_s): D / 16 k-steps of 32 bytes over rows of 128-byte column blocks,
    // wgmma with K-major B.
    static constexpr int kRowBytes = 128, kKSteps = D / 16;
    // The consumers' shared-memory descriptors (loops.cuh ConsumerSteps::set_descs): Q, K and V in 128-byte swizzled
    // rows (atoms of 8 rows); V MN-major, its leading byte offset one 64-column block of kBlockN rows.
    static constexpr uint32_t kAtomBytes = 8 * kRowBytes, kSwizzleLayout = 1;
    static constexpr uint32_t kVLeadBytes = kBlockN * 128, kVAtomBytes = 1024, kVSwizzleLayout = 1;
    struct ScoreMma {
        static __device__ __forceinline__ void ss(float (&s)[kBlockN / 2], uint64_t a, uint64_t b, int acc) {
            wgmma_ss<0>(Wgmma<Elem, kBlockN>{}, s, a, b, acc);
        }
        static __device__ __forceinline__ void rs(float (&s)[kBlockN / 2], const uint32_t (&a)[4], uint64_t b, int acc) {
            wgmma_rs<0>(Wgmma<Elem, kBlockN>{}, s, a, b, acc);
        }
    };
    // O's columns in registers, the N of O += P V: whole blocks, or dv (V's layout stays whole blocks either way).
    static constexpr int kHeadDimVPad = Schedule::pv_columns == PvColumns::kHeadDim ? DV : 64 * kColBlocksV;
    static constexpr uint32_t kQBytes = kBlockM * kColBlocks * 128;
    static constexpr uint32_t kKBytes = kBlockN * kColBlocks * 128;
    static constexpr uint32_t kVBytes = kBlockN * kColBlocksV * 128;
    static constexpr int kStages =
        Schedule::kv_stages > 0 ? Schedule::kv_stages : (kQBytes + 3 * (kKBytes + kVBytes) + 2048 <= 232448 ? 3 : 2);
    static constexpr int kThreads = 128 * (kConsumerWGs + (kWS ? 1 : 0));
    static constexpr int kConsumerThreads = 128 * kConsumerWGs;
    // setmaxnreg targets: what the producer gives back the consumers take (entry: 65536 / kThreads,
    // rounded down to a multiple of 8: 168 with 384 threads, 128 with 512).
    static constexpr int kProducerRegs = kConsumerWGs == 3 ? 32 : 24;
    static constexpr int kConsumerRegs = kConsumerWGs == 3 ? 160 : 240;

    // Persistent builds double-buffer Q where shared memory allows, so the producer loads the next
    // tile's Q (and then its K/V) while the consumers still compute and store the current one.
    static constexpr int kQStages =
        (kPersistent && 2 * kQBytes + kStages * (kKBytes + kVBytes) + 2048 <= 232448) ? 2 : 1;
    static constexpr uint32_t kOffK = kQStages * kQBytes;
    static constexpr uint32_t kOffV = kOffK + kStages * kKBytes;
    static constexpr uint32_t kOffBar = kOffV + kStages * kVBytes;
    // barriers (loops.cuh SmemRegions): full_q[2], empty_q[2], full_k[S], empty_k[S], full_v[S], empty_v[S],
    // tile_full[2], tile_empty[2]
    static constexpr int kQBarriers = 2, kBarrierRings = 2;  // Q's barrier pairs; rings K, V
    static constexpr int kNumBars = 2 * kQBarriers + 2 * kBarrierRings * kStages + 4;
    static constexpr uint32_t kOffSlot = kOffBar + kNumBars * 8;
    static constexpr uint32_t kSmemBytes = kOffSlot + 16 + 1024;  // + slack to align the base to 1024

    // Named barrier ids (0 is __syncthreads): per-warpgroup epilogue, pingpong turns, all consumers.
    static constexpr int kBarEpilogue = 1;  // + consumer warpgroup (1..3)
    static constexpr int kBarTurn = 4;      // + consumer warpgroup whose turn it is (4..6)
    static constexpr int kBarConsumers = 7;
};

template <int S>
struct PipeState {
    int stage = 0;
    uint32_t phase = 0;
    __device__ __forceinline__ void advance() {
        if (++stage == S) {
            stage = 0;
            phase ^= 1;
        }
    }
};

}  // namespace attn::hopper
