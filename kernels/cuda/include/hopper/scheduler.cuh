// Work tiles of the FA3 kernels and the order they are handed out (SEMANTICS.md §4 causal, §5 window).
//
// A work tile is (tile index m along a sequence, query head h, batch b): a query tile of the forward, a key
// tile of the backward. Tile indices t = 0, 1, ... enumerate them in sections of `section` consecutive (b, h)
// pairs (the last section also takes the remainder, so it is never smaller than the others): all tiles of one
// section come before the next section, so the CTAs running at one time share the data of a few heads in L2.
// Inside a section m runs from the last to the first, the heads of the section fastest. Under a causal mask
// the forward's last query tile sees the most keys, so the longest jobs are handed out first and the short
// ones fill the end (longest processing time first; kernels/planning.py `greedy_loads` simulates the policy on
// the CPU); the backward, whose first key tile sees the most query rows, takes key tile num_m - 1 - m.
//
// Non-persistent launch: CTA t takes tile t (the hardware hands out CTAs in index order, a greedy
// scheduler). Persistent launch: gridDim.x CTAs; CTA c starts with tile c and then takes the next
// unclaimed index from a global counter whenever its producer has issued the loads of its current tile.
#pragma once
#include "config.cuh"
#include "ptx.cuh"

namespace attn::hopper {

struct WorkTile {
    int m_block, h, b;
};

struct TileOrder {
    int num_m, heads, batch, section;

    __host__ __device__ __forceinline__ int total() const { return num_m * heads * batch; }

    __host__ __device__ __forceinline__ WorkTile at(int t) const {
        const int per_section = section * num_m;
        const int bh_total = heads * batch;
        const int last = bh_total / section > 1 ? bh_total / section - 1 : 0;  // index of the last section
        const int sec = t / per_section < last ? t / per_section : last;
        const int bh0 = sec * section;
        const int g = sec < last ? section : bh_total - bh0;
        const int r = t - sec * per_section;
        const int bh = bh0 + r % g;
        WorkTile w;
        w.m_block = num_m - 1 - r / g;
        w.h = bh % heads;
        w.b = bh / heads;
        return w;
    }
};

// Cluster launches (config.cuh kClusterM = 2): CTAs 2c and 2c + 1 form cluster c. The first clusters take query tiles
// m, m + 1 of one head (`paired`: they share every K / V tile), in TileOrder's order over the pairs; with an odd number
// of query tiles, tile 0 of every head is left over and those run two to a cluster, each on its own (`paired` false),
// the last cluster's second CTA `idle` when the heads are odd too.
struct ClusterTile {
    WorkTile w;
    bool paired, idle;
};
__host__ __device__ __forceinline__ int cluster_grid(const TileOrder& o) {
    const int bh = o.heads * o.batch;
    return 2 * (o.num_m / 2) * bh + 2 * ((o.num_m % 2 * bh + 1) / 2);
}
__host__ __device__ __forceinline__ ClusterTile cluster_tile(const TileOrder& o, int cta) {
    const int c = cta / 2, r = cta % 2, bh = o.heads * o.batch, pairs = o.num_m / 2 * bh;
    ClusterTile t;
    if (c < pairs) {
        const WorkTile pw = TileOrder{o.num_m / 2, o.heads, o.batch, o.section}.at(c);
        t.w = WorkTile{o.num_m % 2 + 2 * pw.m_block + r, pw.h, pw.b};
        t.paired = true;
        t.idle = false;
    } else {
        const int single = 2 * (c - pairs) + r;  // (b, h) index of a left-over tile 0
        t.w = WorkTile{0, single % o.heads, single / o.heads};
        t.paired = false;
        t.idle = single >= bh;
    }
    return t;
}

// Heads per section: as many as fit the `bytes_per_head` they share in `l2_bytes` (at least 1).
inline int l2_section(long long bytes_per_head, long long l2_bytes, int bh_total) {
    long long s = bytes_per_head > 0 ? l2_bytes / bytes_per_head : bh_total;
    if (s < 1) s = 1;
    if (s > bh_total) s = bh_total;
    return static_cast<int>(s);
}

// Persistent builds: the producer hands each work-tile index to the consumers through two slots in shared memory,
// each guarded by a full / empty mbarrier pair (full: the producer's one arrival; empty: one per consumer thread,
// since every consumer thread reads the slot). Sm: the kernel's shared-memory layout, with tile_full(i),
// tile_empty(i) and slot(i) (mainloop.cuh Smem, fp8_mainloop.cuh Fp8Smem).
template <class Sm>
struct TileSlots {
    Sm sm;
    PipeState<2> ps;

    __device__ __forceinline__ void put(int t) {
        mbar_wait(sm.tile_empty(ps.stage), ps.phase ^ 1);
        *sm.slot(ps.stage) = t;
        mbar_arrive(sm.tile_full(ps.stage));
        ps.advance();
    }
    // Broadcast from lane 0, though every lane reads the same word: a value loaded from shared memory is not
    // warp-uniform to ptxas, so the work tile and every branch on it would be divergent paths, where ptxas serializes
    // the wgmmas (C7520: the persistent loop ran at half speed; tests/kernels/test_cuda_fa3_codegen.py).
    __device__ __forceinline__ int take() {
        mbar_wait(sm.tile_full(ps.stage), ps.phase);
        const int t = __shfl_sync(0xffffffffu, *sm.slot(ps.stage), 0);
        mbar_arrive(sm.tile_empty(ps.stage));
        ps.advance();
        return t;
    }
};

}  // namespace attn::hopper
