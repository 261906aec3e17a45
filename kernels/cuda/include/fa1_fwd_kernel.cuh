// FlashAttention-1 forward, Algorithm 1 of the FA1 paper, as a readable reference kernel.
//
// Loop order is the paper's: K/V tiles outer (load K_j, V_j to shared memory once), Q tiles
// inner; the running statistics m_i, l_i and the normalised output O_i live in global memory
// and are read, updated and written back at every K/V step:
//     m~ = rowmax(S_ij), P~ = exp(S_ij - m~), l~ = rowsum(P~)
//     m_new = max(m_i, m~), l_new = e^{m_i - m_new} l_i + e^{m~ - m_new} l~
//     O_i  <- diag(l_new)^-1 (diag(l_i) e^{m_i - m_new} O_i + e^{m~ - m_new} P~ V_j)
// O_i is kept in an fp32 scratch (not in the output dtype, which would round it at every step),
// m and l in fp32 scratch; a final pass in the same CTA writes O in the output dtype and
// LSE = m + log(l). Rows with no visible key keep m = -inf, l = 0 and get O = 0, LSE = -inf
// (SEMANTICS.md §8); padded varlen rows (i >= seqlens_q[b]) are not written (attn_params.h).
//
// Parallelism is FA1's: one CTA per (batch, head) - plus, so that a reference run finishes in
// reasonable time, the Q rows of a head may be split into a few contiguous chunks, one CTA each
// (rows are independent; inside a chunk the loop order above is unchanged).
//
// Math is fp32 SIMT: tiles of BR = BC = 32 rows, 8 warps; warp w owns Q rows 4w..4w+3 of the
// Q tile and lane c is key column c of the K tile, so row max / sum are warp reductions.
#pragma once
#include <math.h>

#include "attn_params.h"
#include "dtype.cuh"
#include "mask.cuh"
#include "softmax.cuh"

