// Tile shapes and shared-memory layout of the FA3 FP8 forward (SEMANTICS.md §10): a producer warpgroup
// (warp 0 issues the TMA loads, warps 1-3 transpose V into the k-major layout FP8 wgmma needs) and two
// consumer warpgroups with pingpong and intra-warpgroup overlap, as config.cuh's two-warpgroup builds, or (k-major
// V) three consumer warpgroups with pingpong (at d = 128 each takes O += P V and then its next S in one turn).
//
// Tiles are 64 query rows per consumer warpgroup (128, or 192 with three) x 128 keys; the per-tile descale blocks
// are 128 x 128 (B_r = B_c = 128, the oracle's default tile_q / tile_k), so a warpgroup reads one Q descale and one K
// and one V descale per key tile (wider k-major key tiles: per-tensor / per-head descales only).
// FP8 rows are D bytes: Q, K and the raw V tile use a 128-byte swizzle for D >= 128 (D / 128 column blocks)
// and a 64-byte swizzle for D = 64; the transposed V tile (D rows of 128 keys) always uses the 128-byte one.
// O (bf16) is staged through its own buffer in the layout hopper/epilogue.cuh writes (64-column blocks of
// 128-byte rows).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include "config.cuh"
#include "wgmma_fp8.cuh"

namespace attn::hopper {

// Where the consumers' Vt tiles come from: V's codes as rows (as K), transposed into the k-major layout FP8 wgmma
// needs by the producer warpgroup's warps 1-3 in shared memory; or V delivered k-major (attn_params.h
// ATTN_FP8_V_KMAJOR, attn_fp8_pack_vt), loaded with TMA straight into the ring the consumers read, so that the
// transposing warps have nothing to do and no raw V ring is needed: their registers go to the consumers, which then
// hold wider key tiles.
enum class VSource { kRowsTransposed, kKMajor };

// An FP8 forward schedule (derive and override by name, as config.cuh's Fa3Schedule).
struct Fp8Schedule {
    static constexpr VSource v_source = VSource::kRowsTransposed;
    // kRegisters: Q read into registers once per tile (ldmatrix) and S = Q K^T as an RS wgmma (d = 128 only): the
    // tensor cores then fetch only K from shared memory.
    static constexpr QOperand q_operand = QOperand::kSharedMemory;
    // The 4 x 4-byte V transpose (fp8_layout.cuh transpose_v) at d = 128 too, instead of the 8 x 8-byte one.
    static constexpr bool narrow_transpose = false;
    // With per-tensor / per-head descales (one factor for the whole row) and no softcap, the score scale folds into
    // the exp2's FFMA (softmax.cuh's sl2) instead of a multiply per score.
    static constexpr bool fold_scale = true;
    // Keys per key tile: 0 = the head dim's default (128; 64 at d = 256); wider ones need k-major V.
    static constexpr int block_n = 0;
    // Consumer warpgroups of 64 rows: 2, or 3 (k-major V only): 192-row CTAs of 160 registers per consumer thread
    // taking turns, so that a warpgroup's softmax has two other warpgroups' GEMMs to hide under instead of one. At
    // d = 128 the exponentials take as long on the MUFU as the two GEMMs on the tensor cores (16 per SM per clock
    // against 8192 FP8 FLOPs, 4 d of them per score; at d = 64 twice as long), so with two warpgroups one's softmax
    // cannot hide under the other's GEMMs.
    static constexpr int consumer_warpgroups = 2;
    // Grid::kPersistent (k-major V only): gridDim.x = #SMs CTAs loop over the work tiles (scheduler.cuh), the producer
    // handing each tile index to the consumers through a shared-memory slot, as the FP16 / BF16 kernel's persistent
    // builds; Q stays single-buffered (the next tile's Q loads once every warpgroup's last S = Q K^T completed, under
    // the last softmax, P V product and epilogue; O has its own staging buffer).
    static constexpr Grid grid = Grid::kOneCtaPerTile;
    // > 0: every exp_poly_every-th 8-key chunk of the softmax takes its exponentials on the FMA pipe (softmax.cuh
    // exp2_fma). 62% of the softmax stage's `wait` stalls are MUFU.EX2 waiting for the MUFU (ncu, k-major build), but
    // the polynomial's extra instructions cost more: every fourth chunk 5% slower, every second 14%, so the shipped
    // builds have none.
    static constexpr int exp_poly_every = 0;
    using Stages = RunEveryStage;
};

// The head dim DH of Q, K, V (dv = d) is held in shared memory as D bytes, the next of 64, 128, 256 (96 -> 128,
// 192 -> 256): TMA fills the columns past the tensor's DH with zero codes (the maps' extent is the real head dim), so
// the tiles, swizzles and transposes are those of D. S = Q K^T runs DH / 32 k-steps, O += P V is N = DH rounded up to
// whole 64-column blocks (96 -> 128; 192 stays), and the epilogue stores DH columns.
constexpr int fp8_smem_dim(int dh) { return dh <= 64 ? 64 : dh <= 128 ? 128 : 256; }

template <int DH, typename Format_, class Schedule>
struct Fa3Fp8Config {
    static constexpr int D = fp8_smem_dim(DH);
    using Format = Format_;        // Fp8E4M3 or Fp8E5M2 (wgmma_fp8.cuh): Q, K, V codes and the rounded P
    using Elem = __nv_bfloat16;    // the output (epilogue.cuh)
    using Stages = typename Schedule::Stages;
    static constexpr int kHeadDim = D;
    // O's head dim, stored and in registers (epilogue.cuh, shared with the FP16 / BF16 forward): dv = d here.
    static constexpr int kHeadDimV = DH, kHeadDimVPad = 64 * ((DH + 63) / 64);
    static constexpr int kKSteps = DH / 32;  // k32 steps of S = Q K^T
    static constexpr bool kQRegs = Schedule::q_operand == QOperand::kRegisters;
    static constexpr bool kWideTranspose = D == 128 && !Schedule::narrow_transpose;
    static constexpr bool kFoldScale = Schedule::fold_scale;
    static constexpr bool kVtGlobal = Schedule::v_source == VSource::kKMajor;
    static_assert(!Schedule::narrow_transpose || D == 128, "the narrow transpose is a d = 128 build");
    static_assert(!kQRegs || D == 128, "Q in registers: built for head dim 128");
    static_assert(DH % 32 == 0 && DH <= 256, "FP8 head dims: multiples of 32 up to 256");
    static constexpr int kConsumerWGs = Schedule::consumer_warpgroups;
    static_assert(kConsumerWGs == 2 || (kConsumerWGs == 3 && kVtGlobal && !kQRegs),
                  "three consumer warpgroups: k-major V builds with Q read from shared memory (160 registers)");
    static constexpr bool kPersistent = Schedule::grid == Grid::kPersistent;
    static_assert(Schedule::grid != Grid::kCluster2, "no clusters in the FP8 forward");
    static_assert(!kPersistent || kVtGlobal, "persistent: the k-major V builds (no transposing warps to loop)");
    // Intra-warpgroup overlap (S(x) and O += P(x-1) V(x-1) in flight together) with two warpgroups, and with three at
    // d = 64 (O, S and P of a 128-key tile fit 160 registers); with three at d = 128 each warpgroup's GEMMs run one
    // at a time (S and P are then never live together).
    static constexpr bool kIntraWgOverlap = kConsumerWGs == 2 || D == 64;
    // d = 256: key tiles of 64 (the fp32 O of 128 registers per thread leaves no room for a 128-key S beside the
    // transposing warps' 56), so one per-tile descale block of 128 keys spans two key tiles.
    static constexpr int kBlockM = 64 * kConsumerWGs;
    static constexpr int kBlockN = Schedule::block_n != 0 ? Schedule::block_n : (D == 256 ? 64 : 128);
    static constexpr int kDescaleBlock = 128;  // rows / keys per per-tile descale (tile_q = tile_k = 128)
    // per-tile descales need every key tile inside one descale block (fa3_fp8_fwd.cu picks a build that has it)
    static constexpr bool kPerTileOk = kDescaleBlock % kBlockN == 0;
    static_assert(kBlockN == (D == 256 ? 64 : 128) || kVtGlobal, "other key tiles: the k-major V builds");
    static_assert(kBlockN % 64 == 0 && kBlockN <= 256, "key tiles of 64-key Vt column blocks, one wgmma N");
    static constexpr int kRowBytes = D < 128 ? D : 128;    // bytes of one swizzled row of Q, K, raw V
    static constexpr int kColBlocks = D / kRowBytes;
    // S = Q K^T's wgmma (loops.cuh ConsumerSteps::gemm_s, kKSteps k32 steps over kRowBytes-byte column blocks).
    struct ScoreMma {
        static __device__ __forceinline__ void ss(float (&s)[kBlockN / 2], uint64_t a, uint64_t b, int acc) {
            wgmma_ss(Wgmma8<Format, kBlockN>{}, s, a, b, acc);
        }
        static __device__ __forceinline__ void rs(float (&s)[kBlockN / 2], const uint32_t (&a)[4], uint64_t b, int acc) {
            wgmma_rs(Wgmma8<Format, kBlockN>{}, s, a, b, acc);
        }
    };
    static constexpr uint32_t kSwizzleLayout = kRowBytes == 128 ? 1 : 2;  // descriptor layout type (ptx.cuh)
    static constexpr uint32_t kAtomBytes = 8 * kRowBytes;  // 8 rows: the descriptor's stride byte offset
    // Vt: D rows of kBlockN keys, stored as column blocks of kVtColBytes keys (bytes): 128 with the 128-byte
    // swizzle when kBlockN is a multiple of 128, else 64 with the 64-byte swizzle (kBlockN = 64 or 192)
    static constexpr int kVtColBytes = kBlockN % 128 == 0 ? 128 : 64;
    static constexpr int kVtColBlocks = kBlockN / kVtColBytes;
    static constexpr uint32_t kVtSwizzleLayout = kVtColBytes == 128 ? 1 : 2;
    static constexpr uint32_t kVtAtomBytes = 8 * kVtColBytes;
    // Vt's descriptor (loops.cuh ConsumerSteps::set_descs): k-major like K.
    static constexpr uint32_t kVLeadBytes = 16, kVAtomBytes = kVtAtomBytes, kVSwizzleLayout = kVtSwizzleLayout;
    static_assert(kVtGlobal || kVtColBlocks == 1, "the in-kernel transposes write one Vt column block");

