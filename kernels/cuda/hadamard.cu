// FP8 input kernels: the seeded random Hadamard transform of incoherent processing (SEMANTICS.md §11) on its
// own, and the FP8 quantizer with the transform fused in front (§10): amax per scaling block, descale =
// amax / fmax, codes = round_sat(x / descale). ABI: include/attn_quant.h; device pieces: include/fp8_quant.cuh.
//
// Work split: one warp per row (E = head_dim / 32 elements per lane, the transform's strides >= E by
// shuffles), 8 warps per block.
//   attn_hadamard: blocks of 64 rows of one (batch, head).
//   attn_fp8_quantize, per_tile: one block per tile, fused: pass 1 over the tile's rows takes the amax, the
//     block reduces it, pass 2 re-reads the rows (from L1/L2) and writes codes; one kernel.
//   attn_fp8_quantize, per_tensor / per_head: blocks of 64 rows; kernel 1 takes the amax of each block and
//     folds it into its scaling block's slot with an atomic max on the ordered bits; kernel 2 writes the
//     descales; kernel 3 recomputes the rows and writes codes.
#include <math.h>
#include <stddef.h>

#include "attn_quant.h"
#include "fp8_quant.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::quant;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChunkRows = 64;
constexpr int kMaxDim = 512;

struct SignBits {
    uint32_t w[kMaxDim / 32];  // bit j: s_j = -1
};

__device__ __forceinline__ void load_signs(const SignBits& sb, uint32_t* s_sign) {
    if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < kMaxDim / 32; ++k) s_sign[k] = sb.w[k];
    }
    __syncthreads();
}

template <typename T, int E, bool kHad>
__device__ __forceinline__ void row_values(const T* row, int lane, double (&v)[E], const uint32_t* s_sign,
                                           double sqrt_d) {
    load_row<T, E>(row, lane, v);
    if constexpr (kHad) fwht_row<E>(v, lane, s_sign, sqrt_d);
}

template <typename TIn, typename TOut, int E>
__global__ void __launch_bounds__(kThreads) hadamard_kernel(AttnHadamardParams p, SignBits sb, double sqrt_d) {
    __shared__ uint32_t s_sign[kMaxDim / 32];
    load_signs(sb, s_sign);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int b = blockIdx.z, h = blockIdx.y;
    const int r0 = blockIdx.x * kChunkRows, r1 = min(r0 + kChunkRows, p.seqlen);
    const TIn* x = static_cast<const TIn*>(p.x) + b * p.x_batch_stride + h * p.x_head_stride;
    TOut* y = static_cast<TOut*>(p.y) + b * p.y_batch_stride + h * p.y_head_stride;
    for (int r = r0 + warp; r < r1; r += kWarps) {
        double v[E];
        row_values<TIn, E, true>(x + r * p.x_row_stride, lane, v, s_sign, sqrt_d);
        store_row<TOut, E>(y + r * p.y_row_stride, lane, v);
    }
}

// Largest |x'| over rows [r0, r1) of (b, h), reduced over the block (all threads get it).
template <typename T, int E, bool kHad>
__device__ unsigned long long block_amax(const AttnFp8QuantParams& p, const T* x, int r0, int r1,
                                         const uint32_t* s_sign, double sqrt_d) {
    __shared__ unsigned long long s_max[kWarps];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long m = 0;
    for (int r = r0 + warp; r < r1; r += kWarps) {
        double v[E];
        row_values<T, E, kHad>(x + r * p.x_row_stride, lane, v, s_sign, sqrt_d);
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const unsigned long long a = abs_bits(v[i]);
            m = a > m ? a : m;
        }
    }
    m = warp_max_bits(m);
    if (lane == 0) s_max[warp] = m;
    __syncthreads();
    unsigned long long all = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) all = s_max[w] > all ? s_max[w] : all;
    return all;
}

template <typename T, int E, bool kHad>
__device__ void quantize_rows(const AttnFp8QuantParams& p, const T* x, uint8_t* codes, int r0, int r1,
                              double descale, const uint32_t* s_sign, double sqrt_d) {
    const Fp8Spec f = fp8_spec(p.format);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = r0 + warp; r < r1; r += kWarps) {
        double v[E];
        row_values<T, E, kHad>(x + r * p.x_row_stride, lane, v, s_sign, sqrt_d);
        unsigned char c[E];
#pragma unroll
        for (int i = 0; i < E; ++i) c[i] = encode_fp8(round_fp8(v[i] / descale, f), f);
        store_elems<unsigned char, E>(codes + r * p.c_row_stride + lane * E, c);
    }
}

