// GGUF (llmc/base/gguf.h, llmc/model/gguf_io.h) against llama.cpp and its gguf-py, through the
// references dev/gen_gguf_ref.py wrote with them (test/ref/gguf/):
// 1. Q8_0: a crafted tensor (rounding ties, a zero block, tiny and large scales) quantizes to
//    exactly gguf-py's bytes (its quantizer is bit-exact with ggml's quantize_row_q8_0_ref).
// 2. The tiny GPT-2 (`tiny`, seed 11) written as GGUF f32 / f16 / bf16 / q8_0 reads back as the
//    weights the file holds (f32: the same bits; the others: our rounding of them), and the tool's
//    forward on each gives llama.cpp's logits for the same file (within the type's tolerance:
//    llama.cpp's CPU GELU is an fp16 table and it rounds activations to the weights' type); argmax
//    equal wherever llama.cpp's top-2 margin exceeds that tolerance.
// 3. LoRA: the PEFT adapter of the references merged into the tiny model gives the logits llama.cpp
//    computed with the GGUF adapter applied (--lora); a q,v-split adapter (stacked rank, folded
//    scale) exported as a GGUF adapter gives W + alpha / rank x B A = our merge.
// 4. Hostile and broken files: every rule of docs/FORMATS.md ("GGUF") refused with a message naming
//    the file and the rule; every truncation of a valid file refused.
#include "test.h"
#include "fixtures.h"
#include "ref.h"
#include "base/bf16.h"
#include "base/gguf.h"
#include "base/fileio.h"
#include "model/convert.h"
#include "model/gguf_io.h"
#include "ops/ops.h"

#define REFDIR "test/ref/gguf"
static char TMP[1024];

static void tmp_path(char* out, size_t cap, const char* name) { snprintf(out, cap, "%s/%s", TMP, name); }

// An integer reference tensor (malloc'd; its element count in *n).
static int* ref_read_int(StFile* f, const char* name, size_t* n) {
    const StTensor* t = st_find(f, name);
    if (!t) fatal(NULL, "reference tensor %s missing in %s", name, f->path);
    int* v = (int*)mallocCheck((t->numel + 1) * sizeof(int));
    st_read_i32(f, t, v);
    if (n) *n = t->numel;
    return v;
}

static void test_q8_0(StFile* ref) {
    size_t n, nq;
    float* x = ref_read(ref, "q8_input", &n);
    const StTensor* t = st_find(ref, "q8_expect");
    TEST_CHECK(t && t->dtype == ST_U8, "q8_expect present");
    nq = (size_t)t->numel;
    uint8_t* want = (uint8_t*)mallocCheck(nq);
    st_read_raw(ref, t, want);
    TEST_CHECK(nq == n / 32 * 34, "q8_expect has %zu bytes for %zu values", nq, n);
    uint8_t* got = (uint8_t*)mallocCheck(nq);
    gguf_quantize_q8_0(x, got, n);
    size_t first_diff = nq;
    for (size_t i = 0; i < nq && first_diff == nq; i++) if (got[i] != want[i]) first_diff = i;
    TEST_CHECK(first_diff == nq, "Q8_0 byte %zu (block %zu) differs from gguf-py: %u vs %u", first_diff, first_diff / 34,
               first_diff < nq ? got[first_diff] : 0, first_diff < nq ? want[first_diff] : 0);
    if (first_diff == nq) printf("ok   Q8_0 of %zu crafted blocks: byte-identical to gguf-py's quantizer\n", n / 32);
    // dequantization: q x fp16(d)
    float* back = (float*)mallocCheck(n * sizeof(float));
    gguf_dequantize_q8_0(want, back, n);
    int ok = 1;
    for (size_t b = 0; b < n / 32 && ok; b++) {
        uint16_t dh; memcpy(&dh, want + b * 34, 2);
        for (int j = 0; j < 32; j++) ok &= back[b * 32 + j] == (float)(int8_t)want[b * 34 + 2 + j] * fp16_to_f32(dh);
    }
    TEST_CHECK(ok, "Q8_0 dequantization is q x d");
    free(x); free(want); free(got); free(back);
}

// The value a stored tensor of `type` holds for x (the writer's rounding, read back by the reader).
static void expect_stored(GgmlType type, int per_tensor_f32, const float* x, float* out, size_t n, size_t cols) {
    if (per_tensor_f32 || type == GGML_TYPE_F32) { memcpy(out, x, n * sizeof(float)); return; }
    if (type == GGML_TYPE_F16) { for (size_t i = 0; i < n; i++) out[i] = fp16_to_f32(fp16_from_f32(x[i])); return; }
    if (type == GGML_TYPE_BF16) { for (size_t i = 0; i < n; i++) out[i] = bf16_to_f32(bf16_from_f32(x[i])); return; }
    uint8_t* q = (uint8_t*)mallocCheck(n / 32 * 34);
    gguf_quantize_q8_0(x, q, n);
    gguf_dequantize_q8_0(q, out, n);
    free(q);
    (void)cols;
}

