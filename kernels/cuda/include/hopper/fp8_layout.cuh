// Register and shared-memory layouts of the FA3 FP8 forward: the V transpose and the P fragments.
//
// FP8 wgmma takes both operands K-major. For O += P V the reduction axis is the key, so V (stored with the
// head dim contiguous) is transposed in shared memory into Vt: D rows of 128 keys, 128-byte swizzled.
//
// P comes from the fp32 S accumulator (softmax.cuh's layout: in column chunk j of 8 keys, thread lane holds
// keys 8j + 2t + {0, 1}, t = lane % 4, of rows g = lane / 4 and g + 8). The m64k32 A fragment of 8-bit
// operands wants four consecutive k positions 4t..4t+3 (and 16 + 4t..) per register. Rather than shuffle
// values between threads, the k positions are relabelled: inside every group of 16 keys, k position 4t + e
// (e = 0..3) holds key 2t + (e & 1) + 8 (e >> 1), so the four values a thread holds for chunks 2c, 2c + 1 are
// its register as they are. Vt uses the same relabelling (its column 4t + e of a 16-key group holds that
// key), so the product sums the same pairs (key, key).
//
// The transpose: warp lanes take 4 x 4-byte blocks (4 keys x 4 head-dim bytes), load four 32-bit words (one
// per key row), permute bytes (8 prmt) and store four words (one per head-dim row). The lane -> block map
// below makes both the loads (128-byte raw rows) and the stores conflict-free under the 128-byte swizzle:
// lane bits b0 b1 b4 pick the head-dim word w, lane bits b2 b3 b4 b1 the key word u.
#pragma once
#include <stdint.h>

#include "ptx.cuh"

namespace attn::hopper {

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Byte offset of (row r, byte column c) in a tile of `rows` rows stored as C::kColBlocks blocks of
// C::kRowBytes-byte swizzled rows (the layout TMA writes for Q, K and raw V).
template <class C>
__device__ __forceinline__ uint32_t tile_offset(int rows, int r, int c) {
    if constexpr (C::kRowBytes == 128) {
        const int cb = c >> 7, cc = c & 127;
        return cb * (rows * 128) + r * 128 + ((((cc >> 4) ^ (r & 7))) << 4) + (cc & 15);
    } else {
        return r * 64 + ((((c >> 4) ^ ((r >> 1) & 3))) << 4) + (c & 15);
    }
}

// Raw V tile (C::kBlockN keys x D bytes) -> Vt (D rows x 128 keys, 128-byte swizzle, keys relabelled as above).
// Keys >= valid are written as zero (the varlen / sequence tail, whose memory may hold anything: 0 * NaN would
// reach O). `tw` in [0, C::kTransposeWarps) is this warp's index among the transposing warps.
template <class C>
__device__ __forceinline__ void transpose_v(uint32_t raw, uint32_t vt, int valid, int tw, int lane) {
    constexpr int D = C::kHeadDim, WPR = D / 32;  // iterations per key-word offset
    static_assert(C::kBlockN == 128, "Vt rows are 128 keys = one 128-byte swizzle row");
    const int b0 = lane & 1, b1 = (lane >> 1) & 1, b2 = (lane >> 2) & 1, b3 = (lane >> 3) & 1, b4 = (lane >> 4) & 1;
    const int wl = b0 | (b1 << 1) | (b4 << 2);
    const int ul = b2 | (b3 << 1) | (b4 << 2) | (b1 << 3);
#pragma unroll 2
    for (int it = tw; it < D / 4; it += C::kTransposeWarps) {
        const int w = wl + 8 * (it % WPR);
        const int u = ul ^ (4 * (it / WPR));
        const int rbase = 16 * (u >> 2) + 2 * (u & 3);
        uint32_t L[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = rbase + (j & 1) + 8 * (j >> 1);
            L[j] = r < valid ? lds32(raw + tile_offset<C>(C::kBlockN, r, 4 * w)) : 0u;
        }
        const uint32_t t0 = __byte_perm(L[0], L[1], 0x5140), t1 = __byte_perm(L[0], L[1], 0x7362);
        const uint32_t t2 = __byte_perm(L[2], L[3], 0x5140), t3 = __byte_perm(L[2], L[3], 0x7362);
        const uint32_t o[4] = {__byte_perm(t0, t2, 0x5410), __byte_perm(t0, t2, 0x7632), __byte_perm(t1, t3, 0x5410),
                               __byte_perm(t1, t3, 0x7632)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = 4 * w + i;  // head-dim row of Vt
            sts32(vt + c * 128 + ((((u >> 2) ^ (c & 7))) << 4) + (u & 3) * 4, o[i]);
        }
    }
}

__device__ __forceinline__ void lds64(uint32_t addr, uint32_t& lo, uint32_t& hi) {
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(lo), "=r"(hi) : "r"(addr) : "memory");
}
__device__ __forceinline__ void sts64(uint32_t addr, uint32_t lo, uint32_t hi) {
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(lo), "r"(hi) : "memory");
}
// The columns of a 4 x 4 byte block (rows a, b, c, d: one word each) as four words: out[i] = byte i of a, b, c, d.
__device__ __forceinline__ void transpose4x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t (&out)[4]) {
    const uint32_t t0 = __byte_perm(a, b, 0x5140), t1 = __byte_perm(a, b, 0x7362);
    const uint32_t t2 = __byte_perm(c, d, 0x5140), t3 = __byte_perm(c, d, 0x7362);
    out[0] = __byte_perm(t0, t2, 0x5410);
    out[1] = __byte_perm(t0, t2, 0x7632);
    out[2] = __byte_perm(t1, t3, 0x5410);
    out[3] = __byte_perm(t1, t3, 0x7632);
}