template <typename T, int E, bool kHad>
__global__ void __launch_bounds__(kThreads) quant_tile_kernel(AttnFp8QuantParams p, SignBits sb, double sqrt_d) {
    __shared__ uint32_t s_sign[kMaxDim / 32];
    load_signs(sb, s_sign);
    const int b = blockIdx.z, h = blockIdx.y, t = blockIdx.x;
    const int r0 = t * p.tile, r1 = min(r0 + p.tile, p.seqlen);
    const T* x = static_cast<const T*>(p.x) + b * p.x_batch_stride + h * p.x_head_stride;
    uint8_t* codes = p.codes + b * p.c_batch_stride + h * p.c_head_stride;
    const double fmax = fp8_spec(p.format).fmax;
    const double descale = descale_of(block_amax<T, E, kHad>(p, x, r0, r1, s_sign, sqrt_d), fmax);
    if (threadIdx.x == 0) {
        const int64_t slot = (static_cast<int64_t>(b) * p.heads + h) * gridDim.x + t;
        p.descale[slot] = __double2float_rn(descale);
        if (p.descale64 != nullptr) p.descale64[slot] = descale;
    }
    quantize_rows<T, E, kHad>(p, x, codes, r0, r1, descale, s_sign, sqrt_d);
}

__device__ __forceinline__ int64_t amax_slot(const AttnFp8QuantParams& p, int b, int h) {
    return p.granularity == ATTN_FP8_PER_HEAD ? static_cast<int64_t>(b) * (p.heads / p.group) + h / p.group : 0;
}

template <typename T, int E, bool kHad>
__global__ void __launch_bounds__(kThreads) amax_kernel(AttnFp8QuantParams p, SignBits sb, double sqrt_d) {
    __shared__ uint32_t s_sign[kMaxDim / 32];
    load_signs(sb, s_sign);
    const int b = blockIdx.z, h = blockIdx.y;
    const int r0 = blockIdx.x * kChunkRows, r1 = min(r0 + kChunkRows, p.seqlen);
    const T* x = static_cast<const T*>(p.x) + b * p.x_batch_stride + h * p.x_head_stride;
    const unsigned long long m = block_amax<T, E, kHad>(p, x, r0, r1, s_sign, sqrt_d);
    if (threadIdx.x == 0 && m != 0) atomicMax(p.amax_scratch + amax_slot(p, b, h), m);
}

__global__ void descale_kernel(AttnFp8QuantParams p, int64_t slots) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= slots) return;
    const double d = descale_of(p.amax_scratch[i], fp8_spec(p.format).fmax);
    p.descale[i] = __double2float_rn(d);
    if (p.descale64 != nullptr) p.descale64[i] = d;
}

template <typename T, int E, bool kHad>
__global__ void __launch_bounds__(kThreads) quant_kernel(AttnFp8QuantParams p, SignBits sb, double sqrt_d) {
    __shared__ uint32_t s_sign[kMaxDim / 32];
    load_signs(sb, s_sign);
    const int b = blockIdx.z, h = blockIdx.y;
    const int r0 = blockIdx.x * kChunkRows, r1 = min(r0 + kChunkRows, p.seqlen);
    const T* x = static_cast<const T*>(p.x) + b * p.x_batch_stride + h * p.x_head_stride;
    uint8_t* codes = p.codes + b * p.c_batch_stride + h * p.c_head_stride;
    const double descale = descale_of(p.amax_scratch[amax_slot(p, b, h)], fp8_spec(p.format).fmax);
    quantize_rows<T, E, kHad>(p, x, codes, r0, r1, descale, s_sign, sqrt_d);
}

// ---- host side -----------------------------------------------------------------------------------------

using attn::fail;

const char* dtype_name(int dt) { return dt == ATTN_QUANT_FP16 ? "fp16" : dt == ATTN_QUANT_BF16 ? "bf16" : "fp32"; }

bool valid_dim(int d) { return d >= 32 && d <= kMaxDim && (d & (d - 1)) == 0; }

// Packs the host signs into bits; ATTN_ERR_INVALID naming the first entry that is not exactly +-1.
int pack_signs(const float* signs, int d, const char* who, SignBits* out, char* err, int errlen) {
    *out = SignBits{};
    for (int j = 0; j < d; ++j) {
        if (signs[j] == -1.0f) {
            out->w[j >> 5] |= 1u << (j & 31);
        } else if (signs[j] != 1.0f) {
            return fail(err, errlen, ATTN_ERR_INVALID, "%s: signs[%d]=%g: every sign must be exactly +1 or -1 (§11)",
                        who, j, static_cast<double>(signs[j]));
        }
    }
    return ATTN_OK;
}

