// Attention of a few new tokens over the key/value cache (see attention_kv.cuh, ops.h).
// Decoding feeds one token at a time, so there is little work per call and no T x T matrix to
// tile: one kernel appends the new keys/values to the caches, a second runs one block per
// (new token, head, sequence). The block keeps the query and that row's scores in shared
// memory: threads take keys round-robin for the scores (reading each cached key row
// contiguously), a block-wide max and sum give the softmax, and for the weighted sum of values
// the threads split into G groups of HS lanes (lane d reads V[j, d]: consecutive lanes,
// consecutive addresses), each group taking every G-th key; the groups' partial sums are added
// at the end. Scores and sums are fp32 whatever the storage type.
#include "attention_kv.cuh"
#include "launch.cuh"
#include "base/check.h"
#include "ops_cuda.h"

#define KV_BLOCK 128

__device__ __forceinline__ float kv_to_f(float x) { return x; }
__device__ __forceinline__ float kv_to_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void kv_from_f(float* p, float v) { *p = v; }
__device__ __forceinline__ void kv_from_f(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

// One thread per (sequence, new token, channel) of K and V: the row of token t of head h goes
// to cache row pos + t of that head.
template <typename T>
__global__ void kv_append_kernel(T* kcache, T* vcache, const T* qkv_new, int B, int pos, int Tn, int maxT, int C, int NH) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)B * Tn * C) return;
    const int HS = C / NH;
    const int c = (int)(i % C);
    const int64_t bt = i / C;
    const int t = (int)(bt % Tn), b = (int)(bt / Tn), h = c / HS, d = c % HS;
    const T* row = qkv_new + bt * 3 * C;
    const int64_t dst = (((int64_t)b * NH + h) * maxT + pos + t) * HS + d;
    kcache[dst] = row[C + c];
    vcache[dst] = row[2 * C + c];
}

// The dynamic shared memory, declared in a plain function: under the CUDA-on-CPU harness g++
// would reach an `extern __shared__` array declared inside a template kernel through a TLS
// wrapper call that nothing defines.
__device__ __forceinline__ float* kv_smem() {
    extern __shared__ float smem[];
    return smem;
}

// grid (Tn, NH, B), KV_BLOCK threads. Dynamic shared memory: HS query values, pos + Tn scores,
// G * HS partial outputs.
template <typename T>
__global__ void kv_attention_kernel(T* out, const T* qkv_new, const T* kcache, const T* vcache,
                                    int pos, int Tn, int maxT, int C, int NH, float scale) {
    float* smem = kv_smem();
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int HS = C / NH;
    const int n = pos + t + 1;                       // keys this query sees
    const int G = HS <= (int)blockDim.x ? (int)blockDim.x / HS : 1;
    float* q = smem;                                 // [HS]
    float* s = q + HS;                               // [pos + Tn]
    float* part = s + pos + Tn;                      // [G * HS]
    const T* qrow = qkv_new + ((int64_t)b * Tn + t) * 3 * C + h * HS;
    const T* K = kcache + ((int64_t)b * NH + h) * maxT * HS;
    const T* V = vcache + ((int64_t)b * NH + h) * maxT * HS;

    for (int d = threadIdx.x; d < HS; d += blockDim.x) q[d] = kv_to_f(qrow[d]);
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const T* k = K + (int64_t)j * HS;
        float acc = 0.0f;
        for (int d = 0; d < HS; d++) acc += q[d] * kv_to_f(k[d]);
        s[j] = acc * scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = block_reduce<warp_reduce_max>(mx, true, -INFINITY);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float e = expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    // (block_reduce's barrier also publishes every thread's s[] to the whole block)
    sum = block_reduce<warp_reduce_sum>(sum);
    for (int e = threadIdx.x; e < G * HS; e += blockDim.x) {
        const int g = e / HS, d = e % HS;
        float acc = 0.0f;
        for (int j = g; j < n; j += G) acc += s[j] * kv_to_f(V[(int64_t)j * HS + d]);
        part[e] = acc;
    }
    __syncthreads();
    const float inv = 1.0f / sum;
    T* o = out + ((int64_t)b * Tn + t) * C + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int g = 0; g < G; g++) acc += part[g * HS + d];
        kv_from_f(o + d, acc * inv);
    }
}

template <typename T>
static void attention_forward_kv_impl(T* out, const T* qkv_new, T* kcache, T* vcache,
                                      int B, int pos, int Tn, int maxT, int C, int NH, cudaStream_t stream) {
    if (pos < 0 || Tn < 1 || pos + Tn > maxT || C % NH != 0)
        fatal("this is a bug in llmc", "attention_forward_kv: pos %d + %d new tokens beyond the cache of %d (C %d, NH %d)",
              pos, Tn, maxT, C, NH);
    const int HS = C / NH;
    const int64_t total = (int64_t)B * Tn * C;
    LAUNCH(kv_append_kernel<T>, (unsigned)ceil_div(total, (int64_t)256), 256, 0, stream, kcache, vcache, qkv_new, B, pos, Tn, maxT, C, NH);
    cudaCheck(cudaGetLastError());
    const int G = HS <= KV_BLOCK ? KV_BLOCK / HS : 1;
    const size_t smem = (size_t)(HS + pos + Tn + G * HS) * sizeof(float);
    if (smem > 48 * 1024)
        fatal("use a shorter context", "attention_forward_kv: %d cached positions need %zu bytes of shared memory (at most 48 KiB)", pos + Tn, smem);
    dim3 grid((unsigned)Tn, (unsigned)NH, (unsigned)B);
    LAUNCH(kv_attention_kernel<T>, grid, KV_BLOCK, smem, stream, out, qkv_new, kcache, vcache, pos, Tn, maxT, C, NH,
           1.0f / sqrtf((float)HS));
    cudaCheck(cudaGetLastError());
}

void attention_forward_kv_cuda(float* out, const float* qkv_new, float* kcache, float* vcache,
                               int B, int pos, int Tn, int maxT, int C, int NH, cudaStream_t stream) {
    attention_forward_kv_impl(out, qkv_new, kcache, vcache, B, pos, Tn, maxT, C, NH, stream);
}
void attention_forward_kv_cuda(bf16* out, const bf16* qkv_new, bf16* kcache, bf16* vcache,
                               int B, int pos, int Tn, int maxT, int C, int NH, cudaStream_t stream) {
    attention_forward_kv_impl(out, qkv_new, kcache, vcache, B, pos, Tn, maxT, C, NH, stream);
}

// The op of the CUDA backend (floatX = bf16), on the default stream like the other ops.
extern "C" void cuda_attention_forward_kv(floatX* out, const floatX* qkv_new, floatX* kcache, floatX* vcache,
                                          int B, int pos, int Tn, int maxT, int C, int NH) {
    attention_forward_kv_cuda(out, qkv_new, kcache, vcache, B, pos, Tn, maxT, C, NH, 0);
}
