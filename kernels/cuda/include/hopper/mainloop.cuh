// The FA3 forward kernel: producer (TMA loads into the Q buffer and a K/V ring) and consumers (wgmma
// S = Q K^T from shared memory, online softmax in fp32, wgmma O += P V with P from registers, deferred
// normalisation, LSE). Semantics: oracles/SEMANTICS.md (§2 scale, §3 softcap, §4 causal alignments,
// §5 windows, §7 varlen, §8 fully masked rows, §9 GQA).
//
// Synchronisation (all mbarriers in shared memory, phases tracked by PipeState):
//   full_q / empty_q     Q tile landed (TMA bytes) / every consumer thread is done with it (after the
//                        epilogue); two Q buffers in persistent builds where shared memory allows
//   full_k[s], full_v[s] K or V tile of stage s landed;  empty_k[s], empty_v[s]: every consumer warp's
//                        wgmma that read it has completed (one arrival per warp)
//   tile_full / tile_empty  (persistent) the next work-tile index, handed from the producer to the consumers
//                        (one arrival per consumer thread on tile_empty, since every thread reads the slot)
// Key tiles run from the last to the first, so the tiles needing per-element masks (the sequence tail,
// the causal diagonal) come first. The first tile may extend past the real key length lk: rows j >= lk
// of its V are zeroed in shared memory before any P V product reads them (P = 0 there, but 0 * NaN is
// NaN and padded rows may hold anything, SEMANTICS.md §7).
#pragma once
#include "../fa_ptx.cuh"
#include "config.cuh"
#include "epilogue.cuh"
#include "loops.cuh"
#include "plan.cuh"
#include "ptx.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace attn::hopper {

template <class C>
struct Smem : SmemRegions<C> {
    using SmemRegions<C>::base;
    using SmemRegions<C>::full_k;
    using SmemRegions<C>::empty_k;
    using SmemRegions<C>::full_v;
    using SmemRegions<C>::empty_v;
    __device__ __forceinline__ unsigned char* q(int s) const { return base + s * C::kQBytes; }
    __device__ __forceinline__ unsigned char* v(int s) const { return base + C::kOffV + s * C::kVBytes; }

    // `ctas`: the CTAs whose consumers read each K / V stage (2 in a paired cluster, whose loads write both CTAs' rings).
    __device__ __forceinline__ void init(int ctas = 1) const {
        // K/V stages: one arrival per consumer warp (their readers are wgmma, complete in every thread
        // at wgmma_wait); Q and the tile slot: one per consumer thread, since ordinary loads read them.
        const int arrivals = C::kConsumerWGs * 4 * ctas;
        this->init_q();
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init(full_k(s), 1);
            mbar_init(full_v(s), 1);
            mbar_init(empty_k(s), arrivals);
            mbar_init(empty_v(s), arrivals);
        }
        this->init_tile_slots();
        mbar_init_fence();
    }
};

// ---- producer side: one thread issues every load ---------------------------------------------------
template <class C>
struct Loader {
    const Fa3Params& P;
    Smem<C> sm;
    PipeState<C::kStages> pk, pv;
    PipeState<C::kQStages> pq;
    // Whether this thread issues the loads. The producer's one thread: always. Builds without warp specialisation run
    // the loader in every consumer thread (each waits for the stage) and issue from thread 0 only: ptxas serializes
    // the wgmmas (C7520) when a branch around the loader's waiting loops is taken by part of a warpgroup (thread 0,
    // warp 0, or warpgroup 0 alone: each measured with -Xptxas -v).
    bool lead = true;
    // Paired cluster (config.cuh kClusterM): this CTA loads column blocks [rank, rank + 1) x kColBlocks / 2 of each K / V
    // tile into both CTAs; its full barrier counts the whole tile (the other half comes from the other CTA).
    bool multicast = false;
    int rank = 0;

