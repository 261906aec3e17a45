// The small kernels around every backward main loop (FA2 Algorithm 2, lines 4 and the end):
//   bwd_preprocess:  D_i = rowsum(dO_i * O_i) - dlse_i (fp32 [B, Hq, Lq]; dlse = the LSE cotangent,
//                    0 when NULL, SEMANTICS.md §13 / §18) and dq_accum := 0, so the caller need not
//                    zero the dQ scratch;
//   bwd_dsinks:      d sink_h = -sum over b and real rows i of exp(sink_h - LSE_i) D_i (§18; D as above),
//                    one CTA per query head, a fixed-order reduction (deterministic);
//   bwd_convert_dq:  dq = scale * dq_accum in the output dtype (padded rows get 0);
//   bwd_reduce_gqa:  dk[b, hk] = sum over the hq/hkv query heads of dk_accum[b, h] (and dv): GQA
//                    reduction of the per-query-head fp32 partial gradients.
// Scratch layouts are contiguous: dq_accum [B, Hq, Lq, d], d_rowsum [B, Hq, Lq],
// dk_accum [B, Hq, Lk, d] / dv_accum [B, Hq, Lk, dv].
#pragma once
#include <math.h>

#include "attn_params.h"
#include "dtype.cuh"
#include "softmax.cuh"

namespace attn::bwd {

// Which head dims the pre- and postprocess read: one (d = dv, every build of attn_fa1_bwd, attn_fa2_bwd and
// attn_fa3_bwd but one) or two (d for Q, K, dQ, dK and dv for O, dO, dV: the FA3 backward's (192, 128) build). A
// compile-time choice, so that only that build's launcher instantiates the dv kernels.
enum class BwdHeadDims { kOne, kTwo };

// One warp per query row; grid (ceil(Lq / 8), Hq, B), 256 threads. kTwo: the row sum runs over dO's and O's dv columns,
// dq_accum's row is d long.
template <typename T, BwdHeadDims H = BwdHeadDims::kOne>
__global__ void __launch_bounds__(256) bwd_preprocess_kernel(AttnBwdParams p) {
    const AttnFwdParams& f = p.fwd;
    const int b = blockIdx.z, h = blockIdx.y;
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= f.seqlen_q) return;
    const int d = f.head_dim, dv = H == BwdHeadDims::kTwo ? f.head_dim_v : d;
    const int sq = f.seqlens_q ? min(f.seqlens_q[b], f.seqlen_q) : f.seqlen_q;
    const size_t bh_row = ((size_t)b * f.heads_q + h) * f.seqlen_q + row;
    float* dqa = p.dq_accum + bh_row * d;
    for (int k = lane; k < d; k += 32) dqa[k] = 0.f;
    float acc = 0.f;
    if (row < sq) {
        const T* o = (const T*)f.o + b * f.o_batch_stride + h * f.o_head_stride + row * f.o_row_stride;
        const T* dO = (const T*)p.dout + b * p.do_batch_stride + h * p.do_head_stride + row * p.do_row_stride;
        for (int k = lane; k < dv; k += 32) acc += DT<T>::to_f(o[k]) * DT<T>::to_f(dO[k]);
    }
    acc = warp_sum(acc);
    if (p.dlse != nullptr && row < sq) acc -= p.dlse[b * f.lse_batch_stride + h * f.lse_head_stride + row];
    if (lane == 0) p.d_rowsum[bh_row] = acc;
}

// d sink_h (SEMANTICS.md §18): with P_sink,i = exp(sink_h - LSE_i) (the forward's LSE includes the sink)
// and d_rowsum = D_i - dlse_i, d sink_h = -sum_{b, i < seqlens_q[b]} P_sink,i d_rowsum_i. Grid (Hq),
// 256 threads: thread t sums rows t, t + 256, ... of the flattened (b, i) range in order, then a fixed
// shared-memory tree; the result does not depend on scheduling. sink = -inf: no sink, d sink = 0.
constexpr int kDsinkThreads = 256;  // a power of two (the tree below)

