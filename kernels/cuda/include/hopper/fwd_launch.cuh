// Host side of the FA3 forward (mainloop.cuh's kernel), shared by the shipped launcher (fa3_fwd.cu) and the lab's
// (kernels/cuda/lab/fa3_fwd_lab.cu): the tensor maps, the order of the work tiles, the launch of one build
// (Fa3Config), the choice of the score scale from the parameters, and the one switch over head dim and dtype.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "../attn_params.h"
#include "../launch_common.cuh"
#include "mainloop.cuh"
#include "tma_host.cuh"

namespace attn::hopper {

// The work tiles' order needs the K / V of the heads in flight together to stay in L2 (scheduler.cuh sections).
// Without a right bound every work tile is as long as the next, so the budget is small (8 MB: at N = 8192 one or two
// heads in flight, each K / V tile read by 60-130 CTAs at about the same time); causal or windowed, 32 MB of the 50,
// so that the longest tiles of more heads go first. H200, B=4 H=16 N=8192 non-causal, TFLOPs/s with 32 -> 8 MB:
// d = 64 507 -> 510, d = 128 588 -> 604, d = 256 673 -> 700; causal, 8 MB loses up to 2%.
inline long long fwd_l2_budget(const AttnFwdParams& p) {
    const bool ragged = p.causal || p.window_right >= 0;
    return (ragged ? 32LL : 8LL) << 20;
}

// Every query tile sees the same key tiles (no causal mask, no window, no varlen), so query tiles m, m + 1 of a head
// can share their K / V loads in a cluster of two (Grid::kCluster2).
inline bool same_keys_for_every_query_tile(const AttnFwdParams& p) {
    return !p.causal && p.window_left < 0 && p.window_right < 0 && p.seqlens_q == nullptr && p.seqlens_k == nullptr &&
           p.seqlen_k > 0;
}

// The work-tile order of a forward launch (scheduler.cuh) with query tiles of block_m rows: as many heads per L2 section
// as K / V of kv_bytes per head fit in l2_budget, times the GQA group (consecutive query heads share one K / V head).
// ATTN_OK with the order and the number of work tiles, or ATTN_ERR_UNSUPPORTED past the grid limit.
inline int fwd_tile_order(const AttnFwdParams& p, int block_m, long long kv_bytes, long long l2_budget,
                          TileOrder* order, long long* total, const char* name, char* err, int errlen) {
    const int num_m = (p.seqlen_q + block_m - 1) / block_m;
    const int bh = p.heads_q * p.batch;
    *order = TileOrder{num_m, p.heads_q, p.batch, l2_section(kv_bytes, l2_budget, bh) * (p.heads_q / p.heads_kv)};
    if (order->section > bh) order->section = bh;
    *total = 1LL * num_m * bh;
    if (*total > 0x7fffffffLL)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %lld work tiles exceed the grid limit", name, *total);
    return ATTN_OK;
}

// A launch's last error (cudaGetLastError or cudaLaunchKernelEx's) and its scratch release, as a launcher's status.
inline int launch_status(cudaError_t e, attn::LaunchScratch& scratch, const char* name, char* err, int errlen) {
    const cudaError_t f = scratch.release();
    if (e == cudaSuccess) e = f;
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: launch failed: %s (%s)", name, cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

// The scratch build C takes from its launch (attn_params.h AttnLaunch): the work-tile counter of a persistent build.
template <class C>
constexpr int64_t fwd_workspace_bytes() {
    return C::kPersistent ? workspace_piece(sizeof(int)) : 0;
}

// Runs build C on p. `name` prefixes messages; `l2_budget` (bytes) sets the heads per L2 section (fwd_l2_budget's
// unless a lab build asks for another).
template <class C>
int launch_fwd(const AttnFwdParams& p, const AttnLaunch* launch, int sms, long long l2_budget, const char* name,
               char* err, int errlen) {
    Fa3Params P{};
    P.p = p;
    const bool bf16 = p.dtype == ATTN_BF16;
    char msg[384] = {0};
    if (make_tma_tensor(P.q, "q", p.q, bf16, p.head_dim, p.seqlen_q, p.heads_q, p.batch, p.q_row_stride,
                        p.q_head_stride, p.q_batch_stride, C::kBlockM, msg, sizeof msg))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    if (p.seqlen_k > 0) {
        if (make_tma_tensor(P.k, "k", p.k, bf16, p.head_dim, p.seqlen_k, p.heads_kv, p.batch, p.k_row_stride,
                            p.k_head_stride, p.k_batch_stride, C::kBlockN, msg, sizeof msg) ||
            make_tma_tensor(P.v, "v", p.v, bf16, p.head_dim_v, p.seqlen_k, p.heads_kv, p.batch, p.v_row_stride,
                            p.v_head_stride, p.v_batch_stride, C::kBlockN, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    } else {
        P.k = P.q;  // never read: no key tile exists
        P.v = P.q;
    }
    long long total = 0;
    int rc = fwd_tile_order(p, C::kBlockM, 2LL * p.seqlen_k * (p.head_dim + p.head_dim_v), l2_budget, &P.order, &total,
                            name, err, errlen);
    if (rc != ATTN_OK) return rc;
    auto kernel = fa3_fwd_kernel<C>;
    rc = attn::kernel_smem_opt_in(reinterpret_cast<const void*>(kernel), C::kSmemBytes, name, err, errlen);
    if (rc != ATTN_OK) return rc;
    attn::LaunchScratch scratch(launch);
    const cudaStream_t stream = scratch.stream();
    // Cluster builds: pairs of CTAs (scheduler.cuh cluster_grid: at most one more than the work tiles).
    int grid = C::kClusterM > 1 ? cluster_grid(P.order) : static_cast<int>(total);
    if constexpr (C::kPersistent) {
        rc = attn::persistent_setup(&grid, sms, &P.counter, scratch, name, err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    cudaError_t e;
    if constexpr (C::kClusterM > 1) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(C::kThreads);
        cfg.dynamicSmemBytes = C::kSmemBytes;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = C::kClusterM;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, kernel, P);
    } else {
        kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(P);
        e = cudaGetLastError();
    }
    return launch_status(e, scratch, name, err, errlen);
}

// The score scale of a call: folded into the exp2 where the scale is positive and there is no softcap.
inline ScoreScale score_scale_of(const AttnFwdParams& p) {
    return p.softcap > 0.f || !(p.scale > 0.f) ? ScoreScale::kPrescaled : ScoreScale::kFolded;
}

// Schedule S of head dims D (Q, K) and DV (V, O), element type E, with the score scale p asks for.
template <int D, typename E, class S, int DV = D>
int launch_scaled(const AttnFwdParams& p, const AttnLaunch* launch, int sms, long long l2_budget, const char* name,
                  char* err, int errlen) {
    return score_scale_of(p) == ScoreScale::kPrescaled
               ? launch_fwd<Fa3Config<D, E, S, ScoreScale::kPrescaled, DV>>(p, launch, sms, l2_budget, name, err,
                                                                            errlen)
               : launch_fwd<Fa3Config<D, E, S, ScoreScale::kFolded, DV>>(p, launch, sms, l2_budget, name, err, errlen);
}

// f(dim, elem) with the head dim of p (64, 128, else 256) as std::integral_constant and its element type as a
// value of that type: the one switch over head dim and dtype that every dispatch goes through.
template <class F>
auto by_head_dim(const AttnFwdParams& p, F&& f) {
    const bool bf = p.dtype == ATTN_BF16;
    switch (p.head_dim) {
        case 64:
            return bf ? f(std::integral_constant<int, 64>{}, __nv_bfloat16{})
                      : f(std::integral_constant<int, 64>{}, __half{});
        case 128:
            return bf ? f(std::integral_constant<int, 128>{}, __nv_bfloat16{})
                      : f(std::integral_constant<int, 128>{}, __half{});
        default:
            return bf ? f(std::integral_constant<int, 256>{}, __nv_bfloat16{})
                      : f(std::integral_constant<int, 256>{}, __half{});
    }
}

// The head dims of a build as the type by_head_dim / by_fa3_head_dims pass: ::value is D (of Q and K), dv of V and O.
template <int D, int DV = D>
struct HeadDims : std::integral_constant<int, D> {
    static constexpr int dv = DV;
};

// The (d, dv) builds of attn_fa3_fwd (fwd_defaults.cuh Fa3Default): d = dv in {64, 96, 128, 192, 256} and
// (192, 128). The rule validate_fwd applies (launch_common.cuh HeadDimRule); by_fa3_head_dims dispatches the same set.
inline const char* fa3_fwd_head_dims(int d, int dv) {
    const bool equal = d == dv && (d == 64 || d == 96 || d == 128 || d == 192 || d == 256);
    return equal || (d == 192 && dv == 128) ? nullptr : "d = dv in {64, 96, 128, 192, 256} and (d, dv) = (192, 128)";
}

// f(dims, elem) over fa3_fwd_head_dims's builds (dims: HeadDims<D, DV>), through by_head_dim for 64, 128 and 256.
template <class F>
auto by_fa3_head_dims(const AttnFwdParams& p, F&& f) {
    const bool bf = p.dtype == ATTN_BF16;
    auto with = [&](auto dims) { return bf ? f(dims, __nv_bfloat16{}) : f(dims, __half{}); };
    if (p.head_dim == 192) return p.head_dim_v == 128 ? with(HeadDims<192, 128>{}) : with(HeadDims<192>{});
    if (p.head_dim == 96) return with(HeadDims<96>{});
    return by_head_dim(p, [&](auto dim, auto elem) { return f(HeadDims<decltype(dim)::value>{}, elem); });
}

// The checks every forward launcher makes before it dispatches: the parameters (launch_common.cuh validate_fwd, with
// the head dims the launcher compiles) and an sm_90 device; *sms gets the device's SM count. ATTN_OK with *empty set
// when there is nothing to compute.
inline int fwd_preflight(const AttnFwdParams* p, const char* name, int* sms, bool* empty, char* err, int errlen,
                         attn::HeadDimRule head_dims = attn::head_dims_64_128_256) {
    int rc = attn::validate_fwd(p, name, err, errlen, /*paged_ok=*/false, /*sinks_ok=*/false, head_dims);
    if (rc != ATTN_OK) return rc;
    *empty = p->batch == 0 || p->seqlen_q == 0;
    if (*empty) return ATTN_OK;
    return attn::require_sm90(name, err, errlen, sms);
}

}  // namespace attn::hopper
