// Self-test of the CUDA-on-CPU harness: sample kernels that use each mechanism the production
// kernels rely on (barriers + static shared memory, warp shuffles and votes, dynamic shared
// memory, atomics, 128-bit bf16 loads/stores, multi-dimensional grids, launch errors), run on the
// harness and checked against plain C loops on the host. The file is valid CUDA too: `make
// cuda-check` compiles it with nvcc for sm_80/sm_90.
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/cuda/common.cuh"
#include "test/test.h"

#define BLOCK 256

// Tree reduction in static shared memory: one partial sum per block. test/cuda_cpu/mutation.sh
// deletes the line marked MUTATION-TARGET and checks that the harness notices the missing barrier.
__global__ void block_sum_kernel(float* out, const float* in, int n) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();  // MUTATION-TARGET
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

// One warp per row: sum and max of each row with warp shuffles (common.cuh helpers).
__global__ void row_reduce_warp_kernel(float* sums, float* maxs, const float* in, int rows, int cols) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (warp >= rows) return;  // whole warps exit together
    float s = 0.0f, m = -INFINITY;
    for (int c = lane; c < cols; c += WARP_SIZE) {
        float v = in[warp * cols + c];
        s += v;
        m = fmaxf(m, v);
    }
    s = warp_reduce_sum(s);
    m = warp_reduce_max(m);
    if (lane == 0) { sums[warp] = s; maxs[warp] = m; }
}

// Per-row normalisation through dynamic shared memory: the row is staged in smem, its mean is
// found with block_reduce (common.cuh), then written back reversed and centred.
__global__ void dyn_smem_kernel(float* out, const float* in, int cols) {
    extern __shared__ float smem[];
    const float* row = in + (size_t)blockIdx.x * cols;
    float part = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        smem[c] = row[c];
        part += row[c];
    }
    float mean = block_reduce<warp_reduce_sum>(part) / cols;  // its barrier also publishes smem
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        out[(size_t)blockIdx.x * cols + c] = smem[cols - 1 - c] - mean;
}

// Atomics from many blocks: an integer histogram, a float total and an integer maximum.
__global__ void atomics_kernel(int* hist, float* total, int* maxv, unsigned* count, const int* in, int n, int nbins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int v = in[i];
    atomicAdd(&hist[v % nbins], 1);
    atomicAdd(total, (float)v * 0.5f);
    atomicMax(maxv, v);
    atomicAdd(count, 1u);
}

// bf16 in, bf16 out, fp32 math, 8 elements per thread through 128-bit loads and stores.
__global__ void bf16_axpb_kernel(bf16* out, const bf16* x, float a, float b, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    x128 v = load128cs(x + i);
    x128 r;
    for (int k = 0; k < x128::size; k++) r[k] = __float2bfloat16(a * __bfloat162float(v[k]) + b);
    store128(out + i, r);
}

// Warp votes and the other shuffles: inclusive prefix sum with __shfl_up_sync, broadcast within
// 16-lane segments with __shfl_sync(width 16), __shfl_down_sync, ballot / any / all.
__global__ void warp_ops_kernel(int* scan, int* bcast, int* down, unsigned* ballots, int* votes, const int* in) {
    int lane = threadIdx.x % WARP_SIZE;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    int x = v;
    for (int off = 1; off < WARP_SIZE; off *= 2) {
        int y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x += y;
    }
    scan[i] = x;
    bcast[i] = __shfl_sync(0xffffffffu, v, 3, 16);  // lane 3 of each half-warp
    down[i] = __shfl_down_sync(0xffffffffu, v, 5);  // lanes 27..31 keep their own value
    unsigned bal = __ballot_sync(0xffffffffu, v % 3 == 0);
    int any = __any_sync(0xffffffffu, v > 90);
    int all = __all_sync(0xffffffffu, v >= 0);
    if (lane == 0) {
        int w = i / WARP_SIZE;
        ballots[w] = bal;
        votes[2 * w] = any;
        votes[2 * w + 1] = all;
    }
}

