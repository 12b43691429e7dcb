// Self-test of the harness' WMMA emulation: a tiled bf16 GEMM with fp32 accumulation on the
// tensor-core API (nvcuda::wmma, m16n16k16), A row-major and B column-major, tiles staged in
// shared memory, against a double-precision host loop. Also valid CUDA for sm_80 / sm_90
// (make cuda-check), so it is the same code path a GPU would run.
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <mma.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/cuda/common.cuh"
#include "test/test.h"

using namespace nvcuda;

#define TILE 16

// C[M,N] = A[M,K] (row-major) * B[K,N] (column-major, i.e. B^T row-major, as weights [out, in])
// + bias[N]. One warp per 16x16 output tile, 4 warps per block (a 32x32 block tile).
__global__ void wmma_gemm_kernel(float* C, const bf16* A, const bf16* Bt, const float* bias, int M, int N, int K) {
    __shared__ __align__(32) bf16 sa[2][TILE * TILE];
    __shared__ __align__(32) bf16 sb[2][TILE * TILE];
    __shared__ __align__(32) float sc[4][TILE * TILE];
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    int wr = warp / 2, wc = warp % 2;
    int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // stage the two A row tiles and two B column tiles of this k step (128 threads, 4 x 256 elements)
        for (int i = threadIdx.x; i < 2 * TILE * TILE; i += blockDim.x) {
            int t = i / (TILE * TILE), e = i % (TILE * TILE), r = e / TILE, c = e % TILE;
            sa[t][e] = A[(size_t)(row0 + t * TILE + r) * K + k0 + c];
            sb[t][e] = Bt[(size_t)(col0 + t * TILE + r) * K + k0 + c];  // column r of B = row r of B^T
        }
        __syncthreads();
        wmma::load_matrix_sync(fa, sa[wr], TILE);
        wmma::load_matrix_sync(fb, sb[wc], TILE);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncthreads();  // MUTATION-TARGET: the next k step overwrites the staged tiles
    }
    wmma::store_matrix_sync(sc[warp], acc, TILE, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < TILE * TILE; e += WARP_SIZE) {
        int r = row0 + wr * TILE + e / TILE, c = col0 + wc * TILE + e % TILE;
        C[(size_t)r * N + c] = sc[warp][e] + bias[c];
    }
}

int main(void) {
    const int M = 64, N = 96, K = 48;
    bf16* hA = (bf16*)malloc(M * K * sizeof(bf16));
    bf16* hB = (bf16*)malloc(N * K * sizeof(bf16));
    float* hbias = (float*)malloc(N * sizeof(float));
    float* got = (float*)malloc(M * N * sizeof(float));
    float* want = (float*)malloc(M * N * sizeof(float));
    unsigned s = 11;
    for (int i = 0; i < M * K; i++) { s = s * 1664525u + 1013904223u; hA[i] = __float2bfloat16(((int)(s >> 9) % 2001 - 1000) / 500.0f); }
    for (int i = 0; i < N * K; i++) { s = s * 1664525u + 1013904223u; hB[i] = __float2bfloat16(((int)(s >> 9) % 2001 - 1000) / 700.0f); }
    for (int i = 0; i < N; i++) hbias[i] = 0.01f * i;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            double a = hbias[c];
            for (int k = 0; k < K; k++) a += (double)__bfloat162float(hA[r * K + k]) * __bfloat162float(hB[c * K + k]);
            want[r * N + c] = (float)a;
        }
    bf16 *dA, *dB; float *dC, *dbias;
    cudaCheck(cudaMalloc(&dA, M * K * sizeof(bf16)));
    cudaCheck(cudaMalloc(&dB, N * K * sizeof(bf16)));
    cudaCheck(cudaMalloc(&dbias, N * sizeof(float)));
    cudaCheck(cudaMalloc(&dC, M * N * sizeof(float)));
    cudaCheck(cudaMemcpy(dA, hA, M * K * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dB, hB, N * K * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dbias, hbias, N * sizeof(float), cudaMemcpyHostToDevice));
    LAUNCH(wmma_gemm_kernel, dim3(N / 32, M / 32), 128, 0, 0, dC, dA, dB, dbias, M, N, K);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dC, M * N * sizeof(float), cudaMemcpyDeviceToHost));
    // inputs are exact bf16 values, products are exact in fp32: only the fp32 sums round
    test_allclose("wmma bf16 GEMM m16n16k16 + bias", got, want, M * N, 1e-5, 1e-5);
    cudaCheck(cudaFree(dA)); cudaCheck(cudaFree(dB)); cudaCheck(cudaFree(dbias)); cudaCheck(cudaFree(dC));
    free(hA); free(hB); free(hbias); free(got); free(want);
    return test_finish("test_harness_wmma");
}
