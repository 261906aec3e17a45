// The FA3 backward main loop for Hopper (sm_90a): one CTA per (K/V tile of 128 keys, query head, batch),
// dK and dV accumulated in registers while the CTA walks the query tiles that can see its keys. Head dims up to
// 128 (d = dv); d = 256 is bwd_wide.cuh's (consumers sharing 64 keys, the accumulators' head dim split between them),
// d = 192 and (192, 128) bwd_sliced.cuh's (three consumers sharing 96 keys).
// Semantics: oracles/SEMANTICS.md (§2 scale, §3 softcap, §4 causal alignments, §5 windows, §7 varlen,
// §8 fully masked rows, §9 GQA, §13 gradients). The pre- and postprocess kernels (D = rowsum(dO * O) - dlse,
// dq = scale * dq_accum, the GQA reduction, d sinks) are ../bwd_prepost.cuh's, shared with the FA2 backward.
//
// Warps: a producer warpgroup (warp 0 lane 0 issues every TMA load: K and V once, then Q_i and dO_i into a
// ring of kStages; warp 1 copies LSE_i * log2(e) and D_i into the same stage) and two consumer warpgroups,
// consumer w owning keys [64 w, 64 w + 64) of the tile. Per query tile i (kBlockM rows: 128 at d = 64, 80 at
// d = 96 / 128, 64 in the lab's builds), consumer w computes
//   S^T  = K_w Q_i^T, dP^T = V_w dO_i^T          wgmma SS, both K-major, [64 keys x kBlockM queries]
//   P^T  = exp2(S^T * scale * log2 e - LSE_i * log2 e)  (0 where not visible; LSE = -inf reads as +inf)
//   dS^T = P^T (dP^T - D_i)                      (times 1 - tanh^2 with a softcap)
//   dV  += P^T dO_i, dK += dS^T Q_i              wgmma RS: P^T, dS^T from registers, dO_i / Q_i MN-major
//   dQ_i = dS K                                   wgmma SS: dS^T stored to shared memory (128-byte swizzle)
//                                                 and read MN-major (imm-trans-a), K MN-major, over all 128
//                                                 keys: alternating (DqSplit::kAlternate), consumer
//                                                 i % 2 computes the whole tile; the split builds give
//                                                 consumer w head-dim columns
//                                                 [64 w, 64 w + 64) (d = 128) or query rows [64 w, 64 w + 64)
//                                                 (d = 64, 128-row tiles); with 64-row tiles at d = 64 each
//                                                 consumer a full-width partial over its own keys
//   or dQ_i^T = K^T dS^T (DqForm::kKtDsT, d = 96 / 128: M = the head dim, so the tile's rows are wgmma's N, 80):
//                                                 dS stored [queries][keys] (stmatrix .trans) and read K-major,
//                                                 K MN-major (imm-trans-a); consumer w computes head-dim
//                                                 columns [64 w, 64 w + 64) over all 128 keys
// and adds it into the fp32 dq_accum (through shared memory and a producer warp's TMA reduce-add, or the
// consumers' atomics): in any order, or (kDeterministic) in a fixed order: a semaphore per (batch, head, query
// tile) counts the CTAs (atomics: consumers) that have added so far, and key tile n adds only after every key tile
// n' < n that sees the query tile (from n_first, SeqMask::keys_for_rows), so every run adds the same partials in
// the same order.
// Varlen padding inside the tensors (rows past the real lengths) may hold anything (NaN): the consumers
// zero K / V rows j >= lk and Q / dO rows i >= lq in shared memory before any GEMM reads them; rows past the
// tensor extent arrive as zeros from TMA.
// dK (times the scale) and dV leave at the end (DkvStore): staged through the K / V rows of the consumer's own keys
// in shared memory once both consumers have passed an all-consumer barrier after their last GEMM (nothing reads or
// loads K / V after that), then 16-byte row segments; GQA's fp32 rows and unaligned dk / dv by 4- / 8-byte stores
// straight from the accumulators.
#pragma once
#include <math.h>

#include <type_traits>

#include "../attn_params.h"
#include "../fa_ptx.cuh"
#include "../mask.cuh"
#include "bwd_wgmma.cuh"
#include "config.cuh"
#include "ptx.cuh"
#include "scheduler.cuh"
#include "tma_host.cuh"
#include "wgmma.cuh"

