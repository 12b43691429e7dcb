// GEMM wrapper: cuBLASLt on the GPU, cblas_sgemm under the CUDA-on-CPU harness (see gemm.cuh).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/common.cuh"
#include "cuda/gemm.cuh"
#ifndef LLMC_CUDA_EMULATED
#include <cublasLt.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>
#endif

// ----------------------------------------------------------------------------
// plan cache: a training step runs the same dozen or so GEMM shapes over and over, so the
// descriptors, layouts and the heuristic's algorithm are made once per shape and kept (llm.c
// rebuilds them per call; the heuristic is a host-side search that costs tens of microseconds).
// The key is everything the plan depends on; the pointers (operands, bias, aux) and beta are set
// per call. The emulated build keeps the keys too, so the harness tests the lookup.
typedef struct { int transa, transb, m, n, k, lda, ldb, ldd, bias, epi; } GemmKey;
#define GEMM_PLANS 64
typedef struct {
    GemmKey key;
#ifndef LLMC_CUDA_EMULATED
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
#endif
} GemmPlan;
static GemmPlan g_plans[GEMM_PLANS];
static int g_nplans;
static long g_plans_built;

long gemm_plans_built(void) { return g_plans_built; }

static GemmKey gemm_key(int transa, int transb, int m, int n, int k, int lda, int ldb, int ldd, int bias, int epi) {
    GemmKey key;
    memset(&key, 0, sizeof(key));
    key.transa = transa; key.transb = transb; key.m = m; key.n = n; key.k = k;
    key.lda = lda; key.ldb = ldb; key.ldd = ldd; key.bias = bias; key.epi = epi;
    return key;
}

static void gemm_plan_build(GemmPlan* p, const GemmKey* key);
static void gemm_plan_destroy(GemmPlan* p);

// The plan of key: found, or built (when all slots are taken, they are taken in turn).
static GemmPlan* gemm_plan_get(const GemmKey* key) {
    for (int i = 0; i < g_nplans; i++)
        if (memcmp(&g_plans[i].key, key, sizeof(*key)) == 0) return &g_plans[i];
    GemmPlan* p;
    if (g_nplans < GEMM_PLANS) p = &g_plans[g_nplans++];
    else { p = &g_plans[g_plans_built % GEMM_PLANS]; gemm_plan_destroy(p); }
    p->key = *key;
    gemm_plan_build(p, key);
    g_plans_built++;
    return p;
}

// The epilogue combinations this wrapper supports (the cuBLASLt ones the backend uses).
static void gemm_check_epilogue(int m, const floatX* bias, GemmEpilogue epi, const floatX* aux, int accumulate) {
    if (epi == GEMM_PLAIN) return;
    if (!aux || m % 8 != 0 || (epi == GEMM_DGELU && (bias || accumulate)))
        fatal("this is a bug in llmc", "gemm_bf16: epilogue %d with m=%d, aux %s, bias %s, accumulate %d",
              (int)epi, m, aux ? "set" : "NULL", bias ? "set" : "NULL", accumulate);
}

static void gemm_plans_release(void) {
    for (int i = 0; i < g_nplans; i++) gemm_plan_destroy(&g_plans[i]);
    g_nplans = 0;
}

#ifdef LLMC_CUDA_EMULATED
// ---------------------------------------------------------------------------- emulated
#include <cblas.h>

void gemm_init(void) {}
void gemm_release(void) { gemm_plans_release(); }
static void gemm_plan_build(GemmPlan* p, const GemmKey* key) { (void)p; (void)key; }
static void gemm_plan_destroy(GemmPlan* p) { (void)p; }

static float* to_f32(const floatX* x, size_t n) {
    float* f = (float*)malloc((n ? n : 1) * sizeof(float));
    if (!f) { fprintf(stderr, "gemm_bf16 (emulated): out of host memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(x[i]);
    return f;
}

void gemm_bf16(int transa, int transb, int m, int n, int k,
               const floatX* A, int lda, const floatX* B, int ldb, floatX* D, int ldd,
               const floatX* bias, GemmEpilogue epi, floatX* aux, int accumulate) {
    gemm_check_epilogue(m, bias, epi, aux, accumulate);
    GemmKey key = gemm_key(transa, transb, m, n, k, lda, ldb, ldd, bias != NULL, (int)epi);
    (void)gemm_plan_get(&key);
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
            if (epi == GEMM_GELU_AUX) { aux[at] = __float2bfloat16(r); r = ops_gelu(r); }
            else if (epi == GEMM_DGELU) r *= ops_gelu_grad(__bfloat162float(aux[at]));
            D[at] = __float2bfloat16(r);
        }
    }
    free(Af); free(Bf); free(Df);
}

