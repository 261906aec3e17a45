// FlashAttention-3 forward for Hopper (sm_90a): TMA loads into a K/V shared-memory ring completing on
// mbarriers, wgmma for S = Q K^T (both operands in shared memory) and O += P V (P from registers), a
// producer warpgroup and two or three consumer warpgroups with setmaxnreg, pingpong between the consumers,
// intra-warpgroup overlap of softmax and GEMMs, a persistent longest-first tile scheduler.
// Semantics: oracles/SEMANTICS.md. The kernel is include/hopper/mainloop.cuh; this file validates,
// builds the tensor maps and picks the instantiation. NOTES_FA3.md has the design and the measurements.
#include <cstdlib>
#include <cuda_runtime.h>

#include <type_traits>

#include "attn_params.h"
#include "hopper/mainloop.cuh"
#include "hopper/tma_host.cuh"
#include "launch_common.cuh"

namespace {

using namespace attn::hopper;

constexpr int kFull = 0;

template <class C>
int launch(const AttnFwdParams& p, cudaStream_t stream, int sms, char* err, int errlen) {
    Fa3Params P{};
    P.p = p;
    const bool bf16 = p.dtype == ATTN_BF16;
    char msg[384] = {0};
    if (make_tma_tensor(P.q, "q", p.q, bf16, p.head_dim, p.seqlen_q, p.heads_q, p.batch, p.q_row_stride,
                        p.q_head_stride, p.q_batch_stride, C::kBlockM, msg, sizeof msg))
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "attn_fa3_fwd: %s", msg);
    if (p.seqlen_k > 0) {
        if (make_tma_tensor(P.k, "k", p.k, bf16, p.head_dim, p.seqlen_k, p.heads_kv, p.batch, p.k_row_stride,
                            p.k_head_stride, p.k_batch_stride, C::kBlockN, msg, sizeof msg) ||
            make_tma_tensor(P.v, "v", p.v, bf16, p.head_dim_v, p.seqlen_k, p.heads_kv, p.batch, p.v_row_stride,
                            p.v_head_stride, p.v_batch_stride, C::kBlockN, msg, sizeof msg))
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "attn_fa3_fwd: %s", msg);
    } else {
        P.k = P.q;  // never read: no key tile exists
        P.v = P.q;
    }
    const int num_m = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM;
    const long long kv_bytes = 2LL * p.seqlen_k * p.head_dim * 2;
    const int bh = p.heads_q * p.batch;
    // Heads per L2 section: the K/V of the heads in flight together should stay in L2. Without a right bound every
    // work tile is as long as the next, so the budget is small (8 MB: at N = 8192 one or two heads in flight, each
    // K/V tile read by 60-130 CTAs at about the same time); causal or windowed, 32 MB of the 50, so that the longest
    // tiles of more heads go first. H200 (fa3_env_sweep, NOTES_FA3.md session 10), B=4 H=16 N=8192 non-causal
    // TFLOPs/s 32 -> 8 MB: d = 64 507 -> 510, d = 128 588 -> 604, d = 256 673 -> 700; causal 8 MB loses up to 2%.
    // ATTN_FA3_FWD_L2_MB (a tuning knob) sets another budget. With GQA, consecutive query heads share one K/V head,
    // hence the factor heads_q / heads_kv.
    const bool ragged = p.causal || p.window_right >= 0;
    const char* l2_mb = getenv("ATTN_FA3_FWD_L2_MB");
    const long long l2_budget = (l2_mb != nullptr && atoi(l2_mb) > 0 ? atoi(l2_mb) : ragged ? 32 : 8) * (1LL << 20);
    P.order = TileOrder{num_m, p.heads_q, p.batch, l2_section(kv_bytes, l2_budget, bh) * (p.heads_q / p.heads_kv)};
    if (P.order.section > bh) P.order.section = bh;
    const long long total = 1LL * num_m * bh;
    if (total > 0x7fffffffLL)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "attn_fa3_fwd: %lld work tiles exceed the grid limit",
                          total);
    auto kernel = fa3_fwd_kernel<C>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "attn_fa3_fwd: cudaFuncSetAttribute(%u bytes): %s",
                          C::kSmemBytes, cudaGetErrorString(e));
    // Cluster builds: pairs of CTAs (scheduler.cuh cluster_grid: at most one more than the work tiles).
    int grid = C::kClusterM > 1 ? cluster_grid(P.order) : static_cast<int>(total);
    if constexpr (C::kPersistent) {
        e = attn::persistent_setup(&grid, sms, &P.counter, stream);
        if (e != cudaSuccess)
            return attn::fail(err, errlen, ATTN_ERR_CUDA, "attn_fa3_fwd: tile counter: %s", cudaGetErrorString(e));
    }
    if constexpr (C::kClusterM > 1) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(C::kThreads);
        cfg.dynamicSmemBytes = C::kSmemBytes;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = C::kClusterM;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, kernel, P);
    } else {
        kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(P);
        e = cudaGetLastError();
    }
    if constexpr (C::kPersistent) cudaFreeAsync(P.counter, stream);
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "attn_fa3_fwd: launch failed: %s (%s)", cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

