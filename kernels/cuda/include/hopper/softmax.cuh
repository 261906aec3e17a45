// Online softmax over one warpgroup's 64 rows of an S tile in the wgmma accumulator layout.
//
// Accumulator of m64nNk16 (N/2 floats per thread): warp w of the warpgroup holds rows 16w..16w+15; in
// column chunk j (8 columns), thread lane holds s[4j + 0..1] at row 16w + lane/4, columns 8j + 2(lane%4)
// + {0, 1}, and s[4j + 2..3] at row 16w + lane/4 + 8. So each thread owns two rows (h = 0, 1) and a row
// is spread over the 4 threads of a quad: a row reduction is two xor-shuffles.
//
// Scores come in "sl2 units": p = 2^(s*sl2 - m*sl2) with sl2 = scale * log2(e) folded into one FFMA (the
// softcap path pre-scales and passes sl2 = 1). The update is split in two so that the FA3 mainloop can
// compute P for tile j while O += P(j-1) V(j-1) is still running on the tensor cores: `online` turns S
// into P in place and returns the factor corr = 2^(m_old - m_new) per row; `rescale` applies it to O
// once the wgmma that writes O has completed. Row sums stay per-thread partials until `finalize`.
//
// max_stale > 0 (the lazy rescale, schedule.cuh Rescale::kLazy): a row keeps its running maximum m until a key tile's
// maximum exceeds it by more than max_stale in sl2 units, so p <= 2^max_stale; exact in real arithmetic (O, the row
// sums and the LSE all use the same m, whatever its value), and corr is then exactly 1, which lets a warp skip O *= corr.
//
// log2_offset (FP8 path, SEMANTICS.md §10): P = 2^(s*sl2 - m*sl2 + log2_offset), the max-offset trick that
// puts P in [0, 2^log2_offset] before it is rounded to FP8; the row sums are of that P, so `finalize`
// subtracts log2_offset * ln 2 from the LSE (O = acc / l is unchanged: the factor cancels).
#pragma once
#include <math.h>

#include "../fa_ptx.cuh"

