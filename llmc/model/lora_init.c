// LoRA initialisations beside PEFT's default (llmc/model/lora.h, lora_init_params): gaussian,
// and PiSSA / OLoRA, which take the adapter from the base weight and leave the base the
// residual. The factorisations are LAPACK's (OpenBLAS ships it), in fp32, on the host.
#include "model/lora.h"
#include "base/check.h"
#include "base/rand.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RNG_STREAM_GAUSS 0x47617573ull // "Gaus": gaussian A streams are this + adapter (layer, lin)

// LAPACK's Fortran entry points (no LAPACKE header is needed); the trailing size_t is the hidden
// length of a character argument, as gfortran passes it.
extern void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
                    const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info, size_t jobz_len);
extern void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork, int* info);
extern int openblas_get_num_threads(void);
extern void openblas_set_num_threads(int n);
extern void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
                    const int* lwork, int* info);

const char* const LORA_INIT_NAMES[] = {"default", "gaussian", "pissa", "olora", NULL};

int lora_init_rewrites_base(int init) { return init == LORA_INIT_PISSA || init == LORA_INIT_OLORA; }

// The rank of one block of an adapter (a q/k/v split stacks nb blocks of rank r).
static int block_rank(const LoraAdapter* a) {
    int nb = 0;
    for (int j = 0; j < 3; j++) nb += (a->blocks >> j) & 1;
    return a->blocks ? a->rank / nb : a->rank;
}

void lora_init_gaussian(LoraModel* lm, uint64_t seed) {
    float* host = (float*)callocCheck(lm->total ? lm->total : 1, sizeof(float));
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        // nn.init.normal_(std=1 / r) on [rank, in]; B stays zero
        const double std = 1.0 / (double)block_rank(a);
        const uint64_t stream = RNG_STREAM_GAUSS + (uint64_t)a->layer * LINEAR_PER_BLOCK + (uint64_t)a->lin;
        const size_t na = (size_t)a->rank * a->in;
        for (size_t j = 0; j < na; j++) host[a->a_off + j] = (float)(std * rand_normal(seed, stream, j));
    }
    ops_upload_f32(lm->params, host, lm->total);
    free(host);
}

static void lapack_check(int info, const char* what, const LoraAdapter* a) {
    if (info != 0)
        fatal("the base weights may hold NaN or Inf values; check --model", "%s of layer h.%d.%s failed (LAPACK info %d)", what,
              a->layer, lora_module_name(a->lin), info);
}

// PiSSA: W [out, in] = U S V^T; B = U_r sqrt(S_r / scaling), A = sqrt(S_r / scaling) V_r^T (PEFT's
// pissa_init). LAPACK is column-major: the row-major W is the column-major W^T [in, out], whose
// left singular vectors are W's right ones, so A's rows are the columns of that U and B's rows
// the columns of VT.
static void pissa_factors(const LoraAdapter* a, const float* W, float* A, float* B) {
    const int m = a->in, n = a->out, k = m < n ? m : n, r = a->rank;
    float* work_a = (float*)mallocCheck((size_t)m * n * sizeof(float));
    float* s = (float*)mallocCheck((size_t)k * sizeof(float));
    float* u = (float*)mallocCheck((size_t)m * k * sizeof(float));
    float* vt = (float*)mallocCheck((size_t)k * n * sizeof(float));
    int* iwork = (int*)mallocCheck((size_t)8 * k * sizeof(int));
    memcpy(work_a, W, (size_t)m * n * sizeof(float));
    int lwork = -1, info = 0;
    float q;
    sgesdd_("S", &m, &n, work_a, &m, s, u, &m, vt, &k, &q, &lwork, iwork, &info, 1);
    lapack_check(info, "the SVD (sgesdd workspace query)", a);
    lwork = (int)q + 1;
    float* work = (float*)mallocCheck((size_t)lwork * sizeof(float));
    sgesdd_("S", &m, &n, work_a, &m, s, u, &m, vt, &k, work, &lwork, iwork, &info, 1);
    lapack_check(info, "the SVD (sgesdd)", a);
    for (int j = 0; j < r; j++) {
        const float sq = sqrtf(s[j] / a->scaling);
        for (int i = 0; i < a->in; i++) A[(size_t)j * a->in + i] = sq * u[(size_t)j * m + i];
        for (int o = 0; o < a->out; o++) B[(size_t)o * r + j] = sq * vt[j + (size_t)o * k];
    }
    free(work); free(iwork); free(vt); free(u); free(s); free(work_a);
}