namespace attn::hopper {

struct Fa3BwdParams {
    AttnBwdParams p;
    TmaTensor q, k, v, dout;
    CUtensorMap dq_map;  // kTmaDq builds: dq_accum fp32 (D, Lq, Hq, B), box (32, 64), 128-byte swizzle
    int* dq_sem;  // deterministic builds: [B, Hq, ceil(Lq / kBlockM)] counters, zeroed by the launcher
    TileOrder order;  // CTA blockIdx.x takes key tile order.num_m - 1 - m of order.at(blockIdx.x) (scheduler.cuh)
};

// How the consumers' dQ partials reach the fp32 dq_accum: stored to shared memory and added by a producer warp with
// TMA reduce-add (cp.reduce.async.bulk.tensor), or added by the consumers' own fp32 atomics.
enum class DqAdd { kTmaReduce, kAtomics };
// How a query tile's dQ = dS K over the CTA's 128 keys is shared between the two consumers: split, each a [64 x 64]
// block (by head-dim columns at D = 128, by query rows with 128-row tiles at D = 64; with 64-row tiles at D = 64 each a
// full-width partial over its own keys); or alternating: consumer (it % 2) computes the whole dQ of the CTA's it-th
// tile and the other none, so that the consumers wait for each other one way per tile (the dQ consumer for the
// other's dS^T rows) instead of meeting at a barrier (TMA dQ only, [128 x 64] or [64 x 128] tiles); or alternating one
// tile behind: consumer (it % 2) computes the dQ of tile it - 1 (the last tile's after the loop), whose dS^T both
// stored a tile earlier, so the dQ consumer does not wait for the other's element-wise pass of the same tile (which,
// late by the dQ work it did the tile before, set the pace of kAlternate: a period of a tile plus a dQ, instead of a
// tile plus half a dQ).
enum class DqSplit { kSplit, kAlternate, kAlternateLagged };
// What the dQ consumer issues beside a tile's dQ (BwdConsumer::alt_dq): the tile's dK += dS^T Q, or nothing (the last
// tile's dQ of kAlternateLagged, after the loop).
enum class DqWith { kDk, kNothing };
// The GEMM that gives a tile's dQ: dQ = dS K (M = the tile's query rows, 64 or 128: wgmma's M is 64 a warpgroup), A =
// dS^T stored [keys][queries] and read MN-major; or transposed, dQ^T = K^T dS^T (M = the head dim, N = the tile's
// query rows: any multiple of 16), B = dS stored [queries][keys] (stmatrix .trans) and read K-major, A = K read
// MN-major. The transposed form frees the query tile from M = 64 (flash-attn-4's sm90 backward at d <= 128 streams
// 80-row tiles so: 20% fewer tiles, and their fixed costs, per key tile).
enum class DqForm { kDsK, kKtDsT };
// How a consumer writes its dK (times the scale) and dV where they are the input dtype (not GQA's fp32 rows, which
// always go straight from the registers): element pairs stored 4 bytes at a time from the accumulator fragments (a
// warp's store touches 8 rows, 16 bytes of each); or staged, the fragments put by stmatrix into the K / V rows of the
// consumer's own keys in shared memory (free once both consumers' last GEMMs have completed: an all-consumer barrier)
// and copied out 16 bytes a thread, whole row segments a warp, where dk and dv are 16-byte aligned and their strides
// whole groups of 8 elements (else the 4-byte path). Staged measured 1.010-1.021x the backward at d = 64, 96, 128
// (H100, in-process; docs/fa3_backward.md): the CTA, which holds the SM alone, leaves sooner.
enum class DkvStore { kDirect, kStaged };
// How the CTA's keys and the dK / dV accumulators are shared by the consumers: each of two owns 64 of 128 keys and
// their dK, dV over the whole head dim (this file's Fa3BwdConfig, d <= 128); or two share 64 keys, consumer 0 holding
// dK and consumer 1 dV (bwd_wide.cuh's Fa3BwdWideConfig, d = 192, 256 and (192, 128)); or three share 96 keys, each
// owning 32 of them for S and dP and a 64-column slice of dK, dV and dQ (bwd_sliced.cuh's Fa3BwdSlicedConfig,
// d = dv = 192).
enum class BwdTiling { kKeysPerConsumer, kSharedKeys, kHeadDimSlices };

// A backward schedule (derive and override by name, as config.cuh's Fa3Schedule).
struct Fa3BwdSchedule {
    static constexpr BwdTiling tiling = BwdTiling::kKeysPerConsumer;
    // Add the dQ partials in a fixed order (a semaphore per query tile), so that two runs give bit-identical dq.
    static constexpr bool deterministic = false;
    // S^T and dP^T in two commit groups, P^T computed while dP^T runs and dV += P^T dO issued before dS^T is computed
    // (more registers live: at D = 128 ptxas then serialises the wgmma); otherwise the GEMMs of a tile run as two
    // batches around the element-wise work.
    static constexpr bool overlap = false;
    static constexpr DqAdd dq_add = DqAdd::kAtomics;
    static constexpr DqSplit dq_split = DqSplit::kSplit;
    static constexpr DqForm dq_form = DqForm::kDsK;
    // Query rows per streamed tile: 64, or 128 at D = 64 (half the per-tile fixed costs, one dQ addition per element
    // and CTA; at D = 128 the accumulators of 128-row tiles would not fit in the registers); with dQ^T = K^T dS^T at
    // D = 128 a multiple of 16 up to 80 (S^T, dP^T of 80 queries: 40 + 40 registers beside dK, dV's 128).
    static constexpr int block_m = 64;
    static constexpr int stages = 2;  // the Q / dO ring
    static constexpr DkvStore dkv_store = DkvStore::kStaged;  // how dK / dV leave the consumers (DkvStore)
};

// The schedule S with the dQ partials added in a fixed order (attn_fa3_bwd_deterministic).
template <class S>
struct Deterministic : S {
    static constexpr bool deterministic = true;
};

// DH: the tensors' head dim (d = dv). Shared memory and the dK / dV accumulators hold D = DH in whole 64-column blocks
// (96 -> 128): TMA fills the columns past DH with zeros (the maps' extent is DH), so dK, dV and dQ get zero columns
// there, which are never stored (the dQ writer skips the 32-column boxes past DH); S^T and dP^T run DH / 16 k-steps.
template <int DH, typename Elem_, class Schedule>
struct Fa3BwdConfig {
    static constexpr int D = 64 * ((DH + 63) / 64);
    using Elem = Elem_;
    static constexpr int kHeadDim = D;
    static constexpr int kTensorHeadDim = DH;  // the row length of q, k, v, dq_accum, dk_accum, ... in memory
    static constexpr int kTensorHeadDimV = DH;  // dv = d here (host side: the maps of v and dout)
    // The columns of the dK / dV accumulators, the N of dK += dS^T Q and dV += P^T dO: the tensors' head dim (96 reads
    // one and a half 64-column blocks of Q / dO, as the forward's O += P V reads V at dv = 96), not the padded D.
    static constexpr int kAccDim = DH;
    static constexpr BwdTiling kTiling = BwdTiling::kKeysPerConsumer;
    static_assert(Schedule::tiling == BwdTiling::kKeysPerConsumer, "shared-key schedules: bwd_wide.cuh");
    static_assert(DH % 16 == 0, "head dims: multiples of 16");
    static constexpr bool kDeterministic = Schedule::deterministic, kOverlap = Schedule::overlap;
    static constexpr bool kTmaDq = Schedule::dq_add == DqAdd::kTmaReduce;
    static constexpr bool kStagedDkv = Schedule::dkv_store == DkvStore::kStaged;
    static_assert(D == 64 || D == 128, "head dims 64, 128");
    static constexpr int kBlockN = 128;  // keys per CTA: 64 per consumer warpgroup
    static constexpr int kBlockM = Schedule::block_m;  // query rows per streamed tile
    // dQ^T = K^T dS^T (DqForm::kKtDsT): consumer w computes head-dim rows [64 w, 64 w + 64) of dQ^T over all 128 keys
    static constexpr bool kDqT = Schedule::dq_form == DqForm::kKtDsT;
    static_assert(!kDqT || (D == 128 && kTmaDq && !Schedule::overlap && Schedule::dq_split == DqSplit::kSplit),
                  "dQ^T = K^T dS^T: D = 128 (a 64-column block per consumer), TMA dQ, split, no overlap");
    static_assert(kBlockM == 64 || (kBlockM == 128 && D == 64) || (kDqT && kBlockM % 16 == 0 && kBlockM <= 80),
                  "query tiles: 64 rows, 128 at head dim 64, a multiple of 16 up to 80 with dQ^T = K^T dS^T");
    static constexpr int kStages = Schedule::stages;
    static constexpr int kColBlocks = D / 64;
    static constexpr int kThreads = 384;
    static constexpr int kConsumerThreads = 256;
    // setmaxnreg: the 128-row build at D = 64 gives the consumers 240 (H200: +2-3% over 40 / 232, fewer spills in its
    // consumer loop); the others keep 40 for the producer (24 / 240 at D = 128 measured no change).
    // dQ^T = K^T dS^T with 80-row tiles: 24 / 240 too (S^T and dP^T of 80 queries beside dK and dV).
    static constexpr int kProducerRegs = kBlockM == 128 || kDqT ? 24 : 40;
    static constexpr int kConsumerRegs = kBlockM == 128 || kDqT ? 240 : 232;
    // dQ = dS K split over the consumers, each a [64 x 64] block over all 128 keys (both consumers' dS^T in shared
    // memory, double-buffered), so that each dQ element gets one addition per CTA: by head-dim columns at D = 128
    // (consumer w: columns [64 w, 64 w + 64); half the accumulator registers), by query rows with 128-row tiles
    // (consumer w: rows [64 w, 64 w + 64) of the tile). D = 64 with 64-row tiles (32-column halves would start
    // inside a 128-byte swizzle atom): each consumer computes a full-width partial over its own 64 keys and adds it.
    static constexpr bool kDqLag = Schedule::dq_split == DqSplit::kAlternateLagged;
    static constexpr bool kDqAlt = Schedule::dq_split == DqSplit::kAlternate || kDqLag;
    static_assert(!kDqAlt || (kBlockM * D == 128 * 64 && kTmaDq && !kOverlap),
                  "alternating dQ: [128 x 64] or [64 x 128] tiles, TMA dQ");
    static constexpr bool kSplitDqCols = D == 128 && !kDqAlt;
    static constexpr bool kSplitDqRows = kBlockM == 128 && !kDqAlt;
    static constexpr bool kSplitDq = kSplitDqCols || kSplitDqRows;
    static constexpr int kDqCols = 64;  // columns of one dQ block: [64 x 64] (dQ = dS K) or [kBlockM x 64] (dQ^T)
    // Where the two [64 x 64] dQ blocks of a tile go: rows [64 w, 64 w + 64) or columns [64 w, 64 w + 64) (else
    // both are full-width partials of the same rows, D = 64 with 64-row tiles)
    static constexpr bool kDqBlocksByRows = kSplitDqRows || (kDqAlt && D == 64);
    static constexpr bool kDqBlocksByCols = kSplitDqCols || (kDqAlt && D == 128);
    static constexpr int kDsBufs = kSplitDq || kDqAlt ? 2 : 1;
    static constexpr uint32_t kKVBytes = kBlockN * D * 2;
    static constexpr uint32_t kQBytes = kBlockM * D * 2;
    static constexpr uint32_t kOffK = 0;
    static constexpr uint32_t kOffV = kOffK + kKVBytes;
    static constexpr uint32_t kOffQ = kOffV + kKVBytes;
    static constexpr uint32_t kDOBytes = kQBytes;  // dv = d here
    static constexpr uint32_t kOffDO = kOffQ + kStages * kQBytes;
    // dS^T [kBlockN keys][kBlockM queries] in blocks of 64 queries (kBlockN * 128 bytes each, 128-byte swizzle);
    // kDqT: dS [kBlockM queries][kBlockN keys] in blocks of 64 keys (kBlockM * 128 bytes each)
    static constexpr uint32_t kOffDS = kOffDO + kStages * kQBytes;
    static constexpr uint32_t kDsBytes = kBlockN * kBlockM * 2;
    // kTmaDq: two fp32 [kDqRows rows][64 columns] dQ blocks (two 32-column blocks each, 128-byte swizzle, the dQ
    // map's box), one per consumer, or (kDqAlt) both for the consumer whose turn it is
    static constexpr int kDqRows = kDqT ? kBlockM : 64;
    static constexpr uint32_t kDqBytes = kDqRows * 64 * 4;
    static constexpr uint32_t kOffDq = kOffDS + kDsBufs * kDsBytes;
    static constexpr uint32_t kOffLse = kOffDq + (kTmaDq ? 2 * kDqBytes : 0);
    static constexpr uint32_t kOffD = kOffLse + kStages * kBlockM * 4;
    static constexpr uint32_t kOffBar = kOffD + kStages * kBlockM * 4;
    static constexpr int kDqBlocks = 2;  // one [64 x 64] dQ block (and its barriers) per consumer
    static constexpr int kNumBars = 1 + 2 * kStages + 4;  // full_kv, full[S], empty[S], full_dq[2], empty_dq[2]
    static constexpr uint32_t kSmemBytes = kOffBar + kNumBars * 8 + 1024;
    static_assert(kSmemBytes <= 232448, "shared memory per block");
    // Named barriers (0 is __syncthreads): per consumer warpgroup (1, 2), all consumers (3).
    // kDqAlt: dS^T buffer b written by the other consumer (4 + b), read by the dQ consumer (6 + b).
    static constexpr int kBarWG = 1, kBarConsumers = 3, kBarDsFull = 4, kBarDsEmpty = 6;
};

// The regions and barriers both backward mainloops lay out alike (this one's config and bwd_wide.cuh's name the same
// offsets): K and V, the Q / dO ring, the LSE / D vectors, the fp32 dQ blocks, and the barriers full_kv, full[S],
// empty[S], full_dq[kDqBlocks], empty_dq[kDqBlocks].
template <class C>
struct BwdRingSmem {
    unsigned char* base;
    __device__ __forceinline__ unsigned char* k() const { return base + C::kOffK; }
    __device__ __forceinline__ unsigned char* v() const { return base + C::kOffV; }
    __device__ __forceinline__ unsigned char* q(int s) const { return base + C::kOffQ + s * C::kQBytes; }
    __device__ __forceinline__ unsigned char* dout(int s) const { return base + C::kOffDO + s * C::kDOBytes; }
    __device__ __forceinline__ unsigned char* dq(int qb) const { return base + C::kOffDq + qb * C::kDqBytes; }
    __device__ __forceinline__ float* lse(int s) const {
        return reinterpret_cast<float*>(base + C::kOffLse) + s * C::kBlockM;
    }
    __device__ __forceinline__ float* dd(int s) const {
        return reinterpret_cast<float*>(base + C::kOffD) + s * C::kBlockM;
    }
    __device__ __forceinline__ uint64_t* bar(int i) const { return reinterpret_cast<uint64_t*>(base + C::kOffBar) + i; }
    __device__ __forceinline__ uint64_t* full_kv() const { return bar(0); }
    __device__ __forceinline__ uint64_t* full(int s) const { return bar(1 + s); }
    __device__ __forceinline__ uint64_t* empty(int s) const { return bar(1 + C::kStages + s); }
    __device__ __forceinline__ uint64_t* full_dq(int qb) const { return bar(1 + 2 * C::kStages + qb); }
    __device__ __forceinline__ uint64_t* empty_dq(int qb) const { return bar(1 + 2 * C::kStages + C::kDqBlocks + qb); }
};

template <class C>
struct BwdSmem : BwdRingSmem<C> {
    using BwdRingSmem<C>::base, BwdRingSmem<C>::full_kv, BwdRingSmem<C>::full, BwdRingSmem<C>::empty,
        BwdRingSmem<C>::full_dq, BwdRingSmem<C>::empty_dq;
    __device__ __forceinline__ unsigned char* ds(int i) const { return base + C::kOffDS + i * C::kDsBytes; }

