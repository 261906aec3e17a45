// Host side of the TMA loads: 4-d tensor maps over [batch, heads, seqlen, dim] tensors given by element
// strides (attn_params.h), built with the driver's cuTensorMapEncodeTiled, reached through the runtime's
// cudaGetDriverEntryPointByVersion (no link against libcuda).
//
// The map's dimensions are innermost first: (dim, seqlen, heads, batch), box (64, rows, 1, 1), 128-byte
// swizzle, so one box is one 64-column block of a tile in the layout hopper/ptx.cuh's descriptors expect.
// A broadcast axis (stride 0, e.g. one K/V shared by every batch entry) becomes a dimension of extent 1
// whose coordinate the kernel multiplies by 0 (TensorMap2::head_mul / batch_mul), since TMA wants strides
// that are positive multiples of 16 bytes. Anything else TMA cannot express is reported by name.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

namespace attn::hopper {

struct TmaTensor {
    CUtensorMap map;
    int head_mul, batch_mul;  // 1, or 0 for a broadcast (stride-0) axis
};

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
    static EncodeTiledFn fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            p = nullptr;
        return reinterpret_cast<EncodeTiledFn>(p);
    }();
    return fn;
}

// Builds the map of tensor `name` (for messages). Returns 0, or writes a message into err and returns 1.
// `dt` / `es`: element type and its size in bytes; the box is `box_cols` elements wide (box_cols * es bytes, at
// most the swizzle span `sw`).
inline int make_tma_tensor_typed(TmaTensor& t, const char* name, const void* ptr, CUtensorMapDataType dt, int64_t es,
                                 int box_cols, CUtensorMapSwizzle sw, int dim, int seqlen, int heads, int batch,
                                 int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows, char* err,
                                 int errlen) {
    EncodeTiledFn fn = encode_tiled_fn();
    if (fn == nullptr) {
        snprintf(err, errlen, "cuTensorMapEncodeTiled is not available from the driver");
        return 1;
    }
    if (row_stride <= 0 && seqlen > 1) {
        snprintf(err, errlen, "%s_row_stride=%lld: TMA needs a positive row stride", name,
                 static_cast<long long>(row_stride));
        return 1;
    }
    t.head_mul = head_stride == 0 ? 0 : 1;
    t.batch_mul = batch_stride == 0 ? 0 : 1;
    // A broadcast or length-1 axis gets extent 1; its stride must still be a valid TMA stride.
    const int64_t rs = row_stride > 0 ? row_stride : dim;
    const int64_t hs = t.head_mul ? head_stride : rs * seqlen;
    const int64_t bs = t.batch_mul ? batch_stride : hs * heads;
    const int64_t strides[3] = {rs * es, hs * es, bs * es};
    const char* snames[3] = {"row_stride", "head_stride", "batch_stride"};
    for (int i = 0; i < 3; ++i)
        if (strides[i] % 16 != 0 || strides[i] >= (int64_t(1) << 40)) {
            snprintf(err, errlen, "%s_%s=%lld elements: TMA needs a multiple of 16 bytes below 2^40", name,
                     snames[i], static_cast<long long>(strides[i] / es));
            return 1;
        }
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
        snprintf(err, errlen, "%s=%p: TMA needs a 16-byte aligned base address", name, ptr);
        return 1;
    }
    cuuint64_t gdim[4] = {static_cast<cuuint64_t>(dim), static_cast<cuuint64_t>(seqlen > 0 ? seqlen : 1),
                          static_cast<cuuint64_t>(t.head_mul ? heads : 1),
                          static_cast<cuuint64_t>(t.batch_mul ? batch : 1)};
    cuuint64_t gstride[3] = {static_cast<cuuint64_t>(strides[0]), static_cast<cuuint64_t>(strides[1]),
                             static_cast<cuuint64_t>(strides[2])};
    cuuint32_t box[4] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    CUresult r = fn(&t.map, dt, 4, const_cast<void*>(ptr), gdim, gstride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen,
                 "cuTensorMapEncodeTiled(%s: dims %d x %d x %d x %d, strides %lld/%lld/%lld elements) failed with "
                 "CUresult %d",
                 name, dim, seqlen, heads, batch, static_cast<long long>(rs), static_cast<long long>(hs),
                 static_cast<long long>(bs), static_cast<int>(r));
        return 1;
    }
    return 0;
}

// fp16 / bf16 tensors: boxes of 64 columns (128 bytes), 128-byte swizzle.
inline int make_tma_tensor(TmaTensor& t, const char* name, const void* ptr, bool bf16, int dim, int seqlen, int heads,
                           int batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows,
                           char* err, int errlen) {
    return make_tma_tensor_typed(t, name, ptr, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                 2, 64, CU_TENSOR_MAP_SWIZZLE_128B, dim, seqlen, heads, batch, row_stride, head_stride,
                                 batch_stride, box_rows, err, errlen);
}

}  // namespace attn::hopper
