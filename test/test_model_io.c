// Model loading / saving against files written by PyTorch / transformers / safetensors
// (dev/gen_hf_formats.py, test/ref/hf_formats/):
// - every HF variant (save_pretrained fp32, the Hub's unprefixed layout with mask buffers, bf16,
//   sharded fp16) loads bit-exactly equal to the llm.c checkpoint the generator wrote in Python;
// - our llm.c writer reproduces the Python-written v3 and v5 files byte for byte, and both load back;
// - model_save_hf writes the very tensors save_pretrained wrote (byte-equal), and reloads exactly
//   (the output dir is left in $BUILD/test-tmp/test_model_io/hf_saved for dev/check_hf_saved.py);
// - every class of bad input gets its message (fatal paths run in a child process);
// - GPT-2 initialization statistics and determinism.
#include "test.h"
#include "test_child.h"
#include "model/model_io.h"
#include "base/safetensors.h"
#include "base/fileio.h"
#include "base/rand.h"
#include <stdint.h>
#include <unistd.h>
#include <omp.h>

#define REFDIR "test/ref/hf_formats"
static char TMP[1024];

static void tpath(char* out, size_t cap, const char* name) { snprintf(out, cap, "%s/%s", TMP, name); }

// Copies the file src to dir/name.
static void copy_into(const char* src, const char* dir, const char* name) {
    char dst[2048];
    snprintf(dst, sizeof(dst), "%s/%s", dir, name);
    size_t n;
    char* buf = read_file_all(src, &n);
    atomic_write_file(dst, buf, n);
    free(buf);
}

static void write_text(const char* path, const char* text) { atomic_write_file(path, text, strlen(text)); }

static int cfg_equal(const GPT2Config* a, const GPT2Config* b) {
    return a->max_seq_len == b->max_seq_len && a->vocab_size == b->vocab_size && a->padded_vocab_size == b->padded_vocab_size &&
           a->num_layers == b->num_layers && a->num_heads == b->num_heads && a->channels == b->channels;
}

static int files_equal(const char* a, const char* b) {
    size_t na, nb;
    char* x = read_file_all(a, &na);
    char* y = read_file_all(b, &nb);
    int eq = na == nb && memcmp(x, y, na) == 0;
    free(x); free(y);
    return eq;
}

// Loads path and checks it equals the reference (config and every parameter bit).
static void expect_same_model(const char* what, const char* path, const GPT2Config* rcfg, const float* ref, size_t total) {
    GPT2Config cfg; ParamTable pt; float* p = NULL;
    model_load(path, &cfg, &pt, &p);
    TEST_CHECK(cfg_equal(&cfg, rcfg), "%s: config L%d C%d NH%d V%d Vp%d T%d differs", what, cfg.num_layers, cfg.channels,
               cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len);
    TEST_CHECK(pt.total == total, "%s: %zu params, want %zu", what, pt.total, total);
    if (pt.total == total) {
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < total; i++) if (memcmp(&p[i], &ref[i], 4) != 0) { if (!bad) first = i; bad++; }
        TEST_CHECK(bad == 0, "%s: %zu of %zu parameters differ (first at %zu: %g vs %g)", what, bad, total, first, p[first], ref[first]);
        if (!bad) printf("ok   %s: %zu parameters bit-exact\n", what, total);
    }
    free(p);
}

// ---- children for the fatal paths (arg = path)
static void child_load(void* arg) {
    GPT2Config cfg; ParamTable pt; float* p = NULL;
    model_load((const char*)arg, &cfg, &pt, &p);
    free(p);
}

static void expect_load_fails(const char* what, const char* path, const char* w1, const char* w2) {
    const char* want[] = { "error: ", w1, w2, NULL };
    if (!w2) want[2] = NULL;
    TEST_CHECK(test_expect_fatal(what, child_load, (void*)path, want), "%s: wrong failure", what);
}

// Copies the reference HF model's safetensors into dir with a custom config.json.
static void hf_dir_with_config(const char* name, const char* config_json, char* dir_out, size_t cap) {
    tpath(dir_out, cap, name);
    mkdir_p(dir_out);
    char p[2048];
    copy_into(REFDIR "/hf_tiny/model.safetensors", dir_out, "model.safetensors");
    if (config_json) { snprintf(p, sizeof(p), "%s/config.json", dir_out); write_text(p, config_json); }
}