// Block-wide votes; threads with a negative input exit first and do not take part.
__global__ void block_vote_kernel(int* out, const int* in) {
    int v = in[threadIdx.x];
    if (v < 0) return;
    int c = __syncthreads_count(v % 2);
    int a = __syncthreads_and(v >= 0);  // true for every thread that takes part
    int o = __syncthreads_or(v > 95);
    out[3 * threadIdx.x] = c;
    out[3 * threadIdx.x + 1] = a;
    out[3 * threadIdx.x + 2] = o;
}

// 3-D block, 2-D grid: every thread writes its own linear index at its global coordinate.
__global__ void index_kernel(int* out, int W, int H) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = threadIdx.z;
    int tid = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    out[(z * H + y) * W + x] = tid * 1000 + (blockIdx.y * gridDim.x + blockIdx.x);
}

// __constant__ and __device__ variables, a kernel without arguments
__constant__ float c_coef[4];
__device__ unsigned d_launch_count;

__global__ void count_kernel() {
    if (threadIdx.x == 0) atomicAdd(&d_launch_count, 1u);
}

__global__ void coef_kernel(float* out) {
    out[threadIdx.x] = c_coef[threadIdx.x % 4] * threadIdx.x;
}

// A template kernel: LAUNCH takes it in parentheses (the comma would split the macro arguments).
template <typename T, int N>
__global__ void scale_kernel(T* out, const T* in, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (T)((float)in[i] * s * N);
}

__global__ void needs_64k_smem_kernel(float* out) {
    extern __shared__ float smem[];
    smem[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = smem[blockDim.x - 1 - threadIdx.x];
}

static float frand(unsigned* s) { *s = *s * 1664525u + 1013904223u; return (float)(*s >> 8) / 16777216.0f * 2.0f - 1.0f; }

static void test_block_sum(void) {
    const int n = 5000, nb = ceil_div(n, BLOCK);
    float* h = (float*)malloc(n * sizeof(float));
    unsigned seed = 1;
    for (int i = 0; i < n; i++) h[i] = frand(&seed);
    float *d_in, *d_out;
    cudaCheck(cudaMalloc(&d_in, n * sizeof(float)));
    cudaCheck(cudaMalloc(&d_out, nb * sizeof(float)));
    cudaCheck(cudaMemcpy(d_in, h, n * sizeof(float), cudaMemcpyHostToDevice));
    LAUNCH(block_sum_kernel, nb, BLOCK, 0, 0, d_out, d_in, n);
    cudaCheckLast();
    float got[32], want[32];
    cudaCheck(cudaMemcpy(got, d_out, nb * sizeof(float), cudaMemcpyDeviceToHost));
    for (int b = 0; b < nb; b++) {
        double acc = 0.0;
        for (int i = b * BLOCK; i < n && i < (b + 1) * BLOCK; i++) acc += h[i];
        want[b] = (float)acc;
    }
    test_allclose("block_sum (static smem + __syncthreads)", got, want, nb, 1e-5, 1e-5);
    cudaCheck(cudaFree(d_in));
    cudaCheck(cudaFree(d_out));
    free(h);
}

static void test_row_reduce(void) {
    const int rows = 37, cols = 70;  // 37 warps: the last block is partly idle
    float* h = (float*)malloc(rows * cols * sizeof(float));
    unsigned seed = 2;
    for (int i = 0; i < rows * cols; i++) h[i] = frand(&seed);
    float *d_in, *d_s, *d_m;
    cudaCheck(cudaMalloc(&d_in, rows * cols * sizeof(float)));
    cudaCheck(cudaMalloc(&d_s, rows * sizeof(float)));
    cudaCheck(cudaMalloc(&d_m, rows * sizeof(float)));
    cudaCheck(cudaMemcpy(d_in, h, rows * cols * sizeof(float), cudaMemcpyHostToDevice));
    const int block = 128;
    LAUNCH(row_reduce_warp_kernel, ceil_div(rows * WARP_SIZE, block), block, 0, 0, d_s, d_m, d_in, rows, cols);
    cudaCheckLast();
    float gs[rows], gm[rows], ws[rows], wm[rows];
    cudaCheck(cudaMemcpy(gs, d_s, sizeof gs, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(gm, d_m, sizeof gm, cudaMemcpyDeviceToHost));
    for (int r = 0; r < rows; r++) {
        double s = 0.0; float m = -INFINITY;
        for (int c = 0; c < cols; c++) { s += h[r * cols + c]; m = fmaxf(m, h[r * cols + c]); }
        ws[r] = (float)s; wm[r] = m;
    }
    test_allclose("warp_reduce_sum (__shfl_xor_sync)", gs, ws, rows, 1e-5, 1e-5);
    test_allclose("warp_reduce_max (__shfl_xor_sync)", gm, wm, rows, 0.0, 0.0);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_s)); cudaCheck(cudaFree(d_m));
    free(h);
}