    __device__ __forceinline__ void load_q(const WorkTile& w) {
        mbar_wait(sm.empty_q(pq.stage), pq.phase ^ 1);
        if (lead) {
            mbar_arrive_expect_tx(sm.full_q(pq.stage), C::kQBytes);
#pragma unroll
            for (int cb = 0; cb < C::kColBlocks; ++cb)
                tma_load_4d(sm.q(pq.stage) + cb * (C::kBlockM * 128), &P.q.map, sm.full_q(pq.stage), cb * 64,
                            w.m_block * C::kBlockM, w.h * P.q.head_mul, w.b * P.q.batch_mul);
        }
        pq.advance();
    }
    // K / V of work tile w come from KV head w.h / (heads_q / heads_kv): its tensor-map coordinates, once per work
    // tile (the 24-register producer had recomputed the division for every load).
    struct KvCoords {
        int k_head, k_batch, v_head, v_batch;
    };
    __device__ __forceinline__ KvCoords kv_coords(const WorkTile& w) const {
        const int hkv = w.h / (P.p.heads_q / P.p.heads_kv);
        return {hkv * P.k.head_mul, w.b * P.k.batch_mul, hkv * P.v.head_mul, w.b * P.v.batch_mul};
    }
    __device__ __forceinline__ void load_kv(bool is_v, const KvCoords& kc, int n) {
        PipeState<C::kStages>& ps = is_v ? pv : pk;
        const TmaTensor& t = is_v ? P.v : P.k;
        uint64_t* full = is_v ? sm.full_v(ps.stage) : sm.full_k(ps.stage);
        mbar_wait(is_v ? sm.empty_v(ps.stage) : sm.empty_k(ps.stage), ps.phase ^ 1);
        if (lead) {
            mbar_arrive_expect_tx(full, is_v ? C::kVBytes : C::kKBytes);
            unsigned char* dst = is_v ? sm.v(ps.stage) : sm.k(ps.stage);
            const int head = is_v ? kc.v_head : kc.k_head, batch = is_v ? kc.v_batch : kc.k_batch;
            if (C::kClusterM > 1 && multicast) {
                constexpr int kHalf = C::kColBlocks / 2;
#pragma unroll
                for (int i = 0; i < kHalf; ++i) {
                    const int cb = rank * kHalf + i;
                    tma_load_4d_multicast(dst + cb * (C::kBlockN * 128), &t.map, full, cb * 64, n * C::kBlockN, head,
                                          batch, 0x3);
                }
            } else {
#pragma unroll
                for (int cb = 0; cb < (is_v ? C::kColBlocksV : C::kColBlocks); ++cb)
                    tma_load_4d(dst + cb * (C::kBlockN * 128), &t.map, full, cb * 64, n * C::kBlockN, head, batch);
            }
        }
        ps.advance();
    }
};

// The work tile of CTA t (cluster builds: scheduler.cuh cluster_tile; `multicast` set where the cluster is paired);
// false past the last.
template <class C>
__device__ __forceinline__ bool tile_of(const Fa3Params& P, int t, WorkTile& w, bool& multicast) {
    if constexpr (C::kClusterM > 1) {
        const ClusterTile ct = cluster_tile(P.order, t);
        w = ct.w;
        multicast = ct.paired;
        return !ct.idle;
    } else {
        if (t >= P.order.total()) return false;
        w = P.order.at(t);
        return true;
    }
}

template <class C>
__device__ void producer_loop(const Fa3Params& P, Smem<C> sm) {
    Loader<C> ld{P, sm};
    int t = blockIdx.x;
    TileSlots<decltype(sm)> slots{sm};
    if constexpr (C::kClusterM > 1) ld.rank = static_cast<int>(cluster_ctarank());
    while (true) {
        if constexpr (C::kPersistent) slots.put(t);
        WorkTile w;
        if (!tile_of<C>(P, t, w, ld.multicast)) break;
        const TilePlan pl = make_plan<C>(P.p, w);
        if (pl.n_tiles() > 0) {
            // K runs one tile ahead of V (the consumers need K(x) and V(x-1) together): K(first), Q,
            // then K(n - 1), V(n) pairs, then V(last). A K slot frees earlier than a V slot (S(x) completes
            // before P(x) V(x)), so this order never holds a K load behind a V slot still in use.
            const typename Loader<C>::KvCoords kc = ld.kv_coords(w);
            ld.load_kv(false, kc, pl.n_hi - 1);
            ld.load_q(w);
            for (int n = pl.n_hi - 1; n >= pl.n_lo; --n) {
                if (n > pl.n_lo) ld.load_kv(false, kc, n - 1);
                ld.load_kv(true, kc, n);
            }
        }
        if constexpr (!C::kPersistent) break;
        t = atomicAdd(P.counter, 1) + gridDim.x;
    }
}

// ---- consumer side ------------------------------------------------------------------------------
template <class C>
struct Consumer : ConsumerSteps<C, Consumer<C>> {
    using Steps = ConsumerSteps<C, Consumer<C>>;
    using Steps::rescale;
    using Steps::softmax;
    using Elem = typename C::Elem;
    // D: Q K^T's depth; DVP: O's columns in registers, the N of O += P V (config.cuh kHeadDimVPad: dv in whole
    // 64-column blocks, or dv itself, by the schedule's pv_columns).
    static constexpr int D = C::kHeadDim, DVP = C::kHeadDimVPad, BN = C::kBlockN;
    const Fa3Params& P;
    Smem<C> sm;
    int cw;  // consumer warpgroup index
    PipeState<C::kStages> ck, cv;
    PipeState<C::kQStages> cq;

