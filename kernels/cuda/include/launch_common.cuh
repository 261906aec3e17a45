// Host-side helpers shared by every launcher: error messages, parameter validation, kernel launch
// checks, the shared-memory opt-in, the device's properties, the launch's stream and scratch (attn_params.h
// AttnLaunch). A launcher returns an AttnStatus and writes a message that names the argument and value (fail()).
//
// A call's host time is part of every training step that launches it, so what does not change between calls is
// done once: the device's properties are read once per device (device_info) and a kernel's shared-memory opt-in is
// set once per kernel, device and size (smem_opt_in); nothing here synchronises, and with the caller's workspace
// nothing allocates (LaunchScratch), so a call is stream-ordered work only and a CUDA graph can capture it.
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

#include <atomic>
#include <mutex>

#include "attn_params.h"

namespace attn {

// How the score scale reaches the softmax, chosen per call by the launcher from the parameters (FA2, split-KV and
// FA3 alike): folded into the exponent's FFMA (scale > 0, no softcap), or applied to every score before it (a
// softcap: tanh needs the scores in natural units; or a scale <= 0, whose sign would turn the running maximum into
// a minimum).
enum class ScoreScale { kFolded, kPrescaled };

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

// The head dims a launcher compiles: nullptr where it has a build for (d, dv), else the builds it has in words (for
// validate_fwd's ATTN_ERR_UNSUPPORTED message).
using HeadDimRule = const char* (*)(int d, int dv);
inline const char* head_dims_64_128_256(int d, int dv) {
    return d == dv && (d == 64 || d == 128 || d == 256) ? nullptr : "d = dv in {64, 128, 256}";
}

// Checks shared by the forward launchers. `name` prefixes the message. Returns ATTN_OK or a code.
// paged_ok: the launcher reads K/V through a block table (attn_params.h v3); the others answer
// ATTN_ERR_UNSUPPORTED naming block_table, so a paged cache is never misread as a dense one.
// sinks_ok: the launcher folds attention sinks into its softmax (attn_params.h v4, SEMANTICS.md §18); the
// others answer ATTN_ERR_UNSUPPORTED naming sinks, so a sink is never silently dropped.
// head_dims: the (d, dv) the launcher compiles.
inline int validate_fwd(const AttnFwdParams* p, const char* name, char* err, int errlen, bool paged_ok = false,
                        bool sinks_ok = false, HeadDimRule head_dims = head_dims_64_128_256) {
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
    if (const char* built = head_dims(p->head_dim, p->head_dim_v))
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d, head_dim_v=%d: compiled for %s only", name,
                    p->head_dim, p->head_dim_v, built);
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
// head_dims: the (d, dv) the launcher compiles.
inline int check_fwd_params(const AttnFwdParams* p, const char* who, char* err, int errlen,
                                   bool sinks_ok = false, HeadDimRule head_dims = head_dims_64_128_256) {
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
    if (const char* built = head_dims(p->head_dim, p->head_dim_v))
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: head_dim=%d, head_dim_v=%d unsupported: kernels are "
                    "instantiated for %s only", who, p->head_dim, p->head_dim_v, built);
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
                                   bool sinks_ok = false, HeadDimRule head_dims = head_dims_64_128_256) {
    if (!p) return fail(err, errlen, ATTN_ERR_INVALID, "%s: params is NULL", who);
    int rc = check_fwd_params(&p->fwd, who, err, errlen, sinks_ok, head_dims);
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
                    "%s: GQA (heads_q=%d, heads_kv=%d) needs dk_accum [B, Hq, Lk, d] and dv_accum [B, Hq, Lk, dv] fp32; got %p, %p",
                    who, p->fwd.heads_q, p->fwd.heads_kv, (void*)p->dk_accum, (void*)p->dv_accum);
    return ATTN_OK;
}

// The current device's properties, read once per device: SM count, compute capability major, the shared memory a
// block may opt in to. nullptr when the device cannot be read.
struct DeviceInfo {
    int sms, major, smem_optin;
};
inline constexpr int kMaxDevices = 64;

