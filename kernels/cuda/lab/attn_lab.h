// The lab build of the attention kernels: libattn_kernels_lab.so, built apart from the shipped library by
// `python -m attention_conformance.kernels.build --lab` (never by the default build, so CI's build time stays the
// product's), loaded by kernels/cuda/lab/__init__.py. It holds the ablation, tuning and timing builds that the design
// records measure against the shipped ones, each chosen by name through a launcher argument, never by the
// environment. The parameter structs and AttnLaunch are attn_params.h's, so one filled struct runs in both libraries;
// the shipped ABI (attn_params.h) knows nothing of what is here.
//
// ATTN_LAB_VERSION versions the variant codes and the launchers below; attn_lab_version() returns it and writes the
// ATTN_PARAMS_VERSION the lab was built against, so a loader can refuse a stale build.
//   1: the first lab ABI (the FA3 forward's variant codes are attn_params.h v4's AttnFa3Variant codes).
//   2: the wide FA3 backward's variants (wide_dq_float4; the lab's backward dispatches every head dim).
//   3: the d = 192 FA3 forward builds (ATTN_LAB_FA3_D192_*, codes 21-24).
//   4: ATTN_LAB_FA3_BWD_ROWS64 at d = 96, 128 too (their 64-row build, the shipped one before the 80-row tiles).
//   5: ATTN_LAB_FA3_BWD_DIRECT_DKV (dK / dV stored 4 bytes at a time: the shipped builds before they were staged).
//   6: ATTN_LAB_FA3_BWD_ALTERNATE_DQ (d = 64: the dQ turns on the same tile, the shipped build before the turns went
//      one tile behind), ATTN_LAB_FA3_BWD_SHARED_KEYS64 (d = 192: the wide 64-key tiling, the shipped build before
//      hopper/bwd_sliced.cuh's 96-key tiles).
//   7: ATTN_LAB_FA3_BWD_SLICED_NEXT_S_EARLY (d = 192: the 96-key tiles with the next tile's S issued behind dK^T),
//      ATTN_LAB_FA3_BWD_SLICED_PDS_DOUBLE ((192, 128): P^T / dS^T double-buffered, one barrier a tile fewer).
//   8: codes 10 and 11 gone (measured on an H100: the early S 0.84x the shipped build, the double buffer 1.00x;
//      docs/fa3_backward.md).
#pragma once
#include <stdint.h>

#include "attn_params.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_LAB_VERSION 8

int attn_lab_version(int* params_version);

// FA3 forward builds (kernels/cuda/lab/fa3_fwd_lab.cu). ATTN_LAB_FA3_DEFAULT runs the shipped build of each head dim
// (attn_fa3_fwd's); the others need no softcap and scale > 0 (ATTN_ERR_UNSUPPORTED otherwise). Unless noted, each
// changes one thing of the d = 128 build with two consumer warpgroups, 128-key tiles and Q in registers
// (ATTN_LAB_FA3_TWO_WG, the shipped d = 128 build before three warpgroups with 80-key tiles replaced it).
enum AttnLabFa3FwdVariant {
    ATTN_LAB_FA3_DEFAULT = 0,
    ATTN_LAB_FA3_NO_PINGPONG = 1,  // consumer warpgroups issue their GEMMs without taking turns
    ATTN_LAB_FA3_NO_OVERLAP = 2,   // S, softmax, P V in sequence inside a warpgroup
    ATTN_LAB_FA3_PERSISTENT = 3,   // any head dim: the shipped build with the persistent loop (pingpong at d = 256 too)
    ATTN_LAB_FA3_NO_WS = 4,        // no producer warpgroup: thread 0 issues the loads, no setmaxnreg, no pingpong
    ATTN_LAB_FA3_STAGE1 = 5,       // one consumer warpgroup, 64-row tiles, thread 0 issues the loads, no overlap
    ATTN_LAB_FA3_N176 = 6,         // key tiles of 176 (Q from shared memory; with a 2-stage K/V ring: 3 do not fit)
    ATTN_LAB_FA3_STAGES2 = 7,      // a 2-stage K/V ring instead of 3
    ATTN_LAB_FA3_D64_TWO_WG = 8,   // head_dim 64 only: two consumer warpgroups and key tiles of 192
    ATTN_LAB_FA3_ONE_CTA_PER_TILE = 9,  // any head dim: the shipped build with one CTA per work tile
    ATTN_LAB_FA3_LAZY_RESCALE_ONE_CTA = 10,  // any head dim: one CTA per work tile and the lazy rescale
    // Timing probes: wrong results by design, each leaves one stage of the consumer loop out (probes.cuh).
    ATTN_LAB_FA3_PROBE_NO_EXP = 11,      // softmax without ex2 (p = the exponent)
    ATTN_LAB_FA3_PROBE_NO_PV = 12,       // no O += P V wgmma
    ATTN_LAB_FA3_PROBE_NO_SOFTMAX = 13,  // no max, exp, sum or rescale: P = S
    ATTN_LAB_FA3_SMEM_Q = 14,            // S = Q K^T with Q read from shared memory (SS wgmma)
    ATTN_LAB_FA3_TWO_WG = 15,            // the two-warpgroup build itself
    ATTN_LAB_FA3_CLUSTER2 = 16,  // d = 128 / 256, no causal mask, window or varlen: the shipped build with one CTA per
                                 // work tile in clusters of two on adjacent query tiles sharing every K / V load
    ATTN_LAB_FA3_EAGER_RESCALE = 17,  // any head dim: the shipped build with O rescaled after every key tile
    // d = 96 only: the shipped build (O += P V as m64n96, hopper/schedule.cuh PvColumns::kHeadDim, key tiles of 112)
    // with one thing changed: O += P V as m64n128 over whole 64-column blocks and key tiles of 80 (d = 128's schedule,
    // the shipped d = 96 build before); key tiles of 80; key tiles of 96
    ATTN_LAB_FA3_D96_WHOLE_BLOCKS = 18,
    ATTN_LAB_FA3_D96_N80 = 19,
    ATTN_LAB_FA3_D96_N96 = 20,
    // d = dv = 192 only: the shipped build (two consumer warpgroups, key tiles of 112, no pingpong, the lazy rescale,
    // a 2-stage K / V ring; flash-attn-4's sm90 schedule there too) with one thing changed: the two warpgroups take
    // turns on the tensor cores (pingpong); key tiles of 96; key tiles of 80 (still 2 stages: 3 would need 230 KB);
    // O rescaled after every key tile
    ATTN_LAB_FA3_D192_PINGPONG = 21,
    ATTN_LAB_FA3_D192_N96 = 22,
    ATTN_LAB_FA3_D192_N80 = 23,
    ATTN_LAB_FA3_D192_EAGER_RESCALE = 24,
};
// l2_budget_mb > 0: the heads per L2 section sized for that many MB of K / V instead of the shipped rule
// (hopper/fwd_launch.cuh fwd_l2_budget: 8 MB, 32 MB with a right bound).
int attn_lab_fa3_fwd(const AttnFwdParams* p, int32_t variant, int32_t l2_budget_mb, const AttnLaunch* launch,
                     char* err, int errlen);
