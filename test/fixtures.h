// Fixtures shared by the model tests (test_gpt2, test_recompute, test_lora, test_qlora): a base
// model with the batch of its reference file, models assembled on weights in memory
// (llmc/model/model.h), the reference's AdamW training loop, and LoRA gradients checked against PEFT.
// The references come from the dev/ generators (transformers, PEFT, bitsandbytes).
#ifndef LLMC_TEST_FIXTURES_H
#define LLMC_TEST_FIXTURES_H

#include "test.h"
#include "ref.h"
#include "../llmc/model/model.h"
#include "../llmc/model/model_io.h"
#include "../llmc/model/loss_scale.h"
#include "../llmc/model/optimizer.h"
#include "../llmc/model/peft_io.h"

// A base model (fp32 weights in table layout) and the batch of DIR/ref.safetensors.
typedef struct {
    GPT2Config cfg;
    ParamTable pt;
    float* weights;
    RefBatch batch;
} TestBase;

static inline void test_base_load(TestBase* tb, const char* dir) {
    char path[1024];
    model_load(dir, &tb->cfg, &tb->pt, &tb->weights);
    snprintf(path, sizeof(path), "%s/ref.safetensors", dir);
    StFile f;
    st_open(&f, path);
    tb->batch = ref_read_batch(&f);
    st_close(&f);
}

static inline void test_base_free(TestBase* tb) {
    free(tb->weights); free(tb->batch.inputs); free(tb->batch.targets);
}

// The model tests run as built (the CPU backend: fp32 GEMMs) or, with "bf16" as their argument,
// with the CPU backend's bf16 GEMMs and, for adapters, the frozen base held in bf16: what
// --dtype bf16 runs (test/test_cpu_bf16.sh). Then they take the CUDA backend's bf16 tolerances.
static inline void test_gemm_dtype(int argc, char** argv) {
    if (argc < 2) return;
    if (argc > 2 || strcmp(argv[1], "bf16") != 0)
        fatal("run a model test without arguments, or with bf16", "unknown arguments starting at '%s'", argv[1]);
    ops_set_gemm_dtype(OPS_BF16);
}
// 1 when the model computes in bf16: bf16 storage (CUDA) or bf16 GEMMs (the CPU's bf16 mode).
static inline int test_is_bf16(void) { return ops_caps().floatx == OPS_BF16 || ops_gemm_dtype() == OPS_BF16; }

// The start of a model test: the backend (bf16 GEMMs with the argument "bf16"), the base model of
// dir and its reference file dir/ref.safetensors.
static inline void test_model_start(int argc, char** argv, const char* dir, TestBase* tb, StFile* ref) {
    ops_init(0);
    test_gemm_dtype(argc, argv);
    printf("backend: %s\n", ops_backend_name());
    test_base_load(tb, dir);
    char path[1024];
    snprintf(path, sizeof(path), "%s/ref.safetensors", dir);
    st_open(ref, path);
}

// A model on weights in table layout, with gradients for `trainable` (plus what the adapters
// train), activations for the base's batch, adapters lm (kept by the caller; may be NULL), NF4
// linear weights with qlora.
static inline void test_model(Model* m, const TestBase* tb, const float* weights, unsigned trainable, LoraModel* lm,
                              int qlora, int recompute) {
    ModelSpec s;
    memset(&s, 0, sizeof(s));
    s.cfg = &tb->cfg; s.host = weights;
    s.trainable = trainable; s.lora = lm; s.qlora = qlora; s.recompute = recompute;
    s.base_bf16 = ops_gemm_dtype() == OPS_BF16;
    s.B = tb->batch.B; s.T = tb->batch.T;
    model_assemble(m, &s);
}

// The logits (eval, no targets) of a model on weights with the adapters lm (may be NULL) for the
// base's batch, unpadded (malloc'd).
static inline float* test_batch_logits(const TestBase* tb, const float* weights, LoraModel* lm) {
    Model m;
    test_model(&m, tb, weights, 0, lm, 0, 0);
    gpt2_forward(&m.gpt, tb->batch.inputs, NULL, NULL, tb->batch.B, tb->batch.T, 0.0f, NULL);
    float* logits = ref_logits_unpadded(&m.gpt, tb->batch.B * tb->batch.T);
    model_free(&m);
    return logits;
}