static void test_dyn_smem(void) {
    const int rows = 6, cols = 300, block = 96;  // cols not a multiple of the block size
    float* h = (float*)malloc(rows * cols * sizeof(float));
    float* got = (float*)malloc(rows * cols * sizeof(float));
    float* want = (float*)malloc(rows * cols * sizeof(float));
    unsigned seed = 3;
    for (int i = 0; i < rows * cols; i++) h[i] = frand(&seed) + 0.25f;
    for (int r = 0; r < rows; r++) {
        double s = 0.0;
        for (int c = 0; c < cols; c++) s += h[r * cols + c];
        for (int c = 0; c < cols; c++) want[r * cols + c] = h[r * cols + cols - 1 - c] - (float)(s / cols);
    }
    float *d_in, *d_out;
    cudaCheck(cudaMalloc(&d_in, rows * cols * sizeof(float)));
    cudaCheck(cudaMalloc(&d_out, rows * cols * sizeof(float)));
    cudaCheck(cudaMemcpy(d_in, h, rows * cols * sizeof(float), cudaMemcpyHostToDevice));
    LAUNCH(dyn_smem_kernel, rows, block, cols * sizeof(float), 0, d_out, d_in, cols);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, d_out, rows * cols * sizeof(float), cudaMemcpyDeviceToHost));
    test_allclose("dynamic smem + block_reduce", got, want, rows * cols, 1e-5, 1e-6);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_out));
    free(h); free(got); free(want);
}

static void test_atomics(void) {
    const int n = 3000, nbins = 7;
    int* h = (int*)malloc(n * sizeof(int));
    unsigned seed = 4;
    for (int i = 0; i < n; i++) { seed = seed * 1664525u + 1013904223u; h[i] = (int)(seed >> 20) % 1000; }
    int *d_in, *d_hist, *d_max; float* d_total; unsigned* d_count;
    cudaCheck(cudaMalloc(&d_in, n * sizeof(int)));
    cudaCheck(cudaMalloc(&d_hist, nbins * sizeof(int)));
    cudaCheck(cudaMalloc(&d_max, sizeof(int)));
    cudaCheck(cudaMalloc(&d_total, sizeof(float)));
    cudaCheck(cudaMalloc(&d_count, sizeof(unsigned)));
    cudaCheck(cudaMemcpy(d_in, h, n * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(d_hist, 0, nbins * sizeof(int)));
    cudaCheck(cudaMemset(d_max, 0, sizeof(int)));
    cudaCheck(cudaMemset(d_total, 0, sizeof(float)));
    cudaCheck(cudaMemset(d_count, 0, sizeof(unsigned)));
    LAUNCH(atomics_kernel, ceil_div(n, 128), 128, 0, 0, d_hist, d_total, d_max, d_count, d_in, n, nbins);
    cudaCheckLast();
    int hist[nbins], mx; float total; unsigned count;
    cudaCheck(cudaMemcpy(hist, d_hist, sizeof hist, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&mx, d_max, sizeof mx, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&total, d_total, sizeof total, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&count, d_count, sizeof count, cudaMemcpyDeviceToHost));
    int whist[nbins] = {0}, wmax = 0; double wtotal = 0.0;
    for (int i = 0; i < n; i++) { whist[h[i] % nbins]++; wtotal += h[i] * 0.5; if (h[i] > wmax) wmax = h[i]; }
    int hist_ok = 1;
    for (int b = 0; b < nbins; b++) hist_ok &= hist[b] == whist[b];
    TEST_CHECK(hist_ok, "atomicAdd(int) histogram differs");
    TEST_CHECK(mx == wmax, "atomicMax: got %d want %d", mx, wmax);
    TEST_CHECK(count == (unsigned)n, "atomicAdd(unsigned): got %u want %d", count, n);
    float wt = (float)wtotal;
    test_allclose("atomicAdd(float)", &total, &wt, 1, 1e-6, 0.0);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_hist)); cudaCheck(cudaFree(d_max));
    cudaCheck(cudaFree(d_total)); cudaCheck(cudaFree(d_count));
    free(h);
}