namespace attn::fa1 {

constexpr int FWD_B = 32;         // BR = BC
constexpr int FWD_THREADS = 256;  // 8 warps x 4 rows

template <int D>
constexpr size_t fwd_smem_bytes() {
    return sizeof(float) * (size_t)FWD_B * ((D + 1) + D + D);  // Ks (padded), Vs, Qs
}

template <typename T, int D>
__global__ void __launch_bounds__(FWD_THREADS) fa1_fwd_kernel(AttnFwdParams p, int rows_per_chunk, float* o_acc,
                                                             float* m_buf, float* l_buf) {
    extern __shared__ float smem[];
    float* Ks = smem;                      // [BC][D + 1]: lane c reads row c, padded against bank conflicts
    float* Vs = Ks + FWD_B * (D + 1);      // [BC][D]
    float* Qs = Vs + FWD_B * D;            // [BR][D]: a warp reads one row (broadcast)

    const int b = blockIdx.z, h = blockIdx.y;
    const int hk = h / (p.heads_q / p.heads_kv);  // GQA (SEMANTICS.md §9)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const SeqMask mask = make_mask(p, b);
    const int row_begin = blockIdx.x * rows_per_chunk;
    const int row_end = min(row_begin + rows_per_chunk, mask.sq);  // padded rows are never touched
    if (row_begin >= row_end) return;

    const T* q = (const T*)p.q + b * p.q_batch_stride + h * p.q_head_stride;
    const T* k = (const T*)p.k + b * p.k_batch_stride + hk * p.k_head_stride;
    const T* v = (const T*)p.v + b * p.v_batch_stride + hk * p.v_head_stride;
    const size_t bh = (size_t)b * p.heads_q + h;
    float* O = o_acc + bh * p.seqlen_q * D;  // [Lq, D] fp32 running output of this head
    float* M = m_buf + bh * p.seqlen_q;
    float* L = l_buf + bh * p.seqlen_q;

    // Algorithm 1, line 2: O = 0, l = 0, m = -inf in HBM.
    for (int i = row_begin + threadIdx.x / 32; i < row_end; i += FWD_THREADS / 32) {
        for (int c = lane; c < D; c += 32) O[(size_t)i * D + c] = 0.f;
        if (lane == 0) { M[i] = -INFINITY; L[i] = 0.f; }
    }

    int klo, khi;
    mask.keys_for_rows(row_begin, row_end, &klo, &khi);
    // Outer loop (line 5): K/V tiles.
    for (int c0 = (klo / FWD_B) * FWD_B; c0 <= khi; c0 += FWD_B) {
        __syncthreads();  // previous step's readers of Ks/Vs are done; init writes visible
        for (int e = threadIdx.x; e < FWD_B * D; e += FWD_THREADS) {
            const int r = e / D, c = e % D, j = c0 + r;
            const bool in = j < mask.sk;
            Ks[r * (D + 1) + c] = in ? DT<T>::to_f(k[j * p.k_row_stride + c]) : 0.f;
            Vs[r * D + c] = in ? DT<T>::to_f(v[j * p.v_row_stride + c]) : 0.f;
        }
        int qlo, qhi;
        mask.rows_for_keys(c0, c0 + FWD_B, &qlo, &qhi);
        qlo = max(qlo, row_begin);
        qhi = min(qhi, row_end - 1);
        // Inner loop (line 7): Q tiles of this chunk that see this K/V tile.
        for (int r0 = row_begin + ((qlo - row_begin) / FWD_B) * FWD_B; r0 <= qhi; r0 += FWD_B) {
            __syncthreads();
            for (int e = threadIdx.x; e < FWD_B * D; e += FWD_THREADS) {
                const int r = e / D, c = e % D, i = r0 + r;
                Qs[r * D + c] = i < row_end ? DT<T>::to_f(q[i * p.q_row_stride + c]) : 0.f;
            }
            __syncthreads();
            for (int rr = 0; rr < FWD_B / 8; ++rr) {
                const int r = warp * (FWD_B / 8) + rr, i = r0 + r, j = c0 + lane;
                if (i >= row_end) break;  // warp-uniform
                // S_ij = scale * Q_i K_j^T, softcap, mask (lane = key column).
                float s = 0.f;
                const float* qr = Qs + r * D;
                const float* kr = Ks + lane * (D + 1);
#pragma unroll 8
                for (int c = 0; c < D; ++c) s += qr[c] * kr[c];
                float dcap;
                s = apply_softcap(s * p.scale, p.softcap, &dcap);
                if (!mask.visible(i, j)) s = -INFINITY;
                const float mt = warp_max(s);           // m~
                if (mt == -INFINITY) continue;          // no visible key in this tile: state unchanged
                const float pij = __expf(s - mt);       // P~ (masked -> exp(-inf) = 0)
                const float lt = warp_sum(pij);         // l~
                const float m_old = M[i], l_old = L[i];  // read the statistics back from HBM
                const float m_new = fmaxf(m_old, mt);
                const float alpha = m_old == -INFINITY ? 0.f : __expf(m_old - m_new);
                const float beta = __expf(mt - m_new);
                const float l_new = alpha * l_old + beta * lt;
                // O_i <- (l_i alpha O_i + beta P~ V_j) / l_new; lane handles columns lane + 32 t.
                float pv[D / 32];
#pragma unroll
                for (int t = 0; t < D / 32; ++t) pv[t] = 0.f;
                for (int c = 0; c < FWD_B; ++c) {
                    const float pc = __shfl_sync(0xffffffffu, pij, c);
#pragma unroll
                    for (int t = 0; t < D / 32; ++t) pv[t] += pc * Vs[c * D + lane + 32 * t];
                }
                float* orow = O + (size_t)i * D;
                const float a = alpha * l_old / l_new, bb = beta / l_new;
#pragma unroll
                for (int t = 0; t < D / 32; ++t) orow[lane + 32 * t] = a * orow[lane + 32 * t] + bb * pv[t];
                __syncwarp();
                if (lane == 0) { M[i] = m_new; L[i] = l_new; }
            }
        }
    }
    __syncthreads();
    // Epilogue: O in the output dtype, LSE = m + log(l); no visible key -> O = 0, LSE = -inf.
    T* o = (T*)p.o + b * p.o_batch_stride + h * p.o_head_stride;
    for (int i = row_begin + warp; i < row_end; i += FWD_THREADS / 32) {
        const float l = L[i];
        for (int c = lane; c < D; c += 32)
            o[i * p.o_row_stride + c] = DT<T>::from_f(l > 0.f ? O[(size_t)i * D + c] : 0.f);
        if (lane == 0 && p.lse) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i] = l > 0.f ? M[i] + logf(l) : -INFINITY;
    }
}

}  // namespace attn::fa1
