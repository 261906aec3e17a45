// FlashAttention-2 backward (FA2 paper, Algorithm 2) for fp16 / bf16, head dims 64, 128, 256.
//     int attn_fa2_bwd(const AttnBwdParams*, const AttnLaunch*, char* err, int errlen);
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

#include "include/attn_params.h"
#include "include/fa2_bwd_launch.cuh"
#include "include/launch_common.cuh"

using namespace attn;
using namespace attn::bwd;

extern "C" int attn_fa2_bwd(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    if (err && errlen > 0) err[0] = '\0';
    int rc = check_bwd_params(p, "attn_fa2_bwd", err, errlen, /*sinks_ok=*/true);
    if (rc != ATTN_OK) return rc;
    if (p->fwd.batch == 0) return ATTN_OK;
    const cudaStream_t s = launch_stream(launch);
    if (p->fwd.dtype == ATTN_FP16) return run_fa2_bwd<__half>(*p, s, launch_default_tc<__half>, err, errlen);
    return run_fa2_bwd<__nv_bfloat16>(*p, s, launch_default_tc<__nv_bfloat16>, err, errlen);
}