// The weights read back from a GGUF file of `type` are the original ones rounded as the type stores them.
static void check_read_back(const char* what, const HostModel* hm, GgmlType type, const float* got) {
    const ParamTable* pt = &hm->pt;
    size_t bad = 0;
    float* want = (float*)mallocCheck(pt->total * sizeof(float));
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* in = &pt->t[id];
        const int f32 = in->ndim == 1 || id == PT_WPE;
        expect_stored(type, f32, hm->params + in->offset, want + in->offset, in->numel, in->cols);
    }
    for (size_t i = 0; i < pt->total; i++) bad += memcmp(&want[i], &got[i], sizeof(float)) != 0;
    TEST_CHECK(bad == 0, "%s: %zu of %zu weights read back differ from the stored rounding", what, bad, pt->total);
    if (!bad) printf("ok   %s: read back = the weights as the type stores them (%zu values)\n", what, pt->total);
    free(want);
}

// The tool's logits for the reference prompt on weights w (cfg), unpadded, [T, V] (malloc'd).
static float* forward_logits(const GPT2Config* cfg, const float* w, const int* ids, int T) {
    ModelSpec s;
    memset(&s, 0, sizeof(s));
    s.cfg = cfg; s.host = w; s.B = 1; s.T = T;
    Model m;
    model_assemble(&m, &s);
    gpt2_forward(&m.gpt, ids, NULL, NULL, 1, T, 0.0f, NULL);
    float* lg = ref_logits_unpadded(&m.gpt, T);
    model_free(&m);
    return lg;
}

// Our logits vs llama.cpp's (key_logits at the reference's columns): max |d| / max |llama.cpp| per
// position within tol; argmax equal where llama.cpp's top-2 margin > 2 tol max|logit|.
static void check_vs_llama(const char* what, StFile* ref, const char* key, const float* lg, int T, int V, double tol) {
    char k[64];
    size_t nc, n;
    int* cols_f = ref_read_int(ref, "cols", &nc);
    snprintf(k, sizeof(k), "%s_logits", key); float* want = ref_read(ref, k, &n);
    snprintf(k, sizeof(k), "%s_argmax", key); int* am = ref_read_int(ref, k, NULL);
    snprintf(k, sizeof(k), "%s_margin", key); float* mg = ref_read(ref, k, NULL);
    snprintf(k, sizeof(k), "%s_maxabs", key); float* mx = ref_read(ref, k, NULL);
    TEST_CHECK(n == (size_t)T * nc, "%s: reference has %zu logits for %d positions x %zu columns", what, n, T, nc);
    double worst = 0.0;
    int decided = 0, agree = 0;
    for (int t = 0; t < T; t++) {
        double d = 0.0;
        for (size_t c = 0; c < nc; c++) {
            const double e = fabs((double)lg[(size_t)t * V + (size_t)cols_f[c]] - (double)want[(size_t)t * nc + c]);
            d = e > d ? e : d;
        }
        worst = d / mx[t] > worst ? d / mx[t] : worst;
        int arg = 0;
        for (int v = 1; v < V; v++) if (lg[(size_t)t * V + v] > lg[(size_t)t * V + arg]) arg = v;
        if (mg[t] > 2.0 * tol * mx[t]) { decided++; agree += arg == am[t]; }
    }
    TEST_CHECK(worst <= tol, "%s: max |ours - llama.cpp| / max |llama.cpp| = %.3g > %.3g", what, worst, tol);
    TEST_CHECK(agree == decided, "%s: argmax differs from llama.cpp at %d of %d positions its margin decides", what, decided - agree, decided);
    if (worst <= tol && agree == decided)
        printf("ok   %s: vs llama.cpp %.2e (tol %.0e), argmax equal at the %d of %d positions the margin decides\n", what, worst, tol, decided, T);
    free(cols_f); free(want); free(am); free(mg); free(mx);
}

