// Split-KV forward for decoding (Flash-Decoding): the keys are cut into num_splits ranges; one CTA
// per (packed GQA query tile, split, batch x KV head) writes its split's O_s = sum p v / l_s and
// LSE_s in fp32, then a combine kernel merges them (Flash-Decoding; SEMANTICS.md §14's merge rule):
//     LSE = max + log sum_s exp(LSE_s - max),  O = sum_s exp(LSE_s - LSE) O_s,
// a split with LSE_s = -inf contributes 0, and rows whose splits are all -inf get O = 0, LSE = -inf.
// Attention sinks (sinks != NULL, attn_params.h v4, SEMANTICS.md §18): the split partials are sink-free
// and the combine adds the sink once, as one more partial (O, LSE) = (0, sink[h]): it joins the max and
// the sum, so a row with no visible key gets O = 0, LSE = sink.
// The query heads of one GQA group share a CTA (packed into M), so K/V are read once per group.
// Paged K/V (block_table != NULL, attn_params.h v3): the same kernel instantiated with kPaged reads each
// key tile through the table; page_size must be a multiple of the key tile (checked below).
#include <cuda_runtime.h>

#include <algorithm>

#include "attn_params.h"
#include "fwd_defaults.cuh"
#include "fwd_kernel.cuh"
#include "launch_common.cuh"

namespace {

constexpr int kMaxSplits = 1024;

int block_n_for(int d) {
    using attn::SplitKvDefault;
    return d == 64    ? SplitKvDefault<64>::block_n
           : d == 128 ? SplitKvDefault<128>::block_n
                      : SplitKvDefault<256>::block_n;
}
int block_m_for(int) { return attn::SplitKvDefault<128>::block_m; }

int num_m_blocks(const AttnFwdParams& p) {
    const int group = p.heads_q / p.heads_kv;
    const long long rows = static_cast<long long>(group) * p.seqlen_q;
    return static_cast<int>((rows + block_m_for(p.head_dim) - 1) / block_m_for(p.head_dim));
}

template <int D, typename Elem>
int resident_ctas_per_sm(const AttnFwdParams& p) {
    using Tr = attn::FwdTraits<D, attn::SplitKvDefault<D>, Elem>;
    const void* kernel = reinterpret_cast<const void*>(attn::fwd_kernel_for<Tr, attn::FwdMode::kSplitKv>(p));
    if (Tr::kSmemBytes > 48 * 1024) attn::smem_opt_in(kernel, Tr::kSmemBytes);
    return attn::resident_blocks(kernel, Tr::kThreads, Tr::kSmemBytes);
}

int resident_ctas(const AttnFwdParams& p) {
    const bool bf = p.dtype == ATTN_BF16;
    switch (p.head_dim) {
        case 64: return bf ? resident_ctas_per_sm<64, __nv_bfloat16>(p) : resident_ctas_per_sm<64, __half>(p);
        case 128: return bf ? resident_ctas_per_sm<128, __nv_bfloat16>(p) : resident_ctas_per_sm<128, __half>(p);
        default: return bf ? resident_ctas_per_sm<256, __nv_bfloat16>(p) : resident_ctas_per_sm<256, __half>(p);
    }
}

// As many splits as fit in ONE wave of resident CTAs (decoding is bound by reading K/V: every SM
// should stream for the whole kernel, and a second, partial wave would leave most SMs idle at the
// end), but no split shorter than two key tiles, and at most kMaxSplits.
int choose_splits(const AttnFwdParams& p, int num_sms) {
    const int n_tiles = (p.seqlen_k + block_n_for(p.head_dim) - 1) / block_n_for(p.head_dim);
    const long long base = static_cast<long long>(p.batch) * p.heads_kv * num_m_blocks(p);
    const long long capacity = static_cast<long long>(num_sms) * resident_ctas(p);
    long long s = capacity / std::max(1LL, base);
    s = std::min<long long>(s, std::max(1, n_tiles / 2));
    s = std::max<long long>(1, std::min<long long>(s, kMaxSplits));
    return static_cast<int>(s);
}

// One CTA per output row (b, h, i). Warp 0 reduces the split LSEs to the row's LSE and turns them
// into weights w_s = exp(LSE_s - LSE) in shared memory (0 for empty splits, all 0 when every split is
// empty); then every thread owns head-dim columns and sums w_s * O_s[c] over the splits, with the
// loads of consecutive splits independent of each other so they overlap (the first version walked
// the splits with a data-dependent branch per load and its latency chain showed in decoding times).
constexpr int kCombineThreads = 128;

template <typename Elem>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const __grid_constant__ AttnFwdParams p,
                                                                  int num_splits) {
    __shared__ float w[kMaxSplits];  // static: num_splits <= kMaxSplits is checked by the launcher
    __shared__ float row_lse;
    const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
    const long long row = blockIdx.x;
    const int i = static_cast<int>(row % p.seqlen_q);
    const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
    const int b = static_cast<int>(row / (static_cast<long long>(p.seqlen_q) * p.heads_q));
    const int lq = p.seqlens_q ? max(0, min(p.seqlens_q[b], p.seqlen_q)) : p.seqlen_q;
    if (i >= lq) return;  // padded rows are not written
    const float* lse_s = p.lse_partial + row;  // split s at lse_s[s * rows]
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        const float sink = p.sinks != nullptr ? p.sinks[h] : -INFINITY;  // one extra partial (0, sink)
        float mx = -INFINITY;
        for (int s = lane; s < num_splits; s += 32) mx = fmaxf(mx, lse_s[s * rows]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        mx = fmaxf(mx, sink);
        float lse = -INFINITY;
        if (mx != -INFINITY) {
            float sum = (lane == 0 && sink != -INFINITY) ? expf(sink - mx) : 0.f;  // the sink, once
            for (int s = lane; s < num_splits; s += 32) sum += expf(lse_s[s * rows] - mx);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            lse = mx + logf(sum);
        }
        for (int s = lane; s < num_splits; s += 32) {
            const float ls = lse_s[s * rows];
            w[s] = (lse == -INFINITY || ls == -INFINITY) ? 0.f : expf(ls - lse);
        }
        if (lane == 0) row_lse = lse;
    }
    __syncthreads();
    Elem* out = static_cast<Elem*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + i * p.o_row_stride;
    const float* o_s = p.o_partial + row * p.head_dim_v;  // split s at o_s[s * rows * dv]
    const long long split_stride = rows * p.head_dim_v;
    for (int c = threadIdx.x; c < p.head_dim_v; c += kCombineThreads) {
        float acc = 0.f;
#pragma unroll 8
        for (int s = 0; s < num_splits; ++s) acc += w[s] * o_s[s * split_stride + c];  // empty split: w = 0, O_s = 0
        out[c] = static_cast<Elem>(acc);
    }
    if (threadIdx.x == 0 && p.lse != nullptr) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i] = row_lse;
}

