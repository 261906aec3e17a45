// The shipped tile shapes of the forward kernels (fwd_traits.cuh FwdTile) for each head dim: attn_fa2_fwd
// (fa2_fwd.cu) runs Fa2FwdDefault<D> (Fa2FwdSmallSmem where a block cannot have d = 256's shared memory),
// attn_splitkv_fwd (splitkv.cu) SplitKvDefault<D>. Few, to keep the CI build short (docs/fa1_fa2.md,
// docs/split_kv.md); a tuning build derives from these and overrides what it changes, by name.
#pragma once
#include "fwd_traits.cuh"

namespace attn {

// FA2 forward, chosen by measurement on the H200 (docs/fa1_fa2.md, tuning table and v6): a K / V
// ping-pong (kv_stages 1), and
// d = 64: 4 warps x 32 rows (each K / V fragment read from shared memory feeds two MMAs), 128 x 128.
// d = 128: 4 warps x 32 rows, 128 x 64 (128 x 32 and 8 warps x 128 keys measured 0.88x / 0.82x).
// d = 256: 8 warps x 16 rows, 128 x 64 (the O accumulator of 32 rows x 256 would not fit registers;
//   8 warps share each K / V tile: half the global->shared copies per FLOP of the 4-warp 64-row
//   tile, 1.08x over it), 128 KB of shared memory.
template <int D>
struct Fa2FwdDefault;

// d = 64: 128 x 128, 4 warps.
template <>
struct Fa2FwdDefault<64> : FwdTile {
    static constexpr int block_n = 128;
};

// d = 128: 128 x 64, 4 warps (FwdTile as it is).
template <>
struct Fa2FwdDefault<128> : FwdTile {};

// d = 256: 128 x 64, 8 warps.
template <>
struct Fa2FwdDefault<256> : FwdTile {
    static constexpr int warps = 8;
};

// d = 256 on devices that grant a block less shared memory than Fa2FwdDefault<256>'s 128 KB (sm_86 /
// sm_89 parts run the sm_80 code with ~100 KB): the previous 4-warp 64-row tile, 96 KB.
struct Fa2FwdSmallSmem : Fa2FwdDefault<256> {
    static constexpr int block_m = 64;
    static constexpr int warps = 4;
};

// Split-KV (decoding): one warp and 16 packed rows per CTA (queries of one GQA group), small shared
// memory so many CTAs (and their cp.async loads) are resident per SM: decoding is bound by reading
// K and V, and bytes in flight are what hides the memory latency. A ring of two (K, V) stages (3 or
// 4 stages measured 0.85x / 0.95x: bytes in flight were not the limit); 64-key tiles, 32 at d = 256.
template <int D>
struct SplitKvDefault;

template <>
struct SplitKvDefault<64> : FwdTile {
    static constexpr int block_m = 16;
    static constexpr int warps = 1;
    static constexpr int kv_stages = 2;
};

template <>
struct SplitKvDefault<128> : SplitKvDefault<64> {};

template <>
struct SplitKvDefault<256> : SplitKvDefault<64> {
    static constexpr int block_n = 32;
};

}  // namespace attn
