// GEMM wrapper: cuBLASLt on the GPU, cblas_sgemm under the CUDA-on-CPU harness (see gemm.cuh).
#include <stdio.h>
#include <stdlib.h>
#include "cuda/common.cuh"
#include "cuda/gemm.cuh"

#ifdef LLMC_CUDA_EMULATED
// ---------------------------------------------------------------------------- emulated
#include <cblas.h>

void gemm_init(void) {}
void gemm_release(void) {}

static float* to_f32(const floatX* x, size_t n) {
    float* f = (float*)malloc((n ? n : 1) * sizeof(float));
    if (!f) { fprintf(stderr, "gemm_bf16 (emulated): out of host memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(x[i]);
    return f;
}

void gemm_bf16(int transa, int transb, int m, int n, int k,
               const floatX* A, int lda, const floatX* B, int ldb, floatX* D, int ldd,
               const floatX* bias, floatX* pre_gelu, int accumulate) {
    // sizes of the stored (column-major) matrices
    size_t na = (size_t)lda * (transa ? m : k), nb = (size_t)ldb * (transb ? k : n), nd = (size_t)ldd * n;
    float* Af = to_f32(A, na);
    float* Bf = to_f32(B, nb);
    float* Df = (float*)calloc(nd ? nd : 1, sizeof(float));
    if (!Df) { fprintf(stderr, "gemm_bf16 (emulated): out of host memory\n"); exit(1); }
    cblas_sgemm(CblasColMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
                m, n, k, 1.0f, Af, lda, Bf, ldb, 0.0f, Df, ldd);
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            size_t at = (size_t)j * ldd + i;
            float r = Df[at];
            if (bias) r += __bfloat162float(bias[i]);
            if (accumulate) r += __bfloat162float(D[at]);
            if (pre_gelu) { pre_gelu[at] = __float2bfloat16(r); r = ops_gelu(r); }
            D[at] = __float2bfloat16(r);
        }
    }
    free(Af); free(Bf); free(Df);
}

#else
// ---------------------------------------------------------------------------- cuBLASLt
#include <cublasLt.h>

#define GEMM_WORKSPACE (32u << 20)
static cublasLtHandle_t g_lt;
static void* g_ws;

static void cublas_check(cublasStatus_t s, const char* what, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLASLt error %d in %s (%s:%d)\n", (int)s, what, __FILE__, line);
        exit(1);
    }
}
#define LT_CHECK(call) cublas_check((call), #call, __LINE__)

void gemm_init(void) {
    if (g_lt) return;
    LT_CHECK(cublasLtCreate(&g_lt));
    cudaCheck(cudaMalloc(&g_ws, GEMM_WORKSPACE));
}

void gemm_release(void) {
    if (g_ws) (void)cudaFree(g_ws);
    if (g_lt) (void)cublasLtDestroy(g_lt);
    g_ws = NULL;
    g_lt = NULL;
}

void gemm_bf16(int transa, int transb, int m, int n, int k,
               const floatX* A, int lda, const floatX* B, int ldb, floatX* D, int ldd,
               const floatX* bias, floatX* pre_gelu, int accumulate) {
    gemm_init();
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (pre_gelu) {
        epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        int64_t aux_ld = ldd;
        cudaDataType_t aux_type = CUDA_R_16BF;
        LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre_gelu, sizeof(pre_gelu)));
        LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
        LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    } else if (bias) {
        epi = CUBLASLT_EPILOGUE_BIAS;
    }
    if (bias) {
        cudaDataType_t bias_type = CUDA_R_16BF;
        LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, transa ? k : m, transa ? m : k, lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, transb ? n : k, transb ? k : n, ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, ldd));

    cublasLtMatmulPreference_t pref;
    size_t ws = GEMM_WORKSPACE;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(g_lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found == 0) {
        fprintf(stderr, "cuBLASLt: no algorithm for m=%d n=%d k=%d transa=%d transb=%d bias=%d gelu=%d "
                "(leading dimensions / pointers may need 16-byte alignment)\n",
                m, n, k, transa, transb, bias != NULL, pre_gelu != NULL);
        exit(1);
    }
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    LT_CHECK(cublasLtMatmul(g_lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur.algo, g_ws, ws, 0));
    LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    LT_CHECK(cublasLtMatrixLayoutDestroy(la));
    LT_CHECK(cublasLtMatrixLayoutDestroy(lb));
    LT_CHECK(cublasLtMatrixLayoutDestroy(ld));
    LT_CHECK(cublasLtMatmulDescDestroy(op));
}
#endif
