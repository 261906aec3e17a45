// The FA3 backward main loop for the wide head dims (sm_90a): d = dv in {192, 256} and (d, dv) = (192, 128), shipped
// at d = 256 (d = 192 ships bwd_sliced.cuh's 96-key tiles; this tiling there is the lab's shared_keys64). One CTA
// per (K/V tile of 64 keys, query head, batch); the two consumer warpgroups share the tile's 64 keys and split the
// work of each query tile between them by queries (S^T, dP^T, the element-wise pass) and by output (dK, dV, dQ).
// Semantics and everything not restated here as bwd_mainloop.cuh's (the narrow builds, d <= 128): TMA ring, LSE / D
// copy, NaN padding, masks, the deterministic dQ order, the pre- and postprocess of ../bwd_prepost.cuh.
//
// Why not bwd_mainloop.cuh's tiling: there each consumer owns 64 of 128 keys and holds their dK and dV over the whole
// head dim, d registers a thread; from d = 192 on that and S^T, dP^T exceed the 240 registers of a consumer. Here the
// head dim of the accumulators is split instead (as flash-attention's hopper backward does from d = 192 on): consumer 0
// holds dK [64 keys x d] (d / 2 registers), consumer 1 dV [64 keys x dv] (dv / 2), so neither holds more than 128.
//
// Per query tile i (64 rows; consumer w's queries are rows [32 w, 32 w + 32) of the tile):
//   S^T_w  = K Q_w^T, dP^T_w = V dO_w^T        wgmma SS m64n32, both K-major: [64 keys x 32 queries], 16 + 16 registers
//   P^T_w, dS^T_w                              element-wise as bwd_mainloop.cuh (LSE, D, softcap, SeqMask visibility)
//   P^T_w, dS^T_w -> shared memory              Elem, columns [32 w, 32 w + 32) of the [64 keys][64 queries] tiles P^T,
//                                               dS^T (128-byte swizzle, stmatrix); one all-consumer barrier
//   consumer 0: dK += dS^T Q                   wgmma SS m64n(d):  A = dS^T K-major, B = Q MN-major
//   consumer 1: dV += P^T dO                   wgmma SS m64n(dv): A = P^T K-major, B = dO MN-major
//   both: dQ_i[:, 64-column block c] = dS K_c  wgmma SS m64n64, A = dS^T MN-major, B = K MN-major, for the blocks the
//                                               consumer owns this tile (Fa3BwdWideConfig::dq_blocks): the N-work of
//                                               dK / dV plus dQ is the same for both consumers (or alternates a block)
// and dQ goes into the fp32 dq_accum through shared memory and a producer warp's TMA reduce-add (DqAdd::kTmaReduce:
// a buffer per 64-column block at d = 192; at d = 256, where four do not fit beside the rings, one per consumer and dO
// in one stage) or by the consumers' atomics (DqAdd::kAtomics, the lab's), in any order or, deterministic, in key-tile
// order (a semaphore per (batch, head, query tile), as bwd_mainloop.cuh).
//
// Invariants:
// - P^T and dS^T are double-buffered (tile it uses buffer it % 2) where shared memory allows (every shipped build):
//   a consumer writes buffer b at tile it after the all-consumer barrier of tile it - 1, which both passed only after
//   their wgmma_wait<0> of tile it - 2, the last reads of b. With one buffer a second barrier precedes the writes.
// - Every GEMM reads only zeroed or real rows: K, V rows j >= lk and Q, dO rows i >= lq (inside the tensors) are zeroed
//   in shared memory before the tensor cores read them; masked entries give P = dS = 0 exactly, rows without a visible
//   key get dq = 0 (LSE -inf reads as +inf).
// - dK (times the scale) leaves consumer 0's registers and dV consumer 1's; GQA as fp32 rows of d (dK) and dv (dV)
//   columns per query head, summed by the postprocess.
// - Deterministic: each dQ element of a query tile gets exactly one addition per CTA (the consumers' dQ blocks are
//   disjoint), and the CTA adds only after every lower key tile that sees the query tile has: atomics, each consumer
//   counts itself (2 per CTA); TMA, the writer counts the CTA (1). Deadlock-free as bwd_mainloop.cuh's.
// - TMA dQ (d = 192): the alternating third block's buffer is awaited by parity ((it & 1) ^ 1) of its empty barrier,
//   which is exact only because the all-consumer barrier of every tile keeps the two consumers within one tile of
//   each other (so the writer has released that buffer exactly it times when its owner at tile it waits). A schedule
//   that drops or moves that barrier (e.g. overlapping the consumers' element-wise passes) needs a phase per block
//   owner instead.
#pragma once
#include <type_traits>

#include "bwd_mainloop.cuh"

