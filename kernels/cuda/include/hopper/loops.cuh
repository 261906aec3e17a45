// What the two FA3 forward mainloops (mainloop.cuh: FP16 / BF16, fp8_mainloop.cuh: FP8) share beside the tile order
// (scheduler.cuh: the work tiles, the persistent loop's slots) and the plan of a work tile (plan.cuh): the regions and
// mbarriers of the shared-memory plan, the consumer warpgroups' pingpong turns, the release of a K / V stage, and the
// consumers' steps (ConsumerSteps): their schedule's stages and the GEMM issues and waits of a key tile.
//
// Their key-tile and work-tile loops stay written out in each mainloop, from these steps: passing the loop body to a
// shared loop as a lambda changed the instruction order nvcc emits for the shipped kernels (kernels/cuda/ptx_diff.py
// --kernels), which this sharing must not do; and the loops differ (key-tile order, FP8's V descales, the BF16
// builds without warp specialisation).
#pragma once
#include "plan.cuh"
#include "ptx.cuh"
#include "softmax.cuh"

namespace attn::hopper {

// The shared-memory regions both forward kernels have (their configs place them: kOffK, kKBytes, kOffBar, kOffSlot):
// the K ring, the mbarriers, the persistent loop's work-tile slots. Each kernel's layout derives from this and adds
// its own rings (mainloop.cuh Smem, fp8_mainloop.cuh Fp8Smem).
//
// The mbarriers, in this order (the configs count them in kNumBars): full_q[kQBarriers], empty_q[kQBarriers]; then
// for each of the kBarrierRings rings of kStages stages, full[kStages], empty[kStages]: the K ring first, the V ring
// the consumers read last (FP8: the raw V ring between them); then the persistent loop's tile_full[2], tile_empty[2].
template <class C>
struct SmemRegions {
    static constexpr int kQ = C::kQBarriers, kRings = C::kBarrierRings;
    static_assert(2 * kQ + 2 * kRings * C::kStages <= C::kNumBars, "the config counts every Q and ring barrier");
    unsigned char* base;
    __device__ __forceinline__ unsigned char* k(int s) const { return base + C::kOffK + s * C::kKBytes; }
    __device__ __forceinline__ uint64_t* bar(int i) const { return reinterpret_cast<uint64_t*>(base + C::kOffBar) + i; }
    __device__ __forceinline__ int* slot(int i) const { return reinterpret_cast<int*>(base + C::kOffSlot) + i; }

    __device__ __forceinline__ uint64_t* full_q(int s = 0) const { return bar(s); }
    __device__ __forceinline__ uint64_t* empty_q(int s = 0) const { return bar(kQ + s); }
    // Stage s of ring r (0: K, kRings - 1: the V the consumers read).
    __device__ __forceinline__ uint64_t* full_ring(int r, int s) const { return bar(2 * kQ + 2 * r * C::kStages + s); }
    __device__ __forceinline__ uint64_t* empty_ring(int r, int s) const {
        return bar(2 * kQ + (2 * r + 1) * C::kStages + s);
    }
    __device__ __forceinline__ uint64_t* full_k(int s) const { return full_ring(0, s); }
    __device__ __forceinline__ uint64_t* empty_k(int s) const { return empty_ring(0, s); }
    __device__ __forceinline__ uint64_t* full_v(int s) const { return full_ring(kRings - 1, s); }
    __device__ __forceinline__ uint64_t* empty_v(int s) const { return empty_ring(kRings - 1, s); }
    __device__ __forceinline__ uint64_t* tile_full(int i) const { return bar(2 * kQ + 2 * kRings * C::kStages + i); }
    __device__ __forceinline__ uint64_t* tile_empty(int i) const {
        return bar(2 * kQ + 2 * kRings * C::kStages + 2 + i);
    }

    // Q's barriers: one TMA arrival fills a buffer, every consumer thread (ordinary loads read Q) frees it.
    __device__ __forceinline__ void init_q() const {
        for (int s = 0; s < kQ; ++s) {
            mbar_init(full_q(s), 1);
            mbar_init(empty_q(s), C::kConsumerThreads);
        }
    }
    // The work-tile slots' barriers (scheduler.cuh TileSlots): the producer fills a slot, every consumer thread reads it.
    __device__ __forceinline__ void init_tile_slots() const {
        for (int i = 0; i < 2; ++i) {
            mbar_init(tile_full(i), 1);
            mbar_init(tile_empty(i), C::kConsumerThreads);
        }
    }
};

// Pingpong (C::kPingpong): consumer warpgroup cw waits for its turn (named barrier kBarTurn + cw over the 256 threads
// of two warpgroups), issues its GEMMs and passes the turn to the next warpgroup; the last one lets warpgroup 0 begin.
template <class C>
struct Turns {
    int cw;
    __device__ __forceinline__ void begin() const {
        if constexpr (C::kPingpong) {
            if (cw == C::kConsumerWGs - 1) named_arrive(C::kBarTurn + 0, 256);  // warpgroup 0 takes the first turn
        }
    }
    __device__ __forceinline__ void wait() const {
        if constexpr (C::kPingpong) named_sync(C::kBarTurn + cw, 256);
    }
    __device__ __forceinline__ void pass() const {
        if constexpr (C::kPingpong) named_arrive(C::kBarTurn + (cw + 1) % C::kConsumerWGs, 256);
    }
};

// A consumer warp is done with a K / V stage (its wgmma reads completed): one arrival per warp on the stage's empty
// barrier, and (a paired cluster, C::kClusterM > 1) on the other CTA's, whose loads also write this stage.
template <class C>
__device__ __forceinline__ void release_stage(uint64_t* bar, bool multicast, uint32_t peer) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
        mbar_arrive(bar);
        if (C::kClusterM > 1 && multicast) mbar_arrive_remote(bar, peer);
    }
}

