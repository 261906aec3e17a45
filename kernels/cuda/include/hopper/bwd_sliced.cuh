// The FA3 backward main loop at d = 192 (dv = 192 or 128) with key tiles of 96 (sm_90a): one CTA per (K/V tile of 96
// keys, query head, batch), three consumer warpgroups. Consumer w owns keys [32 w, 32 w + 32) of the tile for S, dP
// and the element-wise pass, and head-dim columns [64 w, 64 w + 64) of dK, dV and dQ, which it computes transposed
// where the keys are the output's rows (wgmma's M is 64 a warpgroup; 96 keys are not a multiple of it). At dv = 128
// consumer 2 holds no dV^T slice (its tile work is two of the three GEMMs of the others). Semantics and everything
// not restated here as bwd_mainloop.cuh's: TMA ring, LSE / D copy, NaN padding, masks, the deterministic dQ order,
// the pre- and postprocess of ../bwd_prepost.cuh; the producer and the dQ writer are bwd_wide.cuh's.
//
// Why: bwd_wide.cuh's tiling shares 64 keys between two consumers, so every key tile streams all of Q, dO and adds
// all of dQ; at d = 192 that traffic kept L2 at 95% of its throughput (ncu, H100, docs/fa3_backward.md). 96-key tiles
// stream it for 1.5 times the keys (flash-attn-4's sm90 backward and flash-attention's hopper/ tile d = 192 so).
//
// Per query tile i (64 rows), consumer w:
//   S_w  = Q_i K_w^T, dP_w = dO_i V_w^T        wgmma SS m64n32, both K-major: [64 queries x 32 keys], 16 + 16 registers
//   P_w, dS_w                                  element-wise as bwd_mainloop.cuh (LSE, D per query row)
//   P_w, dS_w -> shared memory, transposed     rows [32 w, 32 w + 32) of the [96 keys][64 queries] tiles P^T, dS^T
//                                              (128-byte swizzle, stmatrix .trans); an all-consumer barrier
//   dV^T_w += dO_i^T P                         wgmma SS m64n96: A = dO column block w MN-major, B = P^T K-major
//                                              (w < dv / 64)
//   dQ_i[:, block w] = dS K_w'                 wgmma SS m64n64: A = dS^T MN-major, B = K column block w MN-major,
//                                              6 k-steps over the 96 keys; to shared memory for the dQ writer
//   dK^T_w += Q_i^T dS                         wgmma SS m64n96: A = Q column block w MN-major, B = dS^T K-major
// Registers: dK^T, dV^T 48 + 48, dQ 32, S and dP 16 + 16 a thread; 3 x 128 x 160 + 128 x 32 = 65536.
// Shared memory (dv = 192): K, V 36 KB each, Q two stages of 24 KB, dO one stage (released by every consumer after
// its dV^T), P^T and dS^T 12 KB each, one buffer (a second all-consumer barrier before they are rewritten), dQ
// 3 x 16 KB fp32.
//
// Invariants:
// - P^T and dS^T single-buffered: a consumer writes them at tile it only after the all-consumer barrier that every
//   consumer reaches after its wgmma_wait<0> of tile it - 1 (the last reads).
// - Every GEMM reads only zeroed or real rows: K, V rows j >= lk and Q, dO rows i >= lq (inside the tensors) are zeroed
//   in shared memory before the tensor cores read them; masked entries give P = dS = 0 exactly.
// - dQ block w of a tile is written by consumer w alone (buffer w, its full / empty barriers, waited by parity it % 2:
//   one hand-off a tile each, and the writer releases block w before the consumer's next hand-off of it).
// - dK (times the scale) and dV of column block w leave consumer w's registers; GQA as fp32 rows per query head.
#pragma once
#include "../dtype.cuh"
#include "bwd_wide.cuh"

