// The FA3 FP8 forward kernel (SEMANTICS.md §10; §2 scale, §3 softcap, §4 causal alignments, §5 windows,
// §7 varlen, §8 fully masked rows, §9 GQA): the structure of mainloop.cuh with FP8 operands, sharing its tile order
// and persistent slots (scheduler.cuh), work-tile plan and masks (plan.cuh), epilogue (epilogue.cuh), online softmax
// (softmax.cuh), shared-memory regions and mbarrier plan, pingpong turns, stage release and the consumers' steps
// (loops.cuh: descriptors, Q fragments, S = Q K^T, the GEMM issues and waits of a key tile, softmax and rescale).
//
//   producer warpgroup, warp 0 lane 0: TMA loads of Q, K and raw V (FP8 codes) into their rings;
//   producer warpgroup, warps 1-3: V transpose, raw V -> Vt (fp8_layout.cuh), zeroing keys past the length
//     (C::kVtGlobal: V arrives k-major, warp 0 loads Vt with TMA and warps 1-3 idle);
//   consumer warpgroups: S = Q8 K8^T (wgmma k32 SS, fp32), S *= scale * dq * dk (softcap), online softmax with
//     the max offset 2^8 (P in [0, 256]), P rounded to FP8 in registers, O += P8 Vt8 (wgmma k32 RS), O kept in
//     units of the current key tile's V descale (the rescale factor carries dv_prev / dv_cur; one final dv).
//
// Key tiles run from the first to the last, as in kernels/reference/fa3.py: P is rounded relative to the
// running row maximum, so the same order gives the same rounding as the reference.
//
// Barriers (mbarriers, phases by PipeState): full_q / empty_q (Q landed / every consumer thread done after
// the epilogue); full_k[s] / empty_k[s] (K landed / one arrival per consumer warp after its wgmma completed);
// full_vraw[s] / empty_vraw[s] (raw V landed / every transposing thread has read it); full_v[s] / empty_v[s]
// (Vt written and fenced for the async proxy by every transposing thread / consumer warps done); persistent builds:
// tile_full[i] / tile_empty[i] (the next work-tile index written to slot i / read by every consumer thread), and
// empty_q then completes once per work tile when every consumer thread's last S = Q K^T has completed.
#pragma once
#include "../fa_ptx.cuh"
#include "epilogue.cuh"
#include "fp8_config.cuh"
#include "fp8_layout.cuh"
#include "loops.cuh"
#include "plan.cuh"
#include "ptx.cuh"
#include "softmax.cuh"
#include "wgmma_fp8.cuh"

namespace attn::hopper {

enum Fp8Granularity { kFp8PerTensor = 0, kFp8PerHead = 1, kFp8PerTile = 2 };

struct Fa3Fp8Params {
    Fa3Params base;  // p (shapes, masks, output), tensor maps of the codes, tile order
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;
    int granularity;  // Fp8Granularity
    int q_tiles, k_tiles;  // per tile: ceil(seqlen_q / 128), ceil(seqlen_k / 128)

    // Descales (SEMANTICS.md §10): () per tensor, (B, Hkv) per head (Q's shared by the group), per tile
    // (B, Hq, q_tiles) for Q and (B, Hkv, k_tiles) for K and V.
    __device__ __forceinline__ float dq(int b, int h, int hkv, int m) const {
        if (granularity == kFp8PerTensor) return q_descale[0];
        if (granularity == kFp8PerHead) return q_descale[b * base.p.heads_kv + hkv];
        return q_descale[(int64_t(b) * base.p.heads_q + h) * q_tiles + m];
    }
    __device__ __forceinline__ float dkv(const float* d, int b, int hkv, int n) const {
        if (granularity == kFp8PerTensor) return d[0];
        if (granularity == kFp8PerHead) return d[b * base.p.heads_kv + hkv];
        return d[(int64_t(b) * base.p.heads_kv + hkv) * k_tiles + n];
    }
};

template <class C>
struct Fp8Smem : SmemRegions<C> {
    using SmemRegions<C>::base;
    using SmemRegions<C>::full_q;
    using SmemRegions<C>::empty_q;
    using SmemRegions<C>::full_k;
    using SmemRegions<C>::empty_k;
    using SmemRegions<C>::full_v;
    using SmemRegions<C>::empty_v;
    __device__ __forceinline__ unsigned char* q() const { return base; }
    __device__ __forceinline__ unsigned char* vraw(int s) const { return base + C::kOffVRaw + s * C::kKVBytes; }
    __device__ __forceinline__ unsigned char* vt(int s) const { return base + C::kOffVt + s * C::kKVBytes; }
    __device__ __forceinline__ unsigned char* o() const { return base + C::kOffO; }
    __device__ __forceinline__ uint64_t* full_vraw(int s) const { return this->full_ring(1, s); }
    __device__ __forceinline__ uint64_t* empty_vraw(int s) const { return this->empty_ring(1, s); }