// A consumer's steps that both forward kernels take alike, beside their own GEMMs and score scaling. Self (mainloop.cuh
// Consumer, fp8_mainloop.cuh Fp8Consumer) derives from ConsumerSteps<C, Self>, which gives it the schedule's softmax and
// rescale stages (static), and passes itself to the steps as `me`, which read: me.sm (its shared-memory layout:
// SmemRegions' full_k / empty_k / full_v / empty_v), me.ck / me.cv (the PipeState of its K and V rings), me.gemm_s(s,
// stage), me.pv(o, pa, stage) (its GEMMs of a stage, issued; pv through the schedule's stages), me.turn_wait() /
// me.turn_pass() (Turns) and me.release(bar) (release_stage). The configs name what the steps read: kBlockN,
// kHeadDimVPad, Stages, Softmax, kSkipRescale, kWaitBeforeTurn.
//
// The steps take the consumer as an argument, and pv and the turns stay the consumers' own members: reaching them
// through a CRTP downcast of `this` changed the instruction order nvcc emits for the shipped kernels.
//
// `refill(is_v, x)`: run once key tile x's K (is_v false) or V stage is released, before its ring advances: the BF16
// builds without warp specialisation load key tile x + kStages into it; NoRefill elsewhere.
struct NoRefill {
    __device__ __forceinline__ void operator()(bool, int) const {}
};

template <class C, class Self>
struct ConsumerSteps {
    static constexpr int kBN = C::kBlockN, kDVP = C::kHeadDimVPad;

    // The online softmax (softmax.cuh) with the config's options, through the schedule's stages (schedule.cuh).
    static __device__ __forceinline__ void softmax(RowSoftmax& smx, float (&s)[kBN / 2], float sl2, float (&corr)[2]) {
        C::Stages::template softmax<typename C::Softmax>(smx, s, sl2, corr);
    }
    // O *= corr; kSkipRescale: not in a warp whose rows all kept their maximum (corr = 1 exactly, softmax.cuh).
    static __device__ __forceinline__ void rescale_o(float (&o)[kDVP / 2], const float (&corr)[2]) {
        if constexpr (C::kSkipRescale) {
            if (!__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) return;
        }
        RowSoftmax::rescale(o, corr);
    }
    // rescale_o through the schedule's stages.
    static __device__ __forceinline__ void rescale(float (&o)[kDVP / 2], const float (&corr)[2]) {
        C::Stages::template rescale<Self>(o, corr);
    }