    __device__ __forceinline__ void init() const {
        mbar_init(full_kv(), 1);
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init(full(s), 1 + 32);  // the TMA thread's expect_tx arrival + the 32 LSE / D lanes
            mbar_init(empty(s), C::kConsumerThreads);
        }
        for (int w = 0; w < 2; ++w) {
            mbar_init(full_dq(w), 128);  // every thread of consumer w, after its shared-memory stores
            mbar_init(empty_dq(w), 1);   // the dQ writer, once TMA has read the tile
        }
        mbar_init_fence();
    }
};

// The query tiles one CTA visits: [t_first, t_first + n_tiles), in the order (it + rot) mod n_tiles.
struct BwdTiles {
    SeqMask mask;
    int n0;  // first key of the CTA's tile
    int t_first, n_tiles, rot;

    template <class C>
    __device__ __forceinline__ static BwdTiles make(const AttnFwdParams& p, int b, int n_block) {
        BwdTiles t;
        t.mask = make_mask(p, b);
        t.n0 = n_block * C::kBlockN;
        int qlo, qhi;
        t.mask.rows_for_keys(t.n0, t.n0 + C::kBlockN, &qlo, &qhi);
        t.t_first = qlo / C::kBlockM;
        t.n_tiles = qlo <= qhi ? qhi / C::kBlockM - t.t_first + 1 : 0;
        // Non-deterministic builds start each CTA at a different query tile, so that the key tiles of one
        // head do not all add into the same dq_accum rows at the same time.
        t.rot = (!C::kDeterministic && t.n_tiles > 0) ? static_cast<int>(n_block % t.n_tiles) : 0;
        return t;
    }
    __device__ __forceinline__ int tile(int it) const {
        const int x = it + rot;
        return t_first + (x >= n_tiles ? x - n_tiles : x);
    }
};



// ---- TMA reduce helpers (kTmaDq) ------------------------------------------------------------------------
__device__ __forceinline__ void tma_reduce_add_4d(const void* tmap, const void* src, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
            tmap),
        "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// All committed bulk groups of this thread have finished reading shared memory / have completed entirely.
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// The dQ writer (one thread of the producer warpgroup, kTmaDq builds): per query tile, waits for each consumer's
// fp32 dQ tile in shared memory and adds it into dq_accum with TMA reduce-add (rows past the tensor are not
// written). Deterministic builds: first waits until every earlier key tile that sees the query tile has added
// (one count per CTA), adds consumer 0's tile, waits for its completion, then consumer 1's (D = 64: both add to
// the same elements, so their order is fixed too), then counts itself.
template <class C>
__device__ void bwd_dq_writer(const Fa3BwdParams& P, BwdSmem<C> sm, const BwdTiles& T, int b, int h) {
    const AttnFwdParams& f = P.p.fwd;
    const int num_m = (f.seqlen_q + C::kBlockM - 1) / C::kBlockM;
    int* sem_head = C::kDeterministic ? P.dq_sem + (static_cast<size_t>(b) * f.heads_q + h) * num_m : nullptr;
    for (int it = 0; it < T.n_tiles; ++it) {
        const int m_tile = T.tile(it), m0 = m_tile * C::kBlockM;
        if constexpr (C::kDeterministic) {
            int klo, khi;
            T.mask.keys_for_rows(m0, m0 + C::kBlockM, &klo, &khi);
            const int expect = T.n0 / C::kBlockN - klo / C::kBlockN;
            int v;
            do {
                asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem_head + m_tile) : "memory");
            } while (v != expect);
            fence_proxy_async_global();
        }
        // Two [kDqRows x 64] blocks dq(0), dq(1): one consumer's whole tile (kDqAlt, one hand-off) or each
        // consumer's own block (one hand-off each).
        if constexpr (C::kDqAlt) mbar_wait(sm.full_dq(0), it & 1);
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            if constexpr (!C::kDqAlt) mbar_wait(sm.full_dq(w), it & 1);
            const int row0 = m0 + (C::kDqBlocksByRows ? 64 * w : 0), col0 = C::kDqBlocksByCols ? 64 * w : 0;
            if (row0 < f.seqlen_q) {
#pragma unroll
                for (int cb = 0; cb < 2; ++cb) {
                    if (col0 + 32 * cb < C::kTensorHeadDim)  // a box past DH holds padding columns only
                        tma_reduce_add_4d(&P.dq_map, sm.dq(w) + cb * (C::kDqRows * 128), col0 + 32 * cb, row0, h,
                                          b);
                }
            }
            if (!C::kDqAlt || w == 1) {
                bulk_commit();
                if constexpr (C::kDeterministic) bulk_wait_all();
            }
        }
        if constexpr (C::kDeterministic) {
            fence_proxy_async_global();
            __threadfence();
            atomicAdd(sem_head + m_tile, 1);
        } else {
            bulk_wait_read();
        }
        mbar_arrive(sm.empty_dq(0));
        // kDqAlt: one hand-off per tile, through block 0's barriers; nobody waits on empty_dq(1), so arriving there
        // completed phases no thread observed (compute-sanitizer synccheck: "Missing wait", H200 2026-12-05)
        if constexpr (!C::kDqAlt) mbar_arrive(sm.empty_dq(1));
    }
    bulk_wait_all();
}

