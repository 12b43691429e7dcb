// The CUDA backend's flash attention (llmc/cuda/attention.cu: mma.sync / ldmatrix / cp.async
// kernels on the PTX ISA's fragment layouts), run on the CPU through the CUDA-on-CPU harness
// (whose emulation of those instructions test/cuda_cpu/test_ptx.cu checks against the ISA's
// tables), against the CPU backend's attention (llmc/cpu/attention.c, fp32; itself checked
// against double-precision references and finite differences in test_ops), on the same bf16-exact
// inputs: forward out and lse, backward dQ, dK, dV (accumulated into a non-zero dqkv, and written
// over it; the backward is deterministic: dS tiles + dQ kernel):
//   - T in {1, 63, 64, 65, 127, 128, 129} (one row; one short of, exactly, one past a 64-row and
//     a 128-row tile) for head sizes 16, 32, 64, 128; T 1000 and 1024 (not under TSan); B x NH
//     from 1 to 96 (65: two unequal groups of heads in the blocks' start order); the other head sizes (48, 80, 96, 112); misaligned buffers (the scalar
//     load/store paths); sharply peaked scores (the online softmax's rescaling), and scores growing
//     along the keys (the forward's lazy rescaling moves m mid-row);
//   - packed sequences (doc_start): several records per row, records of length 1, records
//     crossing 64- and 128-row tile boundaries, against the CPU reference run on each record on
//     its own; also through the simple kernels (head size 8);
//   - two backward runs give the same bits, and so does the backward run in chunks of heads (the
//     dS scratch's cap);
//   - edge tiles: with every row past the end of qkv / dout / out / lse poisoned with NaN instead
//     of zeros, every output is bit-identical (nothing past T is read, or it is never used).
//   - shared-memory bank conflicts (harness only; cuda_cpu.h's counter): none in the ldmatrix
//     reads, cp.async writes and the dK/dV kernel's dS^T staging (4-byte stores, 16-byte loads) of
//     the HS 64 kernels (forward, dK/dV and dQ); the counts of HS 16, 32, 128 are printed (and
//     held where they are zero).
// Each side runs its own backward from its own forward outputs, as training does.
//
// Tolerances (bf16 outputs and bf16 tensor-core operands P, dS): out |d| <= 1e-2 + 1.6e-2 |ref|;
// lse |d| <= 2e-4 + 1e-5 |ref| (fp32 all the way); dqkv |d| <= 2e-2 max|ref| + 2e-2 |ref| per
// section (dQ, dK, dV scale differently). The worst error found is printed relative to them.
//
// FLASH_TEST_QUICK=1: one shape (the TSan mutants of check_flash_mutants.sh).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "ops/ops.h"
#include "cpu/ops_cpu.h"
#include "cuda/ops_cuda.h"
#include "cuda/attention.cuh"
#include "test/cuda_test.h"
#include "base/timer.h"

static TestRng g_rng = { 0x9E3779B97F4A7C15ull, 0 };
// T 1000 / 1024: not under TSan (2 OS threads, every access tracked: minutes), where the races
// they could show are those of the multi-tile shapes, which run there
#if defined(__SANITIZE_THREAD__)
static const bool g_long = false;
#else
static const bool g_long = true;
#endif
static vecf rnd_vec(size_t n, float scale) { return cuda_test_rnd_vec(&g_rng, n, scale); }
typedef std::vector<int> veci;

// one section (0 q, 1 k, 2 v) of a (B, T, 3, C) tensor
static vecf section(const vecf& x, int B, int T, int C, int sec) {
    vecf s((size_t)B * T * C);
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int c = 0; c < C; c++) s[bt * C + c] = x[bt * 3 * C + (size_t)sec * C + c];
    return s;
}
static double max_abs(const vecf& x) {
    double m = 0.0;
    for (float v : x) m = std::max(m, (double)fabs(v));
    return m;
}