// The same transpose for D = 128 in 8 x 8-byte blocks (8 keys x 8 head-dim bytes, 64-bit loads and stores: half the
// shared-memory instructions of transpose_v). Block (q, G, h): head-dim bytes 8q..8q+7 of the keys that one half
// (h) of Vt's 16-key group G holds, i.e. 16 G + 4 h + {0, 1, 8, 9, 2, 3, 10, 11} in Vt's byte order. Lane
// (qh = lane / 16, h = lane / 8 % 2, x = lane % 8) takes q = x + 8 qh, G = x ^ it: per half-warp the 16 loads hit
// 16 distinct 8-byte slots of a 128-byte row ((q, h) distinct) and so do the 16 stores ((G, h) distinct).
template <class C>
__device__ __forceinline__ void transpose_v_wide(uint32_t raw, uint32_t vt, int valid, int tw, int lane) {
    static_assert(C::kHeadDim == 128 && C::kRowBytes == 128 && C::kBlockN == 128, "the 8 x 8 transpose is for D = 128");
    const int x = lane & 7, h = (lane >> 3) & 1, q = x + 8 * (lane >> 4);
#pragma unroll 1
    for (int it = tw; it < 8; it += C::kTransposeWarps) {
        const int G = x ^ it, kbase = 16 * G + 4 * h;
        uint32_t lo[8], hi[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int key = kbase + (j & 1) + 8 * ((j >> 1) & 1) + 2 * (j >> 2);  // {0, 1, 8, 9, 2, 3, 10, 11}
            if (key < valid) {
                lds64(raw + key * 128 + ((((q >> 1) ^ (key & 7))) << 4) + ((q & 1) << 3), lo[j], hi[j]);
            } else {
                lo[j] = hi[j] = 0u;
            }
        }
        uint32_t w0[4], w1[4];
        transpose4x4(lo[0], lo[1], lo[2], lo[3], w0);
        transpose4x4(lo[4], lo[5], lo[6], lo[7], w1);
#pragma unroll
        for (int i = 0; i < 4; ++i) sts64(vt + (8 * q + i) * 128 + ((G ^ i) << 4) + 8 * h, w0[i], w1[i]);
        transpose4x4(hi[0], hi[1], hi[2], hi[3], w0);
        transpose4x4(hi[4], hi[5], hi[6], hi[7], w1);
#pragma unroll
        for (int i = 0; i < 4; ++i) sts64(vt + (8 * q + 4 + i) * 128 + ((G ^ (4 + i)) << 4) + 8 * h, w0[i], w1[i]);
    }
}

