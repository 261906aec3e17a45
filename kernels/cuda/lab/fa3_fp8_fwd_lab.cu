// The lab's FA3 FP8 forward builds (attn_lab.h AttnLabFp8Variant): the alternatives and timing probes the FP8 design
// record measures against the shipped builds (hopper/fp8_defaults.cuh), each a named schedule (hopper/fp8_config.cuh
// Fp8Schedule) launched through the shipped host side (hopper/fp8_launch.cuh).
#include <cuda_runtime.h>

#include <type_traits>

#include "attn_lab.h"
#include "hopper/fp8_defaults.cuh"
#include "hopper/fp8_launch.cuh"
#include "launch_common.cuh"
#include "probes.cuh"

namespace {

using namespace attn::hopper;
using namespace attn::lab;

constexpr const char* kName = "attn_lab_fa3_fp8_fwd";

// V as rows, d = 128 (the shipped build with Q in registers), one change each.
struct SmemQ : Fp8RowsDefault<128> {
    static constexpr QOperand q_operand = QOperand::kSharedMemory;
};
struct NarrowTranspose : Fp8RowsDefault<128> {
    static constexpr bool narrow_transpose = true;
};
struct NoFold : Fp8RowsDefault<128> {
    static constexpr bool fold_scale = false;
};
template <class Probe>
struct RowsProbed : Fp8RowsDefault<128> {
    using Stages = Probe;
};
// V k-major with the key tiles of the V-as-rows builds (128; 64 at d = 256) and two consumer warpgroups.
template <int D>
struct RowTiles : Fp8Schedule {
    static constexpr VSource v_source = VSource::kKMajor;
    static constexpr int block_n = D == 256 ? 64 : 128;
    static constexpr QOperand q_operand = D == 128 ? QOperand::kRegisters : QOperand::kSharedMemory;
};
// V k-major, two consumer warpgroups with 256 (d = 64) / 192 (d = 128) keys: the shipped builds before three
// warpgroups replaced them (1.08-1.14x).
template <int D>
struct TwoWgWide : Fp8Schedule {
    static constexpr VSource v_source = VSource::kKMajor;
    static constexpr int block_n = D == 64 ? 256 : 192;
    static constexpr QOperand q_operand = D == 128 ? QOperand::kRegisters : QOperand::kSharedMemory;
};
template <int Every>
struct ExpPoly : TwoWgWide<128> {
    static constexpr int exp_poly_every = Every;
};
template <int D>
struct KMajorPersistent : Fp8KMajorDefault<D> {
    static constexpr Grid grid = Grid::kPersistent;
};
struct KMajorOneCta64 : Fp8KMajorDefault<64> {
    static constexpr Grid grid = Grid::kOneCtaPerTile;
};

bool kmajor_variant(int v) { return v >= ATTN_LAB_FP8_ROW_TILES && v <= ATTN_LAB_FP8_ONE_CTA_PER_TILE; }

// f(config) with the build of `variant` for fp as a value of its Fa3Fp8Config type; or the reason it has none.
template <class F>
int with_build(const AttnFp8FwdParams& fp, int variant, F&& f, const char** why) {
    return by_dim_and_format(fp, [&](auto dim, auto format) -> int {
        constexpr int D = decltype(dim)::value;
        using Format = decltype(format);
        constexpr bool e4m3 = std::is_same<Format, Fp8E4M3>::value;
        const bool per_tile = fp.granularity == ATTN_FP8_PER_TILE;
        if (variant == ATTN_LAB_FP8_DEFAULT)
            return fp.v_layout == ATTN_FP8_V_KMAJOR ? f(Fa3Fp8Config<D, Format, Fp8KMajorDefault<D>>{})
                                                    : f(Fa3Fp8Config<D, Format, Fp8RowsDefault<D>>{});
        if (kmajor_variant(variant) != (fp.v_layout == ATTN_FP8_V_KMAJOR)) {
            *why = kmajor_variant(variant) ? "is a k-major V build (v_layout=1)" : "reads V as rows (v_layout=0)";
            return -1;
        }
        switch (variant) {
            case ATTN_LAB_FP8_ROW_TILES: return f(Fa3Fp8Config<D, Format, RowTiles<D>>{});
            case ATTN_LAB_FP8_PERSISTENT: return f(Fa3Fp8Config<D, Format, KMajorPersistent<D>>{});
            default: break;
        }
        if constexpr (D == 64) {
            if (variant == ATTN_LAB_FP8_ONE_CTA_PER_TILE) return f(Fa3Fp8Config<D, Format, KMajorOneCta64>{});
            if (variant == ATTN_LAB_FP8_TWO_WG && !per_tile) return f(Fa3Fp8Config<D, Format, TwoWgWide<D>>{});
        }
        if constexpr (D == 128) {
            if (!per_tile) {
                if (variant == ATTN_LAB_FP8_TWO_WG) return f(Fa3Fp8Config<D, Format, TwoWgWide<D>>{});
                if (variant == ATTN_LAB_FP8_EXP_POLY4) return f(Fa3Fp8Config<D, Format, ExpPoly<4>>{});
                if (variant == ATTN_LAB_FP8_EXP_POLY2) return f(Fa3Fp8Config<D, Format, ExpPoly<2>>{});
            }
            if constexpr (e4m3) {
                switch (variant) {
                    case ATTN_LAB_FP8_SMEM_Q: return f(Fa3Fp8Config<D, Format, SmemQ>{});
                    case ATTN_LAB_FP8_NARROW_TRANSPOSE: return f(Fa3Fp8Config<D, Format, NarrowTranspose>{});
                    case ATTN_LAB_FP8_NO_FOLD: return f(Fa3Fp8Config<D, Format, NoFold>{});
                    case ATTN_LAB_FP8_NO_TRANSPOSE: return f(Fa3Fp8Config<D, Format, RowsProbed<NoTransposeStages>>{});
                    case ATTN_LAB_FP8_NO_EXP: return f(Fa3Fp8Config<D, Format, RowsProbed<NoExpStages>>{});
                    case ATTN_LAB_FP8_NO_PV: return f(Fa3Fp8Config<D, Format, RowsProbed<NoPvStages>>{});
                    default: break;
                }
            }
        }
        *why = variant == ATTN_LAB_FP8_ONE_CTA_PER_TILE ? "is a head_dim 64 build"
               : variant == ATTN_LAB_FP8_TWO_WG        ? "is a head_dim 64 / 128 build with per-tensor or per-head "
                                                         "descales"
               : variant == ATTN_LAB_FP8_EXP_POLY4 || variant == ATTN_LAB_FP8_EXP_POLY2
                   ? "is a head_dim 128 build with per-tensor or per-head descales"
               : variant > 0 && variant <= ATTN_LAB_FP8_NO_FOLD ? "is a head_dim 128 e4m3 build"
                                                                : "is not a variant (0 to 12)";
        return -1;
    });
}

int unsupported(const AttnFp8FwdParams& fp, int variant, const char* why, const char* name, char* err, int errlen) {
    return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d format=%d v_layout=%d granularity=%d: "
                      "variant=%d %s", name, fp.fwd.head_dim, fp.format, fp.v_layout, fp.granularity, variant, why);
}

}  // namespace

