// LoRA test against PEFT (test/ref/lora_tiny, made by dev/gen_lora_ref.py on the tiny GPT-2 of
// test/ref/gpt2_tiny). For each target set: the adapter PEFT saved loads (by our flags and by its
// adapter_config.json, giving the same structure), logits / loss / every lora_A, lora_B gradient
// and the gradient reaching the embedding match PEFT, the merged model matches PEFT's
// merge_and_unload, and 10 AdamW steps give PEFT's losses and gradient norms. The same for DoRA
// adapters (test/ref/dora_tiny, dev/gen_dora_ref.py: the magnitudes' gradients and PEFT's DoRA
// merge too), exported as dora_<set>. Then: gradient
// accumulation over 4 micro-batches equals PEFT's 4x larger batch, the dropout mask statistics
// and its exact regeneration in backward (finite differences), adapters whose structure only
// their config gives (exclude_modules, rank / alpha pattern keys read as PEFT's regular
// expressions) give PEFT's logits, and bad adapters (or PEFT variants that are not plain LoRA:
// aLoRA, target_parameters, ...) are refused with a message naming the file and the problem. After training, each set's adapter is
// exported to $BUILD/lora_export/<set>/ with the logits of our merged model, for
// `dev/gen_lora_ref.py --check-c` (PEFT loads our adapter).
//
// Builds: as C on the CPU backend (fp32); test/test_lora.cu includes this file for the CUDA
// backend (bf16 storage, fp32 accumulation and master weights), run in CI under the CUDA-on-CPU
// harness (test_lora_cuda) and, as test_lora_gpu, on a real GPU (mk/gpucheck.mk).
//
// Tolerances (errors relative to the largest magnitude of each reference tensor, as in
// test_gpt2.c):
//   fp32 (CPU): logits 1e-4 (+ 1e-4 relative), loss 1e-5, gradients 1e-4 (+ 1e-3 relative), step
//     losses 1e-4, grad norms 1e-3 relative, dropout finite differences 1%.
//   bf16 (CUDA): test_gpt2.c's bf16 figures (logits 2e-2, loss 5e-3 nats, step losses 5e-3, grad
//     norms 2e-2 relative) except the adapter gradients: 6e-2. The LoRA branch rounds more
//     intermediates to bf16 than a plain linear (x A^T, its scaled copy, h B^T before it is added,
//     dout B and its scaled copy), and lora_A's gradient sums them over every token with much
//     cancellation. Measured under the harness: adapter gradients up to 3.1e-2 (qv, lora_A of
//     layer 1), logits 5e-3 to 1e-2, loss 3.2e-4, step losses 3.2e-4, grad norms 8.3e-3 (rslora).
//     Dropout finite differences: 5% with a 5x larger step (bf16 activations make the loss a step
//     function at the 1e-3 scale; measured 0.7%); kept dropout elements x / (1 - p) to one bf16
//     rounding.
#include <stdarg.h>
#include "fixtures.h"
#include "../llmc/base/fileio.h"

#define BASE_DIR "test/ref/gpt2_tiny"
#define LREF "test/ref/lora_tiny"
#define DREF "test/ref/dora_tiny"

// tolerances by the backend's element type (ops_caps()): bf16 storage (CUDA) or fp32 (CPU); the CUDA
// test writes its exports and bad adapters apart from the CPU test's (out_subdir)
typedef struct {
    double logits, logits_rel, loss, grad, grad_rel, step_loss, norm, fd, fd_step, elem;
    const char* out_subdir;
} Tols;
static const Tols TOL_BF16 = { 2e-2, 0.0, 5e-3, 6e-2, 0.0, 5e-3, 2e-2, 5e-2, 5e-2, 1.0 / 256, "test_lora_cuda" };
static const Tols TOL_F32 = { 1e-4, 1e-4, 1e-5, 1e-4, 1e-3, 1e-4, 1e-3, 1e-2, 1e-2, 1e-6, "" };
static const Tols* tols(void) { return test_is_bf16() ? &TOL_BF16 : &TOL_F32; }

typedef struct { const char* name; const char* targets; int rank; float alpha; int rslora; const char* layers; int bias, ln_f, dora; } SetSpec;
static const SetSpec SETS[] = {
    {"c_attn", "c_attn", 4, 8, 0, "all", 0, 0, 0},
    {"proj_fc", "attn.c_proj,mlp.c_fc,mlp.c_proj", 4, 16, 0, "all", 0, 0, 0},
    {"all_linear", "all-linear", 2, 4, 0, "all", 0, 0, 0},
    {"rslora", "c_attn,c_proj", 4, 8, 1, "all", 0, 0, 0},
    {"layers", "c_attn,mlp.c_fc", 3, 6, 0, "1", 0, 0, 0},
    {"qv", "q,v", 2, 4, 0, "all", 0, 0, 0},
    {"bias_lnf", "c_attn", 2, 4, 0, "all", LORA_BIAS_LORA_ONLY, 1, 0},
    {"bias_all", "mlp.c_fc,attn.c_proj", 2, 2, 0, "all", LORA_BIAS_ALL, 0, 0},
};
// DoRA (PEFT use_dora), dev/gen_dora_ref.py's sets in test/ref/dora_tiny
static const SetSpec DORA_SETS[] = {
    {"c_attn", "c_attn", 4, 8, 0, "all", 0, 0, 1},
    {"all_linear", "all-linear", 2, 4, 0, "all", 0, 0, 1},
    {"rslora_bias", "c_attn,c_proj", 4, 8, 1, "all", LORA_BIAS_LORA_ONLY, 0, 1},
};
static const char* set_dir(const SetSpec* s) { return s->dora ? DREF : LREF; }
static TestBase g_tb; // the tiny GPT-2 and its reference batch
static char g_build[512];