    // The shared-memory descriptors of stage 0 of the K ring (me.kdesc0), of the V ring the consumers read at shared
    // address v_ring (me.vdesc0) and of this warpgroup's rows of the Q tile at q_tile (me.qdesc), made once per work
    // tile; a stage's descriptor is stage 0's advanced by whole stages (desc_advance), one add per GEMM instead of
    // re-encoding the address. The configs give the layouts: kAtomBytes / kSwizzleLayout of Q and K, kVLeadBytes /
    // kVAtomBytes / kVSwizzleLayout of V.
    static __device__ __forceinline__ void set_descs(Self& me, uint32_t q_tile, uint32_t v_ring) {
        me.kdesc0 = swizzled_desc(smem_addr(me.sm.k(0)), 16, C::kAtomBytes, C::kSwizzleLayout);
        me.vdesc0 = swizzled_desc(v_ring, C::kVLeadBytes, C::kVAtomBytes, C::kVSwizzleLayout);
        me.qdesc = swizzled_desc(q_tile + me.cw * 64 * C::kRowBytes, 16, C::kAtomBytes, C::kSwizzleLayout);
    }
    // C::kQRegs: this warpgroup's 64 rows of the Q tile at shared address q_tile into me.qf, the wgmma A fragments of
    // its k-steps (one [4] per 32 bytes of a row), with ldmatrix.x4 from the swizzled rows (column blocks of
    // C::kRowBytes bytes, rows of 16-bit pairs: matrix i of a k-step is rows 8 (i & 1).., 16-byte chunk i >> 1).
    static __device__ __forceinline__ void load_q_frags(Self& me, uint32_t q_tile) {
        if constexpr (C::kQRegs) {
            constexpr int kSteps = sizeof(me.qf) / sizeof(me.qf[0]), kPerBlock = C::kRowBytes / 32;
            const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
            const int r = me.cw * 64 + 16 * warp + 8 * ((lane / 8) & 1) + lane % 8;  // row within the Q tile
            const uint32_t base = q_tile + r * C::kRowBytes;
#pragma unroll
            for (int ks = 0; ks < kSteps; ++ks) {
                const int chunk = 2 * (ks % kPerBlock) + lane / 16;
                const uint32_t block = (ks / kPerBlock) * (C::kBlockM * C::kRowBytes);
                ldmatrix_x4_a(me.qf[ks], base + block + ((chunk ^ (r % 8)) << 4));
            }
        }
    }
    // S = Q K^T over the head dim, issued: C::kKSteps k-steps of 32 bytes (16 FP16 / BF16 elements or 32 FP8 codes),
    // both operands K-major in rows of C::kRowBytes-byte swizzled column blocks, the wgmma C::ScoreMma's; Q from
    // me.qf (C::kQRegs: the A fragments of its k-steps) or me.qdesc, K from stage `stage` of the ring me.kdesc0 starts.
    static __device__ __forceinline__ void gemm_s(const Self& me, float (&s)[kBN / 2], int stage) {
        const uint64_t db0 = desc_advance(me.kdesc0, stage * C::kKBytes);
#pragma unroll
        for (int ks = 0; ks < C::kKSteps; ++ks) {
            const int cb = ks / (C::kRowBytes / 32), kk = ks % (C::kRowBytes / 32);
            const uint64_t db = desc_advance(db0, cb * (kBN * C::kRowBytes) + kk * 32);
            if constexpr (C::kQRegs) {
                C::ScoreMma::rs(s, me.qf[ks], db, ks > 0 ? 1 : 0);
            } else {
                const uint64_t da = desc_advance(me.qdesc, cb * (C::kBlockM * C::kRowBytes) + kk * 32);
                C::ScoreMma::ss(s, da, db, ks > 0 ? 1 : 0);
            }
        }
    }

    // S of key tile x awaited (the wgmma wait just before): its registers fenced, its K stage released and refilled
    // (the producer's loads when the consumers issue them), the K ring advanced.
    template <class Refill>
    static __device__ __forceinline__ void k_retire(Self& me, float (&s)[kBN / 2], const Refill& refill, int x) {
        fence_regs(s);
        me.release(me.sm.empty_k(me.ck.stage));
        refill(false, x);
        me.ck.advance();
    }
    // S = Q K^T of the K stage just awaited, in this warpgroup's pingpong turn: issued, the turn passed, awaited (nothing
    // else of this warpgroup in flight), the stage released.
    template <class Refill>
    static __device__ __forceinline__ void s_issue(Self& me, float (&s)[kBN / 2], const Refill& refill, int x) {
        wgmma_fence();
        me.gemm_s(s, me.ck.stage);
        wgmma_commit();
        me.turn_pass();
        wgmma_wait<0>();
        k_retire(me, s, refill, x);
    }
    // Intra-warpgroup overlap, key tile x: S(x) and O += P(x-1) V(x-1) issued together in one turn, S(x) awaited and
    // its K stage released (kWaitBeforeTurn: both stages awaited before the turn is taken). pv_retire then awaits the
    // P V product (softmax(S(x)) is written between the two).
    template <class PA, class Refill>
    static __device__ __forceinline__ void s_pv_issue(Self& me, float (&s)[kBN / 2], float (&o)[kDVP / 2], const PA& pa,
                                                      const Refill& refill, int x) {
        if constexpr (C::kWaitBeforeTurn) {
            mbar_wait(me.sm.full_k(me.ck.stage), me.ck.phase);
            mbar_wait(me.sm.full_v(me.cv.stage), me.cv.phase);
        }
        me.turn_wait();
        if constexpr (!C::kWaitBeforeTurn) mbar_wait(me.sm.full_k(me.ck.stage), me.ck.phase);
        fence_regs(o);
        wgmma_fence();
        me.gemm_s(s, me.ck.stage);
        wgmma_commit();
        if constexpr (!C::kWaitBeforeTurn) mbar_wait(me.sm.full_v(me.cv.stage), me.cv.phase);
        me.pv(o, pa, me.cv.stage);
        wgmma_commit();
        me.turn_pass();
        wgmma_wait<1>();
        k_retire(me, s, refill, x);
    }
    // The P V product of key tile x in flight: awaited, its V stage released.
    template <class PA, class Refill>
    static __device__ __forceinline__ void pv_retire(Self& me, float (&o)[kDVP / 2], PA& pa, const Refill& refill,
                                                     int x) {
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pa);
        me.release(me.sm.empty_v(me.cv.stage));
        refill(true, x);
        me.cv.advance();
    }
};

}  // namespace attn::hopper
