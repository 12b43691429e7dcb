// CPU backend of the op interface (llmc/ops.h): fp32, OpenMP across rows/columns, GEMMs through
// CBLAS (OpenBLAS). Attention lives in attention_cpu.c. Semantics (accumulating backwards, NULL
// gradients, ignored targets, padded vocab) are documented in ops.h and tested in test/test_ops.c.
//
// Determinism: every reduction over rows is done by a thread that owns a block of output
// columns and walks the rows in order, so results do not depend on the thread count or timing.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <omp.h>
#include <cblas.h>
#include "ops.h"
#include "check.h"
#include "cpu/vecmath.h"

// ----------------------------------------------------------------------------
// the environment the CPU backend needs before main()
//
// Two settings are only read from the environment, by library constructors that run before
// main(), so the program cannot make them later:
// 1. OPENBLAS_CORETYPE. Debian's OpenBLAS is a DYNAMIC_ARCH build: it picks its kernel set once,
//    from CPUID or from this variable. CPUs it does not recognise (new models, virtual machines
//    that mask the model number) get Prescott (SSE3) kernels: measured here 29 GFLOP/s per core
//    instead of 95 with the SkylakeX kernels, i.e. the ~55 GFLOP/s on 2 threads in DESIGN.md. On
//    CPUs with AVX-512 we name the kernels ourselves: Cooperlake (SkylakeX + bf16) where
//    AVX512-BF16 is present, SkylakeX otherwise.
// 2. OMP_WAIT_POLICY=passive. Two thread pools share the cores: OpenBLAS' (GEMMs) and OpenMP's
//    (all other ops). With libgomp's default, an OpenMP thread that finished its part keeps
//    spinning on its core while the next GEMM's OpenBLAS threads want it: measured 15% of all CPU
//    time spent in libgomp spin loops over a GPT-2 124M step (11.6 -> 9.6 CPU-s per step with
//    passive threads). Waking a sleeping thread costs microseconds per op; ops take milliseconds.
// setenv() that early does not stick (libc installs the original environment array when it
// initialises), so an ELF .preinit_array entry -- it runs before every shared library's
// constructor and is given argv and envp -- re-executes the program once with the missing
// settings added. Nothing has happened yet at that point (no file opened, no output, no MPI),
// so the re-exec is invisible apart from the variables. A variable the user has set is never
// changed; LLMC_NO_REEXEC=1 turns the mechanism off; non-Linux systems do without it.
// ops_init() warns once if OpenBLAS still runs slow kernels on an AVX-512 CPU.
static int cpu_avx512_ok(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

#if defined(__linux__) && defined(__GNUC__)
static int env_has(char** envp, const char* name) {   // getenv() is not usable this early
    size_t len = strlen(name);
    for (char** e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return 1;
    return 0;
}

static void cpu_preinit(int argc, char** argv, char** envp) {
    (void)argc;
    if (argv == NULL || envp == NULL || env_has(envp, "LLMC_NO_REEXEC")) return;
    static char coretype[] = "OPENBLAS_CORETYPE=SkylakeX";
    static char coretype_bf16[] = "OPENBLAS_CORETYPE=Cooperlake";
    static char wait_policy[] = "OMP_WAIT_POLICY=passive";
    char* add[2];
    int nadd = 0;
    if (!env_has(envp, "OPENBLAS_CORETYPE") && cpu_avx512_ok()) {
#if defined(__x86_64__)
        add[nadd++] = __builtin_cpu_supports("avx512bf16") ? coretype_bf16 : coretype;
#else
        add[nadd++] = coretype;
#endif
    }
    if (!env_has(envp, "OMP_WAIT_POLICY")) add[nadd++] = wait_policy;
    if (nadd == 0) return;
    size_t n = 0;
    while (envp[n] != NULL) n++;
    char** env = (char**)malloc((n + (size_t)nadd + 1) * sizeof(char*));
    if (env == NULL) return;
    memcpy(env, envp, n * sizeof(char*));
    for (int i = 0; i < nadd; i++) env[n + (size_t)i] = add[i];
    env[n + (size_t)nadd] = NULL;
    execve("/proc/self/exe", argv, env);
    free(env);   // exec failed (no /proc?): carry on with the libraries' defaults
}

__attribute__((section(".preinit_array"), used))
static void (*const cpu_preinit_entry)(int, char**, char**) = cpu_preinit;
#endif

// ----------------------------------------------------------------------------
// backend lifetime and memory

static char cpu_name[160];

// OpenBLAS kernel sets that use AVX-512 for sgemm (openblas_get_corename() spellings).
static int core_is_avx512(const char* core) {
    static const char* fast[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof(fast) / sizeof(fast[0]); i++)
        if (strncasecmp(core, fast[i], strlen(fast[i])) == 0) return 1;
    return 0;
}

void ops_init(int threads) {
    if (threads <= 0) threads = omp_get_max_threads(); // OMP_NUM_THREADS, else all cores
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    const char* core = openblas_get_corename();
    // Only reached when the re-exec above could not steer OpenBLAS (a build without
    // DYNAMIC_ARCH, LLMC_NO_REEXEC) or the user forced slower kernels: say so once, with the fix.
    static int warned = 0;
    if (!warned && cpu_avx512_ok() && core != NULL && !core_is_avx512(core)) {
        warned = 1;
        fprintf(stderr, "warning: OpenBLAS is using its %s kernels on this AVX-512 CPU, so matmuls "
                "run up to several times slower than they could.\n  fix: run with "
                "OPENBLAS_CORETYPE=SkylakeX in the environment (Cooperlake on CPUs with "
                "AVX512-BF16); this needs an OpenBLAS built with DYNAMIC_ARCH, as Debian's is\n", core);
    }
    char* cfg = openblas_get_config();
    const char* ver = (cfg && strncmp(cfg, "OpenBLAS ", 9) == 0) ? cfg + 9 : "?";
    char verbuf[32];
    size_t k = 0;
    while (ver[k] && ver[k] != ' ' && k + 1 < sizeof(verbuf)) { verbuf[k] = ver[k]; k++; }
    verbuf[k] = '\0';
    snprintf(cpu_name, sizeof(cpu_name), "cpu (OpenBLAS %s, %s kernels, %d thread%s)", verbuf,
             core ? core : "?", threads, threads == 1 ? "" : "s");
}

const char* ops_backend_name(void) {
    if (cpu_name[0] == '\0') ops_init(0);
    return cpu_name;
}

void* ops_alloc(size_t bytes) {
    // 64-byte aligned (one cache line, one AVX-512 vector); aligned_alloc wants a multiple
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    void* p = aligned_alloc(64, sz);
    if (p == NULL)
        fatal("reduce the batch size / sequence length, or use a machine with more memory",
              "out of memory allocating %zu bytes for the CPU backend", bytes);
    return p;
}

void ops_free(void* p) { free(p); }
void ops_zero(void* p, size_t bytes) { if (bytes) memset(p, 0, bytes); }
void ops_to_device(void* dst, const void* src_host, size_t bytes) { if (bytes) memcpy(dst, src_host, bytes); }
void ops_to_host(void* dst_host, const void* src, size_t bytes) { if (bytes) memcpy(dst_host, src, bytes); }
void ops_upload_f32(floatX* dst, const float* src_host, size_t n) { if (n) memcpy(dst, src_host, n * sizeof(float)); }
void ops_download_f32(float* dst_host, const floatX* src, size_t n) { if (n) memcpy(dst_host, src, n * sizeof(float)); }
void ops_synchronize(void) {}
void ops_set_deterministic(int on) { (void)on; } // every CPU op is deterministic

// Column blocks for the deterministic reductions over rows (see the top of the file).
#define COLBLOCK 64

// ----------------------------------------------------------------------------
// encoder

void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float* we = wte + (size_t)inp[bt] * C;
        const float* pe = wpe + (size_t)(bt % T) * C;
        float* o = out + (size_t)bt * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp, int B, int T, int C) {
    int nblk = (C + COLBLOCK - 1) / COLBLOCK;
    if (dwte != NULL) {
        // Several positions may hold the same token: a thread owns a column block of every
        // row of dwte and adds positions in order, so there is no race and no reordering.
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * COLBLOCK, c1 = c0 + COLBLOCK < C ? c0 + COLBLOCK : C;
            for (int bt = 0; bt < B * T; bt++) {
                float* d = dwte + (size_t)inp[bt] * C;
                const float* g = dout + (size_t)bt * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) d[c] += g[c];
            }
        }
    }
    if (dwpe != NULL) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++) {
            float* d = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const float* g = dout + ((size_t)b * T + t) * C;
                #pragma omp simd
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        }
    }
}

