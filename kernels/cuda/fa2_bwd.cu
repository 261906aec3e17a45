// FlashAttention-2 backward (FA2 paper, Algorithm 2) for fp16 / bf16, head dims 64, 128, 256.
//     int attn_fa2_bwd(const AttnBwdParams*, void* stream, char* err, int errlen);
// Three stages on the caller's stream:
//   1. bwd_preprocess   D = rowsum(dO * O) - dlse into d_rowsum, dq_accum := 0 (include/bwd_prepost.cuh);
//                       with sinks (attn_params.h v4) bwd_dsinks then writes d sinks [Hq] (SEMANTICS.md §18)
//   2. fa2_bwd_kernel   K/V tiles outer per CTA, tensor cores; dK/dV in registers, dQ by fp32
//                       atomics into dq_accum                                (include/bwd_fa2_kernel.cuh)
//   3. bwd_convert_dq   dq = scale * dq_accum in the output dtype; for GQA bwd_reduce_gqa sums the
//                       per-query-head fp32 dK/dV scratch (dk_accum, dv_accum) over each group.
// Scratch the caller allocates (attn_params.h): dq_accum [B, Hq, Lq, d] fp32 (zeroed here, any
// content is fine), d_rowsum [B, Hq, Lq] fp32, and only for GQA (Hq != Hkv) dk_accum / dv_accum
// [B, Hq, Lk, d] fp32 (fully overwritten, need no zeroing).
// When q, k, v or dout are not 16-byte aligned (pointer or a stride not a multiple of 8 elements),
// or dk / dv not 4-byte aligned, the main loop falls back to the fp32 SIMT kernel of the FA1
// backward (same pre/post stages): slower, same results.
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "include/attn_params.h"
#include "include/bwd_fa2_kernel.cuh"
#include "include/bwd_prepost.cuh"
#include "include/fa1_bwd_kernel.cuh"
#include "include/launch_common.cuh"

using namespace attn;
using namespace attn::bwd;