extern "C" int attn_lab_fa3_fp8_fwd(const AttnFp8FwdParams* p, int32_t variant, const AttnLaunch* launch, char* err,
                                    int errlen) {
    bool empty = false;
    int rc = fp8_preflight(p, kName, &empty, err, errlen);
    if (rc != ATTN_OK || empty) return rc;
    const char* why = nullptr;
    rc = with_build(*p, variant, [&](auto c) { return launch_fp8<decltype(c)>(*p, launch, kName, err, errlen); }, &why);
    return why != nullptr ? unsupported(*p, variant, why, kName, err, errlen) : rc;
}

extern "C" int64_t attn_lab_fa3_fp8_fwd_workspace(const AttnFp8FwdParams* p, int32_t variant) {
    if (validate_fp8(p, kName, nullptr, 0) != ATTN_OK) return -1;
    const char* why = nullptr;
    int64_t bytes = 0;
    with_build(*p, variant, [&](auto c) { bytes = fp8_workspace_bytes<decltype(c)>(); return 0; }, &why);
    return why != nullptr ? -1 : bytes;
}

extern "C" int attn_lab_fa3_fp8_key_tile(const AttnFp8FwdParams* p, int32_t variant, int* key_tile, char* err,
                                         int errlen) {
    const char* name = "attn_lab_fa3_fp8_key_tile";
    int rc = validate_fp8(p, name, err, errlen);
    if (rc != ATTN_OK) return rc;
    const char* why = nullptr;
    int tile = 0;
    with_build(*p, variant, [&](auto c) { tile = decltype(c)::kBlockN; return 0; }, &why);
    if (why != nullptr) return unsupported(*p, variant, why, name, err, errlen);
    if (key_tile != nullptr) *key_tile = tile;
    return ATTN_OK;
}
