// Self-test of llmc/cuda/ptx.cuh (and so of the harness' emulation, test/cuda_cpu/cuda_cpu_ptx.h):
// every wrapper against a reference written here from the PTX ISA 9.0 itself, not from the
// emulation's code:
//  - mma.m16n8k16 bf16: registers built from whole matrices by the ISA's per-element formulas
//    ("Matrix Fragments for mma.m16n8k16 with floating point type"), two warps with their own
//    data, three accumulate steps; small integers (exact) and random bf16 (tolerance);
//  - ldmatrix x1 / x2 / x4, with and without .trans: a shared tile of distinct 16-bit values whose
//    rows the lanes give in a scrambled order (rows need not be contiguous), bit-exact, per the
//    ISA's thread-to-row table and fragment figure ("Warp-level matrix load instruction:
//    ldmatrix"); registers beyond .num stay untouched;
//  - llmc/cuda/README.md's recipes: A by ldmatrix.x4, B from an n-major tile by x2 and from a
//    k-major tile by x2.trans, and an accumulator repacked as the next A (FlashAttention's P),
//    against host products;
//  - cp.async: data not there before its wait_group, there after; wait_group N leaves the newest
//    N groups (and the uncommitted copies) pending; zero fill with src_bytes 0 / 4 / 8 / 12 / 16,
//    read by another thread after wait + __syncthreads;
//  - cvt.rn.bf16x2.f32: rounding ties to even, overflow, subnormals, NaN (with payloads that
//    truncation would turn into infinity), lo / hi placement, against the rounding rule written
//    out and the toolkit's own host conversion;
//  - ex2.approx.ftz.f32: the ISA's special cases exactly (+-0 and subnormal inputs give 1, -inf
//    gives +0, +inf +inf, NaN NaN, results below 2^-126 +0), and random inputs over the whole
//    normal range and the softmax's range within the ISA's documented 2 ulp of the correctly
//    rounded 2^x (computed in double);
//  - (harness only) the bank-conflict counter of cuda_cpu.h: exact ldmatrix and cp.async counts
//    on layouts with 8-, 4- and 2-way conflicts, conflict-free ones (dense, XOR-swizzled) and
//    broadcasts, two warps of several blocks, and lanes that issue different numbers of copies.
// The harness-only expectations (data NOT yet there) are under CUDA_CPU_HARNESS: on a GPU the
// copy may have landed already. Valid CUDA for sm_80 / sm_90: `make cuda-check` compiles it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"
#include "test/test.h"

// ---------------------------------------------------------------------------------------------
// the ISA's fragment tables, as the ISA writes them (groupID = %laneid >> 2,
// threadID_in_group = %laneid % 4); element i of a lane sits in register i / 2, low half if i even

static void isa_a_elem(int lane, int i, int* row, int* col) {  // a0..a7 of A (16x16)
    int groupID = lane >> 2, threadID_in_group = lane % 4;
    *row = (i < 2 || (i >= 4 && i < 6)) ? groupID : groupID + 8;
    *col = i < 4 ? threadID_in_group * 2 + (i & 0x1) : threadID_in_group * 2 + (i & 0x1) + 8;
}
static void isa_b_elem(int lane, int i, int* row, int* col) {  // b0..b3 of B (16x8)
    int groupID = lane >> 2, threadID_in_group = lane % 4;
    *row = i < 2 ? threadID_in_group * 2 + (i & 0x1) : threadID_in_group * 2 + (i & 0x1) + 8;
    *col = groupID;
}
static void isa_c_elem(int lane, int i, int* row, int* col) {  // c0..c3 of C / D (16x8 fp32)
    int groupID = lane >> 2, threadID_in_group = lane % 4;
    *row = i < 2 ? groupID : groupID + 8;
    *col = threadID_in_group * 2 + (i & 0x1);
}

static uint16_t host_bf16_bits(float f) {  // the toolkit's host conversion (round to nearest even)
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    uint16_t u;
    memcpy(&u, &b, 2);
    return u;
}
static float bits_float(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }
static uint32_t float_bits(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }
static float bf16_float(uint16_t h) { return bits_float((uint32_t)h << 16); }

// ---------------------------------------------------------------------------------------------
// mma: warp w (of MMA_WARPS) computes D_w = C_w + sum over steps s of A_ws B_ws

#define MMA_WARPS 2
#define MMA_STEPS 3

__global__ void mma_kernel(float* out, const uint32_t* a, const uint32_t* b, const float* c) {
    int tid = threadIdx.x, n = blockDim.x;
    float d[4] = {c[4 * tid], c[4 * tid + 1], c[4 * tid + 2], c[4 * tid + 3]};
    for (int s = 0; s < MMA_STEPS; s++) {
        const uint32_t* pa = a + ((size_t)s * n + tid) * 4;
        const uint32_t* pb = b + ((size_t)s * n + tid) * 2;
        uint32_t ar[4] = {pa[0], pa[1], pa[2], pa[3]};
        uint32_t br[2] = {pb[0], pb[1]};
        ptx_mma_bf16_16816(d, ar, br);
    }
    for (int i = 0; i < 4; i++) out[4 * tid + i] = d[i];
}

// Matrices of one run: A[w][s][16][16], B[w][s][16][8] (bf16 values), C[w][16][8].
struct MmaCase {
    float A[MMA_WARPS][MMA_STEPS][16][16], B[MMA_WARPS][MMA_STEPS][16][8], C[MMA_WARPS][16][8];
};

static float mma_value(TestRng* r, int integer, float scale) {
    if (integer) return (float)((int)(test_rand_u64(r) % 7) - 3) * scale;  // -3..3
    return bf16_float(host_bf16_bits((float)(2.0 * test_rand_uniform(r) - 1.0) * scale));
}