// One element of P^T from its score s (both backward mainloops' element-wise passes): P = 2^(s scale log2 e - LSE log2 e),
// or with a softcap P = 2^(cap tanh(s scale / cap) log2 e - LSE log2 e) and s := P (1 - tanh^2) for dS^T; with
// kMask, 0 where (row, key) is not visible. Softcap and masking are compile-time (kCap, kMask), so each of the four
// paths a caller dispatches to is straight-line code (a per-element branch on them had made the backward's loop body
// large enough to miss the instruction cache: ncu, 48% of the element-wise stalls were no_inst). Returns P; s holds
// P (times 1 - tanh^2 under a softcap).
template <bool kCap, bool kMask>
__device__ __forceinline__ float bwd_p_elem(float& s, float lse2, float sl2, float scale_over_cap, float softcap,
                                            const SeqMask& mask, int row, int key) {
    const float raw = s;
    float pij, dcap = 1.f;
    if constexpr (kCap) {
        const float th = tanhf(raw * scale_over_cap);
        dcap = 1.f - th * th;
        pij = fast_exp2(softcap * th * kLog2e - lse2);
    } else {
        pij = fast_exp2(raw * sl2 - lse2);
    }
    if constexpr (kMask) pij = mask.visible(row, key) ? pij : 0.f;
    s = pij * dcap;
    return pij;
}

// The element-wise pass of a tile as the four straight-line paths of bwd_p_elem (both backward mainloops):
// pass(cap, mask) with std::true_type / std::false_type for "a softcap applies" and "the tile needs per-element
// masks". (The FA2 backward, ../bwd_fa2_kernel.cuh, writes the same dispatch out: routed through this, its PTX
// changed, and that kernel was validated on the GPU as it is.)
template <class Pass>
__device__ __forceinline__ void dispatch_cap_mask(bool capped, bool need_mask, Pass&& pass) {
    using Yes = std::true_type;
    using No = std::false_type;
    if (capped) {
        if (need_mask)
            pass(Yes{}, Yes{});
        else
            pass(Yes{}, No{});
    } else if (need_mask) {
        pass(No{}, Yes{});
    } else {
        pass(No{}, No{});
    }
}

// Chunk j (8 query columns, 4 values a thread) of a consumer's P^T or dS^T in the accumulator layout, packed into
// the A fragments of an RS wgmma / one stmatrix.x4 per 16 queries: frag[j / 2][2 (j % 2) + {0, 1}] = Elem pairs
// (v0, v1), (v2, v3) (both backward mainloops).
template <typename Elem, int N>
__device__ __forceinline__ void bwd_pack_chunk(uint32_t (&frag)[N][4], int j, const float (&v)[4]) {
    frag[j / 2][2 * (j % 2)] = MmaOp<Elem>::pack(v[0], v[1]);
    frag[j / 2][2 * (j % 2) + 1] = MmaOp<Elem>::pack(v[2], v[3]);
}

// dS^T = P^T (dP^T - D) for chunk j, packed (bwd_pack_chunk): s holds P^T (times 1 - tanh^2 under a softcap, from
// bwd_p_elem), dp dP^T, d2 the D values of the chunk's two query columns.
template <typename Elem, int N, int M>
__device__ __forceinline__ void bwd_ds_chunk(uint32_t (&dsa)[N][4], int j, const float (&s)[M], const float (&dp)[M],
                                             float2 d2) {
    float dsv[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) dsv[x] = s[4 * j + x] * (dp[4 * j + x] - (x % 2 ? d2.y : d2.x));
    bwd_pack_chunk<Elem>(dsa, j, dsv);
}

// The producer's warp 1 (both backward mainloops: this one's and bwd_wide.cuh's): per query tile of T, LSE_i * log2 e
// (-inf, a row with no visible key, becomes +inf so that P = 2^-inf = 0, not NaN; rows past the real length also read
// +inf) and D_i (0 past the real length) into the ring stage's vectors, then its arrival on the stage's full barrier
// (which counts these 32 lanes beside the TMA thread's expect_tx).
template <class C, class Smem>
__device__ __forceinline__ void bwd_copy_lse_d(const Fa3BwdParams& P, const Smem& sm, const BwdTiles& T, int b, int h,
                                               int lane) {
    const AttnFwdParams& f = P.p.fwd;
    const float* lse = f.lse + b * f.lse_batch_stride + h * f.lse_head_stride;
    const float* drow = P.p.d_rowsum + (static_cast<size_t>(b) * f.heads_q + h) * f.seqlen_q;
    PipeState<C::kStages> ps;
    for (int it = 0; it < T.n_tiles; ++it) {
        const int m0 = T.tile(it) * C::kBlockM;
        constexpr int kReps = (C::kBlockM + 31) / 32;  // 80-row tiles: the third pass has 16 lanes
        float l[kReps], d[kReps];
#pragma unroll
        for (int r = 0; r < kReps; ++r) {
            const int i = m0 + lane + 32 * r;
            const bool in = i < T.mask.sq;
            const float x = in ? lse[i] : INFINITY;
            l[r] = x == -INFINITY ? INFINITY : x * kLog2e;
            d[r] = in ? drow[i] : 0.f;
        }
        mbar_wait(sm.empty(ps.stage), ps.phase ^ 1);
#pragma unroll
        for (int r = 0; r < kReps; ++r) {
            if (C::kBlockM % 32 == 0 || lane + 32 * r < C::kBlockM) {
                sm.lse(ps.stage)[lane + 32 * r] = l[r];
                sm.dd(ps.stage)[lane + 32 * r] = d[r];
            }
        }
        mbar_arrive(sm.full(ps.stage));
        ps.advance();
    }
}

template <class C>
__device__ void bwd_producer(const Fa3BwdParams& P, BwdSmem<C> sm, const BwdTiles& T, int b, int h) {
    const AttnFwdParams& f = P.p.fwd;
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int hkv = h / (f.heads_q / f.heads_kv);
    if (warp == 0 && lane == 0) {
        mbar_arrive_expect_tx(sm.full_kv(), 2 * C::kKVBytes);
#pragma unroll
        for (int cb = 0; cb < C::kColBlocks; ++cb) {
            tma_load_4d(sm.k() + cb * (C::kBlockN * 128), &P.k.map, sm.full_kv(), cb * 64, T.n0, hkv * P.k.head_mul,
                        b * P.k.batch_mul);
            tma_load_4d(sm.v() + cb * (C::kBlockN * 128), &P.v.map, sm.full_kv(), cb * 64, T.n0, hkv * P.v.head_mul,
                        b * P.v.batch_mul);
        }
        PipeState<C::kStages> ps;
        for (int it = 0; it < T.n_tiles; ++it) {
            const int m0 = T.tile(it) * C::kBlockM;
            mbar_wait(sm.empty(ps.stage), ps.phase ^ 1);
            mbar_arrive_expect_tx(sm.full(ps.stage), 2 * C::kQBytes);
#pragma unroll
            for (int cb = 0; cb < C::kColBlocks; ++cb) {
                tma_load_4d(sm.q(ps.stage) + cb * (C::kBlockM * 128), &P.q.map, sm.full(ps.stage), cb * 64, m0,
                            h * P.q.head_mul, b * P.q.batch_mul);
                tma_load_4d(sm.dout(ps.stage) + cb * (C::kBlockM * 128), &P.dout.map, sm.full(ps.stage), cb * 64, m0,
                            h * P.dout.head_mul, b * P.dout.batch_mul);
            }
            ps.advance();
        }
    } else if (warp == 2 && lane == 0 && C::kTmaDq) {
        bwd_dq_writer<C>(P, sm, T, b, h);
    } else if (warp == 1) {
        bwd_copy_lse_d<C>(P, sm, T, b, h, lane);
    }
}

// Rows [r_lo, r_hi) of a [rows][64]-blocked, 128-byte-swizzled tile of kBlocks column blocks := 0, every consumer
// thread (threadIdx.x >= 128, kThreads of them) a share; the caller orders it before the tensor cores read (proxy
// fence + an all-consumer barrier). Every backward tiling's (this file's, bwd_wide.cuh's, bwd_sliced.cuh's).
template <int kBlocks, int kThreads>
__device__ __forceinline__ void bwd_zero_rows(unsigned char* tile, int rows, int r_lo, int r_hi) {
    const int words = (r_hi - r_lo) * 8;  // 16-byte words per 64-column block
    for (int c = threadIdx.x - 128; c < words * kBlocks; c += kThreads) {
        const int cb = c / words, wi = c % words;
        *reinterpret_cast<uint4*>(tile + cb * (rows * 128) + r_lo * 128 + wi * 16) = make_uint4(0, 0, 0, 0);
    }
}

