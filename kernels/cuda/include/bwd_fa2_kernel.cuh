// FlashAttention-2 backward main loop (FA2 paper, Algorithm 2), tensor cores (mma.sync m16n8k16
// via ldmatrix), Q / dO / LSE / D tiles by cp.async (double buffered, or single buffered with the
// next copy overlapping GEMM C).
//
// One CTA per (K/V tile of BC keys, query head, batch). K_j, V_j are loaded to shared memory once
// and dK_j, dV_j are accumulated in registers (fp32) while the CTA walks the Q tiles i (BR rows)
// that can see tile j under causal / window / varlen. Per Q tile:
//   GEMM A   S^T = K_j Q_i^T, dP^T = V_j dO_i^T             [BC x BR], k = d
//   epilogue P^T = exp(scale-softcap(S^T) - LSE_i) (masked or LSE = -inf -> 0),
//            dS^T = P^T * (dP^T - D_i) * (1 - tanh^2 when softcap); both to shared memory in T
//   GEMM B   dV_j += P^T dO_i, dK_j += dS^T Q_i               [BC x d],  k = BR
//   GEMM C   dQ_i (partial) = dS K_j                          [BR x d],  k = BC
//            added into the fp32 dq_accum with atomics (other CTAs own the other K/V tiles)
// Working on S^T rather than S lets every GEMM read its operands with one ldmatrix flavour and
// keeps LSE_i / D_i indexed by the fragment column. Each GEMM partitions its output over the NW
// warps as WM x (NW / WM) warp tiles (Fa2BwdTile below), so one kernel body serves d = 64, 128, 256.
// A tile shape is a struct naming each choice (as hopper/config.cuh's schedules); Fa2BwdTraits<D, Tile>
// derives the constants the kernel reads from it. The shipped shapes, and why, are bwd_fa2_defaults.cuh's.
// Shared-memory rows are padded by 8 elements (16 bytes): ldmatrix's 8 row addresses then fall
// in distinct bank groups without a swizzle.
#pragma once
#include <math.h>

#include "attn_params.h"
#include "bwd_mma.cuh"
#include "dtype.cuh"
#include "fa_ptx.cuh"
#include "mask.cuh"

#include <type_traits>

