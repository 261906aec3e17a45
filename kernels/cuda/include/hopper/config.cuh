// Tile shapes, shared-memory layout and the feature switches of the FA3 forward (one struct per
// instantiation, so every variant of the ablation table comes from the same source).
//
// kWS: a producer warpgroup (one thread issues every TMA load) beside kConsumerWGs = 2 consumer
//      or 3 consumer warpgroups, with setmaxnreg moving registers from the producer to the consumers.
//      Without it, thread 0 of the first consumer warpgroup issues the loads between its own GEMMs.
// kOverlap: intra-warpgroup overlap: S(j) = Q K(j)^T and O += P(j-1) V(j-1) are in flight together
//      while the softmax of S(j) runs.
// kPingpong: the consumer warpgroups take turns issuing their GEMMs (named barriers), so one
//      warpgroup's softmax runs while the other's GEMMs use the tensor cores.
// kPersistent: gridDim.x = #SMs CTAs loop over work tiles taken from a global counter (scheduler.cuh).
// kSkipRescale: the lazy rescale: a row keeps its running maximum until a key tile's exceeds it by more than
//      kMaxStale = 8 in log2 units (P <= 2^8; softmax.cuh), and a warp skips O *= corr when every row of it kept its
//      maximum (a vote): exact in real arithmetic; on standard normal inputs the maxima stop moving after the first
//      key tiles, so O is rescaled almost never. The default at d = 128 / 256 (fa3_fwd.cu kDefaultLazyRescale).
// kProbe: timing probes that leave one stage out (wrong results, never a default; kProbe* below).
// kQRegs: Q is read from shared memory into registers once per tile (ldmatrix) and S = Q K^T runs as an RS
//      wgmma, so the tensor cores fetch only K from shared memory (d = 128: 32 more registers per thread; in the
//      two-warpgroup build with 128-key tiles measured +2-6% on the H200; with 176-key tiles, and with three
//      warpgroups, it spills).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace attn::hopper {

template <int D, typename Elem_, int kConsumerWGs_, bool kWS_, bool kOverlap_, bool kPingpong_, bool kPersistent_,
          bool kPrescale_, int kBlockN_ = (D == 256 ? 64 : 128), int kStages_ = 0, bool kSkipRescale_ = false,
          int kProbe_ = 0, bool kQRegs_ = (D == 128 && kBlockN_ == 128), int kClusterM_ = 1>
struct Fa3Config {
    using Elem = Elem_;
    static constexpr int kHeadDim = D;
    static constexpr int kConsumerWGs = kConsumerWGs_;
    static constexpr bool kWS = kWS_, kOverlap = kOverlap_, kPingpong = kPingpong_, kPersistent = kPersistent_;
    static constexpr bool kPrescale = kPrescale_;
    static constexpr bool kSkipRescale = kSkipRescale_;
    static constexpr int kMaxStale = kSkipRescale ? 8 : 0;
    static constexpr int kProbe = kProbe_;
    static constexpr bool kQRegs = kQRegs_;
    // A consumer waits for the K / V stages its GEMMs read before it takes its pingpong turn (FA3's order: the
    // turn's critical section is then the wgmma issue alone), or inside the turn. Before, in one process against
    // inside (H200, B=4 H=16 N=8192, NOTES_FA3.md session 18): d = 64 1.00-1.03x, d = 128 0.98-0.99x, d = 256
    // 0.99-1.00x; so d = 64 only.
    static constexpr bool kWaitBeforeTurn = D == 64;
    // kClusterM = 2: clusters of two CTAs on query tiles m, m + 1 of one head, which see the same key tiles (no causal
    // mask, window or varlen: the launcher decides); each CTA loads half the column blocks of every K / V tile and
    // multicasts them to both (scheduler.cuh cluster_tile), so each K / V byte leaves L2 once per two query tiles.
    static constexpr int kClusterM = kClusterM_;
    static_assert(kClusterM == 1 || (kClusterM == 2 && kWS && !kPersistent && D >= 128),
                  "clusters of two: one CTA per work tile, a producer warpgroup, two or more 64-column blocks");
    static_assert(!kQRegs || D == 128, "Q in registers: built for head dim 128");
    static_assert(D == 64 || D == 128 || D == 256, "head dims 64, 128, 256");
    static_assert(kConsumerWGs >= 1 && kConsumerWGs <= 3, "one to three consumer warpgroups");
    static_assert(!kPingpong || kConsumerWGs >= 2, "pingpong needs two or more consumer warpgroups");
    static_assert(!kPersistent || kWS, "the persistent loop runs with a producer warpgroup");
    static_assert(!kWS || kConsumerWGs >= 2, "warp specialisation is built with two or three consumer warpgroups");