static LoraModel* make_lora(const SetSpec* s, float dropout) {
    LoraSpec spec;
    memset(&spec, 0, sizeof(spec));
    char err[512];
    spec.rank = s->rank; spec.alpha = s->alpha; spec.rslora = s->rslora; spec.dropout = dropout;
    spec.bias = s->bias; spec.train_ln_f = s->ln_f; spec.dora = s->dora;
    if (lora_parse_targets(s->targets, &spec.targets, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    if (lora_parse_layers(s->layers, g_tb.cfg.num_layers, &spec, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    LoraModel* lm = lora_create(&g_tb.cfg, &spec);
    snprintf(lm->base_name, sizeof(lm->base_name), "%s", BASE_DIR);
    return lm;
}


static float* test_logits(Model* m) { return ref_logits_unpadded(&m->gpt, g_tb.batch.B * g_tb.batch.T); }

// The logits of the plain model whose weights are base with lm merged in (W += scaling B A).
static float* merged_logits(const LoraModel* lm, const float* base) {
    float* merged = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    memcpy(merged, base, g_tb.pt.total * sizeof(float));
    lora_merge(lm, &g_tb.pt, merged);
    float* logits = test_batch_logits(&g_tb, merged, NULL);
    free(merged);
    return logits;
}

// Structure from our flags == structure PEFT saved: the counts of the reference's metadata.
static void check_counts(const SetSpec* s, StFile* ref, const LoraModel* lm) {
    // (the q/v split is stored as PEFT's rank-2r c_attn adapter; its trainable count excludes the
    // structural zeros of B: 2 layers x 2 blocks x (A 2x64 + B 64x2))
    TEST_CHECK(lm->total == (size_t)atol(st_meta(ref, "n_trainable")), "%s: %zu adapter parameters vs PEFT %s",
               s->name, lm->total, st_meta(ref, "n_trainable"));
    TEST_CHECK(lm->n_trainable == (strcmp(s->name, "qv") ? lm->total : (size_t)2 * 2 * (2 * 64 + 64 * 2)),
               "%s: %zu trainable", s->name, lm->n_trainable);
    TEST_CHECK(lm->n_extra == 0 || st_meta(ref, "n_extra") != NULL, "n_extra");
    size_t ne = 0;
    for (int i = 0; i < lm->n_extra; i++) ne += params_layer_numel(&g_tb.pt, lm->extra[i].id);
    TEST_CHECK(ne == (size_t)atol(st_meta(ref, "n_extra")), "%s: %zu trained base parameters vs PEFT %s", s->name, ne, st_meta(ref, "n_extra"));
}

// The adapter PEFT saved, loaded by its adapter_config.json, has the structure and values of lm
// (built from our flags) and puts the same base values (start) in place.
static void check_loaded_by_config(const SetSpec* s, const LoraModel* lm, const float* start) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s", set_dir(s), s->name);
    LoraModel* lp = peft_load_adapter(path, &g_tb.cfg);
    TEST_CHECK(lp->n == lm->n && lp->total == lm->total, "%s: loaded by config: %d adapters / %zu params vs %d / %zu",
               s->name, lp->n, lp->total, lm->n, lm->total);
    for (int i = 0; i < lp->n && i < lm->n; i++) {
        const LoraAdapter *a = &lm->ad[i], *b = &lp->ad[i];
        TEST_CHECK(a->layer == b->layer && a->lin == b->lin && a->rank == b->rank && fabsf(a->scaling - b->scaling) < 1e-6f,
                   "%s adapter %d: (%d,%d,r%d,s%g) vs PEFT config (%d,%d,r%d,s%g)", s->name, i, a->layer, a->lin, a->rank,
                   a->scaling, b->layer, b->lin, b->rank, b->scaling);
    }
    float* p0 = (float*)mallocCheck(lm->total * sizeof(float));
    float* p1 = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, p0);
    lora_get_params(lp, p1);
    TEST_CHECK(lp->total != lm->total || memcmp(p0, p1, lm->total * sizeof(float)) == 0, "%s: same values both ways", s->name);
    TEST_CHECK(lp->n_extra == lm->n_extra, "%s: %d trained base slices from the config vs %d from the flags", s->name, lp->n_extra, lm->n_extra);
    for (int i = 0; i < lp->n_extra && i < lm->n_extra; i++)
        TEST_CHECK(!strcmp(lp->extra[i].key, lm->extra[i].key), "extra key %s vs %s", lp->extra[i].key, lm->extra[i].key);
    Model m2;
    float* p2 = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    test_model(&m2, &g_tb, g_tb.weights, lora_base_trainable_mask(lp), lp, 0, 0);
    gpt2_get_params(&m2.gpt, p2);
    TEST_CHECK(memcmp(p2, start, g_tb.pt.total * sizeof(float)) == 0, "%s: base slices from peft_load_adapter", s->name);
    model_free(&m2);
    free(p0); free(p1); free(p2);
    lora_free(lp);
}

// Logits, loss, every adapter gradient and the gradient that reaches wte (trainable in m) vs PEFT.
static void check_forward_backward(const SetSpec* s, StFile* ref, Model* m, LoraModel* lm) {
    gpt2_forward(&m->gpt, g_tb.batch.inputs, NULL, NULL, g_tb.batch.B, g_tb.batch.T, 0.0f, NULL);
    float* logits = test_logits(m);
    size_t nl;
    float* want = ref_read(ref, "logits", &nl);
    char what[256];
    snprintf(what, sizeof(what), "%s logits", s->name);
    test_allclose(what, logits, want, nl, tols()->logits_rel, tols()->logits * ref_max_abs(want, nl));
    free(want); free(logits);
    gpt2_zero_grads(&m->gpt);
    long nv;
    // (two statements: the operands of / are unsequenced, nv must be read after the call)
    double loss = gpt2_forward(&m->gpt, g_tb.batch.inputs, g_tb.batch.targets, NULL, g_tb.batch.B, g_tb.batch.T, 1.0f / (float)g_tb.batch.valid, &nv);
    loss /= (double)nv;
    gpt2_backward(&m->gpt, NULL);
    float* rl = ref_read(ref, "loss", NULL);
    TEST_CHECK(fabs(loss - rl[0]) < tols()->loss, "%s loss %.7f vs PEFT %.7f", s->name, loss, rl[0]);
    printf("%s: loss %.7f (PEFT %.7f)\n", s->name, loss, rl[0]);
    free(rl);
    ref_check_lora_grads(s->name, lm, 1, ref, "grad.", tols()->grad_rel, tols()->grad);
    size_t n;
    float* wg = ref_read(ref, "grad.wte", &n);
    float* ours = (float*)mallocCheck(g_tb.pt.t[PT_WTE].numel * sizeof(float));
    ops_download_f32(ours, m->gpt.g[PT_WTE], g_tb.pt.t[PT_WTE].numel);
    snprintf(what, sizeof(what), "%s grad reaching wte (input path through frozen layers + adapters)", s->name);
    TEST_CHECK(n == (size_t)g_tb.cfg.vocab_size * g_tb.cfg.channels, "grad.wte size");
    test_allclose(what, ours, wg, n, tols()->grad_rel, tols()->grad * ref_max_abs(wg, n));
    free(wg); free(ours);
}

// Gradient accumulation: 4 micro-batches of 1 sequence == PEFT on the batch of 4.
static void check_accumulation(const SetSpec* s, StFile* ref, LoraModel* lm, const float* start) {
    const StTensor* ti = st_find(ref, "accum.input_ids");
    if (!ti) return;
    int AB = (int)ti->shape[0], AT = (int)ti->shape[1];
    int* ai = (int*)mallocCheck((size_t)AB * AT * sizeof(int));
    int* at = (int*)mallocCheck((size_t)AB * AT * sizeof(int));
    st_read_i32(ref, ti, ai);
    st_read_i32(ref, st_find(ref, "accum.targets"), at);
    Model m;
    test_model(&m, &g_tb, start, lora_base_trainable_mask(lm), lm, 0, 0);
    if (ops_gemm_dtype() == OPS_BF16 && ops_caps().floatx == OPS_F32) // --dtype bf16 on the CPU
        TEST_CHECK(m.base16 != NULL && m.gpt.p[PT_QKVW] == NULL && m.gpt.p[PT_FCPROJW] == NULL,
                   "%s: the frozen linear weights held in bf16 only", s->name);
    long valid = 0;
    for (int i = 0; i < AB * AT; i++) valid += at[i] >= 0;
    gpt2_zero_grads(&m.gpt);
    double sum = 0;
    for (int k = 0; k < AB; k++) {
        long n1;
        sum += gpt2_forward(&m.gpt, ai + (size_t)k * AT, at + (size_t)k * AT, NULL, 1, AT, 1.0f / (float)valid, &n1);
        gpt2_backward(&m.gpt, NULL);
    }
    float* al = ref_read(ref, "accum.loss", NULL);
    TEST_CHECK(fabs(sum / (double)valid - al[0]) < tols()->loss, "accumulated loss %.7f vs PEFT big batch %.7f", sum / (double)valid, al[0]);
    printf("%s: 4 micro-batches: loss %.7f (PEFT, one batch of 4: %.7f)\n", s->name, sum / (double)valid, al[0]);
    ref_check_lora_grads("4 accumulated micro-batches vs one 4x batch:", lm, 1, ref, "accum.grad.", tols()->grad_rel, tols()->grad);
    free(al); free(ai); free(at);
    model_free(&m);
}

// The structural zeros of split adapters are exactly zero and some trained entries are not.
static void check_split_zeros(const char* what, const LoraModel* lm) {
    float* pv = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, pv);
    size_t bad = 0, nz = 0;
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        if (!a->blocks) continue;
        float* mk = (float*)mallocCheck((size_t)a->out * a->rank * sizeof(float));
        ops_download_f32(mk, a->b_mask, (size_t)a->out * a->rank);
        for (size_t j = 0; j < (size_t)a->out * a->rank; j++) {
            if (mk[j] == 0.0f && pv[a->b_off + j] != 0.0f) bad++;
            nz += mk[j] != 0.0f && pv[a->b_off + j] != 0.0f;
        }
        free(mk);
    }
    TEST_CHECK(bad == 0 && nz > 0, "%s: %zu structural zeros of B moved (%zu trained entries non-zero)", what, bad, nz);
    free(pv);
}

