// Flash attention (attention.cu): the softmax, in base 2 (scores times sl2 = log2(e) / sqrt(HS)).
// Forward: the online softmax of a key tile (or chunk) of scores, in two halves around the next
// product (attention_fwd.cuh): fa_fwd_max (the mask, the row maxima over each quad, the running
// max moved lazily, O and l rescaled) and fa_fwd_probs (the probabilities, the row sums, P
// packed as A fragments). Backward (attention_dkv.cuh): P^T = exp2(S^T sl2 - lse2) from the
// forward's lse (fa_dkv_probs) and dS^T = P^T (dP^T - D) (fa_dkv_dsoft). Every exponential is
// ex2.approx.ftz (ptx.cuh): a probability below 2^-126 becomes 0 instead of a subnormal.
// llmc/cuda/README.md ("Flash attention": lazy rescaling) has the long form.
#ifndef LLMC_CUDA_ATTENTION_SOFTMAX_CUH
#define LLMC_CUDA_ATTENTION_SOFTMAX_CUH

#include "cuda/attention_traits.cuh"
#include "cuda/attention_mask.cuh"

// The max / sum of row half h (row g or g + 8) of NC n8 accumulator tiles: a lane's 2 NC values,
// as a tree (depth log2(2 NC) instead of a chain: with 2 warps a scheduler, the softmax's latency
// is what the tensor cores wait for).
template <int NC>
__device__ __forceinline__ float fa_half_max(const float (&s)[NC][4], int h) {
    float m[NC];
FA_UNROLL
    for (int n = 0; n < NC; n++) m[n] = fmaxf(s[n][2 * h], s[n][2 * h + 1]);
FA_UNROLL
    for (int w = NC / 2; w > 0; w /= 2)
FA_UNROLL
        for (int i = 0; i < w; i++) m[i] = fmaxf(m[i], m[i + w]);
    return m[0];
}
template <int NC>
__device__ __forceinline__ float fa_half_sum(const float (&s)[NC][4], int h) {
    float m[NC];
FA_UNROLL
    for (int n = 0; n < NC; n++) m[n] = s[n][2 * h] + s[n][2 * h + 1];
FA_UNROLL
    for (int w = NC / 2; w > 0; w /= 2)
FA_UNROLL
        for (int i = 0; i < w; i++) m[i] += m[i + w];
    return m[0];
}

// Rescaling is lazy (as FlashAttention-4 does it): a row's reference max m moves only when a
// chunk's max exceeds it by more than FA_SLACK (base 2), so a probability 2^(s sl2 - m) stays <= 2^8
// between moves, which the fp32 O and l and the bf16 P hold as well as values <= 1 (floating point:
// the same relative rounding). O, l and lse = m + log2 l all use the same m, so the result is the
// exact softmax either way. The test is warp-uniform (__any_sync): a warp whose rows' maxima stay
// within the slack skips O's 16 MT FMUL a row half, l's and the 2 MT MUFU of the factors, and PV
// does not wait on them. A row's first visible chunk always moves m (from -inf).
#define FA_SLACK 8.0f

// Every row of this warp: m to max(m, mx) (mx: the chunk's row max, base-2 units), O and l scaled
// by 2^(m_old - m_new). A row that sees no key yet keeps m = -inf (O, l stay 0).
template <int HS>
__device__ __forceinline__ void fa_fwd_rescale(FaFwd<HS>& f, const float (&mx)[FaCfg<HS>::MT][2]) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++)
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            const float mnew = fmaxf(f.m[mt][h], mx[mt][h]);
            const float alpha = ptx_ex2_approx_ftz(f.m[mt][h] - (mnew == -INFINITY ? 0.0f : mnew));
            f.m[mt][h] = mnew;
            f.l[mt][h] *= alpha;
FA_UNROLL
            for (int n = 0; n < Cf::NT; n++) { f.o[mt][n][2 * h] *= alpha; f.o[mt][n][2 * h + 1] *= alpha; }
        }
}

// The first half of a chunk's online softmax: masks (MASK: keys the row does not see get -inf; kc
// the chunk's first key), the chunk's row maxima over the quads, m moved (O, l rescaled) if a
// row's max passed m + FA_SLACK.
template <int HS, int NC, bool MASK>
__device__ __forceinline__ void fa_fwd_max(FaFwd<HS>& f, float (&s)[FaCfg<HS>::MT][NC][4], int row0, int kc, float sl2) {
    typedef FaCfg<HS> Cf;
    float mx[Cf::MT][2];
    bool grow = false;
    // masking: fa_sees in coordinates moved by kc + 2t (the rule only compares), so each element
    // compares its compile-time column 8n + (e & 1) with two values a row half
    const int shift = kc + fa_c_col(0);
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++) {
        if (MASK)
FA_UNROLL
            for (int n = 0; n < NC; n++)
FA_UNROLL
                for (int e = 0; e < 4; e++)
                    if (!fa_sees(row0 + 16 * mt + fa_c_row(e) - shift, 8 * n + (e & 1), f.row_start[mt][fa_c_half(e)] - shift))
                        s[mt][n][e] = -INFINITY;
FA_UNROLL
        for (int h = 0; h < 2; h++) {
            float m = fa_half_max<NC>(s[mt], h);
            m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, 1));
            m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, 2));
            mx[mt][h] = m * sl2;
            grow |= mx[mt][h] > f.m[mt][h] + FA_SLACK;
        }
    }
    if (__any_sync(FULL_MASK, grow)) fa_fwd_rescale<HS>(f, mx);
}

