// FlashAttention-3 FP8 forward for Hopper (sm_90a): FP8 codes (e4m3 or e5m2) for Q, K, V with descales per
// tensor, per (batch, kv head) or per 128-row tile, wgmma k32 on FP8 operands, V transposed in shared memory by
// the producer warpgroup (or delivered k-major by attn_fp8_pack_vt, v_layout ATTN_FP8_V_KMAJOR), P rounded to FP8
// with the max offset, fp32 softmax, bf16 output and fp32 LSE.
// Semantics: oracles/SEMANTICS.md §10 (and §2-§9 as the FP16/BF16 kernel). The kernel is
// include/hopper/fp8_mainloop.cuh; this file validates, builds the tensor maps and picks the instantiation.
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "attn_params.h"
#include "hopper/fp8_mainloop.cuh"
#include "hopper/tma_host.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::hopper;

constexpr const char* kName = "attn_fa3_fp8_fwd";

// V's tensor map: rows as K (D / kRowBytes boxes of kBlockN keys), or with C::kVtGlobal the Vt rows (kVtColBlocks
// boxes of D head-dim rows x kVtColBytes key positions, a 128-byte swizzle for 128 keys, 64-byte for 64: the layout
// the in-kernel transposes write).
template <class C>
int make_v_map(TmaTensor& t, const AttnFp8FwdParams& fp, char* msg, int len) {
    const AttnFwdParams& p = fp.fwd;
    constexpr CUtensorMapDataType dt = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    if constexpr (C::kVtGlobal) {
        constexpr CUtensorMapSwizzle sw = C::kVtColBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
        return make_tma_tensor_typed(t, "v", p.v, dt, 1, C::kVtColBytes, sw, fp.vt_keys, p.head_dim_v, p.heads_kv,
                                     p.batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride, C::kHeadDim, msg,
                                     len);
    } else {
        constexpr CUtensorMapSwizzle sw = C::kRowBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
        return make_tma_tensor_typed(t, "v", p.v, dt, 1, C::kRowBytes, sw, p.head_dim_v, p.seqlen_k, p.heads_kv,
                                     p.batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride, C::kBlockN, msg, len);
    }
}

