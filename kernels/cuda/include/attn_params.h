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
//
// ABI versions (ATTN_PARAMS_VERSION is the current one; a launcher or mirror built against an older
// version must be rebuilt when a field it embeds moved). Header-only changes that move no field and
// change no meaning (comments, the shared kernel headers behind the launchers) keep the version.
//   v5 (this version): how a launcher runs, and the lab apart. No field of AttnFwdParams / AttnBwdParams /
//     AttnFp8FwdParams moved or changed meaning. Every launcher takes `const AttnLaunch* launch` (below: the stream,
//     and a workspace the caller may preallocate) where it took `void* stream`, so a call with its workspace given
//     allocates nothing and does only stream-ordered work on launch->stream (a CUDA graph can capture it); the
//     launchers that need scratch say how much through attn_<launcher>_workspace. The ablation and tuning builds of
//     the FA3 forward (attn_fa3_fwd_variant, AttnFa3Variant) left this ABI for the lab build of the library
//     (kernels/cuda/lab/attn_lab.h), and no launcher reads an environment variable: what runs is the parameters'.
//     attn_params_layout appends AttnLaunch's layout.
//   v4: attention sinks (oracles/SEMANTICS.md §18). `sinks` appended at the END of
//     AttnFwdParams, `dlse` and `dsinks` at the END of AttnBwdParams. No earlier field of AttnFwdParams
//     moved; every AttnBwdParams field after `fwd` moved again (sizeof(AttnFwdParams) grew): rebuild
//     everything that embeds the structs. Zero-initialised (NULL) means "no sink" / "no LSE cotangent",
//     exactly the v3 behaviour. attn_fa2_fwd, attn_splitkv_fwd and attn_fa2_bwd read them; every other
//     launcher answers ATTN_ERR_UNSUPPORTED naming sinks / dlse / dsinks when one is not NULL.
//   v3: three fields appended at the END of AttnFwdParams for paged K/V
//     (block_table, block_table_batch_stride, page_size; oracles/SEMANTICS.md §16). No earlier field
//     moved, but sizeof(AttnFwdParams) grew, so every AttnBwdParams field after `fwd` moved: rebuild
//     everything that embeds the structs. A zero-initialised struct (block_table = NULL) means "not
//     paged", exactly the v2 behaviour. Only attn_splitkv_fwd reads a block table; every other
//     launcher answers ATTN_ERR_UNSUPPORTED naming block_table when it is not NULL.
//   v2: no field of AttnFwdParams / AttnBwdParams moved or changed meaning. Added:
//     ATTN_PARAMS_VERSION; the rule that window values other than -1 must be >= 0 (launchers answer
//     ATTN_ERR_INVALID otherwise, so no negative window is ever silently unbounded, the
//     flash-attention #1116 class); the split-KV helpers attn_splitkv_num_splits() and the statement that o_partial /
//     lse_partial may be NULL (the launcher then allocates stream-ordered scratch itself);
//     attn_params_layout() so tests can compare the ctypes mirror against the compiled layout.
//   v1: the first layout, AttnFwdParams up to `lse_partial` and AttnBwdParams up to `dv_accum`
//     (no ATTN_PARAMS_VERSION macro).
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_PARAMS_VERSION 5

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
    int32_t window_left;        // -1 = unbounded; else >= 0 (other negatives are ATTN_ERR_INVALID)
    int32_t window_right;       // -1 = unbounded; else >= 0 (causal: right = min(right, 0), i.e. 0)
    int32_t dtype;              // AttnDtype

    // Split-KV (Flash-Decoding), read by attn_splitkv_fwd only. num_splits = 0: the launcher picks
    // (attn_splitkv_num_splits tells the caller how many, to size its buffers); >= 1: that many
    // (1 = one split, still through the partial + combine path). o_partial / lse_partial: caller-owned
    // scratch of at least the sizes below, or both NULL: the launcher then takes them from its workspace
    // (AttnLaunch; attn_splitkv_fwd_workspace says how much) or allocates them stream-ordered.
    int32_t num_splits;
    float* o_partial;    // [S, B, Hq, Lq, dv] fp32
    float* lse_partial;  // [S, B, Hq, Lq] fp32

    // Paged K/V (v3; read by attn_splitkv_fwd only, other launchers reject block_table != NULL).
    // With block_table != NULL, k and v point at page pools [num_pages, Hkv, page_size, d] and
    // k_batch_stride / v_batch_stride are PAGE strides (elements between pages); head and row strides
    // as usual. Logical key j of batch b is at
    //     k + block_table[b * block_table_batch_stride + j / page_size] * k_batch_stride
    //       + h * k_head_stride + (j % page_size) * k_row_stride      (same for v).
    // The kernel reads table entries [0, ceil(len_b / page_size)) of batch b only (len_b = the real
    // key length, seqlens_k[b] or seqlen_k) and never a slot j >= len_b. attn_splitkv_fwd needs
    // page_size to be a multiple of its key tile (64 for d = 64 / 128, 32 for d = 256) so that no tile
    // straddles two pages; otherwise ATTN_ERR_UNSUPPORTED naming page_size and the tile.
    const int32_t* block_table;         // int32 device array; NULL = K/V not paged
    int64_t block_table_batch_stride;   // elements between the table rows of consecutive batch entries
    int32_t page_size;                  // keys per page (> 0 when block_table != NULL)

    // Attention sinks (v4; SEMANTICS.md §18): fp32 device array [heads_q], one logit per query head in the
    // units of the final scores (after scale and softcap), or NULL = no sink. The sink joins every real
    // row's softmax denominator and carries no value: the LSE written includes it, and a row with no
    // visible key gets O = 0, LSE = sinks[h]. -inf = no sink for that head. Read by attn_fa2_fwd,
    // attn_splitkv_fwd (once, in the combine) and attn_fa2_bwd (the LSE given must include the sink).
    const float* sinks;
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
    // Scratch the caller allocates, contents need not be initialised: fp32 dQ accumulator
    // [B, Hq, Lq, d] (the launchers' preprocess kernel zeroes it on the stream before the atomics),
    // D = rowsum(dO*O) [B, Hq, Lq] (written by the preprocess), and fp32 dK/dV accumulators
    // [B, Hq, Lk, d|dv] for the per-q-head pass before the GQA reduction (fully overwritten; only read
    // when Hq != Hkv). Kernels that do not need one ignore it.
    float* dq_accum;
    float* d_rowsum;
    float* dk_accum;
    float* dv_accum;
    // v4, read by attn_fa2_bwd only (other backward launchers reject non-NULL values):
    // dlse: the LSE cotangent, fp32 [B, Hq, Lq] with the strides of fwd.lse (row stride 1), or NULL = 0;
    //   the loss is sum dout . out + sum dlse * LSE, so D_i becomes D_i - dlse_i (SEMANTICS.md §13, §18).
    // dsinks: fp32 [heads_q], written (not accumulated) when fwd.sinks != NULL: d sink_h = sum over b and
    //   real rows i of exp(sink_h - LSE_i) (dlse_i - D_i), a deterministic reduction. Required when
    //   fwd.sinks != NULL, ignored otherwise.
    const float* dlse;
    float* dsinks;
} AttnBwdParams;

