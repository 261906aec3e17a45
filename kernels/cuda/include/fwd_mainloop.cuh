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
    // Lane bases (Tr::lane_base): Q rows warp_row0 + (lane & 15), chunk bit lane >> 4; K rows
    // (lane & 7) + 8 (lane >> 4), chunk bit (lane >> 3) & 1.
    const uint32_t q_base = Tr::lane_base(sQ, warp_row0 + (lane & 15), lane >> 4);
    const uint32_t k_base = Tr::lane_base(sK, (lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
#pragma unroll
    for (int ks = 0; ks < Tr::kKStepsQK; ++ks) {
        uint32_t a[Tr::kMTiles][4];
#pragma unroll
        for (int mi = 0; mi < Tr::kMTiles; ++mi) ldmatrix_x4_a(a[mi], Tr::step_addr(q_base, 2 * ks, mi * 16));
#pragma unroll
        for (int np = 0; np < Tr::kNTilesS / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4_a(b, Tr::step_addr(k_base, 2 * ks, np * 16));
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
    // V rows (lane & 7) + 8 ((lane >> 3) & 1), chunk bit lane >> 4 (see Tr::lane_base).
    const uint32_t v_base = Tr::lane_base(sV, (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
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
            ldmatrix_x4_trans_a(b, Tr::step_addr(v_base, 2 * np, ks * 16));
#pragma unroll
            for (int mi = 0; mi < Tr::kMTiles; ++mi) {
                Mma::run(acc_o[mi][2 * np], a[mi], b[0], b[1]);
                Mma::run(acc_o[mi][2 * np + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

}  // namespace attn