int check_sizes(const char* who, int batch, int heads, int seqlen, int head_dim, char* err, int errlen) {
    if (batch < 0 || heads < 0 || seqlen < 0)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: batch=%d heads=%d seqlen=%d: sizes must be >= 0", who, batch,
                    heads, seqlen);
    if (batch > 65535 || heads > 65535)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: batch=%d / heads=%d exceed the grid limit 65535", who,
                    batch, heads);
    if (!valid_dim(head_dim))
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                    "%s: head_dim=%d: must be a power of two in [32, %d] (one warp per row)", who, head_dim, kMaxDim);
    return ATTN_OK;
}

int check_strides(const char* who, const char* const* names, const int64_t* strides, int n, char* err, int errlen) {
    for (int i = 0; i < n; ++i)
        if (strides[i] < 0)
            return fail(err, errlen, ATTN_ERR_INVALID, "%s: %s=%lld: strides must be >= 0", who, names[i],
                        static_cast<long long>(strides[i]));
    return ATTN_OK;
}

template <typename TIn, typename TOut, int E>
cudaError_t launch_hadamard_e(const AttnHadamardParams& p, const SignBits& sb, double sqrt_d, cudaStream_t s) {
    const dim3 grid((p.seqlen + kChunkRows - 1) / kChunkRows, p.heads, p.batch);
    hadamard_kernel<TIn, TOut, E><<<grid, kThreads, 0, s>>>(p, sb, sqrt_d);
    return cudaGetLastError();
}

template <typename TIn, typename TOut>
cudaError_t launch_hadamard(const AttnHadamardParams& p, const SignBits& sb, double sqrt_d, cudaStream_t s) {
    switch (p.head_dim) {  // E = head_dim / 32 (validated)
        case 32: return launch_hadamard_e<TIn, TOut, 1>(p, sb, sqrt_d, s);
        case 64: return launch_hadamard_e<TIn, TOut, 2>(p, sb, sqrt_d, s);
        case 128: return launch_hadamard_e<TIn, TOut, 4>(p, sb, sqrt_d, s);
        case 256: return launch_hadamard_e<TIn, TOut, 8>(p, sb, sqrt_d, s);
        default: return launch_hadamard_e<TIn, TOut, 16>(p, sb, sqrt_d, s);
    }
}

template <typename T, int E, bool kHad>
cudaError_t launch_quant_e(const AttnFp8QuantParams& p, const SignBits& sb, double sqrt_d, int64_t slots,
                           cudaStream_t s) {
    if (p.granularity == ATTN_FP8_PER_TILE) {
        const dim3 grid((p.seqlen + p.tile - 1) / p.tile, p.heads, p.batch);
        if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
        quant_tile_kernel<T, E, kHad><<<grid, kThreads, 0, s>>>(p, sb, sqrt_d);
        return cudaGetLastError();
    }
    cudaError_t e = cudaMemsetAsync(p.amax_scratch, 0, slots * sizeof(unsigned long long), s);
    if (e != cudaSuccess) return e;
    const dim3 grid((p.seqlen + kChunkRows - 1) / kChunkRows, p.heads, p.batch);
    const bool rows = grid.x > 0 && grid.y > 0 && grid.z > 0;
    if (rows) {
        amax_kernel<T, E, kHad><<<grid, kThreads, 0, s>>>(p, sb, sqrt_d);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    descale_kernel<<<static_cast<unsigned>((slots + 255) / 256), 256, 0, s>>>(p, slots);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (rows) {
        quant_kernel<T, E, kHad><<<grid, kThreads, 0, s>>>(p, sb, sqrt_d);
        e = cudaGetLastError();
    }
    return e;
}

template <typename T, bool kHad>
cudaError_t launch_quant(const AttnFp8QuantParams& p, const SignBits& sb, double sqrt_d, int64_t slots,
                         cudaStream_t s) {
    switch (p.head_dim) {  // E = head_dim / 32 (validated)
        case 32: return launch_quant_e<T, 1, kHad>(p, sb, sqrt_d, slots, s);
        case 64: return launch_quant_e<T, 2, kHad>(p, sb, sqrt_d, slots, s);
        case 128: return launch_quant_e<T, 4, kHad>(p, sb, sqrt_d, slots, s);
        case 256: return launch_quant_e<T, 8, kHad>(p, sb, sqrt_d, slots, s);
        default: return launch_quant_e<T, 16, kHad>(p, sb, sqrt_d, slots, s);
    }
}

template <typename T>
cudaError_t launch_quant_dt(const AttnFp8QuantParams& p, const SignBits& sb, double sqrt_d, int64_t slots,
                            cudaStream_t s) {
    return p.signs != nullptr ? launch_quant<T, true>(p, sb, sqrt_d, slots, s)
                              : launch_quant<T, false>(p, sb, sqrt_d, slots, s);
}

}  // namespace