namespace attn::hopper {

// How a consumer adds a dQ block by atomics (DqAdd::kAtomics): each thread its accumulator's two adjacent columns per
// row (a float2 red, 16 a block and 64-row tile), or four (a float4 red: the two lanes that hold a row's four adjacent
// columns first swap halves with one shuffle each way, so that one of them holds the four of the row and the other
// those of the row 8 below; 8 reds and 16 shuffles a block instead of 16 reds).
enum class DqAtomicWidth { kFloat2, kFloat4 };
// Where the consumers stage dQ for the TMA reduce-add (DqAdd::kTmaReduce): one 16 KB fp32 buffer per 64-column block
// (d / 64 buffers, each written once a tile), or one per consumer, its blocks passing through it in turn (32 KB at
// any d: what fits at d = 256 beside one dO stage).
enum class DqStaging { kBufferPerBlock, kBufferPerConsumer };

// A wide backward schedule (derive and override by name; Deterministic<S> of bwd_mainloop.cuh applies).
struct Fa3BwdWideSchedule {
    static constexpr BwdTiling tiling = BwdTiling::kSharedKeys;
    static constexpr bool deterministic = false;
    // kTmaReduce stages dQ in 16 KB fp32 buffers beside the rings: one per 64 columns (d = 192: 48 KB; d = 256: 64 KB,
    // which does not fit beside two dO stages, static_assert), or one per consumer (32 KB; DqStaging).
    static constexpr DqAdd dq_add = DqAdd::kAtomics;
    static constexpr DqAtomicWidth dq_atomic_width = DqAtomicWidth::kFloat2;
    static constexpr DqStaging dq_staging = DqStaging::kBufferPerBlock;
    static constexpr int stages = 2;     // the Q ring (LSE and D with it)
    static constexpr int do_stages = 2;  // the dO ring: stages, or 1 (its own barriers; consumer 1 runs dV first)
};

// DK: the head dim of Q, K, dQ, dK; DV: of V, dO, O, dV. Both whole 64-column blocks, DV <= DK.
template <int DK, int DV, typename Elem_, class Schedule>
struct Fa3BwdWideConfig {
    using Elem = Elem_;
    static constexpr BwdTiling kTiling = BwdTiling::kSharedKeys;
    static constexpr int kHeadDim = DK, kTensorHeadDim = DK, kHeadDimV = DV, kTensorHeadDimV = DV;
    static_assert(DK % 64 == 0 && DV % 64 == 0 && DV <= DK && DK >= 128 && DK <= 256,
                  "wide backward: whole 64-column blocks, dv <= d <= 256");
    static constexpr bool kDeterministic = Schedule::deterministic;
    static constexpr bool kTmaDq = Schedule::dq_add == DqAdd::kTmaReduce;
    // float4 reds need dq_accum 16-byte aligned (launch_bwd_main checks it)
    static constexpr bool kDqFloat4 = !kTmaDq && Schedule::dq_atomic_width == DqAtomicWidth::kFloat4;
    static constexpr int kBlockN = 64;  // keys per CTA, shared by both consumers
    static constexpr int kBlockM = 64;  // query rows per streamed tile, 32 per consumer for S^T / dP^T
    static constexpr int kHalfM = 32;
    static constexpr int kStages = Schedule::stages;
    // dO in a ring of its own, one stage (kSplitDo: released by consumer 0 after dP^T and by consumer 1 after dV,
    // which it then issues before its dQ blocks), or in the Q ring's stages
    static constexpr int kDoStages = Schedule::do_stages;
    static_assert(kDoStages == kStages || kDoStages == 1, "dO: the Q ring's stages or one");
    static constexpr bool kSplitDo = kDoStages != kStages;
    static constexpr int kKBlocks = DK / 64, kVBlocks = DV / 64;  // 64-column blocks of Q, K / of V, dO
    static constexpr int kThreads = 384, kConsumerThreads = 256;
    // setmaxnreg: 40 * 128 + 232 * 256 = 64512 of 65536. ptxas: with 24 the producer spills (its TMA loops); the
    // consumer loop needs more than 216 at d = 256 (216: 288 bytes of spills) and spills nothing at 232.
    static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
    // dQ's 64-column blocks per tile: consumer 0 [0, kDq0), consumer 1 [kDq0, kDq1End), and with kDqAltLast the last
    // block to consumer (it % 2) on tile it. Consumer 0's N-work is DK (dK) + 64 kDq0 (+ 32 on average), consumer 1's
    // DV + 64 (kDq1End - kDq0) (+ 32): d = dv = 256: 2 + 2 blocks; 192: 1 + 1 and the third alternating; (192, 128):
    // 1 + 2.
    static constexpr int kDqBlocks = kKBlocks;
    static constexpr int kDq0 = kVBlocks / 2;
    static constexpr bool kDqAltLast = kVBlocks % 2 != 0;
    static constexpr int kDq1End = kKBlocks - (kDqAltLast ? 1 : 0);
    static_assert(kDq0 >= 1 && kDq1End - kDq0 >= 1 && kDq0 + kDqAltLast <= 2 && kDq1End - kDq0 + kDqAltLast <= 2,
                  "each consumer computes one or two dQ blocks a tile");
    // TMA dQ staged per consumer: the same number of blocks every tile (no alternating block)
    static constexpr bool kDqPerConsumer = kTmaDq && Schedule::dq_staging == DqStaging::kBufferPerConsumer;
    static_assert(!kDqPerConsumer || !kDqAltLast, "per-consumer dQ staging: a fixed number of blocks per consumer");
    static constexpr int kDqBufs = !kTmaDq ? 0 : kDqPerConsumer ? 2 : kDqBlocks;
    // Shared memory (every tile 1024-byte aligned: 128-byte swizzle atoms of 8 rows)
    static constexpr uint32_t kKBytes = kBlockN * DK * 2, kVBytes = kBlockN * DV * 2;
    static constexpr uint32_t kQBytes = kBlockM * DK * 2, kDOBytes = kBlockM * DV * 2;
    static constexpr uint32_t kTileBytes = kBlockN * kBlockM * 2;  // one Elem (fp16 / bf16) [64 keys][64 queries] P^T or dS^T
    static constexpr int kDqRows = 64;                              // rows of a dQ block (the dQ map's box)
    static constexpr uint32_t kDqBytes = 64 * 64 * 4;               // one fp32 [64 x 64] dQ block (TMA dQ)
    static constexpr uint32_t kRingBytes = kKBytes + kVBytes + kStages * kQBytes + kDoStages * kDOBytes;
    static constexpr uint32_t kDqAreaBytes = kDqBufs * kDqBytes;
    static constexpr uint32_t kVecBytes = 2 * kStages * kBlockM * 4;  // LSE, D
    // full_kv, full / empty per Q stage, full_dq / empty_dq per dQ block (BwdRingSmem's layout), full_do / empty_do
    static constexpr int kBarDo = 1 + 2 * kStages + (kTmaDq ? 2 * kDqBlocks : 0);
    static constexpr int kNumBars = kBarDo + (kSplitDo ? 2 : 0);
    static constexpr uint32_t kFixedBytes = kRingBytes + kDqAreaBytes + kVecBytes + kNumBars * 8 + 1024;
    static constexpr int kPdsBufs = kFixedBytes + 4 * kTileBytes <= 232448 ? 2 : 1;
    static constexpr uint32_t kOffK = 0;
    static constexpr uint32_t kOffV = kOffK + kKBytes;
    static constexpr uint32_t kOffQ = kOffV + kVBytes;
    static constexpr uint32_t kOffDO = kOffQ + kStages * kQBytes;
    static constexpr uint32_t kOffP = kOffDO + kDoStages * kDOBytes;
    static constexpr uint32_t kOffDS = kOffP + kPdsBufs * kTileBytes;
    static constexpr uint32_t kOffDq = kOffDS + kPdsBufs * kTileBytes;
    static constexpr uint32_t kOffLse = kOffDq + kDqAreaBytes;
    static constexpr uint32_t kOffD = kOffLse + kStages * kBlockM * 4;
    static constexpr uint32_t kOffBar = kOffD + kStages * kBlockM * 4;
    static constexpr uint32_t kSmemBytes = kOffBar + kNumBars * 8 + 1024;
    static_assert(kSmemBytes <= 232448, "shared memory per block (TMA dQ at d = 256 does not fit: atomics)");
    // Named barriers (0 is __syncthreads): per consumer warpgroup (1, 2), all consumers (3).
    static constexpr int kBarWG = 1, kBarConsumers = 3;
};

template <class C>
struct WideSmem : BwdRingSmem<C> {
    using BwdRingSmem<C>::base, BwdRingSmem<C>::full_kv, BwdRingSmem<C>::full, BwdRingSmem<C>::empty,
        BwdRingSmem<C>::full_dq, BwdRingSmem<C>::empty_dq;
    __device__ __forceinline__ unsigned char* pt(int i) const { return base + C::kOffP + i * C::kTileBytes; }
    __device__ __forceinline__ unsigned char* dst(int i) const { return base + C::kOffDS + i * C::kTileBytes; }
    __device__ __forceinline__ uint64_t* full_do() const { return this->bar(C::kBarDo); }
    __device__ __forceinline__ uint64_t* empty_do() const { return this->bar(C::kBarDo + 1); }

