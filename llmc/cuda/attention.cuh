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

// Bytes of the backward's scratch buffer (ops_scratch OPS_SCRATCH_ATTN) for this shape: row
// terms, plus the dS tiles (at most 256 MiB, heads in chunks). The backward is deterministic:
// the dK/dV kernel stores the bf16 dS tiles and a dQ kernel sums dS K over them in a fixed
// order; every gradient element has one writer, bitwise reproducible.
size_t attention_backward_scratch_bytes(int B, int T, int C, int NH);
// The dS tiles' cap in bytes (0: the default 256 MiB); tests set a small one to run the
// backward in chunks of heads.
void attention_set_ds_limit(size_t bytes);
// The forward's softmax steps a 64-key tile at head size 64: 1 or 2 (0: the build's FA_CH, 1),
// for attention_bench to time both and the test to check both (why both: FA_CH, attention_fwd.cuh).
void attention_set_forward_chunks(int chunks);

// Simple kernels (attention_simple.cu): fp32 math on CUDA cores, O(T) memory, deterministic.
void attention_forward_simple(floatX* out, float* lse, const floatX* qkv, const int* doc_start, int B, int T, int C,
                              int NH);
void attention_backward_simple(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                               const float* lse, const int* doc_start, int B, int T, int C, int NH, int accumulate);
// Whether attention_forward / attention_backward use the flash kernels for head size HS.
int attention_flash_supported(int HS);

#ifdef __cplusplus
}
#endif

#endif // LLMC_CUDA_ATTENTION_CUH
