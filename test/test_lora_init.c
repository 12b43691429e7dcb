// train_lora --init against PEFT (test/ref/lora_init, made by dev/gen_lora_init_ref.py on the tiny
// GPT-2 of test/ref/gpt2_tiny), CPU backend, fp32:
//   gaussian: A's entries have mean 0 and standard deviation 1 / r (r of one q/k/v block), within
//     sampling tolerance, B is exactly 0, and each adapter draws its own numbers;
//   pissa / olora: scaling B A of every adapter equals PEFT's (BA_TOL of its largest magnitude), A
//     and B equal PEFT's up to the sign of each rank component (1e-4), the residual base plus
//     PEFT's scaling B A gives back the base (1e-5), and the model assembled with --init from the
//     base file gives the base's logits (the function is kept at init);
//   the final PiSSA adapter (peft_save_adapter_final) of PEFT's initial and "trained" values is
//     the adapter PEFT's save_pretrained(path_initial_model_for_weight_conversion=...) wrote:
//     the same tensors, r 4, lora_alpha 8, init_lora_weights true; loaded back on the original
//     base it gives PEFT's logits of that converted adapter. The checkpoint form says
//     init_lora_weights "pissa" and loads, as PEFT loads it (the base rewritten to the PiSSA
//     residual first), to the same logits; so does PEFT's own save of the trained PiSSA adapter,
//     assembled on the base and merged by convert. An "olora" adapter is refused by name.
// The run writes its final adapter to $BUILD/lora_init_export/pissa/adapter/ with our logits in
// logits.safetensors beside it, for `dev/gen_lora_init_ref.py --check` (PEFT loads ours).
#include "fixtures.h"
#include "../llmc/base/fileio.h"
#include "../llmc/base/json.h"
#include "../llmc/model/convert.h"

#define BASE_DIR "test/ref/gpt2_tiny"
#define IREF "test/ref/lora_init"
#define TARGETS "c_attn,c_proj"
// Two fp32 SVDs (ours, torch's) agree on the top-r subspace to about eps / (relative gap between
// singular values r and r + 1): measured 1.3e-5 of the largest |scaling B A| on h.0.mlp.c_proj,
// whose 2nd and 3rd singular values are 2.5% apart; OLoRA's QR agrees to 1e-6.
#define BA_TOL 3e-5

static TestBase g_tb;
static char g_build[512];

