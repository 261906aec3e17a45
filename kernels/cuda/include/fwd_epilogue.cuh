// Writing the forward results: O = acc_o / l in the input dtype plus LSE (FA2 mode), or the
// split's fp32 partial O_s = acc_o / l_s plus LSE_s (split-KV mode, combined later).
//
// FA2 mode stages the warp's rows through its own rows of the Q tile in shared memory (no other
// warp reads them) so the global stores are 16-byte and row-contiguous; rows past the real length
// are never written, so a caller's buffer around them keeps its contents (guard bands stay intact).
#pragma once
#include "fa_ptx.cuh"
#include "tile_scheduler.cuh"

namespace attn {

template <class Tr, FwdMode kMode>
__device__ __forceinline__ void store_output(const AttnFwdParams& p, const WorkTile& w, int lq,
                                             float (&acc_o)[Tr::kMTiles][Tr::kNTilesO][4],
                                             const float (&inv_l)[Tr::kMTiles][2], const float (&lse)[Tr::kMTiles][2],
                                             typename Tr::Elem* sQ, int warp_row0, int lane) {
    using Elem = typename Tr::Elem;
    using Mma = MmaOp<Elem>;
    using Sched = TileScheduler<kMode>;
    constexpr bool kSplit = kMode == FwdMode::kSplitKv;
    const int g = lane >> 2, t = lane & 3;

    // LSE: one thread per quad writes the two rows it holds.
    if (t == 0) {
#pragma unroll
        for (int mi = 0; mi < Tr::kMTiles; ++mi)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                int h, i;
                if (!Sched::template row<Tr::kBlockM>(p, w, lq, warp_row0 + mi * 16 + g + hh * 8, h, i)) continue;
                if constexpr (kSplit) {
                    const int64_t idx = ((int64_t(w.split) * p.batch + w.b) * p.heads_q + h) * p.seqlen_q + i;
                    p.lse_partial[idx] = lse[mi][hh];
                } else if (p.lse != nullptr) {
                    p.lse[w.b * p.lse_batch_stride + h * p.lse_head_stride + i] = lse[mi][hh];
                }
            }
    }

    if constexpr (kSplit) {
        // fp32 partials straight from registers (8-byte stores; decoding writes few rows).
#pragma unroll
        for (int mi = 0; mi < Tr::kMTiles; ++mi)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                int h, i;
                if (!Sched::template row<Tr::kBlockM>(p, w, lq, warp_row0 + mi * 16 + g + hh * 8, h, i)) continue;
                const int64_t row = ((int64_t(w.split) * p.batch + w.b) * p.heads_q + h) * p.seqlen_q + i;
                float* dst = p.o_partial + row * Tr::kHeadDim;
#pragma unroll
                for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
                    float2 v = make_float2(acc_o[mi][nt][2 * hh] * inv_l[mi][hh], acc_o[mi][nt][2 * hh + 1] * inv_l[mi][hh]);
                    *reinterpret_cast<float2*>(dst + nt * 8 + 2 * t) = v;
                }
            }
    } else {
#pragma unroll
        for (int mi = 0; mi < Tr::kMTiles; ++mi)
#pragma unroll
            for (int nt = 0; nt < Tr::kNTilesO; ++nt)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int r = warp_row0 + mi * 16 + g + hh * 8;
                    *reinterpret_cast<uint32_t*>(sQ + Tr::swz(r, nt * 8 + 2 * t)) =
                        Mma::pack(acc_o[mi][nt][2 * hh] * inv_l[mi][hh], acc_o[mi][nt][2 * hh + 1] * inv_l[mi][hh]);
                }
        __syncwarp();
        Elem* o = static_cast<Elem*>(p.o);
#pragma unroll
        for (int c = lane; c < Tr::kWarpRows * Tr::kChunksPerRow; c += 32) {
            const int r = warp_row0 + c / Tr::kChunksPerRow, col = (c % Tr::kChunksPerRow) * 8;
            int h, i;
            if (!Sched::template row<Tr::kBlockM>(p, w, lq, r, h, i)) continue;
            Elem* dst = o + w.b * p.o_batch_stride + h * p.o_head_stride + i * p.o_row_stride + col;
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(sQ + Tr::swz(r, col));
        }
    }
}

}  // namespace attn