namespace attn::bwd {

// A backward tile shape: derive from it and override the members that differ (C++ name hiding), e.g.
//     struct Sixteen : Fa2BwdDefault<128> { static constexpr int warps = 16; };
// The values here are the d = 128 shape without pipelining (the lab's bc128); bwd_fa2_defaults.cuh names every
// shipped shape.
struct Fa2BwdTile {
    // Keys per CTA (BC: the K_j / V_j tile, dK_j / dV_j in registers) and query rows per step (BR: the Q_i tile).
    static constexpr int block_n = 128;
    static constexpr int block_m = 64;
    // Warps per CTA (NW): 8, or 16 for one large CTA per SM with small warp tiles.
    static constexpr int warps = 8;
    // Each GEMM's output is split over the warps as WM x (warps / WM) warp tiles; these are its WM (warps along M):
    // GEMM A, S^T and dP^T [block_n x block_m]; GEMM B, dV_j and dK_j [block_n x D]; GEMM C, dQ_i [block_m x D].
    static constexpr int sdp_warps_m = 4;
    static constexpr int dkdv_warps_m = 4;
    static constexpr int dq_warps_m = 2;
    // Q/dO buffers: 2 prefetch the next tile during this one, 1 loads then computes (the next copy overlapping GEMM C).
    static constexpr int q_stages = 2;
    // CTAs per SM the register allocation must allow (__launch_bounds__): 2 CTAs overlap one CTA's barrier phases with
    // the other's work, at the price of 128 registers per thread.
    static constexpr int min_ctas_per_sm = 1;
    // The fragment loads of every warp GEMM (bwd_mma.cuh warp_gemm).
    static constexpr FragmentLoads fragment_loads = FragmentLoads::kInOrder;
};

template <int D_, class Tile>
struct Fa2BwdTraits {
    static constexpr int D = D_, BC = Tile::block_n, BR = Tile::block_m, NW = Tile::warps, THREADS = 32 * NW;
    static constexpr int QSTAGES = Tile::q_stages, MINB = Tile::min_ctas_per_sm;
    static constexpr FragmentLoads LOADS = Tile::fragment_loads;
    static constexpr int WMA = Tile::sdp_warps_m, WMB = Tile::dkdv_warps_m, WMC = Tile::dq_warps_m;
    static_assert(QSTAGES == 1 || QSTAGES == 2, "Q/dO: one or two buffers");
    static constexpr int SROW = D + 8;   // pitch of K, V, Q, dO tiles (elements)
    static constexpr int PROW = BR + 8;  // pitch of the P^T and dS^T tiles [BC][BR]
    // GEMM A: [BC x BR] split WMA x (NW / WMA)
    static constexpr int A_M = BC / WMA, A_N = BR / (NW / WMA), A_MT = A_M / 16, A_NT = A_N / 8;
    // GEMM B: [BC x D]
    static constexpr int B_M = BC / WMB, B_N = D / (NW / WMB), B_MT = B_M / 16, B_NT = B_N / 8;
    // GEMM C: [BR x D]
    static constexpr int C_M = BR / WMC, C_N = D / (NW / WMC), C_MT = C_M / 16, C_NT = C_N / 8;
    static_assert(A_M % 16 == 0 && A_N % 16 == 0, "GEMM A warp tile");
    static_assert(B_M % 16 == 0 && B_N % 16 == 0, "GEMM B warp tile");
    static_assert(C_M % 16 == 0 && C_N % 16 == 0, "GEMM C warp tile");
    template <typename T>
    static constexpr size_t smem_bytes() {
        return sizeof(T) * ((size_t)2 * BC * SROW + 2 * QSTAGES * BR * SROW + 2 * BC * PROW) +
               sizeof(float) * 2 * QSTAGES * BR;
    }
};

template <typename T, class Tr>
__global__ void __launch_bounds__(Tr::THREADS, Tr::MINB) fa2_bwd_kernel(AttnBwdParams pb) {
    using T2 = typename DT<T>::T2;
    constexpr int D = Tr::D, BC = Tr::BC, BR = Tr::BR, SROW = Tr::SROW, PROW = Tr::PROW;
    const AttnFwdParams& p = pb.fwd;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sK = (T*)smem_raw;              // [BC][SROW]
    T* sV = sK + BC * SROW;            // [BC][SROW]
    constexpr int NS = Tr::QSTAGES;
    T* sQ = sV + BC * SROW;            // [NS][BR][SROW]
    T* sdO = sQ + NS * BR * SROW;      // [NS][BR][SROW]
    T* sPt = sdO + NS * BR * SROW;     // [BC][PROW]  P^T
    T* sdSt = sPt + BC * PROW;         // [BC][PROW]  dS^T
    float* sLse = (float*)(sdSt + BC * PROW);  // [NS][BR]
    float* sD = sLse + NS * BR;                // [NS][BR]

    const int b = blockIdx.z, h = blockIdx.y, c0 = blockIdx.x * BC;
    const int G = p.heads_q / p.heads_kv, hk = h / G;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const SeqMask mask = make_mask(p, b);

    const T* q = (const T*)p.q + b * p.q_batch_stride + h * p.q_head_stride;
    const T* k = (const T*)p.k + b * p.k_batch_stride + hk * p.k_head_stride;
    const T* v = (const T*)p.v + b * p.v_batch_stride + hk * p.v_head_stride;
    const T* dO = (const T*)pb.dout + b * pb.do_batch_stride + h * pb.do_head_stride;
    const float* lse = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride;
    const size_t bh = (size_t)b * p.heads_q + h;
    const float* Drow = pb.d_rowsum + bh * p.seqlen_q;
    float* dqa = pb.dq_accum + bh * p.seqlen_q * D;

    load_tile_async<T, BC, D, Tr::THREADS>(sK, SROW, k, p.k_row_stride, c0, mask.sk);
    load_tile_async<T, BC, D, Tr::THREADS>(sV, SROW, v, p.v_row_stride, c0, mask.sk);

    int qlo, qhi;
    mask.rows_for_keys(c0, c0 + BC, &qlo, &qhi);
    const int t_first = qlo / BR;
    const int n_tiles = qlo <= qhi ? qhi / BR - t_first + 1 : 0;
    // Start each CTA at a different Q tile so that the K/V tiles of one head do not all hit the
    // same dq_accum rows with their atomics at the same time (the sum is order-independent up to
    // fp32 rounding, which atomics make nondeterministic anyway).
    const int rot = n_tiles > 0 ? (int)(blockIdx.x % (unsigned)n_tiles) : 0;
    // First query row of the it-th tile visited (0 <= it < n_tiles): (it + rot) mod n_tiles without
    // a division in the loop.
    auto tile_row = [&](int it) {
        const int t = it + rot;
        return (t_first + (t >= n_tiles ? t - n_tiles : t)) * BR;
    };

    // Q_i / dO_i copy, per thread: 16-byte chunk column lc of rows lr, lr + RSTEP, ... (the same
    // for both tiles, so the shared-memory offset and the row predicate are computed once).
    constexpr int CH = D / 8, RSTEP = Tr::THREADS / CH;
    static_assert(Tr::THREADS % CH == 0 && BR % RSTEP == 0, "Q/dO copy: whole rows per pass");
    const int cp_lr = threadIdx.x / CH, cp_lc = (threadIdx.x % CH) * 8;
    const int cp_soff = cp_lr * SROW + cp_lc;
    const int64_t q_step = (int64_t)RSTEP * p.q_row_stride, do_step = (int64_t)RSTEP * pb.do_row_stride;
    auto issue_q_tile = [&](int it, int buf) {
        const int r0 = tile_row(it);
        T* q_s = sQ + buf * BR * SROW + cp_soff;
        T* do_s = sdO + buf * BR * SROW + cp_soff;
        // One 64-bit multiply per tile; the passes step by the (uniform) RSTEP rows.
        const T* qrow = q + (int64_t)(r0 + cp_lr) * p.q_row_stride + cp_lc;
        const T* dorow = dO + (int64_t)(r0 + cp_lr) * pb.do_row_stride + cp_lc;
#pragma unroll
        for (int j = 0; j < BR / RSTEP; ++j) {
            const bool in = r0 + cp_lr + j * RSTEP < mask.sq;  // rows past the end: zero-filled, nothing read
            cp_async_16(q_s + j * RSTEP * SROW, in ? (const void*)(qrow + j * q_step) : q, in);
            cp_async_16(do_s + j * RSTEP * SROW, in ? (const void*)(dorow + j * do_step) : dO, in);
        }
        // LSE_i and D_i by cp.async too: a plain load here would stall these threads (and, at the
        // next barrier, the CTA) for a full memory latency every tile. Rows past sq read as 0.
#pragma unroll
        for (int j = 0; j < (2 * BR + Tr::THREADS - 1) / Tr::THREADS; ++j) {
            const int r = threadIdx.x + j * Tr::THREADS;
            if ((2 * BR) % Tr::THREADS != 0 && r >= 2 * BR) break;
            const int i = r0 + (r % BR);
            const bool in = i < mask.sq;
            if (r < BR) cp_async_4(sLse + buf * BR + r, in ? lse + i : lse, in);
            else cp_async_4(sD + buf * BR + r - BR, in ? Drow + i : Drow, in);
        }
    };
    if (n_tiles > 0) issue_q_tile(0, 0);
    cp_async_commit();

    float acc_dv[Tr::B_MT][Tr::B_NT][4], acc_dk[Tr::B_MT][Tr::B_NT][4];
    zero_acc(acc_dv);
    zero_acc(acc_dk);
    const int wa_m = (warp % (BC / Tr::A_M)) * Tr::A_M, wa_n = (warp / (BC / Tr::A_M)) * Tr::A_N;
    const int wb_m = (warp % (BC / Tr::B_M)) * Tr::B_M, wb_n = (warp / (BC / Tr::B_M)) * Tr::B_N;
    const int wc_m = (warp % (BR / Tr::C_M)) * Tr::C_M, wc_n = (warp / (BR / Tr::C_M)) * Tr::C_N;

    for (int it = 0; it < n_tiles; ++it) {
        const int buf = NS == 2 ? (it & 1) : 0;
        const int r0 = tile_row(it);
        cp_async_wait<0>();
        __syncthreads();  // tile `it` visible; every warp is done with iteration it - 1
        if (NS == 2) {    // double buffer: prefetch the next tile now, it lands during this one
            if (it + 1 < n_tiles) issue_q_tile(it + 1, buf ^ 1);
            cp_async_commit();
        }
        const T* cQ = sQ + buf * BR * SROW;
        const T* cdO = sdO + buf * BR * SROW;
        const float* cL = sLse + buf * BR;
        const float* cD = sD + buf * BR;

        // GEMM A: S^T and dP^T for this warp's [A_M x A_N] block.
        {
            float acc_s[Tr::A_MT][Tr::A_NT][4], acc_p[Tr::A_MT][Tr::A_NT][4];
            zero_acc(acc_s);
            zero_acc(acc_p);
            warp_gemm<T, Tr::A_MT, Tr::A_NT, D, false, false, Tr::LOADS>(acc_s, sK, SROW, cQ, SROW, wa_m, wa_n);
            warp_gemm<T, Tr::A_MT, Tr::A_NT, D, false, false, Tr::LOADS>(acc_p, sV, SROW, cdO, SROW, wa_m, wa_n);
            // Per query column of this thread: LSE * log2 e (-inf, a row with no visible key, -> +inf
            // so that P = 2^(-inf) = 0 rather than NaN) and D. Masking only on tiles that need it.
            float lse2[Tr::A_NT][2], dd[Tr::A_NT][2];
#pragma unroll
            for (int nt = 0; nt < Tr::A_NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = wa_n + 8 * nt + 2 * t4 + e;
                    const float l = cL[n];
                    lse2[nt][e] = l == -INFINITY ? INFINITY : l * kLog2e;
                    dd[nt][e] = cD[n];
                }
            const bool need_mask = !mask.tile_full(r0, r0 + BR, c0, c0 + BC);
            const float sl2 = p.scale * kLog2e;
            const float scale_over_cap = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
            // The element loop is instantiated per (softcap on, masking needed) and the choice is
            // made once per tile: tested inside the loop, the two flags put a branch around every
            // element, and the unmasked, uncapped case (almost every tile) lost its straight-line
            // exp2 / FMA schedule (measured: SASS of the previous version, docs/fa1_fa2.md).
            auto epilogue = [&](auto capped_c, auto masked_c) {
                constexpr bool CAPPED = decltype(capped_c)::value, MASKED = decltype(masked_c)::value;
#pragma unroll
                for (int mt = 0; mt < Tr::A_MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < Tr::A_NT; ++nt)
#pragma unroll
                        for (int hf = 0; hf < 2; ++hf) {
                            const int m = wa_m + 16 * mt + g + 8 * hf;  // key row within the tile
                            const int n = wa_n + 8 * nt + 2 * t4;       // query row within the tile
                            float pv[2], dsv[2];
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const float raw = acc_s[mt][nt][2 * hf + e];
                                float pij, dcap = 1.f;
                                if constexpr (CAPPED) {  // apply_softcap with the division hoisted
                                    const float th = tanhf(raw * scale_over_cap);
                                    dcap = 1.f - th * th;
                                    pij = fast_exp2(p.softcap * th * kLog2e - lse2[nt][e]);
                                } else {
                                    pij = fast_exp2(raw * sl2 - lse2[nt][e]);
                                }
                                if constexpr (MASKED) {
                                    if (!mask.visible(r0 + n + e, c0 + m)) pij = 0.f;
                                }
                                pv[e] = pij;
                                if constexpr (CAPPED) {
                                    dsv[e] = pij * (acc_p[mt][nt][2 * hf + e] - dd[nt][e]) * dcap;
                                } else {
                                    dsv[e] = pij * (acc_p[mt][nt][2 * hf + e] - dd[nt][e]);
                                }
                            }
                            *(T2*)(sPt + m * PROW + n) = DT<T>::pack(pv[0], pv[1]);
                            *(T2*)(sdSt + m * PROW + n) = DT<T>::pack(dsv[0], dsv[1]);
                        }
            };
            using Yes = std::true_type;
            using No = std::false_type;
            if (p.softcap > 0.f) {
                if (need_mask) epilogue(Yes{}, Yes{});
                else epilogue(Yes{}, No{});
            } else {
                if (need_mask) epilogue(No{}, Yes{});
                else epilogue(No{}, No{});
            }
        }
        __syncthreads();  // P^T, dS^T complete

        // GEMM B: dV += P^T dO, dK += dS^T Q.
        warp_gemm<T, Tr::B_MT, Tr::B_NT, BR, false, true, Tr::LOADS>(acc_dv, sPt, PROW, cdO, SROW, wb_m, wb_n);
        warp_gemm<T, Tr::B_MT, Tr::B_NT, BR, false, true, Tr::LOADS>(acc_dk, sdSt, PROW, cQ, SROW, wb_m, wb_n);

        // Single buffer: once every warp is past GEMM B, Q_i / dO_i are dead; the next tile's
        // copy then overlaps GEMM C and its atomics.
        if (NS == 1) {
            __syncthreads();
            if (it + 1 < n_tiles) issue_q_tile(it + 1, 0);
            cp_async_commit();
        }

        // GEMM C: dQ_i += dS K_j (dS read transposed out of dS^T), fp32 atomics, unscaled.
        {
            float acc_q[Tr::C_MT][Tr::C_NT][4];
            zero_acc(acc_q);
            warp_gemm<T, Tr::C_MT, Tr::C_NT, BC, true, true, Tr::LOADS>(acc_q, sdSt, PROW, sK, SROW, wc_m, wc_n);
#pragma unroll
            for (int mt = 0; mt < Tr::C_MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int i = r0 + wc_m + 16 * mt + g + 8 * hf;
                    if (i >= mask.sq) continue;
                    float* row = dqa + (size_t)i * D + wc_n + 2 * t4;
#pragma unroll
                    for (int nt = 0; nt < Tr::C_NT; ++nt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                        atomicAdd((float2*)(row + 8 * nt), make_float2(acc_q[mt][nt][2 * hf], acc_q[mt][nt][2 * hf + 1]));
#else
                        atomicAdd(row + 8 * nt, acc_q[mt][nt][2 * hf]);
                        atomicAdd(row + 8 * nt + 1, acc_q[mt][nt][2 * hf + 1]);
#endif
                    }
                }
        }
    }