    __device__ __forceinline__ void init() const {
        constexpr int kTransposers = 32 * C::kTransposeWarps;
        this->init_q();
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init(full_k(s), 1);
            mbar_init(empty_k(s), C::kConsumerWGs * 4);
            mbar_init(full_vraw(s), 1);
            mbar_init(empty_vraw(s), kTransposers);
            mbar_init(full_v(s), C::kVtGlobal ? 1 : kTransposers);
            mbar_init(empty_v(s), C::kConsumerWGs * 4);
        }
        if constexpr (C::kPersistent) this->init_tile_slots();
        mbar_init_fence();
    }
};

// ---- producer warpgroup ------------------------------------------------------------------------------
template <class C>
__device__ void fp8_load_loop(const Fa3Fp8Params& P, Fp8Smem<C> sm) {
    const Fa3Params& B = P.base;
    PipeState<C::kStages> pk, pv;
    TileSlots<decltype(sm)> slots{sm};
    int q_phase = 0;  // persistent: the empty_q phase of the next Q load
    int t = blockIdx.x;
    while (true) {
        if constexpr (C::kPersistent) {
            slots.put(t);
            if (t >= B.order.total()) return;
        }
        const WorkTile w = B.order.at(t);
        const TilePlan pl = make_plan<C>(B.p, w);
        if (pl.n_tiles() > 0) {
            const int hkv = w.h / (B.p.heads_q / B.p.heads_kv);
            auto load = [&](bool is_v, int n) {
                PipeState<C::kStages>& ps = is_v ? pv : pk;
                if constexpr (C::kVtGlobal) {
                    if (is_v) {  // the Vt tile (D rows of kBlockN key positions) straight into the ring the consumers read
                        mbar_wait(sm.empty_v(ps.stage), ps.phase ^ 1);
                        mbar_arrive_expect_tx(sm.full_v(ps.stage), C::kKVBytes);
#pragma unroll
                        for (int cb = 0; cb < C::kVtColBlocks; ++cb)
                            tma_load_4d(sm.vt(ps.stage) + cb * (C::kHeadDim * C::kVtColBytes), &B.v.map,
                                        sm.full_v(ps.stage), n * C::kBlockN + cb * C::kVtColBytes, 0,
                                        hkv * B.v.head_mul, w.b * B.v.batch_mul);
                        ps.advance();
                        return;
                    }
                }
                const TmaTensor& tt = is_v ? B.v : B.k;
                uint64_t* full = is_v ? sm.full_vraw(ps.stage) : sm.full_k(ps.stage);
                mbar_wait(is_v ? sm.empty_vraw(ps.stage) : sm.empty_k(ps.stage), ps.phase ^ 1);
                mbar_arrive_expect_tx(full, C::kKVBytes);
                unsigned char* dst = is_v ? sm.vraw(ps.stage) : sm.k(ps.stage);
#pragma unroll
                for (int cb = 0; cb < C::kColBlocks; ++cb)
                    tma_load_4d(dst + cb * (C::kBlockN * C::kRowBytes), &tt.map, full, cb * C::kRowBytes,
                                n * C::kBlockN, hkv * tt.head_mul, w.b * tt.batch_mul);
                ps.advance();
            };
            // K runs one tile ahead of V: K(first), Q, then (K(n + 1), V(n)) pairs.
            load(false, pl.n_lo);
            if constexpr (C::kPersistent) {  // the previous work tile's S = Q K^T all completed
                mbar_wait(sm.empty_q(), q_phase ^ 1);
                q_phase ^= 1;
            }
            mbar_arrive_expect_tx(sm.full_q(), C::kQBytes);
#pragma unroll
            for (int cb = 0; cb < C::kColBlocks; ++cb)
                tma_load_4d(sm.q() + cb * (C::kBlockM * C::kRowBytes), &B.q.map, sm.full_q(), cb * C::kRowBytes,
                            w.m_block * C::kBlockM, w.h * B.q.head_mul, w.b * B.q.batch_mul);
            for (int n = pl.n_lo; n < pl.n_hi; ++n) {
                if (n + 1 < pl.n_hi) load(false, n + 1);
                load(true, n);
            }
        }
        if constexpr (!C::kPersistent) return;
        t = atomicAdd(B.counter, 1) + gridDim.x;
    }
}

