// The lab's FA2 backward tile shapes (attn_lab.h AttnLabFa2BwdVariant): the alternatives the FA2 backward design record
// measured against the shipped shapes (include/fa2_bwd_launch.cuh), run through the shipped host side.
#include <cuda_runtime.h>

#include "attn_lab.h"
#include "fa2_bwd_launch.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn;
using namespace attn::bwd;

// Fa2BwdTraits<D, keys per CTA, query rows per step, warp rows of GEMM A / B / C, Q/dO stages, min CTAs per SM,
// warps per CTA, pipelined fragment loads> (bwd_fa2_kernel.cuh).
using Cfg64Db = Fa2BwdTraits<64, 128, 64, 4, 4, 2, 2, 1>;                // db: 1 CTA/SM, 128 keys
using Cfg64DbP = Fa2BwdTraits<64, 128, 64, 4, 4, 2, 2, 1, 8, true>;      // dbp: db pipelined
using Cfg64W16 = Fa2BwdTraits<64, 128, 64, 4, 4, 4, 2, 1, 16>;           // w16: 16 warps, 128 keys
using Cfg64W16P = Fa2BwdTraits<64, 128, 64, 4, 4, 4, 2, 1, 16, true>;    // w16p
using Cfg64P2 = Fa2BwdTraits<64, 64, 64, 2, 2, 2, 2, 2, 8, true>;        // p2: small pipelined
using Cfg128Db = Fa2BwdTraits<128, 64, 64, 2, 2, 2, 2, 1>;               // db: 1 CTA/SM, double buffer
using Cfg128Wide = Fa2BwdTraits<128, 128, 64, 4, 4, 2, 2, 1>;            // bc128: the shipped shape, not pipelined
using Cfg128W16 = Fa2BwdTraits<128, 128, 64, 4, 4, 2, 2, 1, 16>;         // w16: 16 warps, 128 keys
using Cfg128W16P = Fa2BwdTraits<128, 128, 64, 4, 4, 2, 2, 1, 16, true>;  // w16p
using Cfg128P2 = Fa2BwdTraits<128, 64, 64, 2, 2, 2, 1, 2, 8, true>;      // p2: small pipelined
using Cfg256P = Fa2BwdTraits<256, 64, 64, 4, 2, 2, 2, 1, 16, true>;      // fa2p / w16p at d = 256

// The tensor-core main loop of `variant` (ATTN_ERR_UNSUPPORTED naming it where the head dim has no such shape).
template <typename T>
int variant_tc(const AttnBwdParams& p, int variant, cudaStream_t s, char* err, int errlen) {
    const int d = p.fwd.head_dim;
    if (variant == ATTN_LAB_FA2_BWD_DEFAULT) return launch_default_tc<T>(p, s, err, errlen);
    if (d == 64) {
        switch (variant) {
            case ATTN_LAB_FA2_BWD_SMALL: return launch_tc<T, Cfg64Small>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_DB: return launch_tc<T, Cfg64Db>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_DBP: return launch_tc<T, Cfg64DbP>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_W16: return launch_tc<T, Cfg64W16>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_W16P: return launch_tc<T, Cfg64W16P>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_P2: return launch_tc<T, Cfg64P2>(p, s, err, errlen);
            default: break;
        }
    } else if (d == 128) {
        switch (variant) {
            case ATTN_LAB_FA2_BWD_SMALL: return launch_tc<T, Cfg128Small>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_DB: return launch_tc<T, Cfg128Db>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_BC128: return launch_tc<T, Cfg128Wide>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_W16: return launch_tc<T, Cfg128W16>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_W16P: return launch_tc<T, Cfg128W16P>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_P2: return launch_tc<T, Cfg128P2>(p, s, err, errlen);
            default: break;
        }
    } else {
        switch (variant) {
            case ATTN_LAB_FA2_BWD_SMALL:
            case ATTN_LAB_FA2_BWD_DB: return launch_tc<T, Cfg256Small>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_FA2P:
            case ATTN_LAB_FA2_BWD_W16P: return launch_tc<T, Cfg256P>(p, s, err, errlen);
            default: break;
        }
    }
    return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "attn_lab_fa2_bwd: head_dim=%d: no shape for variant=%d", d,
                variant);
}

}  // namespace

extern "C" int attn_lab_fa2_bwd(const AttnBwdParams* p, int32_t variant, const AttnLaunch* launch, char* err,
                                int errlen) {
    if (err && errlen > 0) err[0] = '\0';
    int rc = check_bwd_params(p, "attn_lab_fa2_bwd", err, errlen, /*sinks_ok=*/true);
    if (rc != ATTN_OK) return rc;
    if (variant < ATTN_LAB_FA2_BWD_DEFAULT || variant > ATTN_LAB_FA2_BWD_FA2P)
        return fail(err, errlen, ATTN_ERR_INVALID, "attn_lab_fa2_bwd: variant=%d: 0 (the shipped shape) to %d", variant,
                    ATTN_LAB_FA2_BWD_FA2P);
    if (p->fwd.batch == 0) return ATTN_OK;
    const cudaStream_t s = launch_stream(launch);
    auto tc = [variant](const AttnBwdParams& q, cudaStream_t st, char* e, int n) {
        return q.fwd.dtype == ATTN_FP16 ? variant_tc<__half>(q, variant, st, e, n)
                                        : variant_tc<__nv_bfloat16>(q, variant, st, e, n);
    };
    if (p->fwd.dtype == ATTN_FP16) return run_fa2_bwd<__half>(*p, s, tc, err, errlen);
    return run_fa2_bwd<__nv_bfloat16>(*p, s, tc, err, errlen);
}