// ---- the reference's training loop: `steps` AdamW steps on one batch, the hyperparameters in the
// reference file's metadata, the losses and gradient norms (before clipping) as it recorded them.
typedef struct { float lr, beta1, beta2, eps, weight_decay, grad_clip; int steps; } RefAdamW;

static inline RefAdamW ref_adamw(StFile* ref) {
    RefAdamW h;
    h.lr = (float)atof(st_meta(ref, "lr")); h.beta1 = (float)atof(st_meta(ref, "beta1"));
    h.beta2 = (float)atof(st_meta(ref, "beta2")); h.eps = (float)atof(st_meta(ref, "eps"));
    h.weight_decay = (float)atof(st_meta(ref, "weight_decay")); h.grad_clip = (float)atof(st_meta(ref, "grad_clip"));
    h.steps = atoi(st_meta(ref, "steps"));
    return h;
}

// Trains m's trainable parameters (the optimizer segments of llmc/model/model.h) for h->steps steps;
// losses and norms get h->steps entries. With ls, the loss is scaled and a step whose gradients
// overflow is skipped, as the trainer does with --dtype fp16 (loss_scale_step; norms are of the
// unscaled gradients, inf or NaN on a skipped step); scales and skipped (may be NULL) get each
// step's scale and whether it was skipped. Returns 1 if the optimizer kept fp32 master weights.
static inline int ref_train_scaled(Model* m, const RefBatch* b, const RefAdamW* h, LossScale* ls, float* losses, float* norms,
                                   float* scales, int* skipped) {
    TrainSeg* segs = (TrainSeg*)mallocCheck((size_t)model_max_segments(m) * sizeof(TrainSeg));
    int nseg = model_segments(m, segs);
    Optimizer opt;
    opt_init(&opt, segs, nseg, 0, (size_t)-1);
    free(segs);
    const int had_master = opt.master != NULL;
    for (int s = 0; s < h->steps; s++) {
        gpt2_zero_grads(&m->gpt);
        long nv = 0;
        const float scale = ls ? ls->scale : 1.0f;
        double lsum = gpt2_forward(&m->gpt, b->inputs, b->targets, NULL, b->B, b->T, scale / (float)b->valid, &nv);
        gpt2_backward(&m->gpt, NULL);
        double norm = sqrt(opt_grad_sumsq(&opt, 0, opt.total));
        float unscale = 1.0f;
        const int run = ls ? loss_scale_step(ls, !isfinite(lsum), &norm, &unscale) : 1;
        if (run) opt_step(&opt, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, opt_clip_scale(norm, h->grad_clip) * unscale,
                          1234u + (uint32_t)s);
        losses[s] = (float)(lsum / (double)nv);
        norms[s] = (float)norm;
        if (scales) scales[s] = scale;
        if (skipped) skipped[s] = !run;
    }
    opt_free(&opt);
    return had_master;
}

static inline int ref_train(Model* m, const RefBatch* b, const RefAdamW* h, float* losses, float* norms) {
    return ref_train_scaled(m, b, h, NULL, losses, norms, NULL, NULL);
}

// The losses (absolute tolerance) and gradient norms (relative) against the reference's
// train_losses / train_grad_norms.
static inline void ref_check_train(const char* what, StFile* ref, const float* losses, const float* norms, int steps,
                                   double loss_atol, double norm_rtol) {
    size_t ns;
    float* want_l = ref_read(ref, "train_losses", &ns);
    float* want_n = ref_read(ref, "train_grad_norms", NULL);
    char w[400];
    TEST_CHECK((int)ns == steps, "%s: train_losses has %zu steps, the run %d", what, ns, steps);
    printf("%s: %d steps: loss %.6f -> %.6f (reference %.6f -> %.6f)\n", what, steps, losses[0], losses[steps - 1], want_l[0], want_l[steps - 1]);
    snprintf(w, sizeof(w), "%s %d AdamW step losses", what, steps);
    test_allclose(w, losses, want_l, (size_t)steps, 0.0, loss_atol);
    double worst = 0;
    for (int s = 0; s < steps; s++) worst = fmax(worst, fabs((double)norms[s] - want_n[s]) / want_n[s]);
    printf("%s: %d steps: worst relative grad norm error %.3g\n", what, steps, worst);
    snprintf(w, sizeof(w), "%s %d AdamW step grad norms", what, steps);
    test_allclose(w, norms, want_n, (size_t)steps, norm_rtol, 1e-6);
    free(want_l); free(want_n);
}