    __device__ __forceinline__ void init() const {
        mbar_init(full_kv(), 1);
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init(full(s), 1 + 32);  // the TMA thread's expect_tx arrival + the 32 LSE / D lanes
            mbar_init(empty(s), C::kConsumerThreads);
        }
        if constexpr (C::kTmaDq) {
            for (int qb = 0; qb < C::kDqBufs; ++qb) {
                mbar_init(full_dq(qb), 128);  // every thread of the consumer that stored a block there
                mbar_init(empty_dq(qb), 1);   // the dQ writer, once TMA has read the block
            }
        }
        if constexpr (C::kSplitDo) {
            mbar_init(full_do(), 1);                      // the TMA thread's expect_tx arrival
            mbar_init(empty_do(), C::kConsumerThreads);  // both consumers, after their last read of the tile's dO
        }
        mbar_init_fence();
    }
};

// The dQ blocks consumer cw computes on its it-th tile (Fa3BwdWideConfig::kDq0, kDq1End, kDqAltLast): n blocks, the
// first at qb[0], the second (n == 2) at qb[1].
template <class C>
struct WideDqBlocks {
    int qb[2], n;
    __device__ __forceinline__ static WideDqBlocks of(int cw, int it) {
        WideDqBlocks r;
        r.qb[0] = cw == 0 ? 0 : C::kDq0;
        r.qb[1] = r.qb[0] + 1;
        r.n = cw == 0 ? C::kDq0 : C::kDq1End - C::kDq0;
        if (C::kDqAltLast && (it & 1) == cw) r.qb[r.n++] = C::kDqBlocks - 1;
        return r;
    }
};

