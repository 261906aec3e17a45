// FlashAttention-3 backward for Hopper (sm_90a), fp16 / bf16, head dims d = dv in {64, 96, 128, 192, 256} and
// (d, dv) = (192, 128):
//     int attn_fa3_bwd(const AttnBwdParams*, const AttnLaunch*, char* err, int errlen);
//     int attn_fa3_bwd_deterministic(const AttnBwdParams*, const AttnLaunch*, char* err, int errlen);
// Stages on the launch's stream: bwd_preprocess (D = rowsum(dO * O) - dlse, dq_accum := 0) and, with sinks,
// bwd_dsinks (include/bwd_prepost.cuh, shared with attn_fa2_bwd); the wgmma main loop (include/hopper/
// bwd_mainloop.cuh: TMA ring, producer warpgroup, two consumer warpgroups, dK / dV in registers, dQ added into
// the fp32 dq_accum; d = 256: include/hopper/bwd_wide.cuh, the consumers sharing 64 keys, one holding dK and the
// other dV; d = 192 and (192, 128): include/hopper/bwd_sliced.cuh, three consumers sharing 96 keys, each a 64-column
// slice of dK, dV and dQ); bwd_convert_dq and, for GQA, bwd_reduce_gqa (host side: hopper/bwd_launch.cuh). The
// deterministic entry point adds the dQ partials in a fixed order (a semaphore per query tile, in the launch's
// workspace), so two runs on the same inputs give bit-identical dq, dk, dv; attn_fa3_bwd's dQ sum order follows the
// atomics (dk, dv are deterministic in both). Scratch and semantics as attn_fa2_bwd's (attn_params.h, docs/fa1_fa2.md).
// Not handled here (ATTN_ERR_UNSUPPORTED, naming the argument): other head dims (and dv != d but (192, 128)), devices
// other than sm_90, strides TMA cannot express, dk / dv not 4-byte aligned. The ablation builds (dQ by atomics, the GEMM / element-wise
// overlap, other tiles and dQ splits) are the lab's (kernels/cuda/lab/fa3_bwd_lab.cu), not this library's.
#include <cuda_runtime.h>

#include "attn_params.h"
#include "hopper/bwd_defaults.cuh"
#include "hopper/bwd_launch.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::hopper;

// f(config) with the shipped build of p as a value of its configuration type (Fa3BwdConfig or Fa3BwdWideConfig,
// bwd_defaults.cuh Fa3BwdConfigOf) and its element type.
template <bool kDeterministic, class F>
auto by_build(const AttnBwdParams& p, F&& f) {
    return bwd_by_dims(p, [&](auto dk, auto dv, auto elem) {
        constexpr int D = decltype(dk)::value, DV = decltype(dv)::value;
        using S = std::conditional_t<kDeterministic, Deterministic<Fa3BwdDefault<D, DV>>, Fa3BwdDefault<D, DV>>;
        return f(Fa3BwdConfigOf<D, DV, decltype(elem), S>{}, elem);
    });
}

template <bool kDeterministic>
int run(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    const char* name = kDeterministic ? "attn_fa3_bwd_deterministic" : "attn_fa3_bwd";
    bool empty = false;
    int rc = bwd_preflight(p, name, &empty, err, errlen);
    if (rc != ATTN_OK || empty) return rc;
    return by_build<kDeterministic>(*p, [&](auto c, auto elem) {
        return run_bwd<decltype(elem), decltype(c)>(*p, launch, name, err, errlen);
    });
}

}  // namespace

extern "C" int attn_fa3_bwd(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    return run<false>(p, launch, err, errlen);
}

extern "C" int attn_fa3_bwd_deterministic(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    return run<true>(p, launch, err, errlen);
}

extern "C" int64_t attn_fa3_bwd_deterministic_workspace(const AttnBwdParams* p) {
    if (p == nullptr ||
        attn::check_bwd_params(p, "attn_fa3_bwd_deterministic", nullptr, 0, true, fa3_bwd_head_dims) != ATTN_OK)
        return -1;
    return by_build<true>(*p, [&](auto c, auto) { return bwd_workspace_bytes<decltype(c)>(*p); });
}
