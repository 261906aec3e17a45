// Tensor-core building blocks for the FA2 backward: cp.async tile loads and one warp's share of a
// shared-memory GEMM with mma.sync.m16n8k16 (fp16/bf16 in, fp32 accumulate), on the PTX wrappers of
// fa_ptx.cuh (cp_async_16, ldmatrix_x4[_trans], MmaOp).
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A 16x16: a0 (row g, k 2t..2t+1), a1 (row g+8, k 2t..), a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..)
//   B 16x8:  b0 (k 2t..2t+1, col g), b1 (k 2t+8.., col g)
//   C 16x8:  c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, cols 2t, 2t+1)
// ldmatrix.x4 loads four 8x8 b16 matrices; lanes 8q..8q+7 give the row addresses of matrix q and
// every lane receives (row lane/4, cols 2(lane%4), +1) of each (.trans: the transpose). The
// address formulas in warp_gemm pick the matrices so that the four registers come out in
// fragment order, for operands stored either as [m][k] / [n][k] (no transpose) or [k][m] / [k][n]
// (.trans).
#pragma once
#include <stdint.h>

#include "fa_ptx.cuh"

namespace attn::bwd {

// Copy rows [row0, row0 + ROWS) x [0, D) of a row-strided global matrix into shared memory with
// row pitch ld; rows at or past `valid` are zero-filled (tails, varlen padding).
template <typename T, int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile_async(T* s, int ld, const T* g, int64_t row_stride, int row0, int valid) {
    constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
    constexpr int ITERS = (ROWS * CHUNKS + THREADS - 1) / THREADS;  // compile-time count: fully unrolled
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const int e = threadIdx.x + it * THREADS;
        if ((ROWS * CHUNKS) % THREADS != 0 && e >= ROWS * CHUNKS) break;
        const int r = e / CHUNKS, c = (e % CHUNKS) * 8;
        const bool in = row0 + r < valid;
        cp_async_16(s + r * ld + c, in ? (const void*)(g + (int64_t)(row0 + r) * row_stride + c) : (const void*)g, in);
    }
}

// The A fragment of m-tile rows [m, m + 16) and the B fragments of n-tiles [n, n + 16) (b0, b1 of the
// first n-tile, then of the second) at k-step offset kk; operand layouts as in load_frags.
template <typename T, bool A_T>
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], const T* sA, int lda, int m, int kk, int lane) {
    if (!A_T) {
        ldmatrix_x4(a, sA + (m + (lane % 16)) * lda + kk + (lane / 16) * 8);
    } else {
        ldmatrix_x4_trans(a, sA + (kk + (lane % 8) + (lane / 16) * 8) * lda + m + ((lane / 8) % 2) * 8);
    }
}
template <typename T, bool B_T>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[4], const T* sB, int ldb, int n, int kk, int lane) {
    if (!B_T) {
        ldmatrix_x4(b, sB + (n + (lane % 8) + (lane / 16) * 8) * ldb + kk + ((lane / 8) % 2) * 8);
    } else {
        ldmatrix_x4_trans(b, sB + (kk + (lane % 8) + ((lane / 8) % 2) * 8) * ldb + n + (lane / 16) * 8);
    }
}

// One k-step (16) of a warp's fragments: A for MT m-tiles, B for NT n-tiles (two per ldmatrix.x4).
//   A_T = false: A stored [m][k] with pitch lda;  A_T = true: A stored [k][m] (ldmatrix.trans).
//   B_T = false: B stored [n][k] with pitch ldb;  B_T = true: B stored [k][n] (ldmatrix.trans).
template <typename T, int MT, int NT, bool A_T, bool B_T>
__device__ __forceinline__ void load_frags(uint32_t (&a)[MT][4], uint32_t (&b)[NT / 2][4], const T* sA, int lda,
                                           const T* sB, int ldb, int m0, int n0, int kk, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) load_a_frag<T, A_T>(a[mt], sA, lda, m0 + 16 * mt, kk, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) load_b_pair<T, B_T>(b[np], sB, ldb, n0 + 16 * np, kk, lane);
}

template <typename T, int MT, int NT>
__device__ __forceinline__ void mma_frags(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][4],
                                          const uint32_t (&b)[NT / 2][4]) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            MmaOp<T>::run(acc[mt][2 * np], a[mt], b[np][0], b[np][1]);
            MmaOp<T>::run(acc[mt][2 * np + 1], a[mt], b[np][2], b[np][3]);
        }
}

// The order of a warp GEMM's fragment loads: each k-step's ldmatrix right before its mma, or software-pipelined
// (warp_gemm below).
enum class FragmentLoads { kInOrder, kPipelined };

// acc[MT][NT] += A[m0 .. m0 + 16 MT) x B[.., n0 .. n0 + 8 NT) over k in [0, K), one warp (operand
// layouts as in load_frags). FragmentLoads::kPipelined software-pipelines the fragment loads: the ldmatrix of
// k-step ks + 1 are issued before the mma of k-step ks (two fragment buffers, 4 (MT + NT / 2) more
// registers). On the H200 it measured within 2 % of the plain order (ptxas interleaves LDSM and
// HMMA either way; docs/fa1_fa2.md).
template <typename T, int MT, int NT, int K, bool A_T, bool B_T, FragmentLoads kLoads = FragmentLoads::kInOrder>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const T* sA, int lda, const T* sB, int ldb,
                                          int m0, int n0) {
    static_assert(NT % 2 == 0, "B fragments are loaded two n-tiles at a time");
    const int lane = threadIdx.x % 32;
    if constexpr (kLoads == FragmentLoads::kPipelined) {
        uint32_t a[2][MT][4], b[2][NT / 2][4];
        load_frags<T, MT, NT, A_T, B_T>(a[0], b[0], sA, lda, sB, ldb, m0, n0, 0, lane);
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks) {
            if (ks + 1 < K / 16)
                load_frags<T, MT, NT, A_T, B_T>(a[(ks + 1) % 2], b[(ks + 1) % 2], sA, lda, sB, ldb, m0, n0,
                                                16 * (ks + 1), lane);
            mma_frags<T, MT, NT>(acc, a[ks % 2], b[ks % 2]);
        }
    } else {  // A fragments of the k-step, then each B pair just before its mma (fewest registers)
#pragma unroll
        for (int kk = 0; kk < K; kk += 16) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) load_a_frag<T, A_T>(a[mt], sA, lda, m0 + 16 * mt, kk, lane);
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
                uint32_t bf[4];
                load_b_pair<T, B_T>(bf, sB, ldb, n0 + 8 * nt, kk, lane);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    MmaOp<T>::run(acc[mt][nt], a[mt], bf[0], bf[1]);
                    MmaOp<T>::run(acc[mt][nt + 1], a[mt], bf[2], bf[3]);
                }
            }
        }
    }
}

template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

}  // namespace attn::bwd