// OLoRA: W [out, in] = Q R; B = Q_r (out x r), A = R_r (the first r rows of R), as PEFT's
// olora_init computes on a weight of nn.Linear's [out, in] layout. W goes column-major first.
static void olora_factors(const LoraAdapter* a, const float* W, float* A, float* B) {
    const int m = a->out, n = a->in, k = m < n ? m : n, r = a->rank;
    float* wc = (float*)mallocCheck((size_t)m * n * sizeof(float));
    float* tau = (float*)mallocCheck((size_t)k * sizeof(float));
    for (int o = 0; o < m; o++)
        for (int i = 0; i < n; i++) wc[o + (size_t)i * m] = W[(size_t)o * n + i];
    int lwork = -1, info = 0;
    float q;
    sgeqrf_(&m, &n, wc, &m, tau, &q, &lwork, &info);
    lapack_check(info, "the QR decomposition (sgeqrf workspace query)", a);
    lwork = (int)q + 1;
    float* work = (float*)mallocCheck((size_t)lwork * sizeof(float));
    sgeqrf_(&m, &n, wc, &m, tau, work, &lwork, &info);
    lapack_check(info, "the QR decomposition (sgeqrf)", a);
    for (int j = 0; j < r; j++)
        for (int i = 0; i < n; i++) A[(size_t)j * n + i] = i >= j ? wc[j + (size_t)i * m] : 0.0f;
    // the first r columns of Q need only the first r reflectors
    sorgqr_(&m, &r, &r, wc, &m, tau, work, &lwork, &info);
    lapack_check(info, "forming Q (sorgqr)", a);
    for (int o = 0; o < m; o++)
        for (int j = 0; j < r; j++) B[(size_t)o * r + j] = wc[o + (size_t)j * m];
    free(work); free(tau); free(wc);
}

void lora_init_from_base(LoraModel* lm, const ParamTable* pt, const float* host_params) {
    const int init = lm->spec.init;
    if (!lora_init_rewrites_base(init)) fatal("this is a bug in llmc", "lora_init_from_base: init %d takes nothing from the base", init);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        const int k = a->in < a->out ? a->in : a->out;
        if (a->blocks)
            fatal("use --lora-targets c_attn (the whole fused layer) with --init pissa / olora",
                  "--init %s: the q/k/v split of c_attn is not supported (PEFT factors whole layers)", LORA_INIT_NAMES[init]);
        if (a->rank > k)
            fatal("choose a smaller --lora-rank", "--init %s: rank %d exceeds the rank of h.%d.%s (%d x %d: at most %d)",
                  LORA_INIT_NAMES[init], a->rank, a->layer, lora_module_name(a->lin), a->out, a->in, k);
    }
    free(lm->init0);
    lm->init0 = (float*)callocCheck(lm->total ? lm->total : 1, sizeof(float));
    // one OpenBLAS thread: LAPACK's result then does not depend on --threads, so every rank of a
    // run factors its copy of the base to the same bits
    const int threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        const float* W = host_params + params_layer_offset(pt, a->wid, a->layer);
        if (init == LORA_INIT_PISSA) pissa_factors(a, W, lm->init0 + a->a_off, lm->init0 + a->b_off);
        else olora_factors(a, W, lm->init0 + a->a_off, lm->init0 + a->b_off);
    }
    openblas_set_num_threads(threads);
}

void lora_init_residual(const LoraModel* lm, const ParamTable* pt, float* host_params) {
    if (!lm->init0) fatal("this is a bug in llmc", "lora_init_residual without the initial adapter values");
    lora_merge_host(lm, pt, host_params, lm->init0, -1.0f);
}

// The converted adapter's values in the layout of conv (rank 2r): A' = [A; A0], B' = [B, -B0].
static void convert_values(const LoraModel* lm, const LoraModel* conv, const float* cur, float* out) {
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        const LoraAdapter* c = &conv->ad[i];
        const size_t na = (size_t)a->rank * a->in;
        memcpy(out + c->a_off, cur + a->a_off, na * sizeof(float));
        memcpy(out + c->a_off + na, lm->init0 + a->a_off, na * sizeof(float));
        for (int o = 0; o < a->out; o++)
            for (int j = 0; j < a->rank; j++) {
                out[c->b_off + (size_t)o * c->rank + j] = cur[a->b_off + (size_t)o * a->rank + j];
                out[c->b_off + (size_t)o * c->rank + a->rank + j] = -lm->init0[a->b_off + (size_t)o * a->rank + j];
            }
    }
}

LoraModel* lora_converted(const LoraModel* lm, float** values) {
    if (!lm->init0) fatal("this is a bug in llmc", "lora_converted without the initial adapter values");
    LoraSpec spec = lm->spec;
    spec.rank *= 2;
    spec.alpha *= spec.rslora ? sqrtf(2.0f) : 2.0f; // the same scaling at twice the rank
    spec.init = LORA_INIT_DEFAULT;
    LoraModel* conv = lora_layout(&lm->cfg, &spec);
    if (conv->n != lm->n || conv->n_extra != lm->n_extra) fatal("this is a bug in llmc", "lora_converted: the layout differs");
    for (int i = 0; i < lm->n_extra; i++) { conv->extra[i].p = lm->extra[i].p; conv->extra[i].g = lm->extra[i].g; }
    snprintf(conv->base_name, sizeof(conv->base_name), "%s", lm->base_name);
    float* cur = (float*)mallocCheck((lm->total ? lm->total : 1) * sizeof(float));
    lora_get_params(lm, cur);
    *values = (float*)mallocCheck((conv->total ? conv->total : 1) * sizeof(float));
    convert_values(lm, conv, cur, *values);
    free(cur);
    return conv;
}