extern "C" int attn_hadamard(const AttnHadamardParams* p, const AttnLaunch* launch, char* err, int errlen) {
    const char* who = "attn_hadamard";
    if (p == nullptr) return fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", who);
    int rc = check_sizes(who, p->batch, p->heads, p->seqlen, p->head_dim, err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p->x_dtype < 0 || p->x_dtype > 2)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: x_dtype=%d: 0 (fp16), 1 (bf16) or 2 (fp32)", who,
                    p->x_dtype);
    if (p->y_dtype != p->x_dtype && p->y_dtype != ATTN_QUANT_FP32)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: y_dtype=%d with x_dtype=%d (%s): y is x's dtype or fp32 (2)",
                    who, p->y_dtype, p->x_dtype, dtype_name(p->x_dtype));
    if (p->signs == nullptr)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: signs is NULL: a host array of head_dim=%d values +-1", who,
                    p->head_dim);
    SignBits sb;
    if ((rc = pack_signs(p->signs, p->head_dim, who, &sb, err, errlen)) != ATTN_OK) return rc;
    const char* names[6] = {"x_batch_stride", "x_head_stride", "x_row_stride",
                            "y_batch_stride", "y_head_stride", "y_row_stride"};
    const int64_t strides[6] = {p->x_batch_stride, p->x_head_stride, p->x_row_stride,
                                p->y_batch_stride, p->y_head_stride, p->y_row_stride};
    if ((rc = check_strides(who, names, strides, 6, err, errlen)) != ATTN_OK) return rc;
    if (p->batch == 0 || p->heads == 0 || p->seqlen == 0) return ATTN_OK;
    if (p->x == nullptr || p->y == nullptr)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: x=%p y=%p: NULL tensor pointer", who, p->x, p->y);
    const double sqrt_d = sqrt(static_cast<double>(p->head_dim));
    cudaStream_t s = attn::launch_stream(launch);
    cudaError_t e;
    switch (p->x_dtype * 3 + p->y_dtype) {
        case ATTN_QUANT_FP16 * 3 + ATTN_QUANT_FP16: e = launch_hadamard<__half, __half>(*p, sb, sqrt_d, s); break;
        case ATTN_QUANT_FP16 * 3 + ATTN_QUANT_FP32: e = launch_hadamard<__half, float>(*p, sb, sqrt_d, s); break;
        case ATTN_QUANT_BF16 * 3 + ATTN_QUANT_BF16:
            e = launch_hadamard<__nv_bfloat16, __nv_bfloat16>(*p, sb, sqrt_d, s);
            break;
        case ATTN_QUANT_BF16 * 3 + ATTN_QUANT_FP32: e = launch_hadamard<__nv_bfloat16, float>(*p, sb, sqrt_d, s); break;
        default: e = launch_hadamard<float, float>(*p, sb, sqrt_d, s); break;
    }
    return attn::cuda_status(e, who, err, errlen);
}