// The default build per head dim (the fastest measured, NOTES_FA3.md): producer warpgroup, pingpong (not at d = 256,
// below), intra-warpgroup overlap. d = 64: the persistent loop (session 15, in-process: +1.4% over one CTA per work
// tile, geometric mean of 8 rows), three consumer warpgroups (192 query rows), key tiles of 128. d = 128: three
// consumer warpgroups, key tiles of 80 (O, S and P in 160 registers; 96 keys spill), Q from shared memory (session 14:
// 3-8% faster than two warpgroups with 128-key tiles and Q in registers, variant two_wg, which the d = 128 ablation
// builds change one thing of). d = 256: two consumer warpgroups, key tiles of 80. A K/V ring as deep as shared memory
// allows (3, 3, 2 stages). d = 128 and 256 keep one CTA per work tile: the persistent loop measured 0.97-1.02x there,
// and 0.94-0.99x at d = 256, whose Q is single-buffered (a Q freed after the last S = Q K^T, O written from registers,
// did not change that: NOTES_FA3.md session 15).
template <int D>
constexpr int kDefaultN = D == 64 ? 128 : 80;
template <int D>
constexpr int kDefaultWGs = D == 256 ? 2 : 3;
template <int D>
constexpr bool kDefaultPersistent = D == 64;
// d = 256, one CTA per work tile: no pingpong between the two consumer warpgroups (flash-attn-4's sm90 forward issues
// no named barrier per key tile there either: ncu, 29 BAR per CTA against our 1684). In one process against the
// pingpong build (H200, B=4 H=16 N=8192, two orders of 7 rounds, NOTES_FA3.md session 17): 1.005 / 1.015 non-causal,
// 1.007 / 1.012 causal. The persistent d = 256 build keeps it: without it ptxas serializes that build's wgmmas (C7520).
template <int D, bool kPersistent>
constexpr bool kDefaultPingpong = D != 256 || kPersistent;
// d = 128 / 256: the lazy rescale (config.cuh kSkipRescale: a row's maximum moves only when a key tile's exceeds it by
// more than 2^8 in P, O *= corr only in warps where one moved). In one process against O rescaled every key tile (H200,
// B=4 H=16 N=8192, two orders of 7 rounds, NOTES_FA3.md session 21): d = 128 1.03-1.06, d = 256 1.02-1.04; d = 64 (32
// multiplications of O a key tile) 0.97-1.00, so not there.
template <int D>
constexpr bool kDefaultLazyRescale = D != 64;
// The two-warpgroup d = 128 build (the default until session 14): 128-key tiles, Q in registers (config.cuh kQRegs).
template <typename E, int kN = 128, int kStages = 0, bool kQRegs = kN == 128, int kProbe = kProbeNone>
using TwoWg128 = Fa3Config<128, E, 2, true, true, true, false, false, kN, kStages, false, kProbe, kQRegs>;
template <int D, typename E, bool kPre, bool kPersistent = false, int kN = kDefaultN<D>, int kStages = 0,
          int kWGs = kDefaultWGs<D>, bool kSkipRescale = kDefaultLazyRescale<D>, int kProbe = kProbeNone,
          bool kQRegs = (D == 128 && kN == 128), int kClusterM = 1>
using Default = Fa3Config<D, E, kWGs, true, true, kDefaultPingpong<D, kPersistent>, kPersistent, kPre, kN, kStages,
                          kSkipRescale, kProbe, kQRegs, kClusterM>;
// Every query tile sees the same key tiles (no causal mask, no window, no varlen), so query tiles m, m + 1 of a head
// can share their K / V loads in a cluster of two (config.cuh kClusterM; variant cluster2).
inline bool same_keys_for_every_query_tile(const AttnFwdParams& p) {
    return !p.causal && p.window_left < 0 && p.window_right < 0 && p.seqlens_q == nullptr && p.seqlens_k == nullptr &&
           p.seqlen_k > 0;
}