// One raw V tile -> its Vt tile (fp8_layout.cuh), the transpose of the build's width.
template <class C>
struct VTranspose {
    static __device__ __forceinline__ void run(uint32_t vraw, uint32_t vt, int valid, int tw, int lane) {
        if constexpr (C::kWideTranspose) {
            transpose_v_wide<C>(vraw, vt, valid, tw, lane);
        } else if constexpr (C::kBlockN == 64) {
            transpose_v_bn64<C>(vraw, vt, valid, tw, lane);
        } else {
            transpose_v<C>(vraw, vt, valid, tw, lane);
        }
    }
};

template <class C>
__device__ void fp8_transpose_loop(const Fa3Fp8Params& P, Fp8Smem<C> sm, int tw, int lane) {
    if constexpr (!C::kVtGlobal) {  // else Vt comes from global memory (fp8_load_loop)
        const Fa3Params& B = P.base;
        const WorkTile w = B.order.at(blockIdx.x);
        const TilePlan pl = make_plan<C>(B.p, w);
        PipeState<C::kStages> ps;
        for (int n = pl.n_lo; n < pl.n_hi; ++n) {
            mbar_wait(sm.full_vraw(ps.stage), ps.phase);
            mbar_wait(sm.empty_v(ps.stage), ps.phase ^ 1);
            const int valid = pl.mask.lk - n * C::kBlockN;
            C::Stages::template transpose<VTranspose<C>>(smem_addr(sm.vraw(ps.stage)), smem_addr(sm.vt(ps.stage)), valid,
                                                         tw, lane);
            mbar_arrive(sm.empty_vraw(ps.stage));  // this thread's reads of raw V are done
            fence_proxy_async();                   // its Vt stores before the consumers' wgmma reads them
            mbar_arrive(sm.full_v(ps.stage));
            ps.advance();
        }
    }
}

// ---- consumers -------------------------------------------------------------------------------------------
template <class C>
struct Fp8Consumer : ConsumerSteps<C, Fp8Consumer<C>> {
    using Steps = ConsumerSteps<C, Fp8Consumer<C>>;
    using Steps::rescale;
    using Steps::softmax;
    using Format = typename C::Format;
    // D: the shared-memory head dim of Q, K, V (config.cuh fp8_smem_dim); DVP: O's columns in registers.
    static constexpr int D = C::kHeadDim, DVP = C::kHeadDimVPad, BN = C::kBlockN;
    const Fa3Fp8Params& P;
    Fp8Smem<C> sm;
    int cw;
    PipeState<C::kStages> ck, cv;
    int q_phase = 0;  // the full_q phase of this work tile (persistent builds: one Q per work tile)

    // Persistent builds: this thread is done with the Q buffer (its last S = Q K^T of the work tile has completed), so
    // the producer may load the next work tile's Q into it. Q in registers (kQRegs) was read with ldmatrix, a generic-
    // proxy read before the TMA write.
    __device__ __forceinline__ void q_done() {
        if constexpr (C::kPersistent) {
            if constexpr (C::kQRegs) fence_proxy_async();
            mbar_arrive(sm.empty_q());
        }
    }

