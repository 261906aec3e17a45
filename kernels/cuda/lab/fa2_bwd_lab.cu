// The lab's FA2 backward tile shapes (attn_lab.h AttnLabFa2BwdVariant): the alternatives the FA2 backward design record
// measured against the shipped shapes (include/fa2_bwd_launch.cuh), run through the shipped host side.
#include <cuda_runtime.h>

#include "attn_lab.h"
#include "fa2_bwd_launch.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn;
using namespace attn::bwd;

// Each shape is the shipped shape of its head dim (bwd_fa2_defaults.cuh) or the fallback, with the members it changes
// named (bwd_fa2_kernel.cuh Fa2BwdTile).
// db: one CTA per SM, 128 keys (d = 64); a double buffer (d = 128).
struct Db64 : Fa2BwdDefault<64> {
    static constexpr int block_m = 64, dq_warps_m = 2;
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kInOrder;
};
struct Db128 : Fa2BwdSmall<128> {
    static constexpr int q_stages = 2, min_ctas_per_sm = 1;
};
// dbp: db with pipelined fragment loads (d = 64).
struct DbP64 : Db64 {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};
// w16: 16 warps, 128 keys; w16p: pipelined.
struct W16_64 : Db64 {
    static constexpr int warps = 16, dq_warps_m = 4;
};
struct W16P64 : W16_64 {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};
struct W16_128 : Fa2BwdDefault<128> {
    static constexpr int warps = 16;
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kInOrder;
};
struct W16P128 : W16_128 {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};
// p2: the small shapes pipelined.
struct P2_64 : Fa2BwdSmall<64> {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};
struct P2_128 : Fa2BwdSmall<128> {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};
// bc128: the shipped d = 128 shape without pipelining.
struct Bc128 : Fa2BwdDefault<128> {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kInOrder;
};
// fa2p / w16p at d = 256: the shipped shape pipelined.
struct P256 : Fa2BwdDefault<256> {
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kPipelined;
};

using Cfg64Db = Fa2BwdTraits<64, Db64>;
using Cfg64DbP = Fa2BwdTraits<64, DbP64>;
using Cfg64W16 = Fa2BwdTraits<64, W16_64>;
using Cfg64W16P = Fa2BwdTraits<64, W16P64>;
using Cfg64P2 = Fa2BwdTraits<64, P2_64>;
using Cfg128Db = Fa2BwdTraits<128, Db128>;
using Cfg128Wide = Fa2BwdTraits<128, Bc128>;
using Cfg128W16 = Fa2BwdTraits<128, W16_128>;
using Cfg128W16P = Fa2BwdTraits<128, W16P128>;
using Cfg128P2 = Fa2BwdTraits<128, P2_128>;
using Cfg256P = Fa2BwdTraits<256, P256>;

// The tensor-core main loop of `variant` (ATTN_ERR_UNSUPPORTED naming it where the head dim has no such shape).
template <typename T>
int variant_tc(const AttnBwdParams& p, int variant, cudaStream_t s, char* err, int errlen) {
    const int d = p.fwd.head_dim;
    if (variant == ATTN_LAB_FA2_BWD_DEFAULT) return launch_default_tc<T>(p, s, err, errlen);
    if (d == 64) {
        switch (variant) {
            case ATTN_LAB_FA2_BWD_SMALL: return launch_tc<T, CfgSmall<64>>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_DB: return launch_tc<T, Cfg64Db>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_DBP: return launch_tc<T, Cfg64DbP>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_W16: return launch_tc<T, Cfg64W16>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_W16P: return launch_tc<T, Cfg64W16P>(p, s, err, errlen);
            case ATTN_LAB_FA2_BWD_P2: return launch_tc<T, Cfg64P2>(p, s, err, errlen);
            default: break;
        }
    } else if (d == 128) {
        switch (variant) {
            case ATTN_LAB_FA2_BWD_SMALL: return launch_tc<T, CfgSmall<128>>(p, s, err, errlen);
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
            case ATTN_LAB_FA2_BWD_DB: return launch_tc<T, CfgSmall<256>>(p, s, err, errlen);
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
