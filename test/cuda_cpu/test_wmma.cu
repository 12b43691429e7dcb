// Self-test of the harness' nvcuda::wmma emulation (test/cuda_cpu/cuda_cpu_wmma.h): a 2-warp
// kernel multiplies bf16 tiles in every layout combination (A row/col major, B row/col major,
// accumulator loaded and stored row/col major), with fragments of shared and global memory, a
// layout-agnostic elementwise scaling of the accumulator and a chain of k-steps; checked against
// a double-precision product on the host. Valid CUDA: `make cuda-check` compiles it with nvcc.
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <mma.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/cuda/common.cuh"
#include "test/test.h"

using namespace nvcuda;

#define M 32   // two warps, 16 rows each
#define N 32
#define K 48   // three k-steps

// out (M x N, fp32, row-major) = scale * A B + C, where A (M x K) and B (K x N) are bf16 in
// global memory in the layouts selected by la / lb (0 row-major, 1 col-major) and C is read in
// layout lc. Warp w computes rows [16 w, 16 w + 16); B is staged through shared memory.
// (raw bytes in a non-template function: a __shared__ bf16 array is a thread_local of class type
// under the harness, and g++ mishandles over-aligned thread_locals declared in templates)
__device__ inline bf16* b_stage() {
    __shared__ __align__(32) unsigned char buf[K * N * sizeof(bf16)];
    return reinterpret_cast<bf16*>(buf);
}

template <typename LA, typename LB>
__global__ void wmma_kernel(float* out, const bf16* A, const bf16* B, const float* C, float scale, int lc) {
    bf16* sB = b_stage();
    for (int i = threadIdx.x; i < K * N; i += 64) sB[i] = B[i];   // 64 threads
    __syncthreads();
    int warp = threadIdx.x / 32;
    wmma::layout_t cl = lc ? wmma::mem_col_major : wmma::mem_row_major;
    for (int n = 0; n < N / 16; n++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, c;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < K / 16; k++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> b;
            bool arow = std::is_same<LA, wmma::row_major>::value, brow = std::is_same<LB, wmma::row_major>::value;
            wmma::load_matrix_sync(a, arow ? A + (16 * warp) * K + 16 * k : A + (16 * k) * M + 16 * warp, arow ? K : M);
            wmma::load_matrix_sync(b, brow ? sB + (16 * k) * N + 16 * n : sB + (16 * n) * K + 16 * k, brow ? N : K);
            wmma::mma_sync(acc, a, b, acc);
        }
        for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= scale;   // layout-agnostic
        wmma::load_matrix_sync(c, lc ? C + (16 * n) * M + 16 * warp : C + (16 * warp) * N + 16 * n, lc ? M : N, cl);
        for (int i = 0; i < acc.num_elements; i++) acc.x[i] += c.x[i];
        wmma::store_matrix_sync(lc ? out + (16 * n) * M + 16 * warp : out + (16 * warp) * N + 16 * n, acc, lc ? M : N, cl);
    }
}

static float frand(unsigned* s) { *s = *s * 1664525u + 1013904223u; return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f; }

template <typename LA, typename LB>
static void run(int la, int lb, int lc) {
    unsigned seed = 17u + 7u * (unsigned)(la + 2 * lb + 4 * lc);
    // logical A[m][k], B[k][n], C[m][n]; bf16-exact values
    static float a[M * K], b[K * N], c[M * N];
    static bf16 ha[M * K], hb[K * N];
    static float hc[M * N], got[M * N];
    for (int i = 0; i < M * K; i++) a[i] = __bfloat162float(__float2bfloat16(frand(&seed)));
    for (int i = 0; i < K * N; i++) b[i] = __bfloat162float(__float2bfloat16(frand(&seed)));
    for (int i = 0; i < M * N; i++) c[i] = frand(&seed);
    for (int m = 0; m < M; m++) for (int k = 0; k < K; k++) ha[la ? k * M + m : m * K + k] = __float2bfloat16(a[m * K + k]);
    for (int k = 0; k < K; k++) for (int n = 0; n < N; n++) hb[lb ? n * K + k : k * N + n] = __float2bfloat16(b[k * N + n]);
    for (int m = 0; m < M; m++) for (int n = 0; n < N; n++) hc[lc ? n * M + m : m * N + n] = c[m * N + n];
    bf16 *dA, *dB;
    float *dC, *dO;
    cudaCheck(cudaMalloc(&dA, sizeof ha)); cudaCheck(cudaMalloc(&dB, sizeof hb));
    cudaCheck(cudaMalloc(&dC, sizeof hc)); cudaCheck(cudaMalloc(&dO, sizeof got));
    cudaCheck(cudaMemcpy(dA, ha, sizeof ha, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dB, hb, sizeof hb, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dC, hc, sizeof hc, cudaMemcpyHostToDevice));
    const float scale = 0.75f;
    LAUNCH((wmma_kernel<LA, LB>), 1, 64, 0, 0, dO, dA, dB, dC, scale, lc);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dO, sizeof got, cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += (double)a[m * K + k] * b[k * N + n];
            double want = scale * s + c[m * N + n];
            double g = got[lc ? n * M + m : m * N + n];
            double e = fabs(g - want);
            if (!(e <= worst)) worst = e;
        }
    // fp32 accumulation of 48 exact products of magnitude <= 1: a few ulps of the partial sums
    TEST_CHECK(worst < 1e-5, "wmma A %s, B %s, C %s: max error %g", la ? "col" : "row", lb ? "col" : "row",
               lc ? "col" : "row", worst);
    if (worst < 1e-5)
        printf("ok   wmma m16n16k16 bf16: A %s-major, B %s-major, C/D %s-major (max error %.2g)\n",
               la ? "col" : "row", lb ? "col" : "row", lc ? "col" : "row", worst);
    cudaCheck(cudaFree(dA)); cudaCheck(cudaFree(dB)); cudaCheck(cudaFree(dC)); cudaCheck(cudaFree(dO));
}

int main(void) {
    for (int lc = 0; lc < 2; lc++) {
        run<wmma::row_major, wmma::row_major>(0, 0, lc);
        run<wmma::row_major, wmma::col_major>(0, 1, lc);
        run<wmma::col_major, wmma::row_major>(1, 0, lc);
        run<wmma::col_major, wmma::col_major>(1, 1, lc);
    }
    return test_finish("test_wmma");
}