template <int kThreads>
__global__ void __launch_bounds__(kThreads) bwd_dsinks_kernel(AttnBwdParams p) {
    const AttnFwdParams& f = p.fwd;
    const int h = blockIdx.x;
    const float sink = f.sinks[h];
    __shared__ float part[kThreads];
    float acc = 0.f;
    if (sink != -INFINITY) {
        const long long n = (long long)f.batch * f.seqlen_q;
        for (long long t = threadIdx.x; t < n; t += kThreads) {
            const int b = (int)(t / f.seqlen_q), i = (int)(t % f.seqlen_q);
            const int sq = f.seqlens_q ? min(f.seqlens_q[b], f.seqlen_q) : f.seqlen_q;
            if (i >= sq) continue;  // padded rows take no part (§7)
            const float lse = f.lse[b * f.lse_batch_stride + h * f.lse_head_stride + i];
            const float d = p.d_rowsum[((size_t)b * f.heads_q + h) * f.seqlen_q + i];
            acc -= __expf(sink - lse) * d;
        }
    }
    part[threadIdx.x] = acc;
    __syncthreads();
#pragma unroll
    for (int w = kThreads / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) p.dsinks[h] = part[0];
}

// The vector build of bwd_preprocess: eight elements per thread, 16-byte loads and stores, when vec8_ok says every
// pointer and stride it touches allows it (else the kernel above; the same results up to the order of D's sum).
template <typename T>
__global__ void __launch_bounds__(256) bwd_preprocess_vec8_kernel(AttnBwdParams p) {
    const AttnFwdParams& f = p.fwd;
    const int b = blockIdx.z, h = blockIdx.y, d = f.head_dim;
    const int per_row = d / 8;  // threads per row: a power of two <= 32, so a row's threads share a warp
    const int row = blockIdx.x * (256 / per_row) + threadIdx.x / per_row, c = 8 * (threadIdx.x % per_row);
    const bool live = row < f.seqlen_q;
    const int sq = f.seqlens_q ? min(f.seqlens_q[b], f.seqlen_q) : f.seqlen_q;
    const size_t bh_row = ((size_t)b * f.heads_q + h) * f.seqlen_q + row;
    float acc = 0.f;
    if (live) {
        float4* dqa = reinterpret_cast<float4*>(p.dq_accum + bh_row * d + c);
        dqa[0] = dqa[1] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row < sq) {
            const uint4 ov = *reinterpret_cast<const uint4*>(static_cast<const T*>(f.o) + b * f.o_batch_stride +
                                                             h * f.o_head_stride + row * f.o_row_stride + c);
            const uint4 gv = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) + b * p.do_batch_stride +
                                                             h * p.do_head_stride + row * p.do_row_stride + c);
            const T* oe = reinterpret_cast<const T*>(&ov);
            const T* ge = reinterpret_cast<const T*>(&gv);
#pragma unroll
            for (int k = 0; k < 8; ++k) acc += DT<T>::to_f(oe[k]) * DT<T>::to_f(ge[k]);
        }
    }
    for (int o = per_row / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (live && c == 0) {
        if (p.dlse != nullptr && row < sq) acc -= p.dlse[b * f.lse_batch_stride + h * f.lse_head_stride + row];
        p.d_rowsum[bh_row] = acc;
    }
}

// kVec elements per thread (2, or 8 with 16-byte accesses when vec8_ok); grid (ceil(Lq * d / kVec / 256), Hq, B).
template <typename T, int kVec>
__global__ void __launch_bounds__(256) bwd_convert_dq_kernel(AttnBwdParams p) {
    const AttnFwdParams& f = p.fwd;
    const int b = blockIdx.z, h = blockIdx.y, d = f.head_dim;
    const long long e = ((long long)blockIdx.x * 256 + threadIdx.x) * kVec;
    if (e >= (long long)f.seqlen_q * d) return;
    const int row = (int)(e / d), k = (int)(e % d);
    const int sq = f.seqlens_q ? min(f.seqlens_q[b], f.seqlen_q) : f.seqlen_q;
    const float* src = p.dq_accum + (((size_t)b * f.heads_q + h) * f.seqlen_q + row) * d + k;
    T* dst = (T*)p.dq + b * p.dq_batch_stride + h * p.dq_head_stride + row * p.dq_row_stride + k;
    const bool ok = row < sq;  // padded rows take no part: zero gradient (SEMANTICS.md §7)
    if constexpr (kVec == 8) {
        float x[8];
        *reinterpret_cast<float4*>(x) = reinterpret_cast<const float4*>(src)[0];
        *reinterpret_cast<float4*>(x + 4) = reinterpret_cast<const float4*>(src)[1];
        uint4 out;
        auto* o2 = reinterpret_cast<typename DT<T>::T2*>(&out);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            o2[j] = DT<T>::pack(ok ? x[2 * j] * f.scale : 0.f, ok ? x[2 * j + 1] * f.scale : 0.f);
        *reinterpret_cast<uint4*>(dst) = out;
    } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) dst[j] = DT<T>::from_f(ok ? src[j] * f.scale : 0.f);
    }
}

