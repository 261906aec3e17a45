// Score pipeline and softmax pieces of every sm_80 kernel: the softcap of SEMANTICS.md §3, warp-wide
// max / sum (FA1's one-row-per-warp reductions and the backward's D = rowsum(dO * O)), and the FA2
// forward's online softmax (statistics in registers, normalisation deferred). FA3 has its own
// warpgroup softmax (hopper/softmax.cuh) on the same fast_exp2.
//
// Online softmax over one warp's rows (OnlineSoftmax below):
//
// Each thread holds, per m16 tile, two rows of the S tile (rows g and g+8, g = lane / 4) and two
// columns per n8 tile; the other three threads of its quad hold the remaining columns, so row
// reductions are two xor-shuffles. Scores arrive in "log2 units times 1/sl2": p = 2^(s*sl2 - m*sl2)
// with sl2 = scale * log2(e), one FFMA and one ex2 per score. O is rescaled by 2^(m_old - m_new)
// when the maximum grows and divided by l only once, in finalize().
#pragma once
#include <math.h>

#include "fa_ptx.cuh"

namespace attn {

// Score pipeline (SEMANTICS.md §3): s = scale * q.k, then softcap s = c * tanh(s / c).
// Returns the capped score and, through *dcap, d(capped)/d(uncapped) = 1 - tanh^2 (1 when off),
// which the backward multiplies into dS.
__device__ __forceinline__ float apply_softcap(float s, float softcap, float* dcap) {
    if (softcap > 0.f) {
        const float t = tanhf(s / softcap);
        *dcap = 1.f - t * t;
        return softcap * t;
    }
    *dcap = 1.f;
    return s;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

template <int kMTiles, int kNTilesS>
struct OnlineSoftmax {
    float row_max[kMTiles][2];  // running maximum of s (same units as the scores)
    float row_sum[kMTiles][2];  // this thread's partial sum of p; quad-reduced in finalize()

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) row_max[mi][h] = -INFINITY, row_sum[mi][h] = 0.f;
    }

    // Attention sink (SEMANTICS.md §18), one term of the state: the running max starts at the sink logit
    // (in score units, sink_units = sink * log2(e) / sl2) and the sum at exp(sink - max) = 1, held by one
    // thread of the quad (finalize() quad-reduces the sum). A row that never sees a key keeps
    // (max, sum) = (sink, 1): O = 0, LSE = sink; a large sink is an ordinary large max (no overflow).
    // sink_units = -inf is "no sink": exactly the init() state.
    __device__ __forceinline__ void init_sink(float sink_units, bool quad_leader) {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                row_max[mi][h] = sink_units;
                row_sum[mi][h] = (quad_leader && sink_units != -INFINITY) ? 1.f : 0.f;
            }
    }

    // s <- p = exp2(s*sl2 - m_new*sl2) in place; acc_o and row_sum rescaled by exp2((m_old - m_new)*sl2).
    template <int kNTilesO>
    __device__ __forceinline__ void update(float (&s)[kMTiles][kNTilesS][4], float (&acc_o)[kMTiles][kNTilesO][4],
                                           float sl2) {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = row_max[mi][h];
#pragma unroll
                for (int nt = 0; nt < kNTilesS; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * h], s[mi][nt][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // A row with no visible key so far keeps max = -inf; subtracting 0 instead keeps
                // exp2(-inf - (-inf)) = NaN out and gives p = 0 for its masked scores.
                const float m_scaled = (mx == -INFINITY) ? 0.f : mx * sl2;
                const float corr = fast_exp2(row_max[mi][h] * sl2 - m_scaled);
                row_max[mi][h] = mx;
                row_sum[mi][h] *= corr;
#pragma unroll
                for (int nt = 0; nt < kNTilesO; ++nt) acc_o[mi][nt][2 * h] *= corr, acc_o[mi][nt][2 * h + 1] *= corr;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < kNTilesS; ++nt) {
                    const float p0 = fast_exp2(fmaf(s[mi][nt][2 * h], sl2, -m_scaled));
                    const float p1 = fast_exp2(fmaf(s[mi][nt][2 * h + 1], sl2, -m_scaled));
                    s[mi][nt][2 * h] = p0;
                    s[mi][nt][2 * h + 1] = p1;
                    sum += p0 + p1;
                }
                row_sum[mi][h] += sum;
            }
        }
    }

    // Quad-reduce l; return 1/l (0 for a row with no visible key: O = 0) and the natural-log LSE
    // (-inf for such a row), lse = m*scale + log(l), computed with the accurate logf.
    __device__ __forceinline__ void finalize(float sl2, float (&inv_l)[kMTiles][2], float (&lse)[kMTiles][2]) {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float l = row_sum[mi][h];
                l += __shfl_xor_sync(0xffffffffu, l, 1);
                l += __shfl_xor_sync(0xffffffffu, l, 2);
                const bool empty = (l == 0.f) || (row_max[mi][h] == -INFINITY);
                inv_l[mi][h] = empty ? 0.f : 1.f / l;
                lse[mi][h] = empty ? -INFINITY : row_max[mi][h] * sl2 * kLn2 + logf(l);
            }
    }

    // finalize() after init_sink(): while the max is still the sink's (no score exceeded it) the LSE is
    // taken from the sink's natural-log value, sink + log(l), so a row with no visible key gets exactly
    // LSE = sink (l = 1) rather than sink rounded through score units.
    __device__ __forceinline__ void finalize_sink(float sl2, float sink, float sink_units, float (&inv_l)[kMTiles][2],
                                                  float (&lse)[kMTiles][2]) {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float l = row_sum[mi][h];
                l += __shfl_xor_sync(0xffffffffu, l, 1);
                l += __shfl_xor_sync(0xffffffffu, l, 2);
                const bool empty = (l == 0.f) || (row_max[mi][h] == -INFINITY);
                const float base = row_max[mi][h] == sink_units ? sink : row_max[mi][h] * sl2 * kLn2;
                inv_l[mi][h] = empty ? 0.f : 1.f / l;
                lse[mi][h] = empty ? -INFINITY : base + logf(l);
            }
    }
};

}  // namespace attn
