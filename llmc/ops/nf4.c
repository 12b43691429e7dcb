// NF4 quantization, bit-compatible with bitsandbytes (see nf4.h). Every floating-point step
// below mirrors one fp32 operation of bitsandbytes 0.50.2's CPU path, in the same order:
//   4-bit:  PyTorch code in bitsandbytes/backends/default/ops.py (quantize_4bit):
//           absmax = max|w| per block; full blocks scale by w * (1 / max(absmax, 1e-38)), the last
//           partial block by w / max(absmax, 1e-38) (and stores the clamped absmax); clamp to
//           [-1, 1]; code = torch.bucketize(x, midpoints) = number of midpoints m with !(m >= x),
//           so a value exactly on a midpoint takes the lower code.
//   nested: offset = torch.mean(absmax) (fp32 cascade sum, see nf4_torch_mean), absmax - offset,
//           then libbitsandbytes_cpu's quantize_cpu (8-bit, blocks of 256): scale = max(0, max|x|),
//           x * (1 / scale) clamped, a 65536-entry lookup table indexed by
//           (uint16)(int)fma((x + 1) * 0.5, 65535, 0.5) (the shipped binary fuses that multiply-add),
//           the table mapping each grid point to the first code whose upper midpoint is >= it.
//   dequant: code4[c] * absmax, with absmax = code8[q] * scale + offset (two roundings, no FMA).
// The file is compiled with -ffp-contract=off (NF4_CFLAGS in mk/programs.mk) so that no other
// multiply-add is fused.
#include "ops/nf4.h"
#include "base/check.h"
#include "base/json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

// Also said in the source, so a build that misses the flag still rounds every step.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

const float nf4_code_values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

// ------------------------------------------------------------------------------------------------
// the dynamic 8-bit map

static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

void nf4_dynamic_map(float code[256]) {
    // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent e = 0..6,
    // 2^e + 1 linearly spaced boundaries in [0.1, 1], their 2^e midpoints times 10^(e-6), both
    // signs; then 0 and 1; sorted. (With 7 exponent bits there are no "additional items".)
    // The fp32 steps are PyTorch's: linspace computes start + step*j for the first half and
    // end - step*(steps-1-j) for the second, with step = (end - start) / (steps - 1) and the
    // multiply-add fused; the midpoint is (a + b) / 2; the scale 10^(e-6) is a Python double
    // rounded to fp32 before the fp32 multiply.
    int n = 0;
    for (int e = 0; e < 7; e++) {
        int steps = (1 << e) + 1;
        float start = (float)0.1, end = 1.0f;
        float step = (end - start) / (float)(steps - 1);
        int half = steps / 2;
        float bnd[65];
        for (int j = 0; j < steps; j++) {
            bnd[j] = j < half ? fmaf(step, (float)j, start) : fmaf(-step, (float)(steps - 1 - j), end);
        }
        float scale = (float)(e < 6 ? 1.0 / pow(10.0, (double)(6 - e)) : 1.0);
        for (int j = 0; j + 1 < steps; j++) {
            float mean = (bnd[j] + bnd[j + 1]) / 2.0f;
            float v = scale * mean;
            code[n++] = v;
            code[n++] = -v;
        }
    }
    code[n++] = 0.0f;
    code[n++] = 1.0f;
    assertCheck(n == 256);
    qsort(code, 256, sizeof(float), cmp_float);
}

// ------------------------------------------------------------------------------------------------
// PyTorch's CPU sum (aten/src/ATen/native/cpu/SumKernel.cpp, cascade_sum) for a contiguous fp32
// vector on one thread. The sum kernel is dispatched at AVX2 width even on AVX-512 machines, so a
// "vector" is 8 floats. Rows of 4 vectors are summed into 4 accumulator levels, each level
// flushed into the next every 2^level_power rows, which is what makes the rounding order unusual.

static int64_t ceil_log2(int64_t v) {
    if (v <= 2) return 1;
    int64_t r = 0;
    uint64_t u = (uint64_t)(v - 1);
    while (u) { r++; u >>= 1; }
    return r;
}