static void test_models(StFile* ref) {
    static const char* names[] = { "f32", "f16", "bf16", "q8_0" };
    // ~3x what was measured (2e-4, 4e-4, 2e-3, 7e-3: llama.cpp's fp16 GELU table and activation
    // rounding); a backend computing in bf16 gets bf16's
    const double floor = test_is_bf16() ? 3e-2 : 0.0;
    const double tol[] = { fmax(6e-4, floor), fmax(1.2e-3, floor), fmax(6e-3, floor), fmax(2e-2, floor) };
    size_t T;
    int* ids = ref_read_int(ref, "ids", &T);
    HostModel hm;
    convert_load(&hm, "tiny", 11);
    for (int k = 0; k < 4; k++) {
        GgmlType type;
        gguf_parse_type(names[k], &type);
        char path[1200], what[128];
        snprintf(what, sizeof(what), "tiny_%s.gguf", names[k]);
        tmp_path(path, sizeof(path), what);
        GgufProvenance prov = { NULL, "tiny", NULL, NULL };
        gguf_save_gpt2(path, &hm.pt, hm.params, type, "data/gpt2", &prov);
        GPT2Config cfg; ParamTable pt; float* w;
        model_load(path, &cfg, &pt, &w); // the GGUF hook of model_load
        TEST_CHECK(pt.total == hm.pt.total && cfg.num_heads == 4 && cfg.max_seq_len == 256, "%s: config read back", what);
        check_read_back(what, &hm, type, w);
        float* lg = forward_logits(&cfg, w, ids, (int)T);
        check_vs_llama(what, ref, names[k], lg, (int)T, cfg.vocab_size, tol[k]);
        free(lg); free(w);
    }
    // the PEFT adapter merged == llama.cpp with the GGUF adapter applied to tiny_f32.gguf
    convert_merge_adapter(&hm, REFDIR "/lora_tiny");
    float* lg = forward_logits(&hm.cfg, hm.params, ids, (int)T);
    check_vs_llama("tiny + lora_tiny (merged by us; llama.cpp: --lora)", ref, "lora", lg, (int)T, hm.cfg.vocab_size, fmax(9e-4, floor));
    free(lg);
    convert_free(&hm);
    free(ids);
}

// A q,v-split adapter (test/ref/lora_tiny/qv: c_attn of stacked rank 2r, scaling alpha / r) as a GGUF
// LoRA adapter: llama.cpp's W + (alpha / rank) B A from the file's tensors = our merge.
static void test_lora_split(void) {
    const char* sets[] = { "qv", "rslora", "layers" };
    for (int s = 0; s < 3; s++) {
        char dir[256], path[1200];
        snprintf(dir, sizeof(dir), "test/ref/lora_tiny/%s", sets[s]);
        HostModel base, merged;
        convert_load(&base, "test/ref/gpt2_tiny", 0);
        convert_load(&merged, "test/ref/gpt2_tiny", 0);
        convert_merge_adapter(&merged, dir);
        LoraModel* lm = peft_load_adapter(dir, &base.cfg);
        tmp_path(path, sizeof(path), "split.gguf");
        gguf_save_lora(path, lm, GGML_TYPE_F32, NULL);
        lora_free(lm);
        GgufFile f;
        gguf_open(&f, path);
        double alpha;
        TEST_CHECK(gguf_kv_num(&f, "adapter.lora.alpha", &alpha) == 0 && !strcmp(gguf_kv_str(&f, "general.type"), "adapter") &&
                   !strcmp(gguf_kv_str(&f, "adapter.type"), "lora"), "%s: adapter metadata", sets[s]);
        double worst = 0.0;
        for (int64_t i = 0; i < f.n_tensors; i++) {
            const GgufTensor* ta = &f.tensors[i];
            const size_t nl = strlen(ta->name);
            if (nl < 7 || strcmp(ta->name + nl - 7, ".lora_a")) continue;
            char nb[96], wname[80];
            snprintf(wname, sizeof(wname), "%.*s", (int)(nl - 7), ta->name);
            snprintf(nb, sizeof(nb), "%s.lora_b", wname);
            const GgufTensor* tb = gguf_tensor(&f, nb);
            const int rank = (int)ta->ne[1], in = (int)ta->ne[0], out = (int)tb->ne[1];
            float* A = (float*)mallocCheck(ta->numel * sizeof(float));
            float* B = (float*)mallocCheck(tb->numel * sizeof(float));
            gguf_read_f32(&f, ta, A); gguf_read_f32(&f, tb, B);
            int layer = -1, id = -1;
            for (int p = 0; p < NUM_PARAM_TENSORS && id < 0; p++)
                for (int l = 0; l < base.cfg.num_layers; l++) {
                    char n[64]; gguf_tensor_name(n, sizeof(n), (ParamId)p, l);
                    if (!strcmp(n, wname)) { id = p; layer = l; break; }
                }
            TEST_CHECK(id >= 0 && (int)tb->ne[0] == rank, "%s: %s names a base weight, ranks agree", sets[s], ta->name);
            const float* W0 = base.params + params_layer_offset(&base.pt, (ParamId)id, layer);
            const float* W1 = merged.params + params_layer_offset(&merged.pt, (ParamId)id, layer);
            const double sc = alpha / rank;
            for (int o = 0; o < out; o++)
                for (int c = 0; c < in; c++) {
                    double d = 0.0;
                    for (int r = 0; r < rank; r++) d += (double)B[(size_t)o * rank + r] * A[(size_t)r * in + c];
                    const double e = fabs(W0[(size_t)o * in + c] + sc * d - W1[(size_t)o * in + c]);
                    worst = e > worst ? e : worst;
                }
            free(A); free(B);
        }
        TEST_CHECK(worst < 1e-6, "%s: W + alpha / rank B A from the GGUF adapter differs from the merge by %g", sets[s], worst);
        if (worst < 1e-6) printf("ok   %s adapter as GGUF LoRA (alpha %g): W + alpha / rank B A = our merge (max diff %.2g)\n", sets[s], alpha, worst);
        gguf_close(&f);
        convert_free(&base); convert_free(&merged);
    }
}