// The CPU reference, fp32: forward, then backward from its own out / lse into dqkv (+= with
// accumulate). With doc_start, each record [s, e) of each row is a sequence of its own.
static void cpu_reference(vecf& out, vecf& lse, vecf& dqkv, const vecf& qkv, const vecf& dout, const veci* ds, int B,
                          int T, int C, int NH, int accumulate) {
    if (!ds) {
        cpu_attention_forward(out.data(), lse.data(), qkv.data(), NULL, B, T, C, NH);
        cpu_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), NULL, B, T, C, NH, accumulate);
        return;
    }
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T;) {
            int e = s + 1;
            while (e < T && (*ds)[(size_t)b * T + e] == s) e++;
            int L = e - s;
            size_t r0 = (size_t)b * T + s;
            vecf q(qkv.begin() + r0 * 3 * C, qkv.begin() + (r0 + L) * 3 * C), g(dout.begin() + r0 * C, dout.begin() + (r0 + L) * C);
            vecf o((size_t)L * C), l((size_t)NH * L), d(dqkv.begin() + r0 * 3 * C, dqkv.begin() + (r0 + L) * 3 * C);
            cpu_attention_forward(o.data(), l.data(), q.data(), NULL, 1, L, C, NH);
            cpu_attention_backward(d.data(), g.data(), q.data(), o.data(), l.data(), NULL, 1, L, C, NH, accumulate);
            std::copy(o.begin(), o.end(), out.begin() + r0 * C);
            std::copy(d.begin(), d.end(), dqkv.begin() + r0 * 3 * C);
            for (int h = 0; h < NH; h++) std::copy(l.begin() + (size_t)h * L, l.begin() + (size_t)(h + 1) * L, lse.begin() + ((size_t)b * NH + h) * T + s);
            s = e;
        }
}

// Records of a packed row: the starts (ascending, the first 0) -> doc_start of every position.
static veci doc_starts(int B, int T, const std::vector<veci>& starts) {
    veci ds((size_t)B * T);
    for (int b = 0; b < B; b++) {
        const veci& st = starts[(size_t)b % starts.size()];
        for (int t = 0, k = 0; t < T; t++) {
            while (k + 1 < (int)st.size() && st[k + 1] <= t) k++;
            ds[(size_t)b * T + t] = st[k];
        }
    }
    return ds;
}

static void check_sections(const char* what, const char* cfg, const vecf& got, const vecf& want, const vecf& base, int B,
                           int T, int C) {
    static const char* sec_name[3] = {"dQ", "dK", "dV"};
    char name[240];
    for (int sec = 0; sec < 3; sec++) {
        vecf g = section(got, B, T, C, sec), w = section(want, B, T, C, sec), delta = w;
        vecf a0 = section(base, B, T, C, sec);
        for (size_t i = 0; i < delta.size(); i++) delta[i] -= a0[i];   // the gradient alone sets the scale
        snprintf(name, sizeof(name), "flash backward %s %s (%s)", sec_name[sec], what, cfg);
        check(name, g, w, 2e-2, 2e-2 * std::max(max_abs(delta), 1e-3));
    }
}

