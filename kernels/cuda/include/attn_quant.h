// Plain C ABI of the FP8 input kernels (kernels/cuda/hadamard.cu), loaded by kernels/cuda_quant.py:
// the seeded random Hadamard transform of incoherent processing and the FP8 quantizer with its three
// scaling granularities. Semantics are oracles/SEMANTICS.md §10 (formats, saturating round-to-nearest-even,
// descale = amax / fmax per block, 1 where amax = 0) and §11 (x M with M = H_d diag(s) / sqrt(d)).
//
// Bit-compatibility with oracles/fp8.py: the kernels compute in float64 with the oracle's operations in the
// oracle's order (butterflies (a + b, a - b) at strides 1, 2, 4, ...; then * s; then / sqrt(d); then
// x / descale; then one round-to-nearest-even onto the FP8 grid), so for inputs of any of the three storage
// types the codes and the float64 descales equal oracles.fp8.quantize_attention_inputs' bit for bit.
//
// Tensors are [batch, heads, seqlen, head_dim] addressed through element strides; the last dimension is
// contiguous. If you change a field here, change the ctypes mirror in kernels/cuda_quant.py in the same
// commit (attn_quant_params_layout lets the tests compare the two).
#pragma once
#include <stdint.h>

#include "attn_params.h"

#ifdef __cplusplus
extern "C" {
#endif

// Versions: 1, the first layout; 2: no field moved, the launchers take `const AttnLaunch*` (attn_params.h v5) where they
// took `void* stream`.
#define ATTN_QUANT_PARAMS_VERSION 2

enum AttnQuantDtype { ATTN_QUANT_FP16 = 0, ATTN_QUANT_BF16 = 1, ATTN_QUANT_FP32 = 2 };  // FP16 / BF16 as AttnDtype
// AttnFp8Format / AttnFp8Granularity: attn_params.h (one definition for the quantizer and the FP8 forward)

// y = x M along head_dim, computed in float64 and rounded once to y's storage type.
typedef struct AttnHadamardParams {
    const void* x;  // device, x_dtype
    void* y;        // device, y_dtype; may equal x (in place) when the dtypes and strides are equal
    int64_t x_batch_stride, x_head_stride, x_row_stride;
    int64_t y_batch_stride, y_head_stride, y_row_stride;
    int32_t batch, heads, seqlen, head_dim;  // head_dim: a power of two in [32, 512]
    int32_t x_dtype, y_dtype;                // AttnQuantDtype
    const float* signs;  // HOST array of head_dim values, each exactly +1.0f or -1.0f (oracles.fp8.hadamard_signs)
} AttnHadamardParams;

// codes = round_sat(x' / descale) with x' = x M when signs != NULL, else x.
// Descale outputs (contiguous): per_tensor 1 value; per_head [batch, heads / group] (the `group` heads of one
// kv head share a block: Q's query heads of a GQA group); per_tile [batch, heads, ceil(seqlen / tile)]
// (tiles of `tile` rows x head_dim per (batch, head), the last one possibly short).
typedef struct AttnFp8QuantParams {
    const void* x;       // device, x_dtype
    uint8_t* codes;      // device, the FP8 bit patterns (torch.float8_e4m3fn / float8_e5m2 storage)
    float* descale;      // device fp32 output (the descale an FP8 kernel is given)
    double* descale64;   // device fp64 output, the exact descale the codes were divided by; may be NULL
    int64_t x_batch_stride, x_head_stride, x_row_stride;
    int64_t c_batch_stride, c_head_stride, c_row_stride;
    int32_t batch, heads, seqlen, head_dim;  // with signs: head_dim a power of two in [32, 512]; else any of those
    int32_t x_dtype;      // AttnQuantDtype
    int32_t format;       // AttnFp8Format
    int32_t granularity;  // AttnFp8Granularity
    int32_t group;        // per_head: heads per descale block, >= 1 and dividing heads (ignored otherwise)
    int32_t tile;         // per_tile: rows per tile, >= 1 (ignored otherwise)
    const float* signs;   // HOST array [head_dim] of +-1.0f: apply the Hadamard transform first; NULL = none
    // per_tensor / per_head scratch: `batch * heads / group` (per_head) or 1 (per_tensor) uint64 slots on the
    // device, or NULL: the launcher then takes it from the launch's workspace or allocates it stream-ordered
    // (launch_common.cuh LaunchScratch).
    unsigned long long* amax_scratch;
} AttnFp8QuantParams;

// Launchers: 0 = ATTN_OK, else an AttnStatus (attn_params.h) with a message naming the argument in err.
// Validation runs before any CUDA call.
int attn_hadamard(const AttnHadamardParams* p, const AttnLaunch* launch, char* err, int errlen);
int attn_fp8_quantize(const AttnFp8QuantParams* p, const AttnLaunch* launch, char* err, int errlen);

// Writes [ATTN_QUANT_PARAMS_VERSION, sizeof(AttnHadamardParams), sizeof(AttnFp8QuantParams)] then the byte
// offset of every field of AttnHadamardParams then AttnFp8QuantParams, in declaration order; returns the count.
int attn_quant_params_layout(int64_t* out, int n);

#ifdef __cplusplus
}
#endif
