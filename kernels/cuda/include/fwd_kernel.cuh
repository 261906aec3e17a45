// The forward kernel shared by FA2 (one CTA per query tile) and split-KV decoding (one CTA per
// packed GQA query tile and key split): load Q, stream K/V tiles, S = Q K^T, mask, online softmax,
// O += P V, write. The pieces live in their own headers (fwd_traits: tiles and shared memory,
// fwd_mainloop: the GEMMs, softmax: statistics, mask: visibility, tile_scheduler: work mapping,
// fwd_epilogue: stores).
//
// Pipeline (two shared-memory buffers, one for K and one for V, filled alternately by cp.async):
//     load Q, K(n_hi - 1)
//     for n = n_hi - 1 down to n_lo:
//         wait K(n); barrier          -- K(n) landed; every warp is done reading V(n + 1)
//         issue V(n)                  -- lands while S = Q K(n)^T and the softmax run
//         S = Q K(n)^T; softcap; mask; online softmax
//         wait V(n); barrier          -- V(n) landed; every warp is done reading K(n)
//         issue K(n - 1)              -- lands while O += P V(n) runs
//         O += P V(n)
// Split-KV tile shapes use kv_stages >= 2 instead (fwd_traits.cuh FwdTile): a ring of (K, V) tile pairs with kStages - 1 pairs
// in flight (see the loop below), since one warp per CTA cannot hide a round trip per tile.
// Key tiles run from the last to the first so the tiles that need per-element masking (the
// sequence tail and the causal diagonal) come first and the rest take the unmasked path.
//
// Paged K/V (KvLayout::kPaged, split-KV only; attn_params.h v3): K/V live in page pools and key tile n starts
// at slot (n * kBlockN) % page_size of page block_table[b][(n * kBlockN) / page_size]. The launcher
// guarantees page_size % kBlockN == 0, so a tile never straddles two pages and its rows are the
// usual row-strided block. Only tiles n < ceil(lk / kBlockN) are ever loaded (tile_range clamps to
// the real length lk), hence only table entries < ceil(lk / page_size) are read, and rows j >= lk of
// the last tile are zero-filled by load_tile without a global read: table entries and slots past
// the sequence may hold anything (the conformance inputs poison them with NaN / decoy pages).
// A template parameter, so the non-paged kernels are compiled exactly as before (same registers).
//
// Attention sinks (Sinks::kPerHead, FA2 mode only; attn_params.h v4, SEMANTICS.md §18): the softmax state starts
// at (max, sum) = (sink, 1) instead of (-inf, 0) (OnlineSoftmax::init_sink), so the sink is in the
// running max and the denominator and nowhere else. Split-KV partials stay sink-free: the combine
// kernel (splitkv.cu) adds the sink once. Also a template parameter: the sink-free kernels are unchanged.
//
// The kernel's template parameters name each choice (FwdMode, tile_scheduler.cuh; ScoreScale, KvLayout,
// Sinks below): fwd_kernel<Tr, FwdMode::kFa2, ScoreScale::kFolded> is the common FA2 kernel, and
// fwd_kernel_for picks the instantiation a call's parameters need.
#pragma once
#include "launch_common.cuh"
#include "fwd_epilogue.cuh"
#include "fwd_mainloop.cuh"
#include "fwd_traits.cuh"
#include "mask.cuh"
#include "softmax.cuh"
#include "tile_scheduler.cuh"

