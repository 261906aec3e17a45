// Tile configuration and shared-memory layout of the forward kernels (FA2 and split-KV).
//
// A CTA owns kBlockM query rows; each of its kNWarps warps owns kMTiles * 16 consecutive rows
// (split-Q: warps never exchange softmax statistics, unlike FA1's split-K). K and V stream through
// shared memory in kBlockN-key tiles. Rows are kHeadDim elements; the 16-byte chunks of each row
// are XOR-swizzled with the row index (chunk ^= row % 8 inside every 64-element group) so the eight
// row addresses of one ldmatrix phase, and the cp.async writes, hit eight distinct bank groups.
//
// A tile shape is a struct naming each choice (FwdTile below; as hopper/config.cuh's schedules), and
// FwdTraits<D, Tile, Elem> derives every constant the kernel reads from it. The shipped shapes of
// each head dim, and why, are fwd_defaults.cuh's.
#pragma once
#include "fa_ptx.cuh"

namespace attn {

// A forward tile shape: derive from it and override the members that differ (C++ name hiding), e.g.
//     struct Keys128 : Fa2FwdDefault<64> { static constexpr int block_n = 128; };
// The values here are FA2's d = 128 shape; fwd_defaults.cuh names every shipped shape.
struct FwdTile {
    // Query rows per CTA: block_m / warps per warp, a multiple of 16 (whole m16 tiles).
    static constexpr int block_m = 128;
    // Keys per K / V tile (a multiple of 16).
    static constexpr int block_n = 64;
    static constexpr int warps = 4;
    // 1: FA2's K/V ping-pong (one K and one V buffer, each filled while the other is used).
    // >= 2: a ring of kv_stages (K, V) tile pairs with kv_stages - 1 pairs in flight (split-KV,
    // where one warp per CTA cannot hide a memory round trip per tile behind its own arithmetic).
    static constexpr int kv_stages = 1;
};

template <int D, class Tile, typename Elem_>
struct FwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = D;
    static constexpr int kBlockM = Tile::block_m;
    static constexpr int kBlockN = Tile::block_n;
    static constexpr int kNWarps = Tile::warps;
    static constexpr int kStages = Tile::kv_stages;  // FwdTile::kv_stages
    static_assert(kStages >= 1, "one K / V ping-pong, or a ring of two or more stages");
    static constexpr int kThreads = 32 * kNWarps;
    static constexpr int kWarpRows = kBlockM / kNWarps;
    static constexpr int kMTiles = kWarpRows / 16;     // m16 tiles per warp
    static constexpr int kNTilesS = kBlockN / 8;        // n8 tiles of S = Q K^T per m16 tile
    static constexpr int kNTilesO = kHeadDim / 8;       // n8 tiles of O per m16 tile
    static constexpr int kKStepsQK = kHeadDim / 16;     // k16 steps of Q K^T
    static constexpr int kKStepsPV = kBlockN / 16;      // k16 steps of P V
    static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per row
    static_assert(kWarpRows % 16 == 0 && kMTiles >= 1, "each warp owns whole m16 tiles");
    static_assert(kBlockN % 16 == 0 && kHeadDim % 64 == 0, "tile shapes");

    // Shared memory: Q [kBlockM][d], then kStages x (K [kBlockN][d], V [kBlockN][d]). With one stage K
    // and V are separate buffers so that V(n) lands while Q K(n)^T runs and K(n-1) while P V(n) runs.
    static constexpr int kSmemQ = kBlockM * kHeadDim;
    static constexpr int kSmemKV = kBlockN * kHeadDim;
    static constexpr int kSmemBytes = (kSmemQ + 2 * kStages * kSmemKV) * static_cast<int>(sizeof(Elem));

    // Element offset of (row, col) in a swizzled [rows][kHeadDim] tile.
    static __device__ __forceinline__ int swz(int row, int col) {
        const int chunk = col >> 3;
        return row * kHeadDim + (((chunk & ~7) | ((chunk ^ row) & 7)) << 3) + (col & 7);
    }

    // Incremental form of swz() for ldmatrix addresses. A lane reads chunk c + c0 of row r, where c0
    // in {0, 1} and r % 8 depend only on the lane and c (even) only on the unrolled step. Because c0
    // and c % 8 use disjoint bits, the swizzled chunk is (c & ~7) | ((c0 ^ r % 8) ^ (c % 8)): a
    // per-lane base XOR a step constant. The base is computed once; each step costs one LOP3 and an
    // immediate offset instead of recomputing row * pitch + swizzle per (step, lane). Needs the tile
    // 128-byte aligned in the shared window (bits 4-6 of the base are then exactly the lane's chunk
    // bits): the dynamic shared array is __align__(128) and every tile size is a multiple of 128 B.
    static constexpr uint32_t kRowBytes = kHeadDim * sizeof(Elem);
    static __device__ __forceinline__ uint32_t lane_base(const Elem* tile, int row, int c0) {
        return smem_u32(tile) + row * kRowBytes + (((c0 ^ row) & 7) << 4);
    }
    // chunk: even, a constant after unrolling (the lane part owns bit 0); row_off: rows added to
    // the lane's row, a multiple of 8 (keeps r % 8).
    static __device__ __forceinline__ uint32_t step_addr(uint32_t base, int chunk, int row_off) {
        return (base ^ ((chunk & 7) << 4)) + ((chunk & ~7) << 4) + row_off * kRowBytes;
    }

    // Copy `rows` rows (row r at gbase + r * row_stride) into a swizzled tile; rows >= nvalid become
    // zeros and are not read.
    template <int kRows>
    static __device__ __forceinline__ void load_tile(Elem* smem, const Elem* gbase, int64_t row_stride, int nvalid,
                                                     int tid) {
        constexpr int kRowStep = kThreads / kChunksPerRow;  // rows one pass of the CTA covers
        if constexpr (kThreads % kChunksPerRow == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0) {
            // Every pass keeps row % 8, so the swizzled column is the same in every pass: one
            // shared address plus an immediate, one global pointer bumped by a stride. (Indexing
            // each pass from scratch let the compiler keep all passes' addresses live across the
            // main loop, at 4 warps x 32 rows that alone pushed the d=128 tile into spills.)
            const int r0 = tid / kChunksPerRow, c = (tid % kChunksPerRow) * 8;
            const uint32_t dst = smem_u32(smem + swz(r0, c));
            const Elem* src = gbase + r0 * row_stride + c;
            const int64_t step = kRowStep * row_stride;
#pragma unroll
            for (int k = 0; k < kRows / kRowStep; ++k) {
                const bool valid = r0 + k * kRowStep < nvalid;
                cp_async_16_a(dst + k * kRowStep * kRowBytes, valid ? src : gbase, valid);
                src += step;
            }
        } else {
#pragma unroll
            for (int i = tid; i < kRows * kChunksPerRow; i += kThreads) {
                const int r = i / kChunksPerRow, c = (i % kChunksPerRow) * 8;
                const bool valid = r < nvalid;
                const Elem* src = valid ? gbase + r * row_stride + c : gbase;
                cp_async_16(smem + swz(r, c), src, valid);
            }
        }
    }
};

}  // namespace attn
