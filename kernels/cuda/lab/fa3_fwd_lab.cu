// The lab's FA3 forward builds (attn_lab.h AttnLabFa3FwdVariant): the ablations, tuning alternatives and timing probes
// the FA3 design record measures against the shipped builds (hopper/fwd_defaults.cuh), each a named schedule
// (hopper/config.cuh Fa3Schedule) launched through the shipped host side (hopper/fwd_launch.cuh).
#include <cuda_runtime.h>

#include <type_traits>

#include "attn_lab.h"
#include "hopper/fwd_defaults.cuh"
#include "hopper/fwd_launch.cuh"
#include "launch_common.cuh"
#include "probes.cuh"

namespace {

using namespace attn::hopper;
using attn::ScoreScale;
using namespace attn::lab;

constexpr const char* kName = "attn_lab_fa3_fwd";

// d = 128 with two consumer warpgroups, 128-key tiles and Q in registers (the shipped d = 128 build before three
// warpgroups with 80-key tiles and Q from shared memory replaced it: 3-8% slower); the d = 128 ablations each change
// one thing of it.
struct TwoWg128 : Fa3Schedule {
    static constexpr int consumer_warpgroups = 2;
    static constexpr int block_n = 128;
    static constexpr QOperand q_operand = QOperand::kRegisters;
};
struct NoPingpong : TwoWg128 {
    static constexpr bool pingpong = false;
};
struct NoOverlap : TwoWg128 {
    static constexpr bool intra_wg_overlap = false;
};
struct NoWarpSpecialisation : TwoWg128 {
    static constexpr Loads loads = Loads::kConsumerThreadZero;
    static constexpr bool pingpong = false;
};
struct OneWarpgroup : TwoWg128 {
    static constexpr int consumer_warpgroups = 1;
    static constexpr Loads loads = Loads::kConsumerThreadZero;
    static constexpr bool intra_wg_overlap = false;
    static constexpr bool pingpong = false;
};
// Q in registers spills with 176-key tiles.
struct KeyTiles176 : TwoWg128 {
    static constexpr int block_n = 176;
    static constexpr QOperand q_operand = QOperand::kSharedMemory;
};
struct TwoStages : TwoWg128 {
    static constexpr int kv_stages = 2;
};
struct SmemQ : TwoWg128 {
    static constexpr QOperand q_operand = QOperand::kSharedMemory;
};
template <class Probe>
struct Probed : TwoWg128 {
    using Stages = Probe;
};
// d = 64 with two consumer warpgroups and 192-key tiles, one CTA per work tile.
struct D64TwoWg : Fa3Default<64> {
    static constexpr int consumer_warpgroups = 2;
    static constexpr Grid grid = Grid::kOneCtaPerTile;
    static constexpr int block_n = 192;
};
// The shipped build of head dim D with the persistent loop; pingpong at d = 256 too (without it ptxas serializes the
// persistent d = 256 build's wgmmas, remark C7520).
template <int D>
struct Persistent : Fa3Default<D> {
    static constexpr Grid grid = Grid::kPersistent;
    static constexpr bool pingpong = true;
};
template <int D>
struct OneCtaPerTile : Fa3Default<D> {
    static constexpr Grid grid = Grid::kOneCtaPerTile;
};
template <int D>
struct LazyRescaleOneCta : Fa3Default<D> {
    static constexpr Grid grid = Grid::kOneCtaPerTile;
    static constexpr Rescale rescale = Rescale::kLazy;
};
template <int D>
struct EagerRescale : Fa3Default<D> {
    static constexpr Rescale rescale = Rescale::kEager;
};
// Halving the L2 reads does not shorten the loop (0.97-0.99x at d = 128, 0.96-1.005x at d = 256): the card runs at its
// power limit, so what sets the speed is energy per product.
template <int D>
struct Cluster2 : Fa3Default<D> {
    static constexpr Grid grid = Grid::kCluster2;
};

// d = 96: O += P V over whole 64-column blocks (m64n128) with d = 128's key tiles of 80 (the shipped d = 96 build
// before m64n96 with 112-key tiles replaced it: 1.08-1.09x on an H100).
struct D96WholeBlocks : Fa3Default<96> {
    static constexpr PvColumns pv_columns = PvColumns::kWholeBlocks;
    static constexpr int block_n = 80;
};
// d = 96 with the shipped m64n96 P V and key tiles of BN.
template <int BN>
struct D96KeyTiles : Fa3Default<96> {
    static constexpr int block_n = BN;
};

// d = 192 (d = dv) with one thing of the shipped build changed (attn_lab.h ATTN_LAB_FA3_D192_*): the first A / B of
// that build's schedule, which fwd_defaults.cuh chose by reasoning.
struct D192Pingpong : Fa3Default<192> {
    static constexpr bool pingpong = true;
};
template <int BN>
struct D192KeyTiles : Fa3Default<192> {
    static constexpr int block_n = BN;
};
struct D192EagerRescale : Fa3Default<192> {
    static constexpr Rescale rescale = Rescale::kEager;
};

// f(schedule) with the schedule of `variant` for head dim D as a value of its type; ATTN_ERR_UNSUPPORTED for a variant
// that has no build at D (`unsupported` gets the reason).
template <int D, class F>
int with_schedule(int variant, F&& f, const char** unsupported) {
    switch (variant) {
        case ATTN_LAB_FA3_PERSISTENT: return f(Persistent<D>{});
        case ATTN_LAB_FA3_ONE_CTA_PER_TILE: return f(OneCtaPerTile<D>{});
        case ATTN_LAB_FA3_LAZY_RESCALE_ONE_CTA: return f(LazyRescaleOneCta<D>{});
        case ATTN_LAB_FA3_EAGER_RESCALE: return f(EagerRescale<D>{});
        default: break;
    }
    if constexpr (D == 64) {
        if (variant == ATTN_LAB_FA3_D64_TWO_WG) return f(D64TwoWg{});
    }
    if constexpr (D != 64) {
        if (variant == ATTN_LAB_FA3_CLUSTER2) return f(Cluster2<D>{});
    }
    if constexpr (D == 128) {
        switch (variant) {
            case ATTN_LAB_FA3_NO_PINGPONG: return f(NoPingpong{});
            case ATTN_LAB_FA3_NO_OVERLAP: return f(NoOverlap{});
            case ATTN_LAB_FA3_NO_WS: return f(NoWarpSpecialisation{});
            case ATTN_LAB_FA3_STAGE1: return f(OneWarpgroup{});
            case ATTN_LAB_FA3_N176: return f(KeyTiles176{});
            case ATTN_LAB_FA3_STAGES2: return f(TwoStages{});
            case ATTN_LAB_FA3_SMEM_Q: return f(SmemQ{});
            case ATTN_LAB_FA3_TWO_WG: return f(TwoWg128{});
            case ATTN_LAB_FA3_PROBE_NO_EXP: return f(Probed<NoExpStages>{});
            case ATTN_LAB_FA3_PROBE_NO_PV: return f(Probed<NoPvStages>{});
            case ATTN_LAB_FA3_PROBE_NO_SOFTMAX: return f(Probed<NoSoftmaxStages>{});
            default: break;
        }
    }
    *unsupported = variant == ATTN_LAB_FA3_D64_TWO_WG ? "is a head_dim 64 build"
                   : variant == ATTN_LAB_FA3_CLUSTER2 ? "is built for head_dim 128 / 256"
                   : variant > 0 && variant <= ATTN_LAB_FA3_EAGER_RESCALE ? "is a head_dim 128 build"
                                                                        : "is not a variant of this build";
    return -1;
}

constexpr int kLastVariant = ATTN_LAB_FA3_D192_EAGER_RESCALE;

// The head dim d = dv a build of one head dim is for (the d = 96 and d = 192 builds), 0 for the others.
int own_head_dim(int variant) {
    if (variant >= ATTN_LAB_FA3_D96_WHOLE_BLOCKS && variant <= ATTN_LAB_FA3_D96_N96) return 96;
    if (variant >= ATTN_LAB_FA3_D192_PINGPONG && variant <= ATTN_LAB_FA3_D192_EAGER_RESCALE) return 192;
    return 0;
}

// f(d, schedule, elem) with the schedule of a build of one head dim (`own_head_dim(variant)` != 0), its head dim as a
// std::integral_constant and p's element type, each as a value of its type; f's result type (a launch status, a
// workspace size).
template <class F>
auto with_own_dim_build(const AttnFwdParams& p, int variant, F&& f) {
    auto with_elem = [&](auto dim, auto schedule) {
        return p.dtype == ATTN_BF16 ? f(dim, schedule, __nv_bfloat16{}) : f(dim, schedule, __half{});
    };
    using D96 = std::integral_constant<int, 96>;
    using D192 = std::integral_constant<int, 192>;
    switch (variant) {
        case ATTN_LAB_FA3_D96_WHOLE_BLOCKS: return with_elem(D96{}, D96WholeBlocks{});
        case ATTN_LAB_FA3_D96_N80: return with_elem(D96{}, D96KeyTiles<80>{});
        case ATTN_LAB_FA3_D96_N96: return with_elem(D96{}, D96KeyTiles<96>{});
        case ATTN_LAB_FA3_D192_PINGPONG: return with_elem(D192{}, D192Pingpong{});
        case ATTN_LAB_FA3_D192_N96: return with_elem(D192{}, D192KeyTiles<96>{});
        case ATTN_LAB_FA3_D192_N80: return with_elem(D192{}, D192KeyTiles<80>{});
        default: return with_elem(D192{}, D192EagerRescale{});
    }
}

int run(const AttnFwdParams* p, int variant, int l2_budget_mb, const AttnLaunch* launch, char* err, int errlen) {
    int sms = 0;
    bool empty = false;
    int rc = fwd_preflight(p, kName, &sms, &empty, err, errlen, fa3_fwd_head_dims);
    if (rc != ATTN_OK) return rc;
    if (variant < 0 || variant > kLastVariant)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: variant=%d: 0 (the shipped build) to %d", kName, variant,
                          kLastVariant);
    if (empty) return ATTN_OK;
    const long long budget = l2_budget_mb > 0 ? static_cast<long long>(l2_budget_mb) << 20 : fwd_l2_budget(*p);
    if (variant == ATTN_LAB_FA3_DEFAULT)  // the shipped builds, every head dim of attn_fa3_fwd
        return by_fa3_head_dims(*p, [&](auto dims, auto elem) {
            constexpr int D = decltype(dims)::value, DV = decltype(dims)::dv;
            return launch_scaled<D, decltype(elem), Fa3Default<D, DV>, DV>(*p, launch, sms, budget, kName, err,
                                                                          errlen);
        });
    if (const int own = own_head_dim(variant)) {
        if (p->head_dim != own || p->head_dim_v != own)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d, head_dim_v=%d: variant=%d is built "
                              "for d = dv = %d", kName, p->head_dim, p->head_dim_v, variant, own);
        return with_own_dim_build(*p, variant, [&](auto dim, auto schedule, auto elem) {
            return launch_scaled<decltype(dim)::value, decltype(elem), decltype(schedule)>(*p, launch, sms, budget,
                                                                                          kName, err, errlen);
        });
    }
    if (const char* built = attn::head_dims_64_128_256(p->head_dim, p->head_dim_v))  // the ablation builds' dims
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: head_dim=%d, head_dim_v=%d: variant=%d is built for %s", kName, p->head_dim,
                          p->head_dim_v, variant, built);
    if (score_scale_of(*p) != ScoreScale::kFolded)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: variant=%d with softcap=%g scale=%g: the variant builds need no softcap and scale > 0",
                          kName, variant, p->softcap, p->scale);
    if (variant == ATTN_LAB_FA3_CLUSTER2 && !same_keys_for_every_query_tile(*p))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: causal=%d window=(%d, %d) varlen=%d: variant cluster2 is built for inputs without a "
                          "causal mask, window or varlen (every query tile sees the same keys)",
                          kName, p->causal, p->window_left, p->window_right,
                          p->seqlens_q != nullptr || p->seqlens_k != nullptr);
    const char* why = nullptr;
    rc = by_head_dim(*p, [&](auto dim, auto elem) {
        constexpr int D = decltype(dim)::value;
        using E = decltype(elem);
        return with_schedule<D>(
            variant,
            [&](auto schedule) {
                return launch_fwd<Fa3Config<D, E, decltype(schedule), ScoreScale::kFolded>>(*p, launch, sms, budget,
                                                                                          kName, err, errlen);
            },
            &why);
    });
    if (why != nullptr)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d: variant=%d %s", kName, p->head_dim,
                          variant, why);
    return rc;
}

}  // namespace