static void mma_run(const char* what, int integer, uint64_t seed, double atol) {
    const int n = 32 * MMA_WARPS;
    static MmaCase m;
    static uint32_t ha[MMA_STEPS * n * 4], hb[MMA_STEPS * n * 2];
    static float hc[n * 4], got[n * 4], want[n * 4];
    TestRng r = {seed, 0};
    for (int w = 0; w < MMA_WARPS; w++) {
        for (int s = 0; s < MMA_STEPS; s++) {
            for (int i = 0; i < 16 * 16; i++) m.A[w][s][i / 16][i % 16] = mma_value(&r, integer, 1.0f);
            for (int i = 0; i < 16 * 8; i++) m.B[w][s][i / 8][i % 8] = mma_value(&r, integer, 1.0f);
        }
        for (int i = 0; i < 16 * 8; i++) m.C[w][i / 8][i % 8] = mma_value(&r, integer, 7.0f);
    }
    memset(ha, 0, sizeof ha);
    memset(hb, 0, sizeof hb);
    for (int w = 0; w < MMA_WARPS; w++)
        for (int lane = 0; lane < 32; lane++) {
            int t = 32 * w + lane, row, col;
            for (int s = 0; s < MMA_STEPS; s++) {
                for (int i = 0; i < 8; i++) {
                    isa_a_elem(lane, i, &row, &col);
                    ha[((size_t)s * n + t) * 4 + i / 2] |= (uint32_t)host_bf16_bits(m.A[w][s][row][col]) << (16 * (i & 1));
                }
                for (int i = 0; i < 4; i++) {
                    isa_b_elem(lane, i, &row, &col);
                    hb[((size_t)s * n + t) * 2 + i / 2] |= (uint32_t)host_bf16_bits(m.B[w][s][row][col]) << (16 * (i & 1));
                }
            }
            for (int i = 0; i < 4; i++) {
                isa_c_elem(lane, i, &row, &col);
                hc[4 * t + i] = m.C[w][row][col];
                double acc = m.C[w][row][col];
                for (int s = 0; s < MMA_STEPS; s++)
                    for (int k = 0; k < 16; k++) acc += (double)m.A[w][s][row][k] * m.B[w][s][k][col];
                want[4 * t + i] = (float)acc;
            }
        }
    uint32_t *da, *db;
    float *dc, *dout;
    cudaCheck(cudaMalloc(&da, sizeof ha)); cudaCheck(cudaMalloc(&db, sizeof hb));
    cudaCheck(cudaMalloc(&dc, sizeof hc)); cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dc, hc, sizeof hc, cudaMemcpyHostToDevice));
    LAUNCH(mma_kernel, 1, n, 0, 0, dout, da, db, dc);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    test_allclose(what, got, want, n * 4, 0.0, atol);
    cudaCheck(cudaFree(da)); cudaCheck(cudaFree(db)); cudaCheck(cudaFree(dc)); cudaCheck(cudaFree(dout));
}

// ---------------------------------------------------------------------------------------------
// ldmatrix: one warp; lane l gives the address of tile row rowsel[l] (a permutation of the rows)

#define LDSM_ROWS 32  // 16-byte rows (8 x 16 bits) of the shared tile

__device__ __forceinline__ unsigned char* dyn_smem() {
#if defined(__CUDACC__)
    extern __shared__ __align__(16) unsigned char smem[];
#else
    extern __shared__ unsigned char smem[];  // the harness' buffer is 256-byte aligned
#endif
    return smem;
}

// variant: number of matrices (1, 2, 4) + 8 for .trans
__global__ void ldmatrix_kernel(uint32_t* out, const uint16_t* tile, const int* rowsel, int variant) {
    uint16_t* s = (uint16_t*)dyn_smem();
    for (int i = threadIdx.x; i < LDSM_ROWS * 8; i += blockDim.x) s[i] = tile[i];
    __syncthreads();
    int lane = threadIdx.x;
    const void* p = s + rowsel[lane] * 8;
    uint32_t r[4] = {0u, 0u, 0u, 0u};
    switch (variant) {
        case 1: ptx_ldmatrix_x1(r, p); break;
        case 2: ptx_ldmatrix_x2(r, p); break;
        case 4: ptx_ldmatrix_x4(r, p); break;
        case 9: ptx_ldmatrix_x1_trans(r, p); break;
        case 10: ptx_ldmatrix_x2_trans(r, p); break;
        case 12: ptx_ldmatrix_x4_trans(r, p); break;
        default: break;
    }
    for (int j = 0; j < 4; j++) out[4 * lane + j] = r[j];
}

// The ISA's tables: matrix j's row i is at the address thread 8j + i gives; without .trans a
// group of four threads holds one row (thread l: row l / 4, elements 2 (l % 4) and the next);
// .trans loads the matrix column-major (thread l: column l / 4, rows 2 (l % 4) and the next).
static uint32_t isa_ldmatrix_reg(const uint16_t* tile, const int* rowsel, int lane, int j, int trans) {
    const uint16_t* rowp[8];
    for (int i = 0; i < 8; i++) rowp[i] = tile + rowsel[8 * j + i] * 8;
    uint16_t lo, hi;
    if (!trans) { lo = rowp[lane / 4][2 * (lane % 4)]; hi = rowp[lane / 4][2 * (lane % 4) + 1]; }
    else { lo = rowp[2 * (lane % 4)][lane / 4]; hi = rowp[2 * (lane % 4) + 1][lane / 4]; }
    return (uint32_t)lo | (uint32_t)hi << 16;
}