extern "C" int attn_fp8_quantize(const AttnFp8QuantParams* p, const AttnLaunch* launch, char* err, int errlen) {
    const char* who = "attn_fp8_quantize";
    if (p == nullptr) return fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", who);
    int rc = check_sizes(who, p->batch, p->heads, p->seqlen, p->head_dim, err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p->x_dtype < 0 || p->x_dtype > 2)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: x_dtype=%d: 0 (fp16), 1 (bf16) or 2 (fp32)", who,
                    p->x_dtype);
    if (p->format != ATTN_FP8_E4M3FN && p->format != ATTN_FP8_E5M2)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: format=%d: 0 (e4m3fn) or 1 (e5m2)", who, p->format);
    if (p->granularity < ATTN_FP8_PER_TENSOR || p->granularity > ATTN_FP8_PER_TILE)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: granularity=%d: 0 (per_tensor), 1 (per_head), 2 (per_tile)",
                    who, p->granularity);
    if (p->granularity == ATTN_FP8_PER_HEAD && (p->group < 1 || (p->heads > 0 && p->heads % p->group != 0)))
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: group=%d with heads=%d: per_head needs group >= 1 dividing heads",
                    who, p->group, p->heads);
    if (p->granularity == ATTN_FP8_PER_TILE && p->tile < 1)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: tile=%d: per_tile needs tile >= 1", who, p->tile);
    SignBits sb{};
    if (p->signs != nullptr && (rc = pack_signs(p->signs, p->head_dim, who, &sb, err, errlen)) != ATTN_OK) return rc;
    const char* names[6] = {"x_batch_stride", "x_head_stride", "x_row_stride",
                            "c_batch_stride", "c_head_stride", "c_row_stride"};
    const int64_t strides[6] = {p->x_batch_stride, p->x_head_stride, p->x_row_stride,
                                p->c_batch_stride, p->c_head_stride, p->c_row_stride};
    if ((rc = check_strides(who, names, strides, 6, err, errlen)) != ATTN_OK) return rc;
    const int64_t slots = p->granularity == ATTN_FP8_PER_TENSOR ? 1
                          : p->granularity == ATTN_FP8_PER_HEAD ? static_cast<int64_t>(p->batch) * (p->heads / p->group)
                                                                : 0;
    const bool has_rows = p->batch > 0 && p->heads > 0 && p->seqlen > 0;
    if ((slots > 0 || has_rows) && p->descale == nullptr)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: descale is NULL (fp32 output)", who);
    if (has_rows && (p->x == nullptr || p->codes == nullptr))
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: x=%p codes=%p: NULL tensor pointer", who, p->x,
                    static_cast<const void*>(p->codes));
    if (slots == 0 && !has_rows) return ATTN_OK;
    const double sqrt_d = sqrt(static_cast<double>(p->head_dim));
    attn::LaunchScratch scratch(launch);
    const cudaStream_t s = scratch.stream();
    AttnFp8QuantParams q = *p;
    if (slots > 0 && q.amax_scratch == nullptr) {
        rc = scratch.take(reinterpret_cast<void**>(&q.amax_scratch), slots * sizeof(unsigned long long),
                          "attn_fp8_quantize: amax_scratch", err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    cudaError_t e;
    switch (q.x_dtype) {
        case ATTN_QUANT_FP16: e = launch_quant_dt<__half>(q, sb, sqrt_d, slots, s); break;
        case ATTN_QUANT_BF16: e = launch_quant_dt<__nv_bfloat16>(q, sb, sqrt_d, slots, s); break;
        default: e = launch_quant_dt<float>(q, sb, sqrt_d, slots, s); break;
    }
    const cudaError_t f = scratch.release();
    if (e == cudaSuccess) e = f;
    return attn::cuda_status(e, who, err, errlen);
}

extern "C" int attn_quant_params_layout(int64_t* out, int n) {
#define ATTN_HAD_FIELDS(X)                                                                                         \
    X(x) X(y) X(x_batch_stride) X(x_head_stride) X(x_row_stride) X(y_batch_stride) X(y_head_stride) X(y_row_stride) \
    X(batch) X(heads) X(seqlen) X(head_dim) X(x_dtype) X(y_dtype) X(signs)
#define ATTN_Q8_FIELDS(X)                                                                                          \
    X(x) X(codes) X(descale) X(descale64) X(x_batch_stride) X(x_head_stride) X(x_row_stride) X(c_batch_stride)    \
    X(c_head_stride) X(c_row_stride) X(batch) X(heads) X(seqlen) X(head_dim) X(x_dtype) X(format) X(granularity)  \
    X(group) X(tile) X(signs) X(amax_scratch)
    int64_t vals[64];
    int k = 0;
    vals[k++] = ATTN_QUANT_PARAMS_VERSION;
    vals[k++] = sizeof(AttnHadamardParams);
    vals[k++] = sizeof(AttnFp8QuantParams);
#define HAD_OFF(f) vals[k++] = offsetof(AttnHadamardParams, f);
#define Q8_OFF(f) vals[k++] = offsetof(AttnFp8QuantParams, f);
    ATTN_HAD_FIELDS(HAD_OFF)
    ATTN_Q8_FIELDS(Q8_OFF)
#undef HAD_OFF
#undef Q8_OFF
    const int m = k < n ? k : n;
    for (int i = 0; i < m; ++i) out[i] = vals[i];
    return m;
}
