// Causal multi-head attention for the CPU backend, flash-style (see ops.h for the contract).
//
// Forward: one work item per (batch, head, query tile of BQ rows). The item walks the key tiles
// of BK keys left of (and on) the diagonal, keeping a running row max m, running denominator l
// and an unnormalised output accumulator (online softmax), so the T x T score matrix is never
// formed: the only things kept for backward are out and lse = m + log(l) per row. K is
// transposed once per call into a (B, NH, HS, T) scratch (the size of one activation), so each
// item reads its key tiles contiguously instead of gathering 256-byte rows 9 KB apart again and
// again; Q and V are read in place.
// Backward: one work item per (batch, head). It walks key tiles (outer) and the query tiles that
// can see them (inner), recomputing P = exp(S - lse) tile by tile, with D_i = dO_i . O_i:
//   dV_j += sum_i P_ij dO_i,  dS_ij = P_ij (dO_i . v_j - D_i),
//   dK_j += scale sum_i dS_ij q_i,  dQ_i += scale sum_j dS_ij k_j.
// dK/dV of a key tile stay in tile buffers until its last query tile; dQ accumulates in a
// (T, HS) per-thread buffer; the item owns its head's slice of dqkv, so there are no races and
// the result does not depend on the thread count. Memory: O(T * HS) per thread, no T^2 term.
//
// Packed records (doc_start given): query t sees keys doc_start[t] <= k <= t. doc_start grows
// along the row, so the forward starts each query tile at the key tile of its first row's record
// start and the backward stops a key tile's walk at the first query tile whose records start after
// those keys; inside a tile the record start is masked like the causal diagonal.
//
// The inner products are tiny GEMMs (64 x HS x 64) in GCC/Clang vector extensions (16 floats: one
// AVX-512 register, two AVX2 ones, four NEON ones), with HS a compile-time constant for HS in
// {16, 32, 64, 128} so the accumulators stay in registers; other head sizes use plain loops.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "cpu/ops_cpu.h"
#include "base/check.h"
#include "cpu/vecmath.h"
#include "ops/sizes.h"

#define BQ 64   // query rows per tile
#define BK OPS_CPU_ATTN_BK // keys per tile, 64 (the kernels below hard-code 4 vectors of 16 along keys)

typedef float v16 __attribute__((vector_size(64)));
// Builds without -mavx512f (the sanitizer build) would warn that passing v16 by value has a
// different ABI there; these helpers are static and inlined, so no ABI is ever involved.
#pragma GCC diagnostic ignored "-Wpsabi"