template <class C>
int launch(const AttnFp8FwdParams& fp, cudaStream_t stream, char* err, int errlen) {
    const AttnFwdParams& p = fp.fwd;
    if (fp.granularity == ATTN_FP8_PER_TILE && !C::kPerTileOk)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: per-tile descales with %d-key tiles (build error)",
                          kName, C::kBlockN);
    Fa3Fp8Params P{};
    P.base.p = p;
    P.q_descale = fp.q_descale;
    P.k_descale = fp.k_descale;
    P.v_descale = fp.v_descale;
    P.granularity = fp.granularity;
    P.q_tiles = (p.seqlen_q + C::kDescaleBlock - 1) / C::kDescaleBlock;
    P.k_tiles = (p.seqlen_k + C::kDescaleBlock - 1) / C::kDescaleBlock;
    constexpr CUtensorMapSwizzle sw = C::kRowBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    constexpr CUtensorMapDataType dt = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    char msg[384] = {0};
    if (make_tma_tensor_typed(P.base.q, "q", p.q, dt, 1, C::kRowBytes, sw, p.head_dim, p.seqlen_q, p.heads_q, p.batch,
                              p.q_row_stride, p.q_head_stride, p.q_batch_stride, C::kBlockM, msg, sizeof msg))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", kName, msg);
    if (p.seqlen_k > 0) {
        if (make_tma_tensor_typed(P.base.k, "k", p.k, dt, 1, C::kRowBytes, sw, p.head_dim, p.seqlen_k, p.heads_kv,
                                  p.batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride, C::kBlockN, msg,
                                  sizeof msg) ||
            make_v_map<C>(P.base.v, fp, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s", kName, msg);
    } else {
        P.base.k = P.base.q;  // never read: no key tile exists
        P.base.v = P.base.q;
    }
    const int num_m = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM;
    const long long kv_bytes = 2LL * p.seqlen_k * p.head_dim;
    const int bh = p.heads_q * p.batch;
    P.base.order = TileOrder{num_m, p.heads_q, p.batch,
                             l2_section(kv_bytes, 32LL << 20, bh) * (p.heads_q / p.heads_kv)};
    if (P.base.order.section > bh) P.base.order.section = bh;
    const long long total = 1LL * num_m * bh;
    if (total > 0x7fffffffLL)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %lld work tiles exceed the grid limit", kName, total);
    auto kernel = fa3_fp8_fwd_kernel<C>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: cudaFuncSetAttribute(%u bytes): %s", kName, C::kSmemBytes,
                          cudaGetErrorString(e));
    int grid = static_cast<int>(total);
    if constexpr (C::kPersistent) {  // one CTA per SM, taking work tiles from a counter (scheduler.cuh)
        int major = 0;
        e = attn::persistent_setup(&grid, attn::device_sms(&major), &P.base.counter, stream);
        if (e != cudaSuccess)
            return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: tile counter: %s", kName, cudaGetErrorString(e));
    }
    kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(P);
    e = cudaGetLastError();
    if constexpr (C::kPersistent) cudaFreeAsync(P.base.counter, stream);
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: launch failed: %s (%s)", kName, cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

// ATTN_FA3_FP8_VARIANT (e4m3, d = 128; fp8_config.cuh), each changing one thing of the default build: smem_q (S = Q K^T
// with Q read from shared memory, an SS wgmma), narrow_transpose (the 4 x 4-byte V transpose), no_fold (the score
// scale multiplied per score for every granularity, not folded into the exp2), or a timing probe that
// leaves one stage out (wrong results by design): no_transpose, no_exp, no_pv. With V k-major (any format and head
// dim): row_tiles, the k-major builds with the key tiles of the V-as-rows builds (128; 64 at d = 256, where the
// default has 128; two consumer warpgroups, where the d = 64 / 128 defaults have three); two_wg (d = 64 / 128, per
// tensor / per head): the two-warpgroup builds with 256 / 192-key tiles (the defaults until session 13);
// exp_poly4 / exp_poly2: two_wg with the exponentials of every fourth / second 8-key chunk on the FMA pipe
// (fp8_config.cuh kExpPolyEvery; the default has none); persistent: the default k-major build of each head dim with
// the persistent loop (fp8_config.cuh kPersistent; at d = 64 that is the default itself since session 23);
// one_cta_per_tile (d = 64): the three-warpgroup build with one CTA per work tile, d = 64's default until then.
constexpr int kVariantSmemQ = 100, kVariantNarrowT = 101, kVariantNoFold = 102, kVariantRowTiles = 103,
              kVariantExpPoly4 = 105, kVariantExpPoly2 = 106, kVariantTwoWg = 107, kVariantPersistent = 108,
              kVariantOneCta = 109;
// The one list of the variant names: the code each selects and the V layout its builds read.
struct Fp8Variant {
    const char* name;
    int code;
    int v_layout;
};
constexpr Fp8Variant kVariants[] = {
    {"no_transpose", kFp8ProbeNoTranspose, ATTN_FP8_V_ROWS}, {"no_exp", kFp8ProbeNoExp, ATTN_FP8_V_ROWS},
    {"no_pv", kFp8ProbeNoPV, ATTN_FP8_V_ROWS},               {"smem_q", kVariantSmemQ, ATTN_FP8_V_ROWS},
    {"narrow_transpose", kVariantNarrowT, ATTN_FP8_V_ROWS},  {"no_fold", kVariantNoFold, ATTN_FP8_V_ROWS},
    {"row_tiles", kVariantRowTiles, ATTN_FP8_V_KMAJOR},      {"two_wg", kVariantTwoWg, ATTN_FP8_V_KMAJOR},
    {"exp_poly4", kVariantExpPoly4, ATTN_FP8_V_KMAJOR},      {"exp_poly2", kVariantExpPoly2, ATTN_FP8_V_KMAJOR},
    {"persistent", kVariantPersistent, ATTN_FP8_V_KMAJOR}, {"one_cta_per_tile", kVariantOneCta, ATTN_FP8_V_KMAJOR},
};

// kFp8ProbeNone when ATTN_FA3_FP8_VARIANT is unset or empty, the variant's code, or -1 for an unknown name.
int variant_from_env() {
    const char* e = getenv("ATTN_FA3_FP8_VARIANT");
    if (e == nullptr || e[0] == 0) return kFp8ProbeNone;
    for (const Fp8Variant& v : kVariants)
        if (strcmp(e, v.name) == 0) return v.code;
    return -1;
}

// The V layout the builds of variant `code` read (a set variant's; kFp8ProbeNone reads either).
int variant_layout(int code) {
    for (const Fp8Variant& v : kVariants)
        if (v.code == code) return v.v_layout;
    return -1;
}

// The names of the variants for `v_layout`, comma-separated, into buf.
const char* variant_names(int v_layout, char* buf, int len) {
    int at = 0;
    buf[0] = 0;
    for (const Fp8Variant& v : kVariants)
        if (v.v_layout == v_layout && at < len)
            at += snprintf(buf + at, len - at, "%s%s", at ? ", " : "", v.name);
    return buf;
}

// The default build of each head dim with V as rows.
template <typename Format>
int by_head_dim(const AttnFp8FwdParams& p, cudaStream_t s, char* err, int errlen) {
    switch (p.fwd.head_dim) {
        case 64:
            return launch<Fa3Fp8Config<64, Format>>(p, s, err, errlen);
        case 128:
            return launch<Fa3Fp8Config<128, Format>>(p, s, err, errlen);
        default:
            return launch<Fa3Fp8Config<256, Format>>(p, s, err, errlen);
    }
}

// The k-major build that runs p: its key tile and consumer warpgroups (the one place that choice is made;
// attn_fa3_fp8_key_tile reports the tile). d = 64 and 128: three consumer warpgroups of 64 rows with 128-key tiles
// (fp8_config.cuh: a warpgroup's softmax then has two other warpgroups' GEMMs to hide under; H200, NOTES_FA3_FP8.md
// session 13: 1.14x the two-warpgroup build with 192-key tiles at d = 128, 1.08-1.11x the one with 256-key tiles at
// d = 64; d = 64's runs persistent since session 23, 1.03-1.05x one CTA per work tile in the same process,
// variant one_cta_per_tile); variant two_wg: those two-warpgroup builds (per tensor / per head; exp_poly* are
// d = 128's). d = 256: 128 (O and S then exceed the 240 registers and ptxas spills ~300 bytes, but since the
// mbarrier waits sleep it runs 1.15x the 64-key build: NOTES_FA3_FP8.md session 10). Variant row_tiles: the V-as-rows
// tiles, two warpgroups.
struct KMajorBuild {
    int key_tile, wgs;
};
KMajorBuild kmajor_build(const AttnFp8FwdParams& p, int variant) {
    const int d = p.fwd.head_dim;
    if (variant == kVariantRowTiles) return {d == 256 ? 64 : 128, 2};
    if (d == 256) return {128, 2};
    if (variant == kVariantTwoWg || variant == kVariantExpPoly4 || variant == kVariantExpPoly2)
        return {d == 64 ? 256 : 192, 2};
    return {128, 3};
}

// The key tile P is rounded against (V as rows: 128, 64 at d = 256).
int key_tile_of(const AttnFp8FwdParams& p, int variant) {
    if (p.v_layout != ATTN_FP8_V_KMAJOR) return p.fwd.head_dim == 256 ? 64 : 128;
    return kmajor_build(p, variant).key_tile;
}

// A k-major build with key tiles of BN (0 in the config where BN is the head dim's default, so that both name one
// instantiation) and WGs consumer warpgroups (three: Q from shared memory, 160 registers each).
template <int D, typename Format, int BN, int WGs = 2, int kExpPolyEvery = -1, bool kPersistent = false>
using KMajor = Fa3Fp8Config<D, Format, kFp8ProbeNone, D == 128 && WGs == 2, false, true, true,
                            BN == (D == 256 ? 64 : 128) ? 0 : BN, kExpPolyEvery, WGs, kPersistent>;

template <typename Format>
int dispatch_kmajor(const AttnFp8FwdParams& p, cudaStream_t s, char* err, int errlen) {
    const int v = variant_from_env();
    if (v != kFp8ProbeNone && variant_layout(v) != ATTN_FP8_V_KMAJOR) {
        char names[256];
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: ATTN_FA3_FP8_VARIANT=%s: with v_layout=%d (k-major) only %s; the other variant builds "
                          "read V as rows (v_layout=%d)", kName, getenv("ATTN_FA3_FP8_VARIANT"), ATTN_FP8_V_KMAJOR,
                          variant_names(ATTN_FP8_V_KMAJOR, names, sizeof names), ATTN_FP8_V_ROWS);
    }
    const KMajorBuild b = kmajor_build(p, v);
    // The two-warpgroup builds with 192 / 256-key tiles: two_wg at d = 64 and 128, exp_poly* at d = 128.
    const int d = p.fwd.head_dim;
    const bool wide = v == kVariantTwoWg || v == kVariantExpPoly4 || v == kVariantExpPoly2;
    const bool built = d == 128 || (d == 64 && v == kVariantTwoWg);
    if (wide && (!built || p.granularity == ATTN_FP8_PER_TILE))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: ATTN_FA3_FP8_VARIANT=%s: a d = %s build with "
                          "per-tensor or per-head descales", kName, getenv("ATTN_FA3_FP8_VARIANT"),
                          v == kVariantTwoWg ? "64 / 128" : "128");
    if (v == kVariantOneCta) {
        if (d != 64)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: ATTN_FA3_FP8_VARIANT=one_cta_per_tile: a d = 64 "
                              "build (the other head dims' defaults already run one CTA per work tile)", kName);
        return launch<KMajor<64, Format, 128, 3>>(p, s, err, errlen);
    }
    if (v == kVariantExpPoly4) return launch<KMajor<128, Format, 192, 2, 4>>(p, s, err, errlen);
    if (v == kVariantExpPoly2) return launch<KMajor<128, Format, 192, 2, 2>>(p, s, err, errlen);
    if (v == kVariantPersistent) {  // the default build of each head dim with the persistent loop
        if (d == 64) return launch<KMajor<64, Format, 128, 3, -1, true>>(p, s, err, errlen);
        if (d == 128) return launch<KMajor<128, Format, 128, 3, -1, true>>(p, s, err, errlen);
        return launch<KMajor<256, Format, 128, 2, -1, true>>(p, s, err, errlen);
    }
    switch (d * 1000 + b.key_tile) {
        case 64128:
            return b.wgs == 3 ? launch<KMajor<64, Format, 128, 3, -1, true>>(p, s, err, errlen)
                              : launch<KMajor<64, Format, 128>>(p, s, err, errlen);
        case 64256:
            return launch<KMajor<64, Format, 256>>(p, s, err, errlen);
        case 128128:
            return b.wgs == 3 ? launch<KMajor<128, Format, 128, 3>>(p, s, err, errlen)
                              : launch<KMajor<128, Format, 128>>(p, s, err, errlen);
        case 128192:
            return launch<KMajor<128, Format, 192>>(p, s, err, errlen);
        case 256064:
            return launch<KMajor<256, Format, 64>>(p, s, err, errlen);
        default:
            return launch<KMajor<256, Format, 128>>(p, s, err, errlen);
    }
}