    __device__ __forceinline__ void release(uint64_t* bar) { release_stage<C>(bar, false, 0); }
    __device__ __forceinline__ void turn_wait() { Turns<C>{cw}.wait(); }
    __device__ __forceinline__ void turn_pass() { Turns<C>{cw}.pass(); }

    // kQRegs: this warpgroup's Q rows as the m64k32 A fragments, one [4] per 32 codes (ConsumerSteps; codes viewed as
    // b16 pairs).
    uint32_t qf[C::kQRegs ? D / 32 : 1][4];
    __device__ __forceinline__ void load_q_frags() { Steps::load_q_frags(*this, smem_addr(sm.q())); }
    // Shared-memory descriptors of stage 0 of the K and Vt rings and of this warpgroup's Q rows, made once per work
    // tile (ConsumerSteps::set_descs).
    uint64_t kdesc0, vdesc0, qdesc;
    __device__ __forceinline__ void set_descs() { Steps::set_descs(*this, smem_addr(sm.q()), smem_addr(sm.vt(0))); }
    // S = Q8 K8^T over the head dim, 32 codes (bytes) per wgmma: both operands K-major (kQRegs: Q from registers).
    __device__ __forceinline__ void gemm_s(float (&s)[BN / 2], int stage) { Steps::gemm_s(*this, s, stage); }
    // O += P8 Vt8 over the keys, 32 at a time: P from registers, Vt K-major (keys contiguous, column blocks of
    // kVtColBytes-byte rows).
    __device__ __forceinline__ void gemm_pv(float (&o)[DVP / 2], const uint32_t (&pa)[BN / 32][4], int stage) {
        const uint64_t vb0 = desc_advance(vdesc0, stage * C::kKVBytes);
#pragma unroll
        for (int ks = 0; ks < BN / 32; ++ks) {
            const int cb = ks * 32 / C::kVtColBytes, kk = ks * 32 % C::kVtColBytes;
            wgmma_rs(Wgmma8<Format, DVP>{}, o, pa[ks], desc_advance(vb0, cb * (D * C::kVtColBytes) + kk), 1);
        }
    }

    // O += P V of a Vt stage, through the schedule's stages (schedule.cuh).
    __device__ __forceinline__ void pv(float (&o)[DVP / 2], const uint32_t (&pa)[BN / 32][4], int stage) {
        C::Stages::pv(*this, o, pa, stage);
    }

