// CPU backend: matmul_forward_q8 (llmc/ops/ops.h), the product with a weight in Q8_0 blocks.
//
// A few rows (token-by-token sampling: one row a sequence) read the blocks as they are, so a
// token reads 34 bytes per 32 weights instead of bf16's 64 or fp32's 128: each pass takes four
// weight rows and up to four input rows, widens a block's int8 values to fp32, scales them by
// the block's d (exact: an fp16 times an int8 fits fp32's mantissa) and multiplies them into
// sixteen accumulators, one per (weight row, input row). Many rows (a prompt's prefill, scoring)
// are compute-bound instead: panels of the weight are dequantized into a scratch buffer that
// stays, and OpenBLAS multiplies them.
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cblas.h>
#include "cpu/ops_cpu.h"
#include "base/bf16.h"
#include "base/gguf.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define Q8_X86 1
#endif

#define Q8_W 4          // weight rows a pass
#define Q8_X 4          // input rows a pass
#define Q8_GEMM_ROWS 16 // from this many input rows on, dequantized panels and sgemm
#define Q8_PANEL 256    // weight rows a panel
#define Q8_PREFETCH 640 // bytes ahead in each of a tile's four weight rows

static float q8_d(const uint8_t* blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return fp16_to_f32(h);
}

// out[j, r] = x[j, :] . dequant(w[r, :]) for nx input rows and nw weight rows (any CPU)
static void q8_tile_ref(float* out, int ldo, const float* x, int ldx, int nx, const uint8_t* w, size_t ldw, int nw, int C) {
    for (int r = 0; r < nw; r++)
        for (int j = 0; j < nx; j++) {
            const uint8_t* wr = w + r * ldw;
            const float* xr = x + (size_t)j * ldx;
            float acc = 0.0f;
            for (int b = 0; b < C / OPS_Q8_BLOCK; b++) {
                const uint8_t* blk = wr + (size_t)b * OPS_Q8_BLOCK_BYTES;
                const float d = q8_d(blk);
                for (int k = 0; k < OPS_Q8_BLOCK; k++) acc += (float)(int8_t)blk[2 + k] * d * xr[b * OPS_Q8_BLOCK + k];
            }
            out[(size_t)j * ldo + r] = acc;
        }
}

#ifdef Q8_X86
// a block's scale d, by the F16C instruction (every AVX-512 CPU has it; fp16_to_f32's bit
// arithmetic, once a block and weight row, was the one-row product's bottleneck)
__attribute__((target("avx512f,f16c"))) static inline float q8_d_f16c(const uint8_t* blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return _cvtsh_ss(h);
}

// 16 int8 values widened to fp32 and scaled by d
__attribute__((target("avx512f"))) static inline __m512 q8_half(const uint8_t* q, __m512 d) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)q))), d);
}

