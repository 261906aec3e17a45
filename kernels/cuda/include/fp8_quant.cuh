// Device pieces of the FP8 input kernels (kernels/cuda/hadamard.cu), all in float64 so that every result
// equals oracles/fp8.py's (SEMANTICS.md §10, §11):
//   - RowIO: one warp holds one row of head_dim values, E = head_dim / 32 contiguous elements per lane,
//     loaded / stored with vector accesses when the address allows it;
//   - fwht_row: the unnormalised fast Walsh-Hadamard transform with the oracle's butterflies, stride 1, 2, 4,
//     ... (strides below E inside a lane, the others across lanes by shuffles), then * s, then / sqrt(d);
//   - round_fp8 / encode_fp8: one round-to-nearest-even onto the FP8 grid from the float64 value, saturating
//     at +-max (inf too), NaN kept; then the 8-bit pattern of that grid value.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

namespace attn {
namespace quant {

// One FP8 format: mantissa bits, smallest normal exponent, exponent bias, largest finite value.
struct Fp8Spec {
    int mbits, emin, bias;
    double fmax;
    unsigned char nan_code;
};
__host__ __device__ constexpr Fp8Spec fp8_spec(int format) {
    return format == 0 ? Fp8Spec{3, -6, 7, 448.0, 0x7F} : Fp8Spec{2, -14, 15, 57344.0, 0x7F};
}

// storage type <-> double (exact widening; one correctly rounded narrowing)
template <typename T> struct Conv;
template <> struct Conv<__half> {
    static __device__ __forceinline__ double to_d(__half x) { return static_cast<double>(__half2float(x)); }
    static __device__ __forceinline__ __half from_d(double x) { return __double2half(x); }
};
template <> struct Conv<__nv_bfloat16> {
    static __device__ __forceinline__ double to_d(__nv_bfloat16 x) { return static_cast<double>(__bfloat162float(x)); }
    static __device__ __forceinline__ __nv_bfloat16 from_d(double x) { return __double2bfloat16(x); }
};
template <> struct Conv<float> {
    static __device__ __forceinline__ double to_d(float x) { return static_cast<double>(x); }
    static __device__ __forceinline__ float from_d(double x) { return __double2float_rn(x); }
};

template <int BYTES> struct Unit;
template <> struct Unit<1> { using t = unsigned char; };
template <> struct Unit<2> { using t = unsigned short; };
template <> struct Unit<4> { using t = unsigned int; };
template <> struct Unit<8> { using t = uint2; };
template <> struct Unit<16> { using t = uint4; };

// N elements of T at p (p = row + lane * N): vector units of up to 16 bytes when p is aligned to one unit.
template <typename T, int N>
__device__ __forceinline__ void load_elems(const T* p, T (&out)[N]) {
    constexpr int kBytes = N * static_cast<int>(sizeof(T));
    constexpr int kUnit = kBytes < 16 ? kBytes : 16;
    using U = typename Unit<kUnit>::t;
    if (reinterpret_cast<uintptr_t>(p) % kUnit == 0) {
        U tmp[kBytes / kUnit];
#pragma unroll
        for (int i = 0; i < kBytes / kUnit; ++i) tmp[i] = reinterpret_cast<const U*>(p)[i];
        memcpy(out, tmp, kBytes);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = p[i];
    }
}

template <typename T, int N>
__device__ __forceinline__ void store_elems(T* p, const T (&in)[N]) {
    constexpr int kBytes = N * static_cast<int>(sizeof(T));
    constexpr int kUnit = kBytes < 16 ? kBytes : 16;
    using U = typename Unit<kUnit>::t;
    if (reinterpret_cast<uintptr_t>(p) % kUnit == 0) {
        U tmp[kBytes / kUnit];
        memcpy(tmp, in, kBytes);
#pragma unroll
        for (int i = 0; i < kBytes / kUnit; ++i) reinterpret_cast<U*>(p)[i] = tmp[i];
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) p[i] = in[i];
    }
}

template <typename T, int E>
__device__ __forceinline__ void load_row(const T* row, int lane, double (&v)[E]) {
    T raw[E];
    load_elems<T, E>(row + lane * E, raw);
#pragma unroll
    for (int i = 0; i < E; ++i) v[i] = Conv<T>::to_d(raw[i]);
}

template <typename T, int E>
__device__ __forceinline__ void store_row(T* row, int lane, const double (&v)[E]) {
    T raw[E];
#pragma unroll
    for (int i = 0; i < E; ++i) raw[i] = Conv<T>::from_d(v[i]);
    store_elems<T, E>(row + lane * E, raw);
}

// The random Hadamard transform of one row held by a warp (element lane * E + i in v[i]):
// v <- fwht(v) * s / sqrt(d), exactly as oracles.hadamard.random_hadamard computes it in float64.
// sign_bits: bit j of word j / 32 set = s_j = -1. sqrt_d: sqrt(d) rounded to double (the host's sqrt).
template <int E>
__device__ __forceinline__ void fwht_row(double (&v)[E], int lane, const uint32_t* sign_bits, double sqrt_d) {
#pragma unroll
    for (int h = 1; h < E; h *= 2) {  // pairs inside the lane: index i (bit h clear) with i + h
#pragma unroll
        for (int i = 0; i < E; ++i) {
            if ((i & h) == 0) {
                const double a = v[i], b = v[i + h];
                v[i] = a + b;
                v[i + h] = a - b;
            }
        }
    }
#pragma unroll
    for (int m = 1; m < 32; m *= 2) {  // stride h = m * E: partner lane = lane ^ m, same slot
        const bool upper = (lane & m) != 0;
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const double other = __shfl_xor_sync(0xffffffffu, v[i], m);
            v[i] = upper ? other - v[i] : v[i] + other;  // lower: a + b; upper: a - b with a the lower entry
        }
    }
#pragma unroll
    for (int i = 0; i < E; ++i) {
        const int j = lane * E + i;
        const double s = ((sign_bits[j >> 5] >> (j & 31)) & 1u) ? -1.0 : 1.0;
        v[i] = (v[i] * s) / sqrt_d;
    }
}