// multi_row_sum: `size` rows; row i holds nrows groups of w lanes at x[i*row_stride + k*col_stride
// + lane]; returns the nrows*w lane sums in ret.
static void torch_multi_row_sum(const float* x, int64_t size, int64_t row_stride, int64_t col_stride,
                                int nrows, int w, float* ret) {
    float acc[4][32];
    int m = nrows * w;
    memset(acc, 0, sizeof(acc));
    int64_t level_power = ceil_log2(size) / 4;
    if (level_power < 4) level_power = 4;
    const int64_t level_step = (int64_t)1 << level_power;
    const int64_t level_mask = level_step - 1;
    int64_t i = 0;
    for (; i + level_step <= size;) {
        for (int64_t j = 0; j < level_step; j++, i++) {
            for (int k = 0; k < nrows; k++)
                for (int l = 0; l < w; l++) acc[0][k * w + l] += x[i * row_stride + k * col_stride + l];
        }
        for (int j = 1; j < 4; j++) {
            for (int e = 0; e < m; e++) { acc[j][e] += acc[j - 1][e]; acc[j - 1][e] = 0.0f; }
            if ((i & (level_mask << (j * level_power))) != 0) break;
        }
    }
    for (; i < size; i++) {
        for (int k = 0; k < nrows; k++)
            for (int l = 0; l < w; l++) acc[0][k * w + l] += x[i * row_stride + k * col_stride + l];
    }
    for (int j = 1; j < 4; j++)
        for (int e = 0; e < m; e++) acc[0][e] += acc[j][e];
    memcpy(ret, acc[0], (size_t)m * sizeof(float));
}

// row_sum: `size` items of w lanes each, item i at x[i*stride]; lane sums into ret[w].
static void torch_row_sum(const float* x, int64_t stride, int64_t size, int w, float* ret) {
    float part[4 * 8];
    const int64_t size_ilp = size / 4;
    torch_multi_row_sum(x, size_ilp, 4 * stride, stride, 4, w, part);
    for (int64_t i = size_ilp * 4; i < size; i++)
        for (int l = 0; l < w; l++) part[l] += x[i * stride + l];
    for (int k = 1; k < 4; k++)
        for (int l = 0; l < w; l++) part[l] += part[k * w + l];
    memcpy(ret, part, (size_t)w * sizeof(float));
}

// one thread's cascade sum of x[0..n) (cascade_sum's loop on one contiguous range)
static float torch_serial_sum(const float* x, int64_t n) {
    enum { VEC = 8 };
    float sum;
    if (n >= VEC) {  // vectorized_inner_sum
        const int64_t vec_size = n / VEC;
        float lanes[VEC];
        torch_row_sum(x, VEC, vec_size, VEC, lanes);
        sum = 0.0f;
        for (int64_t k = vec_size * VEC; k < n; k++) sum += x[k];
        for (int l = 0; l < VEC; l++) sum += lanes[l];
    } else {         // scalar_inner_sum
        torch_row_sum(x, 1, n, 1, &sum);
    }
    return 0.0f + sum;  // accumulated into the zero-filled output
}

float nf4_torch_mean(const float* x, int64_t n, int torch_threads) {
    assertCheck(n > 0);
    const int64_t grain = 32768;  // at::internal::GRAIN_SIZE
    float sum;
    if (n < grain || torch_threads <= 1) {
        sum = torch_serial_sum(x, n);
    } else {
        // two_pass_reduction: at::parallel_for splits [0, n) into min(threads, ceil(n / grain))
        // equal chunks, each summed into its own slot of a zeroed per-thread buffer, then the
        // buffer (one slot per thread, used or not) is summed the same way
        const int64_t tasks = torch_threads < (n + grain - 1) / grain ? torch_threads : (n + grain - 1) / grain;
        const int64_t chunk = (n + tasks - 1) / tasks;
        float* buf = (float*)callocCheck((size_t)torch_threads, sizeof(float));
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t b = t * chunk, e = (b + chunk < n) ? b + chunk : n;
            if (b < n) buf[t] = torch_serial_sum(x + b, e - b);
        }
        sum = torch_serial_sum(buf, torch_threads);
        free(buf);
    }
    return sum / (float)n;
}