// Our export (PEFT layout) reads back to the same adapters (values, ranks, scalings, q/k/v split
// and so the trainable count), and the logits of the model it merges into, for
// dev/gen_lora_ref.py --check-c. lm must be on a model (its trained base slices are read there).
static void check_export(const char* name, LoraModel* lm) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof(dir), "%s/lora_export/%s", g_build, name);
    peft_save_adapter(lm, dir);
    LoraModel* back = peft_load_adapter(dir, &g_tb.cfg);
    float* pa = (float*)mallocCheck(lm->total * sizeof(float));
    float* pb = (float*)mallocCheck(back->total * sizeof(float));
    lora_get_params(lm, pa);
    lora_get_params(back, pb);
    TEST_CHECK(back->total == lm->total && memcmp(pa, pb, lm->total * sizeof(float)) == 0 && back->n == lm->n,
               "%s: exported adapter reads back identically", name);
    TEST_CHECK(back->n_trainable == lm->n_trainable && back->spec.targets == lm->spec.targets,
               "%s: exported adapter reads back with %zu trainable parameters (targets %#x), trained %zu (%#x)", name,
               back->n_trainable, back->spec.targets, lm->n_trainable, lm->spec.targets);
    for (int i = 0; i < back->n && i < lm->n; i++)
        TEST_CHECK(fabsf(back->ad[i].scaling - lm->ad[i].scaling) < 1e-6f && back->ad[i].rank == lm->ad[i].rank &&
                   back->ad[i].blocks == lm->ad[i].blocks, "%s: exported adapter %d scaling %g rank %d blocks %u vs %g %d %u", name,
                   i, back->ad[i].scaling, back->ad[i].rank, back->ad[i].blocks, lm->ad[i].scaling, lm->ad[i].rank, lm->ad[i].blocks);
    Model m;
    float* base = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    test_model(&m, &g_tb, g_tb.weights, lora_base_trainable_mask(back), back, 0, 0); // puts the exported base slices in place
    gpt2_get_params(&m.gpt, base);
    model_free(&m);
    float* logits = merged_logits(back, base);
    StWriter w;
    st_writer_init(&w);
    int64_t shape[3] = {g_tb.batch.B, g_tb.batch.T, g_tb.cfg.vocab_size};
    st_writer_add(&w, "logits", ST_F32, 3, shape, logits);
    snprintf(path, sizeof(path), "%s/merged_logits.safetensors", dir);
    st_writer_save(&w, path);
    st_writer_free(&w);
    free(logits); free(pa); free(pb); free(base);
    lora_free(back);
}

