// Causal attention on the GPU, three ways side by side (forward; flash also backward):
//   1 naive   one thread per query row, two passes over the keys on CUDA cores (fp32 math)
//   2 cublas  permute qkv to (B, NH, T, HS), S = Q K^T with a strided-batched cuBLAS GEMM (bf16 in,
//             fp32 out: the whole B x NH x T x T matrix), causal softmax kernel (P in bf16, lse),
//             O = P V with a second GEMM, un-permute to (B, T, C)
//   3 flash   the backend's kernels (llmc/cuda/attention.cu: mma.sync m16n8k16 on the documented
//             fragment layouts, ldmatrix, cp.async; O(T) memory): forward, and the deterministic
//             backward (dK/dV kernel storing the dS tiles + dQ kernel)
// For each: correctness against a CPU reference (batch 0, double accumulation: the forward of every
// head, the flash backward's dQ, dK, dV of heads 0 and NH-1), time per call with cudaEvents, FLOPs
// (causal: only the T (T + 1) / 2 visible pairs count; backward 5 products), minimum bytes moved
// and achieved TFLOP/s, as report.cuh's lines (scripts/gpu_check.sh's report divides by the
// device's peak). Also: the backward run twice gives the same bits; the flash kernels'
// registers, shared memory and blocks per SM (the occupancy API), beside llmc/cuda/README.md's
// predictions. Exit status 1 when a version does not match the CPU.
//
// Build: make bench-cuda (mk/bench.mk) -> build/cuda/dev/cuda/attention_bench; `make cuda-check`
// compiles it too. Run: attention_bench [B T NH HS] (one shape); without arguments B 16, NH 12,
// HS 64 (GPT-2 124M) at T 512, 1024 and 2048.
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <vector>
#include <cublas_v2.h>
#include "llmc/cuda/attention.cu"
#include "llmc/cuda/attention_simple.cu"
#include "common.cuh"   // dev/cuda: dev_time_ms, report.cuh

// the backend's scratch allocator (llmc/cuda/backend.cu), reduced to what attention needs
void* ops_scratch(int slot, size_t bytes) {
    static void* p[OPS_SCRATCH_COUNT];
    static size_t have[OPS_SCRATCH_COUNT];
    if (bytes > have[slot]) {
        if (p[slot]) cudaCheck(cudaFree(p[slot]));
        cudaCheck(cudaMalloc(&p[slot], bytes));
        have[slot] = bytes;
    }
    return p[slot];
}

static void cublas_check(cublasStatus_t s, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "cuBLAS error %d at line %d\n", (int)s, line); exit(1); }
}
#define cublasCheck(x) cublas_check((x), __LINE__)

// ------------------------------------------------------------------------------------------
// 1 naive

__global__ void naive_attention_kernel(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;   // (b, h, t)
    if (idx >= B * NH * T) return;
    int t = idx % T, bh = idx / T, b = bh / NH, h = bh % NH, C = NH * HS;
    const bf16* q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
    float scale = 1.0f / sqrtf((float)HS), m = -INFINITY, l = 0.0f;
    for (int s = 0; s <= t; s++) {
        const bf16* k = qkv + ((size_t)b * T + s) * 3 * C + C + (size_t)h * HS;
        float a = 0.0f;
        for (int d = 0; d < HS; d++) a += __bfloat162float(q[d]) * __bfloat162float(k[d]);
        m = fmaxf(m, a * scale);
    }
    for (int s = 0; s <= t; s++) {
        const bf16* k = qkv + ((size_t)b * T + s) * 3 * C + C + (size_t)h * HS;
        float a = 0.0f;
        for (int d = 0; d < HS; d++) a += __bfloat162float(q[d]) * __bfloat162float(k[d]);
        l += expf(a * scale - m);
    }
    float acc[128];   // HS <= 128 (local memory: this is the naive version)
    for (int d = 0; d < HS; d++) acc[d] = 0.0f;
    for (int s = 0; s <= t; s++) {
        const bf16* k = qkv + ((size_t)b * T + s) * 3 * C + C + (size_t)h * HS;
        const bf16* v = k + C;
        float a = 0.0f;
        for (int e = 0; e < HS; e++) a += __bfloat162float(q[e]) * __bfloat162float(k[e]);
        float p = expf(a * scale - m);
        for (int d = 0; d < HS; d++) acc[d] += p * __bfloat162float(v[d]);
    }
    bf16* o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
    for (int d = 0; d < HS; d++) o[d] = __float2bfloat16(acc[d] / l);
    lse[idx] = m + logf(l);
}

