// CUDA backend: DoRA's ops (llmc/ops/ops.h): the row norms of the adapted weight W + scaling B A,
// the magnitude's scale on the layer's rows, and the magnitude's gradient (deterministic: a fixed
// partition of the rows, each column's partial sums added in a fixed order, no atomics).
#include "cuda/common.cuh"
#include "cuda/ops_cuda.h"

// ----------------------------------------------------------------------------
// dora_norm: a block takes DORA_NORM_ROWS rows of W, so that each element of A it reads serves
// all of them; scaling * B of those rows sits in shared memory, DORA_NORM_RCHUNK ranks at a time
// (once for the whole kernel when R fits). Threads stride over the columns (A's rows read
// coalesced), build each column's DORA_NORM_ROWS values of W + scaling B A in fp32 in rank order,
// and sum their squares; a block reduction in a fixed order gives each row's sum.

#define DORA_NORM_ROWS 4       // rows of W a block
#define DORA_NORM_RCHUNK 256   // ranks of B in shared memory at a time
#define DORA_NORM_THREADS 256

// sb[j][r] = scaling * B[o0 + r, j0 + j] for the chunk's ranks (0 for rows past OC)
__device__ inline void dora_norm_load_b(float4* sb, const floatX* B, float scaling, int o0, int rows, int j0,
                                        int nj, int R) {
    for (int j = threadIdx.x; j < nj; j += blockDim.x) {
        float b[DORA_NORM_ROWS];
        for (int r = 0; r < DORA_NORM_ROWS; r++)
            b[r] = r < rows ? scaling * __bfloat162float(B[(size_t)(o0 + r) * R + j0 + j]) : 0.0f;
        sb[j] = make_float4(b[0], b[1], b[2], b[3]);
    }
}

__global__ void dora_norm_kernel(float* norm, const floatX* W, const floatX* A, const floatX* B, float scaling,
                                 int OC, int C, int R) {
    static_assert(DORA_NORM_ROWS == 4, "sb holds a float4 a rank");
    __shared__ float4 sb[DORA_NORM_RCHUNK];
    const int o0 = blockIdx.x * DORA_NORM_ROWS, rows = min(DORA_NORM_ROWS, OC - o0);
    const bool once = R <= DORA_NORM_RCHUNK;   // the same for the whole block
    if (once) dora_norm_load_b(sb, B, scaling, o0, rows, 0, R, R);
    __syncthreads();
    float ss[DORA_NORM_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c0 = 0; c0 < C; c0 += blockDim.x) {   // every thread takes every step (barriers below)
        const int c = c0 + threadIdx.x;
        const bool in = c < C;
        float v[DORA_NORM_ROWS];
        for (int r = 0; r < DORA_NORM_ROWS; r++) v[r] = in && r < rows ? __bfloat162float(W[(size_t)(o0 + r) * C + c]) : 0.0f;
        for (int j0 = 0; j0 < R; j0 += DORA_NORM_RCHUNK) {
            const int nj = min(DORA_NORM_RCHUNK, R - j0);
            if (!once) {
                __syncthreads();   // the previous chunk has been read
                dora_norm_load_b(sb, B, scaling, o0, rows, j0, nj, R);
                __syncthreads();
            }
            if (!in) continue;
            for (int j = 0; j < nj; j++) {
                const float a = __bfloat162float(A[(size_t)(j0 + j) * C + c]);
                const float4 b = sb[j];
                v[0] += b.x * a; v[1] += b.y * a; v[2] += b.z * a; v[3] += b.w * a;
            }
        }
        for (int r = 0; r < DORA_NORM_ROWS; r++) ss[r] += v[r] * v[r];
    }
    for (int r = 0; r < DORA_NORM_ROWS; r++) {
        const float s = block_sum(ss[r]);
        if (threadIdx.x == 0 && r < rows) norm[o0 + r] = sqrtf(s);
    }
}

extern "C" void cuda_dora_norm(float* norm, const floatX* W, const floatX* A, const floatX* B, float scaling,
                               int OC, int C, int R) {
    if (OC <= 0) return;
    LAUNCH(dora_norm_kernel, ops_blocks(OC, DORA_NORM_ROWS), DORA_NORM_THREADS, 0, 0, norm, W, A, B, scaling, OC, C, R);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// dora_scale: element-wise, 8 consecutive elements a thread, as elementwise.cu's kernels (one
// 128-bit load or store per operand with vec: OC % 8 == 0 and every pointer 16-byte aligned, so
// the 8 share a row). out may alias in: each thread reads its elements before writing them.

__device__ inline float dora_scaled(const floatX* m, const float* norm, float shift, const floatX* bias, int o, float x,
                                    float y, int acc) {
    const float v = (__bfloat162float(m[o]) / norm[o] + shift) * x + (bias ? __bfloat162float(bias[o]) : 0.0f);
    return acc ? y + v : v;
}

__global__ void dora_scale_kernel(floatX* out, const floatX* in, const floatX* m, const float* norm, float shift,
                                  const floatX* bias, size_t n, int OC, int acc, int vec) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    int o = (int)(i % OC);
    if (vec) {
        x128 x = load128(in + i), y = acc ? load128(out + i) : x128::zeros();
        for (int k = 0; k < 8; k++)
            y[k] = __float2bfloat16(dora_scaled(m, norm, shift, bias, o + k, __bfloat162float(x[k]), __bfloat162float(y[k]), acc));
        store128(out + i, y);
    } else {
        for (size_t k = i; k < i + 8 && k < n; k++) {
            const float y = acc ? __bfloat162float(out[k]) : 0.0f;
            out[k] = __float2bfloat16(dora_scaled(m, norm, shift, bias, o, __bfloat162float(in[k]), y, acc));
            if (++o == OC) o = 0;
        }
    }
}