// The dQ writer of TMA builds (one thread of the producer warpgroup): per query tile, waits for each 64-column block
// of dQ in shared memory (in block order, whichever consumer computed it) and adds it into dq_accum with TMA
// reduce-add. Deterministic builds first wait until every lower key tile that sees the query tile has added, wait for
// the completion of their own additions, then count the CTA.
template <class C>
__device__ void bwd_wide_dq_writer(const Fa3BwdParams& P, WideSmem<C> sm, const BwdTiles& T, int b, int h) {
    const AttnFwdParams& f = P.p.fwd;
    const int num_m = (f.seqlen_q + C::kBlockM - 1) / C::kBlockM;
    int* sem_head = C::kDeterministic ? P.dq_sem + (static_cast<size_t>(b) * f.heads_q + h) * num_m : nullptr;
    for (int it = 0; it < T.n_tiles; ++it) {
        const int m_tile = T.tile(it), m0 = m_tile * C::kBlockM;
        // deterministic: once this CTA's additions of the tile have landed, count it (the next key tile's CTA waits)
        auto count_cta = [&] {
            bulk_wait_all();
            fence_proxy_async_global();
            __threadfence();
            atomicAdd(sem_head + m_tile, 1);
        };
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
        if constexpr (C::kDqPerConsumer) {
            // the x-th block of each consumer w, block (w ? kDq0 : 0) + x, through buffer w: its use (n it + x)
            constexpr int n0 = C::kDq0, n1 = C::kDq1End - C::kDq0, nmax = n0 > n1 ? n0 : n1;
#pragma unroll
            for (int x = 0; x < nmax; ++x) {
#pragma unroll
                for (int w = 0; w < 2; ++w) {
                    const int n = w ? n1 : n0;
                    if (x >= n) continue;
                    const int qb = (w ? C::kDq0 : 0) + x;
                    mbar_wait(sm.full_dq(w), (n * it + x) & 1);
#pragma unroll
                    for (int cb = 0; cb < 2; ++cb)
                        tma_reduce_add_4d(&P.dq_map, sm.dq(w) + cb * (64 * 128), 64 * qb + 32 * cb, m0, h, b);
                    bulk_commit();
                    bulk_wait_read();
                    mbar_arrive(sm.empty_dq(w));
                }
            }
            if constexpr (C::kDeterministic) count_cta();
        } else {
#pragma unroll
            for (int qb = 0; qb < C::kDqBlocks; ++qb) {
                mbar_wait(sm.full_dq(qb), it & 1);
#pragma unroll
                for (int cb = 0; cb < 2; ++cb)
                    tma_reduce_add_4d(&P.dq_map, sm.dq(qb) + cb * (64 * 128), 64 * qb + 32 * cb, m0, h, b);
            }
            bulk_commit();
            if constexpr (C::kDeterministic)
                count_cta();
            else
                bulk_wait_read();
#pragma unroll
            for (int qb = 0; qb < C::kDqBlocks; ++qb) mbar_arrive(sm.empty_dq(qb));
        }
    }
    bulk_wait_all();
}

template <class C>
__device__ void bwd_wide_producer(const Fa3BwdParams& P, WideSmem<C> sm, const BwdTiles& T, int b, int h) {
    const AttnFwdParams& f = P.p.fwd;
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int hkv = h / (f.heads_q / f.heads_kv);
    if (warp == 0 && lane == 0) {
        mbar_arrive_expect_tx(sm.full_kv(), C::kKBytes + C::kVBytes);
#pragma unroll
        for (int cb = 0; cb < C::kKBlocks; ++cb)
            tma_load_4d(sm.k() + cb * (C::kBlockN * 128), &P.k.map, sm.full_kv(), cb * 64, T.n0, hkv * P.k.head_mul,
                        b * P.k.batch_mul);
#pragma unroll
        for (int cb = 0; cb < C::kVBlocks; ++cb)
            tma_load_4d(sm.v() + cb * (C::kBlockN * 128), &P.v.map, sm.full_kv(), cb * 64, T.n0, hkv * P.v.head_mul,
                        b * P.v.batch_mul);
        PipeState<C::kStages> ps;
        for (int it = 0; it < T.n_tiles; ++it) {
            const int m0 = T.tile(it) * C::kBlockM;
            mbar_wait(sm.empty(ps.stage), ps.phase ^ 1);
            mbar_arrive_expect_tx(sm.full(ps.stage), C::kQBytes + (C::kSplitDo ? 0 : C::kDOBytes));
#pragma unroll
            for (int cb = 0; cb < C::kKBlocks; ++cb)
                tma_load_4d(sm.q(ps.stage) + cb * (C::kBlockM * 128), &P.q.map, sm.full(ps.stage), cb * 64, m0,
                            h * P.q.head_mul, b * P.q.batch_mul);
            // dO into the Q ring's stage, or into its own one-stage ring once both consumers released the last tile's
            uint64_t* do_full = sm.full(ps.stage);
            int do_stage = ps.stage;
            if constexpr (C::kSplitDo) {
                mbar_wait(sm.empty_do(), (it & 1) ^ 1);
                mbar_arrive_expect_tx(sm.full_do(), C::kDOBytes);
                do_full = sm.full_do();
                do_stage = 0;
            }
#pragma unroll
            for (int cb = 0; cb < C::kVBlocks; ++cb)
                tma_load_4d(sm.dout(do_stage) + cb * (C::kBlockM * 128), &P.dout.map, do_full, cb * 64, m0,
                            h * P.dout.head_mul, b * P.dout.batch_mul);
            ps.advance();
        }
    } else if (warp == 2 && lane == 0 && C::kTmaDq) {
        bwd_wide_dq_writer<C>(P, sm, T, b, h);
    } else if (warp == 1) {
        bwd_copy_lse_d<C>(P, sm, T, b, h, lane);
    }
}