// ------------------------------------------------------------------------------------------
// 2 cuBLAS + softmax

// qkv (B, T, 3, NH, HS) -> q, k, v each (B, NH, T, HS)
__global__ void permute_kernel(bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    int C = NH * HS;
    const bf16* src = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    q[idx] = src[0];
    k[idx] = src[C];
    v[idx] = src[2 * C];
}
// y (B, NH, T, HS) -> out (B, T, NH, HS)
__global__ void unpermute_kernel(bf16* out, const bf16* y, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    out[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d] = y[idx];
}
// one warp per row of S (B NH T rows of T): P = softmax(scale S) causal, bf16; zeros right of t
__global__ void causal_softmax_kernel(bf16* P, float* lse, const float* S, int rows, int T, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    const float* s = S + (size_t)row * T;
    float m = -INFINITY;
    for (int j = lane; j <= t; j += 32) m = fmaxf(m, s[j] * scale);
    m = warp_reduce_max(m);
    float l = 0.0f;
    for (int j = lane; j <= t; j += 32) l += expf(s[j] * scale - m);
    l = warp_reduce_sum(l);
    for (int j = lane; j < T; j += 32) P[(size_t)row * T + j] = __float2bfloat16(j <= t ? expf(s[j] * scale - m) / l : 0.0f);
    if (lane == 0) lse[row] = m + logf(l);
}