// One fp32 [64 x 64] dQ block (accumulator layout) into shared memory for the dQ writer: two 32-column blocks,
// 128-byte swizzle (the 16-byte chunk c of row r at c ^ (r % 8)), the dq_map's box. Every backward tiling's.
__device__ __forceinline__ void bwd_store_dq_block(unsigned char* dqs, const float (&acc)[32]) {
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int r = 16 * warp + lane / 4 + 8 * hh;
#pragma unroll
        for (int j = 0; j < 64 / 8; ++j) {
            const int col = 8 * j + 2 * (lane % 4), cb = col / 32, ch = (col % 32) / 4;
            *reinterpret_cast<float2*>(dqs + cb * (64 * 128) + r * 128 + ((ch ^ (r % 8)) * 16) + (col % 4) * 4) =
                make_float2(acc[4 * j + 2 * hh], acc[4 * j + 2 * hh + 1]);
        }
    }
}

template <class C>
struct BwdConsumer {
    using Elem = typename C::Elem;
    // D: the head dim in shared memory; DT: the tensors' (config: kTensorHeadDim); DA: the dK / dV accumulators'.
    static constexpr int D = C::kHeadDim, DT = C::kTensorHeadDim, DA = C::kAccDim, BM = C::kBlockM, BN = C::kBlockN;
    const Fa3BwdParams& P;
    BwdSmem<C> sm;
    const BwdTiles& T;
    int cw, b, h;

    __device__ __forceinline__ void wg_sync() const { named_sync(C::kBarWG + cw, 128); }