namespace attn {

// ScoreScale (launch_common.cuh): how the score scale reaches the softmax, chosen per call by the launcher.
// Where key tile n of a batch is: a strided block of the batch's K / V, or the page block_table names.
enum class KvLayout { kContiguous, kPaged };
// Attention sinks: none, or one logit per query head in every row's softmax (p.sinks).
enum class Sinks { kNone, kPerHead };

template <class Tr, FwdMode kMode, ScoreScale kScale, KvLayout kKv = KvLayout::kContiguous,
          Sinks kSinks = Sinks::kNone>
__global__ void __launch_bounds__(Tr::kThreads) fwd_kernel(const __grid_constant__ AttnFwdParams p, int num_splits) {
    constexpr bool kSplit = kMode == FwdMode::kSplitKv, kPrescale = kScale == ScoreScale::kPrescaled;
    constexpr bool kPaged = kKv == KvLayout::kPaged, kSink = kSinks == Sinks::kPerHead;
    static_assert(!kPaged || (kSplit && Tr::kStages >= 2), "paged K/V: split-KV ring configurations only");
    static_assert(!kSink || !kSplit, "sinks: split-KV partials are sink-free, the combine adds the sink");
    using Elem = typename Tr::Elem;
    using Sched = TileScheduler<kMode>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
    Elem* sK = sQ + Tr::kSmemQ;  // with kStages > 1: stage t's K at sK + 2t * kSmemKV, its V right after
    Elem* sV = sK + Tr::kSmemKV;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_row0 = warp * Tr::kWarpRows;
    const WorkTile w = Sched::get(p);
    const MaskInfo mask = MaskInfo::make(p, w.b);
    const int lq = mask.lq;

    // Query rows of this CTA (inclusive range, within the sequence) and the key tiles they can see.
    int i_lo, i_hi;
    if constexpr (!kSplit) {
        i_lo = w.m_block * Tr::kBlockM;
        i_hi = min(i_lo + Tr::kBlockM, lq) - 1;
        if (i_lo >= lq) return;  // tile entirely past this sequence's length: nothing to write
    } else {
        if (w.m_block * Tr::kBlockM >= (p.heads_q / p.heads_kv) * lq) return;
        i_lo = 0;  // packed rows mix query positions: take the whole range (conservative masking)
        i_hi = lq - 1;
    }
    int n_lo, n_hi;
    mask.tile_range(i_lo, i_hi, Tr::kBlockN, n_lo, n_hi);
    if constexpr (kSplit) {
        const int n_tiles = (mask.lk + Tr::kBlockN - 1) / Tr::kBlockN;
        const int per = (n_tiles + num_splits - 1) / num_splits;
        n_lo = max(n_lo, w.split * per);
        n_hi = min(n_hi, (w.split + 1) * per);
    }

    // Paged: the batch stride is the page stride and the page comes from the table (per tile, below).
    const int64_t kv_b = kPaged ? 0 : w.b;
    const Elem* k_base = static_cast<const Elem*>(p.k) + kv_b * p.k_batch_stride + w.hkv * p.k_head_stride;
    const Elem* v_base = static_cast<const Elem*>(p.v) + kv_b * p.v_batch_stride + w.hkv * p.v_head_stride;

    float acc_o[Tr::kMTiles][Tr::kNTilesO][4];
#pragma unroll
    for (int mi = 0; mi < Tr::kMTiles; ++mi)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[mi][nt][e] = 0.f;
    // ScoreScale::kPrescaled: scores are pre-multiplied when a softcap is on (tanh needs them in natural
    // units) or the scale is not positive (the running max must be taken over scaled scores); otherwise
    // the scale is folded into the exponent's FFMA. A template parameter, so the common path carries no
    // tanh code and no extra registers.
    const float sl2 = kPrescale ? 1.f : p.scale * kLog2e;

    OnlineSoftmax<Tr::kMTiles, Tr::kNTilesS> softmax;
    float sink = -INFINITY, sink_units = -INFINITY;  // natural-log logit; the same in score units
    if constexpr (kSink) {
        sink = p.sinks[w.h];
        sink_units = sink * (kLog2e / sl2);
        softmax.init_sink(sink_units, (lane & 3) == 0);
    } else {
        softmax.init();
    }

    if (n_lo < n_hi) {
        // Q: row r of the tile comes from (head, query row) given by the scheduler; missing rows = 0.
        const Elem* q = static_cast<const Elem*>(p.q);
#pragma unroll
        for (int c = tid; c < Tr::kBlockM * Tr::kChunksPerRow; c += Tr::kThreads) {
            const int r = c / Tr::kChunksPerRow, col = (c % Tr::kChunksPerRow) * 8;
            int h, i;
            const bool valid = Sched::template row<Tr::kBlockM>(p, w, lq, r, h, i);
            const Elem* src = valid ? q + w.b * p.q_batch_stride + h * p.q_head_stride + i * p.q_row_stride + col : q;
            cp_async_16(sQ + Tr::swz(r, col), src, valid);
        }
        // One key tile: S = Q K^T, softcap / prescale, mask, online softmax (S becomes P), O += P V.
        auto process_tile = [&](int n, const Elem* tK, const Elem* tV, auto&& between) {
            float acc_s[Tr::kMTiles][Tr::kNTilesS][4];
            gemm_qk<Tr>(acc_s, sQ, tK, warp_row0, lane);
            if constexpr (kPrescale) {
                const float cap = p.softcap, sc = p.scale;
#pragma unroll
                for (int mi = 0; mi < Tr::kMTiles; ++mi)
#pragma unroll
                    for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            float s = acc_s[mi][nt][e] * sc;
                            if (cap > 0.f) s = cap * tanhf(s / cap);
                            acc_s[mi][nt][e] = s * kLog2e;
                        }
            }
            if (mask.tile_needs_mask(n, Tr::kBlockN, i_lo, i_hi)) {
#pragma unroll
                for (int mi = 0; mi < Tr::kMTiles; ++mi)
#pragma unroll
                    for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            // query position of this row (rows past the length: any value, never written)
                            int h, i;
                            Sched::template row<Tr::kBlockM>(p, w, lq, warp_row0 + mi * 16 + (lane >> 2) + (e >> 1) * 8,
                                                             h, i);
                            const int j = n * Tr::kBlockN + nt * 8 + 2 * (lane & 3) + (e & 1);
                            if (!mask.visible(i, j)) acc_s[mi][nt][e] = -INFINITY;
                        }
            }
            softmax.update(acc_s, acc_o, sl2);
            between();
            gemm_pv<Tr>(acc_o, acc_s, tV, lane);
        };
        auto load_k = [&](Elem* dst, int n) {
            Tr::template load_tile<Tr::kBlockN>(dst, k_base + int64_t(n) * Tr::kBlockN * p.k_row_stride, p.k_row_stride,
                                                mask.lk - n * Tr::kBlockN, tid);
        };
        auto load_v = [&](Elem* dst, int n) {
            Tr::template load_tile<Tr::kBlockN>(dst, v_base + int64_t(n) * Tr::kBlockN * p.v_row_stride, p.v_row_stride,
                                                mask.lk - n * Tr::kBlockN, tid);
        };
        // Paged: the table entry of key tile n. Called only for tiles in [n_lo, n_hi), i.e. j0 < lk, so
        // the entry read is < ceil(lk / page_size) (never a table entry past the sequence).
        auto page_of = [&](int n) -> int64_t {
            return p.block_table[w.b * p.block_table_batch_stride + (n * Tr::kBlockN) / p.page_size];
        };
        // Paged: K and V of tile n (table entry `page`) into stage `st` (K at st, V at st + kSmemKV).
        auto load_kv_paged = [&](Elem* st, int n, int64_t page) {
            const int j0 = n * Tr::kBlockN;
            const int64_t slot = j0 % p.page_size;
            Tr::template load_tile<Tr::kBlockN>(st, k_base + page * p.k_batch_stride + slot * p.k_row_stride,
                                                p.k_row_stride, mask.lk - j0, tid);
            Tr::template load_tile<Tr::kBlockN>(st + Tr::kSmemKV,
                                                v_base + page * p.v_batch_stride + slot * p.v_row_stride,
                                                p.v_row_stride, mask.lk - j0, tid);
        };