#else
// ---------------------------------------------------------------------------- cuBLASLt

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
    gemm_plans_release();
    if (g_ws) (void)cudaFree(g_ws);
    if (g_lt) (void)cublasLtDestroy(g_lt);
    g_ws = NULL;
    g_lt = NULL;
}

static void gemm_plan_build(GemmPlan* p, const GemmKey* key) {
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int m = key->m, n = key->n, k = key->k;
    LT_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (key->epi != GEMM_PLAIN) {
        // DGELU, not DGELU_BGRAD: its bias gradient would overwrite (ours accumulate across
        // micro-steps) and sum in an order of its own (ours are deterministic column sums)
        epi = key->epi == GEMM_DGELU ? CUBLASLT_EPILOGUE_DGELU
            : key->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        int64_t aux_ld = key->ldd;
        cudaDataType_t aux_type = CUDA_R_16BF;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    } else if (key->bias) {
        epi = CUBLASLT_EPILOGUE_BIAS;
    }
    if (key->bias) {
        cudaDataType_t bias_type = CUDA_R_16BF;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, key->transa ? k : m, key->transa ? m : k, key->lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, key->transb ? n : k, key->transb ? k : n, key->ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_16BF, m, n, key->ldd));

    cublasLtMatmulPreference_t pref;
    size_t ws = GEMM_WORKSPACE;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(g_lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &heur, &found));
    LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) {
        fprintf(stderr, "cuBLASLt: no algorithm for m=%d n=%d k=%d transa=%d transb=%d bias=%d epilogue=%d "
                "(leading dimensions / pointers may need 16-byte alignment)\n",
                m, n, k, key->transa, key->transb, key->bias, key->epi);
        exit(1);
    }
    p->algo = heur.algo;
}

static void gemm_plan_destroy(GemmPlan* p) {
    (void)cublasLtMatrixLayoutDestroy(p->la);
    (void)cublasLtMatrixLayoutDestroy(p->lb);
    (void)cublasLtMatrixLayoutDestroy(p->ld);
    (void)cublasLtMatmulDescDestroy(p->op);
}

// compute-sanitizer's initcheck does not see what cuBLASLt's sm_90 GEMM kernels store, so it
// reports our kernels' reads of a GEMM's output as uninitialised although the values are right
// (what showed it: llmc/cuda/README.md, "Decisions"). So each GEMM tells the sanitizer, through
// NVTX (a no-op when no tool is attached), what it writes: D and, with GEMM_GELU_AUX, aux, each m
// x n with leading dimension ldd (every caller passes ldd == m, so the span is exactly the matrix).
static void gemm_declare_written(const floatX* p, int m, int n, int ldd) {
    static nvtxDomainHandle_t domain;
    if (!domain) domain = nvtxDomainCreateA("llmc");
    nvtxMemVirtualRangeDesc_t range;
    memset(&range, 0, sizeof(range));
    range.ptr = p;
    range.size = ((size_t)(n - 1) * ldd + m) * sizeof(floatX);
    nvtxMemMarkInitializedBatch_t batch;
    memset(&batch, 0, sizeof(batch));
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof(batch);
    batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.regionDescCount = 1;
    batch.regionDescElementSize = sizeof(range);
    batch.regionDescElements = &range;
    nvtxMemCudaMarkInitialized(domain, 0, 0, &batch);   // the stream the GEMM runs on
}

void gemm_bf16(int transa, int transb, int m, int n, int k,
               const floatX* A, int lda, const floatX* B, int ldb, floatX* D, int ldd,
               const floatX* bias, GemmEpilogue epi, floatX* aux, int accumulate) {
    gemm_init();
    gemm_check_epilogue(m, bias, epi, aux, accumulate);
    GemmKey key = gemm_key(transa, transb, m, n, k, lda, ldb, ldd, bias != NULL, (int)epi);
    GemmPlan* p = gemm_plan_get(&key);
    // the per-call pointers of the epilogue (the rest of the descriptor is the plan's)
    if (epi != GEMM_PLAIN) LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    if (bias) LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    // with beta 0 every element of D is the GEMM's to write, and some algorithms (a main kernel
    // and a separate epilogue kernel, which cuBLASLt picks when n is not a multiple of 8) read back
    // what their first kernel stored: declared before the call too, or initcheck reports each
    // such read
    if (!accumulate) gemm_declare_written(D, m, n, ldd);
    LT_CHECK(cublasLtMatmul(g_lt, p->op, &alpha, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld, &p->algo, g_ws,
                            GEMM_WORKSPACE, 0));
    gemm_declare_written(D, m, n, ldd);
    if (epi == GEMM_GELU_AUX) gemm_declare_written(aux, m, n, ldd);
}
#endif