extern "C" void cuda_dora_scale(floatX* out, const floatX* in, const floatX* m, const float* norm, float shift,
                                const floatX* bias, int N, int OC, int accumulate) {
    if (N <= 0 || OC <= 0) return;
    const size_t n = (size_t)N * OC;
    const int vec = OC % 8 == 0 && ops_aligned16(out) && ops_aligned16(in) && ops_aligned16(m) &&
                    (!bias || ops_aligned16(bias));
    LAUNCH(dora_scale_kernel, ops_blocks(n, EW_BLOCK * 8), EW_BLOCK, 0, 0, out, in, m, norm, shift, bias, n, OC,
           accumulate, vec);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// dora_magnitude_backward: sum_n dout[n, o] z[n, o] in two passes. Block (bx, by) owns columns
// [64 bx, 64 bx + 64) (lane l: columns l and l + 32, so a warp reads 64 contiguous bf16 of a row)
// and slice by of the rows; warp w takes the slice's rows w, w + 8, ... in order, and the 8 warps'
// sums are added in warp order into partial[by][o]. The finalize adds the slices in order and
// divides by the norm. The slices depend on N alone, so the sums are the same on every GPU.

#define DORA_MB_COLS 64          // columns a block
#define DORA_MB_WARPS 8          // warps a block, each a share of the slice's rows
#define DORA_MB_MIN_ROWS 64      // rows a slice at least
#define DORA_MB_MAX_SLICES 64    // slices at most (grid.y; the partials are slices x OC floats)

__global__ void dora_magnitude_partial_kernel(float* partial, const floatX* dout, const floatX* z, int N, int OC,
                                              int slice_rows) {
    __shared__ float sums[DORA_MB_WARPS][DORA_MB_COLS];
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int o0 = blockIdx.x * DORA_MB_COLS + lane, o1 = o0 + WARP_SIZE;
    const int r0 = blockIdx.y * slice_rows, r1 = min(r0 + slice_rows, N);
    float a0 = 0.0f, a1 = 0.0f;
    for (int r = r0 + warp; r < r1; r += DORA_MB_WARPS) {
        const size_t row = (size_t)r * OC;
        if (o0 < OC) a0 += __bfloat162float(dout[row + o0]) * __bfloat162float(z[row + o0]);
        if (o1 < OC) a1 += __bfloat162float(dout[row + o1]) * __bfloat162float(z[row + o1]);
    }
    sums[warp][lane] = a0;
    sums[warp][lane + WARP_SIZE] = a1;
    __syncthreads();
    const int o = blockIdx.x * DORA_MB_COLS + threadIdx.x;   // one column a thread
    if (threadIdx.x < DORA_MB_COLS && o < OC) {
        float s = 0.0f;
        for (int w = 0; w < DORA_MB_WARPS; w++) s += sums[w][threadIdx.x];
        partial[(size_t)blockIdx.y * OC + o] = s;
    }
}

// dm[o] += (sum of the slices' partials, in order) / norm[o]
__global__ void dora_magnitude_finalize_kernel(floatX* dm, const float* partial, const float* norm, int slices,
                                               int OC) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0.0f;
    for (int k = 0; k < slices; k++) s += partial[(size_t)k * OC + o];
    dm[o] = __float2bfloat16(__bfloat162float(dm[o]) + s / norm[o]);
}

extern "C" void cuda_dora_magnitude_backward(floatX* dm, const floatX* dout, const floatX* z, const float* norm,
                                             int N, int OC) {
    if (N <= 0 || OC <= 0) return;
    const int slices = min((int)ops_blocks(N, DORA_MB_MIN_ROWS), DORA_MB_MAX_SLICES);
    const int slice_rows = (int)ops_blocks(N, slices);
    float* partial = (float*)ops_scratch(OPS_SCRATCH_COLSUM, (size_t)slices * OC * sizeof(float));
    const dim3 grid(ops_blocks(OC, DORA_MB_COLS), slices);
    LAUNCH(dora_magnitude_partial_kernel, grid, DORA_MB_WARPS * WARP_SIZE, 0, 0, partial, dout, z, N, OC, slice_rows);
    cudaCheck(cudaGetLastError());
    LAUNCH(dora_magnitude_finalize_kernel, ops_blocks(OC, EW_BLOCK), EW_BLOCK, 0, 0, dm, (const float*)partial, norm,
           slices, OC);
    cudaCheck(cudaGetLastError());
}