static void ldmatrix_run(int nmat, int trans) {
    uint16_t tile[LDSM_ROWS * 8];
    int rowsel[32];
    uint32_t got[32 * 4];
    for (int i = 0; i < LDSM_ROWS * 8; i++) tile[i] = (uint16_t)(0x3f00 + 3 * i);  // distinct
    for (int l = 0; l < 32; l++) rowsel[l] = (l * 13 + 5) % LDSM_ROWS;          // a permutation
    uint16_t* dtile;
    int* drows;
    uint32_t* dout;
    cudaCheck(cudaMalloc(&dtile, sizeof tile)); cudaCheck(cudaMalloc(&drows, sizeof rowsel));
    cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMemcpy(dtile, tile, sizeof tile, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(drows, rowsel, sizeof rowsel, cudaMemcpyHostToDevice));
    LAUNCH(ldmatrix_kernel, 1, 32, sizeof tile, 0, dout, dtile, drows, nmat + 8 * trans);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < 4; j++) {
            uint32_t want = j < nmat ? isa_ldmatrix_reg(tile, rowsel, l, j, trans) : 0u;
            if (got[4 * l + j] != want && bad++ < 4)
                fprintf(stderr, "  ldmatrix.x%d%s lane %d r[%d]: got 0x%08x want 0x%08x\n", nmat,
                        trans ? ".trans" : "", l, j, got[4 * l + j], want);
        }
    TEST_CHECK(bad == 0, "ldmatrix.x%d%s: %d registers wrong", nmat, trans ? ".trans" : "", bad);
    if (!bad) printf("ok   ldmatrix.x%d%s (32 lanes, scrambled rows, bit-exact)\n", nmat, trans ? ".trans" : "");
    cudaCheck(cudaFree(dtile)); cudaCheck(cudaFree(drows)); cudaCheck(cudaFree(dout));
}

// ---------------------------------------------------------------------------------------------
// the recipes of llmc/cuda/README.md: D1 = A Bn (B stored n-major), D2 = A Bk (B stored k-major), and
// D3 = bf16([D1 | D2]) Bk with [D1 | D2] repacked from the accumulators as an A fragment

__device__ __forceinline__ void recipe_stage(uint16_t* s, const uint16_t* g, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = g[i];
}

__global__ void recipe_kernel(float* out, const uint16_t* A, const uint16_t* Bn, const uint16_t* Bk) {
    __shared__ __align__(16) uint16_t sA[16 * 16];  // A[m][k]
    __shared__ __align__(16) uint16_t sBn[8 * 16];  // B[k][n] stored as [n][k]
    __shared__ __align__(16) uint16_t sBk[16 * 8];  // B[k][n] stored as [k][n]
    recipe_stage(sA, A, 16 * 16);
    recipe_stage(sBn, Bn, 8 * 16);
    recipe_stage(sBk, Bk, 16 * 8);
    __syncthreads();
    int lane = threadIdx.x;
    uint32_t a[4], bn[2], bk[2];
    ptx_ldmatrix_x4(a, sA + (lane & 15) * 16 + (lane >> 4) * 8);
    ptx_ldmatrix_x2(bn, sBn + (lane & 7) * 16 + ((lane >> 3) & 1) * 8);
    ptx_ldmatrix_x2_trans(bk, sBk + (lane & 15) * 8);
    float d1[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d2[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d3[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    ptx_mma_bf16_16816(d1, a, bn);
    ptx_mma_bf16_16816(d2, a, bk);
    uint32_t p[4] = {ptx_pack_bf16x2(d1[0], d1[1]), ptx_pack_bf16x2(d1[2], d1[3]),
                     ptx_pack_bf16x2(d2[0], d2[1]), ptx_pack_bf16x2(d2[2], d2[3])};
    ptx_mma_bf16_16816(d3, p, bk);
    for (int i = 0; i < 4; i++) {
        out[lane * 12 + i] = d1[i];
        out[lane * 12 + 4 + i] = d2[i];
        out[lane * 12 + 8 + i] = d3[i];
    }
}

static void recipe_run(void) {
    uint16_t hA[16 * 16], hBn[8 * 16], hBk[16 * 8];
    float A[16][16], B1[16][8], B2[16][8], P[16][16];
    float got[32 * 12], want[32 * 12];
    TestRng r = {77, 0};
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) { A[m][k] = mma_value(&r, 1, 1.0f); hA[m * 16 + k] = host_bf16_bits(A[m][k]); }
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) {
            B1[k][n] = mma_value(&r, 1, 1.0f); hBn[n * 16 + k] = host_bf16_bits(B1[k][n]);
            B2[k][n] = mma_value(&r, 1, 1.0f); hBk[k * 8 + n] = host_bf16_bits(B2[k][n]);
        }
    for (int m = 0; m < 16; m++)  // P = [A B1 | A B2], exact integers (|x| <= 144: bf16-exact)
        for (int n = 0; n < 16; n++) {
            double acc = 0.0;
            for (int k = 0; k < 16; k++) acc += (double)A[m][k] * (n < 8 ? B1[k][n] : B2[k][n - 8]);
            P[m][n] = bf16_float(host_bf16_bits((float)acc));
        }
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            int row, col;
            isa_c_elem(lane, i, &row, &col);
            double d3 = 0.0;
            for (int k = 0; k < 16; k++) d3 += (double)P[row][k] * B2[k][col];
            want[lane * 12 + i] = P[row][col];
            want[lane * 12 + 4 + i] = P[row][8 + col];
            want[lane * 12 + 8 + i] = (float)d3;
        }
    uint16_t *dA, *dBn, *dBk;
    float* dout;
    cudaCheck(cudaMalloc(&dA, sizeof hA)); cudaCheck(cudaMalloc(&dBn, sizeof hBn));
    cudaCheck(cudaMalloc(&dBk, sizeof hBk)); cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dBn, hBn, sizeof hBn, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dBk, hBk, sizeof hBk, cudaMemcpyHostToDevice));
    LAUNCH(recipe_kernel, 1, 32, 0, 0, dout, dA, dBn, dBk);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    test_allclose("ldmatrix x4 (A) / x2 (n-major B) / x2.trans (k-major B) + mma + accumulator repacked as A (exact)",
                  got, want, 32 * 12, 0.0, 0.0);
    cudaCheck(cudaFree(dA)); cudaCheck(cudaFree(dBn)); cudaCheck(cudaFree(dBk)); cudaCheck(cudaFree(dout));
}

// ---------------------------------------------------------------------------------------------
// cp.async groups: thread t copies chunk q * n + t (16 bytes) for q = 0..3: chunks 0, 1, 2 in
// groups of their own, chunk 3 issued but not committed. After each stage every thread records
// the first word of its 4 chunks.

