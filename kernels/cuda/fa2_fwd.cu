// FlashAttention-2 forward: one CTA per 128-row query tile, split-Q across warps, mma.sync
// m16n8k16 with ldmatrix, cp.async K/V ping-pong, online softmax with deferred normalisation.
// Semantics: oracles/SEMANTICS.md (causal alignments, window, GQA, varlen, softcap, LSE, §8 fully
// masked rows, §18 attention sinks). The kernel body is include/fwd_kernel.cuh; this file validates and dispatches.
#include "attn_params.h"
#include "fwd_defaults.cuh"
#include "fwd_kernel.cuh"
#include "launch_common.cuh"

namespace {

template <class Tr>
cudaError_t launch_tiles(const AttnFwdParams& p, cudaStream_t stream) {
    const dim3 grid((p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM, p.heads_q, p.batch);
    return attn::launch_fwd<Tr, attn::FwdMode::kFa2>(p, grid, 1, stream);
}

// Largest dynamic shared memory a block may opt into on the current device (0 if unknown).
int max_block_smem() {
    const attn::DeviceInfo* d = attn::device_info();
    return d != nullptr ? d->smem_optin : 0;
}

template <int D, typename Elem>
cudaError_t run_fa2(const AttnFwdParams& p, cudaStream_t stream) {
    using Tr = attn::FwdTraits<D, attn::Fa2FwdDefault<D>, Elem>;
    if constexpr (D == 256) {
        using Small = attn::FwdTraits<256, attn::Fa2FwdSmallSmem, Elem>;
        const int avail = max_block_smem();
        if (avail > 0 && avail < Tr::kSmemBytes && avail >= Small::kSmemBytes) return launch_tiles<Small>(p, stream);
    }
    return launch_tiles<Tr>(p, stream);
}

template <typename Elem>
cudaError_t dispatch_dim(const AttnFwdParams& p, cudaStream_t stream) {
    switch (p.head_dim) {
        case 64: return run_fa2<64, Elem>(p, stream);
        case 128: return run_fa2<128, Elem>(p, stream);
        default: return run_fa2<256, Elem>(p, stream);
    }
}

}  // namespace

extern "C" int attn_fa2_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    int rc = attn::validate_fwd(p, "attn_fa2_fwd", err, errlen, /*paged_ok=*/false, /*sinks_ok=*/true);
    if (rc != ATTN_OK) return rc;
    if (p->batch == 0 || p->seqlen_q == 0) return ATTN_OK;
    if (p->seqlen_q > 65535 * 128)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "attn_fa2_fwd: seqlen_q=%d exceeds %d", p->seqlen_q,
                          65535 * 128);
    const cudaStream_t s = attn::launch_stream(launch);
    cudaError_t e = p->dtype == ATTN_BF16 ? dispatch_dim<__nv_bfloat16>(*p, s) : dispatch_dim<__half>(*p, s);
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "attn_fa2_fwd: launch failed: %s (%s)", cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}
