// Host-side helpers shared by every launcher: error messages, parameter validation, kernel launch
// checks, the shared-memory opt-in, stream-ordered scratch. A launcher returns an AttnStatus and writes
// a message that names the argument and value (fail()).
//
// Two validators, because the kernels behind them accept different inputs:
//   validate_fwd      attn_fa2_fwd, attn_splitkv_fwd, attn_fa3_fwd: the cp.async / 16-byte-store
//                     kernels, so it also requires 16-byte aligned q, k, v, o and element strides that
//                     are multiples of 8;
//   check_fwd_params  attn_fa1_fwd, attn_fa1_bwd, attn_fa2_bwd (through check_bwd_params): the FA1
//                     kernels read element by element and attn_fa2_bwd falls back to them for unaligned
//                     tensors, so no alignment rule; it rejects num_splits > 1 instead.
// Each rule they share (params NULL, sinks, block_table, dtype, head dims, sizes, GQA ratio, grid
// limit, window >= -1, softcap >= 0) answers the same code in both; the messages differ in wording.
#pragma once
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>

#include <mutex>

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

inline int cuda_status(cudaError_t e, const char* where, char* err, int errlen) {
    if (e == cudaSuccess) return ATTN_OK;
    return fail(err, errlen, ATTN_ERR_CUDA, "%s: %s (%s)", where, cudaGetErrorString(e), cudaGetErrorName(e));
}

// Checks common to the forward and backward of FA1 and the FA2 backward.
// sinks_ok: the caller handles attention sinks (attn_params.h v4); otherwise sinks != NULL is
// ATTN_ERR_UNSUPPORTED naming sinks.
inline int check_fwd_params(const AttnFwdParams* p, const char* who, char* err, int errlen,
                                   bool sinks_ok = false) {
    if (!p) return fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", who);
    if (p->sinks && !sinks_ok)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                    "%s: sinks=%p: attention sinks are not supported (attn_fa2_fwd, attn_splitkv_fwd and "
                    "attn_fa2_bwd handle them)",
                    who, (const void*)p->sinks);
    if (p->block_table)  // paged K/V (attn_params.h v3): only attn_splitkv_fwd reads a block table
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                    "%s: block_table=%p: paged K/V is not supported (only attn_splitkv_fwd reads a block table)", who,
                    (const void*)p->block_table);
    if (p->dtype != ATTN_FP16 && p->dtype != ATTN_BF16)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: dtype=%d unsupported (0=fp16, 1=bf16)", who, p->dtype);
    if (p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                    "%s: head_dim=%d unsupported: kernels are instantiated for 64, 128, 256 only", who, p->head_dim);
    if (p->head_dim_v != p->head_dim)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim_v=%d != head_dim=%d unsupported", who,
                    p->head_dim_v, p->head_dim);
    if (p->batch < 0 || p->seqlen_q < 0 || p->seqlen_k < 0)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: negative size batch=%d seqlen_q=%d seqlen_k=%d", who, p->batch,
                    p->seqlen_q, p->seqlen_k);
    if (p->heads_q <= 0 || p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: heads_q=%d must be a positive multiple of heads_kv=%d", who,
                    p->heads_q, p->heads_kv);
    if (p->window_left < -1 || p->window_right < -1)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: window=(%d, %d): entries must be >= 0 or -1 (unbounded)", who,
                    p->window_left, p->window_right);
    if (!(p->softcap >= 0.f))
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: softcap=%g must be >= 0 (0 = off)", who, (double)p->softcap);
    if (p->num_splits > 1)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: num_splits=%d unsupported (no split-KV here)", who,
                    p->num_splits);
    if (p->batch > 65535 || p->heads_q > 65535)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: batch=%d / heads_q=%d over the grid limit 65535", who,
                    p->batch, p->heads_q);
    // Empty tensors may carry NULL data pointers (torch does): only tensors with elements must be set.
    const bool has_q = p->batch > 0 && p->seqlen_q > 0, has_k = p->batch > 0 && p->seqlen_k > 0;
    if ((has_q && (!p->q || !p->o)) || (has_k && (!p->k || !p->v)))
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: NULL tensor pointer q=%p k=%p v=%p o=%p", who, p->q, p->k, p->v,
                    p->o);
    return ATTN_OK;
}