template <typename Format>
int dispatch(const AttnFp8FwdParams& p, cudaStream_t s, char* err, int errlen) {
    if (p.v_layout == ATTN_FP8_V_KMAJOR) return dispatch_kmajor<Format>(p, s, err, errlen);
    if constexpr (std::is_same<Format, Fp8E4M3>::value) {
        const int v = variant_from_env();
        if (variant_layout(v) == ATTN_FP8_V_KMAJOR)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: ATTN_FA3_FP8_VARIANT=%s is a k-major V build "
                              "(v_layout=%d)", kName, getenv("ATTN_FA3_FP8_VARIANT"), ATTN_FP8_V_KMAJOR);
        if (v != kFp8ProbeNone && p.fwd.head_dim != 128)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: the variant builds are for head_dim 128", kName);
        if (v == kVariantSmemQ) return launch<Fa3Fp8Config<128, Format, kFp8ProbeNone, false>>(p, s, err, errlen);
        if (v == kVariantNarrowT)
            return launch<Fa3Fp8Config<128, Format, kFp8ProbeNone, true, true>>(p, s, err, errlen);
        if (v == kVariantNoFold)
            return launch<Fa3Fp8Config<128, Format, kFp8ProbeNone, true, false, false>>(p, s, err, errlen);
        if (v == kFp8ProbeNoTranspose)
            return launch<Fa3Fp8Config<128, Format, kFp8ProbeNoTranspose>>(p, s, err, errlen);
        if (v == kFp8ProbeNoExp) return launch<Fa3Fp8Config<128, Format, kFp8ProbeNoExp>>(p, s, err, errlen);
        if (v == kFp8ProbeNoPV) return launch<Fa3Fp8Config<128, Format, kFp8ProbeNoPV>>(p, s, err, errlen);
    }
    return by_head_dim<Format>(p, s, err, errlen);
}