// ------------------------------------------------------------------------------------------------
// quantization

// Index of the NF4 code for x in [-1, 1] (or NaN): the number of midpoints m with !(m >= x),
// found with a 4-level decision tree over the 15 midpoints.
static inline int nf4_code_of(float x, const float mid[15]) {
    int i = !(mid[7] >= x) ? 8 : 0;
    i += !(mid[i + 3] >= x) ? 4 : 0;
    i += !(mid[i + 1] >= x) ? 2 : 0;
    i += !(mid[i] >= x) ? 1 : 0;
    return i;
}

static inline float clamp_pm1(float x) {  // torch.clamp(x, -1, 1): NaN stays NaN
    if (x < -1.0f) return -1.0f;
    if (x > 1.0f) return 1.0f;
    return x;
}

static void nf4_quantize_4bit(const float* w, int64_t n, uint8_t* packed, float* absmax) {
    float mid[15];
    for (int i = 0; i < 15; i++) mid[i] = (nf4_code_values[i] + nf4_code_values[i + 1]) / 2.0f;
    const int64_t n_blocks = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    const int64_t n_full = n / NF4_BLOCK;
    const float tiny = (float)1e-38;  // bitsandbytes' absmax.clamp(min=1e-38)
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n_blocks; b++) {
        const int64_t start = b * NF4_BLOCK;
        const int64_t len = (b < n_full) ? NF4_BLOCK : n - start;
        const float* x = w + start;
        float am = 0.0f;
        int any_nan = 0;
        for (int64_t i = 0; i < len; i++) {
            float a = fabsf(x[i]);
            am = a > am ? a : am;
            any_nan |= (a != a);
        }
        if (any_nan) am = NAN;  // torch.max propagates NaN
        float clamped = (am < tiny) ? tiny : am;
        uint8_t q[NF4_BLOCK + 1];
        float xs[NF4_BLOCK];
        if (b < n_full) {
            absmax[b] = am;
            const float r = 1.0f / clamped;
            for (int64_t i = 0; i < len; i++) xs[i] = clamp_pm1(x[i] * r);
        } else {
            absmax[b] = clamped;
            for (int64_t i = 0; i < len; i++) xs[i] = clamp_pm1(x[i] / clamped);
        }
        // branch-free form of nf4_code_of (vectorizes): count the midpoints m with !(m >= x)
        for (int64_t i = 0; i < len; i++) {
            int c = 0;
            for (int k = 0; k < 15; k++) c += !(mid[k] >= xs[i]);
            q[i] = (uint8_t)c;
        }
        if (len & 1) q[len] = (uint8_t)nf4_code_of(0.0f, mid);  // odd n: the pad value 0 (code 7)
        uint8_t* p = packed + start / 2;
        for (int64_t i = 0; i < len; i += 2) p[i / 2] = (uint8_t)((q[i] << 4) | q[i + 1]);
    }
}