    // dK += dS^T Q (A: dS^T from registers, B: Q MN-major), one commit group.
    template <class DsA>
    __device__ __forceinline__ void issue_dk(float (&dk)[DA / 2], DsA& dsa, uint64_t q_mn) const {
        fence_regs(dk);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BM / 16; ++ks)
            wgmma_rs<1>(Wgmma<Elem, DA>{}, dk, dsa[ks], desc_advance(q_mn, ks * 2048), 1);
        wgmma_commit();
    }

    // acc = one [64 x 64] block of dQ = dS K over kKeys keys: A = dS^T at ds_addr (MN-major, [keys][64 queries]),
    // B = K from the descriptor k_desc on (MN-major); no commit.
    template <int kKeys>
    __device__ __forceinline__ void issue_dq_block(float (&acc)[32], uint32_t ds_addr, uint64_t k_desc) const {
        const uint64_t ds_desc = sw128_desc(ds_addr, 64 * 128, 1024);
#pragma unroll
        for (int ks = 0; ks < kKeys / 16; ++ks)
            wgmma_ss_t<1, 1>(Wgmma<Elem, 64>{}, acc, desc_advance(ds_desc, ks * 2048), desc_advance(k_desc, ks * 2048),
                             ks > 0 ? 1 : 0);
    }

    // kDqT: acc = this consumer's [64 x BM] block of dQ^T = K^T dS^T over all 128 keys: rows = head-dim columns
    // [64 cw, 64 cw + 64), A = K^T from k_desc (K's column block cw read MN-major, imm-trans-a), B = dS at ds_addr
    // (K-major: [BM queries][64 keys] blocks of BM * 128 bytes, 128-byte swizzle); no commit.
    __device__ __forceinline__ void issue_dqt_block(float (&acc)[BM / 2], uint32_t ds_addr, uint64_t k_desc) const {
        const uint64_t ds_desc = sw128_desc(ds_addr, 16, 1024);
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks)
            wgmma_ss_t<1, 0>(Wgmma<Elem, BM>{}, acc, desc_advance(k_desc, ks * 2048),
                             desc_advance(ds_desc, (ks / 4) * (BM * 128) + (ks % 4) * 32), ks > 0 ? 1 : 0);
    }

    // kDqT: one fp32 [64 head-dim columns x BM queries] dQ^T block (accumulator layout: element 4 j + 2 hh + x at
    // column 16 warp + lane / 4 + 8 hh, query 8 j + 2 (lane % 4) + x) to shared memory as the dQ map's boxes want it,
    // [BM rows][32 columns] twice, 128-byte swizzle: one 4-byte store an element (the 8 columns and 4 queries a warp
    // stores at once fall in 32 distinct banks: the queries' rows % 8 differ by 2, the XOR spreads the two chunks).
    __device__ __forceinline__ void store_dqt_block(unsigned char* dqs, const float (&acc)[BM / 2]) const {
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int col = 16 * warp + lane / 4 + 8 * hh, cb = col / 32, ch = (col % 32) / 4;
            unsigned char* base = dqs + cb * (BM * 128) + (col % 4) * 4;
#pragma unroll
            for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
                for (int x = 0; x < 2; ++x) {
                    const int r = 8 * j + 2 * (lane % 4) + x;
                    *reinterpret_cast<float*>(base + r * 128 + ((ch ^ (r % 8)) * 16)) = acc[4 * j + 2 * hh + x];
                }
            }
        }
    }

    // kDqAlt, the dQ consumer of tile j (dS^T in buffer dsb): dQ = dS K over all 128 keys as two [64 x 64] blocks (D =
    // 64: query block qb of dS^T times K; D = 128: dS^T times column block qb of K; dS^T and K MN-major), then (kWith
    // = kDk) the current tile's dK += dS^T Q; once dQ has landed the dS^T buffer is released to the other consumer
    // (when a tile j + 2 will write it) and the fp32 tile, the writer's j-th hand-off, goes to shared memory while dK
    // still runs.
    template <DqWith kWith, class DsA>
    __device__ __forceinline__ void alt_dq(float (&dk)[DA / 2], DsA& dsa, int dsb, uint64_t q_mn, uint64_t k_dq, int j,
                                           int n_tiles) const {
        // D = 64: both blocks at once (dK, dV hold 64 registers); D = 128: one block at a time (dK, dV hold 128),
        // block 0 beside dK, then block 1 into the same registers.
        constexpr int kAtOnce = D == 64 ? 2 : 1;
        constexpr int kLater = kWith == DqWith::kDk ? 1 : 0;  // commit groups issued after dQ's
        float dq[kAtOnce][32];
        auto issue_dq = [&](int qb, float (&acc)[32]) {
            const uint32_t a_off = D == 64 ? qb * (BN * 128) : 0, b_off = D == 64 ? 0 : qb * (BN * 128);
            issue_dq_block<BN>(acc, smem_addr(sm.ds(dsb)) + a_off, desc_advance(k_dq, b_off));
        };
        wgmma_fence();
#pragma unroll
        for (int qb = 0; qb < kAtOnce; ++qb) issue_dq(qb, dq[qb]);
        wgmma_commit();
        if constexpr (kWith == DqWith::kDk) issue_dk(dk, dsa, q_mn);
        wgmma_wait<kLater>();
#pragma unroll
        for (int qb = 0; qb < kAtOnce; ++qb) fence_regs(dq[qb]);
        if constexpr (kAtOnce == 2) {
            if (j + 2 < n_tiles) named_arrive(C::kBarDsEmpty + dsb, C::kConsumerThreads);
        }
        // The writer's release of hand-off j - 1 (empty_dq's phase j - 1), waited on by parity: exact only while
        // that barrier is no more than one phase behind. kAlternate keeps it so (the other consumer's hand-off
        // j - 1 precedes this tile's dS^T barrier); the lagged turns do not (the other consumer may not yet have
        // made hand-off j - 1, with the writer still holding j - 2: a deterministic writer waits on lower key
        // tiles), so they first wait until hand-off j - 1 is made (full_dq's phase j - 1: this consumer made j - 2,
        // so that barrier is at most one phase behind).
        if constexpr (C::kDqLag) {
            if (j >= 1) mbar_wait(sm.full_dq(0), (j - 1) & 1);
        }
        mbar_wait(sm.empty_dq(0), (j & 1) ^ 1);
#pragma unroll
        for (int qb = 0; qb < kAtOnce; ++qb) bwd_store_dq_block(sm.dq(qb), dq[qb]);
        if constexpr (kAtOnce == 1) {
            wgmma_fence();
            issue_dq(1, dq[0]);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(dq[0]);
            if (j + 2 < n_tiles) named_arrive(C::kBarDsEmpty + dsb, C::kConsumerThreads);
            bwd_store_dq_block(sm.dq(1), dq[0]);
        }
        fence_proxy_async();
        mbar_arrive(sm.full_dq(0));
        wgmma_wait<0>();
    }

    __device__ __forceinline__ void run(float (&dk)[DA / 2], float (&dv)[DA / 2]) {
        const AttnFwdParams& f = P.p.fwd;
        const SeqMask& mask = T.mask;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const int kw0 = T.n0 + cw * 64;  // first key of this warpgroup
        const float sl2 = f.scale * kLog2e;
        const bool capped = f.softcap > 0.f;
        const float scale_over_cap = capped ? f.scale / f.softcap : 0.f;
        const uint32_t k_addr = smem_addr(sm.k()), v_addr = smem_addr(sm.v());
        // K / V are fixed for the CTA: this warpgroup's 64 key rows K-major (S^T, dP^T) and K MN-major for dQ = dS K
        // (split by columns: column block cw over all keys; by rows or taking turns: all of K; else this
        // warpgroup's keys)
        const uint64_t k_kw = sw128_desc(k_addr + cw * 64 * 128, 16, 1024);
        const uint64_t v_kw = sw128_desc(v_addr + cw * 64 * 128, 16, 1024);
        const uint32_t k_dq_off =
            C::kSplitDqCols ? cw * (BN * 128) : (C::kSplitDqRows || C::kDqAlt) ? 0 : cw * 64 * 128;
        const uint64_t k_dq = sw128_desc(k_addr + k_dq_off, BN * 128, 1024);
        float* dqa_head = P.p.dq_accum + (static_cast<size_t>(b) * f.heads_q + h) * f.seqlen_q * DT;
        const int num_m = (f.seqlen_q + BM - 1) / BM;
        int* sem_head = C::kDeterministic ? P.dq_sem + (static_cast<size_t>(b) * f.heads_q + h) * num_m : nullptr;

        mbar_wait(sm.full_kv(), 0);
        if (T.n0 + BN > mask.sk) {  // key rows past the real length: zero K and V (dQ = dS K reads every row;
            // a finite dP^T keeps dS = P (dP - D) = 0 where P = 0)
            bwd_zero_rows<C::kColBlocks, C::kConsumerThreads>(sm.k(), BN, max(mask.sk - T.n0, 0), BN);
            bwd_zero_rows<C::kColBlocks, C::kConsumerThreads>(sm.v(), BN, max(mask.sk - T.n0, 0), BN);
            fence_proxy_async();
            named_sync(C::kBarConsumers, C::kConsumerThreads);
        }
        PipeState<C::kStages> ps;
        for (int it = 0; it < T.n_tiles; ++it) {
            const int m_tile = T.tile(it), m0 = m_tile * BM;
            const int st = ps.stage;
            mbar_wait(sm.full(st), ps.phase);
            if (m0 + BM > mask.sq && mask.sq < f.seqlen_q) {  // varlen padding inside the tensor: zero it
                const int lo = max(mask.sq - m0, 0), hi = min(BM, f.seqlen_q - m0);
                bwd_zero_rows<C::kColBlocks, C::kConsumerThreads>(sm.q(st), BM, lo, hi);
                bwd_zero_rows<C::kColBlocks, C::kConsumerThreads>(sm.dout(st), BM, lo, hi);
                fence_proxy_async();
                named_sync(C::kBarConsumers, C::kConsumerThreads);
            }
            const uint32_t q_addr = smem_addr(sm.q(st)), do_addr = smem_addr(sm.dout(st));
            // Every wgmma descriptor of the tile is one of these plus a compile-time offset (ptx.cuh desc_advance):
            // K-major Q / dO for S^T / dP^T, MN-major Q / dO for dK / dV.
            const uint64_t q_k = sw128_desc(q_addr, 16, 1024), do_k = sw128_desc(do_addr, 16, 1024);
            const uint64_t q_mn = sw128_desc(q_addr, BM * 128, 1024), do_mn = sw128_desc(do_addr, BM * 128, 1024);

            // S^T = K_w Q^T and dP^T = V_w dO^T over the head dim, two commit groups: P^T is computed while dP^T
            // is still on the tensor cores, and dV += P^T dO runs while dS^T is computed.
            float s[BM / 2], dp[BM / 2];
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < DT / 16; ++ks) {
                const int cb = ks / 4, kk = ks % 4;
                const uint32_t a_off = cb * (BN * 128) + kk * 32, b_off = cb * (BM * 128) + kk * 32;
                wgmma_ss<0>(Wgmma<Elem, BM>{}, s, desc_advance(k_kw, a_off), desc_advance(q_k, b_off), ks > 0 ? 1 : 0);
            }
            if constexpr (C::kOverlap) wgmma_commit();
#pragma unroll
            for (int ks = 0; ks < DT / 16; ++ks) {
                const int cb = ks / 4, kk = ks % 4;
                const uint32_t a_off = cb * (BN * 128) + kk * 32, b_off = cb * (BM * 128) + kk * 32;
                wgmma_ss<0>(Wgmma<Elem, BM>{}, dp, desc_advance(v_kw, a_off), desc_advance(do_k, b_off),
                            ks > 0 ? 1 : 0);
            }
            wgmma_commit();
            if constexpr (C::kOverlap) {
                wgmma_wait<1>();
            } else {
                wgmma_wait<0>();
                fence_regs(dp);
            }
            fence_regs(s);

            // P^T in the accumulator layout: element e at key row 16 warp + lane / 4 + 8 ((e / 2) % 2), query
            // column 8 (e / 4) + 2 (lane % 4) + e % 2; one 8-column chunk j at a time (its LSE pair read from shared
            // memory there), packed into the A fragments right away. s keeps P^T (times 1 - tanh^2 with a softcap)
            // in fp32 for dS^T. Masked entries: P = 0, so dS = 0 too (every dP^T entry is finite: the padding of
            // K, V, Q, dO that could hold NaN was zeroed).
            const bool need_mask = !mask.tile_full(m0, m0 + BM, kw0, kw0 + 64);
            uint32_t pa[BM / 16][4], dsa[BM / 16][4];
            // One element of P^T (bwd_p_elem: one straight-line path per softcap / mask combination).
            auto p_elem = [&](auto cap_tag, auto mask_tag, int e, float lse2, int row) {
                const int key = kw0 + 16 * warp + lane / 4 + 8 * ((e % 4) / 2);
                return bwd_p_elem<decltype(cap_tag)::value, decltype(mask_tag)::value>(
                    s[e], lse2, sl2, scale_over_cap, f.softcap, mask, row, key);
            };
            auto p_chunk = [&](auto cap_tag, auto mask_tag, int j) {
                const int c0 = 8 * j + 2 * (lane % 4);
                const float2 l2 = lds_f2_in_order(sm.lse(st) + c0);
                float pv[4];
#pragma unroll
                for (int x = 0; x < 4; ++x)
                    pv[x] = p_elem(cap_tag, mask_tag, 4 * j + x, x % 2 ? l2.y : l2.x, m0 + c0 + x % 2);
                bwd_pack_chunk<Elem>(pa, j, pv);
            };
            // dS^T = P^T (dP^T - D)
            auto ds_chunk = [&](int j) {
                bwd_ds_chunk<Elem>(dsa, j, s, dp, lds_f2_in_order(sm.dd(st) + 8 * j + 2 * (lane % 4)));
            };
            auto issue_dv = [&] {
                fence_regs(dv);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < BM / 16; ++ks)
                    wgmma_rs<1>(Wgmma<Elem, DA>{}, dv, pa[ks], desc_advance(do_mn, ks * 2048), 1);
            };
            auto elementwise = [&](auto cap_tag, auto mask_tag) {
                if constexpr (C::kOverlap) {
#pragma unroll
                    for (int j = 0; j < BM / 8; ++j) p_chunk(cap_tag, mask_tag, j);
                    issue_dv();
                    wgmma_commit();
                    wgmma_wait<1>();  // dP^T has landed; dV may still run
                    fence_regs(dp);
#pragma unroll
                    for (int j = 0; j < BM / 8; ++j) ds_chunk(j);
                } else {
#pragma unroll
                    for (int j = 0; j < BM / 8; ++j) {
                        p_chunk(cap_tag, mask_tag, j);
                        ds_chunk(j);
                    }
                }
            };
            dispatch_cap_mask(capped, need_mask, elementwise);

            // dS^T to shared memory (this warpgroup's 64 key rows of each 64-query block, 128-byte swizzle). Single
            // buffer (no split): every warp of the warpgroup has finished the previous tile's dQ GEMM, which read
            // these rows. Double buffer (split dQ): the other consumer passed the previous tile's all-consumer
            // barrier after its dQ GEMM of the tile before, the last reader of this buffer.
            const int dsb = C::kDsBufs == 2 ? (it & 1) : 0;
            if constexpr (!C::kOverlap) {  // dV += P^T dO runs while dS^T goes to shared memory
                issue_dv();
                wgmma_commit();
            }
            // kDqAlt: the other consumer's dQ GEMM of tile it - 2 read this buffer (the dQ consumer itself read it
            // earlier in its own order). kAlternate: the dQ consumer of tile it is (it % 2), so the other waits;
            // kDqLag: tile it - 2's was ((it - 1) % 2), so consumer (it % 2) waits.
            const bool dq_mine = !C::kDqAlt || cw == (it & 1);
            if constexpr (C::kDqAlt) {
                if ((C::kDqLag ? dq_mine : !dq_mine) && it >= 2)
                    named_sync(C::kBarDsEmpty + dsb, C::kConsumerThreads);
            } else if constexpr (!C::kSplitDq) {
                wg_sync();
            }
            // dsa[ks][r] holds row 16 warp + lane / 4 + 8 (r % 2), columns 8 (2 ks + r / 2) + 2 (lane % 4) + {0, 1}:
            // matrix r of one stmatrix.x4 per 16 queries, lane l addressing row l % 8 of matrix l / 8.
            unsigned char* ds_tile = sm.ds(dsb) + cw * 64 * 128;
            if constexpr (C::kDqT) {
                // dS (transposed by stmatrix .trans) into this warpgroup's 64-key block [BM queries][64 keys]: matrix
                // r of dsa[ks] (keys 16 warp + 8 (r % 2) + [0, 8), queries 8 (2 ks + r / 2) + [0, 8)) lands as 8 query
                // rows of one 16-byte key chunk; lane l addresses query row l % 8 of matrix l / 8.
                const int mi = lane / 8, chunk = 2 * warp + mi % 2;
                const uint32_t blk = smem_addr(sm.ds(dsb)) + cw * (BM * 128);
#pragma unroll
                for (int ks = 0; ks < BM / 16; ++ks) {
                    const int r = 8 * (2 * ks + mi / 2) + lane % 8;
                    stmatrix_x4_trans(blk + r * 128 + ((chunk ^ (r % 8)) * 16), dsa[ks]);
                }
            } else {
                const int mi = lane / 8, srow = 16 * warp + lane % 8 + 8 * (mi % 2);
                const uint32_t row_addr = smem_addr(ds_tile) + srow * 128;
#pragma unroll
                for (int ks = 0; ks < BM / 16; ++ks) {
                    const int col = 8 * (2 * ks + mi / 2), qb = col / 64, c = col % 64;
                    stmatrix_x4(row_addr + qb * (BN * 128) + (((c / 8) ^ (srow % 8)) * 16), dsa[ks]);
                }
            }
            fence_proxy_async();
            if constexpr (C::kDqLag) {
                // tile it's dQ consumer is ((it + 1) % 2), at tile it + 1: the other announces its rows
                if (dq_mine) named_arrive(C::kBarDsFull + dsb, C::kConsumerThreads);
            } else if constexpr (C::kDqAlt) {
                if (dq_mine)
                    named_sync(C::kBarDsFull + dsb, C::kConsumerThreads);
                else
                    named_arrive(C::kBarDsFull + dsb, C::kConsumerThreads);
            } else if constexpr (C::kSplitDq) {
                named_sync(C::kBarConsumers, C::kConsumerThreads);
            } else {
                wg_sync();
            }
            if constexpr (C::kDqAlt) {
                // kDqLag: the dQ of tile it - 1 (both halves of its dS^T stored a tile ago), beside this tile's dK
                if (dq_mine && (!C::kDqLag || it >= 1)) {
                    const int j = C::kDqLag ? it - 1 : it, jb = C::kDqLag ? dsb ^ 1 : dsb;
                    if constexpr (C::kDqLag) named_sync(C::kBarDsFull + jb, C::kConsumerThreads);
                    wgmma_wait<0>();  // dV has landed: P^T's registers are free before dQ's are taken
                    fence_regs(dv);
                    fence_regs(pa);
                    alt_dq<DqWith::kDk>(dk, dsa, jb, q_mn, k_dq, j, T.n_tiles);
                } else {
                    issue_dk(dk, dsa, q_mn);
                    wgmma_wait<0>();
                }
                fence_regs(dv);
                fence_regs(pa);
                fence_regs(dk);
                fence_regs(dsa);
                mbar_arrive(sm.empty(st));  // Q, dO, LSE, D of this stage are no longer read
                ps.advance();
                continue;
            }

            // dQ partial = dS K first, then dK += dS^T Q (A from registers, B MN-major), two commit groups: the dQ
            // tile leaves the registers while dK is still on the tensor cores (groups complete in order, so the
            // wait for dQ also covers dV).
            wgmma_wait<0>();  // dV has landed: P^T's registers are free before dQ's are taken
            fence_regs(dv);
            fence_regs(pa);
            float dq[C::kDqT ? BM / 2 : C::kDqCols / 2];
            wgmma_fence();
            if constexpr (C::kDqT)  // dQ^T rows [64 cw, 64 cw + 64) over all 128 keys (k_dq: column block cw of K)
                issue_dqt_block(dq, smem_addr(sm.ds(dsb)), k_dq);
            else if constexpr (C::kSplitDq)  // all 128 keys; columns: column block cw of K (k_dq), rows: query block cw
                issue_dq_block<BN>(dq, smem_addr(sm.ds(dsb)) + (C::kSplitDqRows ? cw * (BN * 128) : 0), k_dq);
            else  // this warpgroup's 64 keys (its dS^T rows, k_dq at its K rows)
                issue_dq_block<64>(dq, smem_addr(ds_tile), k_dq);
            wgmma_commit();
            issue_dk(dk, dsa, q_mn);
            wgmma_wait<1>();
            fence_regs(dq);
            fence_regs(dv);
            fence_regs(pa);

            if constexpr (C::kTmaDq) {
                // the fp32 dQ tile to shared memory for the dQ writer; the previous tile's must have been read by TMA
                mbar_wait(sm.empty_dq(cw), (it & 1) ^ 1);
                if constexpr (C::kDqT)
                    store_dqt_block(sm.dq(cw), dq);
                else
                    bwd_store_dq_block(sm.dq(cw), dq);
                fence_proxy_async();
                mbar_arrive(sm.full_dq(cw));
            }
            wgmma_wait<0>();
            fence_regs(dk);
            fence_regs(dsa);
            mbar_arrive(sm.empty(st));  // Q, dO, LSE, D of this stage are no longer read
            ps.advance();
            if constexpr (C::kTmaDq) continue;

            // dq_accum[rows of this tile] += dQ partial (unscaled; the postprocess multiplies by the scale).
            // Deterministic: both consumers of every earlier key tile n' (from the first that sees this query
            // tile) have added; split dQ: the two consumers of one CTA add disjoint blocks, in any order, so each
            // waits for 2 (n - n_first) additions; otherwise consumer w also waits for consumer 0 of its CTA.
            if constexpr (C::kDeterministic) {
                int klo, khi;
                mask.keys_for_rows(m0, m0 + BM, &klo, &khi);
                const int expect = 2 * (T.n0 / BN - klo / BN) + (C::kSplitDq ? 0 : cw);
                if (tid == 0) {
                    const int* sem = sem_head + m_tile;
                    int v;
                    do {
                        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
                    } while (C::kSplitDq ? v < expect : v != expect);
                }
                wg_sync();
            }
            const int col0 = C::kSplitDqCols ? cw * C::kDqCols : 0, row0 = m0 + (C::kSplitDqRows ? 64 * cw : 0);
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = row0 + 16 * warp + lane / 4 + 8 * hh;
                if (i < mask.sq) {
                    float* row = dqa_head + static_cast<size_t>(i) * DT + col0 + 2 * (lane % 4);
#pragma unroll
                    for (int j = 0; j < C::kDqCols / 8; ++j) {
                        if constexpr (DT != D) {  // padding columns of a padded head dim: not in dq_accum
                            if (col0 + 8 * j >= DT) continue;
                        }
                        atomicAdd(reinterpret_cast<float2*>(row + 8 * j),
                                  make_float2(dq[4 * j + 2 * hh], dq[4 * j + 2 * hh + 1]));
                    }
                }
            }
            if constexpr (C::kDeterministic) {
                __threadfence();
                wg_sync();
                if (tid == 0) atomicAdd(sem_head + m_tile, 1);
            }
        }
        if constexpr (C::kDqLag) {  // the last tile's dQ: its consumer is (n_tiles % 2)
            const int j = T.n_tiles - 1;
            if (j >= 0 && cw == (T.n_tiles & 1)) {
                named_sync(C::kBarDsFull + (j & 1), C::kConsumerThreads);
                uint32_t none[1][4];
                alt_dq<DqWith::kNothing>(dk, none, j & 1, 0, k_dq, j, T.n_tiles);
            }
        }
    }

    // dK (times the scale) and dV of this warpgroup's 64 keys; rows past the padded length are not written,
    // rows past the real length hold 0 (no query sees them). GQA: fp32 per query head into dk_accum /
    // dv_accum, reduced over each group by the postprocess.
    __device__ __forceinline__ void store(const float (&dk)[DA / 2], const float (&dv)[DA / 2]) const {
        const AttnFwdParams& f = P.p.fwd;
        const AttnBwdParams& pb = P.p;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const bool gqa = f.heads_q != f.heads_kv;
        const int hkv = h / (f.heads_q / f.heads_kv);
        if constexpr (C::kStagedDkv) {
            // CTA-uniform, so both consumers take the same path (store_staged meets at an all-consumer barrier)
            const bool vec = (reinterpret_cast<uintptr_t>(pb.dk) | reinterpret_cast<uintptr_t>(pb.dv)) % 16 == 0 &&
                             (pb.dk_row_stride | pb.dk_head_stride | pb.dk_batch_stride | pb.dv_row_stride |
                              pb.dv_head_stride | pb.dv_batch_stride) % 8 == 0;
            if (!gqa && vec) {
                store_staged(dk, dv, hkv);
                return;
            }
        }
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int j = T.n0 + cw * 64 + 16 * warp + lane / 4 + 8 * hh;
            if (j >= f.seqlen_k) continue;
#pragma unroll
            for (int jj = 0; jj < DT / 8; ++jj) {  // the real columns: the padding of a padded D is never stored
                const int c = 8 * jj + 2 * (lane % 4);
                const float k0 = dk[4 * jj + 2 * hh] * f.scale, k1 = dk[4 * jj + 2 * hh + 1] * f.scale;
                const float v0 = dv[4 * jj + 2 * hh], v1 = dv[4 * jj + 2 * hh + 1];
                if (gqa) {
                    const size_t off = ((static_cast<size_t>(b) * f.heads_q + h) * f.seqlen_k + j) * DT + c;
                    *reinterpret_cast<float2*>(pb.dk_accum + off) = make_float2(k0, k1);
                    *reinterpret_cast<float2*>(pb.dv_accum + off) = make_float2(v0, v1);
                } else {
                    Elem* dkp = static_cast<Elem*>(pb.dk) + b * pb.dk_batch_stride + hkv * pb.dk_head_stride +
                                j * pb.dk_row_stride + c;
                    Elem* dvp = static_cast<Elem*>(pb.dv) + b * pb.dv_batch_stride + hkv * pb.dv_head_stride +
                                j * pb.dv_row_stride + c;
                    *reinterpret_cast<uint32_t*>(dkp) = MmaOp<Elem>::pack(k0, k1);
                    *reinterpret_cast<uint32_t*>(dvp) = MmaOp<Elem>::pack(v0, v1);
                }
            }
        }
    }

    // DkvStore::kStaged: dK (times the scale) and dV of this warpgroup's 64 keys through its K / V rows in shared
    // memory (the accumulator layout: thread lane holds row 16 warp + lane / 4 + 8 hh, columns 8 j + 2 (lane % 4) +
    // {0, 1}; per 16 columns one stmatrix.x4 of the matrices (hh, j) = (0, 2 ks), (1, 2 ks), (0, 2 ks + 1),
    // (1, 2 ks + 1), lane l addressing row l % 8 of matrix l / 8; 128-byte swizzle), then 16-byte row segments to
    // global memory. Rows past the real length are not written.
    __device__ __forceinline__ void store_staged(const float (&dk)[DA / 2], const float (&dv)[DA / 2], int hkv) const {
        const AttnFwdParams& f = P.p.fwd;
        const AttnBwdParams& pb = P.p;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        // both consumers' GEMMs have completed (each waited for its last before leaving its loop; dQ reads all of K),
        // and K / V are loaded once per CTA: the rows of this consumer's keys are its own from here
        named_sync(C::kBarConsumers, C::kConsumerThreads);
        {
            const int mi = lane / 8, r = cw * 64 + 16 * warp + lane % 8 + 8 * (mi % 2);
            const uint32_t k_row = smem_addr(sm.k()) + r * 128, v_row = smem_addr(sm.v()) + r * 128;
#pragma unroll
            for (int ks = 0; ks < DT / 16; ++ks) {
                uint32_t mk[4], mv[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int j = 2 * ks + i / 2, hh = i % 2;
                    mk[i] = MmaOp<Elem>::pack(dk[4 * j + 2 * hh] * f.scale, dk[4 * j + 2 * hh + 1] * f.scale);
                    mv[i] = MmaOp<Elem>::pack(dv[4 * j + 2 * hh], dv[4 * j + 2 * hh + 1]);
                }
                const int col = 8 * (2 * ks + mi / 2);
                const int off = (col / 64) * (BN * 128) + (((col % 64) / 8) ^ (r % 8)) * 16;
                stmatrix_x4(k_row + off, mk);
                stmatrix_x4(v_row + off, mv);
            }
        }
        wg_sync();
        Elem* dkp = static_cast<Elem*>(pb.dk) + b * pb.dk_batch_stride + hkv * pb.dk_head_stride;
        Elem* dvp = static_cast<Elem*>(pb.dv) + b * pb.dv_batch_stride + hkv * pb.dv_head_stride;
        constexpr int kGroups = DT / 8;  // 16-byte groups of a row: the padding of a padded D is never stored
#pragma unroll 4
        for (int c = tid; c < 64 * kGroups; c += 128) {
            const int rl = c / kGroups, cg = c % kGroups, r = cw * 64 + rl, j = T.n0 + r;
            if (j < f.seqlen_k) {
                const int off = (cg / 8) * (BN * 128) + r * 128 + (((cg % 8) ^ (r % 8)) * 16);
                *reinterpret_cast<uint4*>(dkp + j * pb.dk_row_stride + cg * 8) =
                    *reinterpret_cast<const uint4*>(sm.k() + off);
                *reinterpret_cast<uint4*>(dvp + j * pb.dv_row_stride + cg * 8) =
                    *reinterpret_cast<const uint4*>(sm.v() + off);
            }
        }
    }
};