static LoraModel* make_lora(const char* targets, int rank, float alpha, int init) {
    LoraSpec spec;
    memset(&spec, 0, sizeof(spec));
    char err[512];
    spec.rank = rank; spec.alpha = alpha; spec.init = init;
    if (lora_parse_targets(targets, &spec.targets, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    if (lora_parse_layers("all", g_tb.cfg.num_layers, &spec, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    LoraModel* lm = lora_create(&g_tb.cfg, &spec);
    snprintf(lm->base_name, sizeof(lm->base_name), "%s", BASE_DIR);
    return lm;
}

// ---- gaussian

// Mean and standard deviation of A's entries (one q/k/v block rank r_block), B all zero.
static void check_gaussian(const char* targets, int rank, int r_block) {
    LoraModel* lm = make_lora(targets, rank, 2.0f * rank, LORA_INIT_GAUSSIAN);
    lora_init_gaussian(lm, 1234);
    float* h = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, h);
    double s = 0, ss = 0;
    size_t n = 0, b_nonzero = 0;
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        for (size_t j = 0; j < (size_t)a->rank * a->in; j++) { s += h[a->a_off + j]; ss += (double)h[a->a_off + j] * h[a->a_off + j]; n++; }
        for (size_t j = 0; j < (size_t)a->out * a->rank; j++) b_nonzero += h[a->b_off + j] != 0.0f;
    }
    const double mean = s / (double)n, sd = sqrt(ss / (double)n - mean * mean), want = 1.0 / r_block;
    // sampling: the mean's standard error is sd / sqrt(n), the sd's about sd / sqrt(2 n)
    TEST_CHECK(fabs(mean) < 5.0 * want / sqrt((double)n), "gaussian %s r=%d: mean %g over %zu entries", targets, rank, mean, n);
    TEST_CHECK(fabs(sd / want - 1.0) < 5.0 / sqrt(2.0 * (double)n), "gaussian %s r=%d: std %g, want 1/r = %g (%zu entries)", targets, rank,
               sd, want, n);
    TEST_CHECK(b_nonzero == 0, "gaussian %s: %zu entries of B are not 0", targets, b_nonzero);
    const LoraAdapter* a0 = &lm->ad[0];
    const LoraAdapter* a1 = &lm->ad[1];
    TEST_CHECK(h[a0->a_off] != h[a1->a_off] && h[a0->a_off + 1] != h[a1->a_off + 1], "gaussian: two adapters drew the same numbers");
    printf("ok   gaussian %s r=%d: mean %.2e std %.5f (want %.5f) over %zu entries, B = 0\n", targets, rank, mean, sd, want, n);
    free(h);
    lora_free(lm);
}

// ---- pissa / olora against PEFT

// scaling B A [out, in] of adapter a from flat values v (double accumulation).
static float* scaled_ba(const LoraAdapter* a, const float* v) {
    float* ba = (float*)mallocCheck((size_t)a->out * a->in * sizeof(float));
    for (int o = 0; o < a->out; o++)
        for (int c = 0; c < a->in; c++) {
            double acc = 0;
            for (int j = 0; j < a->rank; j++) acc += (double)v[a->b_off + (size_t)o * a->rank + j] * v[a->a_off + (size_t)j * a->in + c];
            ba[(size_t)o * a->in + c] = (float)(a->scaling * acc);
        }
    return ba;
}

// A and B of adapter a equal PEFT's up to the sign of each rank component j (row j of A,
// column j of B).
static void check_factors_up_to_sign(const char* what, const LoraAdapter* a, const float* v, const float* ra, const float* rb) {
    float* fa = (float*)mallocCheck((size_t)a->rank * a->in * sizeof(float));
    float* fb = (float*)mallocCheck((size_t)a->out * a->rank * sizeof(float));
    for (int j = 0; j < a->rank; j++) {
        double dot = 0;
        for (int c = 0; c < a->in; c++) dot += (double)v[a->a_off + (size_t)j * a->in + c] * ra[(size_t)j * a->in + c];
        const float sg = dot < 0 ? -1.0f : 1.0f;
        for (int c = 0; c < a->in; c++) fa[(size_t)j * a->in + c] = sg * v[a->a_off + (size_t)j * a->in + c];
        for (int o = 0; o < a->out; o++) fb[(size_t)o * a->rank + j] = sg * v[a->b_off + (size_t)o * a->rank + j];
    }
    char name[256];
    snprintf(name, sizeof(name), "%s lora_A (up to sign)", what);
    test_allclose(name, fa, ra, (size_t)a->rank * a->in, 0.0, 1e-4 * ref_max_abs(ra, (size_t)a->rank * a->in));
    snprintf(name, sizeof(name), "%s lora_B (up to sign)", what);
    test_allclose(name, fb, rb, (size_t)a->out * a->rank, 0.0, 1e-4 * ref_max_abs(rb, (size_t)a->out * a->rank));
    free(fa); free(fb);
}

// One adapter's factors, scaling B A and residual against the reference.
static void check_adapter(StFile* ref, const char* init, const LoraAdapter* a, const float* v, const float* base, const float* res) {
    char key[192], what[128];
    snprintf(what, sizeof(what), "%s h.%d.%s", init, a->layer, lora_module_name(a->lin));
    const size_t n = (size_t)a->out * a->in, off = params_layer_offset(&g_tb.pt, a->wid, a->layer);
    snprintf(key, sizeof(key), "ba.%d.%s", a->layer, lora_module_name(a->lin));
    float* rba = ref_read(ref, key, NULL);
    float* ba = scaled_ba(a, v);
    char name[192];
    snprintf(name, sizeof(name), "%s scaling B A", what);
    test_allclose(name, ba, rba, n, 0.0, BA_TOL * ref_max_abs(rba, n));
    float* back = (float*)mallocCheck(n * sizeof(float)); // our residual + PEFT's scaling B A = W
    for (size_t i = 0; i < n; i++) back[i] = res[off + i] + rba[i];
    snprintf(name, sizeof(name), "%s residual + PEFT's B A = W", what);
    test_allclose(name, back, base + off, n, 0.0, 1e-5 * ref_max_abs(base + off, n));
    snprintf(key, sizeof(key), "A.%d.%s", a->layer, lora_module_name(a->lin));
    float* ra = ref_read(ref, key, NULL);
    snprintf(key, sizeof(key), "B.%d.%s", a->layer, lora_module_name(a->lin));
    float* rb = ref_read(ref, key, NULL);
    check_factors_up_to_sign(what, a, v, ra, rb);
    free(rba); free(ba); free(back); free(ra); free(rb);
}

// The logits of m on the base's batch (malloc'd, B x T x V).
static float* batch_logits(Model* m) {
    long nv = 0;
    gpt2_forward(&m->gpt, g_tb.batch.inputs, NULL, NULL, g_tb.batch.B, g_tb.batch.T, 1.0f, &nv);
    return ref_logits_unpadded(&m->gpt, g_tb.batch.B * g_tb.batch.T);
}

// The model assembled from the base file with src (m: kept for the caller, who frees it), and its
// logits on the base's batch (malloc'd).
static float* assembled_logits(Model* m, LoraSource* src) {
    ModelSpec s;
    memset(&s, 0, sizeof(s));
    s.path = BASE_DIR; s.lora_src = src; s.B = g_tb.batch.B; s.T = g_tb.batch.T;
    model_assemble(m, &s);
    return batch_logits(m);
}

// The model assembled from the base file with --init: its logits are the base's.
static void check_function_kept(const char* init_name, int init, StFile* ref) {
    LoraSource src;
    memset(&src, 0, sizeof(src));
    src.spec.rank = 2; src.spec.alpha = 4; src.spec.init = init;
    char err[256];
    if (lora_parse_targets(TARGETS, &src.spec.targets, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    src.seed = 1;
    Model m;
    const size_t N = (size_t)g_tb.batch.B * g_tb.batch.T * g_tb.cfg.vocab_size;
    float* logits = assembled_logits(&m, &src);
    float* want = ref_read(ref, "logits", NULL);
    char name[128];
    snprintf(name, sizeof(name), "%s: the initialised model's logits = the base's (PEFT)", init_name);
    test_allclose(name, logits, want, N, 1e-4, 1e-4);
    TEST_CHECK(m.lora->init0 != NULL, "%s: the assembled adapters keep no initial values", init_name);
    free(logits); free(want);
    model_free(&m);
}

static void check_init(const char* init_name, int init) {
    char path[512];
    snprintf(path, sizeof(path), IREF "/%s/ref.safetensors", init_name);
    StFile ref;
    st_open(&ref, path);
    LoraModel* lm = make_lora(TARGETS, 2, 4, init);
    lora_init_from_base(lm, &g_tb.pt, g_tb.weights);
    const float* v = lm->init0;
    float* res = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    memcpy(res, g_tb.weights, g_tb.pt.total * sizeof(float));
    lora_init_residual(lm, &g_tb.pt, res);
    for (int i = 0; i < lm->n; i++) check_adapter(&ref, init_name, &lm->ad[i], v, g_tb.weights, res);
    check_function_kept(init_name, init, &ref);
    free(res);
    lora_free(lm);
    st_close(&ref);
}

// ---- the PiSSA adapter converted to a plain LoRA, as PEFT converts it

static void check_tensors_equal(const char* ours, const char* theirs) {
    StFile a, b;
    st_open(&a, ours);
    st_open(&b, theirs);
    TEST_CHECK(a.n_tensors == b.n_tensors, "'%s' holds %d tensors, PEFT's %d", ours, a.n_tensors, b.n_tensors);
    for (int i = 0; i < b.n_tensors; i++) {
        const StTensor* t = &b.tensors[i];
        const StTensor* u = st_find(&a, t->name);
        TEST_CHECK(u != NULL, "'%s' lacks %s", ours, t->name);
        if (!u) continue;
        TEST_CHECK(u->ndim == t->ndim && u->shape[0] == t->shape[0] && u->shape[1] == t->shape[1], "%s: shape differs", t->name);
        if (u->numel != t->numel) continue;
        float* x = ref_read(&a, t->name, NULL);
        float* y = ref_read(&b, t->name, NULL);
        test_allclose(t->name, x, y, t->numel, 0.0, 0.0);
        free(x); free(y);
    }
    st_close(&a); st_close(&b);
}

static JsonValue* read_json(const char* dir) {
    char path[1024], err[256];
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    size_t len;
    char* text = read_file_all(path, &len);
    JsonValue* js = json_parse(text, len, err, sizeof(err));
    if (!js) { fprintf(stderr, "%s: %s\n", path, err); exit(1); }
    free(text);
    return js;
}

static void check_converted_config(const char* dir) {
    JsonValue* js = read_json(dir);
    int r = 0, init = 0;
    double alpha = 0;
    TEST_CHECK(json_as_int(json_get(js, "r"), &r) && r == 4, "converted adapter: r %d, want 4", r);
    TEST_CHECK(json_as_number(json_get(js, "lora_alpha"), &alpha) && alpha == 8.0, "converted adapter: lora_alpha %g, want 8", alpha);
    TEST_CHECK(json_as_bool(json_get(js, "init_lora_weights"), &init) && init == 1, "converted adapter: init_lora_weights not true");
    json_free(js);
}

// The written adapter loaded back on the original base: PEFT's logits of its own conversion.
static void check_converted_logits(const char* dir, StFile* ref, const char* logits_out) {
    LoraModel* lm = peft_load_adapter(dir, &g_tb.cfg);
    Model m;
    test_model(&m, &g_tb, g_tb.weights, 0, lm, 0, 0);
    const size_t N = (size_t)g_tb.batch.B * g_tb.batch.T * g_tb.cfg.vocab_size;
    float* logits = batch_logits(&m);
    float* want = ref_read(ref, "converted_logits", NULL);
    test_allclose("pissa converted adapter on the original base: PEFT's logits", logits, want, N, 1e-4, 1e-4);
    StWriter w;
    st_writer_init(&w);
    const int64_t shape[3] = {g_tb.batch.B, g_tb.batch.T, g_tb.cfg.vocab_size};
    st_writer_add(&w, "logits", ST_F32, 3, shape, logits);
    st_writer_save(&w, logits_out);
    st_writer_free(&w);
    free(logits); free(want);
    model_free(&m);
    lora_free(lm);
}

// The model assembled from the base file with the adapter dir (PEFT's PiSSA form: the base
// rewritten to the residual first, as PEFT loads it): the reference's logits `key`.
static void check_assembled_logits(const char* what, const char* dir, const char* key) {
    LoraSource src;
    memset(&src, 0, sizeof(src));
    src.adapter = dir;
    Model m;
    const size_t N = (size_t)g_tb.batch.B * g_tb.batch.T * g_tb.cfg.vocab_size;
    float* logits = assembled_logits(&m, &src);
    StFile ref;
    st_open(&ref, IREF "/pissa/ref.safetensors");
    float* want = ref_read(&ref, key, NULL);
    test_allclose(what, logits, want, N, 1e-4, 1e-4);
    free(logits); free(want);
    st_close(&ref);
    model_free(&m);
}

// PEFT's own save of a trained PiSSA adapter (init_lora_weights "pissa"), read as PEFT reads it:
// assembled on the base, and merged by convert into the base, it gives PEFT's logits.
static void check_peft_pissa_form(void) {
    const char* dir = IREF "/pissa/peft_pissa";
    check_assembled_logits("PEFT's PiSSA adapter (init_lora_weights \"pissa\") assembled on the base: PEFT's logits", dir, "trained_logits");
    HostModel hm;
    convert_load(&hm, BASE_DIR, 0);
    convert_merge_adapter(&hm, dir);
    Model m;
    test_model(&m, &g_tb, hm.params, 0, NULL, 0, 0);
    const size_t N = (size_t)g_tb.batch.B * g_tb.batch.T * g_tb.cfg.vocab_size;
    float* logits = batch_logits(&m);
    StFile ref;
    st_open(&ref, IREF "/pissa/ref.safetensors");
    float* want = ref_read(&ref, "trained_logits", NULL);
    test_allclose("PEFT's PiSSA adapter merged by convert: PEFT's logits", logits, want, N, 1e-4, 1e-4);
    free(logits); free(want);
    st_close(&ref);
    model_free(&m);
    convert_free(&hm);
}

static void check_conversion(void) {
    LoraModel* lm = make_lora(TARGETS, 2, 4, LORA_INIT_PISSA);
    lm->init0 = (float*)callocCheck(lm->total, sizeof(float));
    peft_read_factors(lm, IREF "/pissa/init/adapter_model.safetensors", lm->init0);
    float* trained = (float*)callocCheck(lm->total, sizeof(float));
    peft_read_factors(lm, IREF "/pissa/trained.safetensors", trained);
    lora_set_params(lm, trained);
    char dir[1024], ckpt[1024], tensors[1100], logits[1100];
    snprintf(dir, sizeof(dir), "%s/lora_init_export/pissa/adapter", g_build);
    snprintf(ckpt, sizeof(ckpt), "%s/lora_init_export/pissa/checkpoint", g_build);
    snprintf(logits, sizeof(logits), "%s/lora_init_export/pissa/logits.safetensors", g_build);
    peft_save_adapter_final(lm, dir);
    snprintf(tensors, sizeof(tensors), "%s/adapter_model.safetensors", dir);
    check_tensors_equal(tensors, IREF "/pissa/converted/adapter_model.safetensors");
    check_converted_config(dir);
    StFile ref;
    st_open(&ref, IREF "/pissa/ref.safetensors");
    check_converted_logits(dir, &ref, logits);
    st_close(&ref);
    // the checkpoint form: the factors of the residual base, named as PEFT names them
    peft_save_adapter(lm, ckpt);
    JsonValue* js = read_json(ckpt);
    const char* init = json_as_string(json_get(js, "init_lora_weights"));
    TEST_CHECK(init && !strcmp(init, "pissa"), "checkpoint adapter: init_lora_weights %s, want \"pissa\"", init ? init : "(not a string)");
    json_free(js);
    check_assembled_logits("our checkpoint form (init_lora_weights \"pissa\") on the original base", ckpt, "converted_logits");
    // OLoRA's form stays refused: PEFT's olora on GPT-2's Conv1D factors another matrix than ours
    lm->spec.init = LORA_INIT_OLORA;
    snprintf(ckpt, sizeof(ckpt), "%s/lora_init_export/olora_checkpoint", g_build);
    peft_save_adapter(lm, ckpt);
    char err[1024];
    LoraModel* back = peft_try_load_adapter(ckpt, &g_tb.cfg, err, sizeof(err));
    TEST_CHECK(!back && strstr(err, "olora"), "an adapter with init_lora_weights \"olora\" was not refused by name: %s", back ? "loaded" : err);
    if (back) lora_free(back);
    free(trained);
    lora_free(lm);
}

int main(int argc, char** argv) {
    (void)argc; (void)argv;
    ops_init(0);
    printf("backend: %s\n", ops_backend_name());
    test_base_load(&g_tb, BASE_DIR);
    const char* b = getenv("BUILD");
    snprintf(g_build, sizeof(g_build), "%s", b && *b ? b : "build/cpu");
    check_gaussian("all-linear", 16, 16);
    check_gaussian("q,v", 8, 8); // stacked rank 16, two blocks of rank 8
    check_init("pissa", LORA_INIT_PISSA);
    check_init("olora", LORA_INIT_OLORA);
    check_conversion();
    check_peft_pissa_form();
    test_base_free(&g_tb);
    return test_finish("test_lora_init");
}