static void test_set(const SetSpec* s) {
    char path[1200], what[256];
    printf("---- %s\n", s->name);
    snprintf(path, sizeof(path), "%s/%s/ref.safetensors", set_dir(s), s->name);
    StFile ref;
    st_open(&ref, path);
    LoraModel* lm = make_lora(s, 0.0f);
    check_counts(s, &ref, lm);
    // the base as the adapter file leaves it (trained biases / ln_f replaced), read back from a
    // model with wte trainable (to read the gradient that reaches the embedding)
    const unsigned xmask = lora_base_trainable_mask(lm);
    Model m;
    float* start = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    test_model(&m, &g_tb, g_tb.weights, xmask | (1u << PT_WTE), lm, 0, 0);
    snprintf(path, sizeof(path), "%s/%s/adapter_model.safetensors", set_dir(s), s->name);
    peft_load_tensors(lm, path);
    gpt2_get_params(&m.gpt, start);
    check_loaded_by_config(s, lm, start);
    check_forward_backward(s, &ref, &m, lm);
    model_free(&m);
    // merge (PEFT merge_and_unload of the same adapter)
    size_t nl;
    float* logits = merged_logits(lm, start);
    float* want = ref_read(&ref, "merged_logits", &nl);
    snprintf(what, sizeof(what), "%s merged-model logits vs PEFT merge_and_unload", s->name);
    test_allclose(what, logits, want, nl, tols()->logits_rel, tols()->logits * ref_max_abs(want, nl));
    free(want); free(logits);
    check_accumulation(s, &ref, lm, start);
    // 10 AdamW steps
    RefAdamW h = ref_adamw(&ref);
    float* losses = (float*)mallocCheck((size_t)h.steps * sizeof(float));
    float* norms = (float*)mallocCheck((size_t)h.steps * sizeof(float));
    test_model(&m, &g_tb, start, xmask, lm, 0, 0);
    ref_train(&m, &g_tb.batch, &h, losses, norms);
    ref_check_train(s->name, &ref, losses, norms, h.steps, tols()->step_loss, tols()->norm);
    if (!strcmp(s->name, "qv")) check_split_zeros("qv after 10 steps", lm);
    char export_name[128];
    snprintf(export_name, sizeof(export_name), "%s%s", s->dora ? "dora_" : "", s->name);
    check_export(export_name, lm);
    model_free(&m);
    free(losses); free(norms); free(start);
    lora_free(lm);
    st_close(&ref);
}

// ---- adapters whose structure only their adapter_config.json describes (dev/gen_lora_ref.py's
// CONFIG_SETS): exclude_modules, and rank_pattern / alpha_pattern keys read as PEFT's regular
// expressions. Loaded by the config, they adapt the modules PEFT adapted and give PEFT's logits,
// and merged, PEFT's merge_and_unload logits; our export of them reads back the same.
static void test_config_set(const char* name) {
    char path[1200], what[256];
    printf("---- %s (adapter_config.json only)\n", name);
    snprintf(path, sizeof(path), LREF "/%s/ref.safetensors", name);
    StFile ref;
    st_open(&ref, path);
    snprintf(path, sizeof(path), LREF "/%s", name);
    LoraModel* lm = peft_load_adapter(path, &g_tb.cfg);
    char adapted[1024] = "", one[160];
    for (int i = 0; i < lm->n; i++) {
        snprintf(one, sizeof(one), "%s" LORA_KEY_PREFIX "%d.%s", i ? "," : "", lm->ad[i].layer, lora_module_name(lm->ad[i].lin));
        strncat(adapted, one, sizeof(adapted) - strlen(adapted) - 1);
    }
    TEST_CHECK(!strcmp(adapted, st_meta(&ref, "adapted")), "%s: adapted modules %s, PEFT's %s", name, adapted, st_meta(&ref, "adapted"));
    Model m;
    test_model(&m, &g_tb, g_tb.weights, lora_base_trainable_mask(lm), lm, 0, 0);
    gpt2_forward(&m.gpt, g_tb.batch.inputs, NULL, NULL, g_tb.batch.B, g_tb.batch.T, 0.0f, NULL);
    float* logits = test_logits(&m);
    size_t nl;
    float* want = ref_read(&ref, "logits", &nl);
    snprintf(what, sizeof(what), "%s logits vs PEFT", name);
    test_allclose(what, logits, want, nl, tols()->logits_rel, tols()->logits * ref_max_abs(want, nl));
    free(want); free(logits);
    float* base = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    gpt2_get_params(&m.gpt, base);
    logits = merged_logits(lm, base);
    want = ref_read(&ref, "merged_logits", &nl);
    snprintf(what, sizeof(what), "%s merged-model logits vs PEFT merge_and_unload", name);
    test_allclose(what, logits, want, nl, tols()->logits_rel, tols()->logits * ref_max_abs(want, nl));
    free(want); free(logits); free(base);
    check_export(name, lm);
    model_free(&m);
    lora_free(lm);
    st_close(&ref);
}

// ---- dropout
static double loss_at(Model* m) {
    long n;
    double l = gpt2_forward(&m->gpt, g_tb.batch.inputs, g_tb.batch.targets, NULL, g_tb.batch.B, g_tb.batch.T, 0.0f, &n);
    return l / (double)n;
}

static void check_dropout_backward(const char* dir, int dora);

