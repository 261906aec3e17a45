// FlashAttention-1 backward (FA1 paper, Algorithm 4, with P recomputed from the stored
// LSE = m + log l instead of m and l separately), as a readable fp32 SIMT reference kernel.
// It is also the fallback main loop of the FA2 backward when a tensor is not 16-byte aligned.
//
// One CTA per (K/V tile j, head, batch), K/V tiles outer as in the paper; it loops over the Q
// tiles i that see tile j (causal / window / varlen ranges) and per tile computes
//     S = scale * Q_i K_j^T, softcap, mask;  P = exp(S - LSE_i)   (LSE = -inf row -> P = 0)
//     dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P * (dP - D_i) * (1 - tanh^2 if softcap)
//     dK_j += dS^T Q_i;  dQ_i += dS K_j   (fp32 atomicAdd into dq_accum: K/V tiles run in parallel)
// with D_i = rowsum(dO_i * O_i) from bwd_preprocess. The scale of dK is applied at the end, the
// scale of dQ in bwd_convert_dq. dK/dV go straight to dk/dv (MHA) or, for GQA, to the per-query-
// head fp32 scratch dk_accum/dv_accum that bwd_reduce_gqa sums over the group.
//
// Tiles of BR = BC = 32 rows, 8 warps. Shared memory rows are padded by one float so that the
// lane-strided reads (lane = row) hit distinct banks.
#pragma once
#include <math.h>

#include "attn_params.h"
#include "dtype.cuh"
#include "mask.cuh"
#include "softmax.cuh"