namespace attn::hopper {

// 2^x on the FMA pipe instead of the MUFU (16 results per SM per clock; the FP8 forward's lab builds exp_poly4 /
// exp_poly2 move part of its exponentials here): n = round(x) through the 1.5 * 2^23 shifter, 2^(x - n) for
// |x - n| <= 1/2 as a degree-3 minimax polynomial (relative error < 8e-5, far below the FP8 rounding of P that follows), and n added to
// the exponent bits. x is first raised to -125 with max.NaN, so -inf (a masked score) gives 2^-125 (0 after the
// rounding to FP8, and < 1e-37 of a row sum that holds at least one 2^0), and NaN stays NaN.
__device__ __forceinline__ float exp2_fma(float x) {
    float xc;
    asm("max.NaN.f32 %0, %1, 0fC2FA0000;\n" : "=f"(xc) : "f"(x));  // max(x, -125), NaN kept
    const float t = xc + 12582912.f;                                // 1.5 * 2^23: the integer n in the low bits
    const float f = xc - (t - 12582912.f);
    const float p = fmaf(fmaf(fmaf(5.517166e-2f, f, 2.4261112e-1f), f, 6.9326099e-1f), f, 9.9992807e-1f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// What RowSoftmax::online computes, by name: a kernel's config derives its own options from these and overrides what it
// changes (config.cuh, fp8_config.cuh).
struct SoftmaxOptions {
    // P = 2^(s sl2 - m sl2 + log2_offset): 0, or the FP8 forward's max offset 8 (P in [0, 2^8] before its rounding).
    static constexpr int log2_offset = 0;
    // > 0: the lazy rescale (config.cuh Rescale::kLazy): a row keeps its maximum until a key tile's exceeds it by more
    // than max_stale in sl2 units.
    static constexpr int max_stale = 0;
    // > 1: the row maximum as that many independent chains joined at the end (the FP8 forward: with one chain ptxas ran
    // both rows' maxima through one temporary register, 6 cycles per pair of scores while the MUFU idles).
    static constexpr int max_chains = 1;
    // > 0: every poly_every-th 8-column chunk takes its exponentials from exp2_fma (the FMA pipe) instead of ex2.approx
    // (the MUFU).
    static constexpr int poly_every = 0;
    // 2^x of one score; `poly`: its chunk is one of every poly_every-th.
    static __device__ __forceinline__ float exp2(float x, bool poly) { return poly ? exp2_fma(x) : fast_exp2(x); }
};

struct RowSoftmax {
    float row_max[2];
    float row_sum[2];

    __device__ __forceinline__ void init() {
        row_max[0] = row_max[1] = -INFINITY;
        row_sum[0] = row_sum[1] = 0.f;
    }

    // O: SoftmaxOptions or a struct derived from it.
    template <class O, int kRegs>
    __device__ __forceinline__ void online(float (&s)[kRegs], float sl2, float (&corr)[2]) {
        constexpr int kLog2Offset = O::log2_offset, kPolyEvery = O::poly_every, kMaxChains = O::max_chains,
                      kMaxStale = O::max_stale;
        static_assert((kMaxChains & (kMaxChains - 1)) == 0 && (kRegs / 4) % kMaxChains == 0,
                      "a power of two of chains of equal length");
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = row_max[h];
            if constexpr (kMaxChains == 1) {
#pragma unroll
                for (int j = 0; j < kRegs / 4; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
            } else {
                float part[kMaxChains];
#pragma unroll
                for (int c = 0; c < kMaxChains; ++c) part[c] = fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]);
#pragma unroll
                for (int j = kMaxChains; j < kRegs / 4; ++j)
                    part[j % kMaxChains] = fmaxf(part[j % kMaxChains], fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
#pragma unroll
                for (int w = kMaxChains / 2; w >= 1; w /= 2)
#pragma unroll
                    for (int c = 0; c < w; ++c) part[c] = fmaxf(part[c], part[c + w]);
                mx = fmaxf(mx, part[0]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            if constexpr (kMaxStale > 0) {  // false for NaN: from -inf (no visible key yet) m moves to any maximum
                if ((mx - row_max[h]) * sl2 <= static_cast<float>(kMaxStale)) mx = row_max[h];
            }
            // No visible key yet: keep max = -inf and subtract 0, so masked scores give p = 0, not NaN.
            const float m_scaled = (mx == -INFINITY) ? 0.f : mx * sl2;
            // A kept maximum gives corr = 1 exactly: the fused row_max * sl2 - m_scaled would be the product's rounding
            // error, whose 2^x may be 1 + 1 ulp, and a warp's vote on corr == 1 would not see it.
            corr[h] = (kMaxStale > 0 && mx == row_max[h]) ? 1.f : fast_exp2(row_max[h] * sl2 - m_scaled);
            const float bias = kLog2Offset == 0 ? -m_scaled : static_cast<float>(kLog2Offset) - m_scaled;
            row_max[h] = mx;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < kRegs / 4; ++j) {
                const float x0 = fmaf(s[4 * j + 2 * h], sl2, bias), x1 = fmaf(s[4 * j + 2 * h + 1], sl2, bias);
                const bool poly = kPolyEvery > 0 && (j + 1) % (kPolyEvery > 0 ? kPolyEvery : 1) == 0;
                const float p0 = O::exp2(x0, poly);
                const float p1 = O::exp2(x1, poly);
                s[4 * j + 2 * h] = p0;
                s[4 * j + 2 * h + 1] = p1;
                sum += p0 + p1;
            }
            row_sum[h] = row_sum[h] * corr[h] + sum;
        }
    }

    template <int kRegs>
    static __device__ __forceinline__ void rescale(float (&o)[kRegs], const float (&corr)[2]) {
#pragma unroll
        for (int j = 0; j < kRegs / 4; ++j) {
            o[4 * j + 0] *= corr[0];
            o[4 * j + 1] *= corr[0];
            o[4 * j + 2] *= corr[1];
            o[4 * j + 3] *= corr[1];
        }
    }

    // 1/l (0 for a row that saw no key: O = 0) and LSE = m*scale + log(l) (-inf for such a row),
    // with the accurate logf (SEMANTICS.md §8), less O::log2_offset * ln 2.
    template <class O>
    __device__ __forceinline__ void finalize(float sl2, float (&inv_l)[2], float (&lse)[2]) {
        constexpr int kLog2Offset = O::log2_offset;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = row_sum[h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const bool empty = (l == 0.f) || (row_max[h] == -INFINITY);
            inv_l[h] = empty ? 0.f : 1.f / l;
            if constexpr (kLog2Offset == 0) {  // the BF16/FP16 path: this exact expression (its PTX unchanged)
                lse[h] = empty ? -INFINITY : row_max[h] * sl2 * kLn2 + logf(l);
            } else {
                lse[h] = empty ? -INFINITY : row_max[h] * sl2 * kLn2 + logf(l) - static_cast<float>(kLog2Offset) * kLn2;
            }
        }
    }
};

}  // namespace attn::hopper
