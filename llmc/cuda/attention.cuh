// Attention of the CUDA backend: attention_forward / attention_backward (llmc/ops.h) are the
// tensor-core flash attention of flash_attention.cu for head sizes that are a multiple of 16 up
// to 128 (GPT-2: 64); other head sizes (<= 128) fall back to the simple CUDA-core kernels of
// attention.cu, which have the same contract.
#ifndef LLMC_CUDA_ATTENTION_CUH
#define LLMC_CUDA_ATTENTION_CUH

#include "ops.h"

// Simple kernels (attention.cu): fp32 math on CUDA cores, O(T) memory, deterministic.
void attention_forward_simple(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH);
void attention_backward_simple(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                               const float* lse, int B, int T, int C, int NH);
// Whether attention_forward / attention_backward use the flash kernels for head size HS.
int attention_flash_supported(int HS);

#endif // LLMC_CUDA_ATTENTION_CUH