// ----------------------------------------------------------------------------
// layernorm

#define LN_EPS 1e-5f   // PyTorch / HF GPT-2 default

static inline void layernorm_row(float* out, float* mean, float* rstd, const float* x,
                                 const float* w, const float* b, int C) {
    // Sums in double: rows of fine-tuned models can carry a mean that is large against their
    // spread, and an fp32 mean error then shows up directly in x - mean. Costs nothing here.
    double s = 0.0;
    #pragma omp simd reduction(+:s)
    for (int c = 0; c < C; c++) s += x[c];
    float m = (float)(s / C);
    double v = 0.0;   // two-pass variance: no cancellation
    #pragma omp simd reduction(+:v)
    for (int c = 0; c < C; c++) { float d = x[c] - m; v += (double)d * d; }
    float rs = (float)(1.0 / sqrt(v / C + (double)LN_EPS));
    #pragma omp simd
    for (int c = 0; c < C; c++) out[c] = (x[c] - m) * rs * w[c] + b[c];
    *mean = m;
    *rstd = rs;
}

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        layernorm_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, weight, bias, C);
}

void fused_residual_layernorm_forward(floatX* residual_out, floatX* ln_out, float* mean, float* rstd,
                                      const floatX* a, const floatX* b, const floatX* weight,
                                      const floatX* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* r = residual_out + (size_t)n * C;
        const float* an = a + (size_t)n * C;
        const float* bn = b + (size_t)n * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) r[c] = an[c] + bn[c];
        layernorm_row(ln_out + (size_t)n * C, mean + n, rstd + n, r, weight, bias, C);
    }
}

