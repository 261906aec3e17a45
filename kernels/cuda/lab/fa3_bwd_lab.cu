// The lab's FA3 backward builds (attn_lab.h AttnLabFa3BwdVariant): the main-loop alternatives the FA3 backward design
// record measures against the shipped builds (hopper/bwd_defaults.cuh), each a named schedule (hopper/bwd_mainloop.cuh
// Fa3BwdSchedule) run through the shipped host side (hopper/bwd_launch.cuh).
#include <cuda_runtime.h>

#include <type_traits>

#include "attn_lab.h"
#include "hopper/bwd_defaults.cuh"
#include "hopper/bwd_launch.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::hopper;

constexpr const char* kName = "attn_lab_fa3_bwd";

// dQ added by the consumers' fp32 atomics, with or without the GEMM / element-wise overlap (the shipped builds until
// the TMA reduce-add replaced them; the overlap paid at d = 64 only).
template <bool kOverlap>
struct AtomicDq : Fa3BwdSchedule {
    static constexpr bool overlap = kOverlap;
};
// The TMA reduce-add with 64-row query tiles and dQ = dS K: at d = 64 each consumer adding a full-width partial over
// its own keys (the shipped build has 128-row tiles); at d = 96, 128 every tile's dQ split by columns between the
// consumers (the shipped build until the 80-row tiles with dQ^T = K^T dS^T).
struct Rows64 : Fa3BwdSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
};
// The other way of sharing a tile's dQ: split by rows at d = 64 (128-row tiles), turns at d = 128 (64-row tiles).
template <int D>
struct OtherDqSplit : std::conditional_t<D == 64, Fa3BwdDefault<64>, Rows64> {
    static constexpr DqSplit dq_split = D == 64 ? DqSplit::kSplit : DqSplit::kAlternate;
};

// The shipped build of head dim D with dK / dV stored 4 bytes at a time from the accumulators (DkvStore::kDirect:
// the shipped builds until dK / dV were staged through shared memory).
template <int D>
struct DirectDkv : Fa3BwdDefault<D> {
    static constexpr DkvStore dkv_store = DkvStore::kDirect;
};

// d = 64's shipped build with the dQ turns on the same tile (DqSplit::kAlternate: consumer it % 2 computes the dQ of
// tile it; the shipped build until the turns went one tile behind).
struct AlternateDq : Fa3BwdDefault<64> {
    static constexpr DqSplit dq_split = DqSplit::kAlternate;
};

// d = 192 and (192, 128) on bwd_wide.cuh's tiling: 64 keys shared by two consumers, dQ through shared memory and the
// TMA reduce-add (the shipped builds until bwd_sliced.cuh's 96-key tiles).
struct SharedKeys64 : Fa3BwdWideSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
};

// dQ by the consumers' float2 atomics, dO in the Q ring's stages (the shipped d = 256 build until the TMA reduce-add
// with one dO stage replaced it).
template <int D, int DV>
struct WideAtomicDq : Fa3BwdWideSchedule {
    static constexpr DqAdd dq_add = DqAdd::kAtomics;
};

// dQ by the consumers' float4 atomics (in place of the shipped TMA reduce-add).
template <int D, int DV>
struct WideDqFloat4 : WideAtomicDq<D, DV> {
    static constexpr DqAtomicWidth dq_atomic_width = DqAtomicWidth::kFloat4;
};
// dQ through one 16 KB buffer per consumer (its blocks in turn) and the TMA reduce-add, dO in one stage: the shipped
// d = 256 build, here for (192, 128) (not at d = dv = 192, whose third dQ block alternates between the consumers).
template <int D, int DV>
struct WideTmaDqOneDoStage : Fa3BwdWideSchedule {
    static constexpr DqAdd dq_add = DqAdd::kTmaReduce;
    static constexpr DqStaging dq_staging = DqStaging::kBufferPerConsumer;
    static constexpr int do_stages = 1;
};

// f(schedule) with the schedule of `variant` for the wide head dims (D, DV); the reason it has none in *why.
template <int D, int DV, class F>
int with_wide_schedule(int variant, F&& f, const char** why) {
    switch (variant) {
        case ATTN_LAB_FA3_BWD_DEFAULT: return f(Fa3BwdDefault<D, DV>{});
        case ATTN_LAB_FA3_BWD_ATOMIC_DQ: return f(WideAtomicDq<D, DV>{});
        case ATTN_LAB_FA3_BWD_WIDE_DQ_FLOAT4: return f(WideDqFloat4<D, DV>{});
        default: break;
    }
    if constexpr (D == 192) {
        if (variant == ATTN_LAB_FA3_BWD_SHARED_KEYS64) return f(SharedKeys64{});
    } else if (variant == ATTN_LAB_FA3_BWD_SHARED_KEYS64) {
        *why = "is a build of d = 192 only (the shipped d = 256 build has 64-key tiles)";
        return -1;
    }
    if constexpr (!(D == 192 && DV == 192)) {
        if (variant == ATTN_LAB_FA3_BWD_WIDE_TMA_DQ_ONE_DO_STAGE) return f(WideTmaDqOneDoStage<D, DV>{});
    } else if (variant == ATTN_LAB_FA3_BWD_WIDE_TMA_DQ_ONE_DO_STAGE) {
        *why = "has no build at d = dv = 192 (its third dQ block alternates between the consumers)";
        return -1;
    }
    *why = (variant > 0 && variant < ATTN_LAB_FA3_BWD_WIDE_DQ_FLOAT4) || variant == ATTN_LAB_FA3_BWD_DIRECT_DKV ||
                       variant == ATTN_LAB_FA3_BWD_ALTERNATE_DQ
               ? "is a build of d = dv in {64, 96, 128}"
                                                                    : "is not a variant (0 to 9)";
    return -1;
}