        if constexpr (Tr::kStages == 1) {
            // FA2 ping-pong (see the pipeline at the top of this file).
            load_k(sK, n_hi - 1);
            cp_async_commit();
            for (int n = n_hi - 1; n >= n_lo; --n) {
                cp_async_wait<0>();
                __syncthreads();
                load_v(sV, n);
                cp_async_commit();
                process_tile(n, sK, sV, [&] {
                    cp_async_wait<0>();
                    __syncthreads();
                    if (n > n_lo) {
                        load_k(sK, n - 1);
                        cp_async_commit();
                    }
                });
            }
        } else {
            // Ring of kStages (K, V) pairs: tile t (counting down from n_hi - 1) lives in stage t % kStages;
            // kStages - 1 tiles are in flight while one is used. Every step commits a group (possibly
            // empty) so wait_group<kStages - 2> always means "tile t has landed".
            // Paged: the table entry of the next tile to issue is read one step ahead (page_next), so its
            // latency hides behind a whole tile of arithmetic instead of stalling the cp.async issue.
            constexpr int S = Tr::kStages;
            const int n_tiles = n_hi - n_lo;
            int64_t page_next = 0;
#pragma unroll
            for (int t = 0; t < S - 1; ++t) {
                if (t < n_tiles) {
                    if constexpr (kPaged) {
                        load_kv_paged(sK + t * 2 * Tr::kSmemKV, n_hi - 1 - t, page_of(n_hi - 1 - t));
                    } else {
                        load_k(sK + t * 2 * Tr::kSmemKV, n_hi - 1 - t);
                        load_v(sK + t * 2 * Tr::kSmemKV + Tr::kSmemKV, n_hi - 1 - t);
                    }
                }
                cp_async_commit();
            }
            if constexpr (kPaged) {
                if (S - 1 < n_tiles) page_next = page_of(n_hi - S);
            }
            for (int t = 0; t < n_tiles; ++t) {
                cp_async_wait<S - 2>();
                __syncthreads();  // tile t landed for every thread; stage (t - 1) % S is free again
                const int tp = t + S - 1;
                if (tp < n_tiles) {
                    Elem* st = sK + (tp % S) * 2 * Tr::kSmemKV;
                    if constexpr (kPaged) {
                        load_kv_paged(st, n_hi - 1 - tp, page_next);
                        if (tp + 1 < n_tiles) page_next = page_of(n_hi - 2 - tp);
                    } else {
                        load_k(st, n_hi - 1 - tp);
                        load_v(st + Tr::kSmemKV, n_hi - 1 - tp);
                    }
                }
                cp_async_commit();
                const Elem* st = sK + (t % S) * 2 * Tr::kSmemKV;
                process_tile(n_hi - 1 - t, st, st + Tr::kSmemKV, [] {});
            }
        }
    }

    float inv_l[Tr::kMTiles][2], lse[Tr::kMTiles][2];
    if constexpr (kSink)
        softmax.finalize_sink(sl2, sink, sink_units, inv_l, lse);
    else
        softmax.finalize(sl2, inv_l, lse);
    store_output<Tr, kMode>(p, w, lq, acc_o, inv_l, lse, sQ, warp_row0, lane);
}

