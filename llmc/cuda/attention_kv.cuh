// Attention over a key/value cache on the GPU (sampling): the CUDA side of the
// attention_forward_kv op (contract in llmc/ops/ops.h). Overloads for fp32 and bf16 storage; the
// math is fp32 either way. The CUDA backend's op (built with LLMC_CUDA) calls the bf16 one.
#ifndef LLMC_CUDA_ATTENTION_KV_CUH
#define LLMC_CUDA_ATTENTION_KV_CUH

#include "common.cuh"

// qkv_new (B, Tn, 3C); caches (B, NH, maxT, HS); out (B, Tn, C). Device pointers.
void attention_forward_kv_cuda(float* out, const float* qkv_new, float* kcache, float* vcache,
                               int B, int pos, int Tn, int maxT, int C, int NH, cudaStream_t stream);
void attention_forward_kv_cuda(bf16* out, const bf16* qkv_new, bf16* kcache, bf16* vcache,
                               int B, int pos, int Tn, int maxT, int C, int NH, cudaStream_t stream);

#endif // LLMC_CUDA_ATTENTION_KV_CUH