#define CP_STAGES 5

__device__ __forceinline__ void cp_record(uint32_t* out, const uint4* s, int stage) {
    int t = threadIdx.x, n = blockDim.x;
    for (int q = 0; q < 4; q++) out[((size_t)stage * 4 + q) * n + t] = s[q * n + t].x;
}

__global__ void cp_async_groups_kernel(uint32_t* out, const uint4* src) {
    uint4* s = (uint4*)dyn_smem();
    int t = threadIdx.x, n = blockDim.x;
    for (int q = 0; q < 3; q++) {
        ptx_cp_async_16(&s[q * n + t], &src[q * n + t]);
        ptx_cp_async_commit();
    }
    ptx_cp_async_16(&s[3 * n + t], &src[3 * n + t]);
    cp_record(out, s, 0);  // (reading a destination before its wait: only to show the harness' model)
    ptx_cp_async_wait<2>();
    cp_record(out, s, 1);
    ptx_cp_async_wait<1>();
    cp_record(out, s, 2);
    ptx_cp_async_wait<0>();
    cp_record(out, s, 3);
    ptx_cp_async_commit();
    ptx_cp_async_wait<0>();
    cp_record(out, s, 4);
}

static void cp_async_groups_run(void) {
    const int n = 64;
    static uint4 src[4 * n];
    static uint32_t got[CP_STAGES * 4 * n];
    for (int i = 0; i < 4 * n; i++) src[i] = make_uint4(0x1000u + i, 0u, 0u, 0u);
    uint4* dsrc;
    uint32_t* dout;
    cudaCheck(cudaMalloc(&dsrc, sizeof src)); cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMemcpy(dsrc, src, sizeof src, cudaMemcpyHostToDevice));
    LAUNCH(cp_async_groups_kernel, 1, n, sizeof src, 0, dout, dsrc);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    // chunk q is complete from stage q + 1 on (chunk 3 only at stage 4: it was committed late)
    static const int done_at[4] = {1, 2, 3, 4};
    int bad_data = 0, bad_early = 0;
    for (int stage = 0; stage < CP_STAGES; stage++)
        for (int q = 0; q < 4; q++)
            for (int t = 0; t < n; t++) {
                uint32_t v = got[((size_t)stage * 4 + q) * n + t];
                if (stage >= done_at[q]) bad_data += v != src[q * n + t].x;
                else bad_early += v != 0xffffffffu;  // dynamic shared memory's poison: not written yet
            }
    TEST_CHECK(bad_data == 0, "cp.async: %d words not there after the wait_group that completes them", bad_data);
#if defined(CUDA_CPU_HARNESS)
    TEST_CHECK(bad_early == 0, "cp.async: %d words there before their wait_group (wait_group N must leave the "
               "newest N groups and the uncommitted copies pending)", bad_early);
#endif
    if (bad_data == 0 && bad_early == 0)
        printf("ok   cp.async: wait_group 2 / 1 / 0 complete the oldest groups only; uncommitted copies wait for a commit\n");
    cudaCheck(cudaFree(dsrc)); cudaCheck(cudaFree(dout));
}

// Thread t of block b copies src chunk b n + t (src_bytes of it, zero fill after) to shared chunk
// (t + 1) % n, which thread t + 1 reads after the wait and a __syncthreads. Several blocks: under
// TSan with CUDA_CPU_THREADS=2 they run on two OS threads at once.
__global__ void cp_async_fill_kernel(uint4* out, const uint4* src, const int* src_bytes) {
    uint4* s = (uint4*)dyn_smem();
    int t = threadIdx.x, n = blockDim.x, g = blockIdx.x * n + t;
    ptx_cp_async_16(&s[(t + 1) % n], &src[g], src_bytes[g]);
    ptx_cp_async_commit();
    ptx_cp_async_wait<0>();
    __syncthreads();
    out[g] = s[t];
}

static void cp_async_fill_run(void) {
    const int nb = 4, n = 64, total = nb * n;
    static uint4 src[total], got[total];
    static int bytes[total];
    for (int t = 0; t < total; t++) {
        src[t] = make_uint4(0xa0000000u + 4 * t, 0xb0000000u + 4 * t, 0xc0000000u + 4 * t, 0xd0000000u + 4 * t);
        bytes[t] = 4 * (t % 5);  // 0, 4, 8, 12, 16
    }
    uint4 *dsrc, *dout;
    int* dbytes;
    cudaCheck(cudaMalloc(&dsrc, sizeof src)); cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMalloc(&dbytes, sizeof bytes));
    cudaCheck(cudaMemcpy(dsrc, src, sizeof src, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dbytes, bytes, sizeof bytes, cudaMemcpyHostToDevice));
    LAUNCH(cp_async_fill_kernel, nb, n, n * sizeof(uint4), 0, dout, dsrc, dbytes);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int t = 0; t < total; t++) {
        int from = t / n * n + (t % n + n - 1) % n;
        const uint32_t* g = &got[t].x;
        const uint32_t* w = &src[from].x;
        for (int k = 0; k < 4; k++) bad += g[k] != (4 * k < bytes[from] ? w[k] : 0u);
    }
    TEST_CHECK(bad == 0, "cp.async zero fill: %d of %d words wrong", bad, 4 * total);
    if (!bad) printf("ok   cp.async src_bytes 0 / 4 / 8 / 12 / 16: copied, then zero-filled; seen by the next thread after wait + __syncthreads\n");
    cudaCheck(cudaFree(dsrc)); cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(dbytes));
}

// ---------------------------------------------------------------------------------------------
// The ptx_saddr forms: ldmatrix_x4[_trans]_at and cp_async_16_at give what the pointer forms give;
// a warp's st.shared.b32 words (lane l at word 5l mod 32 of a 128-byte line, so every lane's
// word lands somewhere else) are read back, after __syncwarp, by ld.shared.v4 (lane l: the
// line's 16 bytes l % 8), and an address XORed with a chunk's bits reaches that chunk.