static void test_dropout(void) {
    printf("---- dropout\n");
    const size_t n = 200000;
    const float p = 0.3f;
    float* x = (float*)mallocCheck(n * sizeof(float));
    float* y = (float*)mallocCheck(n * sizeof(float));
    float* z = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 7);
    // the op runs on backend buffers (device memory on CUDA)
    floatX* dx = (floatX*)ops_alloc(n * sizeof(floatX));
    floatX* dy = (floatX*)ops_alloc(n * sizeof(floatX));
    ops_upload_f32(dx, x, n);
    dropout_forward(dy, dx, n, p, 42, 7);
    ops_download_f32(y, dy, n);
    dropout_forward(dy, dx, n, p, 42, 7);
    ops_download_f32(z, dy, n);
    size_t kept = 0, wrong = 0, same_other = 0;
    for (size_t i = 0; i < n; i++) {
        if (y[i] != 0.0f) { kept++; if (fabsf(y[i] - x[i] / (1.0f - p)) > (float)tols()->elem * y[i]) wrong++; }
    }
    TEST_CHECK(memcmp(y, z, n * sizeof(float)) == 0, "dropout mask is a pure function of (seed, stream, i)");
    double frac = (double)kept / (double)n;
    TEST_CHECK(fabs(frac - (1.0 - p)) < 0.005, "kept fraction %.4f, expected %.2f", frac, 1.0 - p);
    TEST_CHECK(wrong == 0, "%zu kept elements not scaled by 1/(1-p)", wrong);
    dropout_forward(dy, dx, n, p, 42, 8);
    ops_download_f32(z, dy, n);
    for (size_t i = 0; i < n; i++) same_other += (y[i] != 0.0f) == (z[i] != 0.0f);
    TEST_CHECK(fabs((double)same_other / n - (p * p + (1 - p) * (1 - p))) < 0.01, "another stream gives an independent mask");
    printf("ok   dropout p=%.1f: kept %.4f, scale 1/(1-p), deterministic, streams independent\n", p, frac);
    free(x); free(y); free(z); ops_free(dx); ops_free(dy);
    check_dropout_backward(LREF, 0);
    check_dropout_backward(DREF, 1);
}

// Exact regeneration of the mask in backward: with dropout active the loss is a deterministic
// function of the adapter, and the analytic gradient must match central differences along the
// gradient direction (a wrong mask in backward would not). DoRA (PEFT's other form under dropout):
// its gradient treats the norms as constants, so the norms are kept at the unperturbed
// adapter's (linear_set_dora_cache) while the differences are taken.
static void check_dropout_backward(const char* dir, int dora) {
    const SetSpec s = {"all_linear", "all-linear", 2, 4, 0, "all", 0, 0, dora};
    char path[1024];
    LoraModel* lm = make_lora(&s, 0.25f);
    snprintf(path, sizeof(path), "%s/all_linear/adapter_model.safetensors", dir);
    peft_load_tensors(lm, path);
    lm->dropout_seed = 99;
    Model m;
    test_model(&m, &g_tb, g_tb.weights, 0, lm, 0, 0);
    linear_set_dora_cache(m.gpt.lin, dora);
    linear_set_training(m.gpt.lin, 0, 5);
    double l_eval = loss_at(&m);
    linear_set_training(m.gpt.lin, 1, 5);
    double l_train = loss_at(&m);
    TEST_CHECK(fabs(l_train - l_eval) > 1e-5, "dropout changes the training loss (%.7f vs eval %.7f)", l_train, l_eval);
    gpt2_zero_grads(&m.gpt);
    long nv;
    gpt2_forward(&m.gpt, g_tb.batch.inputs, g_tb.batch.targets, NULL, g_tb.batch.B, g_tb.batch.T, 1.0f / (float)g_tb.batch.valid, &nv);
    gpt2_backward(&m.gpt, NULL);
    float* g = (float*)mallocCheck(lm->total * sizeof(float));
    float* p0 = (float*)mallocCheck(lm->total * sizeof(float));
    float* pp = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_grads(lm, g);
    lora_get_params(lm, p0);
    double gn = 0;
    for (size_t i = 0; i < lm->total; i++) gn += (double)g[i] * g[i];
    gn = sqrt(gn);
    const double h = tols()->fd_step;
    for (size_t i = 0; i < lm->total; i++) pp[i] = p0[i] + (float)(h * g[i] / gn);
    lora_set_params(lm, pp);
    double lp = loss_at(&m);
    for (size_t i = 0; i < lm->total; i++) pp[i] = p0[i] - (float)(h * g[i] / gn);
    lora_set_params(lm, pp);
    double lmn = loss_at(&m);
    double fd = (lp - lmn) / (2 * h);
    printf("dropout p=0.25 backward%s: directional derivative %.6f, finite differences %.6f\n", dora ? " (DoRA)" : "", gn, fd);
    TEST_CHECK(fabs(fd - gn) < tols()->fd * gn, "dropout backward%s: |grad| %.6f vs finite differences %.6f", dora ? " (DoRA)" : "", gn, fd);
    linear_set_training(m.gpt.lin, 1, 6);
    lora_set_params(lm, p0);
    double l_other = loss_at(&m);
    TEST_CHECK(fabs(l_other - l_train) > 1e-6, "another tick draws another mask");
    free(g); free(p0); free(pp);
    model_free(&m);
    lora_free(lm);
}

// ---- adapter files made here: accepted and refused ones
// An adapter directory: config as adapter_config.json, tensors names / shapes ([n, 0]: 1-D) all
// holding value, and the q/k/v split metadata split (NULL: none).
static void write_adapter_split(const char* dir, const char* config, int nt, const char* const* names, const int64_t (*shapes)[2],
                                const char* split, float value) {
    mkdir_p(dir);
    char path[1024];
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    atomic_write_file(path, config, strlen(config));
    StWriter w;
    st_writer_init(&w);
    static float data[4 * 4096];
    for (size_t i = 0; i < sizeof(data) / sizeof(data[0]); i++) data[i] = value;
    for (int i = 0; i < nt; i++) st_writer_add(&w, names[i], ST_F32, shapes[i][1] ? 2 : 1, shapes[i], data);
    if (split) st_writer_meta(&w, PEFT_META_QKV_SPLIT, split);
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    st_writer_save(&w, path);
    st_writer_free(&w);
}

static void write_adapter(const char* dir, const char* config, int nt, const char* const* names, const int64_t (*shapes)[2]) {
    write_adapter_split(dir, config, nt, names, shapes, NULL, 0.0f);
}

// The load must fail with a message containing every string given (NULL-terminated list;
// varargs rather than a compound literal, so the file also compiles as C++ for the CUDA build).
static void expect_refused(const char* what, const char* dir, ...) {
    char err[1024];
    LoraModel* lm = peft_try_load_adapter(dir, &g_tb.cfg, err, sizeof(err));
    int ok = lm == NULL;
    va_list ap;
    va_start(ap, dir);
    const char* first = NULL;
    for (const char* w = va_arg(ap, const char*); w; w = va_arg(ap, const char*)) {
        if (!first) first = w;
        if (ok && !strstr(err, w)) ok = 0;
    }
    va_end(ap);
    TEST_CHECK(ok, "%s: expected a refusal mentioning '%s', got %s", what, first, lm ? "success" : err);
    if (ok) printf("ok   refused %s: %s\n", what, err);
    if (lm) lora_free(lm);
}