__host__ __device__ __forceinline__ uint64_t bits_of(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
__host__ __device__ __forceinline__ double double_of(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}
__host__ __device__ __forceinline__ int binade(double a) {  // floor(log2 a) for normal doubles, -1023 for 0 / subnormals
    return static_cast<int>((bits_of(a) >> 52) & 0x7FF) - 1023;
}
__host__ __device__ __forceinline__ double pow2(int e) {  // 2^e for -1022 <= e <= 1023
    return double_of(static_cast<uint64_t>(e + 1023) << 52);
}

// One round-to-nearest-even onto the FP8 grid of `f`, saturating (SEMANTICS.md §10, oracles.fp8.round_fp8):
// inside the binade of |x| (clamped at emin) x is scaled by the power of two 2^-(e - mbits), rounded half to
// even (rint), scaled back; both scalings are exact.
__host__ __device__ __forceinline__ double round_fp8(double x, const Fp8Spec& f) {
    const double fin = isinf(x) ? copysign(f.fmax, x) : x;
    int e = binade(fabs(fin));
    e = e > 1000 ? 1000 : (e < f.emin ? f.emin : e);  // NaN's binade is 1024: keep the scalings finite
    const double r = rint(fin * pow2(f.mbits - e)) * pow2(e - f.mbits);
    return r > f.fmax ? f.fmax : (r < -f.fmax ? -f.fmax : r);  // NaN compares false: stays NaN
}

// The bit pattern of a value of the FP8 grid of `f` (|r| <= fmax or NaN).
__host__ __device__ __forceinline__ unsigned char encode_fp8(double r, const Fp8Spec& f) {
    if (isnan(r)) return f.nan_code;
    const unsigned sign = signbit(r) ? 0x80u : 0u;
    const double a = fabs(r);
    const int e = binade(a);
    unsigned bits;
    if (e < f.emin) {  // subnormal or zero: a = m * 2^(emin - mbits)
        bits = static_cast<unsigned>(a * pow2(f.mbits - f.emin));
    } else {
        const unsigned m = static_cast<unsigned>(a * pow2(f.mbits - e)) - (1u << f.mbits);
        bits = (static_cast<unsigned>(e + f.bias) << f.mbits) | m;
    }
    return static_cast<unsigned char>(sign | bits);
}

// |x| as ordered bits: for non-negative doubles (NaN included, fabs clears its sign) unsigned order = value
// order with NaN above +inf, so a max over these bits propagates NaN as numpy's max does.
__host__ __device__ __forceinline__ unsigned long long abs_bits(double x) {
    return static_cast<unsigned long long>(bits_of(fabs(x)));
}

__device__ __forceinline__ unsigned long long warp_max_bits(unsigned long long v) {
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) {
        const unsigned long long o = __shfl_xor_sync(0xffffffffu, v, m);
        v = o > v ? o : v;
    }
    return v;
}

// descale = amax / fmax where amax > 0, else 1 (NaN amax: 1), as oracles.fp8 computes it.
__host__ __device__ __forceinline__ double descale_of(unsigned long long amax_bits, double fmax) {
    const double amax = double_of(amax_bits);
    return amax > 0.0 ? amax / fmax : 1.0;
}

}  // namespace quant
}  // namespace attn
