// Host side of the FA3 FP8 forward (fp8_mainloop.cuh's kernel), shared by the shipped launcher (fa3_fp8_fwd.cu) and
// the lab's (kernels/cuda/lab/fa3_fp8_fwd_lab.cu): parameter checks, the tensor maps of the codes, the launch of one
// build (Fa3Fp8Config).
#pragma once
#include <cuda_runtime.h>

#include "../attn_params.h"
#include "../launch_common.cuh"
#include "fp8_mainloop.cuh"
#include "fwd_launch.cuh"
#include "tma_host.cuh"

namespace attn::hopper {

// V's tensor map: rows as K (D / kRowBytes boxes of kBlockN keys), or with C::kVtGlobal the Vt rows (kVtColBlocks
// boxes of D head-dim rows x kVtColBytes key positions, a 128-byte swizzle for 128 keys, 64-byte for 64: the layout
// the in-kernel transposes write).
template <class C>
int make_v_map(TmaTensor& t, const AttnFp8FwdParams& fp, char* msg, int len) {
    const AttnFwdParams& p = fp.fwd;
    constexpr CUtensorMapDataType dt = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    if constexpr (C::kVtGlobal) {
        constexpr CUtensorMapSwizzle sw = C::kVtColBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
        return make_tma_tensor_typed(t, "v", p.v, dt, 1, C::kVtColBytes, sw, fp.vt_keys, p.head_dim_v, p.heads_kv,
                                     p.batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride, C::kHeadDim, msg,
                                     len);
    } else {
        constexpr CUtensorMapSwizzle sw = C::kRowBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
        return make_tma_tensor_typed(t, "v", p.v, dt, 1, C::kRowBytes, sw, p.head_dim_v, p.seqlen_k, p.heads_kv,
                                     p.batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride, C::kBlockN, msg, len);
    }
}

// The scratch build C takes from its launch (attn_params.h AttnLaunch): the work-tile counter of a persistent build.
template <class C>
constexpr int64_t fp8_workspace_bytes() {
    return C::kPersistent ? workspace_piece(sizeof(int)) : 0;
}

// Runs build C on fp; `name` prefixes messages.
template <class C>
int launch_fp8(const AttnFp8FwdParams& fp, const AttnLaunch* launch, const char* name, char* err, int errlen) {
    const AttnFwdParams& p = fp.fwd;
    if (fp.granularity == ATTN_FP8_PER_TILE && !C::kPerTileOk)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: per-tile descales with %d-key tiles (build error)",
                          name, C::kBlockN);
    Fa3Fp8Params P{};
    P.base.p = p;
    P.q_descale = fp.q_descale;
    P.k_descale = fp.k_descale;
    P.v_descale = fp.v_descale;
    P.granularity = fp.granularity;
    P.q_tiles = (p.seqlen_q + C::kDescaleBlock - 1) / C::kDescaleBlock;
    P.k_tiles = (p.seqlen_k + C::kDescaleBlock - 1) / C::kDescaleBlock;
    constexpr CUtensorMapSwizzle sw = C::kRowBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    constexpr CUtensorMapDataType dt = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    char msg[384] = {0};
    if (make_tma_tensor_typed(P.base.q, "q", p.q, dt, 1, C::kRowBytes, sw, p.head_dim, p.seqlen_q, p.heads_q, p.batch,
                              p.q_row_stride, p.q_head_stride, p.q_batch_stride, C::kBlockM, msg, sizeof msg))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    if (p.seqlen_k > 0) {
        if (make_tma_tensor_typed(P.base.k, "k", p.k, dt, 1, C::kRowBytes, sw, p.head_dim, p.seqlen_k, p.heads_kv,
                                  p.batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride, C::kBlockN, msg,
                                  sizeof msg) ||
            make_v_map<C>(P.base.v, fp, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    } else {
        P.base.k = P.base.q;  // never read: no key tile exists
        P.base.v = P.base.q;
    }
    // K / V codes are one byte per element; heads per L2 section for 32 MB of them
    long long total = 0;
    int rc = fwd_tile_order(p, C::kBlockM, 2LL * p.seqlen_k * p.head_dim, 32LL << 20, &P.base.order, &total, name,
                            err, errlen);
    if (rc != ATTN_OK) return rc;
    auto kernel = fa3_fp8_fwd_kernel<C>;
    rc = attn::kernel_smem_opt_in(reinterpret_cast<const void*>(kernel), C::kSmemBytes, name, err, errlen);
    if (rc != ATTN_OK) return rc;
    attn::LaunchScratch scratch(launch);
    int grid = static_cast<int>(total);
    if constexpr (C::kPersistent) {  // one CTA per SM, taking work tiles from a counter (scheduler.cuh)
        int major = 0;
        rc = attn::persistent_setup(&grid, attn::device_sms(&major), &P.base.counter, scratch, name, err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    kernel<<<grid, C::kThreads, C::kSmemBytes, scratch.stream()>>>(P);
    return launch_status(cudaGetLastError(), scratch, name, err, errlen);
}

// The head dims of attn_fa3_fp8_fwd's builds (fp8_defaults.cuh): d = dv in {64, 96, 128, 192, 256}. The rule
// validate_fwd applies (launch_common.cuh HeadDimRule); by_dim_and_format dispatches the same set.
inline const char* fp8_head_dims(int d, int dv) {
    return d == dv && (d == 64 || d == 96 || d == 128 || d == 192 || d == 256) ? nullptr
                                                                              : "d = dv in {64, 96, 128, 192, 256}";
}

// Everything about fp that does not need the device or the data pointers; `name` prefixes messages.
inline int validate_fp8(const AttnFp8FwdParams* fp, const char* name, char* err, int errlen) {
    if (fp == nullptr) return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", name);
    const AttnFwdParams* p = &fp->fwd;
    int rc = attn::validate_fwd(p, name, err, errlen, /*paged_ok=*/false, /*sinks_ok=*/false, fp8_head_dims);
    if (rc != ATTN_OK) return rc;
    if (p->dtype != ATTN_BF16)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: dtype=%d: the output is bf16 only (dtype %d)", name,
                          p->dtype, ATTN_BF16);
    if (fp->format != ATTN_FP8_E4M3FN && fp->format != ATTN_FP8_E5M2)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: format=%d: e4m3 (%d) or e5m2 (%d)", name,
                          fp->format, ATTN_FP8_E4M3FN, ATTN_FP8_E5M2);
    if (fp->granularity < ATTN_FP8_PER_TENSOR || fp->granularity > ATTN_FP8_PER_TILE)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: granularity=%d: per tensor (0), per head (1), per tile (2)",
                          name, fp->granularity);
    if (fp->granularity == ATTN_FP8_PER_TILE && (fp->tile_q != 128 || fp->tile_k != 128))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: tile_q=%d tile_k=%d: per-tile descales need tiles of 128 x 128 (the kernel's tiles)",
                          name, fp->tile_q, fp->tile_k);
    if (fp->v_layout != ATTN_FP8_V_ROWS && fp->v_layout != ATTN_FP8_V_KMAJOR)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: v_layout=%d: rows (%d) or k-major (%d)", name,
                          fp->v_layout, ATTN_FP8_V_ROWS, ATTN_FP8_V_KMAJOR);
    if (fp->v_layout == ATTN_FP8_V_KMAJOR && (fp->vt_keys % 16 != 0 || fp->vt_keys < p->seqlen_k))
        return attn::fail(err, errlen, ATTN_ERR_INVALID,
                          "%s: vt_keys=%d with seqlen_k=%d: k-major V needs a multiple of 16 that is >= seqlen_k",
                          name, fp->vt_keys, p->seqlen_k);
    return ATTN_OK;
}

