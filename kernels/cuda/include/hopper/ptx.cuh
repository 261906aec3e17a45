// Hopper (sm_90a) PTX wrappers used by the FA3 kernels: mbarriers, TMA tile loads, wgmma fences,
// shared-memory matrix descriptors, named barriers, register reallocation. One place for the inline
// assembly so the mainloop reads as C++ (the older kernels' sm_80 wrappers are in ../fa_ptx.cuh).
#pragma once
#include <stdint.h>

namespace attn::hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A float2 from shared memory, read where it stands in the program: volatile, so ptxas keeps it in order with the
// other volatile accesses instead of hoisting it (the FA3 backward's element-wise pass reads one LSE / D pair per
// chunk; hoisted, all of them were live at once and spilled).
__device__ __forceinline__ float2 lds_f2_in_order(const float* p) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(smem_addr(p)));
    return v;
}

// ---- mbarrier (64-bit barrier objects in shared memory) -----------------------------------------
// The first 1024-byte-aligned byte of the dynamic shared memory (the 128-byte swizzle atoms of TMA and wgmma
// want that alignment; the launchers ask for 1 KB of slack). The offset is applied to the __shared__ array
// itself, so the compiler still knows every pointer derived from the result is a shared-memory pointer and emits
// LDS / STS; rounding the generic address through an integer loses that, and the accesses become generic
// LD.E / ST.E (64-bit address arithmetic, the L1TEX path).
__device__ __forceinline__ unsigned char* align_smem_1k(unsigned char* smem_raw) {
    return smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// Makes the initialisations visible to the async proxy (TMA) and the other threads (after a barrier).
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::); }
// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// An arrival on the mbarrier at bar's offset in the shared memory of CTA `cta` of the cluster, with the default
// semantics (release at CTA scope, as CUTLASS's cluster barrier arrives; `.release.cluster` measured 0.77-0.84x,
// docs/fa3_forward.md): the caller arrives only after its wgmma reads of the stage have completed (wgmma_wait).
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, uint32_t cta) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
        "r"(cta)
        : "memory");
}

// ---- thread-block clusters ------------------------------------------------------------------------
__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster (barrier.cluster is .aligned: all threads of a warp execute it together).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// This thread's warpgroup, broadcast from lane 0 so that ptxas knows it is the same in every lane of the warp and keeps
// what derives from it (the consumers' shared-memory addresses and wgmma descriptors) in uniform registers; from
// threadIdx.x / 128 alone the FA3 backward built every RS wgmma's descriptor in vector registers (a 64-bit add and two
// R2UR per wgmma).
__device__ __forceinline__ int warpgroup_idx() {
    return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
}

// Four 8 x 8 matrices of 16-bit elements from registers to shared memory (stmatrix.x4): lane l gives the address of row
// l % 8 of matrix l / 8 (16 contiguous bytes) and holds in r[i] the elements 2 (l % 4), 2 (l % 4) + 1 of row l / 4 of
// matrix i, which is the wgmma accumulator / A-fragment layout of an 8 x 8 block.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}

// stmatrix_x4 with each matrix transposed on the way (.trans): the elements lane l holds in r[i] (row l / 4, columns
// 2 (l % 4) + {0, 1} of matrix i) land in rows 2 (l % 4) + {0, 1}, column l / 4 of the 16 bytes lanes 8 i + [0, 8)
// address: an accumulator block [rows][columns] is stored [columns][rows].
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// Blocks until the phase of parity `parity` has completed (a fresh barrier counts parity 1 as done). The suspend-time
// hint (10 ms, an upper bound: the thread resumes when the phase completes) makes ptxas emit TRYWAIT, NANOSLEEP.SYNCS,
// PHASECHK: a waiting warp sleeps until the barrier moves. Without it try_wait returns after a short, system-dependent
// time and the loop spins: in an H200 ncu profile (docs/fa3_forward.md) the forward's producer warp re-tried ~240
// times per key tile (~6% of the d = 128 kernel's instructions, all on one scheduler beside two consumer warps), the
// backward's producer, LSE / D and dQ-writer warps ~23% of the d = 64 backward's.
constexpr uint32_t kMbarSuspendHintNs = 10000000;
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
        "r"(parity), "n"(kMbarSuspendHintNs)
        : "memory");
}