// grow > 0: key t's K row times 2^(t / grow) (exact in bf16), so the scores' scale doubles every
// grow keys and later key chunks pass the running max by more than the forward's lazy-rescale
// slack (2^8): O and l rescaled in the middle of a row, not only at its first chunk.
static void test_case(int B, int T, int HS, int NH, float in_scale, int offset, const veci* ds = NULL, int grow = 0) {
    char name[240], cfg[160];
    snprintf(cfg, sizeof(cfg), "B=%d T=%d HS=%d NH=%d%s%s%s%s", B, T, HS, NH, in_scale > 2.0f ? " peaked" : "",
             offset ? " misaligned" : "", ds ? " packed" : "", grow ? " growing" : "");
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    vecf qkv = rnd_vec(nqkv, in_scale), dout = rnd_vec(nout, 1.0f), acc0 = rnd_vec(nqkv, 0.5f);
    for (int b = 0; grow && b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++) qkv[((size_t)b * T + t) * 3 * C + C + i] *= ldexpf(1.0f, t / grow);
    vecf r_out(nout), r_lse(nlse), r_dqkv = acc0, r_w = acc0, r_out2(nout), r_lse2(nlse);
    cpu_reference(r_out, r_lse, r_dqkv, qkv, dout, ds, B, T, C, NH, 1);
    cpu_reference(r_out2, r_lse2, r_w, qkv, dout, ds, B, T, C, NH, 0);

    Dev d_qkv(qkv, offset), d_out(nout, offset), d_dout(dout, offset), d_dqkv(acc0, offset), d_w(acc0, offset), d_w2(acc0, offset);
    float* d_lse = (float*)cuda_ops_alloc(nlse * sizeof(float));
    int* d_ds = NULL;
    if (ds) {
        d_ds = (int*)cuda_ops_alloc(ds->size() * sizeof(int));
        cuda_ops_to_device(d_ds, ds->data(), ds->size() * sizeof(int));
    }
    cuda_attention_forward(d_out.p, d_lse, d_qkv.p, d_ds, B, T, C, NH);
    vecf g_lse(nlse);
    cuda_ops_to_host(g_lse.data(), d_lse, nlse * sizeof(float));
    snprintf(name, sizeof(name), "flash forward out (%s)", cfg);
    check(name, d_out.get(), r_out, 1.6e-2, 1e-2);
    snprintf(name, sizeof(name), "flash forward lse (%s)", cfg);
    check(name, g_lse, r_lse, 1e-5, 2e-4);

    cuda_attention_backward(d_dqkv.p, d_dout.p, d_qkv.p, d_out.p, d_lse, d_ds, B, T, C, NH, 1);
    check_sections("+=", cfg, d_dqkv.get(), r_dqkv, acc0, B, T, C);
    // accumulate 0: written over acc0 (the device buffer is not read), against the CPU's write
    cuda_attention_backward(d_w.p, d_dout.p, d_qkv.p, d_out.p, d_lse, d_ds, B, T, C, NH, 0);
    vecf g_w = d_w.get();
    check_sections("written", cfg, g_w, r_w, vecf(nqkv, 0.0f), B, T, C);
    // a second run gives the same bits
    cuda_attention_backward(d_w2.p, d_dout.p, d_qkv.p, d_out.p, d_lse, d_ds, B, T, C, NH, 0);
    vecf g_w2 = d_w2.get();
    snprintf(name, sizeof(name), "deterministic backward: two runs give the same bits (%s)", cfg);
    TEST_CHECK(memcmp(g_w.data(), g_w2.data(), nqkv * sizeof(float)) == 0, "%s", name);
    cuda_ops_free(d_lse);
    if (d_ds) cuda_ops_free(d_ds);
}

// A bf16 device copy of h followed by `tail` elements of `fill` (NaN: poison).
static floatX* dev_with_tail(const vecf& h, size_t tail, float fill) {
    floatX* p = (floatX*)cuda_ops_alloc((h.size() + tail) * sizeof(floatX));
    vecf all(h);
    all.resize(h.size() + tail, fill);
    cuda_ops_upload_f32(p, all.data(), all.size());
    return p;
}
static vecf dev_get(const floatX* p, size_t n) {
    vecf h(n);
    cuda_ops_download_f32(h.data(), p, n);
    return h;
}

// Forward and backward with every buffer followed by 64 rows of `fill`; outputs to host.
static void run_with_tails(vecf& out, vecf& lse, vecf& dqkv, const vecf& qkv, const vecf& dout, const vecf& acc0, int B,
                           int T, int C, int NH, float fill) {
    const size_t tail = (size_t)64 * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    floatX *d_qkv = dev_with_tail(qkv, tail, fill), *d_dout = dev_with_tail(dout, tail, fill);
    floatX *d_out = dev_with_tail(vecf(nout, 0.0f), tail, fill), *d_dqkv = dev_with_tail(acc0, tail, fill);
    float* d_lse = (float*)cuda_ops_alloc((nlse + 64) * sizeof(float));
    vecf lse_tail(nlse + 64, fill);
    cuda_ops_to_device(d_lse, lse_tail.data(), lse_tail.size() * sizeof(float));
    cuda_attention_forward(d_out, d_lse, d_qkv, NULL, B, T, C, NH);
    cuda_attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, NULL, B, T, C, NH, 1);
    out = dev_get(d_out, nout);
    dqkv = dev_get(d_dqkv, qkv.size());
    lse.resize(nlse);
    cuda_ops_to_host(lse.data(), d_lse, nlse * sizeof(float));
    for (floatX* p : {d_qkv, d_dout, d_out, d_dqkv}) cuda_ops_free(p);
    cuda_ops_free(d_lse);
}