// ---- hostile files: a byte builder, a valid file, and one mutation per rule

typedef struct { uint8_t b[4096]; size_t n; } Bytes;
static void put(Bytes* o, const void* p, size_t n) { memcpy(o->b + o->n, p, n); o->n += n; }
static void p32(Bytes* o, uint32_t v) { put(o, &v, 4); }
static void p64(Bytes* o, uint64_t v) { put(o, &v, 8); }
static void pstr(Bytes* o, const char* s) { p64(o, strlen(s)); put(o, s, strlen(s)); }

// Mutations of the valid file (0 = none).
enum { M_NONE, M_MAGIC, M_VERSION, M_NKV_HUGE, M_STR_HUGE, M_VTYPE, M_NESTED, M_ARR_HUGE, M_DUPKEY, M_NDIM, M_DIM0,
       M_GTYPE, M_MISALIGN, M_OVERLAP, M_DUPNAME, M_PAST_END, M_Q8_ROWS, M_ALIGN, M_NUL, M_LONGNAME, M_NT_HUGE, M_OVERFLOW };

// A valid file: 3 metadata entries, tensors "a" (F32 [4]) and "b" (F32 [2, 4] or as mutated).
static void build(Bytes* o, int m) {
    o->n = 0;
    put(o, m == M_MAGIC ? "GGUX" : "GGUF", 4);
    p32(o, m == M_VERSION ? 1 : 3);
    p64(o, m == M_NT_HUGE ? (1ull << 60) : 2);
    p64(o, m == M_NKV_HUGE ? (1ull << 40) : 3);
    pstr(o, "general.architecture"); p32(o, GGUF_STRING);
    if (m == M_STR_HUGE) p64(o, 1ull << 50); else pstr(o, m == M_NUL ? "gp" : "gpt2");
    if (m == M_NUL) { o->b[o->n - 1] = 0; }
    pstr(o, m == M_DUPKEY ? "general.architecture" : "general.alignment");
    p32(o, m == M_VTYPE ? 13 : GGUF_U32); p32(o, m == M_ALIGN ? 24 : 32);
    pstr(o, "x.list"); p32(o, GGUF_ARRAY); p32(o, m == M_NESTED ? GGUF_ARRAY : GGUF_I32); p64(o, m == M_ARR_HUGE ? (1ull << 40) : 2);
    p32(o, 7); p32(o, 8);
    pstr(o, "a"); p32(o, m == M_NDIM ? 5 : 1); p64(o, m == M_DIM0 ? 0 : 4);
    if (m == M_NDIM) for (int i = 0; i < 4; i++) p64(o, 1);
    p32(o, m == M_GTYPE ? 2 : GGML_TYPE_F32); p64(o, m == M_MISALIGN ? 4 : 0);
    char longname[80]; memset(longname, 'n', 70); longname[70] = 0;
    pstr(o, m == M_DUPNAME ? "a" : m == M_LONGNAME ? longname : "b"); p32(o, 2);
    p64(o, m == M_Q8_ROWS ? 16 : 4); p64(o, m == M_OVERFLOW ? (1ull << 62) : 2);
    p32(o, m == M_Q8_ROWS ? GGML_TYPE_Q8_0 : GGML_TYPE_F32); p64(o, m == M_OVERLAP ? 0 : m == M_PAST_END ? 64 : 32);
    while (o->n % 32) o->b[o->n++] = 0;
    for (int i = 0; i < 64; i++) o->b[o->n++] = (uint8_t)i; // a: 16 bytes, pad to 32, b: 32 bytes
}

