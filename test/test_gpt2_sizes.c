// Every GPT-2 size's shape: the d12 / d24 / d36 / d48 descriptors are OpenAI's four models as
// their Hugging Face configs give them; models with the head configurations of each (n_embd 768 /
// 1024 / 1280 / 1600, n_head 12 / 16 / 20 / 25) load from the Hugging Face layout and compute the
// logits transformers computes (test/ref/gpt2_sizes, dev/gen_sizes_ref.py: one layer, 96 tokens,
// weights from a formula exact in integer arithmetic, so the test writes the same model here
// instead of committing it); the config checks refuse what the kernels do not take, naming the
// file.
#include <string.h>
#include <sys/stat.h>
#include "model/model.h"
#include "model/config.h"
#include "model/params.h"
#include "model/model_io.h"
#include "base/safetensors.h"
#include "base/fileio.h"
#include "ops/ops.h"
#include "test.h"
#include "test_child.h"
#include "ref.h"

#define REFDIR "test/ref/gpt2_sizes"
static char TMP[1024];

// The Hugging Face configs of gpt2, gpt2-medium, gpt2-large, gpt2-xl (config.json on the Hub).
static void check_descriptors(void) {
    static const struct { const char* desc; const char* hf; int L, C, NH; } sizes[] = {
        {"d12", "gpt2", 12, 768, 12}, {"d24", "gpt2-medium", 24, 1024, 16}, {"d36", "gpt2-large", 36, 1280, 20}, {"d48", "gpt2-xl", 48, 1600, 25} };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        GPT2Config c;
        TEST_CHECK(gpt2_config_from_descriptor(&c, sizes[i].desc) == 0, "%s", sizes[i].desc);
        const char* name = gpt2_config_hf_name(&c);
        TEST_CHECK(c.num_layers == sizes[i].L && c.channels == sizes[i].C && c.num_heads == sizes[i].NH && c.vocab_size == 50257 &&
                   c.max_seq_len == 1024 && c.padded_vocab_size == 50304 && name && !strcmp(name, sizes[i].hf),
                   "%s: L %d C %d NH %d V %d T %d (%s), want %s's", sizes[i].desc, c.num_layers, c.channels, c.num_heads, c.vocab_size,
                   c.max_seq_len, name ? name : "no name", sizes[i].hf);
        ParamTable pt;
        params_build(&pt, &c);
        printf("ok   %s = %s: n_layer %d, n_embd %d, n_head %d (head size %d), %.1fM parameters\n", sizes[i].desc, sizes[i].hf,
               c.num_layers, c.channels, c.num_heads, c.channels / c.num_heads, (double)params_count_unpadded(&pt) / 1e6);
    }
}

// ----------------------------------------------------------------------------
// a one-layer model of width C in the Hugging Face layout, weights from dev/gen_sizes_ref.py's formula

typedef struct { int64_t t; int ln; } Fill;
static void fill(void* ctx, void* dst, uint64_t first, uint64_t count) {
    const Fill* f = (const Fill*)ctx;
    float* d = (float*)dst;
    for (uint64_t i = 0; i < count; i++) {
        const int64_t j = (int64_t)(first + i), k = (j * 7919 + f->t * 104729) % 2003 - 1001;
        d[i] = (float)((f->ln ? 1.0 : 0.0) + (double)k / 1001.0 * 0.02);
    }
}

static void write_model(const char* dir, int C, int NH, int V, int npos) {
    mkdir_p(dir);
    char path[1300];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE* f = fopen(path, "w");
    fprintf(f, "{\"model_type\": \"gpt2\", \"n_embd\": %d, \"n_layer\": 1, \"n_head\": %d, \"n_positions\": %d, \"vocab_size\": %d, "
               "\"activation_function\": \"gelu_new\", \"layer_norm_epsilon\": 1e-05}\n", C, NH, npos, V);
    fclose(f);
    GPT2Config cfg = { npos, V, gpt2_pad_vocab(V), 1, NH, C };
    ParamTable pt;
    params_build(&pt, &cfg);
    StWriter w;
    st_writer_init(&w);
    Fill ctx[NUM_PARAM_TENSORS];
    char keys[NUM_PARAM_TENSORS][128];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const ParamInfo* p = &pt.t[i];
        params_hf_key(keys[i], sizeof(keys[i]), (ParamId)i, 0, "transformer.");
        ctx[i].t = 1000 * i;
        ctx[i].ln = p->ndim == 1 && strstr(p->hf_name, "ln_") && strstr(p->hf_name, ".weight");
        int64_t shape[2] = { i == PT_WTE ? V : (int64_t)p->rows, (int64_t)p->cols };
        if (p->hf_transposed) { shape[0] = (int64_t)p->cols; shape[1] = (int64_t)p->rows; } // Conv1D: [in, out]
        st_writer_add_fn(&w, keys[i], ST_F32, p->ndim, shape, fill, &ctx[i]);
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    st_writer_save(&w, path);
    st_writer_free(&w);
}