    // Paired cluster: a K / V stage is free once the consumers of both CTAs have read it (either CTA's loads write it).
    bool multicast = false;
    uint32_t peer = 0;
    __device__ __forceinline__ void release(uint64_t* bar) { release_stage<C>(bar, multicast, peer); }
    __device__ __forceinline__ void turn_wait() { Turns<C>{cw}.wait(); }
    __device__ __forceinline__ void turn_pass() { Turns<C>{cw}.pass(); }

    // Shared-memory descriptors of stage 0 of the K and V rings and of this warpgroup's Q rows, made once per work tile
    // (ConsumerSteps::set_descs).
    uint64_t kdesc0, vdesc0, qdesc;
    __device__ __forceinline__ void set_descs() {
        Steps::set_descs(*this, smem_addr(sm.q(cq.stage)), smem_addr(sm.v(0)));
    }

    // kQRegs: this warpgroup's 64 Q rows as wgmma A fragments, one [4] per 16 head-dim columns (ConsumerSteps).
    uint32_t qf[C::kQRegs ? D / 16 : 1][4];
    __device__ __forceinline__ void load_q_frags() { Steps::load_q_frags(*this, smem_addr(sm.q(cq.stage))); }
    // S = Q K^T over the head dim, 16 at a time: both operands K-major, 128-byte swizzled (kQRegs: Q from registers).
    __device__ __forceinline__ void gemm_s(float (&s)[BN / 2], int stage) { Steps::gemm_s(*this, s, stage); }
    // O += P V over the keys, 16 at a time: P from registers, V MN-major (head dim contiguous).
    __device__ __forceinline__ void gemm_pv(float (&o)[DVP / 2], const uint32_t (&pa)[BN / 16][4], int stage) {
        const uint64_t vb0 = desc_advance(vdesc0, stage * C::kVBytes);
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) wgmma_rs<1>(Wgmma<Elem, DVP>{}, o, pa[ks], desc_advance(vb0, ks * 2048), 1);
    }

    // O += P V of a V stage, through the schedule's stages.
    __device__ __forceinline__ void pv(float (&o)[DVP / 2], const uint32_t (&pa)[BN / 16][4], int stage) {
        C::Stages::pv(*this, o, pa, stage);
    }

    // Softcap / pre-scale, then -inf where mask.cuh says a key is not visible (rows of this warpgroup; `masked`: key
    // tile n is one of plan.cuh's masked_tiles).
    __device__ __forceinline__ void score_mod(float (&s)[BN / 2], const TilePlan& pl, int row0, int n, bool masked) {
        if constexpr (C::kPrescale) {
            const float cap = P.p.softcap, sc = P.p.scale;
#pragma unroll
            for (int e = 0; e < BN / 2; ++e) {
                float x = s[e] * sc;
                if (cap > 0.f) x = cap * tanhf(x / cap);
                s[e] = x * kLog2e;
            }
        }
        if (masked) mask_warpgroup_tile<BN>(s, pl.mask, row0, n);
    }

    static __device__ __forceinline__ void to_a_frags(uint32_t (&pa)[BN / 16][4], const float (&s)[BN / 2]) {
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks)
#pragma unroll
            for (int r = 0; r < 4; ++r) pa[ks][r] = MmaOp<Elem>::pack(s[8 * ks + 2 * r], s[8 * ks + 2 * r + 1]);
    }

    // Rows j >= lk of the first key tile's V (only when that tile extends past lk): zero them, every
    // consumer thread a share, then order the stores before the tensor cores read (proxy fence + barrier).
    __device__ __forceinline__ void zero_v_tail(const TilePlan& pl) {
        const int j0 = (pl.n_hi - 1) * BN, valid = pl.mask.lk - j0;
        if (valid >= BN) return;
        mbar_wait(sm.full_v(cv.stage), cv.phase);
        unsigned char* v = sm.v(cv.stage);
        const int words = (BN - valid) * 128 / 16;  // per 64-column block
        for (int c = threadIdx.x % C::kConsumerThreads; c < words * C::kColBlocksV; c += C::kConsumerThreads) {
            const int cb = c / words, wi = c % words;
            *reinterpret_cast<uint4*>(v + cb * (BN * 128) + valid * 128 + wi * 16) = make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
        named_sync(C::kBarConsumers, C::kConsumerThreads);
    }

    // How many of the loop's first key tiles (n = n_hi - 1, n_hi - 2, ...) hold no key visible to this warpgroup's rows
    // (mask.cuh tile_range over its own rows), at most nt - 1; 0 for a warpgroup whose rows all lie past the length.
    static __device__ __forceinline__ int invisible_lead(const TilePlan& pl, int row0, int nt) {
        const int r_hi = min(row0 + 63, pl.mask.lq - 1);
        if (r_hi < row0) return 0;
        int lo, hi;
        pl.mask.tile_range(row0, r_hi, BN, lo, hi);
        return max(0, min(pl.n_hi - max(hi, lo), nt - 1));
    }

    // One work tile. `ld` (non-warp-specialised builds only): the loader, run by every consumer thread (Loader::lead).
    __device__ __forceinline__ void run_tile(const WorkTile& w, const TilePlan& pl, Loader<C>* ld) {
        const int nt = pl.n_tiles();
        const int row0 = w.m_block * C::kBlockM + cw * 64;
        if constexpr (!C::kWS) {
            if (ld != nullptr) {
                ld->load_q(w);
                for (int x = 0; x < nt && x < C::kStages; ++x) {
                    ld->load_kv(false, ld->kv_coords(w), pl.n_hi - 1 - x);
                    ld->load_kv(true, ld->kv_coords(w), pl.n_hi - 1 - x);
                }
            }
        }
        // Refill after a release (non-warp-specialised): tile x + kStages into the stage tile x had.
        auto refill = [&](bool is_v, int x) {
            if constexpr (!C::kWS) {
                if (ld != nullptr && x + C::kStages < nt)
                    ld->load_kv(is_v, ld->kv_coords(w), pl.n_hi - 1 - x - C::kStages);
            }
        };
        set_descs();
        const MaskedTiles mt = masked_tiles(pl.mask, pl.n_hi, nt, BN, row0, min(row0 + 63, pl.mask.lq - 1));
        zero_v_tail(pl);
        mbar_wait(sm.full_q(cq.stage), cq.phase);
        load_q_frags();

        const float sl2 = C::kPrescale ? 1.f : P.p.scale * kLog2e;
        float o[DVP / 2];
#pragma unroll
        for (int e = 0; e < DVP / 2; ++e) o[e] = 0.f;
        float s[BN / 2];
        uint32_t pa[BN / 16][4];
        RowSoftmax smx;
        smx.init();
        float corr[2];

        // Leading key tiles that hold no key visible to any row of this warpgroup (the CTA's later warpgroups see
        // further: 192-row tiles under a causal mask): nothing to add, so only their turns are taken and their stages
        // released, in the order the others use them (a -inf tile first in the loop leaves O, l and the maximum as
        // they started). At least one tile stays, so a warpgroup without real rows runs as before.
        int x = 0;
        if constexpr (C::kWS && C::kOverlap) {
            for (const int skip = invisible_lead(pl, row0, nt); x < skip; ++x) {
                turn_wait();
                mbar_wait(sm.full_k(ck.stage), ck.phase);
                release(sm.empty_k(ck.stage));
                ck.advance();
                mbar_wait(sm.full_v(cv.stage), cv.phase);
                release(sm.empty_v(cv.stage));
                cv.advance();
                turn_pass();
            }
        }
        // first key tile: S, softmax, P (O is still zero, nothing to rescale)
        int n = pl.n_hi - 1 - x;
        if constexpr (C::kWaitBeforeTurn) mbar_wait(sm.full_k(ck.stage), ck.phase);
        turn_wait();
        if constexpr (!C::kWaitBeforeTurn) mbar_wait(sm.full_k(ck.stage), ck.phase);
        Steps::s_issue(*this, s, refill, 0);
        score_mod(s, pl, row0, n, mt.at(x));
        softmax(smx, s, sl2, corr);
        to_a_frags(pa, s);
        if constexpr (!C::kOverlap) {
            // O += P V(first) now; the overlapped loop does it together with the next S.
            turn_wait();
            mbar_wait(sm.full_v(cv.stage), cv.phase);
            wgmma_fence();
            pv(o, pa, cv.stage);
            wgmma_commit();
            turn_pass();
            wgmma_wait<0>();
            fence_regs(o);
            release(sm.empty_v(cv.stage));
            refill(true, 0);
            cv.advance();
        }
        for (++x; x < nt; ++x) {
            n = pl.n_hi - 1 - x;
            if constexpr (C::kOverlap) {
                // S(x) and O += P(x-1) V(x-1) in flight together; softmax(S(x)) is written to run under the P V
                // product, but ptxas places the wait for that product above it (its SASS has the wait first).
                Steps::s_pv_issue(*this, s, o, pa, refill, x);
                score_mod(s, pl, row0, n, mt.at(x));
                softmax(smx, s, sl2, corr);
                Steps::pv_retire(*this, o, pa, refill, x - 1);
                rescale(o, corr);
                to_a_frags(pa, s);
            } else {
                turn_wait();
                mbar_wait(sm.full_k(ck.stage), ck.phase);
                Steps::s_issue(*this, s, refill, x);
                score_mod(s, pl, row0, n, mt.at(x));
                softmax(smx, s, sl2, corr);
                rescale(o, corr);
                to_a_frags(pa, s);
                turn_wait();
                mbar_wait(sm.full_v(cv.stage), cv.phase);
                wgmma_fence();
                pv(o, pa, cv.stage);
                wgmma_commit();
                turn_pass();
                wgmma_wait<0>();
                fence_regs(o);
                release(sm.empty_v(cv.stage));
                refill(true, x);
                cv.advance();
            }
        }
        if constexpr (C::kOverlap) {
            // O += P(last) V(last)
            mbar_wait(sm.full_v(cv.stage), cv.phase);
            fence_regs(o);
            wgmma_fence();
            pv(o, pa, cv.stage);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(o);
            release(sm.empty_v(cv.stage));
            cv.advance();
        }
        float inv_l[2], lse[2];
        smx.finalize<typename C::Softmax>(sl2, inv_l, lse);
        store_tile<C>(P.p, w, pl.mask.lq, cw, o, inv_l, lse, sm.q(cq.stage));
        fence_proxy_async();  // a later Q arrives by TMA into the rows just read
        mbar_arrive(sm.empty_q(cq.stage));
        cq.advance();
    }
};