#define CFG(targets, r, extra) "{\"peft_type\": \"LORA\", \"r\": " #r ", \"lora_alpha\": 8, \"target_modules\": " targets \
    ", \"bias\": \"none\", \"fan_in_fan_out\": true" extra "}"
#define KA(l, mod) "base_model.model.transformer.h." #l "." mod ".lora_A.weight"
#define KB(l, mod) "base_model.model.transformer.h." #l "." mod ".lora_B.weight"

static const char* const CA[4] = {KA(0, "attn.c_attn"), KB(0, "attn.c_attn"), KA(1, "attn.c_attn"), KB(1, "attn.c_attn")};
static const int64_t CA_SHAPES[4][2] = {{4, 64}, {192, 4}, {4, 64}, {192, 4}};
// with the biases of the adapted layers (bias="lora_only"), as PEFT >= 0.7 names them
static const char* const CA_BIAS[6] = {KA(0, "attn.c_attn"), KB(0, "attn.c_attn"), KA(1, "attn.c_attn"), KB(1, "attn.c_attn"),
                                       "base_model.model.transformer.h.0.attn.c_attn.base_layer.bias",
                                       "base_model.model.transformer.h.1.attn.c_attn.base_layer.bias"};
static const int64_t CA_BIAS_SHAPES[6][2] = {{4, 64}, {192, 4}, {4, 64}, {192, 4}, {192, 0}, {192, 0}};

static void test_good_adapters(void) {
    printf("---- adapters made here\n");
    char d[1024];
    const char* const* ca = CA;
    snprintf(d, sizeof(d), "%s/lora_bad/good", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, CA_SHAPES);
    char err[1024];
    LoraModel* lm = peft_try_load_adapter(d, &g_tb.cfg, err, sizeof(err));
    TEST_CHECK(lm != NULL, "a well-formed adapter loads: %s", lm ? "" : err);
    if (lm) lora_free(lm);

    // bias="lora_only" as PEFT >= 0.7 names it (base_layer) and as older PEFT did
    const char* const* bl = CA_BIAS;
    const char* bo[6] = {ca[0], ca[1], ca[2], ca[3], "base_model.model.transformer.h.0.attn.c_attn.bias",
                         "base_model.model.transformer.h.1.attn.c_attn.bias"};
    const int64_t (*bs)[2] = CA_BIAS_SHAPES;
    for (int v = 0; v < 2; v++) {
        snprintf(d, sizeof(d), "%s/lora_bad/bias_%s", g_build, v ? "old" : "new");
        const char* cfgtext = "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"c_attn\"], \"bias\": \"lora_only\"}";
        write_adapter(d, cfgtext, 6, v ? bo : bl, bs);
        lm = peft_try_load_adapter(d, &g_tb.cfg, err, sizeof(err));
        TEST_CHECK(lm != NULL && lm->n_extra == 2, "bias lora_only adapter (%s key spelling) loads: %s", v ? "old" : "base_layer", lm ? "" : err);
        if (lm) { printf("ok   bias=lora_only adapter with %s bias keys loads\n", v ? "pre-0.7 PEFT" : "base_layer"); lora_free(lm); }
    }
    // the 1-layer adapter on this 2-layer base is right where its config says so (layers_to_transform)
    snprintf(d, sizeof(d), "%s/lora_bad/one_layer_ltt", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"layers_to_transform\": [0], \"layers_pattern\": [\"layers\", \"h\"]"), 2, ca, CA_SHAPES);
    lm = peft_try_load_adapter(d, &g_tb.cfg, err, sizeof(err));
    TEST_CHECK(lm && lm->n == 1 && lm->ad[0].layer == 0, "1-layer adapter with layers_to_transform [0] loads on layer 0: %s", lm ? "" : err);
    if (lm) { printf("ok   adapter for layer 0 only (layers_to_transform [0]) loads\n"); lora_free(lm); }
    // exclude_modules as a (plain) regular expression, target_modules as one (re.fullmatch), and
    // a full module name in target_modules (adapted whatever layers_to_transform says, as PEFT does)
    const char* cfgs[3] = {CFG("[\"c_attn\"]", 4, ", \"exclude_modules\": \"transformer.h.1.attn.c_attn\""),
                           CFG("\"transformer.h.0.attn.c_attn\"", 4, ""),
                           CFG("[\"transformer.h.0.attn.c_attn\"]", 4, ", \"layers_to_transform\": 1")};
    for (int v = 0; v < 3; v++) {
        snprintf(d, sizeof(d), "%s/lora_bad/layer0_%d", g_build, v);
        write_adapter(d, cfgs[v], 2, ca, CA_SHAPES);
        lm = peft_try_load_adapter(d, &g_tb.cfg, err, sizeof(err));
        TEST_CHECK(lm && lm->n == 1 && lm->ad[0].layer == 0, "%s: loads layer 0's c_attn only: %s", cfgs[v], lm ? "" : err);
        if (lm) { printf("ok   %s: layer 0's c_attn only\n", cfgs[v]); lora_free(lm); }
    }
    // a q/v split (rank 2 per block) saved here: the split and its trainable count come back
    snprintf(d, sizeof(d), "%s/lora_bad/split_qv", g_build);
    write_adapter_split(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, CA_SHAPES, "q,v", 0.0f);
    lm = peft_try_load_adapter(d, &g_tb.cfg, err, sizeof(err));
    TEST_CHECK(lm && lm->ad[0].blocks == 5 && lm->ad[1].blocks == 5 && lm->n_trainable == 2 * (4 * 64 + 2 * 64 * 2) &&
               lm->spec.targets == (LORA_T_Q | LORA_T_V), "q,v split adapter loads as a split: %s", lm ? "" : err);
    if (lm) { printf("ok   q,v split adapter loads as a split: %zu trainable of %zu\n", lm->n_trainable, lm->total); lora_free(lm); }
}