// Variant cluster2 (d = 128 / 256): the default one-CTA-per-work-tile build in clusters of two CTAs on adjacent query
// tiles of a head, each loading half of every K / V tile for both (TMA multicast). In one process against the default
// (H200, B=4 H=16 N=8192 non-causal, NOTES_FA3.md session 20): 0.97-0.99 at d = 128, 0.96-1.005 at d = 256: halving
// the L2 reads does not shorten the loop (the card runs at its power limit, so what sets the speed is energy per
// product: NOTES_FA3.md session 21).
template <int D, typename E>
int launch_cluster2(const AttnFwdParams& p, cudaStream_t s, int sms, char* err, int errlen) {
    return launch<Default<D, E, false, false, kDefaultN<D>, 0, kDefaultWGs<D>, kDefaultLazyRescale<D>, kProbeNone, false,
                          2>>(p, s, sms, err, errlen);
}

// f(dim, elem) with the head dim of p (64, 128, else 256) as std::integral_constant and its element type as a
// value of that type: the one switch over head dim and dtype that every dispatch below goes through.
template <class F>
int by_head_dim(const AttnFwdParams& p, F&& f) {
    const bool bf = p.dtype == ATTN_BF16;
    switch (p.head_dim) {
        case 64:
            return bf ? f(std::integral_constant<int, 64>{}, __nv_bfloat16{})
                      : f(std::integral_constant<int, 64>{}, __half{});
        case 128:
            return bf ? f(std::integral_constant<int, 128>{}, __nv_bfloat16{})
                      : f(std::integral_constant<int, 128>{}, __half{});
        default:
            return bf ? f(std::integral_constant<int, 256>{}, __nv_bfloat16{})
                      : f(std::integral_constant<int, 256>{}, __half{});
    }
}

// The default build of head dim D with one CTA per work tile and the lazy rescale (variant skip_rescale: at d = 64,
// where the default has none), or with the default grid and O rescaled after every key tile, the row maxima always
// current (variant eager_rescale: at d = 128 / 256, the default until session 21).
template <int D, typename E>
int launch_rescale(const AttnFwdParams& p, bool lazy, cudaStream_t s, int sms, char* err, int errlen) {
    return lazy ? launch<Default<D, E, false, false, kDefaultN<D>, 0, kDefaultWGs<D>, true>>(p, s, sms, err, errlen)
                : launch<Default<D, E, false, kDefaultPersistent<D>, kDefaultN<D>, 0, kDefaultWGs<D>, false>>(p, s, sms,
                                                                                                            err, errlen);
}

template <int D, typename E>
int dispatch_full(const AttnFwdParams& p, cudaStream_t s, int sms, char* err, int errlen) {
    const bool pre = p.softcap > 0.f || !(p.scale > 0.f);
    return pre ? launch<Default<D, E, true, kDefaultPersistent<D>>>(p, s, sms, err, errlen)
               : launch<Default<D, E, false, kDefaultPersistent<D>>>(p, s, sms, err, errlen);
}

// The default build with the persistent loop, or with one CTA per work tile, for any head dim.
template <int D, typename E>
int dispatch_grid(const AttnFwdParams& p, bool persistent, cudaStream_t s, int sms, char* err, int errlen) {
    return persistent ? launch<Default<D, E, false, true>>(p, s, sms, err, errlen)
                      : launch<Default<D, E, false, false>>(p, s, sms, err, errlen);
}

// Ablation and tuning builds, d = 128: each changes one thing of the two-warpgroup build (TwoWg128).
template <typename E>
int dispatch_variant(const AttnFwdParams& p, int flags, cudaStream_t s, int sms, char* err, int errlen) {
    switch (flags) {
        case ATTN_FA3_NO_PINGPONG:
            return launch<Fa3Config<128, E, 2, true, true, false, false, false, 128>>(p, s, sms, err, errlen);
        case ATTN_FA3_NO_OVERLAP:
            return launch<Fa3Config<128, E, 2, true, false, true, false, false, 128>>(p, s, sms, err, errlen);
        case ATTN_FA3_NO_WS:
            return launch<Fa3Config<128, E, 2, false, true, false, false, false, 128>>(p, s, sms, err, errlen);
        case ATTN_FA3_STAGE1:
            return launch<Fa3Config<128, E, 1, false, false, false, false, false, 128>>(p, s, sms, err, errlen);
        case ATTN_FA3_N176:
            return launch<TwoWg128<E, 176>>(p, s, sms, err, errlen);
        case ATTN_FA3_STAGES2:
            return launch<TwoWg128<E, 128, 2>>(p, s, sms, err, errlen);
        case ATTN_FA3_SMEM_Q:
            return launch<TwoWg128<E, 128, 0, false>>(p, s, sms, err, errlen);
        case ATTN_FA3_PROBE_NO_EXP:
            return launch<TwoWg128<E, 128, 0, true, kProbeNoExp>>(p, s, sms, err, errlen);
        case ATTN_FA3_PROBE_NO_PV:
            return launch<TwoWg128<E, 128, 0, true, kProbeNoPV>>(p, s, sms, err, errlen);
        case ATTN_FA3_PROBE_NO_SOFTMAX:
            return launch<TwoWg128<E, 128, 0, true, kProbeNoSoftmax>>(p, s, sms, err, errlen);
        case ATTN_FA3_TWO_WG:
            return launch<TwoWg128<E>>(p, s, sms, err, errlen);
        default:
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                              "attn_fa3_fwd_variant: flags=%d: the variant builds are 0 (default) to %d", flags,
                              ATTN_FA3_CLUSTER2);
    }
}