namespace attn::hopper {

// The schedule of the sliced tiling (derive and override by name; Deterministic<S> of bwd_mainloop.cuh applies).
struct Fa3BwdSlicedSchedule {
    static constexpr BwdTiling tiling = BwdTiling::kHeadDimSlices;
    static constexpr bool deterministic = false;
};

// DK = 192, DV = 192 or 128. The names bwd_wide.cuh's producer, dQ writer and WideSmem read are this config's too.
template <int DK, int DV, typename Elem_, class Schedule>
struct Fa3BwdSlicedConfig {
    using Elem = Elem_;
    static constexpr BwdTiling kTiling = BwdTiling::kHeadDimSlices;
    static constexpr int kHeadDim = DK, kTensorHeadDim = DK, kHeadDimV = DV, kTensorHeadDimV = DV;
    static_assert(DK == 192 && (DV == 192 || DV == 128), "sliced backward: d = 192 (three 64-column slices, three "
                                                         "consumers), dv = 192 or 128");
    static constexpr bool kDeterministic = Schedule::deterministic;
    static constexpr bool kTmaDq = true;
    static constexpr int kConsumers = DK / 64;
    static constexpr int kBlockN = 96;          // keys per CTA
    static constexpr int kKeysPerConsumer = 32;  // S, dP and the element-wise pass
    static constexpr int kBlockM = 64;           // query rows per streamed tile
    static constexpr int kStages = 2;            // the Q ring (LSE and D with it)
    static constexpr int kDoStages = 1;          // dO in one stage of its own
    static constexpr bool kSplitDo = true;
    static constexpr int kKBlocks = DK / 64, kVBlocks = DV / 64;
    static constexpr int kThreads = 128 * (1 + kConsumers), kConsumerThreads = 128 * kConsumers;
    // setmaxnreg: 32 * 128 + 160 * 384 = 65536
    static constexpr int kProducerRegs = 32, kConsumerRegs = 160;
    // TMA dQ: one 16 KB fp32 [64 x 64] buffer per consumer's column block, written once a tile
    static constexpr int kDqBlocks = kConsumers;
    static constexpr bool kDqPerConsumer = false;
    static constexpr int kDqBufs = kDqBlocks;
    static constexpr int kDqRows = 64;
    static constexpr uint32_t kDqBytes = 64 * 64 * 4;
    static constexpr uint32_t kKBytes = kBlockN * DK * 2, kVBytes = kBlockN * DV * 2;
    static constexpr uint32_t kQBytes = kBlockM * DK * 2, kDOBytes = kBlockM * DV * 2;
    static constexpr uint32_t kTileBytes = kBlockN * kBlockM * 2;  // one Elem [96 keys][64 queries] P^T or dS^T
    static constexpr uint32_t kRingBytes = kKBytes + kVBytes + kStages * kQBytes + kDoStages * kDOBytes;
    static constexpr uint32_t kDqAreaBytes = kDqBufs * kDqBytes;
    static constexpr int kBarDo = 1 + 2 * kStages + 2 * kDqBlocks;
    static constexpr int kNumBars = kBarDo + 2;
    static constexpr uint32_t kOffK = 0;
    static constexpr uint32_t kOffV = kOffK + kKBytes;
    static constexpr uint32_t kOffQ = kOffV + kVBytes;
    static constexpr uint32_t kOffDO = kOffQ + kStages * kQBytes;
    static constexpr uint32_t kOffP = kOffDO + kDoStages * kDOBytes;
    static constexpr uint32_t kOffDS = kOffP + kTileBytes;
    static constexpr uint32_t kOffDq = kOffDS + kTileBytes;
    static constexpr uint32_t kOffLse = kOffDq + kDqAreaBytes;
    static constexpr uint32_t kOffD = kOffLse + kStages * kBlockM * 4;
    static constexpr uint32_t kOffBar = kOffD + kStages * kBlockM * 4;
    static constexpr uint32_t kSmemBytes = kOffBar + kNumBars * 8 + 1024;
    static_assert(kSmemBytes <= 232448, "shared memory per block");
    static_assert(kKBytes % 1024 == 0 && kQBytes % 1024 == 0 && kTileBytes % 1024 == 0, "1024-byte aligned tiles");
    // Named barriers (0 is __syncthreads): per consumer warpgroup (1, 2, 3), all consumers (4).
    static constexpr int kBarWG = 1, kBarConsumers = 4;
};

template <class C>
struct BwdSlicedConsumer {
    using Elem = typename C::Elem;
    static constexpr int DK = C::kHeadDim, DV = C::kHeadDimV, BM = C::kBlockM, BN = C::kBlockN;
    static constexpr int KW = C::kKeysPerConsumer;
    const Fa3BwdParams& P;
    WideSmem<C> sm;
    const BwdTiles& T;
    int cw, b, h;