// a block of four weight rows, widened and scaled: l = values 0-15, h = 16-31
#define Q8_LOAD(r) \
    const uint8_t* b##r = w + r * ldw + (size_t)b * OPS_Q8_BLOCK_BYTES; \
    _mm_prefetch((const char*)b##r + Q8_PREFETCH, _MM_HINT_T0); \
    const __m512 d##r = _mm512_set1_ps(q8_d_f16c(b##r)), l##r = q8_half(b##r + 2, d##r), h##r = q8_half(b##r + 18, d##r);
// input row j against the four: one accumulator per (weight row, input row), named (an array
// indexed by a loop variable goes through the stack)
#define Q8_FMA(j) \
    if (nx > j) { \
        const float* xb = x + (size_t)j * ldx + (size_t)b * OPS_Q8_BLOCK; \
        const __m512 xl = _mm512_loadu_ps(xb), xh = _mm512_loadu_ps(xb + 16); \
        a0##j = _mm512_fmadd_ps(h0, xh, _mm512_fmadd_ps(l0, xl, a0##j)); \
        a1##j = _mm512_fmadd_ps(h1, xh, _mm512_fmadd_ps(l1, xl, a1##j)); \
        a2##j = _mm512_fmadd_ps(h2, xh, _mm512_fmadd_ps(l2, xl, a2##j)); \
        a3##j = _mm512_fmadd_ps(h3, xh, _mm512_fmadd_ps(l3, xl, a3##j)); \
    }
#define Q8_OUT(j) \
    if (nx > j) { \
        float* o = out + (size_t)j * ldo; \
        o[0] = _mm512_reduce_add_ps(a0##j); o[1] = _mm512_reduce_add_ps(a1##j); \
        o[2] = _mm512_reduce_add_ps(a2##j); o[3] = _mm512_reduce_add_ps(a3##j); \
    }

// q8_tile_ref for four weight rows and nx <= 4 input rows on AVX-512 (inlined into the
// instances below with nx constant, so the untaken rows fold away)
__attribute__((target("avx512f,f16c"), always_inline)) static inline void q8_tile4(float* out, int ldo, const float* x, int ldx,
                                                                              int nx, const uint8_t* w, size_t ldw, int C) {
    const __m512 z = _mm512_setzero_ps();
    __m512 a00 = z, a10 = z, a20 = z, a30 = z, a01 = z, a11 = z, a21 = z, a31 = z;
    __m512 a02 = z, a12 = z, a22 = z, a32 = z, a03 = z, a13 = z, a23 = z, a33 = z;
    for (int b = 0; b < C / OPS_Q8_BLOCK; b++) {
        Q8_LOAD(0) Q8_LOAD(1) Q8_LOAD(2) Q8_LOAD(3)
        Q8_FMA(0) Q8_FMA(1) Q8_FMA(2) Q8_FMA(3)
    }
    Q8_OUT(0) Q8_OUT(1) Q8_OUT(2) Q8_OUT(3)
}

#define Q8_TILE_FN(NX) \
    __attribute__((target("avx512f,f16c"))) static void q8_tile4_##NX(float* out, int ldo, const float* x, int ldx, \
                                                               const uint8_t* w, size_t ldw, int C) { \
        q8_tile4(out, ldo, x, ldx, NX, w, ldw, C); \
    }
Q8_TILE_FN(4) Q8_TILE_FN(3) Q8_TILE_FN(2) Q8_TILE_FN(1)

// one weight row against one input row (the OC % 4 rows at the end)
__attribute__((target("avx512f,f16c"))) static float q8_dot1(const float* x, const uint8_t* w, int C) {
    __m512 a = _mm512_setzero_ps();
    for (int b = 0; b < C / OPS_Q8_BLOCK; b++) {
        const uint8_t* blk = w + (size_t)b * OPS_Q8_BLOCK_BYTES;
        const __m512 d = _mm512_set1_ps(q8_d_f16c(blk));
        const float* xb = x + (size_t)b * OPS_Q8_BLOCK;
        a = _mm512_fmadd_ps(q8_half(blk + 18, d), _mm512_loadu_ps(xb + 16), _mm512_fmadd_ps(q8_half(blk + 2, d), _mm512_loadu_ps(xb), a));
    }
    return _mm512_reduce_add_ps(a);
}

// every (weight row, input row) of the tile, by the instance of its shape
static void q8_tile_avx512(float* out, int ldo, const float* x, int ldx, int nx, const uint8_t* w, size_t ldw, int nw, int C) {
    if (nw == Q8_W) {
        if (nx == 4) q8_tile4_4(out, ldo, x, ldx, w, ldw, C);
        else if (nx == 3) q8_tile4_3(out, ldo, x, ldx, w, ldw, C);
        else if (nx == 2) q8_tile4_2(out, ldo, x, ldx, w, ldw, C);
        else q8_tile4_1(out, ldo, x, ldx, w, ldw, C);
        return;
    }
    for (int r = 0; r < nw; r++)
        for (int j = 0; j < nx; j++) out[(size_t)j * ldo + r] = q8_dot1(x + (size_t)j * ldx, w + r * ldw, C);
}
#endif

static int q8_scalar; // cpu_q8_force_scalar

void cpu_q8_force_scalar(int on) { q8_scalar = on; }

static int q8_has_avx512(void) {
#ifdef Q8_X86
    static int known = -1;
    if (known < 0) { __builtin_cpu_init(); known = __builtin_cpu_supports("avx512f") != 0; }
    return known && !q8_scalar;
#else
    return 0;
#endif
}

// the few-row product: groups of Q8_W weight rows shared out over the threads
static void q8_forward_direct(float* out, const float* inp, const uint8_t* w, int N, int C, int OC) {
    const size_t ldw = (size_t)(C / OPS_Q8_BLOCK) * OPS_Q8_BLOCK_BYTES;
    const int groups = (OC + Q8_W - 1) / Q8_W, avx = q8_has_avx512();
    #pragma omp parallel for schedule(static) if ((size_t)OC * C > ((size_t)1 << 20))
    for (int g = 0; g < groups; g++) {
        const int o = g * Q8_W, nw = OC - o < Q8_W ? OC - o : Q8_W;
        for (int n = 0; n < N; n += Q8_X) {
            const int nx = N - n < Q8_X ? N - n : Q8_X;
            float* dst = out + (size_t)n * OC + o;
            const float* x = inp + (size_t)n * C;
#ifdef Q8_X86
            if (avx) { q8_tile_avx512(dst, OC, x, C, nx, w + o * ldw, ldw, nw, C); continue; }
#endif
            (void)avx;
            q8_tile_ref(dst, OC, x, C, nx, w + o * ldw, ldw, nw, C);
        }
    }
}

// the panel buffer: Q8_PANEL dequantized rows of the widest weight so far (grows, then stays)
static float* q8_panel;
static size_t q8_panel_n;

// the many-row product: out[:, o0:o0+P] = inp dequant(w[o0:o0+P])^T by sgemm, panel by panel
static void q8_forward_panels(float* out, const float* inp, const uint8_t* w, int N, int C, int OC) {
    const size_t ldw = (size_t)(C / OPS_Q8_BLOCK) * OPS_Q8_BLOCK_BYTES, need = (size_t)Q8_PANEL * C;
    if (q8_panel_n < need) {
        cpu_ops_free(q8_panel);
        q8_panel = (float*)cpu_ops_alloc(need * sizeof(float));
        q8_panel_n = need;
    }
    for (int o0 = 0; o0 < OC; o0 += Q8_PANEL) {
        const int P = OC - o0 < Q8_PANEL ? OC - o0 : Q8_PANEL;
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < P; r++) gguf_dequantize_q8_0(w + (size_t)(o0 + r) * ldw, q8_panel + (size_t)r * C, (size_t)C);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, P, C, 1.0f, inp, C, q8_panel, C, 0.0f, out + o0, OC);
    }
}

void cpu_matmul_forward_q8(float* out, float* gelu_out, const float* inp, const uint8_t* weight,
                           const float* bias, int N, int C, int OC) {
    if (N >= Q8_GEMM_ROWS) q8_forward_panels(out, inp, weight, N, C, OC);
    else q8_forward_direct(out, inp, weight, N, C, OC);
    cpu_matmul_epilogue(out, gelu_out, bias, N, OC);
}
