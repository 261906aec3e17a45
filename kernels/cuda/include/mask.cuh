// Which keys a query row sees (oracles/SEMANTICS.md: causal alignment, sliding window, varlen).
//
// For a sequence with real lengths (lq, lk) the diagonal offset is off = lk - lq (bottom-right
// alignment) or 0 (top-left). Query i sees key j iff
//     j < lk  and  (no right bound or j <= i + off + right)  and  (no left bound or j >= i + off - left),
// where causal sets right = 0 (combined with a window: right = min(right, 0)). Everything else is
// -inf before the softmax; a row with no visible key ends with l = 0 and is written as O = 0,
// LSE = -inf (SEMANTICS.md §8).
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
        m.right = p.window_right;
        if (p.causal) m.right = (m.right < 0) ? 0 : min(m.right, 0);
        return m;
    }

    __device__ __forceinline__ bool visible(int i, int j) const {
        if (j >= lk) return false;
        if (right >= 0 && j > i + off + right) return false;
        if (left >= 0 && j < i + off - left) return false;
        return true;
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

    // Whether key tile n needs per-element masking for rows [i_lo, i_hi] (tail, diagonal, window edge).
    __device__ __forceinline__ bool tile_needs_mask(int n, int block_n, int i_lo, int i_hi) const {
        const int j0 = n * block_n, j1 = j0 + block_n - 1;
        if (j1 >= lk) return true;
        if (right >= 0 && j1 > i_lo + off + right) return true;
        if (left >= 0 && j0 < i_hi + off - left) return true;
        return false;
    }
};

}  // namespace attn