__global__ void saddr_kernel(uint32_t* out, const uint4* src) {
    unsigned char* s = dyn_smem();
    const int l = threadIdx.x;
    ptx_cp_async_16_at(ptx_saddr_of(s + 16 * l), src + l);
    ptx_cp_async_commit();
    ptx_cp_async_wait<0>();
    __syncthreads();
    uint32_t a[4], b[4], c[4], d[4];
    const unsigned char* row = s + 16 * (l & 15) + 256 * (l >> 4);   // x4: 4 matrices, 8 rows each
    ptx_ldmatrix_x4(a, row);
    ptx_ldmatrix_x4_at(b, ptx_saddr_of(row));
    ptx_ldmatrix_x4_trans(c, row);
    ptx_ldmatrix_x4_trans_at(d, ptx_saddr_of(row));
    int same = 1;
    for (int k = 0; k < 4; k++) same &= a[k] == b[k] && c[k] == d[k];
    unsigned char* line = s + 512;
    ptx_st_shared_b32(ptx_saddr_of(line + 4 * ((5 * l) % 32)), 0xc0de0000u + l);
    __syncwarp();
    uint32_t v[4];
    ptx_ld_shared_v4(v, ptx_saddr_of(line) ^ (ptx_saddr)(16 * (l % 8)));   // chunk l % 8 of the line, by XOR
    for (int k = 0; k < 4; k++) out[4 * l + k] = v[k];
    out[128 + l] = same;
}

static void saddr_run(void) {
    uint4 src[32];
    for (int i = 0; i < 32; i++) src[i] = make_uint4(4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3);
    uint4* dsrc;
    uint32_t* dout;
    uint32_t got[160];
    cudaCheck(cudaMalloc(&dsrc, sizeof src));
    cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMemcpy(dsrc, src, sizeof src, cudaMemcpyHostToDevice));
    LAUNCH(saddr_kernel, 1, 32, 1024, 0, dout, dsrc);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    int bad_ld = 0, bad_st = 0;
    for (int l = 0; l < 32; l++) {
        bad_ld += got[128 + l] != 1;
        for (int k = 0; k < 4; k++) {   // word 4 (l % 8) + k of the line was written by the lane m with 5m = w (mod 32)
            const int w = 4 * (l % 8) + k;
            int m = 0;
            while ((5 * m) % 32 != w) m++;
            bad_st += got[4 * l + k] != 0xc0de0000u + (uint32_t)m;
        }
    }
    TEST_CHECK(bad_ld == 0, "ldmatrix_x4[_trans]_at differ from the pointer forms in %d lanes", bad_ld);
    TEST_CHECK(bad_st == 0, "st.shared.b32 / ld.shared.v4 (XORed address) round trip: %d of 128 words wrong", bad_st);
    if (!bad_ld && !bad_st)
        printf("ok   ptx_saddr forms: ldmatrix _at = pointer form, cp.async _at, st.shared.b32 -> __syncwarp -> ld.shared.v4\n");
    cudaCheck(cudaFree(dsrc));
    cudaCheck(cudaFree(dout));
}

// ---------------------------------------------------------------------------------------------
// The harness' bank-conflict counter (cuda_cpu.h: CudaCpuSmemStats), harness only: exact counts
// for layouts whose wavefronts follow from the bank rule by hand (32 banks of 4 bytes; 8 rows
// or 8 lanes' 16-byte accesses in 8 different 16-byte bank groups take one wavefront, else as
// many as the most distinct addresses in one group; one address is one access).

#if defined(CUDA_CPU_HARNESS)
#define BANK_SMEM 8192

enum BankLayout { BANK_DENSE, BANK_STRIDE128, BANK_SWIZZLED, BANK_STRIDE64, BANK_STRIDE32, BANK_SAME };

// Byte offset of lane l's ldmatrix row or cp.async destination.
__device__ __forceinline__ int bank_off(int layout, int l) {
    switch (layout) {
        case BANK_DENSE: return 16 * l;                             // 8 consecutive chunks: 8 groups
        case BANK_STRIDE128: return 128 * l;                        // all in group 0: 8-way
        case BANK_SWIZZLED: return 128 * l + 16 * (l & 7);          // chunk 0 of 128-byte rows at 0 ^ (row % 8)
        case BANK_STRIDE64: return 64 * l;                          // groups 0, 4: 4-way
        case BANK_STRIDE32: return 32 * l;                          // groups 0, 2, 4, 6: 2-way
        default: return 0;                                          // one address for all (broadcast)
    }
}

__global__ void bank_ldsm_kernel(uint32_t* out, int layout, int variant) {
    uint32_t* s = (uint32_t*)dyn_smem();
    for (int i = threadIdx.x; i < BANK_SMEM / 4; i += blockDim.x) s[i] = (uint32_t)i;
    __syncthreads();
    const void* p = (const char*)s + bank_off(layout, threadIdx.x % 32);
    uint32_t r[4] = {0u, 0u, 0u, 0u};
    switch (variant) {
        case 1: ptx_ldmatrix_x1(r, p); break;
        case 2: ptx_ldmatrix_x2(r, p); break;
        case 4: ptx_ldmatrix_x4(r, p); break;
        default: ptx_ldmatrix_x4_trans(r, p); break;
    }
    out[threadIdx.x] = r[0] ^ r[1] ^ r[2] ^ r[3];
}

// Warp w copies with layout (w ? layout1 : layout0) from its first `lanes` lanes, into its own
// 4 KB. uneven: the lse / D pattern of the attention's dK/dV kernel instead: lanes 0-11 issue one
// more copy than the others before the commit, then every lane issues a conflict-free copy
// (placed so that lanes 12-15's copies would share bank groups with lanes 8-11's extra ones if
// the counter paired each lane's copies by their count from the kernel's start).
__global__ void bank_cp_kernel(const uint4* src, int layout0, int layout1, int lanes, int uneven) {
    unsigned char* s = dyn_smem() + 4096 * (threadIdx.x / 32);
    const int l = threadIdx.x % 32, layout = threadIdx.x / 32 ? layout1 : layout0;
    if (l < lanes) ptx_cp_async_16(s + bank_off(layout, l), src + l);
    if (uneven) {
        if (l < 12) ptx_cp_async_16(s + 512 + 16 * l, src + l);
        ptx_cp_async_commit();
        ptx_cp_async_16(s + 1024 + 64 + 16 * l, src + l);
    }
    ptx_cp_async_commit();
    ptx_cp_async_wait<0>();
}