template <class C>
__device__ void consumer_loop(const Fa3Params& P, Smem<C> sm, int cw) {
    Consumer<C> cs{{}, P, sm, cw};
    Loader<C> ld{P, sm};
    ld.lead = C::kWS || threadIdx.x == 0;
    Loader<C>* my_ld = C::kWS ? nullptr : &ld;  // non-warp-specialised: every consumer thread runs the loader
    Turns<C>{cw}.begin();
    TileSlots<decltype(sm)> slots{sm};
    int t = blockIdx.x;
    if constexpr (C::kClusterM > 1) cs.peer = cluster_ctarank() ^ 1u;
    while (true) {
        if constexpr (C::kPersistent) t = slots.take();
        WorkTile w;
        if (!tile_of<C>(P, t, w, cs.multicast)) break;
        const TilePlan pl = make_plan<C>(P.p, w);
        if (pl.i_hi >= pl.i_lo) {
            if (pl.n_tiles() > 0)
                cs.run_tile(w, pl, my_ld);
            else
                store_empty_tile<C>(P.p, w, pl.mask.lq, cw);
        }
        if constexpr (!C::kPersistent) break;
    }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fa3_fwd_kernel(const __grid_constant__ Fa3Params P) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    Smem<C> sm{align_smem_1k(smem_raw)};
    if (threadIdx.x == 0) {
        if constexpr (C::kClusterM > 1) {
            sm.init(cluster_tile(P.order, blockIdx.x).paired ? 2 : 1);
        } else {
            sm.init();
        }
        tma_prefetch_desc(&P.q.map);
        tma_prefetch_desc(&P.k.map);
        tma_prefetch_desc(&P.v.map);
    }
    // Cluster builds: the other CTA's loads and arrivals reach these barriers only once both are initialised.
    if constexpr (C::kClusterM > 1) {
        cluster_sync();
    } else {
        __syncthreads();
    }
    const int wg = warpgroup_idx();
    if constexpr (C::kWS) {
        if (wg == 0) {
            regs_dealloc<C::kProducerRegs>();
            if (threadIdx.x == 0) producer_loop<C>(P, sm);
        } else {
            regs_alloc<C::kConsumerRegs>();
            consumer_loop<C>(P, sm, wg - 1);
        }
    } else {
        consumer_loop<C>(P, sm, wg);
    }
    // ... and no CTA leaves while the other may still write its shared memory or arrive on its barriers.
    if constexpr (C::kClusterM > 1) {
        __syncwarp();
        cluster_sync();
    }
#endif
}

}  // namespace attn::hopper