// Edge tiles: the same results, bit for bit, whether the memory past T holds zeros or NaN.
static void test_poisoned_tail(int B, int T, int HS, int NH) {
    int C = NH * HS;
    vecf qkv = rnd_vec((size_t)B * T * 3 * C, 1.5f), dout = rnd_vec((size_t)B * T * C, 1.0f), acc0 = rnd_vec(qkv.size(), 0.5f);
    vecf o0, l0, d0, o1, l1, d1;
    run_with_tails(o0, l0, d0, qkv, dout, acc0, B, T, C, NH, 0.0f);
    run_with_tails(o1, l1, d1, qkv, dout, acc0, B, T, C, NH, NAN);
    bool same = memcmp(o0.data(), o1.data(), o0.size() * 4) == 0 && memcmp(l0.data(), l1.data(), l0.size() * 4) == 0 &&
                memcmp(d0.data(), d1.data(), d0.size() * 4) == 0;
    TEST_CHECK(same, "flash attention with NaN past T gives the results it gives with zeros there (B=%d T=%d HS=%d NH=%d)",
               B, T, HS, NH);
}

// The deterministic backward in chunks of heads (the dS scratch capped at 3 heads' tiles) gives
// the bits it gives in one launch.
static void test_head_chunks(int B, int T, int HS, int NH) {
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    vecf qkv = rnd_vec(nqkv, 1.5f), dout = rnd_vec(nout, 1.0f);
    Dev d_qkv(qkv), d_out(nout), d_dout(dout), d_one(nqkv), d_chunked(nqkv);
    float* d_lse = (float*)cuda_ops_alloc((size_t)B * NH * T * sizeof(float));
    cuda_attention_forward(d_out.p, d_lse, d_qkv.p, NULL, B, T, C, NH);
    cuda_attention_backward(d_one.p, d_dout.p, d_qkv.p, d_out.p, d_lse, NULL, B, T, C, NH, 0);
    size_t nt = (size_t)(T + 63) / 64;
    attention_set_ds_limit(3 * nt * (nt + 1) / 2 * 64 * 64 * 2);
    cuda_attention_backward(d_chunked.p, d_dout.p, d_qkv.p, d_out.p, d_lse, NULL, B, T, C, NH, 0);
    attention_set_ds_limit(0);
    vecf a = d_one.get(), b = d_chunked.get();
    TEST_CHECK(memcmp(a.data(), b.data(), nqkv * sizeof(float)) == 0,
               "deterministic backward in chunks of 3 heads gives the bits of one launch (B=%d T=%d HS=%d NH=%d)", B, T, HS, NH);
    cuda_ops_free(d_lse);
}

// Packed rows: record lengths 1, tile-crossing records, a row that is one record.
static void test_packed(void) {
    std::vector<veci> starts = {{0, 1, 70, 130, 131}, {0, 64, 65, 127, 129, 190}, {0}};
    veci ds = doc_starts(3, 200, starts);
    test_case(3, 200, 64, 2, 1.5f, 0, &ds);
    test_case(3, 200, 16, 1, 1.5f, 0, &ds);
    test_case(2, 200, 128, 1, 1.5f, 0, &ds);
    std::vector<veci> small = {{0, 1, 30, 33, 70}, {0, 40, 41}};
    veci ds8 = doc_starts(2, 80, small);
    test_case(2, 80, 8, 1, 1.5f, 0, &ds8);   // head size 8: the simple kernels (32-key tiles)
    std::vector<veci> many = {{0, 3, 4, 5, 17, 40, 41, 63, 64, 66}, {0, 10, 65}};
    veci ds2 = doc_starts(2, 67, many);
    test_case(2, 67, 32, 3, 1.5f, 1, &ds2);
}

