// FlashAttention-3 backward for Hopper (sm_90a), fp16 / bf16, head dims 64 and 128:
//     int attn_fa3_bwd(const AttnBwdParams*, void* stream, char* err, int errlen);
//     int attn_fa3_bwd_deterministic(const AttnBwdParams*, void* stream, char* err, int errlen);
// Stages on the caller's stream: bwd_preprocess (D = rowsum(dO * O) - dlse, dq_accum := 0) and, with sinks,
// bwd_dsinks (include/bwd_prepost.cuh, shared with attn_fa2_bwd); the wgmma main loop (include/hopper/
// bwd_mainloop.cuh: TMA ring, producer warpgroup, two consumer warpgroups, dK / dV in registers, dQ added into
// the fp32 dq_accum); bwd_convert_dq and, for GQA, bwd_reduce_gqa. The deterministic entry point adds the dQ
// partials in a fixed order (a semaphore per query tile, stream-ordered scratch), so two runs on the same
// inputs give bit-identical dq, dk, dv; attn_fa3_bwd's dQ sum order follows the atomics (dk, dv are
// deterministic in both). Scratch and semantics as attn_fa2_bwd's (attn_params.h, NOTES_BWD.md).
// Not handled here (ATTN_ERR_UNSUPPORTED, naming the argument): head_dim 256, devices other than sm_90,
// strides TMA cannot express, dk / dv not 4-byte aligned.
#include <cuda_runtime.h>
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_params.h"
#include "bwd_prepost.cuh"
#include "hopper/bwd_mainloop.cuh"
#include "hopper/tma_host.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::hopper;

// An ablation switch: environment variable `name` starting with '0' / '1', else `dflt`.
bool env_switch(const char* name, bool dflt) {
    const char* v = getenv(name);
    return v != nullptr && (v[0] == '0' || v[0] == '1') ? v[0] == '1' : dflt;
}

bool even_aligned(const void* ptr, int64_t s0, int64_t s1, int64_t s2) {
    return (reinterpret_cast<uintptr_t>(ptr) % 4 == 0) && s0 % 2 == 0 && s1 % 2 == 0 && s2 % 2 == 0;
}

