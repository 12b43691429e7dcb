// NF4 dequantization kernels (see nf4.cuh). Each thread produces 8 consecutive weights: they sit
// in one 64-weight block (8 divides 64) and in 4 packed bytes, so the fast path is one 32-bit
// load of codes, one absmax decode and one (bf16) or two (fp32) 16-byte stores. Ranges that do
// not start on a multiple of 8, unaligned outputs and the tail take the per-element path.
#include "nf4.cuh"

// Under the CUDA-on-CPU harness __fmul_rn / __fadd_rn are plain host arithmetic, which g++ would
// fuse into an FMA after inlining (its default is -ffp-contract=fast): keep the two roundings.
#if defined(CUDA_CPU_HARNESS) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(CUDA_CPU_HARNESS) && defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

// The fp32 absmax of block b. Double quantization rounds the product before adding the offset
// (bitsandbytes does two tensor ops), so the _rn intrinsics keep nvcc from fusing them.
// Pointers and scalars, not the NF4Device struct: a by-value struct that is indexed or passed by
// reference would be copied to local memory.
__device__ __forceinline__ float nf4_block_absmax(const float* absmax, const uint8_t* absmax_q,
                                                  const float* absmax_scale, const float* code8,
                                                  float offset, int64_t b) {
    if (absmax) return absmax[b];
    float p = __fmul_rn(code8[absmax_q[b]], absmax_scale[b / NF4_DQ_BLOCK]);
    return __fadd_rn(p, offset);
}

__device__ __forceinline__ void nf4_store(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void nf4_store(bf16* out, int64_t i, float v) { out[i] = __float2bfloat16_rn(v); }

__device__ __forceinline__ void nf4_store8(float* out, const float v[8]) {
    float4* o = reinterpret_cast<float4*>(out);
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void nf4_store8(bf16* out, const float v[8]) {
    // pack pairs into 32-bit words (low half = lower address), then one 16-byte store
    uint32_t u[4];
    for (int k = 0; k < 4; k++) {
        const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k]));
        const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k + 1]));
        u[k] = lo | (hi << 16);
    }
    *reinterpret_cast<uint4*>(out) = make_uint4(u[0], u[1], u[2], u[3]);
}

template <typename T>
__global__ void nf4_dequantize_kernel(T* out, const uint8_t* packed, const float* absmax,
                                      const uint8_t* absmax_q, const float* absmax_scale,
                                      const float* code8, float offset, const float* code4_g,
                                      int64_t begin, int64_t count, int vec) {
    // the 16 code values in shared memory: they are indexed by data (the codes)
    __shared__ float code4[16];
    if (threadIdx.x < 16) code4[threadIdx.x] = code4_g[threadIdx.x];
    __syncthreads();
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;  // index into out
    if (first >= count) return;
    const int64_t e0 = begin + first;                                            // weight index
    if (vec && first + 8 <= count) {
        const float a = nf4_block_absmax(absmax, absmax_q, absmax_scale, code8, offset, e0 / NF4_BLOCK);
        const uint32_t w = *reinterpret_cast<const uint32_t*>(packed + e0 / 2);
        float v[8];
        for (int k = 0; k < 4; k++) {  // little-endian: byte k holds weights 2k (high) and 2k+1 (low)
            const uint32_t byte = (w >> (8 * k)) & 0xFFu;
            v[2 * k] = __fmul_rn(code4[byte >> 4], a);
            v[2 * k + 1] = __fmul_rn(code4[byte & 0x0Fu], a);
        }
        nf4_store8(out + first, v);
        return;
    }
    const int64_t last = first + 8 < count ? first + 8 : count;
    for (int64_t i = first; i < last; i++) {
        const int64_t e = begin + i;
        const uint8_t byte = packed[e >> 1];
        const int c = (e & 1) ? (byte & 0x0F) : (byte >> 4);
        const float a = nf4_block_absmax(absmax, absmax_q, absmax_scale, code8, offset, e / NF4_BLOCK);
        nf4_store(out, i, __fmul_rn(code4[c], a));
    }
}

template <typename T>
static void nf4_dequantize_launch(T* out, const NF4Device* t, int64_t begin, int64_t end, cudaStream_t stream) {
    if (begin < 0 || end > t->n || begin > end)
        fatal(NULL, "nf4_dequantize_cuda: range [%lld, %lld) outside the tensor's %lld weights",
              (long long)begin, (long long)end, (long long)t->n);
    const int64_t count = end - begin;
    if (count == 0) return;
    const int vec = (begin % 8 == 0) && ((uintptr_t)out % 16 == 0) && ((uintptr_t)t->packed % 4 == 0);
    const int block = 256;
    const int64_t grid = ceil_div(ceil_div(count, (int64_t)8), (int64_t)block);
    LAUNCH(nf4_dequantize_kernel<T>, (unsigned)grid, block, 0, stream, out, t->packed, t->absmax,
           t->absmax_q, t->absmax_scale, t->code8, t->offset, t->code4, begin, count, vec);
    cudaCheckLast();
}

void nf4_dequantize_cuda(float* out, const NF4Device* t, int64_t begin, int64_t end, cudaStream_t stream) {
    nf4_dequantize_launch(out, t, begin, end, stream);
}
void nf4_dequantize_cuda(bf16* out, const NF4Device* t, int64_t begin, int64_t end, cudaStream_t stream) {
    nf4_dequantize_launch(out, t, begin, end, stream);
}

// ---------------------------------------------------------------------------------------------
// upload: the tensor's packed image (llmc/ops/nf4.h), one device allocation, each array 16-byte aligned

size_t nf4_device_bytes(const NF4Tensor* t) {
    NF4Image img;
    nf4_image_layout(t, &img);
    return img.bytes;
}

void nf4_device_view(NF4Device* d, const NF4Tensor* t, const uint8_t* image) {
    NF4Image img;
    nf4_image_layout(t, &img);
    memset(d, 0, sizeof(*d));
    d->n = t->n;
    d->packed = image;
    if (!t->double_quant) d->absmax = (const float*)(image + img.absmax);
    else {
        d->absmax_q = image + img.absmax_q;
        d->absmax_scale = (const float*)(image + img.absmax_scale);
        d->code8 = (const float*)(image + img.code8);
        d->offset = t->offset;
    }
    d->code4 = (const float*)(image + img.code4);
}

void nf4_device_upload(NF4Device* d, const NF4Tensor* t) {
    const size_t bytes = nf4_device_bytes(t);
    uint8_t* host = (uint8_t*)mallocCheck(bytes);
    nf4_image_pack(t, host);
    uint8_t* base = NULL;
    cudaCheck(cudaMalloc((void**)&base, bytes));
    cudaCheck(cudaMemcpy(base, host, bytes, cudaMemcpyHostToDevice));
    free(host);
    nf4_device_view(d, t, base);
}

void nf4_device_free(NF4Device* d) {
    cudaCheck(cudaFree((void*)d->packed));  // the base of the single allocation
    memset(d, 0, sizeof(*d));
}