// One warp: a 4-byte store from every lane at byte `stride` l (4: dense; 8: two words a bank;
// 128: one bank), or (stride 0) a 16-byte load at the layout's offset.
__global__ void bank_plain_kernel(uint32_t* out, int layout, int stride) {
    unsigned char* s = dyn_smem();
    const int l = threadIdx.x;
    if (!stride) {
        uint32_t v[4];
        ptx_ld_shared_v4(v, ptx_saddr_of(s + bank_off(layout, l)));
        out[l] = v[0];
        return;
    }
    ptx_st_shared_b32(ptx_saddr_of(s + stride * l), (uint32_t)l);
}

static int bank_same(const CudaCpuSmemStats& a, const CudaCpuSmemStats& b) { return !memcmp(&a, &b, sizeof a); }

static void bank_check(const char* what, const char* kernel, CudaCpuSmemStats want) {
    CudaCpuSmemStats got = cuda_cpu_smem_stats(kernel), all = cuda_cpu_smem_stats(NULL);
    TEST_CHECK(bank_same(got, want) && bank_same(all, want),
               "bank counter, %s: got ldmatrix %ld instr %ld / %ld wavefronts, cp.async %ld instr %ld / %ld, st %ld %ld / %ld, "
               "ld %ld %ld / %ld (all kernels: %ld %ld / %ld, %ld %ld / %ld); want %ld %ld / %ld, %ld %ld / %ld, %ld %ld / %ld, "
               "%ld %ld / %ld", what, got.ldsm, got.ldsm_ideal, got.ldsm_wavefronts, got.cp, got.cp_ideal, got.cp_wavefronts,
               got.st, got.st_ideal, got.st_wavefronts, got.ld, got.ld_ideal, got.ld_wavefronts, all.ldsm, all.ldsm_ideal,
               all.ldsm_wavefronts, all.cp, all.cp_ideal, all.cp_wavefronts, want.ldsm, want.ldsm_ideal, want.ldsm_wavefronts,
               want.cp, want.cp_ideal, want.cp_wavefronts, want.st, want.st_ideal, want.st_wavefronts, want.ld, want.ld_ideal,
               want.ld_wavefronts);
    if (bank_same(got, want) && bank_same(all, want))
        printf("ok   bank counter, %s: ldmatrix %ld extra wavefronts, cp.async %ld, st.shared %ld, ld.shared.v4 %ld\n", what,
               got.ldsm_wavefronts - got.ldsm_ideal, got.cp_wavefronts - got.cp_ideal, got.st_wavefronts - got.st_ideal,
               got.ld_wavefronts - got.ld_ideal);
}

// One warp, one ldmatrix: nmat matrices of 8 rows, `per` wavefronts each.
static void bank_ldsm_case(const char* what, int layout, int variant, int per) {
    uint32_t* dout;
    cudaCheck(cudaMalloc(&dout, 32 * sizeof(uint32_t)));
    cuda_cpu_smem_stats_reset();
    LAUNCH(bank_ldsm_kernel, 1, 32, BANK_SMEM, 0, dout, layout, variant);
    cudaCheckLast();
    const long nmat = variant > 4 ? 4 : variant;
    CudaCpuSmemStats want = {};
    want.ldsm = 1;
    want.ldsm_ideal = nmat;
    want.ldsm_wavefronts = nmat * per;
    bank_check(what, "bank_ldsm_kernel", want);
    cudaCheck(cudaFree(dout));
}

static CudaCpuSmemStats cp_want(long cp, long ideal, long wavefronts) {
    CudaCpuSmemStats w = {};
    w.cp = cp;
    w.cp_ideal = ideal;
    w.cp_wavefronts = wavefronts;
    return w;
}

static void bank_cp_case(const char* what, int nblocks, int layout0, int layout1, int lanes, int uneven,
                         CudaCpuSmemStats want_per_block) {
    uint4* dsrc;
    cudaCheck(cudaMalloc(&dsrc, 32 * sizeof(uint4)));
    cudaCheck(cudaMemset(dsrc, 0, 32 * sizeof(uint4)));
    cuda_cpu_smem_stats_reset();
    LAUNCH(bank_cp_kernel, nblocks, layout0 == layout1 ? 32 : 64, BANK_SMEM, 0, dsrc, layout0, layout1, lanes, uneven);
    cudaCheckLast();
    CudaCpuSmemStats w = want_per_block;
    w.cp *= nblocks;
    w.cp_ideal *= nblocks;
    w.cp_wavefronts *= nblocks;
    bank_check(what, "bank_cp_kernel", w);
    cudaCheck(cudaFree(dsrc));
}

// One warp, one st.shared.b32 (stride > 0) or ld.shared.v4 (layout) with the given wavefronts.
static void bank_plain_case(const char* what, int layout, int stride, long wavefronts) {
    uint32_t* dout;
    cudaCheck(cudaMalloc(&dout, 32 * sizeof(uint32_t)));
    cuda_cpu_smem_stats_reset();
    LAUNCH(bank_plain_kernel, 1, 32, BANK_SMEM, 0, dout, layout, stride);
    cudaCheckLast();
    CudaCpuSmemStats want = {};
    if (!stride) { want.ld = 1; want.ld_ideal = 4; want.ld_wavefronts = wavefronts; }
    else { want.st = 1; want.st_ideal = 1; want.st_wavefronts = wavefronts; }
    bank_check(what, "bank_plain_kernel", want);
    cudaCheck(cudaFree(dout));
}