// libbitsandbytes_cpu's 8-bit blockwise quantization (see the file comment).
static void nf4_quantize_8bit(const float* x, int64_t n, const float code[256], uint8_t* out, float* scales) {
    enum { LUT = 65536 };
    uint8_t* lut = (uint8_t*)mallocCheck(LUT);
    float mid[255];
    for (int i = 0; i < 255; i++) mid[i] = (code[i] + code[i + 1]) * 0.5f;
    int ci = 0;
    for (int i = 0; i < LUT; i++) {
        float fi = (float)i;
        float val = (fi + fi) / (float)(LUT - 1) - 1.0f;
        while (ci < 255 && mid[ci] < val) ci++;
        lut[i] = (uint8_t)ci;
    }
    const int64_t n_blocks = (n + NF4_DQ_BLOCK - 1) / NF4_DQ_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n_blocks; b++) {
        const int64_t start = b * NF4_DQ_BLOCK;
        const int64_t end = (start + NF4_DQ_BLOCK < n) ? start + NF4_DQ_BLOCK : n;
        float am = 0.0f;  // std::max chain: a NaN never replaces the running max
        for (int64_t i = start; i < end; i++) { float a = fabsf(x[i]); if (a > am) am = a; }
        scales[b] = am;
        if (am == 0.0f) { memset(out + start, 0, (size_t)(end - start)); continue; }
        const float inv = 1.0f / am;
        for (int64_t i = start; i < end; i++) {
            float v = x[i] * inv;
            if (v < -1.0f) v = -1.0f; else if (v > 1.0f) v = 1.0f;  // std::clamp
            float t = (v + 1.0f) * 0.5f;
            float f = fmaf(t, (float)(LUT - 1), 0.5f);
            int32_t k = (f == f) ? (int32_t)f : INT32_MIN;  // cvttss2si: NaN -> 0x80000000
            out[i] = lut[(uint16_t)k];
        }
    }
    free(lut);
}

void nf4_quantize(NF4Tensor* t, const float* w, int ndim, const int64_t* shape, int double_quant) {
    nf4_quantize_ex(t, w, ndim, shape, double_quant, 1);
}

void nf4_quantize_ex(NF4Tensor* t, const float* w, int ndim, const int64_t* shape, int double_quant,
                     int torch_threads) {
    memset(t, 0, sizeof(*t));
    if (ndim < 1 || ndim > NF4_MAX_DIMS) fatal(NULL, "nf4_quantize: %d dimensions (1..%d supported)", ndim, NF4_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0) fatal(NULL, "nf4_quantize: dimension %d has size %lld", d, (long long)shape[d]);
        t->shape[d] = shape[d];
        n *= shape[d];
    }
    t->ndim = ndim;
    t->n = n;
    t->n_blocks = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    memcpy(t->code4, nf4_code_values, sizeof(t->code4));
    t->packed = (uint8_t*)mallocCheck((size_t)((n + 1) / 2));
    float* absmax = (float*)mallocCheck((size_t)t->n_blocks * sizeof(float));
    nf4_quantize_4bit(w, n, t->packed, absmax);
    t->double_quant = double_quant ? 1 : 0;
    if (!double_quant) {
        t->absmax = absmax;
        return;
    }
    nf4_dynamic_map(t->code8);
    t->offset = nf4_torch_mean(absmax, t->n_blocks, torch_threads);
    for (int64_t b = 0; b < t->n_blocks; b++) absmax[b] -= t->offset;
    t->n_dq_blocks = (t->n_blocks + NF4_DQ_BLOCK - 1) / NF4_DQ_BLOCK;
    t->absmax_q = (uint8_t*)mallocCheck((size_t)t->n_blocks);
    t->absmax_scale = (float*)mallocCheck((size_t)t->n_dq_blocks * sizeof(float));
    nf4_quantize_8bit(absmax, t->n_blocks, t->code8, t->absmax_q, t->absmax_scale);
    free(absmax);
}

void nf4_free(NF4Tensor* t) {
    free(t->packed);
    free(t->absmax);
    free(t->absmax_q);
    free(t->absmax_scale);
    memset(t, 0, sizeof(*t));
}

// ------------------------------------------------------------------------------------------------
// the packed image (one buffer, 16-byte aligned sections)

static size_t nf4_align16(size_t x) { return (x + 15) & ~(size_t)15; }

void nf4_image_layout(const NF4Tensor* t, NF4Image* img) {
    memset(img, 0, sizeof(*img));
    size_t off = nf4_align16((size_t)((t->n + 1) / 2)); // the codes start at 0
    if (!t->double_quant) {
        img->absmax = off; off += nf4_align16((size_t)t->n_blocks * sizeof(float));
    } else {
        img->absmax_q = off; off += nf4_align16((size_t)t->n_blocks);
        img->absmax_scale = off; off += nf4_align16((size_t)t->n_dq_blocks * sizeof(float));
        img->code8 = off; off += 256 * sizeof(float);
    }
    img->code4 = off; off += 16 * sizeof(float);
    img->bytes = off;
}