// ---- TMA ------------------------------------------------------------------------------------------
// One box of a 4-d tensor map (coordinates innermost first: column, row, head, batch) into shared
// memory; completion is counted in bytes on `bar`. Elements outside the tensor are written as zeros.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* tmap, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6}], [%2];\n" ::"r"(smem_addr(dst)),
        "l"(tmap), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
// The same box multicast: written at dst's offset into the shared memory of every CTA of the cluster in `cta_mask`,
// each counting the bytes on its own mbarrier at bar's offset.
__device__ __forceinline__ void tma_load_4d_multicast(void* dst, const void* tmap, uint64_t* bar, int c0, int c1, int c2,
                                                      int c3, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%3, %4, %5, %6}], [%2], %7;\n" ::"r"(smem_addr(dst)),
        "l"(tmap), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(cta_mask)
        : "memory");
}
__device__ __forceinline__ void tma_prefetch_desc(const void* tmap) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}
// Orders this thread's ordinary shared-memory accesses before later async-proxy ones (TMA, wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- wgmma ------------------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// kOwnBlock: runs `work` in a basic block of its own, entered by a branch on `taken` (a value ptxas cannot fold; the
// callers pass a kernel parameter the launchers guarantee true). ptxas schedules a wgmma.wait_group as early as its
// basic block allows (waiting earlier than asked is legal), so a softmax written between `wait_group 1` and
// `wait_group 0` runs after the wait for O += P V instead of under it (the SASS of both forward kernels;
// docs/fa3_forward.md); the block boundary keeps the wait after the softmax. Whether that pays is measured per build.
template <bool kOwnBlock, class F>
__device__ __forceinline__ void before_wait(bool taken, F&& work) {
    if constexpr (kOwnBlock) {
        if (taken) work();
    } else {
        work();
    }
}
// Keeps the compiler from moving accesses of an accumulator across an asynchronous wgmma.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N, int M>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][M]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Shared-memory matrix descriptor for a 128-byte-swizzled operand (the layout TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B: rows of 128 bytes, the 16-byte chunk c of row r stored at chunk c ^ (r % 8),
// atoms of 8 rows = 1024 bytes, which must start 1024-byte aligned). Fields: start address, leading
// byte offset (LBO), stride byte offset (SBO), all >> 4; bits 62-63 = 1 selects the 128-byte swizzle.
//   K-major (Q, K: the reduction axis contiguous): SBO = 1024 (next 8 rows), LBO unused (1);
//     the k-th 16-element step inside a 64-element atom column adds 32 * k bytes to the start.
//   MN-major (V: the output axis contiguous): LBO = bytes between 64-column blocks, SBO = 1024
//     (next 8 rows of the reduction axis); the k-th 16-row step adds 2048 * k bytes.
// `swizzled_desc` is the same with the layout type given: 1 = 128-byte, 2 = 64-byte swizzle (atoms of 8 rows of
// 64 bytes = 512 bytes, chunk c of row r at c ^ ((r / 2) % 4), CU_TENSOR_MAP_SWIZZLE_64B).
__device__ __forceinline__ uint64_t swizzled_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t layout) {
    uint64_t d = 0;
    d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
    d |= static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16;
    d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
    d |= static_cast<uint64_t>(layout & 3) << 62;
    return d;
}
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return swizzled_desc(addr, lbo, sbo, 1);
}
// The descriptor of the operand `bytes` further on (16-byte aligned): the start-address field holds addr >> 4 in
// 14 bits, so adding bytes >> 4 is exact while the address stays inside the 256 KB shared window. One integer add
// per wgmma instead of re-encoding the address (the k-step offsets are compile-time constants).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
    return desc + static_cast<uint64_t>(bytes >> 4);
}

// ---- named barriers and register reallocation ------------------------------------------------------
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int N>
__device__ __forceinline__ void regs_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace attn::hopper