static void check_size(StFile* ref, int C, int NH) {
    char dir[1200], name[64];
    snprintf(dir, sizeof(dir), "%s/hf_%d", TMP, C);
    write_model(dir, C, NH, 96, 32);
    Model m;
    ModelSpec s;
    memset(&s, 0, sizeof(s));
    s.path = dir; s.B = 1; s.T = 8;
    model_assemble(&m, &s);
    size_t n;
    const StTensor* ti = st_find(ref, "input_ids");
    int tok[8];
    TEST_CHECK(ti && ti->numel == 8, "input_ids");
    st_read_i32(ref, ti, tok);
    long valid;
    gpt2_forward(&m.gpt, tok, NULL, NULL, 1, 8, 0.0f, &valid);
    const int Vp = m.gpt.cfg.padded_vocab_size;
    float* all = (float*)mallocCheck((size_t)8 * Vp * sizeof(float));
    ops_download_f32(all, m.gpt.acts.logits, (size_t)8 * Vp);
    float* got = (float*)mallocCheck((size_t)8 * 96 * sizeof(float));
    for (int t = 0; t < 8; t++) memcpy(got + t * 96, all + (size_t)t * Vp, 96 * sizeof(float));
    snprintf(name, sizeof(name), "logits_%d", C);
    float* want = ref_read(ref, name, &n);
    char what[160];
    snprintf(what, sizeof(what), "n_embd %d n_head %d (head size %d): logits from the Hugging Face layout vs transformers", C, NH, C / NH);
    TEST_CHECK(n == 8 * 96, "%s: %zu reference logits", name, n);
    test_allclose(what, got, want, 8 * 96, 1e-5, 2e-5 * ref_max_abs(want, n));
    free(all); free(got); free(want);
    model_free(&m);
}

// ----------------------------------------------------------------------------
// refusals

static char g_dir[1200];
static void load_it(void* arg) {
    (void)arg;
    GPT2Config c;
    ParamTable pt;
    float* p;
    model_load(g_dir, &c, &pt, &p);
}

static void check_refusals(void) {
    // a model whose heads are wider than the kernels take (320 / 2 = 160): refused at load,
    // naming config.json and the head size
    snprintf(g_dir, sizeof(g_dir), "%s/hf_wide_heads", TMP);
    write_model(g_dir, 320, 2, 96, 32);
    char cfg[1300];
    snprintf(cfg, sizeof(cfg), "%s/config.json", g_dir);
    const char* want[] = {"config.json", "head size n_embd / n_head = 320 / 2 = 160 is larger than 128", NULL};
    TEST_CHECK(test_expect_fatal("heads of 160", load_it, NULL, want), "heads of 160");
    // a head count that does not divide n_embd (320 / 3)
    FILE* f = fopen(cfg, "w");
    fprintf(f, "{\"model_type\": \"gpt2\", \"n_embd\": 320, \"n_layer\": 1, \"n_head\": 3, \"n_positions\": 32, \"vocab_size\": 96}\n");
    fclose(f);
    const char* want2[] = {"config.json", "must be a positive multiple of num_heads (3)", NULL};
    TEST_CHECK(test_expect_fatal("320 / 3 heads", load_it, NULL, want2), "320 / 3");
    // the largest head the kernels take loads (256 / 2 = 128)
    snprintf(g_dir, sizeof(g_dir), "%s/hf_heads_128", TMP);
    write_model(g_dir, 256, 2, 96, 32);
    const int st = test_run_child(load_it, NULL, cfg, sizeof(cfg));
    TEST_CHECK(st == 0, "heads of 128 load: status %d: %s", st, cfg);
}

int main(void) {
    const char* build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(TMP, sizeof(TMP), "%s/test-tmp/test_gpt2_sizes", build);
    mkdir_p(TMP);
    ops_init(0);
    ops_set_gemm_dtype(OPS_F32);
    check_descriptors();
    StFile ref;
    st_open(&ref, REFDIR "/ref.safetensors");
    const int sizes[][2] = {{768, 12}, {1024, 16}, {1280, 20}, {1600, 25}};
    for (int i = 0; i < 4; i++) check_size(&ref, sizes[i][0], sizes[i][1]);
    st_close(&ref);
    check_refusals();
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
