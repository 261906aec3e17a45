// FlashAttention-3 FP8 forward for Hopper (sm_90a): FP8 codes (e4m3 or e5m2) for Q, K, V with descales per
// tensor, per (batch, kv head) or per 128-row tile, wgmma k32 on FP8 operands, V transposed in shared memory by
// the producer warpgroup (or delivered k-major by attn_fp8_pack_vt, v_layout ATTN_FP8_V_KMAJOR), P rounded to FP8
// with the max offset, fp32 softmax, bf16 output and fp32 LSE.
// Semantics: oracles/SEMANTICS.md §10 (and §2-§9 as the FP16/BF16 kernel). The kernel is
// include/hopper/fp8_mainloop.cuh, its host side hopper/fp8_launch.cuh, the build of each head dim and V layout
// hopper/fp8_defaults.cuh; this file validates and dispatches, and packs V k-major. The ablation, tuning and timing
// builds are the lab's (kernels/cuda/lab/fa3_fp8_fwd_lab.cu), not this library's.
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn_params.h"
#include "hopper/fp8_defaults.cuh"
#include "hopper/fp8_launch.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::hopper;

constexpr const char* kName = "attn_fa3_fp8_fwd";

// f(config) with the shipped build of fp (head dim, format, V layout) as a value of its Fa3Fp8Config type.
template <class F>
auto by_build(const AttnFp8FwdParams& fp, F&& f) {
    return by_dim_and_format(fp, [&](auto dim, auto format) {
        constexpr int D = decltype(dim)::value;
        using Format = decltype(format);
        return fp.v_layout == ATTN_FP8_V_KMAJOR ? f(Fa3Fp8Config<D, Format, Fp8KMajorDefault<D>>{})
                                                : f(Fa3Fp8Config<D, Format, Fp8RowsDefault<D>>{});
    });
}

int run(const AttnFp8FwdParams* fp, const AttnLaunch* launch, char* err, int errlen) {
    bool empty = false;
    int rc = fp8_preflight(fp, kName, &empty, err, errlen);
    if (rc != ATTN_OK || empty) return rc;
    return by_build(*fp, [&](auto c) { return launch_fp8<decltype(c)>(*fp, launch, kName, err, errlen); });
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

int pack_vt(const AttnFp8PackVtParams* p, const AttnLaunch* launch, char* err, int errlen) {
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
    fp8_pack_vt_kernel<<<grid, kPackThreads, 0, attn::launch_stream(launch)>>>(*p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "%s: launch failed: %s (%s)", kPackName, cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

}  // namespace

extern "C" int attn_fa3_fp8_key_tile(const AttnFp8FwdParams* p, int* key_tile, char* err, int errlen) {
    const int rc = validate_fp8(p, kName, err, errlen);
    if (rc == ATTN_OK && key_tile != nullptr) *key_tile = by_build(*p, [](auto c) { return decltype(c)::kBlockN; });
    return rc;
}

extern "C" int attn_fp8_pack_vt(const AttnFp8PackVtParams* p, const AttnLaunch* launch, char* err, int errlen) {
    return pack_vt(p, launch, err, errlen);
}

extern "C" int attn_fa3_fp8_fwd(const AttnFp8FwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    return run(p, launch, err, errlen);
}

extern "C" int64_t attn_fa3_fp8_fwd_workspace(const AttnFp8FwdParams* p) {
    if (validate_fp8(p, kName, nullptr, 0) != ATTN_OK) return -1;
    return by_build(*p, [](auto c) { return fp8_workspace_bytes<decltype(c)>(); });
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