    // S = Q K^T of the next K stage in this warpgroup's pingpong turn, awaited (nothing else of it in flight).
    __device__ __forceinline__ void s_alone(float (&s)[BN / 2]) {
        turn_wait();
        s_in_turn(s);
    }
    // The same once the turn is held: the turn passes as soon as the GEMM is issued.
    __device__ __forceinline__ void s_in_turn(float (&s)[BN / 2]) {
        mbar_wait(sm.full_k(ck.stage), ck.phase);
        Steps::s_issue(*this, s, NoRefill{}, 0);
    }
    // O += P V of the next Vt stage, awaited.
    __device__ __forceinline__ void pv_alone(float (&o)[DVP / 2], uint32_t (&pa)[BN / 32][4]) {
        mbar_wait(sm.full_v(cv.stage), cv.phase);
        fence_regs(o);
        wgmma_fence();
        pv(o, pa, cv.stage);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pa);
        release(sm.empty_v(cv.stage));
        cv.advance();
    }

    // s = scale * dq * dk * acc, softcap, in log2 units; -inf where mask.cuh says a key is not visible (`masked`: key
    // tile n is one of plan.cuh's masked_tiles). kFold: s stays the raw accumulator (the softmax applies the
    // constant factor in its exp2 FFMA).
    template <bool kFold>
    __device__ __forceinline__ void score_mod(float (&s)[BN / 2], const TilePlan& pl, int row0, int n, float f,
                                              bool masked) {
        const float cap = P.base.p.softcap;
        if constexpr (kFold) {
        } else if (cap > 0.f) {
#pragma unroll
            for (int e = 0; e < BN / 2; ++e) s[e] = cap * tanhf(s[e] * f / cap) * kLog2e;
        } else {
            const float fl2 = f * kLog2e;
#pragma unroll
            for (int e = 0; e < BN / 2; ++e) s[e] *= fl2;
        }
        if (masked) mask_warpgroup_tile<BN>(s, pl.mask, row0, n);
    }

    // kFold: per-tensor / per-head descales and no softcap (fp8_config.cuh kFoldScale): one factor sl2 per row.
    template <bool kFold>
    __device__ __forceinline__ void run_tile(const WorkTile& w, const TilePlan& pl) {
        const int nt = pl.n_tiles();
        const int row0 = w.m_block * C::kBlockM + cw * 64;
        const int hkv = w.h / (P.base.p.heads_q / P.base.p.heads_kv);
        const float fq = P.base.p.scale * P.dq(w.b, w.h, hkv, row0 / C::kDescaleBlock);
        const float sl2 = kFold ? fq * P.dkv(P.k_descale, w.b, hkv, 0) * kLog2e : 1.f;
        set_descs();
        // Key tiles run first to last here (n = n_lo + x); masked_tiles counts from the last one.
        const MaskedTiles mt = masked_tiles(pl.mask, pl.n_hi, nt, BN, row0, min(row0 + 63, pl.mask.lq - 1));
        mbar_wait(sm.full_q(), q_phase);
        load_q_frags();

        float o[DVP / 2];
#pragma unroll
        for (int e = 0; e < DVP / 2; ++e) o[e] = 0.f;
        float s[BN / 2];
        uint32_t pa[BN / 32][4];
        RowSoftmax smx;
        smx.init();
        float corr[2];

        float dv_cur = P.dkv(P.v_descale, w.b, hkv, pl.n_lo * BN / C::kDescaleBlock);
        if constexpr (C::kIntraWgOverlap) {
            int n = pl.n_lo;
            s_alone(s);
            if (nt == 1) q_done();
            score_mod<kFold>(s, pl, row0, n, fq * P.dkv(P.k_descale, w.b, hkv, n * BN / C::kDescaleBlock),
                             mt.at(nt - 1));
            softmax(smx, s, sl2, corr);
            p_to_fp8_frags<Format, BN>(pa, s);
            for (int x = 1; x < nt; ++x) {
                n = pl.n_lo + x;
                const float fk = fq * P.dkv(P.k_descale, w.b, hkv, n * BN / C::kDescaleBlock);
                // kFold (per-tensor / per-head descales): one V descale for the whole work tile, nothing to carry.
                const float dv_next = kFold ? dv_cur : P.dkv(P.v_descale, w.b, hkv, n * BN / C::kDescaleBlock);
                // S(x) and O += P(x-1) V(x-1) in flight together; softmax(S(x)) runs under the P V product.
                Steps::s_pv_issue(*this, s, o, pa, NoRefill{}, x);
                if (x == nt - 1) q_done();
                before_wait<C::kSoftmaxUnderPV>(P.base.p.seqlen_q > 0, [&] {
                    score_mod<kFold>(s, pl, row0, n, fk, mt.at(nt - 1 - x));
                    softmax(smx, s, sl2, corr);
                });
                Steps::pv_retire(*this, o, pa, NoRefill{}, x - 1);
                // O is in units of the previous tile's V descale; the next product adds in units of this one's.
                if constexpr (!kFold) {
                    const float ratio = dv_cur / dv_next;
                    dv_cur = dv_next;
                    corr[0] *= ratio;
                    corr[1] *= ratio;
                }
                rescale(o, corr);
                p_to_fp8_frags<Format, BN>(pa, s);
            }
            pv_alone(o, pa);
        } else {
            // Three warpgroups at d = 128 (160 registers: S and the P fragments are never live together). A turn
            // issues O += P(x-1) V(x-1), awaits it, then issues S(x), so that a warpgroup's two GEMMs reach the tensor
            // cores back to back and its softmax runs under the other two warpgroups' GEMMs. (With S alone in the turn
            // and P V issued outside the turns, as soon as P was ready: 0-1% slower non-causal, 1-7% causal; a strict
            // S / P V alternation of the turns: 18% slower.)
            for (int x = 0; x < nt; ++x) {
                const int n = pl.n_lo + x;
                const float fk = fq * P.dkv(P.k_descale, w.b, hkv, n * BN / C::kDescaleBlock);
                turn_wait();
                if (x > 0) pv_alone(o, pa);
                s_in_turn(s);
                if (x == nt - 1) q_done();
                score_mod<kFold>(s, pl, row0, n, fk, mt.at(nt - 1 - x));
                softmax(smx, s, sl2, corr);
                if constexpr (!kFold) {  // O is in units of the previous tile's V descale
                    const float dv_next = P.dkv(P.v_descale, w.b, hkv, n * BN / C::kDescaleBlock);
                    corr[0] *= dv_cur / dv_next;
                    corr[1] *= dv_cur / dv_next;
                    dv_cur = dv_next;
                }
                rescale(o, corr);
                p_to_fp8_frags<Format, BN>(pa, s);
            }
            pv_alone(o, pa);
        }

        float inv_l[2], lse[2];
        smx.finalize<typename C::Softmax>(sl2, inv_l, lse);
        inv_l[0] *= dv_cur;
        inv_l[1] *= dv_cur;
        store_tile<C>(P.base.p, w, pl.mask.lq, cw, o, inv_l, lse, sm.o());
        if constexpr (C::kPersistent)
            q_phase ^= 1;
        else
            mbar_arrive(sm.empty_q());
    }
};