size_t nf4_image_bytes_for(int64_t n, int double_quant) {
    NF4Tensor meta;
    memset(&meta, 0, sizeof(meta));
    meta.n = n;
    meta.double_quant = double_quant;
    meta.n_blocks = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    meta.n_dq_blocks = double_quant ? (meta.n_blocks + NF4_DQ_BLOCK - 1) / NF4_DQ_BLOCK : 0;
    NF4Image img;
    nf4_image_layout(&meta, &img);
    return img.bytes;
}

void nf4_image_pack(const NF4Tensor* t, uint8_t* out) {
    NF4Image img;
    nf4_image_layout(t, &img);
    memset(out, 0, img.bytes); // (the alignment gaps too: the image's bytes are all defined)
    memcpy(out, t->packed, (size_t)((t->n + 1) / 2));
    if (!t->double_quant) memcpy(out + img.absmax, t->absmax, (size_t)t->n_blocks * sizeof(float));
    else {
        memcpy(out + img.absmax_q, t->absmax_q, (size_t)t->n_blocks);
        memcpy(out + img.absmax_scale, t->absmax_scale, (size_t)t->n_dq_blocks * sizeof(float));
        memcpy(out + img.code8, t->code8, sizeof(t->code8));
    }
    memcpy(out + img.code4, t->code4, sizeof(t->code4));
}

void nf4_image_view(NF4Tensor* view, const NF4Tensor* meta, const uint8_t* image) {
    NF4Image img;
    nf4_image_layout(meta, &img);
    *view = *meta;
    view->packed = (uint8_t*)image;
    view->absmax = meta->double_quant ? NULL : (float*)(image + img.absmax);
    view->absmax_q = meta->double_quant ? (uint8_t*)(image + img.absmax_q) : NULL;
    view->absmax_scale = meta->double_quant ? (float*)(image + img.absmax_scale) : NULL;
}

void nf4_strip(NF4Tensor* t) {
    free(t->packed); free(t->absmax); free(t->absmax_q); free(t->absmax_scale);
    t->packed = NULL; t->absmax = NULL; t->absmax_q = NULL; t->absmax_scale = NULL;
}

void nf4_image_unpack(NF4Tensor* t, const uint8_t* image) {
    NF4Tensor v;
    nf4_image_view(&v, t, image);
    nf4_strip(t);
    const size_t nq = (size_t)((t->n + 1) / 2), nb = (size_t)t->n_blocks, nd = (size_t)t->n_dq_blocks;
    t->packed = (uint8_t*)mallocCheck(nq ? nq : 1);
    memcpy(t->packed, v.packed, nq);
    if (!t->double_quant) {
        t->absmax = (float*)mallocCheck((nb ? nb : 1) * sizeof(float));
        memcpy(t->absmax, v.absmax, nb * sizeof(float));
    } else {
        t->absmax_q = (uint8_t*)mallocCheck(nb ? nb : 1);
        memcpy(t->absmax_q, v.absmax_q, nb);
        t->absmax_scale = (float*)mallocCheck((nd ? nd : 1) * sizeof(float));
        memcpy(t->absmax_scale, v.absmax_scale, nd * sizeof(float));
    }
}

// ------------------------------------------------------------------------------------------------
// dequantization

static inline float nf4_block_absmax(const NF4Tensor* t, int64_t b) {
    if (!t->double_quant) return t->absmax[b];
    // the product is rounded before the offset is added (bitsandbytes does two tensor ops);
    // volatile keeps even a -ffp-contract=fast build from fusing them (once per 64 weights)
    volatile float a = t->code8[t->absmax_q[b]] * t->absmax_scale[b / NF4_DQ_BLOCK];
    return a + t->offset;
}

void nf4_absmax_f32(const NF4Tensor* t, float* out) {
    for (int64_t b = 0; b < t->n_blocks; b++) out[b] = nf4_block_absmax(t, b);
}