// Everything about fp that does not need the device or the data pointers.
int validate_fp8(const AttnFp8FwdParams* fp, char* err, int errlen) {
    if (fp == nullptr) return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", kName);
    const AttnFwdParams* p = &fp->fwd;
    int rc = attn::validate_fwd(p, kName, err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p->dtype != ATTN_BF16)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: dtype=%d: the output is bf16 only (dtype %d)", kName,
                          p->dtype, ATTN_BF16);
    if (p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: head_dim=%d: the FP8 kernel is built for 64, 128 and 256", kName, p->head_dim);
    if (fp->format != ATTN_FP8_E4M3FN && fp->format != ATTN_FP8_E5M2)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: format=%d: e4m3 (%d) or e5m2 (%d)", kName,
                          fp->format, ATTN_FP8_E4M3FN, ATTN_FP8_E5M2);
    if (fp->granularity < ATTN_FP8_PER_TENSOR || fp->granularity > ATTN_FP8_PER_TILE)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: granularity=%d: per tensor (0), per head (1), per tile (2)",
                          kName, fp->granularity);
    if (fp->granularity == ATTN_FP8_PER_TILE && (fp->tile_q != 128 || fp->tile_k != 128))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: tile_q=%d tile_k=%d: per-tile descales need tiles of 128 x 128 (the kernel's tiles)",
                          kName, fp->tile_q, fp->tile_k);
    if (fp->v_layout != ATTN_FP8_V_ROWS && fp->v_layout != ATTN_FP8_V_KMAJOR)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: v_layout=%d: rows (%d) or k-major (%d)", kName,
                          fp->v_layout, ATTN_FP8_V_ROWS, ATTN_FP8_V_KMAJOR);
    if (fp->v_layout == ATTN_FP8_V_KMAJOR && (fp->vt_keys % 16 != 0 || fp->vt_keys < p->seqlen_k))
        return attn::fail(err, errlen, ATTN_ERR_INVALID,
                          "%s: vt_keys=%d with seqlen_k=%d: k-major V needs a multiple of 16 that is >= seqlen_k",
                          kName, fp->vt_keys, p->seqlen_k);
    if (variant_from_env() < 0) {
        char rows[256], kmajor[256];
        return attn::fail(err, errlen, ATTN_ERR_INVALID,
                          "%s: ATTN_FA3_FP8_VARIANT=%s: with V as rows %s; with V k-major %s (or unset)", kName,
                          getenv("ATTN_FA3_FP8_VARIANT"), variant_names(ATTN_FP8_V_ROWS, rows, sizeof rows),
                          variant_names(ATTN_FP8_V_KMAJOR, kmajor, sizeof kmajor));
    }
    return ATTN_OK;
}

