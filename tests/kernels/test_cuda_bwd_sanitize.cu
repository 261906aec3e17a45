// Standalone driver for compute-sanitizer (memcheck / racecheck / synccheck) over the FA1 forward,
// FA1 backward and FA2 backward launchers, without torch in the process (torch's own kernels
// tripped racecheck's exception handler on the H200). Random inputs, tails, GQA, causal and
// varlen; checks every launcher's status and the device's last error. Build and run:
//   nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels/cuda/include \
//        tests/kernels/test_cuda_bwd_sanitize.cu kernels/cuda/fa1.cu kernels/cuda/fa2_bwd.cu -o bwd_sanitize
//   compute-sanitizer --tool racecheck ./bwd_sanitize
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "attn_params.h"

extern "C" int attn_fa1_fwd(const AttnFwdParams*, void*, char*, int);
extern "C" int attn_fa1_bwd(const AttnBwdParams*, void*, char*, int);
extern "C" int attn_fa2_bwd(const AttnBwdParams*, void*, char*, int);

#define CK(x)                                                                             \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static void* dev_random_bf16(size_t n, unsigned seed) {
    std::vector<__nv_bfloat16> h(n);
    srand(seed);
    for (size_t i = 0; i < n; ++i) h[i] = __float2bfloat16((rand() / (float)RAND_MAX - 0.5f) * 2.f);
    void* d;
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
    return d;
}

static int run_case(int B, int Hq, int Hkv, int Lq, int Lk, int d, int causal, int varlen) {
    const size_t nq = (size_t)B * Hq * Lq * d, nk = (size_t)B * Hkv * Lk * d;
    AttnBwdParams p = {};
    AttnFwdParams& f = p.fwd;
    f.q = dev_random_bf16(nq, 1);
    f.k = dev_random_bf16(nk, 2);
    f.v = dev_random_bf16(nk, 3);
    CK(cudaMalloc(&f.o, nq * 2));
    CK(cudaMalloc((void**)&f.lse, (size_t)B * Hq * Lq * 4));
    f.q_batch_stride = (int64_t)Hq * Lq * d, f.q_head_stride = (int64_t)Lq * d, f.q_row_stride = d;
    f.k_batch_stride = (int64_t)Hkv * Lk * d, f.k_head_stride = (int64_t)Lk * d, f.k_row_stride = d;
    f.v_batch_stride = f.k_batch_stride, f.v_head_stride = f.k_head_stride, f.v_row_stride = d;
    f.o_batch_stride = f.q_batch_stride, f.o_head_stride = f.q_head_stride, f.o_row_stride = d;
    f.lse_batch_stride = (int64_t)Hq * Lq, f.lse_head_stride = Lq;
    f.batch = B, f.heads_q = Hq, f.heads_kv = Hkv, f.seqlen_q = Lq, f.seqlen_k = Lk;
    f.head_dim = f.head_dim_v = d;
    f.scale = 1.f / sqrtf((float)d);
    f.causal = causal, f.align_bottom_right = 1, f.window_left = f.window_right = -1;
    f.dtype = ATTN_BF16;
    if (varlen) {
        std::vector<int> sq(B), sk(B);
        for (int b = 0; b < B; ++b) sq[b] = Lq - 7 * b - 3, sk[b] = Lk - 11 * b - 1;
        CK(cudaMalloc((void**)&f.seqlens_q, B * 4));
        CK(cudaMalloc((void**)&f.seqlens_k, B * 4));
        CK(cudaMemcpy((void*)f.seqlens_q, sq.data(), B * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy((void*)f.seqlens_k, sk.data(), B * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(f.o, 0, nq * 2));  // padded rows are not written by the forward
    }
    p.dout = dev_random_bf16(nq, 4);
    CK(cudaMalloc(&p.dq, nq * 2));
    CK(cudaMalloc(&p.dk, nk * 2));
    CK(cudaMalloc(&p.dv, nk * 2));
    p.do_batch_stride = p.dq_batch_stride = f.q_batch_stride;
    p.do_head_stride = p.dq_head_stride = f.q_head_stride;
    p.do_row_stride = p.dq_row_stride = d;
    p.dk_batch_stride = p.dv_batch_stride = f.k_batch_stride;
    p.dk_head_stride = p.dv_head_stride = f.k_head_stride;
    p.dk_row_stride = p.dv_row_stride = d;
    CK(cudaMalloc((void**)&p.dq_accum, nq * 4));
    CK(cudaMalloc((void**)&p.d_rowsum, (size_t)B * Hq * Lq * 4));
    if (Hq != Hkv) {
        CK(cudaMalloc((void**)&p.dk_accum, (size_t)B * Hq * Lk * d * 4));
        CK(cudaMalloc((void**)&p.dv_accum, (size_t)B * Hq * Lk * d * 4));
    }
    char err[512];
    int rc = attn_fa1_fwd(&f, 0, err, sizeof err);
    if (rc) { fprintf(stderr, "attn_fa1_fwd: %d %s\n", rc, err); return 1; }
    rc = attn_fa1_bwd(&p, 0, err, sizeof err);
    if (rc) { fprintf(stderr, "attn_fa1_bwd: %d %s\n", rc, err); return 1; }
    rc = attn_fa2_bwd(&p, 0, err, sizeof err);
    if (rc) { fprintf(stderr, "attn_fa2_bwd: %d %s\n", rc, err); return 1; }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    printf("ok B=%d Hq=%d Hkv=%d Lq=%d Lk=%d d=%d causal=%d varlen=%d\n", B, Hq, Hkv, Lq, Lk, d, causal, varlen);
    return 0;
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // per-case lines survive a sanitizer run cut short
    int bad = 0;
    bad += run_case(2, 4, 2, 150, 131, 128, 1, 0);
    bad += run_case(2, 2, 1, 97, 140, 64, 1, 1);
    bad += run_case(1, 2, 2, 70, 70, 256, 0, 0);
    // Whole tiles without masking (the unmasked epilogue of the d = 64 / 128 defaults); kept small:
    // racecheck did not finish 256 x 256 versions of these within 30 s.
    bad += run_case(1, 1, 1, 128, 128, 128, 0, 0);
    bad += run_case(1, 2, 1, 128, 128, 64, 0, 0);
    printf(bad ? "FAILED\n" : "ALL OK\n");
    return bad != 0;
}