// sinks_ok: the caller reads fwd.sinks, dlse and dsinks (attn_params.h v4); otherwise any of them
// non-NULL is ATTN_ERR_UNSUPPORTED naming it.
inline int check_bwd_params(const AttnBwdParams* p, const char* who, char* err, int errlen,
                                   bool sinks_ok = false) {
    if (!p) return fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", who);
    int rc = check_fwd_params(&p->fwd, who, err, errlen, sinks_ok);
    if (rc != ATTN_OK) return rc;
    if (!sinks_ok && (p->dlse || p->dsinks))
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                    "%s: dlse=%p dsinks=%p: an LSE cotangent / sink gradient is not supported (attn_fa2_bwd reads them)",
                    who, (const void*)p->dlse, (void*)p->dsinks);
    if (p->fwd.sinks && !p->dsinks && p->fwd.batch > 0)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: fwd.sinks=%p given but dsinks is NULL (fp32 [heads_q] output)",
                    who, (const void*)p->fwd.sinks);
    if (p->fwd.batch == 0) return ATTN_OK;
    if (!p->fwd.lse && p->fwd.seqlen_q > 0)
        return fail(err, errlen, ATTN_ERR_INVALID, "%s: fwd.lse is NULL; the backward recomputes P from the LSE", who);
    if ((p->fwd.seqlen_q > 0 && (!p->dout || !p->dq || !p->dq_accum || !p->d_rowsum)) ||
        (p->fwd.seqlen_k > 0 && (!p->dk || !p->dv)))
        return fail(err, errlen, ATTN_ERR_INVALID,
                    "%s: NULL pointer dout=%p dq=%p dk=%p dv=%p dq_accum=%p d_rowsum=%p", who, p->dout, p->dq, p->dk,
                    p->dv, (void*)p->dq_accum, (void*)p->d_rowsum);
    if (p->fwd.heads_q != p->fwd.heads_kv && p->fwd.seqlen_k > 0 && (!p->dk_accum || !p->dv_accum))
        return fail(err, errlen, ATTN_ERR_INVALID,
                    "%s: GQA (heads_q=%d, heads_kv=%d) needs dk_accum and dv_accum [B, Hq, Lk, d] fp32; got %p, %p",
                    who, p->fwd.heads_q, p->fwd.heads_kv, (void*)p->dk_accum, (void*)p->dv_accum);
    return ATTN_OK;
}

// Raise a kernel's dynamic shared-memory limit (needed above 48 KB) and check it fits the device.
template <typename K>
inline int set_smem(K kernel, size_t bytes, const char* who, char* err, int errlen) {
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if ((size_t)optin < bytes)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: needs %zu bytes of shared memory, device %d allows %d",
                    who, bytes, dev, optin);
    return cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), who, err,
                       errlen);
}

inline int check_launch(const char* name, char* err, int errlen) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return fail(err, errlen, ATTN_ERR_CUDA, "%s: kernel launch failed: %s (%s)", name, cudaGetErrorName(e),
                    cudaGetErrorString(e));
    return ATTN_OK;
}

// Stream-ordered scratch of one launch (the FA3 forward's persistent tile counter, the deterministic FA3 backward's
// dQ semaphores, FA1's O / m / l partials, split-KV's partials when the caller passes none, the FP8 quantizer's amax
// slots): allocated from a memory pool of this library's own per device, which keeps up to kScratchKeepBytes of freed
// memory between launches. The device's default pool (plain cudaMallocAsync) has a release threshold of 0: it hands
// freed memory back at every synchronization, and the next launch then maps memory again on the host before it can
// enqueue its kernel (H200, the persistent FA3 forward timed one synchronized call at a time: 0.3-7% of its time).
inline constexpr uint64_t kScratchKeepBytes = 256ull << 20;

inline cudaError_t scratch_pool(cudaMemPool_t* out) {
    static std::mutex lock;
    static cudaMemPool_t pools[64] = {};
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
    std::lock_guard<std::mutex> guard(lock);
    if (pools[dev] == nullptr) {
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        cudaMemPool_t pool = nullptr;
        e = cudaMemPoolCreate(&pool, &props);
        if (e != cudaSuccess) return e;
        uint64_t keep = kScratchKeepBytes;
        e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        if (e != cudaSuccess) {
            cudaMemPoolDestroy(pool);
            return e;
        }
        pools[dev] = pool;
    }
    *out = pools[dev];
    return cudaSuccess;
}

// `bytes` of scratch for work on stream `s`, from scratch_pool; give it back with cudaFreeAsync on the same stream.
inline cudaError_t scratch_alloc(void** ptr, size_t bytes, cudaStream_t s) {
    cudaMemPool_t pool = nullptr;
    const cudaError_t e = scratch_pool(&pool);
    return e != cudaSuccess ? e : cudaMallocFromPoolAsync(ptr, bytes, pool, s);
}

// The current device's SM count (0 when it cannot be read) and, into *major, its compute capability major.
inline int device_sms(int* major) {
    int dev = 0, sms = 0;
    *major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
}

// Before a persistent launch (hopper/scheduler.cuh): caps *grid (the work tiles) at `sms` CTAs, one per SM, and
// makes the work-tile counter they claim indices from, a zeroed int from the scratch pool on stream `s`. Free it
// with cudaFreeAsync(*counter, s) after the launch.
inline cudaError_t persistent_setup(int* grid, int sms, int** counter, cudaStream_t s) {
    if (sms > 0 && sms < *grid) *grid = sms;
    const cudaError_t e = scratch_alloc(reinterpret_cast<void**>(counter), sizeof(int), s);
    return e != cudaSuccess ? e : cudaMemsetAsync(*counter, 0, sizeof(int), s);
}

}  // namespace attn