// Whether `ptr` and the element strides allow 16-byte accesses of eight 2-byte elements.
static inline bool aligned16(const void* ptr, int64_t s0, int64_t s1, int64_t s2) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s0 % 8 == 0 && s1 % 8 == 0 && s2 % 8 == 0;
}

// The vector kernels' conditions: d / 8 a power of two <= 32, O, dO, dQ and the fp32 scratch 16-byte aligned.
static inline bool vec8_ok(const AttnBwdParams& p) {
    const AttnFwdParams& f = p.fwd;
    const int d = f.head_dim;
    return d >= 8 && d <= 256 && d % 8 == 0 && ((d / 8) & (d / 8 - 1)) == 0 &&
           aligned16(f.o, f.o_row_stride, f.o_head_stride, f.o_batch_stride) &&
           aligned16(p.dout, p.do_row_stride, p.do_head_stride, p.do_batch_stride) &&
           aligned16(p.dq, p.dq_row_stride, p.dq_head_stride, p.dq_batch_stride) &&
           reinterpret_cast<uintptr_t>(p.dq_accum) % 16 == 0;
}

// dk[b, hk, j, :] = sum_g dk_accum[b, hk * G + g, j, :] (already scaled), same for dv.
// grid (ceil(Lk * d / 256), Hkv, B).
template <typename T>
__global__ void __launch_bounds__(256) bwd_reduce_gqa_kernel(AttnBwdParams p) {
    const AttnFwdParams& f = p.fwd;
    const int b = blockIdx.z, hk = blockIdx.y, d = f.head_dim;
    const long long e = (long long)blockIdx.x * 256 + threadIdx.x;
    if (e >= (long long)f.seqlen_k * d) return;
    const int row = (int)(e / d), k = (int)(e % d);
    const int G = f.heads_q / f.heads_kv;
    float sk = 0.f, sv = 0.f;
    for (int g = 0; g < G; ++g) {
        const size_t off = (((size_t)b * f.heads_q + hk * G + g) * f.seqlen_k + row) * d + k;
        sk += p.dk_accum[off];
        sv += p.dv_accum[off];
    }
    ((T*)p.dk)[b * p.dk_batch_stride + hk * p.dk_head_stride + row * p.dk_row_stride + k] = DT<T>::from_f(sk);
    ((T*)p.dv)[b * p.dv_batch_stride + hk * p.dv_head_stride + row * p.dv_row_stride + k] = DT<T>::from_f(sv);
}

// ---- dv != d (the FA3 backward's (d, dv) = (192, 128) build): O, dO, dV have dv columns, Q, K, dQ, dK d. The kernels
// above read one head dim for all (d = dv; bwd_preprocess_kernel reads both as BwdHeadDims::kTwo); this one reads both,
// and only the launchers of a dv != d build (BwdHeadDims::kTwo) instantiate it.

