// Writing one consumer warpgroup's 64 rows: O = acc / l in the input dtype and LSE (SEMANTICS.md §8:
// rows that saw no key get O = 0, LSE = -inf). O goes through this warpgroup's rows of the Q tile in
// shared memory (its last S = Q K^T has completed, and no other warpgroup reads those rows) in the same
// 128-byte swizzle, so that the global stores are 16 bytes wide and row-contiguous. Rows past the real
// length are never written, so a caller's buffer around them keeps its contents.
#pragma once
#include "../fa_ptx.cuh"
#include "plan.cuh"
#include "ptx.cuh"

namespace attn::hopper {

template <class C>
__device__ __forceinline__ void store_tile(const AttnFwdParams& p, const WorkTile& w, int lq, int cw,
                                           float (&o)[C::kHeadDimVPad / 2], const float (&inv_l)[2],
                                           const float (&lse)[2], unsigned char* sQ) {
    using Elem = typename C::Elem;
    constexpr int D = C::kHeadDimV;  // O's real columns: the padding of o (config.cuh kHeadDimVPad) stays unstored
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int row0 = w.m_block * C::kBlockM + cw * 64;  // query row of this warpgroup's local row 0
    if (lane % 4 == 0 && p.lse != nullptr) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int i = row0 + 16 * warp + lane / 4 + 8 * h;
            if (i < lq) p.lse[w.b * p.lse_batch_stride + int64_t(w.h) * p.lse_head_stride + i] = lse[h];
        }
    }
    // Thread lane holds row lane / 4 + 8 h, columns 8 j + 2 (lane % 4) + {0, 1} of its warp's 16 rows: per 16 columns
    // (j = 2 ks, 2 ks + 1) four 8 x 8 matrices (h, j) = (0, 2 ks), (1, 2 ks), (0, 2 ks + 1), (1, 2 ks + 1), one
    // stmatrix.x4, lane l addressing row l % 8 of matrix l / 8.
    {
        const int mi = lane / 8, r = cw * 64 + 16 * warp + lane % 8 + 8 * (mi % 2);
        const uint32_t row_addr = smem_addr(sQ) + r * 128;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t m[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int j = 2 * ks + i / 2, h = i % 2;
                m[i] = MmaOp<Elem>::pack(o[4 * j + 2 * h] * inv_l[h], o[4 * j + 2 * h + 1] * inv_l[h]);
            }
            const int col = 8 * (2 * ks + mi / 2), cb = col / 64, ch = (col % 64) / 8;
            stmatrix_x4(row_addr + cb * (C::kBlockM * 128) + ((ch ^ (r % 8)) * 16), m);
        }
    }
    named_sync(C::kBarEpilogue + cw, 128);
    Elem* out = static_cast<Elem*>(p.o) + w.b * p.o_batch_stride + int64_t(w.h) * p.o_head_stride;
#pragma unroll
    for (int c = tid; c < 64 * (D / 8); c += 128) {
        const int rl = c / (D / 8), cg = c % (D / 8), cb = cg / 8, ch = cg % 8;
        const int r = cw * 64 + rl, i = row0 + rl;
        if (i < lq) {
            const uint4 v = *reinterpret_cast<const uint4*>(sQ + cb * (C::kBlockM * 128) + r * 128 + ((ch ^ (r % 8)) * 16));
            *reinterpret_cast<uint4*>(out + int64_t(i) * p.o_row_stride + cg * 8) = v;
        }
    }
}

// A tile whose rows see no key at all (n_tiles = 0): O = 0, LSE = -inf, straight to global memory
// (no Q was loaded for it, so its shared memory may already hold the next tile's Q).
template <class C>
__device__ __forceinline__ void store_empty_tile(const AttnFwdParams& p, const WorkTile& w, int lq, int cw) {
    using Elem = typename C::Elem;
    constexpr int D = C::kHeadDimV;
    const int tid = threadIdx.x % 128;
    const int row0 = w.m_block * C::kBlockM + cw * 64;
    Elem* out = static_cast<Elem*>(p.o) + w.b * p.o_batch_stride + int64_t(w.h) * p.o_head_stride;
    for (int c = tid; c < 64 * (D / 8); c += 128) {
        const int i = row0 + c / (D / 8), cg = c % (D / 8);
        if (i < lq) *reinterpret_cast<uint4*>(out + int64_t(i) * p.o_row_stride + cg * 8) = make_uint4(0, 0, 0, 0);
    }
    if (p.lse != nullptr && tid < 64 && row0 + tid < lq)
        p.lse[w.b * p.lse_batch_stride + int64_t(w.h) * p.lse_head_stride + row0 + tid] = -INFINITY;
}

}  // namespace attn::hopper
