// What the two FA3 forward mainloops (mainloop.cuh: FP16 / BF16, fp8_mainloop.cuh: FP8) share beside the tile order
// (scheduler.cuh: the work tiles, the persistent loop's slots) and the plan of a work tile (plan.cuh): the regions of
// the shared-memory plan both have, the consumer warpgroups' pingpong turns and the release of a K / V stage.
//
// Their work-tile loops stay written out in each mainloop: passing the loop body to a shared loop as a lambda changed
// the instruction order nvcc emits for the shipped kernels (kernels/cuda/ptx_diff.py --kernels), which this sharing
// must not do.
#pragma once
#include "ptx.cuh"

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

}  // namespace attn::hopper