int run(const AttnFwdParams* p, int flags, void* stream, char* err, int errlen) {
    const char* name = flags == kFull ? "attn_fa3_fwd" : "attn_fa3_fwd_variant";
    int rc = attn::validate_fwd(p, name, err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p->batch == 0 || p->seqlen_q == 0) return ATTN_OK;
    int major = 0;
    const int sms = attn::device_sms(&major);
    if (major != 9)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "%s: device compute capability %d.x: this kernel is built for sm_90a (Hopper) only", name,
                          major);
    auto s = static_cast<cudaStream_t>(stream);
    const bool bf = p->dtype == ATTN_BF16;
    if (flags != kFull) {
        const bool pre = p->softcap > 0.f || !(p->scale > 0.f);
        if (pre)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                              "%s: softcap=%g scale=%g: the variant builds need no softcap and scale > 0", name,
                              p->softcap, p->scale);
        if (flags == ATTN_FA3_D64_TWO_WG) {
            if (p->head_dim != 64)
                return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d: variant %d is for head_dim 64",
                                  name, p->head_dim, flags);
            return bf ? launch<Default<64, __nv_bfloat16, false, false, 192, 0, 2>>(*p, s, sms, err, errlen)
                      : launch<Default<64, __half, false, false, 192, 0, 2>>(*p, s, sms, err, errlen);
        }
        if (flags == ATTN_FA3_SKIP_RESCALE || flags == ATTN_FA3_EAGER_RESCALE)
            return by_head_dim(*p, [&](auto dim, auto elem) {
                return launch_rescale<decltype(dim)::value, decltype(elem)>(*p, flags == ATTN_FA3_SKIP_RESCALE, s, sms,
                                                                            err, errlen);
            });
        if (flags == ATTN_FA3_CLUSTER2) {
            if (p->head_dim == 64 || !same_keys_for_every_query_tile(*p))
                return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                                  "%s: head_dim=%d causal=%d window=(%d, %d) varlen=%d: variant cluster2 is built for "
                                  "head_dim 128 / 256 without a causal mask, window or varlen (every query tile sees "
                                  "the same keys)",
                                  name, p->head_dim, p->causal, p->window_left, p->window_right,
                                  p->seqlens_q != nullptr || p->seqlens_k != nullptr);
            if (p->head_dim == 128)
                return bf ? launch_cluster2<128, __nv_bfloat16>(*p, s, sms, err, errlen)
                          : launch_cluster2<128, __half>(*p, s, sms, err, errlen);
            return bf ? launch_cluster2<256, __nv_bfloat16>(*p, s, sms, err, errlen)
                      : launch_cluster2<256, __half>(*p, s, sms, err, errlen);
        }
        if (flags == ATTN_FA3_PERSISTENT || flags == ATTN_FA3_ONE_CTA_PER_TILE) {
            const bool per = flags == ATTN_FA3_PERSISTENT;
            return by_head_dim(*p, [&](auto dim, auto elem) {
                return dispatch_grid<decltype(dim)::value, decltype(elem)>(*p, per, s, sms, err, errlen);
            });
        }
        if (p->head_dim != 128)
            return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                              "%s: head_dim=%d: the variant builds exist for head_dim 128", name, p->head_dim);
        return bf ? dispatch_variant<__nv_bfloat16>(*p, flags, s, sms, err, errlen)
                  : dispatch_variant<__half>(*p, flags, s, sms, err, errlen);
    }
    return by_head_dim(*p, [&](auto dim, auto elem) {
        return dispatch_full<decltype(dim)::value, decltype(elem)>(*p, s, sms, err, errlen);
    });
}

}  // namespace

extern "C" int attn_fa3_fwd(const AttnFwdParams* p, void* stream, char* err, int errlen) {
    return run(p, kFull, stream, err, errlen);
}

extern "C" int attn_fa3_fwd_variant(const AttnFwdParams* p, int flags, void* stream, char* err, int errlen) {
    return run(p, flags, stream, err, errlen);
}
