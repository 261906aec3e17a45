// The two tensor-core GEMMs of the forward mainloop, per warp, on shared-memory tiles.
//
// S = Q K^T: A = Q rows of this warp (ldmatrix x4 from the swizzled Q tile, reloaded each k-step so
// Q does not occupy 64+ registers for the whole loop), B = K rows (ldmatrix x4 non-transposed: a K
// row is an MMA column, contiguous in k). O += P V: A = P straight from the S accumulators (the
// m16n8 C layout of two adjacent n8 tiles is exactly the m16k16 A layout, so P never touches shared
// memory), B = V (ldmatrix x4 .trans: V's contiguous axis is the head dim, the MMA's n).
#pragma once
#include "fa_ptx.cuh"

namespace attn {

template <class Tr>
__device__ __forceinline__ void gemm_qk(float (&acc_s)[Tr::kMTiles][Tr::kNTilesS][4], const typename Tr::Elem* sQ,
                                        const typename Tr::Elem* sK, int warp_row0, int lane) {
    using Mma = MmaOp<typename Tr::Elem>;
#pragma unroll
    for (int mi = 0; mi < Tr::kMTiles; ++mi)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_s[mi][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Tr::kKStepsQK; ++ks) {
        uint32_t a[Tr::kMTiles][4];
#pragma unroll
        for (int mi = 0; mi < Tr::kMTiles; ++mi)
            ldmatrix_x4(a[mi], sQ + Tr::swz(warp_row0 + mi * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int np = 0; np < Tr::kNTilesS / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, sK + Tr::swz(np * 16 + (lane & 7) + (lane >> 4) * 8, ks * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
            for (int mi = 0; mi < Tr::kMTiles; ++mi) {
                Mma::run(acc_s[mi][2 * np], a[mi], b[0], b[1]);
                Mma::run(acc_s[mi][2 * np + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

template <class Tr>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[Tr::kMTiles][Tr::kNTilesO][4],
                                        const float (&p)[Tr::kMTiles][Tr::kNTilesS][4], const typename Tr::Elem* sV,
                                        int lane) {
    using Mma = MmaOp<typename Tr::Elem>;
#pragma unroll
    for (int ks = 0; ks < Tr::kKStepsPV; ++ks) {
        uint32_t a[Tr::kMTiles][4];
#pragma unroll
        for (int mi = 0; mi < Tr::kMTiles; ++mi) {
            a[mi][0] = Mma::pack(p[mi][2 * ks][0], p[mi][2 * ks][1]);
            a[mi][1] = Mma::pack(p[mi][2 * ks][2], p[mi][2 * ks][3]);
            a[mi][2] = Mma::pack(p[mi][2 * ks + 1][0], p[mi][2 * ks + 1][1]);
            a[mi][3] = Mma::pack(p[mi][2 * ks + 1][2], p[mi][2 * ks + 1][3]);
        }
#pragma unroll
        for (int np = 0; np < Tr::kNTilesO / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, sV + Tr::swz(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, np * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int mi = 0; mi < Tr::kMTiles; ++mi) {
                Mma::run(acc_o[mi][2 * np], a[mi], b[0], b[1]);
                Mma::run(acc_o[mi][2 * np + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

}  // namespace attn