namespace {

// Tile configurations: Fa2BwdTraits<D, BC keys per CTA, BR query rows per step, warp rows of
// GEMM A / B / C, Q/dO stages, min CTAs per SM, warps per CTA (default 8), pipelined fragment
// loads>. The defaults measured fastest on the H200 (NOTES_BWD.md); each large one has a smaller
// fallback for devices with less shared memory per block (A100: 163 KB, sm_86/89: 99 KB).
using Cfg64 = Fa2BwdTraits<64, 128, 128, 4, 4, 4, 2, 1, 8, true>;  // FA2's d=64 shape, 1 CTA/SM, 178 KB
using Cfg64Small = Fa2BwdTraits<64, 64, 64, 2, 2, 2, 2, 2>;         // 2 CTAs/SM, 75 KB
using Cfg128 = Fa2BwdTraits<128, 128, 64, 4, 4, 2, 2, 1, 8, true>;  // FA2's d=128 shape, 1 CTA/SM, 173 KB
using Cfg128Small = Fa2BwdTraits<128, 64, 64, 2, 2, 2, 1, 2>;       // 2 CTAs/SM, single buffer, 87 KB
using Cfg256 = Fa2BwdTraits<256, 64, 64, 4, 2, 2, 2, 1, 16>;        // 1 CTA of 16 warps/SM, 217 KB
using Cfg256Small = Fa2BwdTraits<256, 64, 32, 4, 4, 2, 2, 1>;       // 8 warps, 143 KB

#ifdef ATTN_BWD_TUNING_VARIANTS
// The other shapes measured in NOTES_BWD.md, selected at run time with ATTN_FA2_BWD_VARIANT; only
// compiled with -DATTN_BWD_TUNING_VARIANTS (each one costs CI compile time). "small" runs the
// fallbacks above (the previous defaults); "fa2p" is the default of d = 64 / 128.
using Cfg64Db = Fa2BwdTraits<64, 128, 64, 4, 4, 2, 2, 1>;              // "db": 1 CTA/SM, BC = 128
using Cfg64DbP = Fa2BwdTraits<64, 128, 64, 4, 4, 2, 2, 1, 8, true>;    // "dbp": "db" pipelined
using Cfg64W16 = Fa2BwdTraits<64, 128, 64, 4, 4, 4, 2, 1, 16>;         // "w16": 16 warps, BC = 128
using Cfg64W16P = Fa2BwdTraits<64, 128, 64, 4, 4, 4, 2, 1, 16, true>;  // "w16p"
using Cfg64P2 = Fa2BwdTraits<64, 64, 64, 2, 2, 2, 2, 2, 8, true>;      // "p2": "small" pipelined
using Cfg128Db = Fa2BwdTraits<128, 64, 64, 2, 2, 2, 2, 1>;             // "db": 1 CTA/SM, double buffer
using Cfg128Wide = Fa2BwdTraits<128, 128, 64, 4, 4, 2, 2, 1>;          // "bc128": the default, not pipelined
using Cfg128W16 = Fa2BwdTraits<128, 128, 64, 4, 4, 2, 2, 1, 16>;       // "w16": 16 warps, BC = 128
using Cfg128W16P = Fa2BwdTraits<128, 128, 64, 4, 4, 2, 2, 1, 16, true>;  // "w16p"
using Cfg128P2 = Fa2BwdTraits<128, 64, 64, 2, 2, 2, 1, 2, 8, true>;      // "p2": "small" pipelined
using Cfg256P = Fa2BwdTraits<256, 64, 64, 4, 2, 2, 2, 1, 16, true>;      // "fa2p" / "w16p" at d = 256
#endif

bool aligned16(const void* ptr, int64_t s0, int64_t s1, int64_t s2) {
    return ((uintptr_t)ptr % 16 == 0) && s0 % 8 == 0 && s1 % 8 == 0 && s2 % 8 == 0;
}
bool aligned4(const void* ptr, int64_t s0, int64_t s1, int64_t s2) {
    return ((uintptr_t)ptr % 4 == 0) && s0 % 2 == 0 && s1 % 2 == 0 && s2 % 2 == 0;
}

bool tensor_core_ok(const AttnBwdParams& p) {
    const AttnFwdParams& f = p.fwd;
    return aligned16(f.q, f.q_batch_stride, f.q_head_stride, f.q_row_stride) &&
           aligned16(f.k, f.k_batch_stride, f.k_head_stride, f.k_row_stride) &&
           aligned16(f.v, f.v_batch_stride, f.v_head_stride, f.v_row_stride) &&
           aligned16(p.dout, p.do_batch_stride, p.do_head_stride, p.do_row_stride) &&
           aligned4(p.dk, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride) &&
           aligned4(p.dv, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride);
}

template <typename T, class Tr>
int launch_tc(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    const size_t smem = Tr::template smem_bytes<T>();
    int rc = set_smem(fa2_bwd_kernel<T, Tr>, smem, "attn_fa2_bwd", err, errlen);
    if (rc != ATTN_OK) return rc;
    dim3 grid((p.fwd.seqlen_k + Tr::BC - 1) / Tr::BC, p.fwd.heads_q, p.fwd.batch);
    fa2_bwd_kernel<T, Tr><<<grid, Tr::THREADS, smem, s>>>(p);
    return cuda_status(cudaGetLastError(), "attn_fa2_bwd: main kernel launch", err, errlen);
}

template <typename T, int D>
int launch_simt(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    using namespace attn::fa1;
    int rc = set_smem(fa1_bwd_kernel<T, D>, bwd_smem_bytes<D>(), "attn_fa2_bwd (SIMT fallback)", err, errlen);
    if (rc != ATTN_OK) return rc;
    dim3 grid((p.fwd.seqlen_k + BWD_B - 1) / BWD_B, p.fwd.heads_q, p.fwd.batch);
    fa1_bwd_kernel<T, D><<<grid, BWD_THREADS, bwd_smem_bytes<D>(), s>>>(p);
    return cuda_status(cudaGetLastError(), "attn_fa2_bwd: SIMT fallback launch", err, errlen);
}

template <typename T>
int main_loop(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    const int d = p.fwd.head_dim;
    if (!tensor_core_ok(p)) {
        return d == 64 ? launch_simt<T, 64>(p, s, err, errlen)
                       : d == 128 ? launch_simt<T, 128>(p, s, err, errlen) : launch_simt<T, 256>(p, s, err, errlen);
    }
#ifdef ATTN_BWD_TUNING_VARIANTS
    const char* var = getenv("ATTN_FA2_BWD_VARIANT");
    auto is = [var](const char* name) { return var && strcmp(var, name) == 0; };
    if (d == 64) {
        if (is("small")) return launch_tc<T, Cfg64Small>(p, s, err, errlen);
        if (is("db")) return launch_tc<T, Cfg64Db>(p, s, err, errlen);
        if (is("dbp")) return launch_tc<T, Cfg64DbP>(p, s, err, errlen);
        if (is("w16")) return launch_tc<T, Cfg64W16>(p, s, err, errlen);
        if (is("w16p")) return launch_tc<T, Cfg64W16P>(p, s, err, errlen);
        if (is("p2")) return launch_tc<T, Cfg64P2>(p, s, err, errlen);
    } else if (d == 128) {
        if (is("small")) return launch_tc<T, Cfg128Small>(p, s, err, errlen);
        if (is("db")) return launch_tc<T, Cfg128Db>(p, s, err, errlen);
        if (is("bc128")) return launch_tc<T, Cfg128Wide>(p, s, err, errlen);
        if (is("w16")) return launch_tc<T, Cfg128W16>(p, s, err, errlen);
        if (is("w16p")) return launch_tc<T, Cfg128W16P>(p, s, err, errlen);
        if (is("p2")) return launch_tc<T, Cfg128P2>(p, s, err, errlen);
    } else {
        if (is("small") || is("db")) return launch_tc<T, Cfg256Small>(p, s, err, errlen);
        if (is("fa2p") || is("w16p")) return launch_tc<T, Cfg256P>(p, s, err, errlen);
    }
#endif
    // The large shapes need more shared memory per block than an A100 (163 KB) or an sm_86 / sm_89
    // part (99 KB) grants; those run the smaller shape of the same head dim.
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (d == 64) {
        if ((size_t)optin < Cfg64::smem_bytes<T>()) return launch_tc<T, Cfg64Small>(p, s, err, errlen);
        return launch_tc<T, Cfg64>(p, s, err, errlen);
    }
    if (d == 128) {
        if ((size_t)optin < Cfg128::smem_bytes<T>()) return launch_tc<T, Cfg128Small>(p, s, err, errlen);
        return launch_tc<T, Cfg128>(p, s, err, errlen);
    }
    if ((size_t)optin < Cfg256::smem_bytes<T>()) return launch_tc<T, Cfg256Small>(p, s, err, errlen);
    return launch_tc<T, Cfg256>(p, s, err, errlen);
}

template <typename T>
int run(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    int rc = cuda_status(launch_preprocess<T>(p, s), "attn_fa2_bwd: preprocess (D = rowsum(dO * O))", err, errlen);
    if (rc != ATTN_OK) return rc;
    rc = cuda_status(launch_dsinks(p, s), "attn_fa2_bwd: d sinks", err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p.fwd.seqlen_k > 0) {
        rc = main_loop<T>(p, s, err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    return cuda_status(launch_postprocess<T>(p, s), "attn_fa2_bwd: dq convert / GQA reduce", err, errlen);
}

}  // namespace

extern "C" int attn_fa2_bwd(const AttnBwdParams* p, void* stream, char* err, int errlen) {
    if (err && errlen > 0) err[0] = '\0';
    int rc = check_bwd_params(p, "attn_fa2_bwd", err, errlen, /*sinks_ok=*/true);
    if (rc != ATTN_OK) return rc;
    if (p->fwd.batch == 0) return ATTN_OK;
    cudaStream_t s = (cudaStream_t)stream;
    return p->fwd.dtype == ATTN_FP16 ? run<__half>(*p, s, err, errlen) : run<__nv_bfloat16>(*p, s, err, errlen);
}
