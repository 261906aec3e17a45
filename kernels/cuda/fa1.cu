// FlashAttention-1 reference kernels: forward (Algorithm 1 loop order, statistics in global
// memory) and backward (Algorithm 4 with recomputation from the LSE). fp32 SIMT math: these are
// references for the harness, not speed kernels. Launchers follow attn_params.h:
//     int attn_fa1_fwd(const AttnFwdParams*, const AttnLaunch*, char* err, int errlen);
//     int attn_fa1_bwd(const AttnBwdParams*, const AttnLaunch*, char* err, int errlen);
//     int64_t attn_fa1_fwd_workspace(const AttnFwdParams*);
// Kernels: include/fa1_fwd_kernel.cuh, include/fa1_bwd_kernel.cuh; D and dQ pre/post passes:
// include/bwd_prepost.cuh. Notes and measurements: docs/fa1_fa2.md.
#include <cuda_runtime.h>

#include "include/attn_params.h"
#include "include/launch_common.cuh"
#include "include/bwd_prepost.cuh"
#include "include/fa1_bwd_kernel.cuh"
#include "include/fa1_fwd_kernel.cuh"

using namespace attn;
using namespace attn::bwd;
using namespace attn::fa1;

namespace {

// The fp32 running output and the m/l statistics of Algorithm 1 live in scratch the launcher takes from the launch's
// workspace (or, without one, from the stream-ordered allocator, freed after the kernel; stream-ordered either way,
// so no synchronisation): [B, Hq, Lq, D] + 2 x [B, Hq, Lq] floats.
int64_t fa1_scratch_bytes(const AttnFwdParams& p) {
    return static_cast<int64_t>(sizeof(float)) * p.batch * p.heads_q * p.seqlen_q * (p.head_dim + 2);
}

template <typename T, int D>
int fa1_fwd_launch(const AttnFwdParams& p, const AttnLaunch* launch, char* err, int errlen) {
    const char* who = "attn_fa1_fwd";
    int rc = set_smem(fa1_fwd_kernel<T, D>, fwd_smem_bytes<D>(), who, err, errlen);
    if (rc != ATTN_OK) return rc;
    int major = 0, sms = attn::device_sms(&major);
    if (sms <= 0) sms = 132;
    const int qtiles = (p.seqlen_q + FWD_B - 1) / FWD_B;
    const int heads = p.batch * p.heads_q;
    int chunks = (4 * sms + heads - 1) / heads;
    chunks = chunks < 1 ? 1 : (chunks > qtiles ? qtiles : chunks);
    const int rows_per_chunk = ((qtiles + chunks - 1) / chunks) * FWD_B;
    chunks = (p.seqlen_q + rows_per_chunk - 1) / rows_per_chunk;

    const size_t rows = (size_t)heads * p.seqlen_q;
    LaunchScratch ls(launch);
    float* scratch = nullptr;
    rc = ls.take((void**)&scratch, fa1_scratch_bytes(p), "attn_fa1_fwd: scratch of the O/m/l partials", err, errlen);
    if (rc != ATTN_OK) return rc;
    dim3 grid(chunks, p.heads_q, p.batch);
    fa1_fwd_kernel<T, D><<<grid, FWD_THREADS, fwd_smem_bytes<D>(), ls.stream()>>>(
        p, rows_per_chunk, scratch, scratch + rows * D, scratch + rows * (D + 1));
    cudaError_t e = cudaGetLastError();
    cudaError_t e2 = ls.release();
    rc = cuda_status(e, "attn_fa1_fwd: kernel launch", err, errlen);
    if (rc != ATTN_OK) return rc;
    return cuda_status(e2, "attn_fa1_fwd: cudaFreeAsync", err, errlen);
}

template <typename T, int D>
int fa1_bwd_launch(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    const char* who = "attn_fa1_bwd";
    const AttnFwdParams& f = p.fwd;
    int rc = cuda_status(launch_preprocess<T>(p, s), "attn_fa1_bwd: preprocess (D = rowsum(dO * O))", err, errlen);
    if (rc != ATTN_OK) return rc;
    if (f.seqlen_k > 0) {
        rc = set_smem(fa1_bwd_kernel<T, D>, bwd_smem_bytes<D>(), who, err, errlen);
        if (rc != ATTN_OK) return rc;
        dim3 grid((f.seqlen_k + BWD_B - 1) / BWD_B, f.heads_q, f.batch);
        fa1_bwd_kernel<T, D><<<grid, BWD_THREADS, bwd_smem_bytes<D>(), s>>>(p);
        rc = cuda_status(cudaGetLastError(), "attn_fa1_bwd: main kernel launch", err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    return cuda_status(launch_postprocess<T>(p, s), "attn_fa1_bwd: dq convert / GQA reduce", err, errlen);
}

template <typename T>
int fa1_fwd_dispatch(const AttnFwdParams& p, const AttnLaunch* launch, char* err, int errlen) {
    switch (p.head_dim) {
        case 64: return fa1_fwd_launch<T, 64>(p, launch, err, errlen);
        case 128: return fa1_fwd_launch<T, 128>(p, launch, err, errlen);
        default: return fa1_fwd_launch<T, 256>(p, launch, err, errlen);
    }
}

template <typename T>
int fa1_bwd_dispatch(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    switch (p.fwd.head_dim) {
        case 64: return fa1_bwd_launch<T, 64>(p, s, err, errlen);
        case 128: return fa1_bwd_launch<T, 128>(p, s, err, errlen);
        default: return fa1_bwd_launch<T, 256>(p, s, err, errlen);
    }
}

}  // namespace

extern "C" int attn_fa1_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    if (err && errlen > 0) err[0] = '\0';
    int rc = check_fwd_params(p, "attn_fa1_fwd", err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p->batch == 0 || p->seqlen_q == 0) return ATTN_OK;  // nothing to write
    return p->dtype == ATTN_FP16 ? fa1_fwd_dispatch<__half>(*p, launch, err, errlen)
                                 : fa1_fwd_dispatch<__nv_bfloat16>(*p, launch, err, errlen);
}

extern "C" int64_t attn_fa1_fwd_workspace(const AttnFwdParams* p) {
    if (check_fwd_params(p, "attn_fa1_fwd", nullptr, 0) != ATTN_OK) return -1;
    return p->batch == 0 || p->seqlen_q == 0 ? 0 : workspace_piece(fa1_scratch_bytes(*p));
}

extern "C" int attn_fa1_bwd(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    if (err && errlen > 0) err[0] = '\0';
    int rc = check_bwd_params(p, "attn_fa1_bwd", err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p->fwd.batch == 0) return ATTN_OK;
    cudaStream_t s = launch_stream(launch);
    return p->fwd.dtype == ATTN_FP16 ? fa1_bwd_dispatch<__half>(*p, s, err, errlen)
                                     : fa1_bwd_dispatch<__nv_bfloat16>(*p, s, err, errlen);
}