// Rewrites the reference safetensors with extra tensors appended (lm_head variants etc).
static void hf_file_plus(const char* out_path, const char* extra_name, int extra_kind) {
    StFile f;
    st_open(&f, REFDIR "/hf_tiny/model.safetensors");
    StWriter w;
    st_writer_init(&w);
    void** bufs = (void**)calloc((size_t)f.n_tensors + 1, sizeof(void*));
    for (int i = 0; i < f.n_tensors; i++) {
        StTensor* t = &f.tensors[i];
        bufs[i] = malloc((size_t)(t->end - t->begin) + 4);
        st_read_raw(&f, t, bufs[i]);
        st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, bufs[i]);
    }
    const StTensor* wte = st_find(&f, "transformer.wte.weight");
    float* extra = (float*)malloc((size_t)(wte->end - wte->begin));
    st_read_f32(&f, wte, extra);
    if (extra_kind == 1) extra[5] += 1.0f; // an untied head: differs from wte in one value
    if (extra_kind == 2) st_writer_add(&w, extra_name, ST_F32, 1, wte->shape, extra); // any odd tensor
    else st_writer_add(&w, extra_name, ST_F32, 2, wte->shape, extra);
    st_writer_save(&w, out_path);
    st_writer_free(&w);
    for (int i = 0; i < f.n_tensors; i++) free(bufs[i]);
    free(bufs); free(extra);
    st_close(&f);
}

static const char* CFG_FMT =
    "{\"model_type\": \"%s\", \"n_embd\": 32, \"n_layer\": %d, \"n_head\": 4, \"n_positions\": 64,"
    " \"vocab_size\": %d, \"activation_function\": \"%s\", \"layer_norm_epsilon\": 1e-05}";

// The llm.c file `name` holding bin[0, n) must fail to load, saying w1 (and w2).
static void expect_bin_fails(const char* what, const char* name, const void* bin, size_t n, const char* w1, const char* w2) {
    char p[2048];
    tpath(p, sizeof(p), name);
    atomic_write_file(p, bin, n);
    expect_load_fails(what, p, w1, w2);
}

// The HF directory `name` (the reference tensors, a config.json of model_type, n_layer,
// vocab_size and activation_function) must fail to load, saying w1 (and w2).
static void expect_hf_fails(const char* what, const char* name, const char* type, int n_layer, int vocab,
                            const char* act, const char* w1, const char* w2) {
    char cfg[1024], d[1300];
    snprintf(cfg, sizeof(cfg), CFG_FMT, type, n_layer, vocab, act);
    hf_dir_with_config(name, cfg, d, sizeof(d));
    expect_load_fails(what, d, w1, w2);
}

