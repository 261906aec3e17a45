// Which rows, heads and keys a CTA works on (grid <-> work mapping).
//
// FA2 forward (FwdMode::kFa2): grid (m_blocks, Hq, B). Query tiles are visited in reverse so the
// CTAs with the most key tiles under causal / window masks start first and the short ones fill the
// tail of the last wave. Row r of the CTA is query row m_block * kBlockM + r of head blockIdx.y.
//
// Split-KV (FwdMode::kSplitKv): grid (m_blocks, num_splits, B * Hkv). The G = Hq / Hkv query heads that
// share one KV head are packed into the M dimension (packed row = g * lq + i), so one CTA reads each
// K/V tile once for the whole group; split s takes key tiles [s * per, (s + 1) * per).
#pragma once
#include "attn_params.h"

namespace attn {

// What one forward CTA computes: FA2 (a query tile of one head, every key it sees, the final O and LSE), or split-KV
// decoding (a packed tile of one GQA group's queries, one range of key tiles, an fp32 partial the combine merges).
enum class FwdMode { kFa2, kSplitKv };

struct WorkTile {
    int b, hkv, m_block, split;
    int h;  // query head (FA2 mode); group base head hkv * G (split mode)
};

template <FwdMode kMode>
struct TileScheduler {
    static constexpr bool kSplit = kMode == FwdMode::kSplitKv;

    static __device__ __forceinline__ WorkTile get(const AttnFwdParams& p) {
        WorkTile w;
        const int group = p.heads_q / p.heads_kv;
        if constexpr (!kSplit) {
            w.m_block = gridDim.x - 1 - blockIdx.x;
            w.h = blockIdx.y;
            w.b = blockIdx.z;
            w.hkv = w.h / group;
            w.split = 0;
        } else {
            w.m_block = blockIdx.x;
            w.split = blockIdx.y;
            w.b = blockIdx.z / p.heads_kv;
            w.hkv = blockIdx.z % p.heads_kv;
            w.h = w.hkv * group;
        }
        return w;
    }

    // CTA row r -> (query head, query row). False when the row is past the real length (never written).
    template <int kBlockM>
    static __device__ __forceinline__ bool row(const AttnFwdParams& p, const WorkTile& w, int lq, int r, int& h,
                                               int& i) {
        if constexpr (!kSplit) {
            h = w.h;
            i = w.m_block * kBlockM + r;
            return i < lq;
        } else {
            const int pr = w.m_block * kBlockM + r;
            const int group = p.heads_q / p.heads_kv;
            if (lq <= 0 || pr >= group * lq) return false;
            h = w.h + pr / lq;
            i = pr % lq;
            return true;
        }
    }
};

}  // namespace attn