// The second half: s into the probabilities 2^(s sl2 - m), summed into l and packed as A fragments
// p (NC / 2 k16 steps over the chunk's keys). A row with m = -inf subtracts 0 instead, so no
// inf - inf is formed.
template <int HS, int NC>
__device__ __forceinline__ void fa_fwd_probs(FaFwd<HS>& f, float (&s)[FaCfg<HS>::MT][NC][4],
                                             uint32_t (&p)[FaCfg<HS>::MT][NC / 2][4], float sl2) {
    typedef FaCfg<HS> Cf;
FA_UNROLL
    for (int mt = 0; mt < Cf::MT; mt++) {
        const float base[2] = {f.m[mt][0] == -INFINITY ? 0.0f : f.m[mt][0], f.m[mt][1] == -INFINITY ? 0.0f : f.m[mt][1]};
FA_UNROLL
        for (int n = 0; n < NC; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) s[mt][n][e] = ptx_ex2_approx_ftz(fmaf(s[mt][n][e], sl2, -base[fa_c_half(e)]));
FA_UNROLL
        for (int h = 0; h < 2; h++) f.l[mt][h] += fa_half_sum<NC>(s[mt], h);
FA_UNROLL
        for (int kk = 0; kk < NC / 2; kk++) fa_pack_a(p[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
    }
}

// P^T = exp2(S^T sl2 - lse2) of this warp's keys kw.. (rows) and queries qs.. of the stage
// (columns), as the bf16 A fragments pa[mk][kk] of dV += P^T dO (k16 step kk over the queries).
// MASK: pairs the query does not see (fa_sees; queries past T) get P = 0.
template <int MK, int QN, bool MASK>
__device__ __forceinline__ void fa_dkv_probs(uint32_t (&pa)[MK][QN / 2][4], float (&s)[MK][QN][4], const float* sl2v,
                                             int qs, int q0, int kw, const int* ds, int T, float sl2) {
FA_UNROLL
    for (int mk = 0; mk < MK; mk++) {
FA_UNROLL
        for (int n = 0; n < QN; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) {
                const int c = qs + 8 * n + fa_c_col(e), q = q0 + c;
                float p = ptx_ex2_approx_ftz(fmaf(s[mk][n][e], sl2, -sl2v[c]));
                if (MASK && !(q < T && fa_sees(q, kw + 16 * mk + fa_c_row(e), fa_record_start(ds, q, T)))) p = 0.0f;
                s[mk][n][e] = p;
            }
FA_UNROLL
        for (int kk = 0; kk < QN / 2; kk++) fa_pack_a(pa[mk][kk], s[mk][2 * kk], s[mk][2 * kk + 1]);
    }
}

// Element e of n8 tile n of a fragment packed by fa_pack_a (tiles 2kk, 2kk + 1 into a[kk]), back
// in fp32 (exact: a bf16 is the top half of its fp32).
__device__ __forceinline__ float fa_packed(const uint32_t (&a)[4], int n, int e) {
    const uint32_t r = a[2 * (n & 1) + fa_c_half(e)];
    return __uint_as_float((e & 1) ? r & 0xffff0000u : r << 16);
}

// dS^T = P^T (dP^T - D) in place of dp, with the bf16 P^T of pa (the P that dV += P^T dO uses:
// holding it packed instead of in fp32 across the dP^T product saves 8 MK QN / 2 registers).
template <int MK, int QN>
__device__ __forceinline__ void fa_dkv_dsoft(float (&dp)[MK][QN][4], const uint32_t (&pa)[MK][QN / 2][4], const float* sd,
                                             int qs) {
FA_UNROLL
    for (int mk = 0; mk < MK; mk++)
FA_UNROLL
        for (int n = 0; n < QN; n++)
FA_UNROLL
            for (int e = 0; e < 4; e++) dp[mk][n][e] = fa_packed(pa[mk][n / 2], n, e) * (dp[mk][n][e] - sd[qs + 8 * n + fa_c_col(e)]);
}

#endif // LLMC_CUDA_ATTENTION_SOFTMAX_CUH
