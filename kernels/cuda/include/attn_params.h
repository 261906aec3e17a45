// Parameter structs shared by every CUDA attention kernel in kernels/cuda/ and by the ctypes
// loader in kernels/cuda_lib.py. Plain C, so one build serves any torch version: the Python side
// fills these with device pointers from torch tensors and element strides, nothing else crosses.
//
// Semantics are oracles/SEMANTICS.md's: layout [batch, heads, seqlen, dim] addressed through
// explicit strides (so [B, L, H, D] views and stride-0 K/V need no copy), GQA head h -> h / (Hq/Hkv),
// causal alignment bottom-right or top-left, window (left, right) with -1 = unbounded, fully masked
// rows write O = 0 and LSE = -inf.
//
// If you change a field here, change the ctypes mirror in kernels/cuda_lib.py in the same commit.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum AttnDtype { ATTN_FP16 = 0, ATTN_BF16 = 1 };

typedef struct AttnFwdParams {
    // Device pointers. o and lse are written; q, k, v are only read.
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;  // [B, Hq, Lq] fp32, may be NULL when the caller does not want it

    // Strides in elements (not bytes). Row stride is the stride of the seqlen axis.
    int64_t q_batch_stride, q_head_stride, q_row_stride;
    int64_t k_batch_stride, k_head_stride, k_row_stride;
    int64_t v_batch_stride, v_head_stride, v_row_stride;
    int64_t o_batch_stride, o_head_stride, o_row_stride;
    int64_t lse_batch_stride, lse_head_stride;  // lse row stride is 1

    int32_t batch, heads_q, heads_kv;
    int32_t seqlen_q, seqlen_k;  // padded (max) lengths when varlen
    int32_t head_dim, head_dim_v;

    // Varlen: per-batch real lengths, int32 device arrays of length batch, or NULL for "all full".
    // Sequences stay in the padded [B, H, L, D] layout; rows past seqlens_q[b] are not written.
    const int32_t* seqlens_q;
    const int32_t* seqlens_k;

    float scale;    // multiplies q.k before softcap
    float softcap;  // 0 = off; else s = softcap * tanh(s / softcap)
    int32_t causal;             // 0/1
    int32_t align_bottom_right; // 1: j <= i + Lk - Lq ; 0: j <= i   (per sequence, real lengths)
    int32_t window_left;        // -1 = unbounded
    int32_t window_right;       // -1 = unbounded (causal forces 0)
    int32_t dtype;              // AttnDtype

    // Split-KV (Flash-Decoding): number of splits; partial buffers are owned by the launcher's
    // caller. 0 or 1 = no split.
    int32_t num_splits;
    float* o_partial;    // [S, B, Hq, Lq, dv] fp32
    float* lse_partial;  // [S, B, Hq, Lq] fp32
} AttnFwdParams;

typedef struct AttnBwdParams {
    AttnFwdParams fwd;  // q, k, v, o (read), lse (read), shapes, strides, masks
    const void* dout;
    void* dq;
    void* dk;
    void* dv;
    int64_t do_batch_stride, do_head_stride, do_row_stride;
    int64_t dq_batch_stride, dq_head_stride, dq_row_stride;
    int64_t dk_batch_stride, dk_head_stride, dk_row_stride;
    int64_t dv_batch_stride, dv_head_stride, dv_row_stride;
    // Scratch the caller allocates (zeroed): fp32 dQ accumulator [B, Hq, Lq, d], D = rowsum(dO*O)
    // [B, Hq, Lq], and fp32 dK/dV accumulators [B, Hq, Lk, d|dv] for the per-q-head pass before the
    // GQA reduction. Kernels that do not need one ignore it.
    float* dq_accum;
    float* d_rowsum;
    float* dk_accum;
    float* dv_accum;
} AttnBwdParams;

// Every launcher has this shape: returns 0 on success, else a nonzero code, and writes a
// NUL-terminated message naming the argument and value into err (errlen bytes).
//   int attn_<algo>_<direction>(const Attn{Fwd,Bwd}Params* p, void* stream, char* err, int errlen);
// Codes:
enum AttnStatus {
    ATTN_OK = 0,
    ATTN_ERR_UNSUPPORTED = 1,  // head dim, dtype, feature the kernel does not implement
    ATTN_ERR_INVALID = 2,      // bad shapes / strides / pointers
    ATTN_ERR_CUDA = 3,         // a CUDA runtime error (message carries cudaGetErrorString)
};

#ifdef __cplusplus
}
#endif