static void test_bf16_vec(void) {
    const int n = 8 * 200;
    bf16* h = (bf16*)malloc(n * sizeof(bf16));
    bf16* g = (bf16*)malloc(n * sizeof(bf16));
    float* got = (float*)malloc(n * sizeof(float));
    float* want = (float*)malloc(n * sizeof(float));
    unsigned seed = 5;
    for (int i = 0; i < n; i++) h[i] = __float2bfloat16(frand(&seed) * 4.0f);
    bf16 *d_x, *d_y;
    cudaCheck(cudaMalloc(&d_x, n * sizeof(bf16)));
    cudaCheck(cudaMalloc(&d_y, n * sizeof(bf16)));
    cudaCheck(cudaMemcpy(d_x, h, n * sizeof(bf16), cudaMemcpyHostToDevice));
    LAUNCH(bf16_axpb_kernel, ceil_div(n / 8, 64), 64, 0, 0, d_y, d_x, 1.5f, -0.25f, n);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(g, d_y, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        got[i] = __bfloat162float(g[i]);
        want[i] = 1.5f * __bfloat162float(h[i]) - 0.25f;
    }
    test_allclose("bf16 x128 load128cs/store128", got, want, n, 1.0 / 128, 1e-3);  // bf16: 8 mantissa bits
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_y));
    free(h); free(g); free(got); free(want);
}

