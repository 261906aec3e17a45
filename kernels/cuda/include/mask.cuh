// Which keys a query row sees (oracles/SEMANTICS.md §4 causal alignment, §5 sliding window, §7 varlen),
// for every kernel: the rule stated once below, and two views of one sequence's lengths and bounds.
//
// For a sequence with real lengths (lq, lk) the diagonal offset is off = lk - lq (bottom-right
// alignment) or 0 (top-left); c(i) = i + off is row i's aligned diagonal. Query i sees key j iff
//     i < lq,  j < lk,  (no right bound or j <= c(i) + right)  and  (no left bound or j >= c(i) - left),
// where causal sets right = 0 (combined with a window: right = min(right, 0) = 0, since right >= -1;
// SEMANTICS.md §5: causal with window (l, r) == window (l, 0)). Everything else is -inf before the
// softmax; a row with no visible key ends with l = 0 and is written as O = 0, LSE = -inf (§8).
//
//   MaskInfo (FA2 forward, split-KV, FA3): int32 arithmetic, lengths clamped to >= 0, key-tile ranges
//            for a block of rows (tile_range / tile_needs_mask). visible() does not test i < lq: its
//            callers never write a row past the real length.
//   SeqMask  (FA1 forward / backward, FA2 backward): 64-bit arithmetic (off - left can leave the int32
//            range for huge windows), row ranges for a block of keys (rows_for_keys), key ranges for a
//            block of rows (keys_for_rows), full-tile test (tile_full); visible() also tests i < sq.
// The two visible() bodies are the same predicate in int32 and in 64-bit arithmetic. They stay written
// out in each struct: routing both through one templated predicate changed the instructions of
// fa2_fwd, fa1 and fa2_bwd (PTX comparison in docs/README.md, "One CUDA house"), and those kernels were
// verified on the GPU as they are.
#pragma once
#include <math.h>

#include "attn_params.h"

namespace attn {

struct MaskInfo {
    int lq, lk;      // real lengths of this batch entry
    int off;         // diagonal offset
    int left, right; // -1 = unbounded

    __device__ __forceinline__ static MaskInfo make(const AttnFwdParams& p, int b) {
        MaskInfo m;
        m.lq = p.seqlens_q ? min(p.seqlens_q[b], p.seqlen_q) : p.seqlen_q;
        m.lk = p.seqlens_k ? min(p.seqlens_k[b], p.seqlen_k) : p.seqlen_k;
        m.lq = max(m.lq, 0);
        m.lk = max(m.lk, 0);
        m.off = p.align_bottom_right ? m.lk - m.lq : 0;
        m.left = p.window_left;
        m.right = p.causal ? 0 : p.window_right;  // the causal fold, as in make_mask()
        return m;
    }

    __host__ __device__ __forceinline__ bool visible(int i, int j) const {
        if (j >= lk) return false;
        if (right >= 0 && j > i + off + right) return false;
        if (left >= 0 && j < i + off - left) return false;
        return true;
    }

    // Row i's visible keys as an interval: for j >= 0, visible(i, j) iff key_lo(i) <= j <= key_hi(i) (visible()'s
    // tests on the same int32 expressions, clamped to [-1, ...] and [0, ...], which no key j >= 0 can tell apart), so
    // that a caller may subtract a column base without leaving the int32 range.
    __host__ __device__ __forceinline__ int key_hi(int i) const {
        const int edge = i + off + right, hi = right >= 0 && edge < lk - 1 ? edge : lk - 1;
        return hi < -1 ? -1 : hi;
    }
    __host__ __device__ __forceinline__ int key_lo(int i) const {
        const int lo = left >= 0 ? i + off - left : 0;
        return lo < 0 ? 0 : lo;
    }

    // Key tiles [n_lo, n_hi) that can hold a visible key for some row in [i_lo, i_hi].
    __device__ __forceinline__ void tile_range(int i_lo, int i_hi, int block_n, int& n_lo, int& n_hi) const {
        int j_hi = lk;  // exclusive
        if (right >= 0) j_hi = min(j_hi, i_hi + off + right + 1);
        int j_lo = 0;
        if (left >= 0) j_lo = max(j_lo, i_lo + off - left);
        n_lo = j_lo / block_n;
        n_hi = j_hi <= j_lo ? n_lo : (j_hi + block_n - 1) / block_n;
    }