// dk[b, hk, j, :d] = sum_g dk_accum[b, hk * G + g, j, :d] (rows of d), dv[b, hk, j, :dv] from dv_accum (rows of dv).
// grid (ceil(Lk * d / 256), Hkv, B).
template <typename T>
__global__ void __launch_bounds__(256) bwd_reduce_gqa_dv_kernel(AttnBwdParams p) {
    const AttnFwdParams& f = p.fwd;
    const int b = blockIdx.z, hk = blockIdx.y, d = f.head_dim, dv = f.head_dim_v;
    const long long e = (long long)blockIdx.x * 256 + threadIdx.x;
    if (e >= (long long)f.seqlen_k * d) return;
    const int row = (int)(e / d), k = (int)(e % d);
    const int G = f.heads_q / f.heads_kv;
    float sk = 0.f, sv = 0.f;
    for (int g = 0; g < G; ++g) {
        const size_t head_row = ((size_t)b * f.heads_q + hk * G + g) * f.seqlen_k + row;
        sk += p.dk_accum[head_row * d + k];
        if (k < dv) sv += p.dv_accum[head_row * dv + k];
    }
    ((T*)p.dk)[b * p.dk_batch_stride + hk * p.dk_head_stride + row * p.dk_row_stride + k] = DT<T>::from_f(sk);
    if (k < dv)
        ((T*)p.dv)[b * p.dv_batch_stride + hk * p.dv_head_stride + row * p.dv_row_stride + k] = DT<T>::from_f(sv);
}

// Launch helpers shared by attn_fa1_bwd, attn_fa2_bwd and attn_fa3_bwd.
template <typename T, BwdHeadDims H = BwdHeadDims::kOne>
static inline cudaError_t launch_preprocess(const AttnBwdParams& p, cudaStream_t s) {
    const AttnFwdParams& f = p.fwd;
    if (f.seqlen_q == 0) return cudaSuccess;
    if constexpr (H == BwdHeadDims::kTwo) {
        dim3 grid((f.seqlen_q + 7) / 8, f.heads_q, f.batch);
        bwd_preprocess_kernel<T, H><<<grid, 256, 0, s>>>(p);
    } else if (vec8_ok(p)) {
        const int rows = 256 / (f.head_dim / 8);
        dim3 grid((f.seqlen_q + rows - 1) / rows, f.heads_q, f.batch);
        bwd_preprocess_vec8_kernel<T><<<grid, 256, 0, s>>>(p);
    } else {
        dim3 grid((f.seqlen_q + 7) / 8, f.heads_q, f.batch);
        bwd_preprocess_kernel<T><<<grid, 256, 0, s>>>(p);
    }
    return cudaGetLastError();
}

// After launch_preprocess (it reads d_rowsum); only when fwd.sinks != NULL.
static inline cudaError_t launch_dsinks(const AttnBwdParams& p, cudaStream_t s) {
    if (p.fwd.sinks == nullptr) return cudaSuccess;
    bwd_dsinks_kernel<kDsinkThreads><<<p.fwd.heads_q, kDsinkThreads, 0, s>>>(p);
    return cudaGetLastError();
}

template <typename T, BwdHeadDims H = BwdHeadDims::kOne>
static inline cudaError_t launch_postprocess(const AttnBwdParams& p, cudaStream_t s) {
    const AttnFwdParams& f = p.fwd;
    if (f.seqlen_q > 0) {
        const bool vec = vec8_ok(p);
        const long long per_thread = vec ? 8 : 2, n = (long long)f.seqlen_q * f.head_dim / per_thread;
        dim3 grid((unsigned)((n + 255) / 256), f.heads_q, f.batch);
        if (vec)
            bwd_convert_dq_kernel<T, 8><<<grid, 256, 0, s>>>(p);
        else
            bwd_convert_dq_kernel<T, 2><<<grid, 256, 0, s>>>(p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if (f.heads_q != f.heads_kv && f.seqlen_k > 0) {
        const long long n = (long long)f.seqlen_k * f.head_dim;
        dim3 grid((unsigned)((n + 255) / 256), f.heads_kv, f.batch);
        if constexpr (H == BwdHeadDims::kTwo)
            bwd_reduce_gqa_dv_kernel<T><<<grid, 256, 0, s>>>(p);  // rows of d (dK) and dv (dV) columns
        else
            bwd_reduce_gqa_kernel<T><<<grid, 256, 0, s>>>(p);
        return cudaGetLastError();
    }
    return cudaSuccess;
}

}  // namespace attn::bwd
