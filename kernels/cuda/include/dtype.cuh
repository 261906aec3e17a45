// Storage types of the kernels: templates over T = __half or __nv_bfloat16, all math in fp32.
// DT<T> converts one element to / from fp32 and packs two fp32 values into T2, the pair used for
// 4-byte stores (MmaOp<T>::pack in fa_ptx.cuh packs the same pair as the uint32_t an mma operand is).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace attn {

template <typename T> struct DT;
template <> struct DT<__half> {
    using T2 = __half2;
    static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ __half2 pack(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct DT<__nv_bfloat16> {
    using T2 = __nv_bfloat162;
    static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ __nv_bfloat162 pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

}  // namespace attn