// FP8 forward (FA3, SEMANTICS.md §10), its own versioned struct beside AttnFwdParams (whose layout it embeds
// unchanged). ATTN_FP8_PARAMS_VERSION 1: the first layout; 2: + v_layout, vt_keys.
//   fwd: as for attn_fa3_fwd, except that q, k, v hold FP8 codes (one byte per element, so their element
//     strides are byte strides) in `format`, o is bf16 and fwd.dtype must be ATTN_BF16 (the output dtype).
//   q_descale, k_descale, v_descale: fp32 device arrays, contiguous, by `granularity`:
//     ATTN_FP8_PER_TENSOR  one value each;
//     ATTN_FP8_PER_HEAD    (B, Hkv) each: per (batch, kv head), Q's shared by the query heads of the group;
//     ATTN_FP8_PER_TILE    Q (B, Hq, ceil(Lq / tile_q)), K and V (B, Hkv, ceil(Lk / tile_k)), tiles of
//                          tile_q query rows and tile_k keys (attn_fa3_fp8_fwd: tile_q = tile_k = 128).
//   The kernel computes S = scale * dq * dk * (Q8 K8^T), P = 2^((S - m) log2 e + 8) rounded to `format`,
//   O = dv * (P8 V8) / l in bf16, LSE = m + log l - 8 ln 2 (fp32).
//   v_layout (version 2): how fwd.v holds V.
//     ATTN_FP8_V_ROWS    as K: element (b, j, h, c) at fwd.v + b * v_batch_stride + h * v_head_stride +
//                        j * v_row_stride + c; the kernel transposes each key tile in shared memory.
//     ATTN_FP8_V_KMAJOR  Vt, keys contiguous: element (b, h, c, position) at fwd.v + b * v_batch_stride +
//                        h * v_head_stride + c * v_row_stride + position, rows of vt_keys positions (a multiple
//                        of 16, >= seqlen_k), position 16 g + p holding key 16 g + ATTN_FP8_VT_KEY(p) (the order
//                        of the P fragments, kernels/cuda/include/hopper/fp8_layout.cuh); keys at or past a
//                        sequence's length must be zero codes. attn_fp8_pack_vt writes this layout.
#define ATTN_FP8_PARAMS_VERSION 2
#define ATTN_FP8_VT_KEY(p) (2 * ((p) >> 2) + ((p) & 1) + 8 * (((p) >> 1) & 1))