void nf4_dequantize_range(const NF4Tensor* t, int64_t begin, int64_t end, float* out) {
    if (begin < 0 || end > t->n || begin > end)
        fatal(NULL, "nf4_dequantize_range: range [%lld, %lld) outside the tensor's %lld weights",
              (long long)begin, (long long)end, (long long)t->n);
    if (begin == end) return;
    const int64_t b0 = begin / NF4_BLOCK, b1 = (end - 1) / NF4_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int64_t b = b0; b <= b1; b++) {
        const float a = nf4_block_absmax(t, b);
        int64_t s = b * NF4_BLOCK, e = s + NF4_BLOCK;
        if (s < begin) s = begin;
        if (e > end) e = end;
        for (int64_t i = s; i < e; i++) {
            const uint8_t byte = t->packed[i >> 1];
            const int c = (i & 1) ? (byte & 0x0F) : (byte >> 4);
            out[i - begin] = t->code4[c] * a;
        }
    }
}

void nf4_dequantize(const NF4Tensor* t, float* out) {
    nf4_dequantize_range(t, 0, t->n, out);
}

void nf4_dequantize_rows(const NF4Tensor* t, int64_t row_begin, int64_t row_end, float* out) {
    const int64_t row = t->n / t->shape[0];
    if (row_begin < 0 || row_end > t->shape[0] || row_begin > row_end)
        fatal(NULL, "nf4_dequantize_rows: rows [%lld, %lld) outside the tensor's %lld rows",
              (long long)row_begin, (long long)row_end, (long long)t->shape[0]);
    nf4_dequantize_range(t, row_begin * row, row_end * row, out);
}

// ------------------------------------------------------------------------------------------------
// memory accounting

size_t nf4_bytes_for(int64_t n, int double_quant) {
    const int64_t nb = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    size_t bytes = (size_t)((n + 1) / 2);
    if (!double_quant) return bytes + (size_t)nb * sizeof(float);
    const int64_t nb2 = (nb + NF4_DQ_BLOCK - 1) / NF4_DQ_BLOCK;
    return bytes + (size_t)nb + (size_t)nb2 * sizeof(float) + sizeof(float);
}

size_t nf4_bytes(const NF4Tensor* t) { return nf4_bytes_for(t->n, t->double_quant); }

double nf4_bits_per_param(int64_t n, int double_quant) {
    return 8.0 * (double)nf4_bytes_for(n, double_quant) / (double)n;
}

// ------------------------------------------------------------------------------------------------
// bitsandbytes 4-bit checkpoints (transformers save_pretrained)

static const StTensor* nf4_hf_tensor(StFile* f, const char* key, const char* suffix, uint64_t numel) {
    char name[1024];
    snprintf(name, sizeof(name), "%s%s", key, suffix);
    const StTensor* st = st_find(f, name);
    if (!st) fatal("is this a bitsandbytes 4-bit checkpoint (load_in_4bit, nf4)?",
                   "'%s': tensor '%s' is missing", f->path, name);
    if (numel && st->numel != numel)
        fatal("the file does not match its own quant_state", "'%s': tensor '%s' has %llu elements, expected %llu",
              f->path, name, (unsigned long long)st->numel, (unsigned long long)numel);
    return st;
}

static int64_t nf4_json_int(const JsonValue* qs, const char* path, const char* key, const char* field) {
    int64_t v;
    if (!json_as_int64(json_get(qs, field), &v))
        fatal(NULL, "'%s': quant_state of '%s' has no integer '%s'", path, key, field);
    return v;
}

