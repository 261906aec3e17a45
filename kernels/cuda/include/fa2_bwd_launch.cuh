// Host side of the FA2 backward (attn_fa2_bwd, kernels/cuda/fa2_bwd.cu), shared with the lab's tuning builds
// (kernels/cuda/lab/fa2_bwd_lab.cu): the shipped tile configurations, the tensor-core and SIMT main-loop launches, and
// the three stages around the main loop. attn_fa2_bwd's header comment has the stages and the fallback rule.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "attn_params.h"
#include "bwd_fa2_defaults.cuh"
#include "bwd_fa2_kernel.cuh"
#include "bwd_prepost.cuh"
#include "fa1_bwd_kernel.cuh"
#include "launch_common.cuh"

namespace attn::bwd {

// The shipped tile shapes (bwd_fa2_defaults.cuh): Fa2BwdDefault<D>, measured fastest on the H200, and Fa2BwdSmall<D>,
// the fallback of devices with less shared memory per block (A100: 163 KB, sm_86/89: 99 KB).
template <int D>
using Cfg = Fa2BwdTraits<D, Fa2BwdDefault<D>>;
template <int D>
using CfgSmall = Fa2BwdTraits<D, Fa2BwdSmall<D>>;

inline bool aligned4(const void* ptr, int64_t s0, int64_t s1, int64_t s2) {
    return ((uintptr_t)ptr % 4 == 0) && s0 % 2 == 0 && s1 % 2 == 0 && s2 % 2 == 0;
}

// The tensor-core kernel's conditions: 16-byte aligned q, k, v, dout (bwd_prepost.cuh aligned16), dk / dv 4-byte.
inline bool tensor_core_ok(const AttnBwdParams& p) {
    const AttnFwdParams& f = p.fwd;
    return aligned16(f.q, f.q_batch_stride, f.q_head_stride, f.q_row_stride) &&
           aligned16(f.k, f.k_batch_stride, f.k_head_stride, f.k_row_stride) &&
           aligned16(f.v, f.v_batch_stride, f.v_head_stride, f.v_row_stride) &&
           aligned16(p.dout, p.do_batch_stride, p.do_head_stride, p.do_row_stride) &&
           aligned4(p.dk, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride) &&
           aligned4(p.dv, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride);
}

template <typename T, class Tr>
int launch_tc(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    const size_t smem = Tr::template smem_bytes<T>();
    int rc = set_smem(fa2_bwd_kernel<T, Tr>, smem, "attn_fa2_bwd", err, errlen);
    if (rc != ATTN_OK) return rc;
    dim3 grid((p.fwd.seqlen_k + Tr::BC - 1) / Tr::BC, p.fwd.heads_q, p.fwd.batch);
    fa2_bwd_kernel<T, Tr><<<grid, Tr::THREADS, smem, s>>>(p);
    return cuda_status(cudaGetLastError(), "attn_fa2_bwd: main kernel launch", err, errlen);
}

template <typename T, int D>
int launch_simt(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    using namespace attn::fa1;
    int rc = set_smem(fa1_bwd_kernel<T, D>, bwd_smem_bytes<D>(), "attn_fa2_bwd (SIMT fallback)", err, errlen);
    if (rc != ATTN_OK) return rc;
    dim3 grid((p.fwd.seqlen_k + BWD_B - 1) / BWD_B, p.fwd.heads_q, p.fwd.batch);
    fa1_bwd_kernel<T, D><<<grid, BWD_THREADS, bwd_smem_bytes<D>(), s>>>(p);
    return cuda_status(cudaGetLastError(), "attn_fa2_bwd: SIMT fallback launch", err, errlen);
}

// The shipped tensor-core main loop of head dim d. The large shapes need more shared memory per block than an A100
// (163 KB) or an sm_86 / sm_89 part (99 KB) grants; those run the smaller shape of the same head dim.
template <typename T>
int launch_default_tc(const AttnBwdParams& p, cudaStream_t s, char* err, int errlen) {
    const int d = p.fwd.head_dim;
    const DeviceInfo* dev = device_info();
    const size_t optin = dev != nullptr ? static_cast<size_t>(dev->smem_optin) : 0;
    if (d == 64) {
        if (optin < Cfg<64>::smem_bytes<T>()) return launch_tc<T, CfgSmall<64>>(p, s, err, errlen);
        return launch_tc<T, Cfg<64>>(p, s, err, errlen);
    }
    if (d == 128) {
        if (optin < Cfg<128>::smem_bytes<T>()) return launch_tc<T, CfgSmall<128>>(p, s, err, errlen);
        return launch_tc<T, Cfg<128>>(p, s, err, errlen);
    }
    if (optin < Cfg<256>::smem_bytes<T>()) return launch_tc<T, CfgSmall<256>>(p, s, err, errlen);
    return launch_tc<T, Cfg<256>>(p, s, err, errlen);
}

// The three stages with the main loop `tc(p, s, err, errlen)` where the tensor cores can read the tensors (else the
// SIMT kernel of the FA1 backward).
template <typename T, class TensorCoreLoop>
int run_fa2_bwd(const AttnBwdParams& p, cudaStream_t s, TensorCoreLoop&& tc, char* err, int errlen) {
    int rc = cuda_status(launch_preprocess<T>(p, s), "attn_fa2_bwd: preprocess (D = rowsum(dO * O))", err, errlen);
    if (rc != ATTN_OK) return rc;
    rc = cuda_status(launch_dsinks(p, s), "attn_fa2_bwd: d sinks", err, errlen);
    if (rc != ATTN_OK) return rc;
    if (p.fwd.seqlen_k > 0) {
        const int d = p.fwd.head_dim;
        if (!tensor_core_ok(p))
            rc = d == 64    ? launch_simt<T, 64>(p, s, err, errlen)
                 : d == 128 ? launch_simt<T, 128>(p, s, err, errlen)
                            : launch_simt<T, 256>(p, s, err, errlen);
        else
            rc = tc(p, s, err, errlen);
        if (rc != ATTN_OK) return rc;
    }
    return cuda_status(launch_postprocess<T>(p, s), "attn_fa2_bwd: dq convert / GQA reduce", err, errlen);
}

}  // namespace attn::bwd