    static constexpr uint32_t kQBytes = kBlockM * D;
    static constexpr uint32_t kKVBytes = kBlockN * D;  // K, raw V and transposed V tiles alike
    static constexpr uint32_t kKBytes = kKVBytes;       // the K ring's stage (loops.cuh SmemRegions)
    static constexpr uint32_t kOBytes = kBlockM * kHeadDimVPad * 2;
    static constexpr int kRings = kVtGlobal ? 2 : 3;  // K, (raw V,) Vt
    static constexpr int kStages = kQBytes + kRings * 3 * kKVBytes + kOBytes + 2048 <= 232448 ? 3 : 2;
    static constexpr uint32_t kOffK = kQBytes;
    static constexpr uint32_t kOffVRaw = kOffK + kStages * kKVBytes;  // kVtGlobal: no raw V ring (never addressed)
    static constexpr uint32_t kOffVt = kOffVRaw + (kVtGlobal ? 0 : kStages * kKVBytes);
    static constexpr uint32_t kOffO = kOffVt + kStages * kKVBytes;
    static constexpr uint32_t kOffBar = kOffO + kOBytes;
    // barriers (loops.cuh SmemRegions): full_q, empty_q, then full_k[S], empty_k[S], full_vraw[S], empty_vraw[S],
    // full_v[S], empty_v[S] (kVtGlobal too: the raw V ring's barriers are never used), then (persistent)
    // tile_full[2], tile_empty[2]; after them (persistent) the two work-tile slots
    static constexpr int kQBarriers = 1, kBarrierRings = 3;  // Q's barrier pair; rings K, raw V, Vt
    static constexpr int kNumBars = 2 * kQBarriers + 2 * kBarrierRings * kStages + (kPersistent ? 4 : 0);
    static constexpr uint32_t kOffSlot = kOffBar + kNumBars * 8;
    static constexpr uint32_t kSmemBytes = kOffSlot + (kPersistent ? 8 : 0) + 1024;  // + slack to align the base