void nf4_from_hf_state(NF4Tensor* t, StFile* f, const char* key) {
    memset(t, 0, sizeof(*t));
    // the non-tensor items: a JSON object stored byte by byte in a uint8 tensor
    const StTensor* qst = nf4_hf_tensor(f, key, ".quant_state.bitsandbytes__nf4", 0);
    if (qst->dtype != ST_U8) fatal(NULL, "'%s': '%s.quant_state.bitsandbytes__nf4' has dtype %s, expected U8",
                                   f->path, key, st_dtype_name(qst->dtype));
    char* text = (char*)mallocCheck((size_t)qst->numel + 1);
    st_read_raw(f, qst, text);
    text[qst->numel] = '\0';
    char err[256];
    JsonValue* qs = json_parse(text, (size_t)qst->numel, err, sizeof(err));
    if (!qs || qs->type != JSON_OBJECT)
        fatal(NULL, "'%s': quant_state of '%s' is not a JSON object (%s)", f->path, key, qs ? "not an object" : err);
    const char* qtype = json_as_string(json_get(qs, "quant_type"));
    if (!qtype || strcmp(qtype, "nf4") != 0)
        fatal("only NF4 is supported (bnb_4bit_quant_type=\"nf4\")", "'%s': '%s' has quant_type %s",
              f->path, key, qtype ? qtype : "(missing)");
    if (nf4_json_int(qs, f->path, key, "blocksize") != NF4_BLOCK)
        fatal(NULL, "'%s': '%s' has blocksize %lld, only %d is supported", f->path, key,
              (long long)nf4_json_int(qs, f->path, key, "blocksize"), NF4_BLOCK);
    const JsonValue* shape = json_get(qs, "shape");
    if (!shape || shape->type != JSON_ARRAY || shape->n < 1 || shape->n > NF4_MAX_DIMS)
        fatal(NULL, "'%s': quant_state of '%s' has no shape list of 1..%d sizes", f->path, key, NF4_MAX_DIMS);
    int64_t n = 1;
    t->ndim = shape->n;
    for (int d = 0; d < shape->n; d++) {
        if (!json_as_int64(json_at(shape, d), &t->shape[d]) || t->shape[d] <= 0)
            fatal(NULL, "'%s': quant_state of '%s' has a bad shape entry %d", f->path, key, d);
        n *= t->shape[d];
    }
    t->n = n;
    t->n_blocks = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    t->double_quant = json_get(qs, "nested_offset") != NULL;

    const StTensor* wt = nf4_hf_tensor(f, key, "", 0);
    if ((wt->end - wt->begin) != (uint64_t)((n + 1) / 2))
        fatal("the file does not match its own quant_state", "'%s': '%s' holds %llu bytes, the shape needs %lld",
              f->path, key, (unsigned long long)(wt->end - wt->begin), (long long)((n + 1) / 2));
    t->packed = (uint8_t*)mallocCheck((size_t)((n + 1) / 2));
    st_read_raw(f, wt, t->packed);
    st_read_f32(f, nf4_hf_tensor(f, key, ".quant_map", 16), t->code4);

    if (!t->double_quant) {
        t->absmax = (float*)mallocCheck((size_t)t->n_blocks * sizeof(float));
        st_read_f32(f, nf4_hf_tensor(f, key, ".absmax", (uint64_t)t->n_blocks), t->absmax);
    } else {
        if (nf4_json_int(qs, f->path, key, "nested_blocksize") != NF4_DQ_BLOCK)
            fatal(NULL, "'%s': '%s' has nested_blocksize %lld, only %d is supported", f->path, key,
                  (long long)nf4_json_int(qs, f->path, key, "nested_blocksize"), NF4_DQ_BLOCK);
        double off;
        if (!json_as_number(json_get(qs, "nested_offset"), &off))
            fatal(NULL, "'%s': nested_offset of '%s' is not a number", f->path, key);
        t->offset = (float)off;  // written as the double of an fp32 value: converts back exactly
        t->n_dq_blocks = (t->n_blocks + NF4_DQ_BLOCK - 1) / NF4_DQ_BLOCK;
        const StTensor* aq = nf4_hf_tensor(f, key, ".absmax", (uint64_t)t->n_blocks);
        if (aq->dtype != ST_U8) fatal(NULL, "'%s': '%s.absmax' has dtype %s, expected U8 (double quantization)",
                                      f->path, key, st_dtype_name(aq->dtype));
        t->absmax_q = (uint8_t*)mallocCheck((size_t)t->n_blocks);
        st_read_raw(f, aq, t->absmax_q);
        t->absmax_scale = (float*)mallocCheck((size_t)t->n_dq_blocks * sizeof(float));
        st_read_f32(f, nf4_hf_tensor(f, key, ".nested_absmax", (uint64_t)t->n_dq_blocks), t->absmax_scale);
        st_read_f32(f, nf4_hf_tensor(f, key, ".nested_quant_map", 256), t->code8);
    }
    json_free(qs);
    free(text);
}