namespace attn::fa1 {

constexpr int BWD_B = 32;
constexpr int BWD_THREADS = 256;

template <int D>
constexpr size_t bwd_smem_bytes() {
    return sizeof(float) * ((size_t)4 * BWD_B * (D + 1) + 2 * BWD_B * (BWD_B + 1) + 2 * BWD_B);
}

template <typename T, int D>
__global__ void __launch_bounds__(BWD_THREADS) fa1_bwd_kernel(AttnBwdParams pb) {
    const AttnFwdParams& p = pb.fwd;
    extern __shared__ float smem[];
    constexpr int LD = D + 1, PL = BWD_B + 1;
    float* Ks = smem;                 // [BC][LD]
    float* Vs = Ks + BWD_B * LD;      // [BC][LD]
    float* Qs = Vs + BWD_B * LD;      // [BR][LD]
    float* dOs = Qs + BWD_B * LD;     // [BR][LD]
    float* Ps = dOs + BWD_B * LD;     // [BC][PL]  P^T
    float* dSs = Ps + BWD_B * PL;     // [BC][PL]  dS^T
    float* lse_s = dSs + BWD_B * PL;  // [BR]
    float* D_s = lse_s + BWD_B;       // [BR]

    const int b = blockIdx.z, h = blockIdx.y, c0 = blockIdx.x * BWD_B;
    const int G = p.heads_q / p.heads_kv, hk = h / G;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const SeqMask mask = make_mask(p, b);

    const T* q = (const T*)p.q + b * p.q_batch_stride + h * p.q_head_stride;
    const T* k = (const T*)p.k + b * p.k_batch_stride + hk * p.k_head_stride;
    const T* v = (const T*)p.v + b * p.v_batch_stride + hk * p.v_head_stride;
    const T* dO = (const T*)pb.dout + b * pb.do_batch_stride + h * pb.do_head_stride;
    const float* lse = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride;
    const size_t bh = (size_t)b * p.heads_q + h;
    const float* Drow = pb.d_rowsum + bh * p.seqlen_q;
    float* dqa = pb.dq_accum + bh * p.seqlen_q * D;

    for (int e = threadIdx.x; e < BWD_B * D; e += BWD_THREADS) {
        const int r = e / D, c = e % D, j = c0 + r;
        const bool in = j < mask.sk;
        Ks[r * LD + c] = in ? DT<T>::to_f(k[j * p.k_row_stride + c]) : 0.f;
        Vs[r * LD + c] = in ? DT<T>::to_f(v[j * p.v_row_stride + c]) : 0.f;
    }

    float dK[4][D / 32], dV[4][D / 32];  // rows 4*warp + rr, columns lane + 32 t
#pragma unroll
    for (int rr = 0; rr < 4; ++rr)
#pragma unroll
        for (int t = 0; t < D / 32; ++t) dK[rr][t] = dV[rr][t] = 0.f;

    int qlo, qhi;
    mask.rows_for_keys(c0, c0 + BWD_B, &qlo, &qhi);
    for (int r0 = (qlo / BWD_B) * BWD_B; r0 <= qhi; r0 += BWD_B) {
        __syncthreads();  // previous tile's readers are done
        for (int e = threadIdx.x; e < BWD_B * D; e += BWD_THREADS) {
            const int r = e / D, c = e % D, i = r0 + r;
            const bool in = i < mask.sq;
            Qs[r * LD + c] = in ? DT<T>::to_f(q[i * p.q_row_stride + c]) : 0.f;
            dOs[r * LD + c] = in ? DT<T>::to_f(dO[i * pb.do_row_stride + c]) : 0.f;
        }
        if (threadIdx.x < BWD_B) {
            const int i = r0 + threadIdx.x;
            const float l = i < mask.sq ? lse[i] : -INFINITY;
            lse_s[threadIdx.x] = l == -INFINITY ? INFINITY : l;  // exp(s - inf) = 0: no NaN from -inf - -inf
            D_s[threadIdx.x] = i < mask.sq ? Drow[i] : 0.f;
        }
        __syncthreads();
        // S^T, dP^T: warp = 4 key rows, lane = query row.
#pragma unroll
        for (int rr = 0; rr < 4; ++rr) {
            const int c = warp * 4 + rr, r = lane;
            float s = 0.f, dp = 0.f;
            const float* kr = Ks + c * LD;
            const float* vr = Vs + c * LD;
            const float* qr = Qs + r * LD;
            const float* dor = dOs + r * LD;
#pragma unroll 8
            for (int x = 0; x < D; ++x) {
                s += kr[x] * qr[x];
                dp += vr[x] * dor[x];
            }
            float dcap;
            s = apply_softcap(s * p.scale, p.softcap, &dcap);
            const float pij = mask.visible(r0 + r, c0 + c) ? __expf(s - lse_s[r]) : 0.f;
            Ps[c * PL + r] = pij;
            dSs[c * PL + r] = pij * (dp - D_s[r]) * dcap;
        }
        __syncthreads();
        // dV += P^T dO, dK += dS^T Q: warp = 4 key rows, lane = columns.
#pragma unroll
        for (int rr = 0; rr < 4; ++rr) {
            const int c = warp * 4 + rr;
            for (int r = 0; r < BWD_B; ++r) {
                const float pr = Ps[c * PL + r], dsr = dSs[c * PL + r];
#pragma unroll
                for (int t = 0; t < D / 32; ++t) {
                    dV[rr][t] += pr * dOs[r * LD + lane + 32 * t];
                    dK[rr][t] += dsr * Qs[r * LD + lane + 32 * t];
                }
            }
        }
        // dQ_i += dS K_j: warp = 4 query rows, lane = columns; fp32 atomics (unscaled).
#pragma unroll
        for (int rr = 0; rr < 4; ++rr) {
            const int r = warp * 4 + rr, i = r0 + r;
            if (i >= mask.sq) continue;
            float acc[D / 32];
#pragma unroll
            for (int t = 0; t < D / 32; ++t) acc[t] = 0.f;
            for (int c = 0; c < BWD_B; ++c) {
                const float ds = dSs[c * PL + r];
#pragma unroll
                for (int t = 0; t < D / 32; ++t) acc[t] += ds * Ks[c * LD + lane + 32 * t];
            }
#pragma unroll
            for (int t = 0; t < D / 32; ++t) atomicAdd(dqa + (size_t)i * D + lane + 32 * t, acc[t]);
        }
    }
    // Write dK (scaled) and dV; keys past the real length get zero gradient (SEMANTICS.md §7).
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
        const int j = c0 + warp * 4 + rr;
        if (j >= p.seqlen_k) continue;
#pragma unroll
        for (int t = 0; t < D / 32; ++t) {
            const int c = lane + 32 * t;
            if (G == 1) {
                ((T*)pb.dk)[b * pb.dk_batch_stride + h * pb.dk_head_stride + j * pb.dk_row_stride + c] =
                    DT<T>::from_f(dK[rr][t] * p.scale);
                ((T*)pb.dv)[b * pb.dv_batch_stride + h * pb.dv_head_stride + j * pb.dv_row_stride + c] =
                    DT<T>::from_f(dV[rr][t]);
            } else {
                const size_t off = (bh * p.seqlen_k + j) * D + c;
                pb.dk_accum[off] = dK[rr][t] * p.scale;
                pb.dv_accum[off] = dV[rr][t];
            }
        }
    }
}

}  // namespace attn::fa1
