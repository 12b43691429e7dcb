// CPU backend: the one-row bf16 GEMM (y = x W^T) of token-by-token generation, on AVX512-BF16.
//
// Why not oneDNN here: its matmul primitive runs a one-row product well below what one core
// streams; this loop (VDPBF16PS, four weight rows against one load of x) reads the same weights
// several times faster, and the one-row products are most of a generated token's time (the
// figures: docs/CPU.md, "Generation"). The products of bf16 values are exact in fp32, so the
// result differs from oneDNN's only in the order of the fp32 additions.
#include "cpu/gemv.h"
#include <stddef.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define GEMV_X86 1
#endif

int cpu_has_avx512bf16(void) {
#ifdef GEMV_X86
    static int known = -1;
    if (known >= 0) return known;
    unsigned a0 = 0, b0 = 0, c0 = 0, d0 = 0, a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __builtin_cpu_init();
    // CPUID leaf 7 sub-leaf 1, EAX bit 5 (read directly: not every compiler's
    // __builtin_cpu_supports knows the flag); AVX-512 must be enabled by the OS too
    known = __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &a0, &b0, &c0, &d0) && a0 >= 1 &&
            __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 >> 5 & 1u);
    return known;
#else
    return 0;
#endif
}

#ifdef GEMV_X86
#define GEMV_ROWS 4

// the K % 32 tail of a row through a masked load (the zeros contribute nothing)
__attribute__((target("avx512f,avx512bf16")))
static inline __m512bh gemv_load(const uint16_t* p, int left) {
    const __mmask32 m = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u);
    return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
}

// four rows of y from o: each row's 32-element pieces of x . w in 16 fp32 lanes, one load of x
// for the four (named accumulators: an array indexed by a loop variable went through the stack)
__attribute__((target("avx512f,avx512bf16")))
static void gemv_rows4(float* y, const uint16_t* x, const uint16_t* w, size_t ldw, int K) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int k = 0; k < K; k += 32) {
        const int left = K - k;
        const __m512bh xv = gemv_load(x + k, left);
        a0 = _mm512_dpbf16_ps(a0, xv, gemv_load(w + k, left));
        a1 = _mm512_dpbf16_ps(a1, xv, gemv_load(w + ldw + k, left));
        a2 = _mm512_dpbf16_ps(a2, xv, gemv_load(w + 2 * ldw + k, left));
        a3 = _mm512_dpbf16_ps(a3, xv, gemv_load(w + 3 * ldw + k, left));
    }
    y[0] = _mm512_reduce_add_ps(a0); y[1] = _mm512_reduce_add_ps(a1);
    y[2] = _mm512_reduce_add_ps(a2); y[3] = _mm512_reduce_add_ps(a3);
}

__attribute__((target("avx512f,avx512bf16")))
static void gemv_row(float* y, const uint16_t* x, const uint16_t* w, int K) {
    __m512 a = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 32) a = _mm512_dpbf16_ps(a, gemv_load(x + k, K - k), gemv_load(w + k, K - k));
    *y = _mm512_reduce_add_ps(a);
}
#endif

int cpu_gemv_bf16(int N, int K, const uint16_t* x, const uint16_t* w, int ldw, float* y) {
#ifdef GEMV_X86
    if (!cpu_has_avx512bf16()) return 0;
    const int groups = (N + GEMV_ROWS - 1) / GEMV_ROWS;
    // threads only where the weights are big enough to share out (the lm_head, c_fc at d12+)
    #pragma omp parallel for schedule(static) if ((size_t)N * K > ((size_t)1 << 20))
    for (int g = 0; g < groups; g++) {
        const int o = g * GEMV_ROWS;
        if (N - o >= GEMV_ROWS) gemv_rows4(y + o, x, w + (size_t)o * ldw, (size_t)ldw, K);
        else for (int r = o; r < N; r++) gemv_row(y + r, x, w + (size_t)r * ldw, K);
    }
    return 1;
#else
    (void)N; (void)K; (void)x; (void)w; (void)ldw; (void)y;
    return 0;
#endif
}
