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