static void test_bad_inputs(const float* ref, size_t total) {
    char p[2048], d[1300], cfg[1024];
    // --- llm.c .bin
    size_t n;
    char* bin = read_file_all(REFDIR "/expect_f32.bin", &n);
    expect_bin_fails("truncated .bin", "truncated.bin", bin, n - 4, "truncated", "1024 = 127488 bytes");
    tpath(p, sizeof(p), "trailing.bin");
    { char* b2 = (char*)malloc(n + 3); memcpy(b2, bin, n); memset(b2 + n, 0, 3); atomic_write_file(p, b2, n + 3); free(b2); }
    expect_load_fails("trailing bytes .bin", p, "3 trailing bytes", NULL);
    expect_bin_fails("short .bin", "header_only.bin", bin, 100, "shorter than the 1024-byte llm.c header", NULL);
    int32_t* h = (int32_t*)bin;
    h[0] = 12345;
    expect_bin_fails("wrong magic", "magic.bin", bin, n, "bad magic number 12345 (expected 20240326)", NULL);
    h[0] = 20240520;
    expect_bin_fails("token shard as model", "shard.bin", bin, n, "token shard", NULL);
    h[0] = 20240326; h[1] = 4;
    expect_bin_fails("wrong version", "version.bin", bin, n, "unsupported llm.c checkpoint version 4", NULL);
    h[1] = 3; h[7] = 100; // padded vocab not a multiple of 128
    expect_bin_fails("bad config in header", "badcfg.bin", bin, n, "padded_vocab_size = 100", NULL);
    free(bin);
    tpath(p, sizeof(p), "nonexistent.bin");
    expect_load_fails("missing file", p, "does not exist", NULL);

    // --- Hugging Face
    expect_hf_fails("missing tensor", "hf_missing", "gpt2", 3, 100, "gelu_new",
                    "missing tensor 'transformer.h.2.ln_1.weight'", NULL);
    expect_hf_fails("unexpected tensor", "hf_extra_layer", "gpt2", 1, 100, "gelu_new",
                    "unexpected tensor 'transformer.h.1.", NULL);
    expect_hf_fails("shape mismatch", "hf_shape", "gpt2", 2, 101, "gelu_new",
                    "shape mismatch with config: transformer.wte.weight is [100,32], expected [101,32]", NULL);
    expect_hf_fails("model_type llama", "hf_llama", "llama", 2, 100, "gelu_new", "model_type is \"llama\"", "only \"gpt2\"");
    expect_hf_fails("activation relu", "hf_relu", "gpt2", 2, 100, "relu", "activation_function is relu", NULL);
    hf_dir_with_config("hf_badjson", "{\"n_embd\": 32,", d, sizeof(d));
    expect_load_fails("broken config.json", d, "config.json': invalid JSON", NULL);
    hf_dir_with_config("hf_noheads", "{\"n_embd\": 32, \"n_layer\": 2, \"n_positions\": 64, \"vocab_size\": 100}", d, sizeof(d));
    expect_load_fails("config without n_head", d, "missing \"n_head\"", NULL);
    hf_dir_with_config("hf_nocfg", NULL, d, sizeof(d));
    expect_load_fails("no config, n_embd 32", d, "n_head cannot be inferred (n_embd 32 is not a multiple of 64)", NULL);

    // lm_head: tied copy accepted, a different one refused; stray tensors refused
    snprintf(cfg, sizeof(cfg), CFG_FMT, "gpt2", 2, 100, "gelu_new");
    hf_dir_with_config("hf_lmhead_tied", cfg, d, sizeof(d));
    snprintf(p, sizeof(p), "%s/model.safetensors", d);
    hf_file_plus(p, "lm_head.weight", 0);
    GPT2Config rcfg; ParamTable rpt; float* tmp = NULL;
    model_load(REFDIR "/expect_f32.bin", &rcfg, &rpt, &tmp);
    expect_same_model("HF file with a tied lm_head.weight", d, &rcfg, ref, total);
    free(tmp);
    hf_dir_with_config("hf_lmhead_untied", cfg, d, sizeof(d));
    snprintf(p, sizeof(p), "%s/model.safetensors", d);
    hf_file_plus(p, "lm_head.weight", 1);
    expect_load_fails("untied lm_head", d, "lm_head.weight differs from wte.weight", NULL);
    hf_dir_with_config("hf_stray", cfg, d, sizeof(d));
    snprintf(p, sizeof(p), "%s/model.safetensors", d);
    hf_file_plus(p, "transformer.h.0.attn.rotary", 0);
    expect_load_fails("stray tensor", d, "unexpected tensor 'transformer.h.0.attn.rotary'", NULL);
    hf_dir_with_config("hf_mixed_prefix", cfg, d, sizeof(d));
    snprintf(p, sizeof(p), "%s/model.safetensors", d);
    hf_file_plus(p, "wte.weight", 0);
    expect_load_fails("mixed key prefixes", d, "unexpected tensor 'wte.weight'", NULL);

    // a safetensors rule violation surfaces with the safetensors message
    tpath(p, sizeof(p), "garbage.safetensors");
    write_text(p, "this is not a model file at all");
    expect_load_fails("garbage file", p, "exceeds the 100000000-byte limit", NULL);
    tpath(d, sizeof(d), "empty_dir");
    mkdir_p(d);
    expect_load_fails("directory without weights", d, "neither model.safetensors nor model.safetensors.index.json", NULL);
    // sharded: a shard missing
    tpath(d, sizeof(d), "sharded_missing");
    mkdir_p(d);
    copy_into(REFDIR "/hf_f16_sharded/model.safetensors.index.json", d, "model.safetensors.index.json");
    copy_into(REFDIR "/hf_f16_sharded/model-00001-of-00002.safetensors", d, "model-00001-of-00002.safetensors");
    expect_load_fails("missing shard", d, "model-00002-of-00002.safetensors' listed in the index does not exist", NULL);
}

