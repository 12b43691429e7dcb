// NF4 dequantization on the GPU: the frozen QLoRA base weights live on the device in their 4-bit
// form (llmc/ops/nf4.h layout, bitsandbytes-compatible) and are dequantized layer by layer into one
// scratch buffer right before their matmul. The fp32 output equals nf4_dequantize_range() on the
// CPU bit for bit; the bf16 output is that fp32 value rounded to nearest even.
#ifndef LLMC_CUDA_NF4_CUH
#define LLMC_CUDA_NF4_CUH

#include "common.cuh"
#include "ops/nf4.h"

// Device copy of one NF4Tensor (every pointer is device memory, all in one allocation). Either
// absmax (plain) or absmax_q + absmax_scale + code8 (double quantization) is set.
struct NF4Device {
    int64_t n;
    const uint8_t* packed;        // (n + 1) / 2 bytes
    const float* absmax;          // [n_blocks] or NULL
    const uint8_t* absmax_q;      // [n_blocks] or NULL
    const float* absmax_scale;    // [n_dq_blocks] or NULL
    const float* code8;           // [256] or NULL
    const float* code4;           // [16]
    float offset;
};

// cudaMalloc + copy t's packed image (llmc/ops/nf4.h; one allocation); nf4_device_free releases it.
// nf4_device_view: d's arrays in an image that is already in device memory (not owned).
void nf4_device_upload(NF4Device* d, const NF4Tensor* t);
void nf4_device_view(NF4Device* d, const NF4Tensor* t, const uint8_t* image);
void nf4_device_free(NF4Device* d);
size_t nf4_device_bytes(const NF4Tensor* t);

// Weights [begin, end) of t into out[0 .. end-begin) (device memory, 16-byte aligned for the
// vectorised path; any alignment works).
void nf4_dequantize_cuda(float* out, const NF4Device* t, int64_t begin, int64_t end, cudaStream_t stream);
void nf4_dequantize_cuda(bf16* out, const NF4Device* t, int64_t begin, int64_t end, cudaStream_t stream);

#endif // LLMC_CUDA_NF4_CUH