int run(const AttnFp8FwdParams* fp, void* stream, char* err, int errlen) {
    int rc = validate_fp8(fp, err, errlen);
    if (rc != ATTN_OK) return rc;
    const AttnFwdParams* p = &fp->fwd;
    if (p->batch == 0 || p->seqlen_q == 0) return ATTN_OK;
    if (fp->q_descale == nullptr || fp->k_descale == nullptr || fp->v_descale == nullptr)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: q_descale=%p k_descale=%p v_descale=%p: all three needed",
                          kName, static_cast<const void*>(fp->q_descale), static_cast<const void*>(fp->k_descale),
                          static_cast<const void*>(fp->v_descale));
    int major = 0;
    attn::device_sms(&major);
    if (major != 9)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: device compute capability %d.x: this kernel is built for sm_90a (Hopper) only", kName,
                          major);
    auto s = static_cast<cudaStream_t>(stream);
    return fp->format == ATTN_FP8_E4M3FN ? dispatch<Fp8E4M3>(*fp, s, err, errlen)
                                       : dispatch<Fp8E5M2>(*fp, s, err, errlen);
}

// ---- attn_fp8_pack_vt: V rows -> the k-major Vt layout (attn_params.h ATTN_FP8_V_KMAJOR) -------------------------
// One CTA per (128 key positions, head, batch): the 128 key rows are read as 32-bit words into shared memory (rows
// padded by 4 bytes, so that a column's bytes of successive keys fall in successive banks), then every thread
// writes 4 positions of one Vt row as a word (positions 4t..4t+3 of a 16-key group are keys 2t + {0, 1, 8, 9}).
constexpr int kPackKeys = 128, kPackThreads = 256, kPackMaxDim = 256;