template <int D, typename Elem>
cudaError_t run_split(const AttnFwdParams& p, int num_splits, cudaStream_t stream) {
    using Tr = attn::FwdTraits<D, attn::SplitKvDefault<D>, Elem>;
    const dim3 grid(num_m_blocks(p), num_splits, p.batch * p.heads_kv);
    cudaError_t e = attn::launch_fwd<Tr, attn::FwdMode::kSplitKv>(p, grid, num_splits, stream);
    if (e != cudaSuccess) return e;
    const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
    if (rows > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    combine_kernel<Elem><<<static_cast<unsigned>(rows), kCombineThreads, 0, stream>>>(p, num_splits);
    return cudaGetLastError();
}

template <typename Elem>
cudaError_t dispatch_dim(const AttnFwdParams& p, int num_splits, cudaStream_t stream) {
    switch (p.head_dim) {
        case 64: return run_split<64, Elem>(p, num_splits, stream);
        case 128: return run_split<128, Elem>(p, num_splits, stream);
        default: return run_split<256, Elem>(p, num_splits, stream);
    }
}

int device_sms() {
    int major = 0;
    const int sms = attn::device_sms(&major);
    return sms > 0 ? sms : 132;
}

}  // namespace

extern "C" int attn_splitkv_num_splits(const AttnFwdParams* p, int num_sms) {
    char buf[8];
    if (attn::validate_fwd(p, "attn_splitkv_num_splits", buf, sizeof buf, /*paged_ok=*/true, /*sinks_ok=*/true) != ATTN_OK)
        return -1;
    if (p->num_splits >= 1) return p->num_splits;
    return choose_splits(*p, num_sms > 0 ? num_sms : device_sms());
}

namespace {

// The checks of attn_splitkv_fwd that need neither the device nor the data.
int validate_splitkv(const AttnFwdParams* p, char* err, int errlen) {
    int rc = attn::validate_fwd(p, "attn_splitkv_fwd", err, errlen, /*paged_ok=*/true, /*sinks_ok=*/true);
    if (rc != ATTN_OK) return rc;
    if (p->block_table != nullptr && p->page_size % block_n_for(p->head_dim) != 0)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED,
                          "attn_splitkv_fwd: page_size=%d is not a multiple of the key tile kBlockN=%d (head_dim=%d): "
                          "a key tile must not straddle two pages",
                          p->page_size, block_n_for(p->head_dim), p->head_dim);
    if (p->num_splits < 0 || p->num_splits > kMaxSplits)
        return attn::fail(err, errlen, ATTN_ERR_INVALID, "attn_splitkv_fwd: num_splits=%d: must be 0 (auto) .. %d",
                          p->num_splits, kMaxSplits);
    if ((p->o_partial == nullptr) != (p->lse_partial == nullptr))
        return attn::fail(err, errlen, ATTN_ERR_INVALID,
                          "attn_splitkv_fwd: o_partial=%p lse_partial=%p: give both or neither", (void*)p->o_partial,
                          (void*)p->lse_partial);
    return ATTN_OK;
}

// The fp32 partials (O, then LSE) of num_splits splits, in bytes.
int64_t partial_bytes(const AttnFwdParams& p, int num_splits) {
    const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q * num_splits;
    return rows * (p.head_dim_v + 1) * static_cast<int64_t>(sizeof(float));
}

}  // namespace