static inline v16 v16_load(const float* p) { v16 v; memcpy(&v, p, sizeof(v)); return v; }
static inline void v16_store(float* p, v16 v) { memcpy(p, &v, sizeof(v)); }
static inline v16 v16_splat(float x) { return (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

// ----------------------------------------------------------------------------
// micro-kernels. X/Y/Z row strides (ldx, ldy, ldz) let them read q, k, v, dout and write dqkv
// in place in the (B, T, 3, NH, HS) / (B, T, C) layouts.

// Z[i][0:BK] = sum_d X[i][d] YT[d][0:BK], i < M (Z row stride BK). Vectorised along the 64
// keys, two rows at a time: 8 accumulators, 4 loads per 8 FMAs.
static void mk_rows_times_t(float* Z, const float* X, size_t ldx, const float* YT, size_t ldyt, int M, int HS) {
    int i = 0;
    for (; i + 1 < M; i += 2) {
        const float* x0 = X + (size_t)i * ldx;
        const float* x1 = x0 + ldx;
        v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        for (int d = 0; d < HS; d++) {
            const float* y = YT + (size_t)d * ldyt;
            v16 y0 = v16_load(y), y1 = v16_load(y + 16), y2 = v16_load(y + 32), y3 = v16_load(y + 48);
            v16 s0 = v16_splat(x0[d]), s1 = v16_splat(x1[d]);
            a0 += s0 * y0; a1 += s0 * y1; a2 += s0 * y2; a3 += s0 * y3;
            b0 += s1 * y0; b1 += s1 * y1; b2 += s1 * y2; b3 += s1 * y3;
        }
        float* z = Z + (size_t)i * BK;
        v16_store(z, a0); v16_store(z + 16, a1); v16_store(z + 32, a2); v16_store(z + 48, a3);
        z += BK;
        v16_store(z, b0); v16_store(z + 16, b1); v16_store(z + 32, b2); v16_store(z + 48, b3);
    }
    for (; i < M; i++) {
        const float* x0 = X + (size_t)i * ldx;
        v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int d = 0; d < HS; d++) {
            const float* y = YT + (size_t)d * ldyt;
            v16 s0 = v16_splat(x0[d]);
            a0 += s0 * v16_load(y); a1 += s0 * v16_load(y + 16);
            a2 += s0 * v16_load(y + 32); a3 += s0 * v16_load(y + 48);
        }
        float* z = Z + (size_t)i * BK;
        v16_store(z, a0); v16_store(z + 16, a1); v16_store(z + 32, a2); v16_store(z + 48, a3);
    }
}

// Z[r][0:HS] += sum_{c<C} X[r * xr + c * xc] Y[c][0:HS], r < R, for X a tile of row stride BK:
// (xr, xc) = (BK, 1) gives Z += X Y, (1, BK) gives Z += X^T Y. Vectorised along HS with NV = HS/16,
// and the strides, compile-time constants (always_inline + constant arguments), two rows at a time.
static inline __attribute__((always_inline))
void mk_times_n_v(float* Z, size_t ldz, const float* X, const size_t xr, const size_t xc, const float* Y, size_t ldy,
                  int R, int C, const int NV) {
    int r = 0;
    for (; r + 1 < R; r += 2) {
        v16 a[8], b[8];
        float* z0 = Z + (size_t)r * ldz;
        float* z1 = z0 + ldz;
        for (int v = 0; v < NV; v++) { a[v] = v16_load(z0 + 16 * v); b[v] = v16_load(z1 + 16 * v); }
        const float* x0 = X + (size_t)r * xr;
        for (int c = 0; c < C; c++) {
            v16 s0 = v16_splat(x0[(size_t)c * xc]), s1 = v16_splat(x0[xr + (size_t)c * xc]);
            const float* y = Y + (size_t)c * ldy;
            for (int v = 0; v < NV; v++) { v16 yv = v16_load(y + 16 * v); a[v] += s0 * yv; b[v] += s1 * yv; }
        }
        for (int v = 0; v < NV; v++) { v16_store(z0 + 16 * v, a[v]); v16_store(z1 + 16 * v, b[v]); }
    }
    for (; r < R; r++) {
        v16 a[8];
        float* z0 = Z + (size_t)r * ldz;
        for (int v = 0; v < NV; v++) a[v] = v16_load(z0 + 16 * v);
        const float* x0 = X + (size_t)r * xr;
        for (int c = 0; c < C; c++) {
            v16 s0 = v16_splat(x0[(size_t)c * xc]);
            const float* y = Y + (size_t)c * ldy;
            for (int v = 0; v < NV; v++) a[v] += s0 * v16_load(y + 16 * v);
        }
        for (int v = 0; v < NV; v++) v16_store(z0 + 16 * v, a[v]);
    }
}

// The plain-loop version for head sizes that are not a multiple of 16 (or larger than 128).
static inline __attribute__((always_inline))
void mk_times_n_any(float* Z, size_t ldz, const float* X, const size_t xr, const size_t xc, const float* Y, size_t ldy,
                    int R, int C, int HS) {
    for (int r = 0; r < R; r++) {
        float* z = Z + (size_t)r * ldz;
        for (int c = 0; c < C; c++) {
            float s = X[(size_t)r * xr + (size_t)c * xc];
            const float* y = Y + (size_t)c * ldy;
            #pragma omp simd
            for (int d = 0; d < HS; d++) z[d] += s * y[d];
        }
    }
}

// Dispatch on the head size: constant NV gives register accumulators.
static inline __attribute__((always_inline))
void mk_times_n(float* Z, size_t ldz, const float* X, const size_t xr, const size_t xc, const float* Y, size_t ldy,
                int R, int C, int HS) {
    switch (HS) {
    case 16: mk_times_n_v(Z, ldz, X, xr, xc, Y, ldy, R, C, 1); break;
    case 32: mk_times_n_v(Z, ldz, X, xr, xc, Y, ldy, R, C, 2); break;
    case 64: mk_times_n_v(Z, ldz, X, xr, xc, Y, ldy, R, C, 4); break;
    case 128: mk_times_n_v(Z, ldz, X, xr, xc, Y, ldy, R, C, 8); break;
    default: mk_times_n_any(Z, ldz, X, xr, xc, Y, ldy, R, C, HS); break;
    }
}

// Z[i][0:HS] += sum_{j<K} X[i][j] Y[j][0:HS], i < M (Z += X Y); X row stride BK.
static void mk_rows_times_n(float* Z, size_t ldz, const float* X, const float* Y, size_t ldy, int M, int K, int HS) {
    mk_times_n(Z, ldz, X, BK, 1, Y, ldy, M, K, HS);
}

// Z[j][0:HS] += sum_{i<M} X[i][j] Y[i][0:HS], j < K (Z += X^T Y); X row stride BK.
static void mk_trows_times_n(float* Z, size_t ldz, const float* X, const float* Y, size_t ldy, int M, int K, int HS) {
    mk_times_n(Z, ldz, X, 1, BK, Y, ldy, K, M, HS);
}

// dst[k][r] = src row (t0 + r)[k] for r < n, zero for n <= r < cols (dst row stride ld).
static void transpose_rows(float* dst, size_t ld, const float* src, size_t stride, int t0, int n, int cols, int HS) {
    for (int r = 0; r < cols; r++) {
        if (r < n) {
            const float* s = src + (size_t)(t0 + r) * stride;
            for (int k = 0; k < HS; k++) dst[(size_t)k * ld + r] = s[k];
        } else {
            for (int k = 0; k < HS; k++) dst[(size_t)k * ld + r] = 0.0f;
        }
    }
}

// One call-sized scratch buffer for K^T, reused across calls (ops are called from one host
// thread); released at exit so leak checkers stay quiet.
static float* kt_scratch = NULL;
static size_t kt_scratch_n = 0;
static void kt_scratch_free(void) { cpu_ops_free(kt_scratch); kt_scratch = NULL; kt_scratch_n = 0; }
static float* kt_scratch_get(size_t n) {
    if (n > kt_scratch_n) {
        if (kt_scratch == NULL) atexit(kt_scratch_free);
        cpu_ops_free(kt_scratch);
        kt_scratch = (float*)cpu_ops_alloc(n * sizeof(float));
        kt_scratch_n = n;
    }
    return kt_scratch;
}
static size_t kt_scratch_numel(int B, int T, int C) { return (size_t)B * C * (size_t)(((T + BK - 1) / BK) * BK); }

// The K^T scratch is the only memory attention keeps between calls; the backward takes its
// per-thread tiles per call (O(T * HS) floats a thread), so `backward` adds nothing here.
size_t cpu_attention_scratch_bytes(int B, int T, int C, int NH, int backward) {
    (void)NH; (void)backward;
    return ops_cpu_attention_scratch_bytes(B, T, C); // kt_scratch_numel floats (llmc/ops/sizes.h)
}
void cpu_attention_reserve(int B, int T, int C, int NH, int backward) {
    if (cpu_attention_scratch_bytes(B, T, C, NH, backward)) (void)kt_scratch_get(kt_scratch_numel(B, T, C));
}

// ----------------------------------------------------------------------------
// forward

// The online softmax of one query row over one key tile: the row's scores s (BK, unscaled) become
// its unnormalised probabilities against the running max *m, the running sum *l is rescaled and
// grows by theirs, and the row's output accumulator o (HS) is rescaled by the change of the max.
// Keys j < lo (another record) or j >= lim (the future, or past the end) get p = 0; a row with no
// key visible in this tile changes nothing.
static inline void softmax_tile_row(float* s, float* o, float* m, float* l, int lo, int lim, float scale, int HS) {
    if (lo >= lim) { memset(s, 0, BK * sizeof(float)); return; }
    float mx = *m;
    #pragma omp simd reduction(max:mx)
    for (int j = 0; j < BK; j++) {
        float v = j < lim && j >= lo ? s[j] * scale : -INFINITY;
        s[j] = v;
        mx = v > mx ? v : mx;
    }
    float alpha = vm_expf(*m - mx);   // 0 on the row's first tile (m = -inf)
    float sum = 0.0f;
    #pragma omp simd reduction(+:sum)
    for (int j = 0; j < BK; j++) {
        float p = vm_expf(s[j] - mx);   // exp(-inf) = 0 for masked keys
        s[j] = p;
        sum += p;
    }
    *l = *l * alpha + sum;
    *m = mx;
    if (alpha != 1.0f) {
        #pragma omp simd
        for (int d = 0; d < HS; d++) o[d] *= alpha;
    }
}

void cpu_attention_forward(float* out, float* lse, const float* qkv, const int* doc_start, int B, int T, int C, int NH) {
    assertCheck(NH > 0 && C % NH == 0);
    if (B <= 0 || T <= 0) return;
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t stride = 3 * (size_t)C;   // between consecutive t of one (b, q/k/v, h)
    const int ntiles = (T + BQ - 1) / BQ;
    const int Tp = ((T + BK - 1) / BK) * BK;
    const int nitems = B * NH * ntiles;
    float* KTall = kt_scratch_get(kt_scratch_numel(B, T, C));   // (B, NH, HS, Tp), zero-padded
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            transpose_rows(KTall + (size_t)bh * HS * Tp, (size_t)Tp,
                           qkv + (size_t)b * T * stride + C + (size_t)h * HS, stride, 0, T, Tp, HS);
        }
        float* S = (float*)cpu_ops_alloc((size_t)BQ * BK * sizeof(float));
        float* O = (float*)cpu_ops_alloc((size_t)BQ * HS * sizeof(float));
        float m[BQ], l[BQ];
        // longest items (last query tiles see the most keys) first, for load balance
        #pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < nitems; it++) {
            int qt = ntiles - 1 - it / (B * NH);
            int bh = it % (B * NH);
            int b = bh / NH, h = bh % NH;
            const float* qb = qkv + (size_t)b * T * stride + (size_t)h * HS;
            const float* vb = qb + 2 * (size_t)C;
            const float* KT = KTall + (size_t)bh * HS * Tp;
            const int* starts = doc_start ? doc_start + (size_t)b * T : NULL;
            int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ;
            const float* Q = qb + (size_t)q0 * stride;
            memset(O, 0, (size_t)nq * HS * sizeof(float));
            for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
            int last_key = q0 + nq - 1;
            for (int k0 = starts ? starts[q0] / BK * BK : 0; k0 <= last_key; k0 += BK) {
                int nk = T - k0 < BK ? T - k0 : BK;
                mk_rows_times_t(S, Q, stride, KT + k0, (size_t)Tp, nq, HS);
                for (int i = 0; i < nq; i++) {
                    int lim = q0 + i - k0 + 1;   // keys j < lim are visible (causal, in range)
                    if (lim > nk) lim = nk;
                    int lo = starts ? starts[q0 + i] - k0 : 0;   // and keys j >= lo (the query's record)
                    softmax_tile_row(S + (size_t)i * BK, O + (size_t)i * HS, &m[i], &l[i], lo, lim, scale, HS);
                }
                mk_rows_times_n(O, (size_t)HS, S, vb + (size_t)k0 * stride, stride, nq, nk, HS);
            }
            for (int i = 0; i < nq; i++) {
                float inv = 1.0f / l[i];
                float* dst = out + ((size_t)b * T + q0 + i) * C + (size_t)h * HS;
                const float* o = O + (size_t)i * HS;
                #pragma omp simd
                for (int d = 0; d < HS; d++) dst[d] = o[d] * inv;
                lse[(size_t)bh * T + q0 + i] = m[i] + logf(l[i]);
            }
        }
        cpu_ops_free(S); cpu_ops_free(O);
    }
}