int64_t attn_lab_fa3_fwd_workspace(const AttnFwdParams* p, int32_t variant);

// FA3 FP8 forward builds (kernels/cuda/lab/fa3_fp8_fwd_lab.cu), each changing one thing of the shipped build of its V
// layout. V as rows, e4m3, head_dim 128: SMEM_Q (S = Q K^T with Q from shared memory), NARROW_TRANSPOSE (the 4 x 4-byte
// V transpose), NO_FOLD (the score scale multiplied per score, not folded into the exp2), and the timing probes
// NO_TRANSPOSE, NO_EXP, NO_PV (wrong results by design). V k-major (any format): ROW_TILES (the key tiles of the V-as-rows
// builds, two consumer warpgroups), TWO_WG (d = 64 / 128, per tensor / per head: two warpgroups with 256 / 192-key
// tiles), EXP_POLY4 / EXP_POLY2 (TWO_WG at d = 128 with every fourth / second chunk's exponentials on the FMA pipe),
// PERSISTENT (the shipped build of each head dim with the persistent loop), ONE_CTA_PER_TILE (d = 64: the shipped
// build with one CTA per work tile). A variant of the other V layout is ATTN_ERR_UNSUPPORTED naming both.
enum AttnLabFp8Variant {
    ATTN_LAB_FP8_DEFAULT = 0,
    ATTN_LAB_FP8_NO_TRANSPOSE = 1,
    ATTN_LAB_FP8_NO_EXP = 2,
    ATTN_LAB_FP8_NO_PV = 3,
    ATTN_LAB_FP8_SMEM_Q = 4,
    ATTN_LAB_FP8_NARROW_TRANSPOSE = 5,
    ATTN_LAB_FP8_NO_FOLD = 6,
    ATTN_LAB_FP8_ROW_TILES = 7,
    ATTN_LAB_FP8_TWO_WG = 8,
    ATTN_LAB_FP8_EXP_POLY4 = 9,
    ATTN_LAB_FP8_EXP_POLY2 = 10,
    ATTN_LAB_FP8_PERSISTENT = 11,
    ATTN_LAB_FP8_ONE_CTA_PER_TILE = 12,
};
int attn_lab_fa3_fp8_fwd(const AttnFp8FwdParams* p, int32_t variant, const AttnLaunch* launch, char* err, int errlen);
int64_t attn_lab_fa3_fp8_fwd_workspace(const AttnFp8FwdParams* p, int32_t variant);
// The key tile (keys per online-softmax block) of the build variant runs for p, into *key_tile (no device needed).
int attn_lab_fa3_fp8_key_tile(const AttnFp8FwdParams* p, int32_t variant, int* key_tile, char* err, int errlen);

