// CPU backend: bf16 GEMMs with fp32 accumulation through oneDNN's matmul primitive.
//
// Why oneDNN: on the step's GEMM shapes its bf16 matmul (brgemm avx512_core_bf16 kernels) is the
// fastest GEMM this system's libraries offer, where Debian's OpenBLAS has no sbgemm and BLIS and
// libxsmm no usable bf16 GEMM (the measurements: docs/CPU.md, "Which GEMM library"). oneDNN is
// also what PyTorch calls for bf16 on the CPU, and Debian's build uses the OpenMP runtime: its
// threads are our OpenMP threads, so it never competes with the other ops' parallel loops for the
// cores (OpenBLAS' pthreads pool is the fp32 path's only).
//
// Primitives are created once per shape and orientation and kept (a training step has ~15
// distinct GEMMs); the accumulating ones (backward: += into gradients) use oneDNN's sum post-op.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu/gemm.h"
#include "cpu/gemv.h"
#include "cpu/ops_cpu.h"
#include "base/check.h"

#define dnnlCheck(x) dnnl_check((x), #x, __FILE__, __LINE__)
static void dnnl_check(dnnl_status_t s, const char* what, const char* file, int line) {
    if (s == dnnl_success) return;
    fatal("this is a bug in llmc, or oneDNN cannot run on this CPU (run with --dtype fp32)",
          "oneDNN call %s failed with status %d at %s:%d", what, (int)s, file, line);
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, acc;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c;
} GemmPrim;

#define GEMM_CACHE 64
static GemmPrim cache[GEMM_CACHE];
static int n_cached;
static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void gemm_descs(GemmPrim* g) {
    dnnl_dims_t ad = {g->M, g->K}, bd = {g->K, g->N}, cd = {g->M, g->N};
    // a transposed operand is the same memory read with swapped strides
    dnnl_dims_t as = {g->ta ? 1 : g->lda, g->ta ? g->lda : 1};
    dnnl_dims_t bs = {g->tb ? 1 : g->ldb, g->tb ? g->ldb : 1};
    dnnlCheck(dnnl_memory_desc_init_by_strides(&g->a, 2, ad, dnnl_bf16, as));
    dnnlCheck(dnnl_memory_desc_init_by_strides(&g->b, 2, bd, dnnl_bf16, bs));
    dnnlCheck(dnnl_memory_desc_init_by_tag(&g->c, 2, cd, dnnl_f32, dnnl_ab));
}

static void gemm_create(GemmPrim* g) {
    if (!engine) {
        dnnlCheck(dnnl_engine_create(&engine, dnnl_cpu, 0));
        dnnlCheck(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    }
    gemm_descs(g);
    dnnl_matmul_desc_t md;
    dnnlCheck(dnnl_matmul_desc_init(&md, &g->a, &g->b, NULL, &g->c));
    dnnl_primitive_attr_t attr;
    dnnlCheck(dnnl_primitive_attr_create(&attr));
    if (g->acc) {
        dnnl_post_ops_t po;
        dnnlCheck(dnnl_post_ops_create(&po));
        dnnlCheck(dnnl_post_ops_append_sum(po, 1.0f));
        dnnlCheck(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnlCheck(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL));
    dnnlCheck(dnnl_primitive_create(&g->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
}

static GemmPrim* gemm_lookup(int ta, int tb, int M, int N, int K, int lda, int ldb, int acc) {
    for (int i = 0; i < n_cached; i++) {
        GemmPrim* g = &cache[i];
        if (g->ta == ta && g->tb == tb && g->M == M && g->N == N && g->K == K && g->lda == lda &&
            g->ldb == ldb && g->acc == acc) return g;
    }
    // a full cache (shapes of many batch sizes: generation) starts over
    if (n_cached == GEMM_CACHE) {
        for (int i = 0; i < n_cached; i++) dnnl_primitive_destroy(cache[i].prim);
        n_cached = 0;
    }
    GemmPrim* g = &cache[n_cached];
    *g = (GemmPrim){ta, tb, M, N, K, lda, ldb, acc, NULL, {0}, {0}, {0}};
    gemm_create(g);
    n_cached++;
    return g;
}

void cpu_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, int accumulate, float* C) {
    if (M == 0 || N == 0) return;
    // one row times a weight held [N, K] (generation with the KV cache): llmc/cpu/gemv.c
    if (M == 1 && !ta && tb && !accumulate && cpu_gemv_bf16(N, K, A, B, ldb, C)) return;
    GemmPrim* g = gemm_lookup(ta, tb, M, N, K, lda, ldb, accumulate ? 1 : 0);
    dnnl_memory_t ma, mb, mc;
    dnnlCheck(dnnl_memory_create(&ma, &g->a, engine, (void*)A));
    dnnlCheck(dnnl_memory_create(&mb, &g->b, engine, (void*)B));
    dnnlCheck(dnnl_memory_create(&mc, &g->c, engine, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    dnnlCheck(dnnl_primitive_execute(g->prim, stream, 3, args));
    dnnlCheck(dnnl_stream_wait(stream));
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
}