// ----------------------------------------------------------------------------
// backward

// dst[r][0:HS] = scale * src row (t0 + r), r < n; rows n..rows-1 zeroed.
static void load_rows(float* dst, const float* src, size_t stride, int t0, int n, int rows, int HS, float scale) {
    for (int r = 0; r < rows; r++) {
        float* d = dst + (size_t)r * HS;
        if (r < n) {
            const float* s = src + (size_t)(t0 + r) * stride;
            #pragma omp simd
            for (int k = 0; k < HS; k++) d[k] = s[k] * scale;
        } else {
            memset(d, 0, (size_t)HS * sizeof(float));
        }
    }
}

// (Longer than a screen: the per-thread tile buffers are allocated once around the loop over
// (batch, head) and the tile stages share them; each stage is a line or a small helper above.)
void cpu_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, const int* doc_start, int B, int T, int C, int NH, int accumulate) {
    assertCheck(NH > 0 && C % NH == 0);
    if (B <= 0 || T <= 0) return;
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t stride = 3 * (size_t)C;
    const int Tp = ((T + BQ - 1) / BQ) * BQ;   // row count of the per-head buffers, whole tiles
    #pragma omp parallel
    {
        // per-thread, per-head contiguous copies: strided in-place access is slower
        float* Qh = (float*)cpu_ops_alloc((size_t)Tp * HS * sizeof(float));   // scale * q
        float* dOh = (float*)cpu_ops_alloc((size_t)Tp * HS * sizeof(float));
        float* dQh = (float*)cpu_ops_alloc((size_t)Tp * HS * sizeof(float));
        float* Dh = (float*)cpu_ops_alloc((size_t)Tp * sizeof(float));
        float* Ks = (float*)cpu_ops_alloc((size_t)BK * HS * sizeof(float));
        float* KT = (float*)cpu_ops_alloc((size_t)HS * BK * sizeof(float));
        float* VT = (float*)cpu_ops_alloc((size_t)HS * BK * sizeof(float));
        float* P = (float*)cpu_ops_alloc((size_t)BQ * BK * sizeof(float));
        float* dS = (float*)cpu_ops_alloc((size_t)BQ * BK * sizeof(float));
        float* dK = (float*)cpu_ops_alloc((size_t)BK * HS * sizeof(float));
        float* dV = (float*)cpu_ops_alloc((size_t)BK * HS * sizeof(float));
        #pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            const float* qb = qkv + (size_t)b * T * stride + (size_t)h * HS;
            const float* kb = qb + C;
            const float* vb = qb + 2 * (size_t)C;
            const float* dob = dout + (size_t)b * T * C + (size_t)h * HS;
            const float* ob = out + (size_t)b * T * C + (size_t)h * HS;
            const float* lseb = lse + (size_t)bh * T;
            const int* starts = doc_start ? doc_start + (size_t)b * T : NULL;
            float* dqb = dqkv + (size_t)b * T * stride + (size_t)h * HS;
            float* dkb = dqb + C;
            float* dvb = dqb + 2 * (size_t)C;
            load_rows(Qh, qb, stride, 0, T, Tp, HS, scale);   // scale folded into q: S = Qh . k
            load_rows(dOh, dob, (size_t)C, 0, T, Tp, HS, 1.0f);
            memset(dQh, 0, (size_t)Tp * HS * sizeof(float));
            for (int t = 0; t < T; t++) {   // D_t = dO_t . O_t  (= sum_j P_tj dP_tj)
                const float* o = ob + (size_t)t * C;
                const float* g = dOh + (size_t)t * HS;
                float acc = 0.0f;
                #pragma omp simd reduction(+:acc)
                for (int d = 0; d < HS; d++) acc += o[d] * g[d];
                Dh[t] = acc;
            }
            for (int k0 = 0; k0 < T; k0 += BK) {
                int nk = T - k0 < BK ? T - k0 : BK;
                load_rows(Ks, kb, stride, k0, nk, BK, HS, 1.0f);
                transpose_rows(KT, BK, Ks, (size_t)HS, 0, BK, BK, HS);
                transpose_rows(VT, BK, vb, stride, k0, nk, BK, HS);
                memset(dK, 0, (size_t)BK * HS * sizeof(float));
                memset(dV, 0, (size_t)BK * HS * sizeof(float));
                for (int q0 = (k0 / BQ) * BQ; q0 < T; q0 += BQ) {   // query tiles that see these keys
                    if (starts && starts[q0] >= k0 + nk) break;   // (this one's records, and the later ones', start after them)
                    int nq = T - q0 < BQ ? T - q0 : BQ;
                    const float* Qt = Qh + (size_t)q0 * HS;
                    const float* dOt = dOh + (size_t)q0 * HS;
                    mk_rows_times_t(P, Qt, (size_t)HS, KT, BK, nq, HS);    // scores
                    mk_rows_times_t(dS, dOt, (size_t)HS, VT, BK, nq, HS);  // dP = dO . v
                    for (int i = 0; i < nq; i++) {
                        float* p = P + (size_t)i * BK;
                        float* ds = dS + (size_t)i * BK;
                        int lim = q0 + i - k0 + 1;
                        if (lim > nk) lim = nk;
                        int lo = starts ? starts[q0 + i] - k0 : 0;
                        float li = lseb[q0 + i], Di = Dh[q0 + i];
                        #pragma omp simd
                        for (int j = 0; j < BK; j++) {
                            float pj = j < lim && j >= lo ? vm_expf(p[j] - li) : 0.0f;
                            p[j] = pj;
                            ds[j] = pj * (ds[j] - Di);
                        }
                    }
                    mk_trows_times_n(dV, (size_t)HS, P, dOt, (size_t)HS, nq, nk, HS);  // dV += P^T dO
                    mk_trows_times_n(dK, (size_t)HS, dS, Qt, (size_t)HS, nq, nk, HS);  // dK += dS^T (scale q)
                    mk_rows_times_n(dQh + (size_t)q0 * HS, (size_t)HS, dS, Ks, (size_t)HS, nq, nk, HS); // dQ += dS K
                }
                for (int r = 0; r < nk; r++) {
                    float* dk = dkb + (size_t)(k0 + r) * stride;
                    float* dv = dvb + (size_t)(k0 + r) * stride;
                    const float* sk = dK + (size_t)r * HS;
                    const float* sv = dV + (size_t)r * HS;
                    if (accumulate) {
                        #pragma omp simd
                        for (int d = 0; d < HS; d++) { dk[d] += sk[d]; dv[d] += sv[d]; }
                    } else { // each row of dK / dV is finished here once: written
                        #pragma omp simd
                        for (int d = 0; d < HS; d++) { dk[d] = sk[d]; dv[d] = sv[d]; }
                    }
                }
            }
            for (int t = 0; t < T; t++) {
                float* dq = dqb + (size_t)t * stride;
                const float* s = dQh + (size_t)t * HS;
                if (accumulate) {
                    #pragma omp simd
                    for (int d = 0; d < HS; d++) dq[d] += s[d] * scale;
                } else {
                    #pragma omp simd
                    for (int d = 0; d < HS; d++) dq[d] = s[d] * scale;
                }
            }
        }
        cpu_ops_free(Qh); cpu_ops_free(dOh); cpu_ops_free(dQh); cpu_ops_free(Dh); cpu_ops_free(Ks); cpu_ops_free(KT);
        cpu_ops_free(VT); cpu_ops_free(P); cpu_ops_free(dS); cpu_ops_free(dK); cpu_ops_free(dV);
    }
}