extern "C" int attn_lab_version(int* params_version) {
    if (params_version != nullptr) *params_version = ATTN_PARAMS_VERSION;
    return ATTN_LAB_VERSION;
}

extern "C" int attn_lab_fa3_fwd(const AttnFwdParams* p, int32_t variant, int32_t l2_budget_mb, const AttnLaunch* launch,
                                char* err, int errlen) {
    return run(p, variant, l2_budget_mb, launch, err, errlen);
}

extern "C" int64_t attn_lab_fa3_fwd_workspace(const AttnFwdParams* p, int32_t variant) {
    if (attn::validate_fwd(p, kName, nullptr, 0, /*paged_ok=*/false, /*sinks_ok=*/false, fa3_fwd_head_dims) != ATTN_OK)
        return -1;
    if (variant == ATTN_LAB_FA3_DEFAULT)
        return by_fa3_head_dims(*p, [&](auto dims, auto elem) -> int64_t {
            constexpr int D = decltype(dims)::value, DV = decltype(dims)::dv;
            return fwd_workspace_bytes<Fa3Config<D, decltype(elem), Fa3Default<D, DV>, ScoreScale::kFolded, DV>>();
        });
    if (const int own = own_head_dim(variant)) {
        if (p->head_dim != own || p->head_dim_v != own) return -1;
        return with_own_dim_build(*p, variant, [&](auto dim, auto schedule, auto elem) -> int64_t {
            return fwd_workspace_bytes<
                Fa3Config<decltype(dim)::value, decltype(elem), decltype(schedule), ScoreScale::kFolded>>();
        });
    }
    if (attn::head_dims_64_128_256(p->head_dim, p->head_dim_v)) return -1;
    const char* why = nullptr;
    int64_t bytes = 0;
    by_head_dim(*p, [&](auto dim, auto elem) {
        constexpr int D = decltype(dim)::value;
        using E = decltype(elem);
        return with_schedule<D>(
            variant,
            [&](auto schedule) {
                bytes = fwd_workspace_bytes<Fa3Config<D, E, decltype(schedule), ScoreScale::kFolded>>();
                return 0;
            },
            &why);
    });
    return why != nullptr ? -1 : bytes;
}