extern "C" int attn_splitkv_fwd(const AttnFwdParams* p, const AttnLaunch* launch, char* err, int errlen) {
    int rc = validate_splitkv(p, err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p->batch == 0 || p->seqlen_q == 0) return ATTN_OK;
    if (num_m_blocks(*p) > 0x7fffffff || static_cast<long long>(p->batch) * p->heads_kv > 65535)
        return attn::fail(err, errlen, ATTN_ERR_UNSUPPORTED, "attn_splitkv_fwd: batch*heads_kv=%lld exceeds 65535",
                          static_cast<long long>(p->batch) * p->heads_kv);
    attn::LaunchScratch scratch(launch);
    const cudaStream_t s = scratch.stream();
    const int num_splits = p->num_splits >= 1 ? p->num_splits : choose_splits(*p, device_sms());
    AttnFwdParams q = *p;
    q.num_splits = num_splits;
    const size_t rows = static_cast<size_t>(p->batch) * p->heads_q * p->seqlen_q * num_splits;
    if (q.o_partial == nullptr) {
        void* partials = nullptr;
        rc = scratch.take(&partials, partial_bytes(*p, num_splits), "attn_splitkv_fwd: scratch of the partials", err,
                          errlen);
        if (rc != ATTN_OK) return rc;
        q.o_partial = static_cast<float*>(partials);
        q.lse_partial = q.o_partial + rows * p->head_dim_v;
    }
    cudaError_t e =
        q.dtype == ATTN_BF16 ? dispatch_dim<__nv_bfloat16>(q, num_splits, s) : dispatch_dim<__half>(q, num_splits, s);
    const cudaError_t f = scratch.release();
    if (e == cudaSuccess) e = f;
    if (e != cudaSuccess)
        return attn::fail(err, errlen, ATTN_ERR_CUDA, "attn_splitkv_fwd: launch failed: %s (%s)", cudaGetErrorName(e),
                          cudaGetErrorString(e));
    return ATTN_OK;
}

extern "C" int64_t attn_splitkv_fwd_workspace(const AttnFwdParams* p) {
    if (validate_splitkv(p, nullptr, 0) != ATTN_OK) return -1;
    if (p->batch == 0 || p->seqlen_q == 0 || p->o_partial != nullptr) return 0;
    const int num_splits = p->num_splits >= 1 ? p->num_splits : choose_splits(*p, device_sms());
    return attn::workspace_piece(partial_bytes(*p, num_splits));
}

extern "C" int attn_params_layout(int64_t* out, int n) {
#define ATTN_FWD_FIELDS(X)                                                                                         \
    X(q) X(k) X(v) X(o) X(lse) X(q_batch_stride) X(q_head_stride) X(q_row_stride) X(k_batch_stride) X(k_head_stride) \
    X(k_row_stride) X(v_batch_stride) X(v_head_stride) X(v_row_stride) X(o_batch_stride) X(o_head_stride)          \
    X(o_row_stride) X(lse_batch_stride) X(lse_head_stride) X(batch) X(heads_q) X(heads_kv) X(seqlen_q) X(seqlen_k)  \
    X(head_dim) X(head_dim_v) X(seqlens_q) X(seqlens_k) X(scale) X(softcap) X(causal) X(align_bottom_right)        \
    X(window_left) X(window_right) X(dtype) X(num_splits) X(o_partial) X(lse_partial) X(block_table)             \
    X(block_table_batch_stride) X(page_size) X(sinks)
#define ATTN_BWD_FIELDS(X)                                                                                         \
    X(fwd) X(dout) X(dq) X(dk) X(dv) X(do_batch_stride) X(do_head_stride) X(do_row_stride) X(dq_batch_stride)      \
    X(dq_head_stride) X(dq_row_stride) X(dk_batch_stride) X(dk_head_stride) X(dk_row_stride) X(dv_batch_stride)    \
    X(dv_head_stride) X(dv_row_stride) X(dq_accum) X(d_rowsum) X(dk_accum) X(dv_accum) X(dlse) X(dsinks)
    int64_t vals[128];
    int k = 0;
    vals[k++] = ATTN_PARAMS_VERSION;
    vals[k++] = sizeof(AttnFwdParams);
    vals[k++] = sizeof(AttnBwdParams);
#define FWD_OFF(f) vals[k++] = offsetof(AttnFwdParams, f);
#define BWD_OFF(f) vals[k++] = offsetof(AttnBwdParams, f);
    ATTN_FWD_FIELDS(FWD_OFF)
    ATTN_BWD_FIELDS(BWD_OFF)
    vals[k++] = sizeof(AttnLaunch);
    vals[k++] = offsetof(AttnLaunch, stream);
    vals[k++] = offsetof(AttnLaunch, workspace);
    vals[k++] = offsetof(AttnLaunch, workspace_bytes);
    const int m = k < n ? k : n;
    for (int i = 0; i < m; ++i) out[i] = vals[i];
    return m;
}