static void test_bad_adapters(void) {
    printf("---- bad adapters\n");
    char d[1024];
    const char* const* ca = CA;
    const int64_t (*good)[2] = CA_SHAPES;
    const char* const* bl = CA_BIAS;
    const int64_t (*bs)[2] = CA_BIAS_SHAPES;
    snprintf(d, sizeof(d), "%s/lora_bad/bias_missing", g_build);
    write_adapter(d, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"c_attn\"], \"bias\": \"all\"}", 6, bl, bs);
    expect_refused("bias all without every bias", d, "needs tensor", "ln_1.bias", "config/tensor disagreement", (const char*)NULL);

    const int64_t wrong_in[4][2] = {{4, 32}, {192, 4}, {4, 32}, {192, 4}};
    snprintf(d, sizeof(d), "%s/lora_bad/wrong_shape", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, wrong_in);
    expect_refused("wrong shape for the base", d, "wrong base model", KA(0, "attn.c_attn"), "adapter_model.safetensors", (const char*)NULL);

    const int64_t wrong_out[4][2] = {{4, 64}, {96, 4}, {4, 64}, {96, 4}};
    snprintf(d, sizeof(d), "%s/lora_bad/wrong_out", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, wrong_out);
    expect_refused("wrong output size for the base", d, "192 outputs", (const char*)NULL);

    const int64_t rank_mm[4][2] = {{4, 64}, {192, 3}, {4, 64}, {192, 4}};
    snprintf(d, sizeof(d), "%s/lora_bad/rank_mismatch", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, rank_mm);
    expect_refused("rank mismatch between A and B", d, "rank mismatch", KB(0, "attn.c_attn"), (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/unknown_target", g_build);
    write_adapter(d, CFG("[\"c_attn\", \"q_proj\"]", 4, ""), 4, ca, good);
    expect_refused("unknown target module", d, "unknown target module", "q_proj", "adapter_config.json", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/config_rank", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 8, ""), 4, ca, good);
    expect_refused("config r disagrees with the tensors", d, "config/tensor disagreement", "r = 8", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/config_targets", g_build);
    write_adapter(d, CFG("[\"c_attn\", \"c_fc\"]", 4, ""), 4, ca, good);
    expect_refused("config targets a module without tensors", d, "config/tensor disagreement", "mlp.c_fc", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/untargeted_tensor", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"layers_to_transform\": [0]"), 4, ca, good);
    expect_refused("tensor for a layer the config excludes", d, "config/tensor disagreement", "transformer.h.1.attn.c_attn", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/a_without_b", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 3, ca, good);
    expect_refused("lora_A without lora_B", d, "no matching lora_B", KA(1, "attn.c_attn"), (const char*)NULL);

    const char* deep[2] = {KA(5, "attn.c_attn"), KB(5, "attn.c_attn")};
    snprintf(d, sizeof(d), "%s/lora_bad/too_deep", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 2, deep, good);
    expect_refused("adapter for a deeper model", d, "wrong base model", "layer 5", (const char*)NULL);

    const char* odd[5] = {ca[0], ca[1], ca[2], ca[3], "base_model.model.transformer.h.0.attn.c_attn.bias"};
    const int64_t odd_s[5][2] = {{4, 64}, {192, 4}, {4, 64}, {192, 4}, {1, 192}};
    snprintf(d, sizeof(d), "%s/lora_bad/unknown_tensor", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 5, odd, odd_s);
    expect_refused("unknown tensor", d, "unknown tensor", "c_attn.bias", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/bad_json", g_build);
    write_adapter(d, "{\"r\": 4, \"lora_alpha\": 8,}", 4, ca, good);
    expect_refused("malformed adapter_config.json", d, "adapter_config.json", "JSON", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/dora", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"use_dora\": true"), 4, ca, good);
    expect_refused("a DoRA adapter without its magnitudes", d, "has no DoRA magnitude", "lora_magnitude_vector", "use_dora", (const char*)NULL);
    const char* dm[6] = {ca[0], ca[1], ca[2], ca[3], "base_model.model.transformer.h.0.attn.c_attn.lora_magnitude_vector",
                         "base_model.model.transformer.h.1.attn.c_attn.lora_magnitude_vector"};
    const int64_t dm_s[6][2] = {{4, 64}, {192, 4}, {4, 64}, {192, 4}, {192, 0}, {64, 0}};
    snprintf(d, sizeof(d), "%s/lora_bad/dora_shape", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"use_dora\": true"), 6, dm, dm_s);
    expect_refused("a DoRA magnitude of the wrong size", d, "h.1.attn.c_attn.lora_magnitude_vector", "192 outputs", (const char*)NULL);

    // PEFT fields that change which tokens or modules an adapter acts on (issue 29): refused by
    // name, not loaded as a plain LoRA (aLoRA was applied to every token) nor refused as a
    // "config/tensor disagreement"
    snprintf(d, sizeof(d), "%s/lora_bad/alora", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"alora_invocation_tokens\": [50256, 25]"), 4, ca, good);
    expect_refused("aLoRA adapter refused by name, not applied to every token", d, "\"alora_invocation_tokens\" is set", "Activated LoRA", "not supported",
                   "adapter_config.json", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/target_parameters", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"target_parameters\": [\"mlp.c_fc.weight\"]"), 4, ca, good);
    expect_refused("target_parameters refused by name, not as a config/tensor disagreement", d, "\"target_parameters\" is set", "not supported", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/lora_bias", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"lora_bias\": true"), 4, ca, good);
    expect_refused("lora_bias refused by name", d, "\"lora_bias\" is set", "a bias on lora_B", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/exclude_regex", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"exclude_modules\": \".*\\\\.c_fc\""), 4, ca, good);
    expect_refused("exclude_modules as a full regular expression", d, "exclude_modules \".*\\.c_fc\"", "regular expression", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/target_regex", g_build);
    write_adapter(d, CFG("\"transformer\\\\.h\\\\.\\\\d+\\\\.attn\\\\.c_attn\"", 4, ""), 4, ca, good);
    expect_refused("target_modules as a full regular expression", d, "target_modules", "regular expression", "list the module names", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/rank_pattern_regex", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"rank_pattern\": {\"^.*c_attn$\": 4}"), 4, ca, good);
    expect_refused("rank_pattern key beyond the plain subset", d, "rank_pattern key \"^.*c_attn$\"", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/pissa", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"init_lora_weights\": \"pissa_niter_4\""), 4, ca, good);
    expect_refused("PiSSA adapter (base weights rewritten)", d, "init_lora_weights \"pissa_niter_4\"", "path_initial_model_for_weight_conversion",
                   (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/layers_pattern", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ", \"layers_to_transform\": [0, 1], \"layers_pattern\": \"layers\""), 4, ca, good);
    expect_refused("layers_pattern of another architecture", d, "layers_pattern", "\"h\"", (const char*)NULL);
    // an adapter of a 1-layer model on this 2-layer base: the mismatch named
    snprintf(d, sizeof(d), "%s/lora_bad/one_layer", g_build);
    write_adapter(d, CFG("[\"c_attn\"]", 4, ""), 2, ca, good);
    expect_refused("1-layer adapter on a 2-layer base: the layer mismatch named", d, "layers 0-0 only", "the base model has 2 layers", "1-layer model",
                   "wrong base model", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/missing", g_build);
    expect_refused("missing directory", d, "lora_bad/missing'", "does not exist", (const char*)NULL);

    snprintf(d, sizeof(d), "%s/lora_bad/split_trained", g_build);
    write_adapter_split(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, good, "q,v", 0.5f);
    expect_refused("q,v split whose k rows of B are not zero", d, "non-zero entries outside the q/k/v blocks",
                   KB(0, "attn.c_attn"), "adapter_model.safetensors", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/split_rank", g_build);
    write_adapter_split(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, good, "q,k,v", 0.0f);
    expect_refused("q,k,v split of a rank-4 adapter", d, "does not divide the rank 4", (const char*)NULL);
    snprintf(d, sizeof(d), "%s/lora_bad/split_name", g_build);
    write_adapter_split(d, CFG("[\"c_attn\"]", 4, ""), 4, ca, good, "q,x", 0.0f);
    expect_refused("split metadata naming another block", d, PEFT_META_QKV_SPLIT, "\"q,x\"", (const char*)NULL);
}

static void test_flag_parsing(void) {
    char err[1024];
    unsigned t;
    LoraSpec spec;
    TEST_CHECK(lora_parse_targets("c_attn,foo", &t, err, sizeof(err)) != 0 && strstr(err, "'foo'"), "unknown --lora-targets entry");
    TEST_CHECK(lora_parse_targets("c_proj", &t, err, sizeof(err)) == 0 && t == (LORA_T_ATTPROJ | LORA_T_FCPROJ), "c_proj = both projections");
    TEST_CHECK(lora_parse_targets("c_attn,q", &t, err, sizeof(err)) != 0, "c_attn with q refused");
    TEST_CHECK(lora_parse_layers("0-1", 2, &spec, err, sizeof(err)) == 0 && spec.all_layers, "0-1 is all layers of a 2-layer model");
    TEST_CHECK(lora_parse_layers("1", 2, &spec, err, sizeof(err)) == 0 && !spec.all_layers && spec.layers[1] && !spec.layers[0], "layer subset");
    TEST_CHECK(lora_parse_layers("0-2", 2, &spec, err, sizeof(err)) != 0 && strstr(err, "outside"), "layer range beyond the model");
    TEST_CHECK(lora_parse_layers("1,x", 2, &spec, err, sizeof(err)) != 0, "malformed layer list");
}

// GPT-2 124M, r=8 on c_attn: 294,912 trainable parameters (12 x (8 x 768 + 2304 x 8)); the q/v split of the
// same rank has the same count (2 blocks of r=8 on 768 -> 768 instead of one on 768 -> 2304).
static void test_124M_counts(void) {
    GPT2Config cfg;
    TEST_CHECK(gpt2_config_from_descriptor(&cfg, "d12") == 0, "d12 descriptor");
    const char* targets[2] = {"c_attn", "q,v"};
    for (int i = 0; i < 2; i++) {
        LoraSpec spec;
        memset(&spec, 0, sizeof(spec));
        char err[256];
        spec.rank = 8; spec.alpha = 16;
        TEST_CHECK(lora_parse_targets(targets[i], &spec.targets, err, sizeof(err)) == 0, "%s", err);
        TEST_CHECK(lora_parse_layers("all", cfg.num_layers, &spec, err, sizeof(err)) == 0, "%s", err);
        LoraModel* lm = lora_create(&cfg, &spec);
        TEST_CHECK(lm->n_trainable == 294912, "124M r=8 %s: %zu trainable, expected 294,912", targets[i], lm->n_trainable);
        printf("ok   124M r=8 %s: %zu trainable parameters\n", targets[i], lm->n_trainable);
        lora_free(lm);
    }
}

int main(int argc, char** argv) {
    ops_init(0);
    test_gemm_dtype(argc, argv);
    const char* b = getenv("BUILD");
    // (the CPU's bf16 run writes apart from the fp32 one too)
    const char* sub = ops_gemm_dtype() == OPS_BF16 && ops_caps().floatx == OPS_F32 ? "test_lora_bf16" : tols()->out_subdir;
    snprintf(g_build, sizeof(g_build), "%s%s%s", b && *b ? b : "build", *sub ? "/" : "", sub);
    test_base_load(&g_tb, BASE_DIR);
    TEST_CHECK(g_tb.batch.valid < g_tb.batch.B * g_tb.batch.T, "the batch has masked targets (the loss is over the unmasked ones only)");

    if (test_quick()) { // one adapter set (c_attn): forward, backward, accumulation, export
        test_set(&SETS[0]);
    } else {
        for (size_t i = 0; i < sizeof(SETS) / sizeof(SETS[0]); i++) test_set(&SETS[i]);
        for (size_t i = 0; i < sizeof(DORA_SETS) / sizeof(DORA_SETS[0]); i++) test_set(&DORA_SETS[i]);
        test_config_set("exclude");
        test_config_set("patterns");
        test_dropout();
        test_good_adapters();
        test_bad_adapters();
        test_flag_parsing();
        test_124M_counts();
    }

    test_base_free(&g_tb);
    return test_finish("test_lora");
}