static void test_warp_ops(void) {
    const int n = 128, nw = n / 32;
    int h[n];
    unsigned seed = 6;
    for (int i = 0; i < n; i++) { seed = seed * 1664525u + 1013904223u; h[i] = (int)(seed >> 24) % 100; }
    int *d_in, *d_scan, *d_bcast, *d_down, *d_votes; unsigned* d_bal;
    cudaCheck(cudaMalloc(&d_in, n * sizeof(int)));
    cudaCheck(cudaMalloc(&d_scan, n * sizeof(int)));
    cudaCheck(cudaMalloc(&d_bcast, n * sizeof(int)));
    cudaCheck(cudaMalloc(&d_down, n * sizeof(int)));
    cudaCheck(cudaMalloc(&d_bal, nw * sizeof(unsigned)));
    cudaCheck(cudaMalloc(&d_votes, 2 * nw * sizeof(int)));
    cudaCheck(cudaMemcpy(d_in, h, sizeof h, cudaMemcpyHostToDevice));
    LAUNCH(warp_ops_kernel, 2, 64, 0, 0, d_scan, d_bcast, d_down, d_bal, d_votes, d_in);
    cudaCheckLast();
    int scan[n], bcast[n], down[n], votes[2 * nw]; unsigned bal[nw];
    cudaCheck(cudaMemcpy(scan, d_scan, sizeof scan, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(bcast, d_bcast, sizeof bcast, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(down, d_down, sizeof down, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(bal, d_bal, sizeof bal, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(votes, d_votes, sizeof votes, cudaMemcpyDeviceToHost));
    int bad_scan = 0, bad_bcast = 0, bad_down = 0, bad_vote = 0;
    for (int w = 0; w < nw; w++) {
        int acc = 0, any = 0, all = 1; unsigned b = 0;
        for (int l = 0; l < 32; l++) {
            int i = w * 32 + l;
            acc += h[i];
            bad_scan += scan[i] != acc;
            bad_bcast += bcast[i] != h[w * 32 + (l & 16) + 3];
            bad_down += down[i] != (l + 5 < 32 ? h[i + 5] : h[i]);
            if (h[i] % 3 == 0) b |= 1u << l;
            any |= h[i] > 90;
            all &= h[i] >= 0;
        }
        bad_vote += (bal[w] != b) + (votes[2 * w] != any) + (votes[2 * w + 1] != all);
    }
    TEST_CHECK(bad_scan == 0, "__shfl_up_sync prefix sum: %d wrong", bad_scan);
    TEST_CHECK(bad_bcast == 0, "__shfl_sync width 16: %d wrong", bad_bcast);
    TEST_CHECK(bad_down == 0, "__shfl_down_sync: %d wrong", bad_down);
    TEST_CHECK(bad_vote == 0, "ballot/any/all: %d wrong", bad_vote);
    if (!bad_scan && !bad_bcast && !bad_down && !bad_vote) printf("ok   warp shuffles (up/idx width 16/down) and votes\n");

    // __syncthreads_count / _and / _or over the threads that did not exit
    int hv[96], res[3 * 96];
    for (int i = 0; i < 96; i++) { seed = seed * 1664525u + 1013904223u; hv[i] = (int)(seed >> 24) % 110 - 5; }
    int *d_v, *d_res;
    cudaCheck(cudaMalloc(&d_v, sizeof hv));
    cudaCheck(cudaMalloc(&d_res, sizeof res));
    cudaCheck(cudaMemcpy(d_v, hv, sizeof hv, cudaMemcpyHostToDevice));
    LAUNCH(block_vote_kernel, 1, 96, 0, 0, d_res, d_v);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(res, d_res, sizeof res, cudaMemcpyDeviceToHost));
    int wc = 0, wa = 1, wo = 0, nlive = 0, bad_bv = 0;
    for (int i = 0; i < 96; i++) {
        if (hv[i] < 0) continue;
        nlive++; wc += hv[i] % 2; wa &= hv[i] >= 0; wo |= hv[i] > 95;
    }
    for (int i = 0; i < 96; i++)
        if (hv[i] >= 0) bad_bv += (res[3 * i] != wc) + (res[3 * i + 1] != wa) + (res[3 * i + 2] != wo);
    TEST_CHECK(nlive < 96 && bad_bv == 0, "__syncthreads_count/and/or with exited threads: %d wrong (%d live)", bad_bv, nlive);
    if (bad_bv == 0) printf("ok   __syncthreads_count/and/or (%d of 96 threads live, count %d)\n", nlive, wc);
    cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_res));
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_scan)); cudaCheck(cudaFree(d_bcast));
    cudaCheck(cudaFree(d_down)); cudaCheck(cudaFree(d_bal)); cudaCheck(cudaFree(d_votes));
}