template <class C>
__device__ void fp8_consumer_loop(const Fa3Fp8Params& P, Fp8Smem<C> sm, int cw) {
    Fp8Consumer<C> cs{{}, P, sm, cw};
    Turns<C>{cw}.begin();
    TileSlots<decltype(sm)> slots{sm};
    int t = blockIdx.x;
    while (true) {
        if constexpr (C::kPersistent) {
            t = slots.take();
            if (t >= P.base.order.total()) return;
        }
        const WorkTile w = P.base.order.at(t);
        const TilePlan pl = make_plan<C>(P.base.p, w);
        // Every warpgroup takes a pingpong turn per key tile, so the turns stay in step across work tiles.
        if (pl.i_hi >= pl.i_lo) {
            // The max of the raw accumulator is the max of the scaled scores only for a positive factor (scale > 0;
            // descales are >= 0, and a zero one scales every score to 0 either way).
            const bool fold = C::kFoldScale && P.granularity != kFp8PerTile && !(P.base.p.softcap > 0.f) &&
                              P.base.p.scale > 0.f;
            if (pl.n_tiles() == 0)
                store_empty_tile<C>(P.base.p, w, pl.mask.lq, cw);
            else if (fold)
                cs.template run_tile<true>(w, pl);
            else
                cs.template run_tile<false>(w, pl);
        }
        if constexpr (!C::kPersistent) return;
    }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fa3_fp8_fwd_kernel(const __grid_constant__ Fa3Fp8Params P) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    Fp8Smem<C> sm{align_smem_1k(smem_raw)};
    if (threadIdx.x == 0) {
        sm.init();
        tma_prefetch_desc(&P.base.q.map);
        tma_prefetch_desc(&P.base.k.map);
        tma_prefetch_desc(&P.base.v.map);
    }
    __syncthreads();
    const int wg = warpgroup_idx();
    if (wg == 0) {
        regs_dealloc<C::kProducerRegs>();
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (warp == 0) {
            if (lane == 0) fp8_load_loop<C>(P, sm);
        } else {
            fp8_transpose_loop<C>(P, sm, warp - 1, lane);
        }
    } else {
        regs_alloc<C::kConsumerRegs>();
        fp8_consumer_loop<C>(P, sm, wg - 1);
    }
#endif
}

}  // namespace attn::hopper