struct CublasAttn {
    cublasHandle_t handle;
    bf16 *q, *k, *v, *P, *y;
    float* S;
    int B, T, NH, HS;
    CublasAttn(int B_, int T_, int NH_, int HS_) : B(B_), T(T_), NH(NH_), HS(HS_) {
        cublasCheck(cublasCreate(&handle));
        size_t n = (size_t)B * NH * T * HS, nn = (size_t)B * NH * T * T;
        cudaCheck(cudaMalloc(&q, n * sizeof(bf16))); cudaCheck(cudaMalloc(&k, n * sizeof(bf16)));
        cudaCheck(cudaMalloc(&v, n * sizeof(bf16))); cudaCheck(cudaMalloc(&y, n * sizeof(bf16)));
        cudaCheck(cudaMalloc(&P, nn * sizeof(bf16))); cudaCheck(cudaMalloc(&S, nn * sizeof(float)));
    }
    ~CublasAttn() {
        cudaCheck(cudaFree(q)); cudaCheck(cudaFree(k)); cudaCheck(cudaFree(v)); cudaCheck(cudaFree(y));
        cudaCheck(cudaFree(P)); cudaCheck(cudaFree(S));
        cublasCheck(cublasDestroy(handle));
    }
    void forward(bf16* out, float* lse, const bf16* qkv) {
        size_t n = (size_t)B * NH * T * HS;
        LAUNCH(permute_kernel, ceil_div(n, (size_t)256), 256, 0, 0, q, k, v, qkv, B, T, NH, HS);
        cudaCheckLast();
        const float one = 1.0f, zero = 0.0f;
        // column-major view: S^T (T x T, per head) = K Q^T  <=>  row-major S = Q K^T
        cublasCheck(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &one,
                                               k, CUDA_R_16BF, HS, (long long)T * HS, q, CUDA_R_16BF, HS, (long long)T * HS,
                                               &zero, S, CUDA_R_32F, T, (long long)T * T, B * NH,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        int rows = B * NH * T;
        LAUNCH(causal_softmax_kernel, ceil_div(rows, 8), 256, 0, 0, P, lse, S, rows, T, 1.0f / sqrtf((float)HS));
        cudaCheckLast();
        // row-major y (T x HS) = P (T x T) V (T x HS)  <=>  column-major y^T = V^T P^T
        cublasCheck(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &one,
                                               v, CUDA_R_16BF, HS, (long long)T * HS, P, CUDA_R_16BF, T, (long long)T * T,
                                               &zero, y, CUDA_R_16BF, HS, (long long)T * HS, B * NH,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        LAUNCH(unpermute_kernel, ceil_div(n, (size_t)256), 256, 0, 0, out, y, B, T, NH, HS);
        cudaCheckLast();
    }
};

// ------------------------------------------------------------------------------------------
// harness

static float bf(float x) { return __bfloat162float(__float2bfloat16(x)); }

// reference for batch 0: out0 (T, C), lse0 (NH, T)
static void cpu_reference(std::vector<float>& out0, std::vector<float>& lse0, const std::vector<float>& qkv, int T, int NH, int HS) {
    int C = NH * HS;
    std::vector<double> p(T);
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++) {
            const float* q = &qkv[(size_t)t * 3 * C + (size_t)h * HS];
            double m = -1e300, l = 0.0;
            for (int s = 0; s <= t; s++) {
                const float* k = &qkv[(size_t)s * 3 * C + C + (size_t)h * HS];
                double a = 0.0;
                for (int d = 0; d < HS; d++) a += (double)q[d] * k[d];
                p[s] = a / sqrt((double)HS);
                if (p[s] > m) m = p[s];
            }
            for (int s = 0; s <= t; s++) { p[s] = exp(p[s] - m); l += p[s]; }
            for (int d = 0; d < HS; d++) {
                double o = 0.0;
                for (int s = 0; s <= t; s++) o += p[s] * qkv[(size_t)s * 3 * C + 2 * C + (size_t)h * HS + d];
                out0[(size_t)t * C + (size_t)h * HS + d] = (float)(o / l);
            }
            lse0[(size_t)h * T + t] = (float)(m + log(l));
        }
}

// Backward reference of head h of batch 0, in double: the gradient of qkv rows (T, 3C) in the
// head's columns (dq, dk, dv at 0, C, 2C), from the device's out (bf16, as the kernel's D sees it).
static void cpu_reference_backward(std::vector<double>& g, const std::vector<float>& qkv, const std::vector<float>& dout,
                                   const std::vector<float>& out, int T, int NH, int HS, int h) {
    int C = NH * HS;
    double sc = 1.0 / sqrt((double)HS);
    std::vector<double> p(T);
    auto at = [&](int t, int sec, int d) { return (double)qkv[(size_t)t * 3 * C + (size_t)sec * C + (size_t)h * HS + d]; };
    for (int t = 0; t < T; t++) {
        double m = -1e300, l = 0.0, Dt = 0.0;
        for (int s = 0; s <= t; s++) {
            double a = 0.0;
            for (int d = 0; d < HS; d++) a += at(t, 0, d) * at(s, 1, d);
            p[s] = a * sc;
            m = fmax(m, p[s]);
        }
        for (int s = 0; s <= t; s++) { p[s] = exp(p[s] - m); l += p[s]; }
        const float* go = &dout[(size_t)t * C + (size_t)h * HS];
        for (int d = 0; d < HS; d++) Dt += go[d] * (double)out[(size_t)t * C + (size_t)h * HS + d];
        for (int s = 0; s <= t; s++) {
            double ps = p[s] / l, dp = 0.0;
            for (int d = 0; d < HS; d++) dp += go[d] * at(s, 2, d);
            double ds = ps * (dp - Dt);
            for (int d = 0; d < HS; d++) {
                g[(size_t)t * 3 * C + (size_t)h * HS + d] += sc * ds * at(s, 1, d);
                g[(size_t)s * 3 * C + C + (size_t)h * HS + d] += sc * ds * at(t, 0, d);
                g[(size_t)s * 3 * C + 2 * C + (size_t)h * HS + d] += ps * go[d];
            }
        }
    }
}

static bool g_all_ok = true;

static std::vector<float> download_bf16(const bf16* d, size_t n) {
    std::vector<bf16> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(h[i]);
    return f;
}

static void check_against(const char* name, const bf16* d_out, const float* d_lse, const std::vector<float>& out0,
                          const std::vector<float>& lse0, int T, int NH, int HS) {
    std::vector<float> o = download_bf16(d_out, (size_t)T * NH * HS), l((size_t)NH * T);
    cudaCheck(cudaMemcpy(l.data(), d_lse, l.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double eo = 0.0, el = 0.0;
    for (size_t i = 0; i < o.size(); i++) eo = fmax(eo, fabs(o[i] - out0[i]));
    for (size_t i = 0; i < l.size(); i++) el = fmax(el, fabs(l[i] - lse0[i]));
    char what[64];
    snprintf(what, sizeof(what), "%s forward out (batch 0)", name);
    report_check(what, eo, 2e-2, eo < 2e-2);
    snprintf(what, sizeof(what), "%s forward lse (batch 0)", name);
    report_check(what, el, 1e-3, el < 1e-3);
    g_all_ok &= eo < 2e-2 && el < 1e-3;
}

// The flash backward's dQ, dK, dV of heads 0 and NH-1 of batch 0 (written: accumulate 0) against
// the double reference: max |diff| over max |ref| per section, within 2e-2.
static void check_backward(const char* name, const bf16* d_dqkv, const std::vector<double>& ref, int T, int NH, int HS) {
    int C = NH * HS;
    std::vector<float> g = download_bf16(d_dqkv, (size_t)T * 3 * C);
    static const char* sec_name[3] = {"dQ", "dK", "dV"};
    for (int sec = 0; sec < 3; sec++) {
        double md = 0.0, mr = 0.0;
        for (int h : {0, NH - 1})
            for (int t = 0; t < T; t++)
                for (int d = 0; d < HS; d++) {
                    size_t i = (size_t)t * 3 * C + (size_t)sec * C + (size_t)h * HS + d;
                    md = fmax(md, fabs(g[i] - ref[i]));
                    mr = fmax(mr, fabs(ref[i]));
                }
        double rel = md / fmax(mr, 1e-30);
        char what[96];
        snprintf(what, sizeof(what), "%s backward %s (batch 0, heads 0, %d)", name, sec_name[sec], NH - 1);
        report_check(what, rel, 2e-2, rel < 2e-2);
        g_all_ok &= rel < 2e-2;
    }
}

// Registers, shared memory and blocks per SM of each flash kernel for head size HS.
template <typename K>
static void kernel_info(const char* name, K kernel, size_t smem) {
    cudaFuncAttributes a;
    int blocks = 0;
    cudaCheck(cudaFuncGetAttributes(&a, kernel));
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, FA_THREADS, smem));
    printf("kernel %-44s regs %3d | local %zu B | smem %zu B static + %zu B dynamic | %d blocks (%d warps) an SM\n", name,
           a.numRegs, a.localSizeBytes, a.sharedSizeBytes, smem, blocks, blocks * FA_WARPS);
}
template <int HS>
static void flash_kernel_info() {
    typedef FaCfg<HS> Cf;
    kernel_info("flash_attention_forward_kernel", flash_attention_forward_kernel<HS>, Cf::FWD_SMEM);
    if constexpr (HS == 64)
        kernel_info("flash_attention_forward_kernel<64,other>", flash_attention_forward_kernel<HS, 3 - FA_CH>, Cf::FWD_SMEM);
    kernel_info("flash_attention_backward_dkv_kernel", flash_attention_backward_dkv_kernel<HS>, Cf::DKV_SMEM);
    kernel_info("flash_attention_backward_dq_kernel", flash_attention_backward_dq_kernel<HS>, Cf::DQ_SMEM);
}

static void report(const char* name, int T, float ms, double flops, double bytes) {
    char what[96];
    snprintf(what, sizeof(what), "%s T=%d", name, T);
    report_time(what, ms, bytes, flops);
}

// The cuBLAS baseline's S and P matrices need B NH T^2 x 6 bytes: skipped above this.
#define CUBLAS_MAX_BYTES ((double)24e9)

// One shape: the three versions' forward (checked, timed), the flash backward.
static void run_shape(int B, int T, int NH, int HS, int iters) {
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    std::vector<float> h_qkv(nqkv), h_dout(nout);
    std::vector<bf16> h_qkv_bf(nqkv), h_dout_bf(nout);
    unsigned s = 1234u;
    for (size_t i = 0; i < nqkv + nout; i++) {
        s = s * 1664525u + 1013904223u;
        float v = bf(((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * (i < nqkv ? 1.5f : 1.0f));
        if (i < nqkv) { h_qkv[i] = v; h_qkv_bf[i] = __float2bfloat16(v); }
        else { h_dout[i - nqkv] = v; h_dout_bf[i - nqkv] = __float2bfloat16(v); }
    }
    bf16 *qkv, *out, *dout, *dqkv, *dqkv2;
    float* lse;
    cudaCheck(cudaMalloc(&qkv, nqkv * sizeof(bf16))); cudaCheck(cudaMalloc(&dqkv, nqkv * sizeof(bf16)));
    cudaCheck(cudaMalloc(&dqkv2, nqkv * sizeof(bf16)));
    cudaCheck(cudaMalloc(&out, nout * sizeof(bf16))); cudaCheck(cudaMalloc(&dout, nout * sizeof(bf16)));
    cudaCheck(cudaMalloc(&lse, nlse * sizeof(float)));
    cudaCheck(cudaMemcpy(qkv, h_qkv_bf.data(), nqkv * sizeof(bf16), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dout, h_dout_bf.data(), nout * sizeof(bf16), cudaMemcpyHostToDevice));

    std::vector<float> out0((size_t)T * C), lse0((size_t)NH * T);
    cpu_reference(out0, lse0, h_qkv, T, NH, HS);

    double pairs = (double)B * NH * T * (T + 1) / 2.0;         // visible (query, key) pairs
    double fwd_flops = 4.0 * pairs * HS;                        // QK^T and PV
    double bwd_flops = 10.0 * pairs * HS;                       // recompute QK^T, dP, dV, dK, dQ
    double fwd_bytes = (double)nqkv * 2 + (double)nout * 2 + (double)nlse * 4;
    double bwd_bytes = (double)nqkv * 2 * 2 + (double)nout * 2 * 2 + (double)nlse * 4 * 2;
    printf("B=%d T=%d NH=%d HS=%d: forward %.3g FLOP (causal), at least %.3g bytes moved; backward %.3g FLOP, %.3g bytes; "
           "backward scratch %.1f MB (deterministic)\n", B, T, NH, HS, fwd_flops, fwd_bytes, bwd_flops, bwd_bytes,
           attention_backward_scratch_bytes(B, T, C, NH) / 1e6);

    LAUNCH(naive_attention_kernel, ceil_div(B * NH * T, 128), 128, 0, 0, out, lse, qkv, B, T, NH, HS);
    cudaCheckLast();
    check_against("naive", out, lse, out0, lse0, T, NH, HS);
    float ms_naive = dev_time_ms([&] { LAUNCH(naive_attention_kernel, ceil_div(B * NH * T, 128), 128, 0, 0, out, lse, qkv, B, T, NH, HS); }, 2);
    report("forward naive", T, ms_naive, fwd_flops, fwd_bytes);
    if ((double)B * NH * T * T * 6 <= CUBLAS_MAX_BYTES) {
        CublasAttn cb(B, T, NH, HS);
        cb.forward(out, lse, qkv);
        check_against("cublas", out, lse, out0, lse0, T, NH, HS);
        float ms_cublas = dev_time_ms([&] { cb.forward(out, lse, qkv); }, iters);
        report("forward cublas+softmax", T, ms_cublas, fwd_flops, fwd_bytes + (double)B * NH * T * T * (4 * 2 + 2 * 2));
    }

    cuda_attention_forward(out, lse, qkv, NULL, B, T, C, NH);
    check_against("flash", out, lse, out0, lse0, T, NH, HS);
    float ms_fwd = dev_time_ms([&] { cuda_attention_forward(out, lse, qkv, NULL, B, T, C, NH); }, iters);
    report("forward flash (mma.sync)", T, ms_fwd, fwd_flops, fwd_bytes);
    if (HS == 64) {   // the forward's other softmax chunking (attention_fwd.cuh, FA_CH): the A/B a GPU run decides
        const int other = 3 - FA_CH;
        char what[80];
        snprintf(what, sizeof(what), "forward flash, %d softmax step%s a key tile (FA_CH A/B)", other, other > 1 ? "s" : "");
        attention_set_forward_chunks(other);
        cuda_attention_forward(out, lse, qkv, NULL, B, T, C, NH);
        check_against(what, out, lse, out0, lse0, T, NH, HS);
        float ms_other = dev_time_ms([&] { cuda_attention_forward(out, lse, qkv, NULL, B, T, C, NH); }, iters);
        report(what, T, ms_other, fwd_flops, fwd_bytes);
        attention_set_forward_chunks(0);
        cuda_attention_forward(out, lse, qkv, NULL, B, T, C, NH);   // (the backward below starts from the production forward)
    }

    // backward: checked, and run twice for its bits
    std::vector<double> ref((size_t)T * 3 * C, 0.0);
    std::vector<float> out_dev = download_bf16(out, (size_t)T * C);
    for (int h = 0; h < NH; h += NH > 1 ? NH - 1 : 1) cpu_reference_backward(ref, h_qkv, h_dout, out_dev, T, NH, HS, h);   // 0, NH-1
    cuda_attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, C, NH, 0);
    cuda_attention_backward(dqkv2, dout, qkv, out, lse, NULL, B, T, C, NH, 0);
    check_backward("flash deterministic", dqkv, ref, T, NH, HS);
    std::vector<bf16> a(nqkv), b(nqkv);
    cudaCheck(cudaMemcpy(a.data(), dqkv, nqkv * sizeof(bf16), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(b.data(), dqkv2, nqkv * sizeof(bf16), cudaMemcpyDeviceToHost));
    bool same = memcmp(a.data(), b.data(), nqkv * sizeof(bf16)) == 0;
    report_check("flash deterministic backward: 2 runs, same bits", same ? 0.0 : 1.0, 0.0, same);
    g_all_ok &= same;
    float ms_bwd = dev_time_ms([&] { cuda_attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, C, NH, 0); }, iters);
    cudaCheck(cudaDeviceSynchronize());
    report("backward flash (mma.sync, deterministic)", T, ms_bwd, bwd_flops, bwd_bytes);

    cudaCheck(cudaFree(qkv)); cudaCheck(cudaFree(dqkv)); cudaCheck(cudaFree(dqkv2)); cudaCheck(cudaFree(out));
    cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(lse));
}

int main(int argc, char** argv) {
    int B = argc > 1 ? atoi(argv[1]) : 16, NH = argc > 3 ? atoi(argv[3]) : 12, HS = argc > 4 ? atoi(argv[4]) : 64;
    std::vector<int> Ts = argc > 2 ? std::vector<int>{atoi(argv[2])} : std::vector<int>{512, 1024, 2048};
    if (B <= 0 || Ts[0] <= 0 || NH <= 0 || !attention_flash_supported(HS)) {
        fprintf(stderr, "usage: %s [B T NH HS] (HS a multiple of 16 up to 128)\n", argv[0]);
        return 1;
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    report_begin("attention_bench", prop.name, "B=%d T=%s NH=%d HS=%d", B, argc > 2 ? argv[2] : "512,1024,2048", NH, HS);
#define FA_INFO(hs) flash_kernel_info<hs>()
    FA_DISPATCH(HS, FA_INFO)
#undef FA_INFO
    for (int T : Ts) run_shape(B, T, NH, HS, 20);
    printf("%s\n", g_all_ok ? "all versions match the CPU reference" : "MISMATCH");
    return g_all_ok ? 0 : 1;
}