// ---- LoRA: every lora_A / lora_B gradient (DoRA's magnitude too; and, with_base, those of the trained base slices in
// the model the adapters are on) against <prefix><PEFT key> of the reference ("grad." or
// "accum.grad."), each element within rtol * |ref| + atol_frac * max |ref| (+ 1e-7); prints the
// worst error relative to max |ref|.

// max |a - b| / max |b|, kept in *worst (and its tensor's name in key) when it is the largest yet
static inline void ref_note_error(const float* a, const float* b, size_t n, const char* what, double* worst, char* key, size_t kn) {
    double d = 0;
    for (size_t i = 0; i < n; i++) { double e = fabs((double)a[i] - (double)b[i]); if (!(e <= d)) d = e; }
    double mx = ref_max_abs(b, n), r = mx > 0 ? d / mx : d;
    if (!(r <= *worst)) { *worst = r; snprintf(key, kn, "%s", what); }
}

static inline void ref_check_lora_grads(const char* set, LoraModel* lm, int with_base, StFile* ref, const char* prefix,
                                        double rtol, double atol_frac) {
    double worst = 0;
    char worst_key[320] = "";
    float* g = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_grads(lm, g);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        for (int w = 0; w < (lm->spec.dora ? 3 : 2); w++) { // lora_A, lora_B, DoRA's magnitude
            char key[256], what[384];
            if (w == 2) snprintf(key, sizeof(key), "%s" LORA_KEY_PREFIX "%d.%s.lora_magnitude_vector", prefix, a->layer, lora_module_name(a->lin));
            else snprintf(key, sizeof(key), "%s" LORA_KEY_PREFIX "%d.%s.lora_%c.weight", prefix, a->layer, lora_module_name(a->lin), w ? 'B' : 'A');
            size_t n;
            float* want = ref_read(ref, key, &n);
            const size_t off = w == 0 ? a->a_off : w == 1 ? a->b_off : a->m_off;
            TEST_CHECK(n == (w == 2 ? (size_t)a->out : (size_t)a->rank * (w ? a->out : a->in)), "%s size", key);
            snprintf(what, sizeof(what), "%s %s", set, key);
            test_allclose(what, g + off, want, n, rtol, atol_frac * ref_max_abs(want, n) + 1e-7);
            ref_note_error(g + off, want, n, key, &worst, worst_key, sizeof(worst_key));
            free(want);
        }
    }
    free(g);
    for (int i = 0; with_base && i < lm->n_extra; i++) { // trained base slices (PEFT bias= / modules_to_save)
        const LoraExtra* e = &lm->extra[i];
        char key[320], what[448]; // (the prefix and the tensor name: up to 159 bytes each)
        snprintf(key, sizeof(key), "%s%s", prefix, e->key);
        size_t n;
        float* want = ref_read(ref, key, &n);
        size_t ln = params_layer_numel(&lm->pt, e->id);
        TEST_CHECK(n == ln, "%s size", key);
        float* ours = (float*)mallocCheck(ln * sizeof(float));
        ops_download_f32(ours, e->g, ln);
        snprintf(what, sizeof(what), "%s %s", set, key);
        test_allclose(what, ours, want, n, rtol, atol_frac * ref_max_abs(want, n) + 1e-7);
        ref_note_error(ours, want, n, key, &worst, worst_key, sizeof(worst_key));
        free(want); free(ours);
    }
    printf("%s: gradients: worst error %.3g of max |ref| (%s)\n", set, worst, worst_key);
}

#endif // LLMC_TEST_FIXTURES_H
