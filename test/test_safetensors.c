// safetensors reader and writer.
// 1. A file written by Python's safetensors (dev/gen_hf_formats.py) opens, and every tensor reads
//    back exactly as PyTorch sees it (fp32 bit patterns / ints in st_py_expect.json); torch's own
//    fp32 -> bf16 / fp16 narrowing of a value set with ties, subnormals and overflow matches ours.
// 2. Every reader rule of docs/FORMATS.md: a malformed file is rejected with a message that names the
//    file and the rule.
// 3. The writer: padding, metadata, data round trip, chunked fill callbacks.
#include "test.h"
#include "test_child.h"
#include "base/safetensors.h"
#include "base/json.h"
#include "base/bf16.h"
#include "base/fileio.h"
#include <stdint.h>

static char TMP[1024];
static const char* REF = "test/ref/hf_formats/st_py.safetensors";
static const char* REF_EXPECT = "test/ref/hf_formats/st_py_expect.json";

static void tmp_path(char* out, size_t cap, const char* name) { snprintf(out, cap, "%s/%s", TMP, name); }

// A file: 8-byte length (hdr_len_override if nonzero), the header text, then data_len bytes.
static void write_raw(const char* path, const char* header, uint64_t hdr_len_override, size_t data_len) {
    FILE* fp = fopen(path, "wb");
    if (!fp) { perror(path); exit(2); }
    uint64_t n = hdr_len_override ? hdr_len_override : strlen(header);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(n >> (8 * i));
    fwrite(lb, 1, 8, fp);
    fwrite(header, 1, strlen(header), fp);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xFF), fp);
    fclose(fp);
}

static void expect_bad(const char* name, const char* header, uint64_t hdr_len_override, size_t data_len, const char* rule) {
    char path[1200];
    tmp_path(path, sizeof(path), name);
    write_raw(path, header, hdr_len_override, data_len);
    StFile f;
    char err[1024];
    int rc = st_try_open(&f, path, err, sizeof(err));
    TEST_CHECK(rc == -1, "%s: malformed file was accepted", name);
    if (rc == 0) { st_close(&f); return; }
    char want_prefix[1300];
    snprintf(want_prefix, sizeof(want_prefix), "'%s': ", path);
    TEST_CHECK(strncmp(err, want_prefix, strlen(want_prefix)) == 0, "%s: message does not start with the path: %s", name, err);
    TEST_CHECK(strstr(err, rule) != NULL, "%s: message '%s' does not name the rule '%s'", name, err, rule);
    if (strstr(err, rule)) printf("ok   rejects %-22s %s\n", name, err + strlen(want_prefix));
}

static void expect_good(const char* name, const char* header, size_t data_len, int n_tensors) {
    char path[1200];
    tmp_path(path, sizeof(path), name);
    write_raw(path, header, 0, data_len);
    StFile f;
    char err[1024];
    int rc = st_try_open(&f, path, err, sizeof(err));
    TEST_CHECK(rc == 0, "%s: valid file rejected: %s", name, err);
    if (rc == 0) { TEST_CHECK(f.n_tensors == n_tensors, "%s: %d tensors, want %d", name, f.n_tensors, n_tensors); st_close(&f); }
}