// FA3 backward builds (kernels/cuda/lab/fa3_bwd_lab.cu), deterministic (dQ added in a fixed order) or not, each
// changing one thing of the shipped main loop of its head dim: ATOMIC_DQ (the consumers add dQ with fp32 atomics, with
// the GEMM / element-wise overlap at d = 64 only), ATOMIC_DQ_OTHER_OVERLAP (the same with the overlap at d = 128 only;
// not deterministic), ROWS64 (64-row query tiles: d = 64, where the shipped build has 128; d = 96, 128 with dQ = dS K
// split by columns, where it has 80 with dQ^T = K^T dS^T), OTHER_DQ_SPLIT (d = 64: every tile's dQ split by rows
// between the consumers; d = 128: 64-row tiles, the consumers taking turns computing a whole tile's dQ), DIRECT_DKV
// (dK / dV stored 4 bytes at a time from the accumulators, DkvStore::kDirect, instead of staged through shared
// memory); those of d = dv in {64, 96, 128}. The wide head dims' (d = 192, 256, (192, 128); hopper/bwd_wide.cuh):
// ATOMIC_DQ (dQ by the consumers' float2 atomics, dO in the Q ring), WIDE_DQ_FLOAT4 (float4 atomics:
// DqAtomicWidth::kFloat4), WIDE_TMA_DQ_ONE_DO_STAGE (dQ through one 16 KB buffer per consumer and the TMA reduce-add,
// dO in one stage: DqStaging::kBufferPerConsumer, do_stages = 1, the shipped d = 256 build; not d = dv = 192).
// ALTERNATE_DQ (d = 64): the consumers' dQ turns on the same tile (DqSplit::kAlternate; the shipped build takes them
// one tile behind). SHARED_KEYS64 (d = 192, dv = 192 or 128): hopper/bwd_wide.cuh's tiling, 64 keys shared by two
// consumers, TMA dQ (the shipped builds have hopper/bwd_sliced.cuh's 96-key tiles).
// DEFAULT runs every head dim.
enum AttnLabFa3BwdVariant {
    ATTN_LAB_FA3_BWD_DEFAULT = 0,
    ATTN_LAB_FA3_BWD_ATOMIC_DQ = 1,
    ATTN_LAB_FA3_BWD_ATOMIC_DQ_OTHER_OVERLAP = 2,
    ATTN_LAB_FA3_BWD_ROWS64 = 3,
    ATTN_LAB_FA3_BWD_OTHER_DQ_SPLIT = 4,
    ATTN_LAB_FA3_BWD_WIDE_DQ_FLOAT4 = 5,
    ATTN_LAB_FA3_BWD_WIDE_TMA_DQ_ONE_DO_STAGE = 6,
    ATTN_LAB_FA3_BWD_DIRECT_DKV = 7,
    ATTN_LAB_FA3_BWD_ALTERNATE_DQ = 8,
    ATTN_LAB_FA3_BWD_SHARED_KEYS64 = 9,
};
int attn_lab_fa3_bwd(const AttnBwdParams* p, int32_t variant, int32_t deterministic, const AttnLaunch* launch,
                     char* err, int errlen);
int64_t attn_lab_fa3_bwd_workspace(const AttnBwdParams* p, int32_t variant, int32_t deterministic);

// FA2 backward tile shapes (kernels/cuda/lab/fa2_bwd_lab.cu; bwd_fa2_kernel.cuh Fa2BwdTile), the alternatives of the
// shipped ones (include/bwd_fa2_defaults.cuh): SMALL (the fallbacks of devices with less shared memory, the shipped
// shapes before), DB (one CTA per SM, 128 keys at d = 64, double buffer at d = 128), DBP (DB pipelined, d = 64), W16
// (16 warps, 128 keys), W16P (W16 pipelined; at d = 256 the pipelined 16-warp shape), P2 (SMALL pipelined), BC128
// (d = 128: the shipped shape without pipelining), FA2P (d = 256: pipelined). A shape the head dim lacks is
// ATTN_ERR_UNSUPPORTED; tensors the tensor cores cannot read take the SIMT kernel as attn_fa2_bwd does.
enum AttnLabFa2BwdVariant {
    ATTN_LAB_FA2_BWD_DEFAULT = 0,
    ATTN_LAB_FA2_BWD_SMALL = 1,
    ATTN_LAB_FA2_BWD_DB = 2,
    ATTN_LAB_FA2_BWD_DBP = 3,
    ATTN_LAB_FA2_BWD_W16 = 4,
    ATTN_LAB_FA2_BWD_W16P = 5,
    ATTN_LAB_FA2_BWD_P2 = 6,
    ATTN_LAB_FA2_BWD_BC128 = 7,
    ATTN_LAB_FA2_BWD_FA2P = 8,
};
int attn_lab_fa2_bwd(const AttnBwdParams* p, int32_t variant, const AttnLaunch* launch, char* err, int errlen);

#ifdef __cplusplus
}
#endif