inline const DeviceInfo* device_info() {
    static DeviceInfo infos[kMaxDevices];
    static std::atomic<bool> ready[kMaxDevices];
    static std::mutex lock;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return nullptr;
    if (!ready[dev].load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> guard(lock);
        if (!ready[dev].load(std::memory_order_relaxed)) {
            DeviceInfo d{0, 0, 0};
            if (cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
                cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
                cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
                return nullptr;
            infos[dev] = d;
            ready[dev].store(true, std::memory_order_release);
        }
    }
    return &infos[dev];
}

// Raises kernel `fn`'s dynamic shared-memory limit to `bytes` on the current device, once per kernel, device and size
// (the runtime keeps the attribute; setting it again each call costs host time for nothing).
inline cudaError_t smem_opt_in(const void* fn, int bytes) {
    struct Entry {
        const void* fn;
        int dev, bytes;
    };
    static Entry done[512];
    static int count = 0;
    static std::mutex lock;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    std::lock_guard<std::mutex> guard(lock);
    for (int i = 0; i < count; ++i)
        if (done[i].fn == fn && done[i].dev == dev && done[i].bytes == bytes) return cudaSuccess;
    e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess && count < 512) done[count++] = Entry{fn, dev, bytes};
    return e;
}

// How many blocks of kernel `fn` (`threads` threads, `smem` bytes of dynamic shared memory, opted in first) fit on one
// SM of the current device, at least 1; asked of the runtime once per kernel, device and shape.
inline int resident_blocks(const void* fn, int threads, int smem) {
    struct Entry {
        const void* fn;
        int dev, threads, smem, blocks;
    };
    static Entry done[256];
    static int count = 0;
    static std::mutex lock;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 1;
    std::lock_guard<std::mutex> guard(lock);
    for (int i = 0; i < count; ++i)
        if (done[i].fn == fn && done[i].dev == dev && done[i].threads == threads && done[i].smem == smem)
            return done[i].blocks;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, threads, static_cast<size_t>(smem)) != cudaSuccess ||
        n < 1) {
        cudaGetLastError();  // clear: the launch reports real errors
        return 1;
    }
    if (count < 256) done[count++] = Entry{fn, dev, threads, smem, n};
    return n;
}

// smem_opt_in for a launcher: ATTN_OK, or ATTN_ERR_CUDA with the message prefixed `name`.
inline int kernel_smem_opt_in(const void* fn, unsigned bytes, const char* name, char* err, int errlen) {
    const cudaError_t e = smem_opt_in(fn, static_cast<int>(bytes));
    return e == cudaSuccess ? ATTN_OK
                            : fail(err, errlen, ATTN_ERR_CUDA, "%s: cudaFuncSetAttribute(%u bytes): %s", name, bytes,
                                   cudaGetErrorString(e));
}

// Raise a kernel's dynamic shared-memory limit (needed above 48 KB) and check it fits the device.
template <typename K>
inline int set_smem(K kernel, size_t bytes, const char* who, char* err, int errlen) {
    const DeviceInfo* d = device_info();
    if (d == nullptr) return fail(err, errlen, ATTN_ERR_CUDA, "%s: the current device's properties cannot be read", who);
    if ((size_t)d->smem_optin < bytes)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED, "%s: needs %zu bytes of shared memory, the device allows %d",
                    who, bytes, d->smem_optin);
    return cuda_status(smem_opt_in(reinterpret_cast<const void*>(kernel), (int)bytes), who, err, errlen);
}

inline int check_launch(const char* name, char* err, int errlen) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return fail(err, errlen, ATTN_ERR_CUDA, "%s: kernel launch failed: %s (%s)", name, cudaGetErrorName(e),
                    cudaGetErrorString(e));
    return ATTN_OK;
}

// Stream-ordered scratch of a launch without a workspace (the FA3 forward's persistent tile counter, the
// deterministic FA3 backward's dQ semaphores, FA1's O / m / l partials, split-KV's partials when the caller passes
// none): allocated from a memory pool of this library's own per device, which keeps up to kScratchKeepBytes of freed
// memory between launches. The device's default pool (plain cudaMallocAsync) has a release threshold of 0: it hands
// freed memory back at every synchronization, and the next launch then maps memory again on the host before it can
// enqueue its kernel (H200, the persistent FA3 forward timed one synchronized call at a time: 0.3-7% of its time).
inline constexpr uint64_t kScratchKeepBytes = 256ull << 20;