static void test_rules(void) {
    char path[1200];
    // shorter than 8 bytes
    tmp_path(path, sizeof(path), "short");
    { FILE* fp = fopen(path, "wb"); fwrite("abcde", 1, 5, fp); fclose(fp); }
    {
        StFile f; char err[1024];
        TEST_CHECK(st_try_open(&f, path, err, sizeof(err)) == -1 && strstr(err, "shorter than 8 bytes"), "short file: %s", err);
        tmp_path(path, sizeof(path), "does_not_exist");
        TEST_CHECK(st_try_open(&f, path, err, sizeof(err)) == -1 && strstr(err, "cannot open"), "missing file: %s", err);
    }
    const char* A4 = "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
    char h[2048];
    expect_bad("header_too_long", "{}", 100000001ull, 0, "exceeds the 100000000-byte limit");
    expect_bad("header_past_eof", "{}", 1000, 0, "runs past the end of the file");
    expect_bad("bad_utf8", "{\"a\xff\":{}}", 0, 0, "not valid UTF-8");
    expect_bad("overlong_utf8", "{\"\xc1\x81\":1}", 0, 0, "not valid UTF-8");
    expect_bad("bad_json", "{\"a\":{\"dtype\":\"F32\",}}", 0, 0, "not valid JSON");
    expect_bad("not_object_start", "[]", 0, 0, "does not start with '{'");
    expect_bad("empty_header", "", 0, 0, "does not start with '{'");
    snprintf(h, sizeof(h), "{%s,%s}", A4, A4);
    expect_bad("duplicate_name", h, 0, 4, "duplicate tensor name 'a'");
    expect_bad("unknown_dtype", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1, "unknown dtype 'F8_E4M3'");
    expect_bad("overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 0, 4, "overflow");
    expect_bad("overflow_by_size", "{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,8]}}", 0, 8, "overflow");
    expect_bad("end_before_begin", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 0, 4, "end (0) < begin (4)");
    expect_bad("size_mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 0, 4, "end - begin != nelements * element size");
    expect_bad("gap_at_start", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8, "gap in the data buffer");
    snprintf(h, sizeof(h), "{%s,\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", A4);
    expect_bad("gap_between", h, 0, 12, "gap in the data buffer");
    snprintf(h, sizeof(h), "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}");
    expect_bad("overlap", h, 0, 8, "overlap");
    snprintf(h, sizeof(h), "{%s}", A4);
    expect_bad("trailing_bytes", h, 0, 5, "trailing bytes");
    expect_bad("truncated_data", h, 0, 3, "truncated");
    expect_bad("no_tensors_trailing", "{}", 0, 1, "trailing bytes");
    expect_bad("metadata_not_string", "{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", 0, 0, "metadata values must be strings");
    expect_bad("metadata_not_object", "{\"__metadata__\":[\"pt\"]}", 0, 0, "__metadata__ is not a JSON object");
    expect_bad("entry_not_object", "{\"a\":[1]}", 0, 0, "expected an object");
    expect_bad("missing_dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 4, "\"dtype\"");
    expect_bad("negative_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 0, 4, "not a non-negative integer");
    expect_bad("float_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 0, 4, "not a non-negative integer");
    expect_bad("bad_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 0, 4, "data_offsets");
    expect_bad("too_many_dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 0, 1, "dimensions");
    // valid corner cases: padding spaces, no tensors, zero-size tensors at any offset, scalar
    expect_good("empty_ok", "{}", 0, 0);
    expect_good("padded_ok", "{\"__metadata__\":{\"format\":\"pt\"}}     ", 0, 0);
    snprintf(h, sizeof(h), "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[4,4]},%s,\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[4,5]}}", A4);
    expect_good("zero_size_ok", h, 5, 3);

}

// st_open in a child (path in arg).
static void child_st_open(void* arg) {
    StFile f;
    st_open(&f, (const char*)arg);
    st_close(&f);
}

// Reads one tensor of the reference file in a child, as floats or as int32 (what must fail).
typedef struct { const char* name; int as_f32; } ChildRead;
static void child_read(void* arg) {
    const ChildRead* r = (const ChildRead*)arg;
    StFile f;
    st_open(&f, REF);
    const StTensor* t = st_find(&f, r->name);
    void* v = malloc((size_t)t->numel * 4 + 4);
    if (r->as_f32) st_read_f32(&f, t, (float*)v);
    else st_read_i32(&f, t, (int32_t*)v);
    free(v);
    st_close(&f);
}

static void test_fatal_paths(void) {
    char path[1200];
    tmp_path(path, sizeof(path), "trailing_bytes");
    char want[1400];
    snprintf(want, sizeof(want), "error: '%s': ", path);
    const char* w1[] = { want, "trailing bytes", NULL };
    TEST_CHECK(test_expect_fatal("st_open on a file with trailing bytes", child_st_open, path, w1), "st_open fatal message");
    const char* w2[] = { "i64_big", "does not fit in int32", NULL };
    ChildRead i64_big = { "i64_big", 0 }, int_as_f32 = { "i32_mat", 1 };
    TEST_CHECK(test_expect_fatal("st_read_i32 of 2^40", child_read, &i64_big, w2), "int32 overflow message");
    const char* w3[] = { "i32_mat", "has dtype I32, cannot read it as floats", NULL };
    TEST_CHECK(test_expect_fatal("st_read_f32 of an int tensor", child_read, &int_as_f32, w3), "float read of int message");
}

static void test_python_file(void) {
    StFile f;
    char err[1024];
    TEST_CHECK(st_try_open(&f, REF, err, sizeof(err)) == 0, "python-written file rejected: %s", err);
    if (err[0]) return;
    size_t len;
    char* text = read_file_all(REF_EXPECT, &len);
    JsonValue* ex = json_parse(text, len, err, sizeof(err));
    free(text);
    TEST_CHECK(ex != NULL, "%s: %s", REF_EXPECT, err);
    if (!ex) { st_close(&f); return; }
    // metadata, including non-ASCII text (escaped with a surrogate pair in the JSON reference)
    const JsonValue* meta = json_get(ex, "__metadata__");
    TEST_CHECK(f.n_meta == meta->n, "metadata count %d, want %d", f.n_meta, meta->n);
    for (int i = 0; i < meta->n; i++) {
        const char* got = st_meta(&f, meta->keys[i]);
        TEST_CHECK(got && strcmp(got, meta->items[i].string) == 0, "metadata '%s' = '%s', want '%s'", meta->keys[i], got ? got : "(absent)", meta->items[i].string);
    }
    TEST_CHECK(strcmp(st_meta(&f, "format"), "pt") == 0 && st_meta(&f, "nope") == NULL, "st_meta");
    int n_expected = ex->n - 1;
    TEST_CHECK(f.n_tensors == n_expected, "%d tensors, want %d", f.n_tensors, n_expected);
    int checked = 0;
    for (int i = 0; i < ex->n; i++) {
        const char* name = ex->keys[i];
        if (strcmp(name, "__metadata__") == 0) continue;
        const JsonValue* e = &ex->items[i];
        const StTensor* t = st_find(&f, name);
        TEST_CHECK(t != NULL, "tensor '%s' not found", name);
        if (!t) continue;
        TEST_CHECK(strcmp(st_dtype_name(t->dtype), json_as_string(json_get(e, "dtype"))) == 0, "'%s' dtype %s", name, st_dtype_name(t->dtype));
        const JsonValue* shape = json_get(e, "shape");
        int shape_ok = t->ndim == shape->n;
        uint64_t numel = 1;
        for (int d = 0; shape_ok && d < shape->n; d++) { int64_t s; shape_ok = json_as_int64(&shape->items[d], &s) && s == t->shape[d]; numel *= (uint64_t)t->shape[d]; }
        TEST_CHECK(shape_ok && t->numel == numel, "'%s' shape", name);
        const JsonValue* bits = json_get(e, "f32_bits");
        const JsonValue* ints = json_get(e, "ints");
        if (bits) {
            float* v = (float*)malloc((size_t)t->numel * sizeof(float) + 4);
            st_read_f32(&f, t, v);
            int bad = 0;
            for (uint64_t k = 0; k < t->numel; k++) {
                int64_t want; uint32_t got; memcpy(&got, &v[k], 4);
                json_as_int64(&bits->items[k], &want);
                if ((uint32_t)(int32_t)want != got) { if (!bad) fprintf(stderr, "'%s'[%llu]: got 0x%08x want 0x%08x\n", name, (unsigned long long)k, got, (uint32_t)(int32_t)want); bad++; }
            }
            TEST_CHECK(bad == 0 && bits->n == (int)t->numel, "'%s': %d of %llu values differ from PyTorch's", name, bad, (unsigned long long)t->numel);
            free(v);
            checked++;
        } else if (ints && strcmp(name, "i64_big") != 0) {
            int32_t* v = (int32_t*)malloc((size_t)t->numel * sizeof(int32_t) + 4);
            st_read_i32(&f, t, v);
            int bad = 0;
            for (uint64_t k = 0; k < t->numel; k++) { int64_t want; json_as_int64(&ints->items[k], &want); if (want != v[k]) bad++; }
            TEST_CHECK(bad == 0 && ints->n == (int)t->numel, "'%s': %d values differ", name, bad);
            free(v);
            checked++;
        }
    }
    printf("ok   %d tensors of the python-written file read exactly\n", checked);

    // fp32 -> bf16 / fp16 narrowing: ours vs PyTorch's, bit for bit
    const StTensor* src = st_find(&f, "f32_src");
    const StTensor* tb = st_find(&f, "f32_src_as_bf16");
    const StTensor* th = st_find(&f, "f32_src_as_f16");
    if (src && tb && th) {
        size_t n = (size_t)src->numel;
        float* x = (float*)malloc(n * 4);
        uint16_t* b = (uint16_t*)malloc(n * 2);
        uint16_t* hh = (uint16_t*)malloc(n * 2);
        st_read_raw(&f, src, x); st_read_raw(&f, tb, b); st_read_raw(&f, th, hh);
        int badb = 0, badh = 0;
        for (size_t k = 0; k < n; k++) {
            uint16_t ob = bf16_from_f32(x[k]), oh = fp16_from_f32(x[k]);
            if (isnan(x[k])) {
                // NaN bit patterns are implementation-defined (torch's vector path gives 0xffff);
                // what matters is that NaN stays NaN
                if (!isnan(bf16_to_f32(ob)) || !isnan(bf16_to_f32(b[k]))) badb++;
                if (!isnan(fp16_to_f32(oh)) || !isnan(fp16_to_f32(hh[k]))) badh++;
                continue;
            }
            if (ob != b[k]) { if (!badb) fprintf(stderr, "bf16(%a): ours 0x%04x torch 0x%04x\n", (double)x[k], ob, b[k]); badb++; }
            if (oh != hh[k]) { if (!badh) fprintf(stderr, "fp16(%a): ours 0x%04x torch 0x%04x\n", (double)x[k], oh, hh[k]); badh++; }
        }
        TEST_CHECK(badb == 0, "bf16_from_f32 differs from torch for %d of %zu values", badb, n);
        TEST_CHECK(badh == 0, "fp16_from_f32 differs from torch for %d of %zu values", badh, n);
        if (!badb && !badh) printf("ok   fp32 -> bf16 / fp16 rounding matches torch on %zu values\n", n);
        free(x); free(b); free(hh);
    } else {
        TEST_CHECK(0, "conversion tensors missing from %s", REF);
    }
    json_free(ex);
    st_close(&f);
}

typedef struct { int base; } FillCtx;
static void fill_i32(void* ctx, void* dst, uint64_t first, uint64_t count) {
    const FillCtx* c = (const FillCtx*)ctx;
    int32_t* d = (int32_t*)dst;
    for (uint64_t i = 0; i < count; i++) d[i] = c->base + (int32_t)(first + i);
}

static void test_writer(void) {
    char path[1200];
    tmp_path(path, sizeof(path), "written.safetensors");
    float a[6] = { 1.f, -2.f, 3.5f, 0.f, -0.f, 1e-30f };
    uint16_t b[3] = { 0x3F80, 0xC000, 0x7F80 };
    int64_t sa[2] = { 2, 3 }, sb[1] = { 3 }, sz[2] = { 0, 5 }, sbig[1] = { (1 << 20) + 3 };
    FillCtx fc = { 7 };
    StWriter w;
    st_writer_init(&w);
    st_writer_add(&w, "a", ST_F32, 2, sa, a);
    st_writer_add(&w, "zero", ST_F32, 2, sz, NULL);
    st_writer_add(&w, "b.bf16", ST_BF16, 1, sb, b);
    st_writer_add(&w, "scalar", ST_F32, 0, NULL, a + 2);
    st_writer_add_fn(&w, "filled", ST_I32, 1, sbig, fill_i32, &fc); // spans two fill chunks
    st_writer_meta(&w, "who", "test \"quoted\"");
    st_writer_save(&w, path);
    st_writer_free(&w);
    TEST_CHECK(!file_exists(path) ? 0 : 1, "file written");

    StFile f;
    char err[1024];
    TEST_CHECK(st_try_open(&f, path, err, sizeof(err)) == 0, "our own file rejected: %s", err);
    if (err[0]) return;
    TEST_CHECK(f.data_start % 8 == 0, "data starts at %llu, not 8-byte aligned", (unsigned long long)f.data_start);
    TEST_CHECK(f.n_tensors == 5, "%d tensors", f.n_tensors);
    TEST_CHECK(st_meta(&f, "format") && strcmp(st_meta(&f, "format"), "pt") == 0, "format pt");
    TEST_CHECK(st_meta(&f, "who") && strcmp(st_meta(&f, "who"), "test \"quoted\"") == 0, "custom metadata");
    float ra[6], rb[3], rs[1];
    st_read_f32(&f, st_find(&f, "a"), ra);
    st_read_f32(&f, st_find(&f, "b.bf16"), rb);
    st_read_f32(&f, st_find(&f, "scalar"), rs);
    TEST_CHECK(memcmp(ra, a, sizeof(a)) == 0, "F32 round trip");
    TEST_CHECK(rb[0] == 1.f && rb[1] == -2.f && isinf(rb[2]), "BF16 widening");
    TEST_CHECK(rs[0] == 3.5f && st_find(&f, "scalar")->ndim == 0, "scalar");
    TEST_CHECK(st_find(&f, "zero")->numel == 0, "zero-size tensor");
    const StTensor* ft = st_find(&f, "filled");
    int32_t* fv = (int32_t*)malloc((size_t)ft->numel * 4);
    st_read_i32(&f, ft, fv);
    int bad = 0;
    for (uint64_t i = 0; i < ft->numel; i++) if (fv[i] != 7 + (int32_t)i) bad++;
    TEST_CHECK(bad == 0, "fill callback data wrong in %d places", bad);
    free(fv);
    // the header must be space-padded JSON
    size_t len;
    char* raw = read_file_all(path, &len);
    char* hdr = raw + 8;
    size_t N = (size_t)f.header_len;
    TEST_CHECK(hdr[0] == '{', "header starts with {");
    size_t end = N; while (end > 0 && hdr[end - 1] == ' ') end--;
    TEST_CHECK(hdr[end - 1] == '}', "header padded with spaces only");
    free(raw);
    st_close(&f);
}

int main(void) {
    const char* build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(TMP, sizeof(TMP), "%s/test-tmp/test_safetensors", build);
    mkdir_p(TMP);
    test_rules();
    test_fatal_paths();
    test_python_file();
    test_writer();
    return test_finish("test_safetensors");
}