static int open_bytes(const char* name, const Bytes* o, GgufFile* f, char* err, size_t cap) {
    char path[1200];
    tmp_path(path, sizeof(path), name);
    FILE* fp = fopen(path, "wb");
    fwrite(o->b, 1, o->n, fp);
    fclose(fp);
    return gguf_try_open(f, path, err, cap);
}

static void expect_bad(const char* name, int m, const char* rule) {
    Bytes o; GgufFile f; char err[1024];
    build(&o, m);
    const int rc = open_bytes(name, &o, &f, err, sizeof(err));
    TEST_CHECK(rc == -1, "%s: accepted", name);
    if (rc == 0) { gguf_close(&f); return; }
    TEST_CHECK(strstr(err, name) != NULL && strstr(err, rule) != NULL, "%s: message '%s' does not name the file and '%s'", name, err, rule);
    if (strstr(err, rule)) printf("ok   rejects %-12s %s\n", name, strstr(err, "': ") + 3);
}

static void test_hostile(void) {
    Bytes o; GgufFile f; char err[1024];
    build(&o, M_NONE);
    TEST_CHECK(open_bytes("valid", &o, &f, err, sizeof(err)) == 0, "the valid file opens: %s", err);
    if (!err[0]) {
        int64_t al;
        TEST_CHECK(f.n_kv == 3 && f.n_tensors == 2 && gguf_kv_int(&f, "general.alignment", &al) == 0 && al == 32 &&
                   !strcmp(gguf_kv_str(&f, "general.architecture"), "gpt2") && gguf_kv(&f, "x.list")->n == 2, "valid file's contents");
        float b[8];
        gguf_read_f32(&f, gguf_tensor(&f, "b"), b);
        uint8_t want[32]; for (int i = 0; i < 32; i++) want[i] = (uint8_t)(32 + i);
        TEST_CHECK(memcmp(b, want, 32) == 0, "tensor b reads its bytes");
        gguf_close(&f);
    }
    expect_bad("magic", M_MAGIC, "not a GGUF file");
    expect_bad("version", M_VERSION, "GGUF version 1");
    expect_bad("nkv_huge", M_NKV_HUGE, "cannot fit in the file");
    expect_bad("nt_huge", M_NT_HUGE, "cannot fit in the file");
    expect_bad("str_huge", M_STR_HUGE, "claims 1125899906842624 bytes");
    expect_bad("vtype", M_VTYPE, "unknown value type 13");
    expect_bad("nested", M_NESTED, "arrays of arrays");
    expect_bad("arr_huge", M_ARR_HUGE, "more than the");
    expect_bad("dupkey", M_DUPKEY, "appears twice");
    expect_bad("ndim", M_NDIM, "5 dimensions");
    expect_bad("dim0", M_DIM0, "must be >= 1");
    expect_bad("gtype", M_GTYPE, "ggml type 2");
    expect_bad("misalign", M_MISALIGN, "not a multiple of the alignment");
    expect_bad("overlap", M_OVERLAP, "overlap");
    expect_bad("dupname", M_DUPNAME, "tensor 'a' appears twice");
    expect_bad("past_end", M_PAST_END, "truncated: tensor 'b'");
    expect_bad("q8_rows", M_Q8_ROWS, "whole number of Q8_0 blocks");
    expect_bad("align", M_ALIGN, "power of two");
    expect_bad("nul", M_NUL, "NUL byte");
    expect_bad("longname", M_LONGNAME, "the limit is 63");
    expect_bad("overflow", M_OVERFLOW, "overflows");
    // every truncation of the valid file is refused (never read past the end, never accepted)
    build(&o, M_NONE);
    int refused = 0;
    const size_t full = o.n;
    for (size_t cut = 0; cut < full; cut++) {
        o.n = cut;
        if (open_bytes("cut", &o, &f, err, sizeof(err)) == 0) gguf_close(&f);
        else refused++;
    }
    TEST_CHECK(refused == (int)full, "%d of %zu truncations refused", refused, full);
    if (refused == (int)full) printf("ok   all %zu truncations of a valid file refused\n", full);
}

int main(void) {
    const char* build_dir = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(TMP, sizeof(TMP), "%s/test-tmp/test_gguf", build_dir);
    mkdir_p(TMP);
    ops_init(0);
    StFile ref;
    st_open(&ref, REFDIR "/llama_ref.safetensors");
    test_q8_0(&ref);
    test_hostile();
    test_models(&ref);
    test_lora_split();
    st_close(&ref);
    return test_finish("test_gguf");
}