// One CTA of a backward kernel (this one's, bwd_wide.cuh's, bwd_sliced.cuh's): its work tile; thread 0 initialises
// the barriers and prefetches the tensor maps the CTA will read (Q, dO and dQ's only when some query tile sees its
// keys), every thread waiting for it; then warpgroup 0 gives registers back and, when some query tile sees the keys,
// runs producer(sm, T, b, h); the others take registers and run consumer(sm, T, consumer index, b, h), also where no
// query tile sees the keys (their dK / dV are then zeros).
template <class C, class Smem, class Producer, class Consumer>
__device__ __forceinline__ void bwd_cta(const Fa3BwdParams& P, Producer&& producer, Consumer&& consumer) {
    extern __shared__ unsigned char smem_raw[];
    Smem sm{{align_smem_1k(smem_raw)}};
    const WorkTile w = P.order.at(blockIdx.x);
    const int b = w.b, h = w.h;
    const BwdTiles T = BwdTiles::make<C>(P.p.fwd, b, P.order.num_m - 1 - w.m_block);
    if (threadIdx.x == 0) {
        sm.init();
        tma_prefetch_desc(&P.k.map);
        tma_prefetch_desc(&P.v.map);
        if (T.n_tiles > 0) {
            tma_prefetch_desc(&P.q.map);
            tma_prefetch_desc(&P.dout.map);
            if constexpr (C::kTmaDq) tma_prefetch_desc(&P.dq_map);
        }
    }
    __syncthreads();
    const int wg = warpgroup_idx();
    if (wg == 0) {
        regs_dealloc<C::kProducerRegs>();
        if (T.n_tiles > 0) producer(sm, T, b, h);
    } else {
        regs_alloc<C::kConsumerRegs>();
        consumer(sm, T, wg - 1, b, h);
    }
}

// A consumer's whole work tile where it holds two accumulators of N floats (dK and dV, or dK^T and dV^T): zeroed,
// run over the query tiles that see its keys (none: they stay zero), stored.
template <int N, class Consumer>
__device__ __forceinline__ void consume_pair(Consumer& cs, const BwdTiles& T) {
    float a[N], b[N];
#pragma unroll
    for (int e = 0; e < N; ++e) a[e] = b[e] = 0.f;
    if (T.n_tiles > 0) cs.run(a, b);
    cs.store(a, b);
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fa3_bwd_kernel(const __grid_constant__ Fa3BwdParams P) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    bwd_cta<C, BwdSmem<C>>(
        P, [&](const BwdSmem<C>& sm, const BwdTiles& T, int b, int h) { bwd_producer<C>(P, sm, T, b, h); },
        [&](const BwdSmem<C>& sm, const BwdTiles& T, int cw, int b, int h) {
            BwdConsumer<C> cs{P, sm, T, cw, b, h};
            consume_pair<C::kAccDim / 2>(cs, T);
        });
#endif
}

}  // namespace attn::hopper