// The instantiation for p: ScoreScale::kPrescaled where a softcap is on or scale <= 0, for split-KV
// KvLayout::kPaged where block_table != NULL (the FA2 launcher rejects a block table before it gets here),
// for FA2 Sinks::kPerHead where sinks != NULL (the split-KV kernel ignores them, its combine adds them).
template <class Tr, FwdMode kMode>
inline auto fwd_kernel_for(const AttnFwdParams& p) {
    constexpr ScoreScale kFolded = ScoreScale::kFolded, kPrescaled = ScoreScale::kPrescaled;
    const bool prescale = p.softcap > 0.f || !(p.scale > 0.f);
    if constexpr (kMode == FwdMode::kSplitKv) {
        if (p.block_table != nullptr)
            return prescale ? fwd_kernel<Tr, kMode, kPrescaled, KvLayout::kPaged>
                            : fwd_kernel<Tr, kMode, kFolded, KvLayout::kPaged>;
    } else {
        if (p.sinks != nullptr)
            return prescale ? fwd_kernel<Tr, kMode, kPrescaled, KvLayout::kContiguous, Sinks::kPerHead>
                            : fwd_kernel<Tr, kMode, kFolded, KvLayout::kContiguous, Sinks::kPerHead>;
    }
    return prescale ? fwd_kernel<Tr, kMode, kPrescaled> : fwd_kernel<Tr, kMode, kFolded>;
}

// Host side: launch fwd_kernel_for's kernel with the dynamic shared memory it needs.
template <class Tr, FwdMode kMode>
inline cudaError_t launch_fwd(const AttnFwdParams& p, dim3 grid, int num_splits, cudaStream_t stream) {
    auto kernel = fwd_kernel_for<Tr, kMode>(p);
    if (Tr::kSmemBytes > 48 * 1024) {  // once per kernel and device (launch_common.cuh smem_opt_in)
        cudaError_t e = smem_opt_in(reinterpret_cast<const void*>(kernel), Tr::kSmemBytes);
        if (e != cudaSuccess) return e;
    }
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, num_splits);
    return cudaGetLastError();
}

}  // namespace attn
