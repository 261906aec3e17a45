// What one work tile covers: its real lengths, query rows and key tiles (mask.cuh's visibility rule,
// SEMANTICS.md §4 causal alignments, §5 windows, §7 varlen). The producer and the consumers compute the
// same plan from the same tile, so they agree on which tiles are loaded without talking to each other.
#pragma once
#include "../attn_params.h"
#include "../mask.cuh"
#include "scheduler.cuh"
#include "tma_host.cuh"

namespace attn::hopper {

struct Fa3Params {
    AttnFwdParams p;
    TmaTensor q, k, v;
    TileOrder order;
    int* counter;  // persistent launches: tiles claimed so far beyond the first gridDim.x
};

struct TilePlan {
    MaskInfo mask;
    int i_lo, i_hi;  // query rows of the CTA inside the sequence (i_hi < i_lo: none)
    int n_lo, n_hi;  // key tiles [n_lo, n_hi) that hold a visible key for some row
    __device__ __forceinline__ int n_tiles() const { return n_hi > n_lo ? n_hi - n_lo : 0; }
};

// The key tiles that need per-element masks for query rows [i_lo, i_hi], in the consumers' loop order x = 0, 1, ...,
// nt - 1 (key tile n = n_hi - 1 - x): MaskInfo::tile_needs_mask holds from some key tile up (the sequence tail, the
// causal diagonal or right window edge) and below some key tile (the left window edge), so those tiles are a prefix
// x < x_lo and a suffix x >= x_hi of the loop. Two bounds per work tile instead of the test per key tile.
struct MaskedTiles {
    int x_lo, x_hi;
    __host__ __device__ __forceinline__ bool at(int x) const { return x < x_lo || x >= x_hi; }
};
__host__ __device__ __forceinline__ MaskedTiles masked_tiles(const MaskInfo& m, int n_hi, int nt, int block_n, int i_lo,
                                                             int i_hi) {
    MaskedTiles t{0, nt};
    while (t.x_lo < nt && m.tile_needs_mask(n_hi - 1 - t.x_lo, block_n, i_lo, i_hi)) ++t.x_lo;
    while (t.x_hi > t.x_lo && m.tile_needs_mask(n_hi - t.x_hi, block_n, i_lo, i_hi)) --t.x_hi;
    return t;
}

// Per-element masks of key tile n in a warpgroup's S accumulator (softmax.cuh's layout: a thread holds rows `row` and
// row + 8, h = (e / 2) % 2, and in 8-key chunk e / 4 the keys col0 + 8 (e / 4) + (e % 2), col0 = n * BN + 2 (lane % 4)):
// -inf where MaskInfo::visible is false. Each row's visible keys are an interval (key_lo / key_hi), so a score costs
// one compare of its compile-time column against its row's bounds, taken relative to col0 once per row (two more
// with a left window edge) instead of visible()'s per-score index arithmetic. Host-callable for its CPU test.
template <int BN>
__host__ __device__ __forceinline__ void mask_tile(float (&s)[BN / 2], const MaskInfo& m, int row, int col0) {
    int hi[2], lo[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        hi[h] = m.key_hi(row + 8 * h) - col0;
        lo[h] = m.key_lo(row + 8 * h) - col0;
    }
    if (m.left >= 0) {
#pragma unroll
        for (int e = 0; e < BN / 2; ++e) {
            const int c = 8 * (e / 4) + (e % 2), h = (e / 2) % 2;
            if (c > hi[h] || c < lo[h]) s[e] = -INFINITY;
        }
    } else {
#pragma unroll
        for (int e = 0; e < BN / 2; ++e) {
            if (8 * (e / 4) + (e % 2) > hi[(e / 2) % 2]) s[e] = -INFINITY;
        }
    }
}

// mask_tile for the S accumulator of the consumer warpgroup whose first query row is row0: this thread's rows and the
// first key of key tile n it holds (softmax.cuh's layout, as above).
template <int BN>
__device__ __forceinline__ void mask_warpgroup_tile(float (&s)[BN / 2], const MaskInfo& m, int row0, int n) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    mask_tile<BN>(s, m, row0 + 16 * warp + lane / 4, n * BN + 2 * (lane % 4));
}

template <class C>
__device__ __forceinline__ TilePlan make_plan(const AttnFwdParams& p, const WorkTile& w) {
    TilePlan t;
    t.mask = MaskInfo::make(p, w.b);
    t.i_lo = w.m_block * C::kBlockM;
    t.i_hi = min(t.i_lo + C::kBlockM, t.mask.lq) - 1;
    t.n_lo = t.n_hi = 0;
    if (t.i_hi >= t.i_lo) t.mask.tile_range(t.i_lo, t.i_hi, C::kBlockN, t.n_lo, t.n_hi);
    return t;
}

}  // namespace attn::hopper