    // Whether key tile n needs per-element masking for rows [i_lo, i_hi] (tail, diagonal, window edge). Holds for
    // every n from some tile up (the first two tests) or below some tile (the third): hopper/plan.cuh masked_tiles
    // relies on that. Host-callable for that function's CPU test.
    __host__ __device__ __forceinline__ bool tile_needs_mask(int n, int block_n, int i_lo, int i_hi) const {
        const int j0 = n * block_n, j1 = j0 + block_n - 1;
        if (j1 >= lk) return true;
        if (right >= 0 && j1 > i_lo + off + right) return true;
        if (left >= 0 && j0 < i_hi + off - left) return true;
        return false;
    }
};

// The 64-bit view (see the top of this file). With real lengths sq, sk and aligned diagonal
// c(i) = i + off, key j is visible to query i iff i < sq, j < sk, j <= c(i) + right (right >= 0) and
// j >= c(i) - left (left >= 0).
struct SeqMask {
    int sq, sk;           // real lengths of this sequence
    long long off;        // c(i) - i
    long long left, right;  // -1 = unbounded

    __device__ __forceinline__ bool visible(int i, int j) const {
        if (i >= sq || j >= sk) return false;
        const long long c = (long long)i + off;
        if (right >= 0 && (long long)j > c + right) return false;
        if (left >= 0 && (long long)j < c - left) return false;
        return true;
    }

    // Query rows that see at least one key of [c0, c1) (c1 exclusive): [*lo, *hi] inclusive,
    // empty when *lo > *hi. c(i) + right >= c0 and c(i) - left <= c1 - 1, both monotone in i.
    __device__ __forceinline__ void rows_for_keys(int c0, int c1, int* lo, int* hi) const {
        c1 = min(c1, sk);
        long long l = 0, h = (long long)sq - 1;
        if (c0 >= c1) { *lo = 1; *hi = 0; return; }
        if (right >= 0) l = max(l, (long long)c0 - off - right);
        if (left >= 0) h = min(h, (long long)c1 - 1 - off + left);
        if (l > h) { *lo = 1; *hi = 0; return; }
        *lo = (int)l; *hi = (int)h;
    }

    // Whether every (i, j) in [r0, r1) x [c0, c1) is visible: such tiles skip per-element masking.
    __device__ __forceinline__ bool tile_full(int r0, int r1, int c0, int c1) const {
        if (r1 > sq || c1 > sk) return false;
        if (right >= 0 && (long long)c1 - 1 > (long long)r0 + off + right) return false;
        if (left >= 0 && (long long)c0 < (long long)r1 - 1 + off - left) return false;
        return true;
    }

    // Keys seen by at least one query of [r0, r1): [*lo, *hi] inclusive, empty when *lo > *hi.
    __device__ __forceinline__ void keys_for_rows(int r0, int r1, int* lo, int* hi) const {
        r1 = min(r1, sq);
        long long l = 0, h = (long long)sk - 1;
        if (r0 >= r1) { *lo = 1; *hi = 0; return; }
        if (left >= 0) l = max(l, (long long)r0 + off - left);
        if (right >= 0) h = min(h, (long long)r1 - 1 + off + right);
        if (l > h) { *lo = 1; *hi = 0; return; }
        *lo = (int)l; *hi = (int)h;
    }
};

__device__ __forceinline__ SeqMask make_mask(const AttnFwdParams& p, int b) {
    SeqMask m;
    m.sq = p.seqlens_q ? min(p.seqlens_q[b], p.seqlen_q) : p.seqlen_q;
    m.sk = p.seqlens_k ? min(p.seqlens_k[b], p.seqlen_k) : p.seqlen_k;
    m.off = p.align_bottom_right ? (long long)m.sk - m.sq : 0;
    m.left = p.window_left;
    m.right = p.causal ? 0 : p.window_right;
    return m;
}

}  // namespace attn
