// NF4 quantization against bitsandbytes (reference files from dev/gen_nf4_ref.py, bitsandbytes
// 0.50.2 CPU backend, torch 2.15 on one thread). Every comparison is bit for bit: packed bytes,
// absmax, nested codes / scales / offset, the NF4 and dynamic 8-bit code maps, torch.mean and
// the dequantized fp32 weights. Also reads a transformers-saved 4-bit GPT-2 checkpoint.
#include "ops/nf4.h"
#include "base/check.h"
#include "base/safetensors.h"
#include "test.h"
#include "test_child.h"

#include <stdint.h>

#define REF_DIR "test/ref/nf4/"

static int same_bits(const char* what, const void* a, const void* b, size_t bytes) {
    test_checks++;
    if (memcmp(a, b, bytes) == 0) { printf("ok   %s (%zu bytes identical)\n", what, bytes); return 1; }
    size_t i = 0;
    while (((const uint8_t*)a)[i] == ((const uint8_t*)b)[i]) i++;
    test_failures++;
    fprintf(stderr, "FAIL %s: first difference at byte %zu of %zu\n", what, i, bytes);
    return 0;
}

static int same_f32(const char* what, const float* got, const float* want, size_t n) {
    test_checks++;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &got[i], 4);
        memcpy(&y, &want[i], 4);
        if (x != y) { if (!bad) first = i; bad++; }
    }
    if (!bad) { printf("ok   %s (%zu floats bit-identical)\n", what, n); return 1; }
    test_failures++;
    fprintf(stderr, "FAIL %s: %zu of %zu floats differ; first [%zu]: got %.9g want %.9g\n",
            what, bad, n, first, got[first], want[first]);
    return 0;
}

static const StTensor* need(StFile* f, const char* name) {
    const StTensor* t = st_find(f, name);
    if (!t) { fprintf(stderr, "FAIL reference file %s lacks '%s'\n", f->path, name); exit(1); }
    return t;
}

static float* read_f32(StFile* f, const char* name, size_t* n) {
    const StTensor* t = need(f, name);
    float* v = (float*)mallocCheck(t->numel * sizeof(float) + 1);
    st_read_f32(f, t, v);
    if (n) *n = t->numel;
    return v;
}

static uint8_t* read_u8(StFile* f, const char* name, size_t* n) {
    const StTensor* t = need(f, name);
    uint8_t* v = (uint8_t*)mallocCheck(t->numel + 1);
    st_read_raw(f, t, v);
    if (n) *n = t->numel;
    return v;
}

static void test_maps(StFile* f) {
    size_t n;
    float* nf4 = read_f32(f, "nf4_code", &n);
    TEST_CHECK(n == 16, "nf4_code has %zu entries", n);
    same_f32("NF4 code table", nf4_code_values, nf4, 16);
    float* dyn = read_f32(f, "dynamic_map", &n);
    TEST_CHECK(n == 256, "dynamic_map has %zu entries", n);
    float mine[256];
    nf4_dynamic_map(mine);
    same_f32("dynamic 8-bit map from its formula", mine, dyn, 256);
    free(nf4);
    free(dyn);
}

static void test_means(StFile* f) {
    static const int lens[] = {1, 3, 7, 8, 9, 15, 16, 31, 33, 100, 257, 1000, 4099, 9001};
    int ok = 0, total = 0;
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        char name[64];
        size_t n;
        snprintf(name, sizeof(name), "mean.%d.input", lens[k]);
        float* x = read_f32(f, name, &n);
        snprintf(name, sizeof(name), "mean.%d.mean", lens[k]);
        float* want = read_f32(f, name, NULL);
        float got = nf4_torch_mean(x, (int64_t)n, 1);
        total++;
        if (memcmp(&got, want, 4) == 0) ok++;
        else fprintf(stderr, "  torch.mean of %d values: got %.9g want %.9g\n", lens[k], got, want[0]);
        free(x);
        free(want);
    }
    TEST_CHECK(ok == total, "%d of %d means bit-identical to torch.mean", ok, total);
    if (ok == total) printf("ok   torch.mean emulation (%d lengths)\n", total);
}