// A double as Python's repr() writes it: the shortest digits that read back to the same value,
// fixed notation for decimal exponents -4..15 (with ".0" if integral), else d.ddde+XX.
static void nf4_python_repr(double v, char* out, size_t cap) {
    if (v != v || v == INFINITY || v == -INFINITY) { snprintf(out, cap, "%s", v != v ? "NaN" : v > 0 ? "Infinity" : "-Infinity"); return; }
    int p = 1;
    char buf[64];
    for (; p < 17; p++) {
        snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
    int e = atoi(strchr(buf, 'e') + 1);
    if (e >= -4 && e < 16) {
        int decimals = p - 1 - e;
        if (decimals > 0) snprintf(out, cap, "%.*f", decimals, v);
        else snprintf(out, cap, "%.1f", v);
    } else {
        snprintf(out, cap, "%s", buf);  // C writes at least two exponent digits, as Python does
    }
}

void nf4_to_hf_state(NF4Tensor* t, StWriter* w, const char* key, const char* dtype) {
    char name[1024], shape_txt[96] = "", num[64];
    size_t len = 0;
    if (strlen(dtype) > 16) fatal(NULL, "nf4_to_hf_state: dtype name '%s' is too long", dtype);
    for (int d = 0; d < t->ndim; d++)
        len += (size_t)snprintf(shape_txt + len, sizeof(shape_txt) - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (t->double_quant) {
        nf4_python_repr((double)t->offset, num, sizeof(num));
        snprintf(t->hf_quant_state, sizeof(t->hf_quant_state),
                 "{\"quant_type\": \"nf4\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": [%s], "
                 "\"nested_blocksize\": %d, \"nested_dtype\": \"float32\", \"nested_offset\": %s}",
                 NF4_BLOCK, dtype, shape_txt, NF4_DQ_BLOCK, num);
    } else {
        snprintf(t->hf_quant_state, sizeof(t->hf_quant_state),
                 "{\"quant_type\": \"nf4\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": [%s]}",
                 NF4_BLOCK, dtype, shape_txt);
    }
    const int64_t packed_shape[2] = {(t->n + 1) / 2, 1};
    const int64_t nb = t->n_blocks, nb2 = t->n_dq_blocks, n16 = 16, n256 = 256;
    const int64_t qs_len = (int64_t)strlen(t->hf_quant_state);
    st_writer_add(w, key, ST_U8, 2, packed_shape, t->packed);
    snprintf(name, sizeof(name), "%s.absmax", key);
    if (t->double_quant) st_writer_add(w, name, ST_U8, 1, &nb, t->absmax_q);
    else st_writer_add(w, name, ST_F32, 1, &nb, t->absmax);
    snprintf(name, sizeof(name), "%s.quant_map", key);
    st_writer_add(w, name, ST_F32, 1, &n16, t->code4);
    if (t->double_quant) {
        snprintf(name, sizeof(name), "%s.nested_absmax", key);
        st_writer_add(w, name, ST_F32, 1, &nb2, t->absmax_scale);
        snprintf(name, sizeof(name), "%s.nested_quant_map", key);
        st_writer_add(w, name, ST_F32, 1, &n256, t->code8);
    }
    snprintf(name, sizeof(name), "%s.quant_state.bitsandbytes__nf4", key);
    st_writer_add(w, name, ST_U8, 1, &qs_len, t->hf_quant_state);
}