static void bank_run(void) {
    bank_ldsm_case("ldmatrix.x4, rows 128 bytes apart (8-way: 7 extra a matrix)", BANK_STRIDE128, 4, 8);
    bank_ldsm_case("ldmatrix.x4.trans, rows 128 bytes apart", BANK_STRIDE128, 12, 8);
    bank_ldsm_case("ldmatrix.x2, rows 64 bytes apart (4-way)", BANK_STRIDE64, 2, 4);
    bank_ldsm_case("ldmatrix.x1, rows 32 bytes apart (2-way; lanes 8-31 not read)", BANK_STRIDE32, 1, 2);
    bank_ldsm_case("ldmatrix.x4, rows 16 bytes apart (conflict-free)", BANK_DENSE, 4, 1);
    bank_ldsm_case("ldmatrix.x4, XOR-swizzled 128-byte rows (conflict-free)", BANK_SWIZZLED, 4, 1);
    bank_ldsm_case("ldmatrix.x1, one row for all (broadcast)", BANK_SAME, 1, 1);
    // (no cp.async to one destination from several lanes: a write-write race, which TSan reports)
    bank_cp_case("cp.async, destinations 128 bytes apart (4 phases 8-way)", 1, BANK_STRIDE128, BANK_STRIDE128, 32, 0,
                 cp_want(1, 4, 32));
    bank_cp_case("cp.async, destinations 32 bytes apart (2-way)", 1, BANK_STRIDE32, BANK_STRIDE32, 32, 0,
                 cp_want(1, 4, 8));
    bank_cp_case("cp.async, dense destinations (conflict-free)", 1, BANK_DENSE, BANK_DENSE, 32, 0,
                 cp_want(1, 4, 4));
    bank_cp_case("cp.async from lanes 0-11 only, 128 bytes apart (2 phases)", 1, BANK_STRIDE128, BANK_STRIDE128, 12, 0,
                 cp_want(1, 2, 8 + 4));
    // per warp: warp 0 8-way, warp 1 conflict-free; 5 blocks (2 OS threads under TSan)
    bank_cp_case("cp.async, 2 warps (8-way, conflict-free) x 5 blocks", 5, BANK_STRIDE128, BANK_DENSE, 32, 0,
                 cp_want(2, 8, 32 + 4));
    bank_cp_case("cp.async, lanes issuing 2 and 1 copies before a commit, then 1 (conflict-free)", 1, BANK_DENSE, BANK_DENSE,
                 32, 1, cp_want(3, 4 + 2 + 4, 4 + 2 + 4));
    bank_plain_case("st.shared.b32, 32 consecutive words (conflict-free)", BANK_DENSE, 4, 1);
    bank_plain_case("st.shared.b32, words 8 bytes apart (2-way)", BANK_DENSE, 8, 2);
    bank_plain_case("st.shared.b32, words 128 bytes apart (one bank: 32-way)", BANK_DENSE, 128, 32);
    bank_plain_case("ld.shared.v4, 16-byte chunks in a row (conflict-free)", BANK_DENSE, 0, 4);
    bank_plain_case("ld.shared.v4, chunks 128 bytes apart (4 phases 8-way)", BANK_STRIDE128, 0, 32);
    bank_plain_case("ld.shared.v4, one address for all (broadcast)", BANK_SAME, 0, 4);
}
#endif  // CUDA_CPU_HARNESS

// ---------------------------------------------------------------------------------------------
// cvt.rn.bf16x2.f32

__global__ void pack_kernel(uint32_t* out, const float* lo, const float* hi, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = ptx_pack_bf16x2(lo[i], hi[i]);
}

// Round to nearest, ties to even, from the definition: the two bf16 neighbours of x (the
// truncation toward zero and the next one out, which past the largest finite value is 2^128,
// i.e. infinity) and the nearer wins.
static uint16_t rule_bf16_rne(float x) {
    uint32_t bits = float_bits(x);
    uint16_t down = (uint16_t)(bits >> 16), up = (uint16_t)(down + 1);
    double vx = x, vdown = bf16_float(down);
    double vup = (up & 0x7fff) == 0x7f80 ? copysign(ldexp(1.0, 128), x) : (double)bf16_float(up);
    double ddown = fabs(vx - vdown), dup = fabs(vup - vx);
    if (ddown < dup) return down;
    if (dup < ddown) return up;
    return (down & 1) ? up : down;
}

static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

static void pack_run(void) {
    static const uint32_t special[] = {
        0x3f800000u, 0xbf800000u, 0x00000000u, 0x80000000u,  // 1, -1, +0, -0
        0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u,  // ties: 1 + 2^-8 -> 1, 1 + 3 2^-8 -> 1 + 2^-6
        0x3f808001u, 0x3f807fffu, 0x3f80ffffu, 0x3f81ffffu,  // just above / below a tie
        0x7f7f0000u, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu,  // largest bf16; below, at, above its tie to 2^128
        0xff7f8000u, 0x7f800000u, 0xff800000u,               // -tie to -inf, +inf, -inf
        0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff800001u,  // NaNs (payload in low bits only)
        0x00000001u, 0x00008000u, 0x00018000u, 0x00010000u, 0x80008001u,  // subnormals
        0x00800000u, 0x007fffffu, 0x3dcccccdu, 0xc2f6e979u,  // smallest normal, largest subnormal, 0.1, -123.456
    };
    const int ns = (int)(sizeof special / sizeof special[0]), n = 1024;
    static float lo[n], hi[n];
    static uint32_t got[n];
    TestRng r = {5, 0};
    for (int i = 0; i < n; i++) {
        lo[i] = i < ns ? bits_float(special[i]) : bits_float((uint32_t)test_rand_u64(&r));
        hi[i] = i < ns ? bits_float(special[(i * 7 + 3) % ns]) : (float)(test_rand_uniform(&r) * 1e4 - 5e3);
    }
    float *dlo, *dhi;
    uint32_t* dout;
    cudaCheck(cudaMalloc(&dlo, sizeof lo)); cudaCheck(cudaMalloc(&dhi, sizeof hi)); cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMemcpy(dlo, lo, sizeof lo, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dhi, hi, sizeof hi, cudaMemcpyHostToDevice));
    LAUNCH(pack_kernel, n / 128, 128, 0, 0, dout, dlo, dhi, n);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < 2; h++) {
            float x = h ? hi[i] : lo[i];
            uint16_t g = (uint16_t)(got[i] >> (16 * h));
            int ok = isnan(x) ? bf16_is_nan(g) : (g == rule_bf16_rne(x) && g == host_bf16_bits(x));
            if (!ok && bad++ < 6)
                fprintf(stderr, "  pack_bf16x2 %s of pair %d: x = %a (0x%08x): got 0x%04x want 0x%04x\n", h ? "hi" : "lo",
                        i, x, float_bits(x), g, rule_bf16_rne(x));
        }
    TEST_CHECK(bad == 0, "cvt.rn.bf16x2.f32: %d of %d halves wrong", bad, 2 * n);
    if (!bad) printf("ok   cvt.rn.bf16x2.f32: %d special + %d random pairs (ties to even, overflow, subnormals, NaN), lo in bits 0-15\n",
                     ns, n - ns);
    cudaCheck(cudaFree(dlo)); cudaCheck(cudaFree(dhi)); cudaCheck(cudaFree(dout));
}