static void test_shapes(void) {
    for (int T : {1, 63, 64, 65, 127, 128, 129})
        for (int HS : {16, 32, 64, 128}) test_case(1, T, HS, 1, 1.5f, 0);
    for (int T : {1, 65, 129}) test_case(2, T, 64, 3, 1.5f, 0);
    if (g_long) {
        test_case(1, 1024, 64, 1, 1.5f, 0);
        test_case(1, 1000, 16, 1, 1.5f, 0);
    }
    test_case(8, 17, 64, 12, 1.5f, 0);    // 96 heads
    test_case(4, 17, 16, 24, 1.5f, 0);    // 96 heads
    test_case(5, 130, 16, 13, 1.5f, 0);   // 65 heads: fa_block's groups of 33 and 32, 2 or 3 tiles a head
    for (int HS : {48, 80, 96, 112}) test_case(1, 100, HS, 2, 1.5f, 0);
    test_case(2, 33, 32, 2, 1.5f, 1);     // misaligned: scalar loads and stores
    test_case(1, 129, 64, 2, 1.5f, 1);
    test_case(1, 130, 64, 2, 4.0f, 0);    // peaked scores: the running max moves a lot
    for (int HS : {16, 64, 128}) test_case(1, 200, HS, 2, 1.5f, 0, NULL, 24);   // scores growing along the keys
    // head size 64's forward in 1 and in 2 softmax steps a key tile (attention_bench times both)
    for (int ch : {1, 2}) {
        attention_set_forward_chunks(ch);
        test_case(1, 129, 64, 2, 1.5f, 1);
        test_case(1, 130, 64, 2, 4.0f, 0);
        test_case(1, 200, 64, 2, 1.5f, 0, NULL, 24);
        veci ds = doc_starts(3, 200, {{0, 1, 70, 130, 131}, {0, 64, 65, 127, 129, 190}, {0, 40, 100, 161}});
        test_case(3, 200, 64, 2, 1.5f, 0, &ds);
    }
    attention_set_forward_chunks(0);
}

#if defined(CUDA_CPU_HARNESS)
// Shared-memory bank conflicts of the kernels' ldmatrix reads, cp.async writes and (dK/dV) the dS^T
// staging's 4-byte stores and 16-byte loads, as the harness counts them (cuda_cpu.h:
// CudaCpuSmemStats; the bank rule in cuda_cpu.cpp), over forward and backward at T 200 (two
// 128-row and four 64-row tiles, the last ones partial: double buffering and zero-filled rows).
// HS 64 (every GPT-2 size) must have none; the other head sizes are printed, and held to zero
// where they have none (BANK_ZERO).
static const char* const BANK_KERNELS[3] = {"flash_attention_forward_kernel", "flash_attention_backward_dkv_kernel<HS>",
                                            "flash_attention_backward_dq_kernel<HS>"};
static const char* const BANK_LABELS[3] = {"forward", "dK/dV", "dQ"};
// Per head size, per kernel: 1 ldmatrix (and the staging) must be conflict-free, 2 cp.async must
// be (3 both). HS 16 and 32 (rows padded to 48 and 80 bytes) fill their tiles with 2-way
// conflicts: the 8 lanes of a store phase write 4 rows x 2 chunks (HS 16; bank groups 3r + c) or
// 2 rows x 4 chunks (HS 32; 5r + c), which wrap around onto one another: one extra wavefront in
// every phase. Printed, not failed.
static const struct { int hs, zero[3]; } BANK_ZERO[] = {{16, {1, 1, 1}}, {32, {1, 1, 1}}, {64, {3, 3, 3}}, {128, {3, 3, 3}}};