__global__ void __launch_bounds__(kPackThreads) fp8_pack_vt_kernel(const AttnFp8PackVtParams p) {
    __shared__ uint32_t tile[kPackKeys][kPackMaxDim / 4 + 1];
    const int j0 = blockIdx.x * kPackKeys, h = blockIdx.y, b = blockIdx.z;
    const int words = p.head_dim / 4;
    const int len = p.seqlens_k != nullptr ? min(p.seqlens_k[b], p.seqlen) : p.seqlen;
    const unsigned char* v = static_cast<const unsigned char*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
    for (int i = threadIdx.x; i < kPackKeys * words; i += kPackThreads) {
        const int r = i / words, w = i % words, j = j0 + r;
        tile[r][w] = j < len ? *reinterpret_cast<const uint32_t*>(v + j * p.v_row_stride + 4 * w) : 0u;
    }
    __syncthreads();
    unsigned char* vt = static_cast<unsigned char*>(p.vt) + b * p.vt_batch_stride + h * p.vt_head_stride;
    const int groups = min(kPackKeys, p.vt_keys - j0) / 4;  // 4-position groups of this CTA's positions
    for (int i = threadIdx.x; i < p.head_dim * (kPackKeys / 4); i += kPackThreads) {
        const int c = i / (kPackKeys / 4), g = i % (kPackKeys / 4);
        if (g >= groups) continue;
        const int key0 = 16 * (g / 4) + ATTN_FP8_VT_KEY(4 * (g % 4));  // keys key0 + {0, 1, 8, 9}
        const int sh = 8 * (c % 4), w = c / 4;
        const uint32_t out = ((tile[key0][w] >> sh) & 0xffu) | (((tile[key0 + 1][w] >> sh) & 0xffu) << 8) |
                             (((tile[key0 + 8][w] >> sh) & 0xffu) << 16) | (((tile[key0 + 9][w] >> sh) & 0xffu) << 24);
        *reinterpret_cast<uint32_t*>(vt + c * p.vt_row_stride + j0 + 4 * g) = out;
    }
}

constexpr const char* kPackName = "attn_fp8_pack_vt";