static void test_init(void) {
    GPT2Config cfg = { 128, 1000, 1024, 2, 4, 64 };
    ParamTable pt;
    params_build(&pt, &cfg);
    float* a = (float*)malloc(pt.total * sizeof(float));
    float* b = (float*)malloc(pt.total * sizeof(float));
    int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    model_init_gpt2(&pt, a, 42);
    omp_set_num_threads(2);
    model_init_gpt2(&pt, b, 42);
    omp_set_num_threads(saved_threads);
    TEST_CHECK(memcmp(a, b, pt.total * sizeof(float)) == 0, "init differs between 1 and 2 threads");
    // the documented definition (llmc/base/rand.h): element i of tensor id is std * rand_normal(seed, id, i)
    {
        size_t idx[] = { 0, 1, 2, 777, 8191 };
        int bad = 0;
        for (size_t k = 0; k < sizeof(idx) / sizeof(idx[0]); k++) {
            if (a[pt.t[PT_QKVW].offset + idx[k]] != (float)(0.02 * rand_normal(42, PT_QKVW, idx[k]))) bad++;
            if (a[pt.t[PT_FCPROJW].offset + idx[k]] != (float)(0.01 * rand_normal(42, PT_FCPROJW, idx[k]))) bad++;
        }
        TEST_CHECK(bad == 0, "init does not follow the documented rand_normal definition (%d mismatches)", bad);
    }
    model_init_gpt2(&pt, b, 43);
    size_t same = 0;
    for (size_t i = 0; i < pt.total; i++) same += a[i] == b[i] && a[i] != 0.0f && a[i] != 1.0f;
    TEST_CHECK(same < 10, "seeds 42 and 43 give %zu identical random values", same);
    double want_std[NUM_PARAM_TENSORS];
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) want_std[id] = pt.t[id].ndim == 2 ? 0.02 : 0.0;
    want_std[PT_ATTPROJW] = want_std[PT_FCPROJW] = 0.02 / sqrt(2.0 * cfg.num_layers);
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &pt.t[id];
        const float* x = a + p->offset;
        size_t nn = p->numel;
        if (id == PT_WTE) {
            size_t real = (size_t)cfg.vocab_size * (size_t)cfg.channels, nz = 0;
            for (size_t i = real; i < nn; i++) nz += x[i] != 0.0f;
            TEST_CHECK(nz == 0, "wte padding rows have %zu non-zero values", nz);
            nn = real;
        }
        if (p->ndim == 1) {
            float v = (id == PT_LN1W || id == PT_LN2W || id == PT_LNFW) ? 1.0f : 0.0f;
            size_t bad = 0;
            for (size_t i = 0; i < nn; i++) bad += x[i] != v;
            TEST_CHECK(bad == 0, "%s: %zu values are not %g", p->name, bad, v);
            continue;
        }
        double s = 0, s2 = 0; size_t in1 = 0;
        for (size_t i = 0; i < nn; i++) { s += x[i]; s2 += (double)x[i] * x[i]; in1 += fabs(x[i]) <= want_std[id]; }
        double mean = s / nn, std = sqrt(s2 / nn - mean * mean), frac = (double)in1 / nn;
        // standard errors: mean sigma/sqrt(n), std sigma/sqrt(2n); 5 sigma bounds, n >= 8192
        TEST_CHECK(fabs(mean) < 5 * want_std[id] / sqrt((double)nn), "%s: mean %g", p->name, mean);
        TEST_CHECK(fabs(std / want_std[id] - 1) < 5 / sqrt(2.0 * nn), "%s: std %g, want %g", p->name, std, want_std[id]);
        TEST_CHECK(fabs(frac - 0.682689) < 5 * sqrt(0.682689 * 0.317311 / nn), "%s: %.4f within 1 sigma, want 0.6827", p->name, frac);
        printf("ok   init %-8s n=%-7zu mean %+.2e std %.5f (want %.5f) within 1 sigma %.4f\n", p->name, nn, mean, std, want_std[id], frac);
    }
    free(a); free(b);
}