    // The shared-memory operands every tile of a consumer reads, the same each tile.
    struct Operands {
        uint32_t p_addr, ds_addr;  // P^T, dS^T (stmatrix)
        uint64_t k_kw, v_kw;       // K_w, V_w K-major (B of S, dP): rows [32 cw, 32 cw + 32) of each 64-column block
        uint64_t k_mn, ds_mn;      // K's column block cw MN-major (B of dQ = dS K); dS^T MN-major (A of dQ)
        uint64_t p_k, ds_k;        // P^T, dS^T K-major (B of dV^T, dK^T)
    };
    __device__ __forceinline__ Operands operands() const {
        const uint32_t k_addr = smem_addr(sm.k()), v_addr = smem_addr(sm.v());
        const uint32_t p_addr = smem_addr(sm.pt(0)), ds_addr = smem_addr(sm.dst(0));
        return {p_addr,
                ds_addr,
                sw128_desc(k_addr + cw * KW * 128, 16, 1024),
                sw128_desc(v_addr + cw * KW * 128, 16, 1024),
                sw128_desc(k_addr + cw * (BN * 128), BN * 128, 1024),
                sw128_desc(ds_addr, BM * 128, 1024),
                sw128_desc(p_addr, 16, 1024),
                sw128_desc(ds_addr, 16, 1024)};
    }
    // K / V rows past the real length zeroed once the tile is in (dQ = dS K reads every row).
    __device__ __forceinline__ void zero_kv_tail() {
        const SeqMask& mask = T.mask;
        const int n0 = T.n0;
        mbar_wait(sm.full_kv(), 0);
        if (n0 + BN > mask.sk) {
            bwd_zero_rows<C::kKBlocks, C::kConsumerThreads>(sm.k(), BN, max(mask.sk - n0, 0), BN);
            bwd_zero_rows<C::kVBlocks, C::kConsumerThreads>(sm.v(), BN, max(mask.sk - n0, 0), BN);
            fence_proxy_async();
            named_sync(C::kBarConsumers, C::kConsumerThreads);
        }
    }
    // acc = X K_w^T (X = Q, k-steps over DK) or X V_w^T (X = dO, over DV): one commit group, m64n32 SS.
    template <int kCols>
    __device__ __forceinline__ void issue_x_kt(float (&acc)[KW / 2], uint64_t x_k, uint64_t kv_kw) {
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kCols / 16; ++ks) {
            const int cb = ks / 4, kk = ks % 4;
            wgmma_ss<0>(Wgmma<Elem, KW>{}, acc, desc_advance(x_k, cb * (BM * 128) + kk * 32),
                        desc_advance(kv_kw, cb * (BN * 128) + kk * 32), ks > 0 ? 1 : 0);
        }
        wgmma_commit();
    }
    // P^T, dS^T rows [kc0, kc0 + 32): pa[ks][r] holds query rows 16 warp + 8 (r % 2) + [0, 8), keys
    // kc0 + 16 ks + 8 (r / 2) + [0, 8) (matrix r); transposed, matrix r is key rows of 16 bytes (8 queries)
    // at query chunk 2 warp + r % 2, lane l addressing key row l % 8 of matrix l / 8.
    __device__ __forceinline__ void store_pds(uint32_t p_addr, uint32_t ds_addr, const uint32_t (&pa)[KW / 16][4],
                                              const uint32_t (&dsa)[KW / 16][4]) const {
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const int kc0 = cw * KW;
        const int mi = lane / 8, chunk = 2 * warp + mi % 2;
#pragma unroll
        for (int ks = 0; ks < KW / 16; ++ks) {
            const int key = kc0 + 16 * ks + 8 * (mi / 2) + lane % 8;
            const uint32_t off = key * 128 + ((chunk ^ (key % 8)) * 16);
            stmatrix_x4_trans(p_addr + off, pa[ks]);
            stmatrix_x4_trans(ds_addr + off, dsa[ks]);
        }
    }
    // dV^T_w += dO_w^T P (an empty group where w has no dV slice), dQ block cw = dS K_cw, dK^T_w += Q_w^T dS: three
    // commit groups.
    __device__ __forceinline__ void issue_grads(bool has_dv, uint32_t q_addr, uint32_t do_addr, uint64_t p_k,
                                                uint64_t ds_k, uint64_t ds_mn, uint64_t k_mn, float (&dq)[32],
                                                float (&dkt)[BN / 2], float (&dvt)[BN / 2]) {
        const uint64_t do_mn = sw128_desc(do_addr + cw * (BM * 128), BM * 128, 1024);
        const uint64_t q_mn = sw128_desc(q_addr + cw * (BM * 128), BM * 128, 1024);
        wgmma_fence();
        if (has_dv) {
#pragma unroll
            for (int ks = 0; ks < BM / 16; ++ks)
                wgmma_ss_t<1, 0>(Wgmma<Elem, BN>{}, dvt, desc_advance(do_mn, ks * 2048), desc_advance(p_k, ks * 32), 1);
        }
        wgmma_commit();
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks)
            wgmma_ss_t<1, 1>(Wgmma<Elem, 64>{}, dq, desc_advance(ds_mn, ks * 2048), desc_advance(k_mn, ks * 2048),
                             ks > 0 ? 1 : 0);
        wgmma_commit();
#pragma unroll
        for (int ks = 0; ks < BM / 16; ++ks)
            wgmma_ss_t<1, 0>(Wgmma<Elem, BN>{}, dkt, desc_advance(q_mn, ks * 2048), desc_advance(ds_k, ks * 32), 1);
        wgmma_commit();
    }
    // dQ block cw of tile it to its buffer once the writer has released it, then handed to the writer.
    __device__ __forceinline__ void hand_off_dq(const float (&dq)[32], int it) {
        mbar_wait(sm.empty_dq(cw), (it & 1) ^ 1);
        bwd_store_dq_block(sm.dq(cw), dq);
        fence_proxy_async();
        mbar_arrive(sm.full_dq(cw));
    }

    // dkt, dvt: this consumer's dK^T, dV^T [64 head-dim columns x 96 keys] (accumulator layout: element e at column
    // 64 cw + 16 warp + lane / 4 + 8 ((e % 4) / 2), key 8 (e / 4) + 2 (lane % 4) + e % 2).
    __device__ __forceinline__ void run(float (&dkt)[BN / 2], float (&dvt)[BN / 2]) {
        const AttnFwdParams& f = P.p.fwd;
        const SeqMask& mask = T.mask;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const int n0 = T.n0;
        const float sl2 = f.scale * kLog2e;
        const bool capped = f.softcap > 0.f;
        const float scale_over_cap = capped ? f.scale / f.softcap : 0.f;
        const Operands o = operands();
        const int kc0 = cw * KW;               // first key of this consumer in the tile
        const int r0 = 16 * warp + lane / 4;  // this thread's query rows r0, r0 + 8 of a tile (S, dP)

        zero_kv_tail();
        PipeState<C::kStages> ps;
        for (int it = 0; it < T.n_tiles; ++it) {
            const int m0 = T.tile(it) * BM;
            const int st = ps.stage;
            mbar_wait(sm.full(st), ps.phase);
            const bool pad = m0 + BM > mask.sq && mask.sq < f.seqlen_q;
            if (pad) {  // varlen padding inside the tensor: zero it
                mbar_wait(sm.full_do(), it & 1);
                const int lo = max(mask.sq - m0, 0), hi = min(BM, f.seqlen_q - m0);
                bwd_zero_rows<C::kKBlocks, C::kConsumerThreads>(sm.q(st), BM, lo, hi);
                bwd_zero_rows<C::kVBlocks, C::kConsumerThreads>(sm.dout(0), BM, lo, hi);
                fence_proxy_async();
                named_sync(C::kBarConsumers, C::kConsumerThreads);
            }
            const uint32_t q_addr = smem_addr(sm.q(st)), do_addr = smem_addr(sm.dout(0));
            const uint64_t q_k = sw128_desc(q_addr, 16, 1024), do_k = sw128_desc(do_addr, 16, 1024);

            // S = Q K_w^T (its own commit group, issued before dO is awaited), dP = dO V_w^T
            float s[KW / 2], dp[KW / 2];
            issue_x_kt<DK>(s, q_k, o.k_kw);
            if (!pad) mbar_wait(sm.full_do(), it & 1);
            issue_x_kt<DV>(dp, do_k, o.v_kw);
            wgmma_wait<0>();
            fence_regs(s);
            fence_regs(dp);

            // P and dS of this consumer's [64 queries x 32 keys]: element e at query row r0 + 8 ((e % 4) / 2), key
            // kc0 + 8 (e / 4) + 2 (lane % 4) + e % 2, packed chunk by chunk (bwd_pack_chunk) into one stmatrix.x4
            // per 16 keys.
            const bool need_mask = !mask.tile_full(m0, m0 + BM, n0 + kc0, n0 + kc0 + KW);
            const float* lse = sm.lse(st);
            const float* dd = sm.dd(st);
            const float lse_r[2] = {lse[r0], lse[r0 + 8]}, d_r[2] = {dd[r0], dd[r0 + 8]};
            uint32_t pa[KW / 16][4], dsa[KW / 16][4];
            auto elementwise = [&](auto cap_tag, auto mask_tag) {
#pragma unroll
                for (int j = 0; j < KW / 8; ++j) {
                    float pv[4], dsv[4];
#pragma unroll
                    for (int x = 0; x < 4; ++x) {
                        const int e = 4 * j + x;
                        const int row = m0 + r0 + 8 * (x / 2), key = n0 + kc0 + 8 * j + 2 * (lane % 4) + x % 2;
                        pv[x] = bwd_p_elem<decltype(cap_tag)::value, decltype(mask_tag)::value>(
                            s[e], lse_r[x / 2], sl2, scale_over_cap, f.softcap, mask, row, key);
                        dsv[x] = s[e] * (dp[e] - d_r[x / 2]);
                    }
                    bwd_pack_chunk<Elem>(pa, j, pv);
                    bwd_pack_chunk<Elem>(dsa, j, dsv);
                }
            };
            dispatch_cap_mask(capped, need_mask, elementwise);

            if (it > 0) named_sync(C::kBarConsumers, C::kConsumerThreads);  // tile it - 1's GEMMs read P^T / dS^T
            store_pds(o.p_addr, o.ds_addr, pa, dsa);
            fence_proxy_async();
            named_sync(C::kBarConsumers, C::kConsumerThreads);

            float dq[32];
            issue_grads(DV == DK || cw < C::kVBlocks, q_addr, do_addr, o.p_k, o.ds_k, o.ds_mn, o.k_mn, dq, dkt, dvt);
            wgmma_wait<2>();
            mbar_arrive(sm.empty_do());  // dV^T was this consumer's last read of the tile's dO
            wgmma_wait<1>();
            fence_regs(dq);
            hand_off_dq(dq, it);
            wgmma_wait<0>();
            fence_regs(dkt);
            fence_regs(dvt);
            mbar_arrive(sm.empty(st));  // Q, LSE, D of this stage are no longer read
            ps.advance();
        }
    }

    // dK (times the scale) and dV (w < dv / 64), head-dim columns [64 cw, 64 cw + 64) of the CTA's 96 keys, from dK^T
    // and dV^T: one element a store (the keys are the accumulators' columns); rows past the padded length are not
    // written, rows past the real length hold 0 (no query sees them). GQA: fp32 per query head into dk_accum /
    // dv_accum, reduced over each group by the postprocess.
    __device__ __forceinline__ void store(const float (&dkt)[BN / 2], const float (&dvt)[BN / 2]) const {
        const AttnFwdParams& f = P.p.fwd;
        const AttnBwdParams& pb = P.p;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const bool gqa = f.heads_q != f.heads_kv;
        const int hkv = h / (f.heads_q / f.heads_kv);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            const bool is_k = t == 0;
            if (!is_k && DV != DK && cw >= C::kVBlocks) break;  // no dV slice
            const float(&acc)[BN / 2] = is_k ? dkt : dvt;
            const float mul = is_k ? f.scale : 1.f;
            float* accum = is_k ? pb.dk_accum : pb.dv_accum;
            Elem* out = static_cast<Elem*>(is_k ? pb.dk : pb.dv);
            const int64_t bs = is_k ? pb.dk_batch_stride : pb.dv_batch_stride;
            const int64_t hs = is_k ? pb.dk_head_stride : pb.dv_head_stride;
            const int64_t rs = is_k ? pb.dk_row_stride : pb.dv_row_stride;
            const int cols = is_k ? DK : DV;
#pragma unroll
            for (int e = 0; e < BN / 2; ++e) {
                const int c = 64 * cw + 16 * warp + lane / 4 + 8 * ((e % 4) / 2);
                const int j = T.n0 + 8 * (e / 4) + 2 * (lane % 4) + e % 2;
                if (j >= f.seqlen_k) continue;
                const float x = acc[e] * mul;
                if (gqa)
                    accum[((static_cast<size_t>(b) * f.heads_q + h) * f.seqlen_k + j) * cols + c] = x;
                else
                    out[b * bs + hkv * hs + j * rs + c] = DT<Elem>::from_f(x);
            }
        }
    }
};

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fa3_bwd_sliced_kernel(const __grid_constant__ Fa3BwdParams P) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    bwd_cta<C, WideSmem<C>>(
        P, [&](const WideSmem<C>& sm, const BwdTiles& T, int b, int h) { bwd_wide_producer<C>(P, sm, T, b, h); },
        [&](const WideSmem<C>& sm, const BwdTiles& T, int cw, int b, int h) {
            BwdSlicedConsumer<C> cs{P, sm, T, cw, b, h};
            consume_pair<C::kBlockN / 2>(cs, T);
        });
#endif
}

}  // namespace attn::hopper