// f(schedule) with the schedule of `variant` for head dim D, deterministic or not; the reason it has none in *why.
template <int D, bool kDeterministic, class F>
int with_schedule(int variant, F&& f, const char** why) {
    switch (variant) {
        case ATTN_LAB_FA3_BWD_DEFAULT: return f(Fa3BwdDefault<D>{});
        case ATTN_LAB_FA3_BWD_ATOMIC_DQ: return f(AtomicDq<D == 64>{});
        case ATTN_LAB_FA3_BWD_OTHER_DQ_SPLIT: return f(OtherDqSplit<D>{});
        default: break;
    }
    if constexpr (!kDeterministic) {
        if (variant == ATTN_LAB_FA3_BWD_ATOMIC_DQ_OTHER_OVERLAP) return f(AtomicDq<D != 64>{});
    }
    if (variant == ATTN_LAB_FA3_BWD_ROWS64) return f(Rows64{});
    if (variant == ATTN_LAB_FA3_BWD_DIRECT_DKV) return f(DirectDkv<D>{});
    if constexpr (D == 64) {
        if (variant == ATTN_LAB_FA3_BWD_ALTERNATE_DQ) return f(AlternateDq{});
    } else if (variant == ATTN_LAB_FA3_BWD_ALTERNATE_DQ) {
        *why = "is a build of d = 64 only (the dQ turns of its 128-row tiles)";
        return -1;
    }
    *why = variant == ATTN_LAB_FA3_BWD_ATOMIC_DQ_OTHER_OVERLAP
               ? "is not built deterministic (the deterministic atomics build keeps the head dim's overlap)"
           : (variant == ATTN_LAB_FA3_BWD_WIDE_DQ_FLOAT4 || variant == ATTN_LAB_FA3_BWD_WIDE_TMA_DQ_ONE_DO_STAGE ||
              variant == ATTN_LAB_FA3_BWD_SHARED_KEYS64)
               ? "is a build of the wide head dims (d = dv in {192, 256}, (d, dv) = (192, 128))"
               : "is not a variant (0 to 9)";
    return -1;
}

// f(config, elem) with the build of variant for p as values of its configuration (Fa3BwdConfig, or Fa3BwdWideConfig
// for the wide head dims: Fa3BwdConfigOf) and element types.
template <class F>
int with_build(const AttnBwdParams& p, int variant, bool deterministic, F&& f, const char** why) {
    return bwd_by_dims(p, [&](auto dk, auto dv, auto elem) {
        constexpr int D = decltype(dk)::value, DV = decltype(dv)::value;
        using E = decltype(elem);
        auto run = [&](auto s) {
            using S = decltype(s);
            if (deterministic) return f(Fa3BwdConfigOf<D, DV, E, Deterministic<S>>{}, elem);
            return f(Fa3BwdConfigOf<D, DV, E, S>{}, elem);
        };
        if constexpr (D > 128)
            return with_wide_schedule<D, DV>(variant, run, why);
        else if (deterministic)
            return with_schedule<D, true>(variant, run, why);
        else
            return with_schedule<D, false>(variant, run, why);
    });
}

}  // namespace

extern "C" int attn_lab_fa3_bwd(const AttnBwdParams* p, int32_t variant, int32_t deterministic,
                                const AttnLaunch* launch, char* err, int errlen) {
    bool empty = false;
    int rc = bwd_preflight(p, kName, &empty, err, errlen);
    if (rc != ATTN_OK) return rc;
    const char* why = nullptr;
    if (empty) {  // still name an unknown variant
        with_build(*p, variant, deterministic != 0, [](auto, auto) { return 0; }, &why);
    } else {
        rc = with_build(
            *p, variant, deterministic != 0,
            [&](auto c, auto elem) { return run_bwd<decltype(elem), decltype(c)>(*p, launch, kName, err, errlen); },
            &why);
    }
    if (why != nullptr)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d deterministic=%d: variant=%d %s", kName,
                          p->fwd.head_dim, deterministic, variant, why);
    return rc;
}

extern "C" int64_t attn_lab_fa3_bwd_workspace(const AttnBwdParams* p, int32_t variant, int32_t deterministic) {
    if (p == nullptr || attn::check_bwd_params(p, kName, nullptr, 0, true, fa3_bwd_head_dims) != ATTN_OK) return -1;
    const char* why = nullptr;
    int64_t bytes = 0;
    with_build(*p, variant, deterministic != 0, [&](auto c, auto) { bytes = bwd_workspace_bytes<decltype(c)>(*p); return 0; },
               &why);
    return why != nullptr ? -1 : bytes;
}