enum AttnFp8Format { ATTN_FP8_E4M3FN = 0, ATTN_FP8_E5M2 = 1 };  // the oracle's names (oracles/fp8.py)
enum AttnFp8Granularity { ATTN_FP8_PER_TENSOR = 0, ATTN_FP8_PER_HEAD = 1, ATTN_FP8_PER_TILE = 2 };
enum AttnFp8VLayout { ATTN_FP8_V_ROWS = 0, ATTN_FP8_V_KMAJOR = 1 };

typedef struct AttnFp8FwdParams {
    AttnFwdParams fwd;
    int32_t format;       // AttnFp8Format (q, k, v and the rounded P)
    int32_t granularity;  // AttnFp8Granularity
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;
    int32_t tile_q, tile_k;  // per-tile scaling blocks (read with ATTN_FP8_PER_TILE only)
    int32_t v_layout;        // AttnFp8VLayout
    int32_t vt_keys;         // ATTN_FP8_V_KMAJOR: positions per Vt row (ignored otherwise)
} AttnFp8FwdParams;

// attn_fp8_pack_vt (kernels/cuda/fa3_fp8_fwd.cu): FP8 codes of V as rows (ATTN_FP8_V_ROWS addressing, head dim
// contiguous) -> Vt in the ATTN_FP8_V_KMAJOR layout, positions past the keys and keys at or past seqlens_k[b]
// written as zero codes. One pass over V (the quantizer's output) so that the forward skips its in-kernel transpose.
typedef struct AttnFp8PackVtParams {
    const void* v;  // FP8 codes: (b, j, h, c) at v + b * v_batch_stride + h * v_head_stride + j * v_row_stride + c
    void* vt;       // FP8 codes: (b, h, c, position) at vt + b * vt_batch_stride + h * vt_head_stride +
                    //   c * vt_row_stride + position; must not overlap v
    int64_t v_batch_stride, v_head_stride, v_row_stride;
    int64_t vt_batch_stride, vt_head_stride, vt_row_stride;
    const int32_t* seqlens_k;  // device [batch] or NULL (every sequence seqlen keys long)
    int32_t batch, heads, seqlen, head_dim;
    int32_t vt_keys;  // positions per Vt row: a multiple of 16, >= seqlen
    int32_t reserved;
} AttnFp8PackVtParams;

// How a launcher runs (v5). launch may be NULL: the legacy default stream, no workspace.
//   stream: the cudaStream_t every piece of the launch is enqueued on.
//   workspace, workspace_bytes: device memory the launcher may use as scratch, at least the bytes the launcher's
//     attn_<launcher>_workspace function returns for the same parameters (launchers without one need none), aligned
//     to 256 bytes; its contents need not be initialised, and no other work may use it until the launch's work on
//     the stream is done. Given that, a launcher allocates nothing and its whole call is stream-ordered work on
//     `stream`: no synchronisation, no allocation, no copy between host and device, so a CUDA graph can capture it.
//     NULL: the launcher allocates the scratch stream-ordered itself (a pool of this library's, launch_common.cuh) and
//     frees it on the stream. Given but smaller than needed: ATTN_ERR_INVALID naming both sizes.
typedef struct AttnLaunch {
    void* stream;
    void* workspace;
    int64_t workspace_bytes;
} AttnLaunch;

// Every launcher has this shape: returns 0 on success, else a nonzero code, and writes a
// NUL-terminated message naming the argument and value into err (errlen bytes).
//   int attn_<algo>_<direction>(const Attn{Fwd,Bwd}Params* p, const AttnLaunch* launch, char* err, int errlen);
// The scratch a launcher needs for p, in bytes (0: none), or -1 when p is invalid (the launcher's message says why):
//   int64_t attn_<algo>_<direction>_workspace(const Attn{Fwd,Bwd}Params* p);
// Codes:
enum AttnStatus {
    ATTN_OK = 0,
    ATTN_ERR_UNSUPPORTED = 1,  // head dim, dtype, feature the kernel does not implement
    ATTN_ERR_INVALID = 2,      // bad shapes / strides / pointers
    ATTN_ERR_CUDA = 3,         // a CUDA runtime error (message carries cudaGetErrorString)
};