// ---------------------------------------------------------------------------------------------
// ex2.approx.ftz.f32

__global__ void ex2_kernel(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = ptx_ex2_approx_ftz(x[i]);
}

// The ISA's table of special cases, and results in the subnormal range (flushed): (input, result).
static const uint32_t EX2_SPECIAL[][2] = {
    {0xff800000u, 0x00000000u}, {0x7f800000u, 0x7f800000u},   // -inf -> +0, +inf -> +inf
    {0x80000000u, 0x3f800000u}, {0x00000000u, 0x3f800000u},   // -0, +0 -> 1
    {0x80000001u, 0x3f800000u}, {0x007fffffu, 0x3f800000u},   // subnormal inputs -> 1
    {0xc2fe0000u, 0x00000000u}, {0xc3100000u, 0x00000000u},   // -127, -144: 2^x subnormal -> +0
    {0xc3150000u, 0x00000000u}, {0xc47a0000u, 0x00000000u},   // -149, -1000 -> +0
    {0x43480000u, 0x7f800000u},                               // 200: overflow -> +inf
};

// Distance in units in the last place between two positive finite floats (adjacent floats of one
// sign have adjacent bit patterns).
static long ulps_apart(float a, float b) { long d = (long)float_bits(a) - (long)float_bits(b); return d < 0 ? -d : d; }

static void ex2_run(void) {
    const int ns = (int)(sizeof EX2_SPECIAL / sizeof EX2_SPECIAL[0]), n = 4096;
    static float x[n], got[n];
    TestRng r = {9, 0};
    for (int i = 0; i < n; i++) {
        if (i < ns) x[i] = bits_float(EX2_SPECIAL[i][0]);
        else if (i < ns + 2) x[i] = i == ns ? bits_float(0x7fc00000u) : bits_float(0xffc00001u);     // NaNs
        else if (i % 2) x[i] = (float)(253.0 * test_rand_uniform(&r) - 126.0);  // results normal: [-126, 127)
        else x[i] = (float)(-32.0 * test_rand_uniform(&r));                     // the softmax's exponents
    }
    float *dx, *dout;
    cudaCheck(cudaMalloc(&dx, sizeof x)); cudaCheck(cudaMalloc(&dout, sizeof got));
    cudaCheck(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    LAUNCH(ex2_kernel, n / 128, 128, 0, 0, dout, dx, n);
    cudaCheckLast();
    cudaCheck(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    int bad = 0;
    long worst = 0;
    for (int i = 0; i < n; i++) {
        int ok;
        if (i < ns) ok = float_bits(got[i]) == EX2_SPECIAL[i][1];
        else if (i < ns + 2) ok = isnan(got[i]);
        else {
            const float want = (float)exp2((double)x[i]);   // 2^x correctly rounded to fp32
            const long u = isfinite(got[i]) && got[i] > 0.0f ? ulps_apart(got[i], want) : 1L << 40;
            if (u > worst) worst = u;
            ok = u <= 2;
        }
        if (!ok && bad++ < 6)
            fprintf(stderr, "  ex2.approx.ftz.f32(%a = 0x%08x): got %a (0x%08x), want %a\n", x[i], float_bits(x[i]), got[i],
                    float_bits(got[i]), i < ns ? bits_float(EX2_SPECIAL[i][1]) : (float)exp2((double)x[i]));
    }
    TEST_CHECK(bad == 0, "ex2.approx.ftz.f32: %d of %d results wrong", bad, n);
    if (!bad) printf("ok   ex2.approx.ftz.f32: %d special cases exact, NaN, %d random inputs within %ld ulp of 2^x (the ISA allows 2)\n",
                     ns, n - ns - 2, worst);
    cudaCheck(cudaFree(dx)); cudaCheck(cudaFree(dout));
}

int main(void) {
    mma_run("mma.m16n8k16 bf16, small integers, 2 warps x 3 accumulate steps (exact)", 1, 1, 0.0);
    // 48 products of magnitude <= 1 on |C| <= 7: fp32 rounding of the partial sums, a few 1e-6
    mma_run("mma.m16n8k16 bf16, random bf16, 2 warps x 3 accumulate steps", 0, 2, 1e-4);
    for (int trans = 0; trans < 2; trans++) {
        ldmatrix_run(1, trans);
        ldmatrix_run(2, trans);
        ldmatrix_run(4, trans);
    }
    recipe_run();
    cp_async_groups_run();
    cp_async_fill_run();
    saddr_run();
#if defined(CUDA_CPU_HARNESS)
    bank_run();
#endif
    pack_run();
    ex2_run();
    return test_finish("test_ptx");
}