// The transpose for 64-key tiles (d = 256): Vt is D rows of 64 keys (64 bytes, 64-byte swizzle: 16-byte chunk
// G ^ ((row >> 1) & 3)), keys relabelled as above. 4 x 4-byte blocks as transpose_v; lane (t = lane % 4,
// a = lane / 4 % 4, b = lane / 16) takes head-dim word w = 8 (it % 8) + 4 b + a and key word u = 4 (it / 8) + t.
// Loads of one instruction: bank 4 ((w / 4 % 8) ^ (key % 8)) + w % 4, distinct over the lanes. Stores: two Vt rows
// share a 128-byte line, so each lane stores its four rows rotated by 2 (a / 2) + b, which spreads one
// instruction's 32 stores over both rows of a line: bank 16 (row % 2) + 4 (G ^ (row / 2 % 4)) + t, distinct too.
template <class C>
__device__ __forceinline__ void transpose_v_bn64(uint32_t raw, uint32_t vt, int valid, int tw, int lane) {
    static_assert(C::kBlockN == 64 && C::kRowBytes == 128, "the 64-key transpose: Vt rows of 64 bytes");
    constexpr int kIters = C::kHeadDim / 4 * (C::kBlockN / 4) / 32;  // 4 x 4-byte blocks per tile / 32 lanes
    const int t = lane & 3, a = (lane >> 2) & 3, b = lane >> 4;
    const int rot = 2 * (a >> 1) + b;
#pragma unroll 2
    for (int it = tw; it < kIters; it += C::kTransposeWarps) {
        const int w = 8 * (it % 8) + 4 * b + a, G = it / 8;
        uint32_t L[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = 16 * G + 2 * t + (j & 1) + 8 * (j >> 1);
            L[j] = r < valid ? lds32(raw + tile_offset<C>(C::kBlockN, r, 4 * w)) : 0u;
        }
        uint32_t o[4], x[4];
        transpose4x4(L[0], L[1], L[2], L[3], o);
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] = (rot & 1) ? o[(i + 1) & 3] : o[i];
#pragma unroll
        for (int i = 0; i < 4; ++i) o[i] = (rot & 2) ? x[(i + 2) & 3] : x[i];  // o[i] = the word of row (i + rot) % 4
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = 4 * w + ((i + rot) & 3);
            sts32(vt + c * 64 + (((G ^ ((c >> 1) & 3))) << 4) + 4 * t, o[i]);
        }
    }
}

// Four fp32 values -> four FP8 codes in one register (round to nearest even, saturating), lowest byte first.
template <typename Format>
__device__ __forceinline__ uint32_t pack_fp8x4(float a, float b, float c, float d);
template <>
__device__ __forceinline__ uint32_t pack_fp8x4<Fp8E4M3>(float a, float b, float c, float d) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
    return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}
template <>
__device__ __forceinline__ uint32_t pack_fp8x4<Fp8E5M2>(float a, float b, float c, float d) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
    return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// P (the S accumulator after the softmax) -> the A fragments of O += P V, one [4] per 32 keys.
template <typename Format, int BN>
__device__ __forceinline__ void p_to_fp8_frags(uint32_t (&pa)[BN / 32][4], const float (&s)[BN / 2]) {
#pragma unroll
    for (int ks = 0; ks < BN / 32; ++ks) {
        const float* x = s + 16 * ks;
        pa[ks][0] = pack_fp8x4<Format>(x[0], x[1], x[4], x[5]);
        pa[ks][1] = pack_fp8x4<Format>(x[2], x[3], x[6], x[7]);
        pa[ks][2] = pack_fp8x4<Format>(x[8], x[9], x[12], x[13]);
        pa[ks][3] = pack_fp8x4<Format>(x[10], x[11], x[14], x[15]);
    }
}

}  // namespace attn::hopper
