// Shared device helpers for the FA1 kernels (fa1.cu) and the FA2 backward (fa2_bwd.cu):
// dtype conversion, the visibility rule of oracles/SEMANTICS.md §4/§5/§7, and the tile ranges
// derived from it. Everything lives in namespace attn_bwd and is inline or a template, so the
// header can be included by several .cu files of one shared library without duplicate symbols.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "attn_params.h"

namespace attn_bwd {

// ---------------------------------------------------------------------------------------------
// dtype: the kernels are templates over the storage type T (__half or __nv_bfloat16); all math
// is fp32. T2 is the packed pair used for 4-byte stores and for mma operands.
template <typename T> struct DT;
template <> struct DT<__half> {
    using T2 = __half2;
    static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ __half2 pack(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct DT<__nv_bfloat16> {
    using T2 = __nv_bfloat162;
    static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ __nv_bfloat162 pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

// ---------------------------------------------------------------------------------------------
// Visibility for one (batch) sequence, SEMANTICS.md §4 (causal alignment), §5 (window), §7
// (varlen). With real lengths sq, sk and aligned diagonal c(i) = i + off (off = sk - sq for
// bottom-right, 0 for top-left), key j is visible to query i iff
//     i < sq, j < sk, j <= c(i) + right (if right >= 0), j >= c(i) - left (if left >= 0).
// Causal folds into right = 0 (causal with window (l, r) == window (l, 0), §5).
// 64-bit arithmetic: off - left can leave the int32 range for huge windows.
struct SeqMask {
    int sq, sk;           // real lengths of this sequence
    long long off;        // c(i) - i
    long long left, right;  // -1 = unbounded

    __device__ __forceinline__ bool visible(int i, int j) const {
        if (i >= sq || j >= sk) return false;
        const long long c = (long long)i + off;
        if (right >= 0 && (long long)j > c + right) return false;
        if (left >= 0 && (long long)j < c - left) return false;
        return true;
    }

    // Query rows that see at least one key of [c0, c1) (c1 exclusive): [*lo, *hi] inclusive,
    // empty when *lo > *hi. c(i) + right >= c0 and c(i) - left <= c1 - 1, both monotone in i.
    __device__ __forceinline__ void rows_for_keys(int c0, int c1, int* lo, int* hi) const {
        c1 = min(c1, sk);
        long long l = 0, h = (long long)sq - 1;
        if (c0 >= c1) { *lo = 1; *hi = 0; return; }
        if (right >= 0) l = max(l, (long long)c0 - off - right);
        if (left >= 0) h = min(h, (long long)c1 - 1 - off + left);
        if (l > h) { *lo = 1; *hi = 0; return; }
        *lo = (int)l; *hi = (int)h;
    }

    // Whether every (i, j) in [r0, r1) x [c0, c1) is visible: such tiles skip per-element masking.
    __device__ __forceinline__ bool tile_full(int r0, int r1, int c0, int c1) const {
        if (r1 > sq || c1 > sk) return false;
        if (right >= 0 && (long long)c1 - 1 > (long long)r0 + off + right) return false;
        if (left >= 0 && (long long)c0 < (long long)r1 - 1 + off - left) return false;
        return true;
    }

    // Keys seen by at least one query of [r0, r1): [*lo, *hi] inclusive, empty when *lo > *hi.
    __device__ __forceinline__ void keys_for_rows(int r0, int r1, int* lo, int* hi) const {
        r1 = min(r1, sq);
        long long l = 0, h = (long long)sk - 1;
        if (r0 >= r1) { *lo = 1; *hi = 0; return; }
        if (left >= 0) l = max(l, (long long)r0 + off - left);
        if (right >= 0) h = min(h, (long long)r1 - 1 + off + right);
        if (l > h) { *lo = 1; *hi = 0; return; }
        *lo = (int)l; *hi = (int)h;
    }
};

__device__ __forceinline__ SeqMask make_mask(const AttnFwdParams& p, int b) {
    SeqMask m;
    m.sq = p.seqlens_q ? min(p.seqlens_q[b], p.seqlen_q) : p.seqlen_q;
    m.sk = p.seqlens_k ? min(p.seqlens_k[b], p.seqlen_k) : p.seqlen_k;
    m.off = p.align_bottom_right ? (long long)m.sk - m.sq : 0;
    m.left = p.window_left;
    m.right = p.causal ? 0 : p.window_right;
    return m;
}

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

}  // namespace attn_bwd
