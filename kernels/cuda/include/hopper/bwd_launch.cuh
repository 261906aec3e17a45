// Host side of the FA3 backward (bwd_mainloop.cuh's kernel), shared by the shipped launchers (fa3_bwd.cu) and the
// lab's (kernels/cuda/lab/fa3_bwd_lab.cu): the parameter checks, the tensor maps, the launch of one main-loop build
// (Fa3BwdConfig, bwd_wide.cuh's Fa3BwdWideConfig or bwd_sliced.cuh's Fa3BwdSlicedConfig) between the pre- and
// postprocess kernels of ../bwd_prepost.cuh.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>

#include "../attn_params.h"
#include "../bwd_prepost.cuh"
#include "../launch_common.cuh"
#include "bwd_mainloop.cuh"
#include "bwd_sliced.cuh"
#include "bwd_wide.cuh"
#include "tma_host.cuh"

namespace attn::hopper {

inline bool even_aligned(const void* ptr, int64_t s0, int64_t s1, int64_t s2) {
    return (reinterpret_cast<uintptr_t>(ptr) % 4 == 0) && s0 % 2 == 0 && s1 % 2 == 0 && s2 % 2 == 0;
}

// The fp32 dq_accum [B, Hq, Lq, d] (contiguous) as a TMA map for the reduce-add of kTmaDq builds: dims
// (d, Lq, Hq, B), box (32, rows, 1, 1) = one 128-byte-swizzled 32-column block of a consumer's dQ block (the build's
// kDqRows: 64, or the query tile's rows with dQ^T = K^T dS^T).
inline int make_dq_map(CUtensorMap& map, const AttnBwdParams& p, int rows, char* err, int errlen) {
    EncodeTiledFn fn = encode_tiled_fn();
    if (fn == nullptr) {
        snprintf(err, errlen, "cuTensorMapEncodeTiled is not available from the driver");
        return 1;
    }
    const AttnFwdParams& f = p.fwd;
    const uint64_t d = f.head_dim;
    cuuint64_t gdim[4] = {d, static_cast<cuuint64_t>(f.seqlen_q), static_cast<cuuint64_t>(f.heads_q),
                          static_cast<cuuint64_t>(f.batch)};
    cuuint64_t gstride[3] = {d * 4, d * 4 * f.seqlen_q, d * 4 * f.seqlen_q * f.heads_q};
    cuuint32_t box[4] = {32, static_cast<cuuint32_t>(rows), 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    CUresult r = fn(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, p.dq_accum, gdim, gstride, box, estride,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cuTensorMapEncodeTiled(dq_accum: %d x %d x %d x %d fp32) failed with CUresult %d",
                 f.head_dim, f.seqlen_q, f.heads_q, f.batch, static_cast<int>(r));
        return 1;
    }
    return 0;
}

// The dQ semaphores of a deterministic build C: one int per (batch, query head, query tile).
template <class C>
int64_t bwd_semaphore_count(const AttnBwdParams& p) {
    const int num_m = (p.fwd.seqlen_q + C::kBlockM - 1) / C::kBlockM;
    return static_cast<int64_t>(p.fwd.batch) * p.fwd.heads_q * (num_m > 0 ? num_m : 1);
}

// The scratch build C takes from its launch (attn_params.h AttnLaunch): the dQ semaphores of a deterministic build.
template <class C>
int64_t bwd_workspace_bytes(const AttnBwdParams& p) {
    return C::kDeterministic && p.fwd.batch > 0 && p.fwd.seqlen_k > 0
               ? workspace_piece(bwd_semaphore_count<C>(p) * static_cast<int64_t>(sizeof(int)))
               : 0;
}

// The main-loop kernel of build C by its tiling: bwd_mainloop.cuh's, bwd_wide.cuh's or bwd_sliced.cuh's.
template <class C>
constexpr auto bwd_main_kernel() {
    if constexpr (C::kTiling == BwdTiling::kSharedKeys)
        return fa3_bwd_wide_kernel<C>;
    else if constexpr (C::kTiling == BwdTiling::kHeadDimSlices)
        return fa3_bwd_sliced_kernel<C>;
    else
        return fa3_bwd_kernel<C>;
}

// The main loop of build C on p (after the preprocess, before the postprocess).
template <class C>
int launch_bwd_main(const AttnBwdParams& p, attn::LaunchScratch& scratch, const char* name, char* err, int errlen) {
    const AttnFwdParams& f = p.fwd;
    Fa3BwdParams P{};
    P.p = p;
    const bool bf16 = f.dtype == ATTN_BF16;
    char msg[384] = {0};
    if (make_tma_tensor(P.k, "k", f.k, bf16, f.head_dim, f.seqlen_k, f.heads_kv, f.batch, f.k_row_stride,
                        f.k_head_stride, f.k_batch_stride, C::kBlockN, msg, sizeof msg) ||
        make_tma_tensor(P.v, "v", f.v, bf16, f.head_dim_v, f.seqlen_k, f.heads_kv, f.batch, f.v_row_stride,
                        f.v_head_stride, f.v_batch_stride, C::kBlockN, msg, sizeof msg))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    if (f.seqlen_q > 0) {
        if (make_tma_tensor(P.q, "q", f.q, bf16, f.head_dim, f.seqlen_q, f.heads_q, f.batch, f.q_row_stride,
                            f.q_head_stride, f.q_batch_stride, C::kBlockM, msg, sizeof msg) ||
            make_tma_tensor(P.dout, "dout", p.dout, bf16, f.head_dim_v, f.seqlen_q, f.heads_q, f.batch, p.do_row_stride,
                            p.do_head_stride, p.do_batch_stride, C::kBlockM, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    } else {
        P.q = P.k;  // never read: no query tile exists
        P.dout = P.k;
    }
    if constexpr (C::kTmaDq) {
        if (f.seqlen_q > 0 && make_dq_map(P.dq_map, p, C::kDqRows, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    }
    if constexpr (C::kTiling == BwdTiling::kSharedKeys) {
        if constexpr (C::kDqFloat4) {
            if (reinterpret_cast<uintptr_t>(p.dq_accum) % 16 != 0)
                return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                                  "%s: dq_accum=%p: this build adds dQ by float4 atomics (16-byte aligned rows)", name,
                                  p.dq_accum);
        }
    }
    auto kernel = bwd_main_kernel<C>();
    int rc = attn::kernel_smem_opt_in(reinterpret_cast<const void*>(kernel), C::kSmemBytes, name, err, errlen);
    if (rc != ATTN_OK) return rc;
    const int num_n = (f.seqlen_k + C::kBlockN - 1) / C::kBlockN;
    // CTA order (scheduler.cuh): with a finite right bound (causal, or a window) the first key tiles see the most
    // query rows, so they go first, in sections of >= 2 heads whose Q, dO, LSE, D and dq_accum stay in L2 (16 MB
    // of the 50); the grid then ends with the short CTAs. Otherwise one head after another, key tiles in order.
    const int bh = f.heads_q * f.batch;
    const long long head_bytes = 1LL * f.seqlen_q * (C::kHeadDim * (2 * sizeof(typename C::Elem) + 4) + 8);
    const bool ragged = f.causal || f.window_right >= 0;
    const int section = ragged ? std::max(2, l2_section(head_bytes, 16LL << 20, bh)) : 1;
    P.order = TileOrder{num_n, f.heads_q, f.batch, section};
    if (1LL * num_n * bh > 0x7fffffffLL)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %lld CTAs exceed the grid limit", name,
                          1LL * num_n * bh);
    const cudaStream_t stream = scratch.stream();
    if constexpr (C::kDeterministic) {
        const int64_t n = bwd_semaphore_count<C>(p);
        rc = scratch.take(reinterpret_cast<void**>(&P.dq_sem), n * static_cast<int64_t>(sizeof(int)), name, err,
                              errlen);
        if (rc != ATTN_OK) return rc;
        const cudaError_t e = cudaMemsetAsync(P.dq_sem, 0, n * sizeof(int), stream);
        if (e != cudaSuccess)
            return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: dQ semaphores: %s", name, cudaGetErrorString(e));
    }
    kernel<<<P.order.total(), C::kThreads, C::kSmemBytes, stream>>>(P);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: main kernel launch: %s (%s)", name, cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

// The whole backward with main-loop build C of element type T: preprocess (D = rowsum(dO * O) - dlse, dq_accum := 0),
// d sinks, the main loop, dq convert and the GQA reduction, all on the launch's stream.
template <typename T, class C>
int run_bwd(const AttnBwdParams& p, const AttnLaunch* launch, const char* name, char* err, int errlen) {
    using namespace attn::bwd;
    attn::LaunchScratch scratch(launch);
    const cudaStream_t s = scratch.stream();
    // dv != d: D sums dv columns of dO * O, the GQA reduction has rows of d (dK) and dv (dV) columns
    constexpr BwdHeadDims kDims = C::kTensorHeadDimV != C::kTensorHeadDim ? BwdHeadDims::kTwo : BwdHeadDims::kOne;
    int rc = attn::cuda_status(launch_preprocess<T, kDims>(p, s),
                               "attn_fa3_bwd: preprocess (D = rowsum(dO * O))", err, errlen);
    if (rc != ATTN_OK) return rc;
    rc = attn::cuda_status(launch_dsinks(p, s), "attn_fa3_bwd: d sinks", err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p.fwd.seqlen_k > 0) {
        rc = launch_bwd_main<C>(p, scratch, name, err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    rc = attn::cuda_status(launch_postprocess<T, kDims>(p, s),
                           "attn_fa3_bwd: dq convert / GQA reduce", err, errlen);
    const cudaError_t f = scratch.release();
    return rc != ATTN_OK ? rc : attn::cuda_status(f, name, err, errlen);
}

// The (d, dv) builds of attn_fa3_bwd / attn_fa3_bwd_deterministic (bwd_defaults.cuh Fa3BwdDefault): d = dv in {64, 96,
// 128, 192, 256} and (192, 128). The rule check_bwd_params applies (launch_common.cuh HeadDimRule); bwd_by_dims
// dispatches the same set.
inline const char* fa3_bwd_head_dims(int d, int dv) {
    const bool same = d == dv && (d == 64 || d == 96 || d == 128 || d == 192 || d == 256);
    return same || (d == 192 && dv == 128) ? nullptr : "d = dv in {64, 96, 128, 192, 256} and (d, dv) = (192, 128)";
}

// The head dims of bwd_mainloop.cuh's Fa3BwdConfig (d = dv in {64, 96, 128}), which bwd_by_head_dim dispatches: the
// lab's builds (kernels/cuda/lab/fa3_bwd_lab.cu) derive from those.
inline const char* fa3_bwd_narrow_head_dims(int d, int dv) {
    return d == dv && (d == 64 || d == 96 || d == 128) ? nullptr : "d = dv in {64, 96, 128}";
}

// The checks every backward launcher makes before it dispatches; ATTN_OK with *empty set when there is nothing to do.
// head_dims: the (d, dv) the launcher dispatches (fa3_bwd_head_dims: the shipped builds).
inline int bwd_preflight(const AttnBwdParams* p, const char* name, bool* empty, char* err, int errlen,
                         attn::HeadDimRule head_dims = fa3_bwd_head_dims) {
    if (err && errlen > 0) err[0] = '\0';
    int rc = attn::check_bwd_params(p, name, err, errlen, /*sinks_ok=*/true, head_dims);
    if (rc != ATTN_OK) return rc;
    const AttnFwdParams& f = p->fwd;
    *empty = f.batch == 0;
    if (*empty) return ATTN_OK;
    rc = attn::require_sm90(name, err, errlen);
    if (rc != ATTN_OK) return rc;
    if (f.seqlen_k > 0 && (!even_aligned(p->dk, p->dk_batch_stride, p->dk_head_stride, p->dk_row_stride) ||
                           !even_aligned(p->dv, p->dv_batch_stride, p->dv_head_stride, p->dv_row_stride)))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: dk=%p / dv=%p with strides (%lld, %lld, %lld) / (%lld, %lld, %lld): element pairs are "
                          "stored 4 bytes at a time (4-byte aligned pointers, even strides)",
                          name, p->dk, p->dv, (long long)p->dk_batch_stride, (long long)p->dk_head_stride,
                          (long long)p->dk_row_stride, (long long)p->dv_batch_stride, (long long)p->dv_head_stride,
                          (long long)p->dv_row_stride);
    return ATTN_OK;
}

// f(dim, elem) with the head dim of p (64, 96, else 128) as std::integral_constant and its element type as a value:
// bwd_mainloop.cuh's builds (the lab's), after fa3_bwd_narrow_head_dims.
template <class F>
auto bwd_by_head_dim(const AttnBwdParams& p, F&& f) {
    const bool bf = p.fwd.dtype == ATTN_BF16;
    if (p.fwd.head_dim == 64)
        return bf ? f(std::integral_constant<int, 64>{}, __nv_bfloat16{}) : f(std::integral_constant<int, 64>{}, __half{});
    if (p.fwd.head_dim == 96)
        return bf ? f(std::integral_constant<int, 96>{}, __nv_bfloat16{}) : f(std::integral_constant<int, 96>{}, __half{});
    return bf ? f(std::integral_constant<int, 128>{}, __nv_bfloat16{}) : f(std::integral_constant<int, 128>{}, __half{});
}

// f(dk, dv, elem) with the (d, dv) of p as std::integral_constant values ((64, 64), (96, 96), (128, 128), (192, 192),
// (256, 256), (192, 128): fa3_bwd_head_dims, which the caller has checked) and its element type as a value.
template <class F>
auto bwd_by_dims(const AttnBwdParams& p, F&& f) {
    const int d = p.fwd.head_dim, dv = p.fwd.head_dim_v;
    auto with_elem = [&](auto dk_c, auto dv_c) {
        return p.fwd.dtype == ATTN_BF16 ? f(dk_c, dv_c, __nv_bfloat16{}) : f(dk_c, dv_c, __half{});
    };
    using std::integral_constant;
    if (d == 64) return with_elem(integral_constant<int, 64>{}, integral_constant<int, 64>{});
    if (d == 96) return with_elem(integral_constant<int, 96>{}, integral_constant<int, 96>{});
    if (d == 192 && dv == 128) return with_elem(integral_constant<int, 192>{}, integral_constant<int, 128>{});
    if (d == 192) return with_elem(integral_constant<int, 192>{}, integral_constant<int, 192>{});
    if (d == 256) return with_elem(integral_constant<int, 256>{}, integral_constant<int, 256>{});
    return with_elem(integral_constant<int, 128>{}, integral_constant<int, 128>{});
}

}  // namespace attn::hopper