// The generator's formula input (dev/gen_nf4_ref.py formula_vector), every step the same fp32 op.
static float* formula_vector(int64_t n, float scale, float shift) {
    float* x = (float*)mallocCheck((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = ((uint64_t)i * 2654435761ull) % 100003ull;
        float v = (float)k / 100003.0f;
        float s = (float)((((uint64_t)i / 64) * 7919ull) % 101ull + 1ull) * scale;
        x[i] = (v - shift) * s;
    }
    return x;
}

// torch.mean with several PyTorch threads, and a GPT-2 c_fc-sized (3072 x 768) quantization.
static void test_threads(StFile* f) {
    static const int64_t lens[] = {40000, 65537, 200001};
    static const int threads[] = {1, 2, 3, 4, 16};
    int ok = 0, total = 0;
    for (int k = 0; k < 3; k++) {
        char name[64];
        snprintf(name, sizeof(name), "mtmean.%lld", (long long)lens[k]);
        size_t nref;
        float* want = read_f32(f, name, &nref);
        float* x = formula_vector(lens[k], 0.001f, 0.0f);
        for (int j = 0; j < 5 && j < (int)nref; j++) {
            float got = nf4_torch_mean(x, lens[k], threads[j]);
            total++;
            if (memcmp(&got, &want[j], 4) == 0) ok++;
            else fprintf(stderr, "  torch.mean of %lld values, %d threads: got %.9g want %.9g\n",
                         (long long)lens[k], threads[j], got, want[j]);
        }
        free(x);
        free(want);
    }
    TEST_CHECK(ok == total && total == 15, "%d of %d multi-thread means bit-identical", ok, total);
    if (ok == total) printf("ok   torch.mean emulation with 1..16 threads (%d cases)\n", total);

    float* w = formula_vector(3072 * 768, 0.001f, 0.5f);
    const int64_t shape[2] = {3072, 768};
    float* offsets = read_f32(f, "big.offsets", NULL);
    static const int big_threads[] = {1, 2, 4, 16};
    for (int j = 0; j < 4; j++) {
        NF4Tensor t;
        char what[96];
        nf4_quantize_ex(&t, w, 2, shape, 1, big_threads[j]);
        snprintf(what, sizeof(what), "3072x768 offset, %d PyTorch threads", big_threads[j]);
        same_f32(what, &t.offset, &offsets[j], 1);
        if (big_threads[j] == 2) {
            size_t n;
            uint8_t* aq = read_u8(f, "big.t2.absmax_q", &n);
            TEST_CHECK(n == (size_t)t.n_blocks, "big: %zu absmax codes", n);
            same_bits("3072x768 absmax codes, 2 PyTorch threads", t.absmax_q, aq, n);
            float* nested = read_f32(f, "big.t2.nested_absmax", &n);
            TEST_CHECK(n == (size_t)t.n_dq_blocks, "big: %zu nested scales", n);
            same_f32("3072x768 nested absmax, 2 PyTorch threads", t.absmax_scale, nested, n);
            free(aq);
            free(nested);
        }
        nf4_free(&t);
    }
    free(offsets);
    free(w);
}

// Compares got with the reference tensor "<name>.<field>" (floats or bytes) bit for bit, named
// "<name> <tag>: <what>"; n_want >= 0: the reference must hold that many elements (-1: as many as
// it holds are compared, for references that keep only the first rows).
static void same_as_ref(StFile* f, const char* name, const char* field, const char* tag, const char* what,
                        const void* got, int is_f32, long long n_want) {
    char key[128], label[200];
    size_t nref;
    snprintf(key, sizeof(key), "%s.%s", name, field);
    snprintf(label, sizeof(label), "%s %s: %s", name, tag, what);
    void* want = is_f32 ? (void*)read_f32(f, key, &nref) : (void*)read_u8(f, key, &nref);
    if (n_want >= 0) TEST_CHECK(nref == (size_t)n_want, "%s: the reference holds %zu elements, want %lld", label, nref, n_want);
    if (is_f32) same_f32(label, (const float*)got, (const float*)want, nref);
    else same_bits(label, got, want, nref);
    free(want);
}

// One reference case: quantize its input both ways and compare everything bitsandbytes stored.
static void test_case(StFile* f, const char* name) {
    char key[128], what[160];
    size_t n;
    snprintf(key, sizeof(key), "%s.input", name);
    const StTensor* in = need(f, key);
    float* x = read_f32(f, key, &n);
    int64_t shape[NF4_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) shape[d] = in->shape[d];

    for (int dq = 0; dq <= 1; dq++) {
        const char* tag = dq ? "double-quant" : "plain";
        NF4Tensor t;
        nf4_quantize(&t, x, in->ndim, shape, dq);
        TEST_CHECK(t.n == (int64_t)n, "%s: n %lld", name, (long long)t.n);

        same_as_ref(f, name, "packed", tag, "packed codes", t.packed, 0, (long long)(n + 1) / 2);
        float* absmax = (float*)mallocCheck((size_t)t.n_blocks * sizeof(float));
        nf4_absmax_f32(&t, absmax);
        if (!dq) {
            same_as_ref(f, name, "absmax", tag, "absmax", absmax, 1, t.n_blocks);
        } else {
            same_as_ref(f, name, "dq.absmax_q", tag, "8-bit absmax codes", t.absmax_q, 0, t.n_blocks);
            same_as_ref(f, name, "dq.nested_absmax", tag, "nested absmax", t.absmax_scale, 1, t.n_dq_blocks);
            same_as_ref(f, name, "dq.offset", tag, "offset", &t.offset, 1, 1);
            same_as_ref(f, name, "dq.absmax", tag, "decoded absmax", absmax, 1, -1);
        }
        free(absmax);

        // dequantized weights (the reference may hold only the first rows)
        float* y = (float*)mallocCheck(n * sizeof(float));
        nf4_dequantize(&t, y);
        same_as_ref(f, name, dq ? "dq.dequant" : "dequant", tag, "dequantized", y, 1, -1);
        // a row range into a scratch buffer equals the same rows of the full dequantization
        if (t.ndim >= 2 && t.shape[0] >= 3) {
            int64_t row = t.n / t.shape[0];
            float* part = (float*)mallocCheck((size_t)(2 * row) * sizeof(float));
            nf4_dequantize_rows(&t, 1, 3, part);
            snprintf(what, sizeof(what), "%s %s: rows 1..2 dequantized alone", name, tag);
            same_f32(what, part, y + row, (size_t)(2 * row));
            free(part);
        }
        // an unaligned element range
        if (n > 70) {
            float part[40];
            nf4_dequantize_range(&t, 37, 77, part);
            snprintf(what, sizeof(what), "%s %s: elements 37..76 dequantized alone", name, tag);
            same_f32(what, part, y + 37, 40);
        }
        // the packed image (what ZeRO 3 shards): a view of it, and a tensor stripped and unpacked
        // from it, dequantize to the same bits as the tensor itself
        {
            NF4Image img;
            nf4_image_layout(&t, &img);
            uint8_t* image = (uint8_t*)mallocCheck(img.bytes + 16);
            nf4_image_pack(&t, image + 16);
            NF4Tensor v;
            nf4_image_view(&v, &t, image + 16);
            float* z = (float*)mallocCheck(n * sizeof(float));
            nf4_dequantize(&v, z);
            snprintf(what, sizeof(what), "%s %s: dequantized from its packed image (%zu bytes)", name, tag, img.bytes);
            same_f32(what, z, y, n);
            TEST_CHECK(img.bytes % 16 == 0 && img.bytes >= nf4_bytes(&t), "%s: image of %zu bytes for %zu of data", name, img.bytes, nf4_bytes(&t));
            NF4Tensor u = t; // (a copy of the description; the arrays stay t's until the strip)
            u.packed = NULL; u.absmax = NULL; u.absmax_q = NULL; u.absmax_scale = NULL;
            nf4_image_unpack(&u, image + 16);
            memset(z, 0, n * sizeof(float));
            nf4_dequantize(&u, z);
            snprintf(what, sizeof(what), "%s %s: unpacked from its packed image", name, tag);
            same_f32(what, z, y, n);
            nf4_strip(&u);
            TEST_CHECK(!u.packed && !u.absmax && !u.absmax_q && !u.absmax_scale && u.n == t.n, "%s: strip keeps the description only", name);
            free(z); free(image);
        }
        free(y);
        TEST_CHECK(nf4_bytes(&t) == nf4_bytes_for(t.n, dq), "%s: byte count", name);
        nf4_free(&t);
    }
    free(x);
}

static void test_memory(void) {
    // GPT-2 124M's 768x768 attention projection: 4 bits + 8/64 (absmax codes) + 32/(64*256)
    // (nested scales) = 4.127 bits per parameter with double quantization, 4.5 without
    double dq = nf4_bits_per_param(768 * 768, 1), plain = nf4_bits_per_param(768 * 768, 0);
    TEST_CHECK(fabs(dq - 4.127) < 0.0005, "double-quant bits/param %.5f", dq);
    TEST_CHECK(plain == 4.5, "plain bits/param %.5f", plain);
    TEST_CHECK(nf4_bytes_for(768 * 768, 1) == 768 * 768 / 2 + 9216 + 36 * 4 + 4, "byte count");
    TEST_CHECK(nf4_bytes_for(3, 0) == 2 + 4 && nf4_bytes_for(3, 1) == 2 + 1 + 4 + 4, "tiny byte counts");
    printf("ok   memory: %.4f bits/param with double quantization, %.4f without\n", dq, plain);
}

// The 4-bit checkpoint transformers saved: read it, compare with quantizing the fp32 original,
// and write our own quantization the same way: every tensor must come out byte-identical.
static const char* hf_keys[] = {
    "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight",
    "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_proj.weight",
};
#define N_HF_KEYS 4

static void test_hf(void) {
    StFile f32, q4;
    st_open(&f32, REF_DIR "hf_fp32/model.safetensors");
    st_open(&q4, REF_DIR "hf_4bit/model.safetensors");
    NF4Tensor mine[N_HF_KEYS];
    StWriter w;
    st_writer_init(&w);
    for (int k = 0; k < N_HF_KEYS; k++) {
        char what[160];
        NF4Tensor hf;
        nf4_from_hf_state(&hf, &q4, hf_keys[k]);
        // HF GPT-2 stores Conv1D weights [in, out]; bitsandbytes quantized them as [out, in]
        const StTensor* wt = need(&f32, hf_keys[k]);
        int64_t in = wt->shape[0], out = wt->shape[1];
        float* wf = (float*)mallocCheck(wt->numel * sizeof(float));
        float* wT = (float*)mallocCheck(wt->numel * sizeof(float));
        st_read_f32(&f32, wt, wf);
        for (int64_t i = 0; i < in; i++)
            for (int64_t o = 0; o < out; o++) wT[o * in + i] = wf[i * out + o];
        int64_t shape[2] = {out, in};
        nf4_quantize(&mine[k], wT, 2, shape, 1);
        TEST_CHECK(hf.double_quant && hf.ndim == 2 && hf.shape[0] == out && hf.shape[1] == in,
                   "%s: quant_state shape [%lld, %lld]", hf_keys[k], (long long)hf.shape[0], (long long)hf.shape[1]);
        snprintf(what, sizeof(what), "hf %s: packed codes", hf_keys[k]);
        same_bits(what, mine[k].packed, hf.packed, (size_t)(hf.n + 1) / 2);
        snprintf(what, sizeof(what), "hf %s: absmax codes", hf_keys[k]);
        same_bits(what, mine[k].absmax_q, hf.absmax_q, (size_t)hf.n_blocks);
        snprintf(what, sizeof(what), "hf %s: nested absmax", hf_keys[k]);
        same_f32(what, mine[k].absmax_scale, hf.absmax_scale, (size_t)hf.n_dq_blocks);
        snprintf(what, sizeof(what), "hf %s: offset", hf_keys[k]);
        same_f32(what, &mine[k].offset, &hf.offset, 1);
        snprintf(what, sizeof(what), "hf %s: quant_map / nested_quant_map", hf_keys[k]);
        same_f32(what, mine[k].code4, hf.code4, 16);
        same_f32(what, mine[k].code8, hf.code8, 256);
        if (k == 0) {
            StFile dq;
            st_open(&dq, REF_DIR "hf_4bit_dequant.safetensors");
            const StTensor* rt = need(&dq, hf_keys[k]);
            float* want = (float*)mallocCheck(rt->numel * sizeof(float));
            st_read_f32(&dq, rt, want);
            float* y = (float*)mallocCheck((size_t)hf.n * sizeof(float));
            nf4_dequantize(&hf, y);
            TEST_CHECK(rt->numel == (uint64_t)hf.n, "dequant size");
            snprintf(what, sizeof(what), "hf %s: dequantized (bitsandbytes dequantize_4bit)", hf_keys[k]);
            same_f32(what, y, want, (size_t)hf.n);
            free(y);
            free(want);
            st_close(&dq);
        }
        nf4_to_hf_state(&mine[k], &w, hf_keys[k], "float32");
        nf4_free(&hf);
        free(wf);
        free(wT);
    }
    // our writer's output against transformers' file, tensor by tensor
    char path[256];
    snprintf(path, sizeof(path), "/tmp/llmc_test_nf4_%d.safetensors", (int)getpid());
    st_writer_save(&w, path);
    st_writer_free(&w);
    StFile ours;
    st_open(&ours, path);
    int compared = 0, same = 0;
    for (int i = 0; i < ours.n_tensors; i++) {
        const StTensor* a = &ours.tensors[i];
        const StTensor* b = st_find(&q4, a->name);
        compared++;
        if (!b || a->dtype != b->dtype || a->ndim != b->ndim || a->numel != b->numel ||
            memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0) {
            fprintf(stderr, "  written tensor '%s' has no twin of the same dtype/shape in transformers' file\n", a->name);
            continue;
        }
        size_t bytes = (size_t)(a->end - a->begin);
        uint8_t* x = (uint8_t*)mallocCheck(bytes + 1);
        uint8_t* y = (uint8_t*)mallocCheck(bytes + 1);
        st_read_raw(&ours, a, x);
        st_read_raw(&q4, b, y);
        if (memcmp(x, y, bytes) == 0) same++;
        else fprintf(stderr, "  written tensor '%s' differs from transformers' bytes\n", a->name);
        free(x);
        free(y);
    }
    TEST_CHECK(compared == 6 * N_HF_KEYS && same == compared, "%d of %d written tensors identical", same, compared);
    if (same == compared) printf("ok   nf4_to_hf_state: %d tensors byte-identical to transformers' 4-bit checkpoint\n", same);
    st_close(&ours);
    remove(path);
    for (int k = 0; k < N_HF_KEYS; k++) nf4_free(&mine[k]);
    st_close(&f32);
    st_close(&q4);
}

// Bad 4-bit checkpoints: one clear message naming the file and the key.
typedef struct { const char* path; const char* key; } HfLoadArg;

static void child_load(void* p) {
    HfLoadArg* a = (HfLoadArg*)p;
    StFile f;
    NF4Tensor t;
    st_open(&f, a->path);
    nf4_from_hf_state(&t, &f, a->key);
}

static void write_variant(const char* path, const char* json, int64_t packed_bytes, int64_t n_absmax) {
    static uint8_t zeros[4096];
    static float fz[256];
    StWriter w;
    st_writer_init(&w);
    const int64_t ps[2] = {packed_bytes, 1}, n16 = 16, n256 = 256, nb2 = 1, qs = (int64_t)strlen(json);
    st_writer_add(&w, "w", ST_U8, 2, ps, zeros);
    st_writer_add(&w, "w.absmax", ST_U8, 1, &n_absmax, zeros);
    st_writer_add(&w, "w.quant_map", ST_F32, 1, &n16, fz);
    st_writer_add(&w, "w.nested_absmax", ST_F32, 1, &nb2, fz);
    st_writer_add(&w, "w.nested_quant_map", ST_F32, 1, &n256, fz);
    st_writer_add(&w, "w.quant_state.bitsandbytes__nf4", ST_U8, 1, &qs, json);
    st_writer_save(&w, path);
    st_writer_free(&w);
}

static void test_hf_errors(void) {
    char path[256];
    snprintf(path, sizeof(path), "/tmp/llmc_test_nf4_bad_%d.safetensors", (int)getpid());
    const char* good = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float32\", \"shape\": [16, 64], "
                       "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.5}";
    HfLoadArg a = {path, "w"};
    {   // the well-formed variant loads (so the failures below are about what each one breaks)
        write_variant(path, good, 512, 16);
        StFile f;
        NF4Tensor t;
        st_open(&f, path);
        nf4_from_hf_state(&t, &f, "w");
        TEST_CHECK(t.n == 1024 && t.double_quant && t.offset == 0.5f, "well-formed variant: n %lld", (long long)t.n);
        nf4_free(&t);
        st_close(&f);
    }
    {
        const char* want[] = {path, "'x.quant_state.bitsandbytes__nf4' is missing", NULL};
        HfLoadArg x = {path, "x"};
        TEST_CHECK(test_expect_fatal("missing key", child_load, &x, want), "fatal path");
    }
    {
        write_variant(path, "{\"quant_type\": \"fp4\", \"blocksize\": 64, \"dtype\": \"float32\", \"shape\": [16, 64]}", 512, 16);
        const char* want[] = {path, "quant_type fp4", NULL};
        TEST_CHECK(test_expect_fatal("fp4 quant_type", child_load, &a, want), "fatal path");
    }
    {
        write_variant(path, "{\"quant_type\": \"nf4\", \"blocksize\": 128, \"dtype\": \"float32\", \"shape\": [16, 64]}", 512, 16);
        const char* want[] = {path, "blocksize 128", NULL};
        TEST_CHECK(test_expect_fatal("blocksize 128", child_load, &a, want), "fatal path");
    }
    {
        write_variant(path, good, 500, 16);
        const char* want[] = {path, "holds 500 bytes, the shape needs 512", NULL};
        TEST_CHECK(test_expect_fatal("packed size vs shape", child_load, &a, want), "fatal path");
    }
    {
        write_variant(path, good, 512, 15);
        const char* want[] = {path, "'w.absmax' has 15 elements, expected 16", NULL};
        TEST_CHECK(test_expect_fatal("absmax count", child_load, &a, want), "fatal path");
    }
    {
        write_variant(path, "{\"quant_type\": \"nf4\", \"blocksize\": 64", 512, 16);
        const char* want[] = {path, "not a JSON object", NULL};
        TEST_CHECK(test_expect_fatal("truncated quant_state JSON", child_load, &a, want), "fatal path");
    }
    remove(path);
}

int main(void) {
    StFile f;
    st_open(&f, REF_DIR "nf4_ref.safetensors");
    printf("reference: bitsandbytes %s, torch %s\n", st_meta(&f, "bitsandbytes") ? st_meta(&f, "bitsandbytes") : "?",
           st_meta(&f, "torch") ? st_meta(&f, "torch") : "?");
    test_maps(&f);
    test_means(&f);
    test_threads(&f);
    static const char* cases[] = {"normal", "edge", "len1", "len63", "len65", "len1000", "real"};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) test_case(&f, cases[i]);
    st_close(&f);
    test_memory();
    test_hf();
    test_hf_errors();
    return test_finish("test_nf4");
}