inline cudaError_t scratch_pool(cudaMemPool_t* out) {
    static std::mutex lock;
    static cudaMemPool_t pools[kMaxDevices] = {};
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
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

// The stream of a launch (attn_params.h AttnLaunch; NULL: the legacy default stream).
inline cudaStream_t launch_stream(const AttnLaunch* launch) {
    return launch != nullptr ? static_cast<cudaStream_t>(launch->stream) : nullptr;
}

// Workspace pieces are aligned to this many bytes (attn_params.h: the workspace itself is).
inline constexpr int64_t kWorkspaceAlign = 256;
inline constexpr int64_t workspace_piece(int64_t bytes) {
    return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// The scratch of one launch: pieces of the caller's workspace when it gave one (the launch then allocates nothing),
// else stream-ordered allocations from scratch_pool, freed on the launch's stream by release() (or the destructor).
// A launcher takes its pieces in a fixed order, and its attn_<launcher>_workspace function sums workspace_piece() of
// the same sizes.
class LaunchScratch {
  public:
    explicit LaunchScratch(const AttnLaunch* launch)
        : stream_(launch_stream(launch)),
          ws_(launch != nullptr ? static_cast<unsigned char*>(launch->workspace) : nullptr),
          ws_bytes_(ws_ != nullptr ? launch->workspace_bytes : 0) {}
    LaunchScratch(const LaunchScratch&) = delete;
    LaunchScratch& operator=(const LaunchScratch&) = delete;
    ~LaunchScratch() { release(); }

    cudaStream_t stream() const { return stream_; }

    // `bytes` of scratch into *ptr; ATTN_OK, or an AttnStatus with the message (prefixed `who`) in err.
    int take(void** ptr, int64_t bytes, const char* who, char* err, int errlen) {
        const int64_t piece = workspace_piece(bytes > 0 ? bytes : 1);
        if (ws_ != nullptr) {
            if (used_ + piece > ws_bytes_)
                return fail(err, errlen, ATTN_ERR_INVALID,
                            "%s: workspace_bytes=%lld is too small: this launch needs at least %lld (its _workspace "
                            "function gives the size)", who, static_cast<long long>(ws_bytes_),
                            static_cast<long long>(used_ + piece));
            *ptr = ws_ + used_;
            used_ += piece;
            return ATTN_OK;
        }
        if (owned_count_ == kMaxOwned)
            return fail(err, errlen, ATTN_ERR_INVALID, "%s: more than %d scratch pieces (a launcher bug)", who,
                        kMaxOwned);
        const cudaError_t e = scratch_alloc(ptr, static_cast<size_t>(piece), stream_);
        if (e != cudaSuccess) return cuda_status(e, who, err, errlen);
        owned_[owned_count_++] = *ptr;
        return ATTN_OK;
    }

    // Frees the pieces allocated from the pool (none with a workspace), stream-ordered; the first error.
    cudaError_t release() {
        cudaError_t first = cudaSuccess;
        for (int i = 0; i < owned_count_; ++i) {
            const cudaError_t e = cudaFreeAsync(owned_[i], stream_);
            if (first == cudaSuccess) first = e;
        }
        owned_count_ = 0;
        return first;
    }

  private:
    static constexpr int kMaxOwned = 4;
    cudaStream_t stream_;
    unsigned char* ws_;
    int64_t ws_bytes_;
    int64_t used_ = 0;
    void* owned_[kMaxOwned] = {};
    int owned_count_ = 0;
};

// The current device's SM count (0 when it cannot be read) and, into *major, its compute capability major.
inline int device_sms(int* major) {
    const DeviceInfo* d = device_info();
    *major = d != nullptr ? d->major : 0;
    return d != nullptr ? d->sms : 0;
}

// The Hopper kernels' device check: ATTN_OK on an sm_90 device (*sms: its SM count, when sms is given), else
// ATTN_ERR_UNSUPPORTED naming the device's compute capability.
inline int require_sm90(const char* name, char* err, int errlen, int* sms = nullptr) {
    int major = 0;
    const int n = device_sms(&major);
    if (sms != nullptr) *sms = n;
    if (major != 9)
        return fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                    "%s: device compute capability %d.x: this kernel is built for sm_90a (Hopper) only", name, major);
    return ATTN_OK;
}

// Before a persistent launch (hopper/scheduler.cuh): caps *grid (the work tiles) at `sms` CTAs, one per SM, and takes
// the work-tile counter they claim indices from, an int zeroed on the launch's stream.
inline int persistent_setup(int* grid, int sms, int** counter, LaunchScratch& scratch, const char* who, char* err,
                            int errlen) {
    if (sms > 0 && sms < *grid) *grid = sms;
    const int rc = scratch.take(reinterpret_cast<void**>(counter), sizeof(int), who, err, errlen);
    if (rc != ATTN_OK) return rc;
    return cuda_status(cudaMemsetAsync(*counter, 0, sizeof(int), scratch.stream()), who, err, errlen);
}

}  // namespace attn
