// FlashAttention-3 forward for Hopper (sm_90a): TMA loads into a K/V shared-memory ring completing on
// mbarriers, wgmma for S = Q K^T (both operands in shared memory) and O += P V (P from registers), a
// producer warpgroup and two or three consumer warpgroups with setmaxnreg, pingpong between the consumers,
// intra-warpgroup overlap of softmax and GEMMs, a persistent longest-first tile scheduler.
// Semantics: oracles/SEMANTICS.md. The kernel is include/hopper/mainloop.cuh, its host side hopper/fwd_launch.cuh,
// the build of each head dim hopper/fwd_defaults.cuh; this file validates and dispatches. The ablation and tuning
// builds are the lab's (kernels/cuda/lab/fa3_fwd_lab.cu), not this library's.
#include <cuda_runtime.h>

#include "attn_params.h"
#include "hopper/fwd_defaults.cuh"
#include "hopper/fwd_launch.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::hopper;
using attn::ScoreScale;

constexpr const char* kName = "attn_fa3_fwd";

int run(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    int sms = 0;
    bool empty = false;
    int rc = fwd_preflight(p, kName, &sms, &empty, err, errlen, fa3_fwd_head_dims);
    if (rc != ATTN_OK || empty) return rc;
    return by_fa3_head_dims(*p, [&](auto dims, auto elem) {
        constexpr int D = decltype(dims)::value, DV = decltype(dims)::dv;
        return launch_scaled<D, decltype(elem), Fa3Default<D, DV>, DV>(*p, launch, sms, fwd_l2_budget(*p), kName, err,
                                                                      errlen);
    });
}

}  // namespace

extern "C" int attn_fa3_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    return run(p, launch, err, errlen);
}

extern "C" int64_t attn_fa3_fwd_workspace(const AttnFwdParams* p) {
    if (attn::validate_fwd(p, kName, nullptr, 0, /*paged_ok=*/false, /*sinks_ok=*/false, fa3_fwd_head_dims) != ATTN_OK)
        return -1;
    return by_fa3_head_dims(*p, [&](auto dims, auto elem) -> int64_t {
        constexpr int D = decltype(dims)::value, DV = decltype(dims)::dv;
        return fwd_workspace_bytes<Fa3Config<D, decltype(elem), Fa3Default<D, DV>, ScoreScale::kFolded, DV>>();
    });
}