// The fp32 dq_accum [B, Hq, Lq, d] (contiguous) as a TMA map for the reduce-add of kTmaDq builds: dims
// (d, Lq, Hq, B), box (32, 64, 1, 1) = one 128-byte-swizzled 32-column block of a consumer's 64-row tile.
int make_dq_map(CUtensorMap& map, const AttnBwdParams& p, char* err, int errlen) {
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
    cuuint32_t box[4] = {32, 64, 1, 1};
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

template <class C>
int launch_main(const AttnBwdParams& p, cudaStream_t stream, const char* name, char* err, int errlen) {
    const AttnFwdParams& f = p.fwd;
    Fa3BwdParams P{};
    P.p = p;
    const bool bf16 = f.dtype == ATTN_BF16;
    char msg[384] = {0};
    if (make_tma_tensor(P.k, "k", f.k, bf16, f.head_dim, f.seqlen_k, f.heads_kv, f.batch, f.k_row_stride,
                        f.k_head_stride, f.k_batch_stride, C::kBlockN, msg, sizeof msg) ||
        make_tma_tensor(P.v, "v", f.v, bf16, f.head_dim, f.seqlen_k, f.heads_kv, f.batch, f.v_row_stride,
                        f.v_head_stride, f.v_batch_stride, C::kBlockN, msg, sizeof msg))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    if (f.seqlen_q > 0) {
        if (make_tma_tensor(P.q, "q", f.q, bf16, f.head_dim, f.seqlen_q, f.heads_q, f.batch, f.q_row_stride,
                            f.q_head_stride, f.q_batch_stride, C::kBlockM, msg, sizeof msg) ||
            make_tma_tensor(P.dout, "dout", p.dout, bf16, f.head_dim, f.seqlen_q, f.heads_q, f.batch, p.do_row_stride,
                            p.do_head_stride, p.do_batch_stride, C::kBlockM, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    } else {
        P.q = P.k;  // never read: no query tile exists
        P.dout = P.k;
    }
    if constexpr (C::kTmaDq) {
        if (f.seqlen_q > 0 && make_dq_map(P.dq_map, p, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", name, msg);
    }
    auto kernel = fa3_bwd_kernel<C>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: cudaFuncSetAttribute(%u bytes): %s", name, C::kSmemBytes,
                          cudaGetErrorString(e));
    const int num_n = (f.seqlen_k + C::kBlockN - 1) / C::kBlockN;
    const int num_m = (f.seqlen_q + C::kBlockM - 1) / C::kBlockM;
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
    if constexpr (C::kDeterministic) {
        const size_t n = static_cast<size_t>(f.batch) * f.heads_q * (num_m > 0 ? num_m : 1);
        e = attn::scratch_alloc(reinterpret_cast<void**>(&P.dq_sem), n * sizeof(int), stream);
        if (e == cudaSuccess) e = cudaMemsetAsync(P.dq_sem, 0, n * sizeof(int), stream);
        if (e != cudaSuccess)
            return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: dQ semaphores: %s", name, cudaGetErrorString(e));
    }
    kernel<<<P.order.total(), C::kThreads, C::kSmemBytes, stream>>>(P);
    e = cudaGetLastError();
    if constexpr (C::kDeterministic) cudaFreeAsync(P.dq_sem, stream);
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: main kernel launch: %s (%s)", name, cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

template <typename T, bool kDet>
int run_typed(const AttnBwdParams& p, cudaStream_t s, const char* name, char* err, int errlen) {
    using namespace attn::bwd;
    int rc = attn::cuda_status(launch_preprocess<T>(p, s), "attn_fa3_bwd: preprocess (D = rowsum(dO * O))", err,
                               errlen);
    if (rc != ATTN_OK) return rc;
    rc = attn::cuda_status(launch_dsinks(p, s), "attn_fa3_bwd: d sinks", err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p.fwd.seqlen_k > 0) {
        // The default adds dQ through shared memory and a TMA reduce-add issued by a producer warp (kTmaDq; H200
        // run 3 of NOTES_FA3_BWD.md: +8-10% non-deterministic, +36-48% deterministic over the atomics build).
        // It runs without the GEMM / element-wise overlap at both head dims (d = 64: +3%, A/B of session 6, run 8
        // of NOTES_FA3_BWD.md). ATTN_FA3_BWD_DQ=atomic picks the earlier build (consumers add dQ with fp32
        // atomics), where ATTN_FA3_BWD_OVERLAP=0 / 1 picks the overlap (default: at d = 64 only) (ablation).
        // At d = 64 the default build streams 128-row query tiles; ATTN_FA3_BWD_BLOCK_M=64 picks its 64-row build
        // (the default before session 8; the atomics build has 64-row tiles).
        const bool d64 = p.fwd.head_dim == 64;
        const char* dqm = getenv("ATTN_FA3_BWD_DQ");
        const char* bm = getenv("ATTN_FA3_BWD_BLOCK_M");
        const bool m64 = bm != nullptr && strcmp(bm, "64") == 0;
        // At d = 64 each tile's dQ is computed by one consumer, the two taking turns (kDqAlt), at d = 128 every
        // tile's dQ is split by columns between them (H200 runs 11-12 of NOTES_FA3_BWD.md: turns +7-8% at d = 64,
        // 2-7% slower at d = 128); ATTN_FA3_BWD_DQ_SPLIT=1 / 0 picks the split (by rows at d = 64) / the turns at
        // both head dims.
        const bool split = env_switch("ATTN_FA3_BWD_DQ_SPLIT", !d64);
        const bool tma = !(dqm != nullptr && strcmp(dqm, "atomic") == 0);
        const bool overlap = kDet ? d64 : env_switch("ATTN_FA3_BWD_OVERLAP", d64);
        if (tma && d64)
            rc = m64     ? launch_main<Fa3BwdConfig<64, T, kDet, false, true>>(p, s, name, err, errlen)
                 : split ? launch_main<Fa3BwdConfig<64, T, kDet, false, true, 2, 128>>(p, s, name, err, errlen)
                         : launch_main<Fa3BwdConfig<64, T, kDet, false, true, 2, 128, true>>(p, s, name, err, errlen);
        else if (tma)
            rc = split ? launch_main<Fa3BwdConfig<128, T, kDet, false, true>>(p, s, name, err, errlen)
                       : launch_main<Fa3BwdConfig<128, T, kDet, false, true, 2, 64, true>>(p, s, name, err, errlen);
        else if (overlap == d64 || kDet)
            rc = d64 ? launch_main<Fa3BwdConfig<64, T, kDet, true>>(p, s, name, err, errlen)
                     : launch_main<Fa3BwdConfig<128, T, kDet, false>>(p, s, name, err, errlen);
        else
            rc = d64 ? launch_main<Fa3BwdConfig<64, T, false, false>>(p, s, name, err, errlen)
                     : launch_main<Fa3BwdConfig<128, T, false, true>>(p, s, name, err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    return attn::cuda_status(launch_postprocess<T>(p, s), "attn_fa3_bwd: dq convert / GQA reduce", err, errlen);
}

int run(const AttnBwdParams* p, bool deterministic, void* stream, char* err, int errlen) {
    const char* name = deterministic ? "attn_fa3_bwd_deterministic" : "attn_fa3_bwd";
    if (err && errlen > 0) err[0] = '\0';
    int rc = attn::check_bwd_params(p, name, err, errlen, /*sinks_ok=*/true);
    if (rc != ATTN_OK) return rc;
    const AttnFwdParams& f = p->fwd;
    if (f.head_dim != 64 && f.head_dim != 128)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d: only 64 and 128 are compiled", name,
                          f.head_dim);
    if (f.batch == 0) return ATTN_OK;
    int major = 0;
    attn::device_sms(&major);
    if (major != 9)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: device compute capability %d.x: this kernel is built for sm_90a (Hopper) only", name,
                          major);
    if (f.seqlen_k > 0 && (!even_aligned(p->dk, p->dk_batch_stride, p->dk_head_stride, p->dk_row_stride) ||
                           !even_aligned(p->dv, p->dv_batch_stride, p->dv_head_stride, p->dv_row_stride)))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: dk=%p / dv=%p with strides (%lld, %lld, %lld) / (%lld, %lld, %lld): element pairs are "
                          "stored 4 bytes at a time (4-byte aligned pointers, even strides)",
                          name, p->dk, p->dv, (long long)p->dk_batch_stride, (long long)p->dk_head_stride,
                          (long long)p->dk_row_stride, (long long)p->dv_batch_stride, (long long)p->dv_head_stride,
                          (long long)p->dv_row_stride);
    auto s = static_cast<cudaStream_t>(stream);
    if (f.dtype == ATTN_FP16)
        return deterministic ? run_typed<__half, true>(*p, s, name, err, errlen)
                             : run_typed<__half, false>(*p, s, name, err, errlen);
    return deterministic ? run_typed<__nv_bfloat16, true>(*p, s, name, err, errlen)
                         : run_typed<__nv_bfloat16, false>(*p, s, name, err, errlen);
}

}  // namespace

extern "C" int attn_fa3_bwd(const AttnBwdParams* p, void* stream, char* err, int errlen) {
    return run(p, false, stream, err, errlen);
}

extern "C" int attn_fa3_bwd_deterministic(const AttnBwdParams* p, void* stream, char* err, int errlen) {
    return run(p, true, stream, err, errlen);
}