    // The softmax of key tile x kept ahead of the wait for O += P(x-1) V(x-1) (ptx.cuh before_wait), where that
    // measured faster: the k-major d = 64 build (+5-7%; d = 128 and 256 were 3-6% slower, the BF16 kernel unchanged;
    // with the per-tile division and mask test gone, d = 128 under the PV product was again 0-5% slower).
    static constexpr bool kSoftmaxUnderPV = kVtGlobal && D == 64;
    // The softmax: P with the max offset 2^8, the row maxima as four chains each (ptxas then starts the second row's
    // maximum under the first row's exponentials), the schedule's exponentials on the FMA pipe.
    struct Softmax : SoftmaxOptions {
        static constexpr int log2_offset = 8, max_chains = 4, poly_every = Schedule::exp_poly_every;
    };
    static constexpr int kThreads = 128 * (kConsumerWGs + 1);
    static constexpr int kConsumerThreads = 128 * kConsumerWGs;
    static constexpr int kTransposeWarps = 3;  // warps 1-3 of the producer warpgroup
    // setmaxnreg moves registers inside the CTA: what the producer warpgroup gives back (128 x (168 - P)) must
    // cover what the consumers take (256 x (C - 168)), i.e. P + 2 C <= 3 x 168 = 504, else setmaxnreg.inc waits
    // forever. The transposing warps get 56 (the 8 x 8 transpose holds 16 words of one block and 8 of its output), the
    // consumers 224.
    static constexpr int kProducerRegs = kVtGlobal ? 24 : 56;
    static constexpr int kConsumerRegs = kConsumerWGs == 3 ? 160 : kVtGlobal ? 240 : 224;
    static_assert(kProducerRegs + kConsumerWGs * kConsumerRegs <= (kConsumerWGs + 1) * (65536 / kThreads / 8 * 8),
                  "setmaxnreg budget of the CTA (each warpgroup enters with 65536 / kThreads, a multiple of 8)");

    // loops.cuh ConsumerSteps: O rescaled after every key tile (the factor also carries the V descale ratio); a key
    // tile's K and V stages awaited in the warpgroup's turn.
    static constexpr bool kSkipRescale = false, kWaitBeforeTurn = false;
    static constexpr int kBarEpilogue = 1;  // + consumer warpgroup (1..3)
    static constexpr int kBarTurn = 4;      // + consumer warpgroup whose turn it is (4..6)
    static constexpr bool kPingpong = true;  // loops.cuh Turns: the consumer warpgroups always take turns
    static constexpr int kClusterM = 1;      // no clusters
};

}  // namespace attn::hopper