int pack_vt(const AttnFp8PackVtParams* p, void* stream, char* err, int errlen) {
    if (p == nullptr) return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", kPackName);
    if (p->batch < 0 || p->heads < 0 || p->seqlen < 0)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: batch=%d heads=%d seqlen=%d: must be >= 0", kPackName,
                          p->batch, p->heads, p->seqlen);
    if (p->head_dim <= 0 || p->head_dim % 16 != 0 || p->head_dim > kPackMaxDim)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d: a multiple of 16 up to %d", kPackName,
                          p->head_dim, kPackMaxDim);
    if (p->vt_keys % 16 != 0 || p->vt_keys < p->seqlen)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: vt_keys=%d with seqlen=%d: a multiple of 16, >= seqlen",
                          kPackName, p->vt_keys, p->seqlen);
    if (p->batch == 0 || p->heads == 0 || p->vt_keys == 0) return ATTN_OK;
    if (p->v == nullptr || p->vt == nullptr)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "%s: v=%p vt=%p: both needed", kPackName, p->v,
                          static_cast<const void*>(p->vt));
    const int64_t vs[3] = {p->v_batch_stride, p->v_head_stride, p->v_row_stride};
    const int64_t ts[3] = {p->vt_batch_stride, p->vt_head_stride, p->vt_row_stride};
    const char* names[3] = {"batch_stride", "head_stride", "row_stride"};
    for (int i = 0; i < 3; ++i) {
        if (vs[i] % 4 != 0 || vs[i] < 0)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: v_%s=%lld: a non-negative multiple of 4 bytes",
                              kPackName, names[i], static_cast<long long>(vs[i]));
        if (ts[i] % 16 != 0 || ts[i] <= 0)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: vt_%s=%lld: a positive multiple of 16 bytes",
                              kPackName, names[i], static_cast<long long>(ts[i]));
    }
    if (reinterpret_cast<uintptr_t>(p->v) % 4 != 0 || reinterpret_cast<uintptr_t>(p->vt) % 16 != 0)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: v=%p vt=%p: v 4-byte and vt 16-byte aligned",
                          kPackName, p->v, static_cast<const void*>(p->vt));
    if (p->heads > 65535 || p->batch > 65535)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: heads=%d batch=%d: at most 65535 each", kPackName,
                          p->heads, p->batch);
    const dim3 grid((p->vt_keys + kPackKeys - 1) / kPackKeys, p->heads, p->batch);
    fp8_pack_vt_kernel<<<grid, kPackThreads, 0, static_cast<cudaStream_t>(stream)>>>(*p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: launch failed: %s (%s)", kPackName, cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

}  // namespace

extern "C" int attn_fa3_fp8_key_tile(const AttnFp8FwdParams* p, int* key_tile, char* err, int errlen) {
    const int rc = validate_fp8(p, err, errlen);
    if (rc == ATTN_OK && key_tile != nullptr) *key_tile = key_tile_of(*p, variant_from_env());
    return rc;
}

extern "C" int attn_fp8_pack_vt(const AttnFp8PackVtParams* p, void* stream, char* err, int errlen) {
    return pack_vt(p, stream, err, errlen);
}

extern "C" int attn_fa3_fp8_fwd(const AttnFp8FwdParams* p, void* stream, char* err, int errlen) {
    return run(p, stream, err, errlen);
}

extern "C" int attn_fp8_params_layout(int64_t* out, int n) {
    const int64_t vals[] = {ATTN_FP8_PARAMS_VERSION,
                            sizeof(AttnFp8FwdParams),
                            offsetof(AttnFp8FwdParams, fwd),
                            offsetof(AttnFp8FwdParams, format),
                            offsetof(AttnFp8FwdParams, granularity),
                            offsetof(AttnFp8FwdParams, q_descale),
                            offsetof(AttnFp8FwdParams, k_descale),
                            offsetof(AttnFp8FwdParams, v_descale),
                            offsetof(AttnFp8FwdParams, tile_q),
                            offsetof(AttnFp8FwdParams, tile_k),
                            offsetof(AttnFp8FwdParams, v_layout),
                            offsetof(AttnFp8FwdParams, vt_keys),
                            sizeof(AttnFp8PackVtParams),
                            offsetof(AttnFp8PackVtParams, v),
                            offsetof(AttnFp8PackVtParams, vt),
                            offsetof(AttnFp8PackVtParams, v_batch_stride),
                            offsetof(AttnFp8PackVtParams, v_head_stride),
                            offsetof(AttnFp8PackVtParams, v_row_stride),
                            offsetof(AttnFp8PackVtParams, vt_batch_stride),
                            offsetof(AttnFp8PackVtParams, vt_head_stride),
                            offsetof(AttnFp8PackVtParams, vt_row_stride),
                            offsetof(AttnFp8PackVtParams, seqlens_k),
                            offsetof(AttnFp8PackVtParams, batch),
                            offsetof(AttnFp8PackVtParams, heads),
                            offsetof(AttnFp8PackVtParams, seqlen),
                            offsetof(AttnFp8PackVtParams, head_dim),
                            offsetof(AttnFp8PackVtParams, vt_keys),
                            offsetof(AttnFp8PackVtParams, reserved)};
    const int k = static_cast<int>(sizeof vals / sizeof vals[0]);
    const int m = k < n ? k : n;
    for (int i = 0; i < m; ++i) out[i] = vals[i];
    return m;
}