void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                        int N, int C) {
    if (dinp != NULL) {
        // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = w * dout
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* dy = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            float m = mean[n], rs = rstd[n];
            float sg = 0.0f, sgx = 0.0f;
            #pragma omp simd reduction(+:sg, sgx)
            for (int c = 0; c < C; c++) {
                float g = weight[c] * dy[c];
                sg += g;
                sgx += g * (x[c] - m) * rs;
            }
            sg /= (float)C;
            sgx /= (float)C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * rs;
                dx[c] += rs * (weight[c] * dy[c] - sg - xhat * sgx);
            }
        }
    }
    if (dweight != NULL || dbias != NULL) {
        int nblk = (C + COLBLOCK - 1) / COLBLOCK;
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * COLBLOCK, c1 = c0 + COLBLOCK < C ? c0 + COLBLOCK : C;
            float dw[COLBLOCK], db[COLBLOCK];
            for (int c = 0; c < COLBLOCK; c++) { dw[c] = 0.0f; db[c] = 0.0f; }
            for (int n = 0; n < N; n++) {
                const float* x = inp + (size_t)n * C;
                const float* dy = dout + (size_t)n * C;
                float m = mean[n], rs = rstd[n];
                #pragma omp simd
                for (int c = c0; c < c1; c++) {
                    dw[c - c0] += (x[c] - m) * rs * dy[c];
                    db[c - c0] += dy[c];
                }
            }
            for (int c = c0; c < c1; c++) {
                if (dweight != NULL) dweight[c] += dw[c - c0];
                if (dbias != NULL) dbias[c] += db[c - c0];
            }
        }
    }
}

// ----------------------------------------------------------------------------
// matmul

void matmul_forward(floatX* out, floatX* gelu_out, const floatX* inp, const floatX* weight,
                    const floatX* bias, int N, int C, int OC) {
    // out[N,OC] = inp[N,C] * weight[OC,C]^T. One row (token-by-token generation with the KV
    // cache) is a GEMV: sgemm would first pack the whole weight matrix, 2-3x the cost here.
    if (N == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp, 1, 0.0f, out, 1);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
                     0.0f, out, OC);
    if (bias == NULL && gelu_out == NULL) return;
    // epilogue: one pass over the output while it is still warm in L2/L3
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* o = out + (size_t)n * OC;
        if (bias != NULL) {
            #pragma omp simd
            for (int j = 0; j < OC; j++) o[j] += bias[j];
        }
        if (gelu_out != NULL) {
            float* g = gelu_out + (size_t)n * OC;
            #pragma omp simd
            for (int j = 0; j < OC; j++) g[j] = vm_gelu(o[j]);
        }
    }
}