    static constexpr int kBlockM = 64 * kConsumerWGs;  // query rows per CTA (64 per consumer warpgroup)
    static constexpr int kBlockN = kBlockN_;  // keys per K/V tile (a multiple of 16, at most 256)
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "key tile: a multiple of 16 up to 256");
    // K/V ring depth: kStages_, or (0) 3 where Q + three (K, V) stages fit in the 227 KB a block may use, else 2.
    static constexpr int kStages =
        kStages_ > 0 ? kStages_ : (kBlockM * D * 2 + 3 * 2 * kBlockN_ * D * 2 + 2048 <= 232448 ? 3 : 2);
    static constexpr int kColBlocks = D / 64;            // 64-column (128-byte) blocks per row
    static constexpr int kThreads = 128 * (kConsumerWGs + (kWS ? 1 : 0));
    static constexpr int kConsumerThreads = 128 * kConsumerWGs;
    // setmaxnreg targets: what the producer gives back the consumers take (entry: 65536 / kThreads,
    // rounded down to a multiple of 8: 168 with 384 threads, 128 with 512).
    static constexpr int kProducerRegs = kConsumerWGs == 3 ? 32 : 24;
    static constexpr int kConsumerRegs = kConsumerWGs == 3 ? 160 : 240;

    static constexpr uint32_t kQBytes = kBlockM * D * 2;
    static constexpr uint32_t kKVBytes = kBlockN * D * 2;
    // Persistent builds double-buffer Q where shared memory allows, so the producer loads the next
    // tile's Q (and then its K/V) while the consumers still compute and store the current one.
    static constexpr int kQStages =
        (kPersistent && 2 * kQBytes + 2 * kStages * kKVBytes + 2048 <= 232448) ? 2 : 1;
    static constexpr uint32_t kOffK = kQStages * kQBytes;
    static constexpr uint32_t kOffV = kOffK + kStages * kKVBytes;
    static constexpr uint32_t kOffBar = kOffV + kStages * kKVBytes;
    // barriers: full_q[2], empty_q[2], full_k[S], empty_k[S], full_v[S], empty_v[S], tile_full[2], tile_empty[2]
    static constexpr int kNumBars = 4 + 4 * kStages + 4;
    static constexpr uint32_t kOffSlot = kOffBar + kNumBars * 8;
    static constexpr uint32_t kSmemBytes = kOffSlot + 16 + 1024;  // + slack to align the base to 1024

    // Named barrier ids (0 is __syncthreads): per-warpgroup epilogue, pingpong turns, all consumers.
    static constexpr int kBarEpilogue = 1;  // + consumer warpgroup (1..3)
    static constexpr int kBarTurn = 4;      // + consumer warpgroup whose turn it is (4..6)
    static constexpr int kBarConsumers = 7;
};

// Timing probes (kProbe): each leaves one stage of the consumer's loop out, so a run's time difference to the
// full build is what that stage costs on the critical path.
enum Fa3Probe { kProbeNone = 0, kProbeNoExp = 1, kProbeNoPV = 2, kProbeNoSoftmax = 3 };

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