// validate_fp8, the descale pointers and an sm_90 device; ATTN_OK with *empty set when there is nothing to compute.
inline int fp8_preflight(const AttnFp8FwdParams* fp, const char* name, bool* empty, char* err, int errlen) {
    int rc = validate_fp8(fp, name, err, errlen);
    if (rc != ATTN_OK) return rc;
    const AttnFwdParams* p = &fp->fwd;
    *empty = p->batch == 0 || p->seqlen_q == 0;
    if (*empty) return ATTN_OK;
    if (fp->q_descale == nullptr || fp->k_descale == nullptr || fp->v_descale == nullptr)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: q_descale=%p k_descale=%p v_descale=%p: all three needed",
                          name, static_cast<const void*>(fp->q_descale), static_cast<const void*>(fp->k_descale),
                          static_cast<const void*>(fp->v_descale));
    return attn::require_sm90(name, err, errlen);
}

// f(dim, format) with the head dim of fp (fp8_head_dims's: 64, 96, 128, 192, else 256) as std::integral_constant and
// its format as a value of that type (Fp8E4M3 / Fp8E5M2): the one switch over head dim and format.
template <class F>
auto by_dim_and_format(const AttnFp8FwdParams& fp, F&& f) {
    const bool e4m3 = fp.format == ATTN_FP8_E4M3FN;
    switch (fp.fwd.head_dim) {
        case 64:
            return e4m3 ? f(std::integral_constant<int, 64>{}, Fp8E4M3{}) : f(std::integral_constant<int, 64>{}, Fp8E5M2{});
        case 96:
            return e4m3 ? f(std::integral_constant<int, 96>{}, Fp8E4M3{}) : f(std::integral_constant<int, 96>{}, Fp8E5M2{});
        case 192:
            return e4m3 ? f(std::integral_constant<int, 192>{}, Fp8E4M3{})
                        : f(std::integral_constant<int, 192>{}, Fp8E5M2{});
        case 128:
            return e4m3 ? f(std::integral_constant<int, 128>{}, Fp8E4M3{})
                        : f(std::integral_constant<int, 128>{}, Fp8E5M2{});
        default:
            return e4m3 ? f(std::integral_constant<int, 256>{}, Fp8E4M3{})
                        : f(std::integral_constant<int, 256>{}, Fp8E5M2{});
    }
}

}  // namespace attn::hopper