// One forward and one backward (B 1, NH 2).
static void bank_run(int T, int HS) {
    const int B = 1, NH = 2, C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    Dev d_qkv(rnd_vec(nqkv, 1.5f)), d_out(nout), d_dout(rnd_vec(nout, 1.0f)), d_dqkv(nqkv);
    float* d_lse = (float*)cuda_ops_alloc((size_t)B * NH * T * sizeof(float));
    cuda_attention_forward(d_out.p, d_lse, d_qkv.p, NULL, B, T, C, NH);
    cuda_attention_backward(d_dqkv.p, d_dout.p, d_qkv.p, d_out.p, d_lse, NULL, B, T, C, NH, 0);
    cuda_ops_free(d_lse);
}

static void test_bank_conflicts(void) {
    for (const auto& hz : BANK_ZERO) {
        cuda_cpu_smem_stats_reset();
        bank_run(200, hz.hs);
        for (int k = 0; k < 3; k++) {
            const CudaCpuSmemStats s = cuda_cpu_smem_stats(BANK_KERNELS[k]);
            const long xl = s.ldsm_wavefronts - s.ldsm_ideal, xc = s.cp_wavefronts - s.cp_ideal;
            const long xs = s.st_wavefronts - s.st_ideal, xd = s.ld_wavefronts - s.ld_ideal;
            printf("banks %-42s HS %3d: ldmatrix %6ld instrs %5ld extra wavefronts, cp.async %5ld groups %5ld extra, "
                   "st.shared %5ld instrs %4ld extra, ld.shared.v4 %4ld instrs %4ld extra\n",
                   BANK_KERNELS[k], hz.hs, s.ldsm, xl, s.cp, xc, s.st, xs, s.ld, xd);
            TEST_CHECK(s.ldsm > 0 && s.cp > 0, "banks: %s (HS %d) ran ldmatrix and cp.async (counted under its name)",
                       BANK_KERNELS[k], hz.hs);
            if (k == 1)
                TEST_CHECK(s.st > 0 && s.ld > 0 && xs == 0 && xd == 0,
                           "dK/dV, HS %d: the dS^T staging ran (%ld 4-byte stores, %ld 16-byte loads) without bank conflicts "
                           "(%ld and %ld extra wavefronts)", hz.hs, s.st, s.ld, xs, xd);
            if (hz.zero[k] & 1)
                TEST_CHECK(xl == 0, "%s, HS %d: ldmatrix without bank conflicts (%ld extra wavefronts over %ld instructions)",
                           BANK_LABELS[k], hz.hs, xl, s.ldsm);
            if (hz.zero[k] & 2)
                TEST_CHECK(xc == 0, "%s, HS %d: cp.async writes without bank conflicts (%ld extra wavefronts over %ld groups)",
                           BANK_LABELS[k], hz.hs, xc, s.cp);
        }
    }
}
#endif

int main(void) {
    cuda_ops_init(0);
    double t0 = timer_now_s();
    TEST_CHECK(attention_flash_supported(16) && attention_flash_supported(64) && attention_flash_supported(128),
               "flash kernels must serve head sizes 16, 64, 128");
    TEST_CHECK(!attention_flash_supported(8) && !attention_flash_supported(72) && !attention_flash_supported(144),
               "head sizes not a multiple of 16, or above 128, go to the simple kernels");
    if (getenv("FLASH_TEST_QUICK")) {   // one shape (the mutation checks of check_flash_mutants.sh)
        test_case(1, 130, 64, 1, 1.5f, 0);
        return test_finish("test_cuda_flash_attention (quick)");
    }
#if defined(CUDA_CPU_HARNESS)
    test_bank_conflicts();
#endif
    test_shapes();
    test_packed();
    for (int HS : {16, 64, 128}) test_poisoned_tail(2, 100, HS, 2);
    test_head_chunks(2, 130, 64, 4);
    printf("worst error over all checks: %.3f of tolerance, in %s\n", g_worst_rel, g_worst_name);
    printf("time %.2fs\n", timer_now_s() - t0);
    return test_finish("test_cuda_flash_attention");
}