template <class C>
struct BwdWideConsumer {
    using Elem = typename C::Elem;
    static constexpr int DK = C::kHeadDim, DV = C::kHeadDimV, BM = C::kBlockM, BN = C::kBlockN, HM = C::kHalfM;
    const Fa3BwdParams& P;
    WideSmem<C> sm;
    const BwdTiles& T;
    int cw, b, h;

    __device__ __forceinline__ void wg_sync() const { named_sync(C::kBarWG + cw, 128); }

    // acc (+)= A B over the tile's 64 queries: A a [64 keys][64 queries] tile K-major (P^T or dS^T), B MN-major (dO or
    // Q: kN columns in 64-column blocks of BM rows); no fence, no commit.
    template <int kN>
    __device__ __forceinline__ static void issue_kv(float (&acc)[kN / 2], uint64_t a_k, uint64_t b_mn) {
#pragma unroll
        for (int ks = 0; ks < BM / 16; ++ks)
            wgmma_ss<1>(Wgmma<Elem, kN>{}, acc, desc_advance(a_k, ks * 32), desc_advance(b_mn, ks * 2048), 1);
    }

    // acc = one [64 x 64] block of dQ = dS K over the 64 keys: A = dS^T (MN-major), B = column block qb of K
    // (MN-major); no commit.
    __device__ __forceinline__ static void issue_dq(float (&acc)[32], uint64_t ds_mn, uint64_t k_mn) {
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks)
            wgmma_ss_t<1, 1>(Wgmma<Elem, 64>{}, acc, desc_advance(ds_mn, ks * 2048), desc_advance(k_mn, ks * 2048),
                             ks > 0 ? 1 : 0);
    }

    // dq_accum[rows of the tile, block qb] += one dQ block from registers (fp32 vector atomics, float2 or float4 by
    // C::kDqFloat4; rows past the real length are not written).
    __device__ __forceinline__ void atomic_dq_block(float* dqa_head, int m0, int qb, const float (&acc)[32]) const {
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        if constexpr (C::kDqFloat4) {
            // Lanes 2 t and 2 t + 1 hold columns [4 t, 4 t + 4) of an 8-column chunk (two each) of rows r and r + 8:
            // the even lane keeps row r (sends its row r + 8 pair), the odd lane row r + 8 (sends its row r pair).
            const bool odd = lane & 1;
            const int i = m0 + 16 * warp + lane / 4 + (odd ? 8 : 0);
            float* row = dqa_head + static_cast<size_t>(i) * DK + 64 * qb + 4 * ((lane % 4) / 2);
#pragma unroll
            for (int j = 0; j < 64 / 8; ++j) {
                const float send0 = odd ? acc[4 * j] : acc[4 * j + 2], send1 = odd ? acc[4 * j + 1] : acc[4 * j + 3];
                const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1);
                const float got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
                const float4 v = odd ? make_float4(got0, got1, acc[4 * j + 2], acc[4 * j + 3])
                                     : make_float4(acc[4 * j], acc[4 * j + 1], got0, got1);
                if (i < T.mask.sq) atomicAdd(reinterpret_cast<float4*>(row + 8 * j), v);
            }
        } else {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = m0 + 16 * warp + lane / 4 + 8 * hh;
                if (i < T.mask.sq) {
                    float* row = dqa_head + static_cast<size_t>(i) * DK + 64 * qb + 2 * (lane % 4);
#pragma unroll
                    for (int j = 0; j < 64 / 8; ++j)
                        atomicAdd(reinterpret_cast<float2*>(row + 8 * j),
                                  make_float2(acc[4 * j + 2 * hh], acc[4 * j + 2 * hh + 1]));
                }
            }
        }
    }

    // acc: consumer 0's dK [64 keys x DK], consumer 1's dV [64 keys x DV] (its first DV / 2 registers), accumulator
    // layout.
    __device__ __forceinline__ void run(float (&acc)[DK / 2]) {
        const AttnFwdParams& f = P.p.fwd;
        const SeqMask& mask = T.mask;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const int n0 = T.n0;
        const float sl2 = f.scale * kLog2e;
        const bool capped = f.softcap > 0.f;
        const float scale_over_cap = capped ? f.scale / f.softcap : 0.f;
        const uint32_t k_addr = smem_addr(sm.k()), v_addr = smem_addr(sm.v());
        // K and V K-major (A of S^T, dP^T), the CTA's 64 keys
        const uint64_t k_km = sw128_desc(k_addr, 16, 1024), v_km = sw128_desc(v_addr, 16, 1024);
        float* dqa_head = P.p.dq_accum + (static_cast<size_t>(b) * f.heads_q + h) * f.seqlen_q * DK;
        const int num_m = (f.seqlen_q + BM - 1) / BM;
        int* sem_head = C::kDeterministic ? P.dq_sem + (static_cast<size_t>(b) * f.heads_q + h) * num_m : nullptr;

        mbar_wait(sm.full_kv(), 0);
        if (n0 + BN > mask.sk) {  // key rows past the real length: zero K and V (dQ = dS K reads every row; a finite
            // dP^T keeps dS = P (dP - D) = 0 where P = 0)
            bwd_zero_rows<C::kKBlocks, C::kConsumerThreads>(sm.k(), BN, max(mask.sk - n0, 0), BN);
            bwd_zero_rows<C::kVBlocks, C::kConsumerThreads>(sm.v(), BN, max(mask.sk - n0, 0), BN);
            fence_proxy_async();
            named_sync(C::kBarConsumers, C::kConsumerThreads);
        }
        PipeState<C::kStages> ps;
        for (int it = 0; it < T.n_tiles; ++it) {
            const int m_tile = T.tile(it), m0 = m_tile * BM;
            const int st = ps.stage, dos = C::kSplitDo ? 0 : st;  // the Q stage, the dO stage
            mbar_wait(sm.full(st), ps.phase);
            if constexpr (C::kSplitDo) mbar_wait(sm.full_do(), it & 1);
            if (m0 + BM > mask.sq && mask.sq < f.seqlen_q) {  // varlen padding inside the tensor: zero it
                const int lo = max(mask.sq - m0, 0), hi = min(BM, f.seqlen_q - m0);
                bwd_zero_rows<C::kKBlocks, C::kConsumerThreads>(sm.q(st), BM, lo, hi);
                bwd_zero_rows<C::kVBlocks, C::kConsumerThreads>(sm.dout(dos), BM, lo, hi);
                fence_proxy_async();
                named_sync(C::kBarConsumers, C::kConsumerThreads);
            }
            const uint32_t q_addr = smem_addr(sm.q(st)), do_addr = smem_addr(sm.dout(dos));
            // This consumer's 32 query rows K-major (B of S^T, dP^T: 4 swizzle atoms in), all 64 MN-major (B of dK,
            // dV).
            const uint64_t q_kh = sw128_desc(q_addr + cw * HM * 128, 16, 1024);
            const uint64_t do_kh = sw128_desc(do_addr + cw * HM * 128, 16, 1024);

            float s[HM / 2], dp[HM / 2];
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < DK / 16; ++ks) {
                const int cb = ks / 4, kk = ks % 4;
                wgmma_ss<0>(Wgmma<Elem, HM>{}, s, desc_advance(k_km, cb * (BN * 128) + kk * 32),
                            desc_advance(q_kh, cb * (BM * 128) + kk * 32), ks > 0 ? 1 : 0);
            }
#pragma unroll
            for (int ks = 0; ks < DV / 16; ++ks) {
                const int cb = ks / 4, kk = ks % 4;
                wgmma_ss<0>(Wgmma<Elem, HM>{}, dp, desc_advance(v_km, cb * (BN * 128) + kk * 32),
                            desc_advance(do_kh, cb * (BM * 128) + kk * 32), ks > 0 ? 1 : 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(s);
            fence_regs(dp);
            if constexpr (C::kSplitDo) {  // consumer 0's last read of this tile's dO (consumer 1's is dV)
                if (cw == 0) mbar_arrive(sm.empty_do());
            }

            // P^T and dS^T of this consumer's [64 keys x 32 queries] in the accumulator layout: element e at key row
            // 16 warp + lane / 4 + 8 ((e / 2) % 2), query column 32 cw + 8 (e / 4) + 2 (lane % 4) + e % 2 of the tile,
            // packed into Elem pairs chunk by chunk (bwd_mainloop.cuh's four straight-line paths).
            const int qc0 = cw * HM;  // first query column of this consumer in the tile
            const bool need_mask = !mask.tile_full(m0 + qc0, m0 + qc0 + HM, n0, n0 + BN);
            uint32_t pa[HM / 16][4], dsa[HM / 16][4];
            auto p_elem = [&](auto cap_tag, auto mask_tag, int e, float lse2, int row) {
                const int key = n0 + 16 * warp + lane / 4 + 8 * ((e % 4) / 2);
                return bwd_p_elem<decltype(cap_tag)::value, decltype(mask_tag)::value>(
                    s[e], lse2, sl2, scale_over_cap, f.softcap, mask, row, key);
            };
            auto chunk = [&](auto cap_tag, auto mask_tag, int j) {
                const int c0 = qc0 + 8 * j + 2 * (lane % 4);
                const float2 l2 = lds_f2_in_order(sm.lse(st) + c0);
                float pv[4];
#pragma unroll
                for (int x = 0; x < 4; ++x)
                    pv[x] = p_elem(cap_tag, mask_tag, 4 * j + x, x % 2 ? l2.y : l2.x, m0 + c0 + x % 2);
                bwd_pack_chunk<Elem>(pa, j, pv);
                bwd_ds_chunk<Elem>(dsa, j, s, dp, lds_f2_in_order(sm.dd(st) + c0));
            };
            auto elementwise = [&](auto cap_tag, auto mask_tag) {
#pragma unroll
                for (int j = 0; j < HM / 8; ++j) chunk(cap_tag, mask_tag, j);
            };
            dispatch_cap_mask(capped, need_mask, elementwise);

            // P^T and dS^T halves to shared memory: columns [32 cw, 32 cw + 32) of the [64 keys][64 queries] tiles.
            // pa[ks][r] holds key row 16 warp + lane / 4 + 8 (r % 2), query columns qc0 + 8 (2 ks + r / 2) +
            // 2 (lane % 4) + {0, 1}: matrix r of one stmatrix.x4 per 16 queries, lane l addressing row l % 8 of
            // matrix l / 8.
            const int buf = C::kPdsBufs == 2 ? (it & 1) : 0;
            if constexpr (C::kPdsBufs == 1) {  // the other consumer's GEMMs of the previous tile read this buffer
                if (it > 0) named_sync(C::kBarConsumers, C::kConsumerThreads);
            }
            {
                const int mi = lane / 8, srow = 16 * warp + lane % 8 + 8 * (mi % 2);
                const uint32_t p_row = smem_addr(sm.pt(buf)) + srow * 128, ds_row = smem_addr(sm.dst(buf)) + srow * 128;
#pragma unroll
                for (int ks = 0; ks < HM / 16; ++ks) {
                    const int c = qc0 + 8 * (2 * ks + mi / 2);
                    const uint32_t off = ((c / 8) ^ (srow % 8)) * 16;
                    stmatrix_x4(p_row + off, pa[ks]);
                    stmatrix_x4(ds_row + off, dsa[ks]);
                }
            }
            fence_proxy_async();
            named_sync(C::kBarConsumers, C::kConsumerThreads);

            // dQ blocks first (their tile leaves the registers while dK / dV still runs), then dK += dS^T Q (consumer
            // 0) or dV += P^T dO (consumer 1): two commit groups.
            const uint32_t ds_addr = smem_addr(sm.dst(buf)), p_addr = smem_addr(sm.pt(buf));
            const uint64_t ds_mn = sw128_desc(ds_addr, 64 * 128, 1024);
            const WideDqBlocks<C> blocks = WideDqBlocks<C>::of(cw, it);
            float dq[2][32];
            // (a wgmma.fence opens every branch that issues: ptxas would otherwise inject one there, C7519)
            auto issue_dq_blocks = [&] {
                wgmma_fence();
                issue_dq(dq[0], ds_mn, sw128_desc(k_addr + blocks.qb[0] * (BN * 128), BN * 128, 1024));
                if (blocks.n == 2) {
                    wgmma_fence();
                    issue_dq(dq[1], ds_mn, sw128_desc(k_addr + blocks.qb[1] * (BN * 128), BN * 128, 1024));
                }
                wgmma_commit();
            };
            auto issue_dkv = [&] {
                const uint64_t q_mn = sw128_desc(q_addr, BM * 128, 1024);
                const uint64_t do_mn = sw128_desc(do_addr, BM * 128, 1024);
                const uint64_t ds_k = sw128_desc(ds_addr, 16, 1024), p_k = sw128_desc(p_addr, 16, 1024);
                if constexpr (DK == DV) {
                    issue_kv<DK>(acc, cw == 0 ? ds_k : p_k, cw == 0 ? q_mn : do_mn);
                } else if (cw == 0) {
                    wgmma_fence();
                    issue_kv<DK>(acc, ds_k, q_mn);
                } else {
                    wgmma_fence();
                    issue_kv<DV>(reinterpret_cast<float(&)[DV / 2]>(acc), p_k, do_mn);
                }
                wgmma_commit();
            };
            // The dQ blocks leave the registers (shared memory for the writer, or atomics), then dK / dV completes.
            // Instantiated once per GEMM order, so that ptxas sees each path's waits whole (a join between the two
            // orders made it inject a wait for dK / dV before the dQ stores, C7517).
            auto finish = [&](auto dv_first_tag) {
                constexpr bool kDvFirst = decltype(dv_first_tag)::value;
                fence_regs(dq[0]);
                fence_regs(dq[1]);

                if constexpr (C::kTmaDq) {
                    // each block into its buffer once the writer's TMA has read what was there (the previous tile's
                    // block, or with per-consumer staging this consumer's previous block: its use n it + x)
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        if (x < blocks.n) {
                            const int buf = C::kDqPerConsumer ? cw : blocks.qb[x];
                            const uint32_t use = C::kDqPerConsumer ? blocks.n * it + x : it;
                            mbar_wait(sm.empty_dq(buf), (use & 1) ^ 1);
                            bwd_store_dq_block(sm.dq(buf), dq[x]);
                            fence_proxy_async();
                            mbar_arrive(sm.full_dq(buf));
                        }
                    }
                } else {
                    // Deterministic: every lower key tile that sees this query tile has added (2 counts a CTA, one per
                    // consumer; the two consumers of one CTA add disjoint blocks, in any order).
                    if constexpr (C::kDeterministic) {
                        int klo, khi;
                        mask.keys_for_rows(m0, m0 + BM, &klo, &khi);
                        const int expect = 2 * (n0 / BN - klo / BN);
                        if (tid == 0) {
                            const int* sem = sem_head + m_tile;
                            int v;
                            do {
                                asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
                            } while (v < expect);
                        }
                        wg_sync();
                    }
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        if (x < blocks.n) atomic_dq_block(dqa_head, m0, blocks.qb[x], dq[x]);
                    }
                    if constexpr (C::kDeterministic) {
                        __threadfence();
                        wg_sync();
                        if (tid == 0) atomicAdd(sem_head + m_tile, 1);
                    }
                }
                if constexpr (!kDvFirst) wgmma_wait<0>();
                fence_regs(acc);
            };
            // kSplitDo: consumer 1 runs dV first, so that the one dO stage is released (the next tile's dO loads)
            // while its dQ blocks and consumer 0's dK still run
            if (C::kSplitDo && cw == 1) {
                wgmma_fence();
                issue_dkv();
                issue_dq_blocks();
                wgmma_wait<1>();
                mbar_arrive(sm.empty_do());
                wgmma_wait<0>();
                finish(std::true_type{});
            } else {
                issue_dq_blocks();
                issue_dkv();
                wgmma_wait<1>();
                finish(std::false_type{});
            }
            mbar_arrive(sm.empty(st));  // Q, LSE, D (and dO, unless kSplitDo) of this stage are no longer read
            ps.advance();
        }
    }

    // Consumer 0: dK (times the scale); consumer 1: dV, of the CTA's 64 keys; rows past the padded length are not
    // written, rows past the real length hold 0 (no query sees them). GQA: fp32 per query head into dk_accum [.., DK]
    // / dv_accum [.., DV], reduced over each group by the postprocess.
    __device__ __forceinline__ void store(const float (&acc)[DK / 2]) const {
        const AttnFwdParams& f = P.p.fwd;
        const AttnBwdParams& pb = P.p;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const bool gqa = f.heads_q != f.heads_kv;
        const int hkv = h / (f.heads_q / f.heads_kv);
        const bool is_k = cw == 0;
        const float mul = is_k ? f.scale : 1.f;
        float* accum = is_k ? pb.dk_accum : pb.dv_accum;
        Elem* out = static_cast<Elem*>(is_k ? pb.dk : pb.dv);
        const int64_t bs = is_k ? pb.dk_batch_stride : pb.dv_batch_stride;
        const int64_t hs = is_k ? pb.dk_head_stride : pb.dv_head_stride;
        const int64_t rs = is_k ? pb.dk_row_stride : pb.dv_row_stride;
        const int cols = is_k ? DK : DV;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int j = T.n0 + 16 * warp + lane / 4 + 8 * hh;
            if (j >= f.seqlen_k) continue;
#pragma unroll
            for (int jj = 0; jj < DK / 8; ++jj) {
                const int c = 8 * jj + 2 * (lane % 4);
                if (DV != DK && 8 * jj >= cols) break;
                const float x0 = acc[4 * jj + 2 * hh] * mul, x1 = acc[4 * jj + 2 * hh + 1] * mul;
                if (gqa) {
                    const size_t off = ((static_cast<size_t>(b) * f.heads_q + h) * f.seqlen_k + j) * cols + c;
                    *reinterpret_cast<float2*>(accum + off) = make_float2(x0, x1);
                } else {
                    *reinterpret_cast<uint32_t*>(out + b * bs + hkv * hs + j * rs + c) = MmaOp<Elem>::pack(x0, x1);
                }
            }
        }
    }
};

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fa3_bwd_wide_kernel(const __grid_constant__ Fa3BwdParams P) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    bwd_cta<C, WideSmem<C>>(
        P, [&](const WideSmem<C>& sm, const BwdTiles& T, int b, int h) { bwd_wide_producer<C>(P, sm, T, b, h); },
        [&](const WideSmem<C>& sm, const BwdTiles& T, int cw, int b, int h) {
            BwdWideConsumer<C> cs{P, sm, T, cw, b, h};
            float acc[C::kHeadDim / 2];
#pragma unroll
            for (int e = 0; e < C::kHeadDim / 2; ++e) acc[e] = 0.f;
            if (T.n_tiles > 0) cs.run(acc);
            cs.store(acc);
        });
#endif
}

}  // namespace attn::hopper