void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout,
                     const floatX* inp, const floatX* weight, int N, int C, int OC) {
    if (dinp != NULL) // dinp[N,C] += dout[N,OC] * weight[OC,C]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                    1.0f, dinp, C);
    if (dweight != NULL) // dweight[OC,C] += dout[N,OC]^T * inp[N,C]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                    1.0f, dweight, C);
    if (dbias != NULL) {
        int nblk = (OC + COLBLOCK - 1) / COLBLOCK;
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int o0 = blk * COLBLOCK, o1 = o0 + COLBLOCK < OC ? o0 + COLBLOCK : OC;
            float acc[COLBLOCK];
            for (int j = 0; j < COLBLOCK; j++) acc[j] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float* g = dout + (size_t)n * OC;
                #pragma omp simd
                for (int j = o0; j < o1; j++) acc[j - o0] += g[j];
            }
            for (int j = o0; j < o1; j++) dbias[j] += acc[j - o0];
        }
    }
}

// ----------------------------------------------------------------------------
// elementwise

// Element-wise loops are split into fixed chunks so small calls stay on one thread.
#define EW_CHUNK 16384

void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) out[i] = vm_gelu(inp[i]);
}

void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) dinp[i] += vm_gelu_grad(inp[i]) * dout[i];
}

void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void add_inplace(floatX* dst, const floatX* src, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void scale_copy(floatX* dst, const floatX* src, float scale, size_t n) {
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) dst[i] = src[i] * scale;
}

// ----------------------------------------------------------------------------
// fused classifier: softmax + cross-entropy + dlogits, one row per iteration

#define CLS_BLOCK 2048   // floats: 8 KB, stays in L1 between the max and the exp-sum loops

void fused_classifier(float* losses, floatX* logits, const int* targets, float dloss,
                      int N, int V, int Vp) {
    for (int n = 0; n < N; n++)
        if (targets[n] >= V)
            fatal("the data or tokenizer does not match the model's vocabulary",
                  "target token id %d at position %d is >= the vocabulary size %d", targets[n], n, V);
    #pragma omp parallel for schedule(dynamic, 4)
    for (int n = 0; n < N; n++) {
        float* x = logits + (size_t)n * Vp;
        int tgt = targets[n];
        if (tgt < 0) { // ignored position: no loss, zero gradient
            losses[n] = 0.0f;
            if (dloss != 0.0f) memset(x, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        // One pass over memory for max and sum: blocks small enough to stay in L1 get their own
        // max and exp-sum, merged into the running (mx, sum) online-softmax style.
        float mx = -INFINITY;
        double sum = 0.0;
        for (int i0 = 0; i0 < V; i0 += CLS_BLOCK) {
            int i1 = i0 + CLS_BLOCK < V ? i0 + CLS_BLOCK : V;
            float bm = -INFINITY;
            #pragma omp simd reduction(max:bm)
            for (int i = i0; i < i1; i++) bm = x[i] > bm ? x[i] : bm;
            float bs = 0.0f;
            #pragma omp simd reduction(+:bs)
            for (int i = i0; i < i1; i++) bs += vm_expf(x[i] - bm);
            if (bm > mx) { sum = sum * exp((double)mx - (double)bm) + bs; mx = bm; }
            else sum += (double)bs * exp((double)bm - (double)mx);
        }
        float xt = x[tgt];
        losses[n] = (float)(log(sum) + (double)mx - (double)xt);
        if (dloss != 0.0f) {
            float s = (float)((double)dloss / sum);
            #pragma omp simd
            for (int i = 0; i < V; i++) x[i] = vm_expf(x[i] - mx) * s;
            x[tgt] -= dloss;
            for (int i = V; i < Vp; i++) x[i] = 0.0f;
        }
    }
}

// ----------------------------------------------------------------------------
// optimizer and reductions

void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t, uint32_t seed) {
    (void)seed; // fp32 parameters: nothing to round
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    float* p = master != NULL ? master : params;
    #pragma omp parallel for simd schedule(static, EW_CHUNK) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float pi = p[i];
        pi -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * pi);
        p[i] = pi;
        if (master != NULL) params[i] = pi;
    }
}

double sum_squares(const floatX* x, size_t n) {
    double s = 0.0;
    #pragma omp parallel for simd reduction(+:s) schedule(static) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

double sum_f32(const float* x, size_t n) {
    double s = 0.0;
    #pragma omp parallel for simd reduction(+:s) schedule(static) if (n > EW_CHUNK)
    for (size_t i = 0; i < n; i++) s += (double)x[i];
    return s;
}
