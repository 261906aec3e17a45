// Host-side helpers shared by every launcher: error messages, parameter validation, kernel launch
// checks. A launcher returns an AttnStatus and writes a message that names the argument and value.
#pragma once
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>

#include "attn_params.h"

namespace attn {

inline int fail(char* err, int errlen, int code, const char* fmt, ...) {
    if (err != nullptr && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, static_cast<size_t>(errlen), fmt, ap);
        va_end(ap);
    }
    return code;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Checks shared by the forward launchers. `name` prefixes the message. Returns ATTN_OK or a code.
// paged_ok: the launcher reads K/V through a block table (attn_params.h v3); the others answer
// ATTN_ERR_UNSUPPORTED naming block_table, so a paged cache is never misread as a dense one.
// sinks_ok: the launcher folds attention sinks into its softmax (attn_params.h v4, SEMANTICS.md §18); the
// others answer ATTN_ERR_UNSUPPORTED naming sinks, so a sink is never silently dropped.
inline int validate_fwd(const AttnFwdParams* p, const char* name, char* err, int errlen, bool paged_ok = false,
                        bool sinks_ok = false) {
    if (p == nullptr) return fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", name);
    if (p->sinks != nullptr && !sinks_ok)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                    "%s: sinks=%p: attention sinks are not supported by this launcher (attn_fa2_fwd and "
                    "attn_splitkv_fwd fold them in)",
                    name, static_cast<const void*>(p->sinks));
    if (p->block_table != nullptr) {
        if (!paged_ok)
            return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                        "%s: block_table=%p: paged K/V is not supported by this launcher (only attn_splitkv_fwd "
                        "reads a block table)",
                        name, static_cast<const void*>(p->block_table));
        if (p->page_size <= 0)
            return fail(err, errlen, ATTN_ERR_INVALID, "%s: page_size=%d: must be > 0 when block_table is given", name,
                        p->page_size);
        if (p->block_table_batch_stride < 0)
            return fail(err, errlen, ATTN_ERR_INVALID, "%s: block_table_batch_stride=%lld: must be >= 0", name,
                        static_cast<long long>(p->block_table_batch_stride));
    }
    if (p->dtype != ATTN_FP16 && p->dtype != ATTN_BF16)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: dtype=%d: only fp16 (0) and bf16 (1)", name, p->dtype);
    if (p->head_dim != p->head_dim_v)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d != head_dim_v=%d: only equal head dims", name,
                    p->head_dim, p->head_dim_v);
    if (p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d: only 64, 128 and 256 are compiled", name,
                    p->head_dim);
    if (p->batch < 0 || p->heads_q <= 0 || p->heads_kv <= 0 || p->seqlen_q < 0 || p->seqlen_k < 0)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: batch=%d heads_q=%d heads_kv=%d seqlen_q=%d seqlen_k=%d", name,
                    p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k);
    if (p->heads_q % p->heads_kv != 0)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: heads_q=%d is not a multiple of heads_kv=%d", name, p->heads_q,
                    p->heads_kv);
    if (p->batch > 65535 || p->heads_q > 65535)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: batch=%d / heads_q=%d exceed the grid limit 65535", name,
                    p->batch, p->heads_q);
    if (p->window_left < -1 || p->window_right < -1)
        return fail(err, errlen, ATTN_ERR_INVALID,
                    "%s: window=(%d, %d): -1 means unbounded, other negative values are not allowed", name,
                    p->window_left, p->window_right);
    if (!(p->softcap >= 0.0f))
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: softcap=%g must be >= 0 (0 = off)", name, p->softcap);
    if (p->batch == 0 || p->seqlen_q == 0) return ATTN_OK;  // nothing to compute; pointers unchecked
    const void* ptrs[4] = {p->q, p->k, p->v, p->o};
    const char* names[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; ++i) {
        if (ptrs[i] == nullptr && !(i < 3 && p->seqlen_k == 0 && i > 0))
            return fail(err, errlen, ATTN_ERR_INVALID, "%s: %s is NULL", name, names[i]);
        if (!aligned16(ptrs[i]))
            return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: %s=%p is not 16-byte aligned (cp.async / 16-byte stores)",
                        name, names[i], ptrs[i]);
    }
    const int64_t strides[12] = {p->q_batch_stride, p->q_head_stride, p->q_row_stride, p->k_batch_stride,
                                 p->k_head_stride,  p->k_row_stride,  p->v_batch_stride, p->v_head_stride,
                                 p->v_row_stride,   p->o_batch_stride, p->o_head_stride, p->o_row_stride};
    const char* snames[12] = {"q_batch_stride", "q_head_stride", "q_row_stride", "k_batch_stride",
                              "k_head_stride",  "k_row_stride",  "v_batch_stride", "v_head_stride",
                              "v_row_stride",   "o_batch_stride", "o_head_stride", "o_row_stride"};
    for (int i = 0; i < 12; ++i)
        if (strides[i] % 8 != 0 || strides[i] < 0)
            return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                        "%s: %s=%lld: element strides must be non-negative multiples of 8 (16-byte rows)", name,
                        snames[i], static_cast<long long>(strides[i]));
    return ATTN_OK;
}

inline int check_launch(const char* name, char* err, int errlen) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return fail(err, errlen, ATTN_ERR_CUDA, "%s: kernel launch failed: %s (%s)", name, cudaGetErrorName(e),
                    cudaGetErrorString(e));
    return ATTN_OK;
}

}  // namespace attn
