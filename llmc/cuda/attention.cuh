// Attention of the CUDA backend: attention_forward / cuda_attention_backward (llmc/ops/ops.h) are the
// tensor-core flash attention of attention.cu for head sizes that are a multiple of 16 up
// to 128 (GPT-2: 64); other head sizes (<= 128) fall back to the simple CUDA-core kernels of
// attention_simple.cu, which have the same contract.
#ifndef LLMC_CUDA_ATTENTION_CUH
#define LLMC_CUDA_ATTENTION_CUH

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// Backward mode of the flash kernels. Deterministic (the default): dQ by its own kernel, every
// gradient element has one writer, bitwise reproducible. Off: dQ is added with fp32 atomics by
// the dK/dV kernel (fewer FLOPs: no recomputation of S and dP for dQ; the summation order, so the
// last bits, vary from run to run); head sizes above 64 always use the deterministic kernels.
void attention_set_deterministic(int on);
int attention_get_deterministic(void);

// Simple kernels (attention_simple.cu): fp32 math on CUDA cores, O(T) memory, deterministic.
void attention_forward_simple(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH);
void attention_backward_simple(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                               const float* lse, int B, int T, int C, int NH, int accumulate);
// Whether attention_forward / attention_backward use the flash kernels for head size HS.
int attention_flash_supported(int HS);

#ifdef __cplusplus
}
#endif

#endif // LLMC_CUDA_ATTENTION_CUH