int main(void) {
    const char* build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(TMP, sizeof(TMP), "%s/test-tmp/test_model_io", build);
    mkdir_p(TMP);
    char p[2048], d[1300];

    // reference: the llm.c v3 file written by the Python generator from the transformers model
    GPT2Config rcfg; ParamTable rpt; float* ref = NULL;
    model_load(REFDIR "/expect_f32.bin", &rcfg, &rpt, &ref);
    GPT2Config want = { 64, 100, 128, 2, 4, 32 };
    TEST_CHECK(cfg_equal(&rcfg, &want), "expect_f32.bin config");
    size_t total = rpt.total;

    // HF layouts -> same parameters
    expect_same_model("hf_tiny dir (save_pretrained, fp32)", REFDIR "/hf_tiny", &rcfg, ref, total);
    expect_same_model("hf_tiny/model.safetensors file", REFDIR "/hf_tiny/model.safetensors", &rcfg, ref, total);
    expect_same_model("hf_hub (no prefix, attn.bias, n_ctx)", REFDIR "/hf_hub", &rcfg, ref, total);
    {
        GPT2Config c16; ParamTable p16; float* e16 = NULL;
        model_load(REFDIR "/expect_f16.bin", &c16, &p16, &e16);
        expect_same_model("hf_f16_sharded dir", REFDIR "/hf_f16_sharded", &rcfg, e16, total);
        expect_same_model("hf_f16_sharded index file", REFDIR "/hf_f16_sharded/model.safetensors.index.json", &rcfg, e16, total);
        free(e16);
        GPT2Config cb; ParamTable pb; float* eb = NULL;
        model_load(REFDIR "/expect_bf16.bin", &cb, &pb, &eb);
        expect_same_model("hf_bf16 dir vs python-written v5", REFDIR "/hf_bf16", &rcfg, eb, total);
        // our v5 writer rounds exactly like torch: the bytes equal the python-written v5 file
        tpath(p, sizeof(p), "ours_v5.bin");
        model_save_llmc(p, &rpt, ref, 1);
        TEST_CHECK(files_equal(p, REFDIR "/expect_bf16.bin"), "our v5 file differs from the python-written one");
        expect_same_model("our v5 reloaded", p, &rcfg, eb, total);
        free(eb);
    }
    // a safetensors file under a .bin name is still recognized (config.json next to it)
    tpath(d, sizeof(d), "named_bin");
    mkdir_p(d);
    copy_into(REFDIR "/hf_tiny/config.json", d, "config.json");
    copy_into(REFDIR "/hf_tiny/model.safetensors", d, "weights.bin");
    snprintf(p, sizeof(p), "%s/weights.bin", d);
    expect_same_model("safetensors file named weights.bin", p, &rcfg, ref, total);
    // v3: our writer reproduces the python-written file, and round-trips
    tpath(p, sizeof(p), "ours_v3.bin");
    model_save_llmc(p, &rpt, ref, 0);
    TEST_CHECK(files_equal(p, REFDIR "/expect_f32.bin"), "our v3 file differs from the python-written one");
    expect_same_model("our v3 reloaded", p, &rcfg, ref, total);

    // model_save_hf: tensors byte-equal to save_pretrained's, and an exact reload
    tpath(d, sizeof(d), "hf_saved");
    model_save_hf(d, &rpt, ref);
    expect_same_model("model_save_hf reloaded", d, &rcfg, ref, total);
    {
        StFile a, b;
        snprintf(p, sizeof(p), "%s/model.safetensors", d);
        st_open(&a, p);
        st_open(&b, REFDIR "/hf_tiny/model.safetensors");
        TEST_CHECK(a.n_tensors == b.n_tensors, "model_save_hf wrote %d tensors, save_pretrained %d", a.n_tensors, b.n_tensors);
        TEST_CHECK(st_meta(&a, "format") && strcmp(st_meta(&a, "format"), "pt") == 0, "format pt");
        int same = 0;
        for (int i = 0; i < b.n_tensors; i++) {
            const StTensor* tb = &b.tensors[i];
            const StTensor* ta = st_find(&a, tb->name);
            TEST_CHECK(ta != NULL, "model_save_hf lacks '%s'", tb->name);
            if (!ta) continue;
            int ok = ta->dtype == tb->dtype && ta->ndim == tb->ndim && ta->numel == tb->numel;
            for (int k = 0; ok && k < ta->ndim; k++) ok = ta->shape[k] == tb->shape[k];
            if (ok) {
                size_t nb = (size_t)(tb->end - tb->begin);
                char* x = (char*)malloc(nb + 1); char* y = (char*)malloc(nb + 1);
                st_read_raw(&a, ta, x); st_read_raw(&b, tb, y);
                ok = memcmp(x, y, nb) == 0;
                free(x); free(y);
            }
            TEST_CHECK(ok, "tensor '%s' differs from save_pretrained's", tb->name);
            same += ok;
        }
        printf("ok   model_save_hf: %d tensors byte-equal to save_pretrained's\n", same);
        st_close(&a); st_close(&b);
        GPT2Config c2;
        snprintf(p, sizeof(p), "%s/config.json", d);
        model_read_hf_config(p, &c2);
        TEST_CHECK(cfg_equal(&c2, &rcfg), "config.json written by model_save_hf reads back");
    }

    // no config.json: inferred from the shapes (n_head = C / 64), with a note
    {
        GPT2Config c = { 32, 70, 128, 3, 1, 64 };
        ParamTable pt;
        params_build(&pt, &c);
        float* w = (float*)malloc(pt.total * sizeof(float));
        model_init_gpt2(&pt, w, 7);
        tpath(d, sizeof(d), "hf_inferred");
        model_save_hf(d, &pt, w);
        snprintf(p, sizeof(p), "%s/config.json", d);
        unlink(p);
        expect_same_model("safetensors without config.json (inferred)", d, &c, w, pt.total);
        free(w);
    }

    test_bad_inputs(ref, total);
    test_init();
    free(ref);
    return test_finish("test_model_io");
}