// Launchers (one shared library, libattn_kernels.so), with the source that defines each.
int attn_fa1_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen);      // kernels/cuda/fa1.cu
int attn_fa1_bwd(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen);      // kernels/cuda/fa1.cu
int attn_fa2_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen);      // fa2_fwd.cu
int attn_fa2_bwd(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen);      // fa2_bwd.cu
int attn_splitkv_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen);  // splitkv.cu
int64_t attn_fa1_fwd_workspace(const AttnFwdParams* p);      // O / m / l partials of its row blocks
int64_t attn_splitkv_fwd_workspace(const AttnFwdParams* p);  // the partials, where o_partial / lse_partial are NULL

// FlashAttention-3 forward for sm_90a (kernels/cuda/fa3_fwd.cu; ATTN_ERR_UNSUPPORTED on other devices and for strides
// TMA cannot express, naming the argument): one build per (head_dim, head_dim_v) and dtype, head_dim = head_dim_v in
// {64, 96, 128, 192, 256} and (192, 128) (include/hopper/fwd_defaults.cuh says which and why); its workspace holds the
// work-tile counter of the persistent builds.
int attn_fa3_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen);
int64_t attn_fa3_fwd_workspace(const AttnFwdParams* p);
// FlashAttention-3 backward for sm_90a (kernels/cuda/fa3_bwd.cu): fp16 / bf16, head_dim = head_dim_v in {64, 96, 128,
// 192, 256} and (head_dim, head_dim_v) = (192, 128) (others: ATTN_ERR_UNSUPPORTED), the scratch of attn_fa2_bwd, dlse and sinks as attn_fa2_bwd. attn_fa3_bwd adds the dQ
// partials with atomics in any order; attn_fa3_bwd_deterministic adds them in a fixed order (bit-identical
// results run to run), with a semaphore per query tile in its workspace.
int attn_fa3_bwd(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen);
int attn_fa3_bwd_deterministic(const AttnBwdParams* p, const AttnLaunch* launch, char* err, int errlen);
int64_t attn_fa3_bwd_deterministic_workspace(const AttnBwdParams* p);

// FA3 FP8 forward for sm_90a (kernels/cuda/fa3_fp8_fwd.cu): e4m3 / e5m2 codes, head dims 64, 96, 128, 192, 256, bf16
// output; ATTN_ERR_UNSUPPORTED on other devices and for anything else, naming it. attn_fp8_params_layout writes up to n
// values: [ATTN_FP8_PARAMS_VERSION, sizeof(AttnFp8FwdParams)] and the byte offset of every field in declaration
// order (the layout of `fwd` itself is attn_params_layout's), then sizeof(AttnFp8PackVtParams) and the offset of
// each of its fields; returns how many it wrote.
int attn_fa3_fp8_fwd(const AttnFp8FwdParams* p, const AttnLaunch* launch, char* err, int errlen);
int64_t attn_fa3_fp8_fwd_workspace(const AttnFp8FwdParams* p);
// The key tile (keys per block of the online softmax) of the build attn_fa3_fp8_fwd runs for p, into *key_tile;
// validates p as the launcher does (no device needed).
int attn_fa3_fp8_key_tile(const AttnFp8FwdParams* p, int* key_tile, char* err, int errlen);
int attn_fp8_pack_vt(const AttnFp8PackVtParams* p, const AttnLaunch* launch, char* err, int errlen);
int attn_fp8_params_layout(int64_t* out, int n);

// Split-KV helpers (kernels/cuda/splitkv.cu). attn_splitkv_num_splits returns the number of
// splits attn_splitkv_fwd uses for p (p->num_splits when >= 1, else its own choice for a device with
// num_sms multiprocessors; num_sms <= 0 = the current device's), or -1 when p is invalid.
int attn_splitkv_num_splits(const AttnFwdParams* p, int num_sms);

// Layout self-description (kernels/cuda/splitkv.cu): writes up to n int64 values, namely
// [ATTN_PARAMS_VERSION, sizeof(AttnFwdParams), sizeof(AttnBwdParams)] followed by the byte offset of
// every field of AttnFwdParams then AttnBwdParams in declaration order, then sizeof(AttnLaunch) and the offset of
// each of its fields; returns how many it has.
int attn_params_layout(int64_t* out, int n);

#ifdef __cplusplus
}
#endif