static void test_index_and_launch_errors(void) {
    const int W = 16, H = 12, Z = 2;
    dim3 block(8, 4, Z), grid(W / 8, H / 4);
    int* d;
    cudaCheck(cudaMalloc(&d, W * H * Z * sizeof(int)));
    LAUNCH(index_kernel, grid, block, 0, 0, d, W, H);
    cudaCheckLast();
    int got[W * H * Z];
    cudaCheck(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int z = 0; z < Z; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int tid = (x % 8) + (y % 4) * 8 + z * 32;
                int blk = (y / 4) * (W / 8) + x / 8;
                bad += got[(z * H + y) * W + x] != tid * 1000 + blk;
            }
    TEST_CHECK(bad == 0, "3-D block / 2-D grid indices: %d wrong", bad);
    cudaCheck(cudaFree(d));

    float *d_a, *d_b, ha[40], hb[40];
    for (int i = 0; i < 40; i++) ha[i] = (float)i;
    cudaCheck(cudaMalloc(&d_a, sizeof ha));
    cudaCheck(cudaMalloc(&d_b, sizeof hb));
    cudaCheck(cudaMemcpy(d_a, ha, sizeof ha, cudaMemcpyHostToDevice));
    LAUNCH((scale_kernel<float, 3>), 2, 32, 0, 0, d_b, d_a, 0.5f, 40);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(hb, d_b, sizeof hb, cudaMemcpyDeviceToHost));
    int bad3 = 0;
    for (int i = 0; i < 40; i++) bad3 += hb[i] != 1.5f * i;
    TEST_CHECK(bad3 == 0, "template kernel launch: %d wrong", bad3);

    const float coef[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    const unsigned zero = 0;
    cudaCheck(cudaMemcpyToSymbol(c_coef, coef, sizeof coef));
    cudaCheck(cudaMemcpyToSymbol(d_launch_count, &zero, sizeof zero));
    LAUNCH(coef_kernel, 1, 40, 0, 0, d_b);
    cudaCheckLast();
    for (int i = 0; i < 3; i++) LAUNCH(count_kernel, 5, 32, 0, 0);
    cudaCheckLast();
    unsigned launches = 0;
    cudaCheck(cudaMemcpyFromSymbol(&launches, d_launch_count, sizeof launches));
    cudaCheck(cudaMemcpy(hb, d_b, sizeof hb, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 40; i++) bad3 += hb[i] != coef[i % 4] * i;
    TEST_CHECK(bad3 == 0 && launches == 15, "__constant__ / __device__ symbols: %d wrong, count %u (want 15)", bad3, launches);
    cudaCheck(cudaFree(d_a));
    cudaCheck(cudaFree(d_b));

    // launch errors are reported by cudaGetLastError, as on the GPU, and the kernel does not run
    float* o;
    cudaCheck(cudaMalloc(&o, 64 * sizeof(float)));
    cudaCheck(cudaGetLastError());
    LAUNCH(needs_64k_smem_kernel, 1, 2048, 0, 0, o);
    TEST_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block must fail");
    LAUNCH(needs_64k_smem_kernel, 1, 64, 64 * 1024, 0, o);
    TEST_CHECK(cudaGetLastError() == cudaErrorInvalidValue, "64 KB dynamic smem without the attribute must fail");
    cudaCheck(cudaFuncSetAttribute(needs_64k_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    LAUNCH(needs_64k_smem_kernel, 1, 64, 64 * 1024, 0, o);
    cudaCheckLast();
    float h[64];
    cudaCheck(cudaMemcpy(h, o, sizeof h, cudaMemcpyDeviceToHost));
    int bad2 = 0;
    for (int i = 0; i < 64; i++) bad2 += h[i] != (float)(63 - i);
    TEST_CHECK(bad2 == 0, "64 KB dynamic smem kernel after cudaFuncSetAttribute: %d wrong", bad2);
    // a copy that runs past the end of an allocation is refused
    TEST_CHECK(cudaMemcpy(h, o, 65 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
               "out-of-range cudaMemcpy must fail");
    cudaGetLastError();
    // fresh device memory is poison (NaN), so reading unwritten output shows up
    float* p;
    cudaCheck(cudaMalloc(&p, 4 * sizeof(float)));
    float hp[4];
    cudaCheck(cudaMemcpy(hp, p, sizeof hp, cudaMemcpyDeviceToHost));
    TEST_CHECK(isnan(hp[0]) && isnan(hp[3]), "cudaMalloc memory must read as NaN");
    cudaCheck(cudaFree(p));
    cudaCheck(cudaFree(o));
    if (!bad && !bad2) printf("ok   3-D block indices, launch errors, memcpy range check, NaN poison\n");
}

int main(void) {
    test_block_sum();
    test_row_reduce();
    test_dyn_smem();
    test_atomics();
    test_bf16_vec();
    test_warp_ops();
    test_index_and_launch_errors();
    return test_finish("test_harness_kernels");
}