    // Epilogue: dK (times scale) and dV; rows past the real length hold zeros (no visible query).
#pragma unroll
    for (int mt = 0; mt < Tr::B_MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int j = c0 + wb_m + 16 * mt + g + 8 * hf;
            if (j >= p.seqlen_k) continue;
#pragma unroll
            for (int nt = 0; nt < Tr::B_NT; ++nt) {
                const int c = wb_n + 8 * nt + 2 * t4;
                const float k0 = acc_dk[mt][nt][2 * hf] * p.scale, k1 = acc_dk[mt][nt][2 * hf + 1] * p.scale;
                const float v0 = acc_dv[mt][nt][2 * hf], v1 = acc_dv[mt][nt][2 * hf + 1];
                if (G == 1) {
                    *(T2*)((T*)pb.dk + b * pb.dk_batch_stride + h * pb.dk_head_stride + j * pb.dk_row_stride + c) =
                        DT<T>::pack(k0, k1);
                    *(T2*)((T*)pb.dv + b * pb.dv_batch_stride + h * pb.dv_head_stride + j * pb.dv_row_stride + c) =
                        DT<T>::pack(v0, v1);
                } else {
                    const size_t off = (bh * p.seqlen_k + j) * D + c;
                    *(float2*)(pb.dk_accum + off) = make_float2(k0, k1);
                    *(float2*)(pb.dv_accum + off) = make_float2(v0, v1);
                }
            }
        }
}

}  // namespace attn::bwd
