// Model test of the CUDA backend (bf16 storage, fp32 accumulation, fp32 master weights): the tiny
// GPT-2 saved by transformers (test/ref/gpt2_tiny, dev/gen_gpt2_ref.py) must give transformers'
// logits, loss and every parameter gradient, and 10 AdamW steps the losses of torch.optim.AdamW,
// within bf16 tolerances. Same reference files as the CPU backend's test/test_gpt2.c.
//
// Two builds of this one source (mk/cudamodel.mk):
// - CI: g++ under the CUDA-on-CPU harness (-DLLMC_CUDA_EMULATED, GEMMs routed to the CPU BLAS on
//   bf16-rounded inputs): every kernel of the forward, backward and AdamW runs, with the whole
//   model code (gpt2.c, linear.c, optimizer.c, model_io.c) compiled for the CUDA backend.
// - GPU: `make test-gpt2-gpu` (nvcc objects, cuBLASLt), same tolerances.
//
// Tolerances (bf16 has an 8-bit mantissa: one rounding is a relative error up to 2^-9 = 0.2%;
// every activation is rounded once per op, so errors grow with depth). All of them are measured
// relative to the largest magnitude of the reference tensor (elementwise relative errors of
// values near zero are meaningless after bf16 rounding):
//   logits                 max |ours - ref| <= 2e-2 * max|ref|    (measured under the harness: 6.3e-3)
//   loss                   |ours - ref| <= 5e-3 nats              (measured: 1.3e-5)
//   every gradient tensor  max |ours - ref| <= 2.5e-2 * max|ref|  (measured worst: 9.1e-3, ln_1.weight)
//   10 AdamW step losses   |ours - ref| <= 5e-3 each              (measured worst: 7.2e-4)
//   10 step grad norms     relative 2e-2                          (measured worst: 3.9e-3)
// i.e. about 3x the harness' errors: a GPU rounds in other places (cuBLASLt's accumulation order,
// FMA contraction) but with the same bf16 storage, so its errors are of the same size.
#include "test.h"
#include "../llmc/gpt2.h"
#include "../llmc/model_io.h"
#include "../llmc/optimizer.h"
#include "../llmc/safetensors.h"
#include "../llmc/check.h"

#define REF_DIR "test/ref/gpt2_tiny"
static const double TOL_LOGITS = 2e-2, TOL_LOSS = 5e-3, TOL_GRAD = 2.5e-2, TOL_STEP_LOSS = 5e-3, TOL_NORM = 2e-2;

static float* read_ref(StFile* f, const char* name, size_t* n) {
    const StTensor* t = st_find(f, name);
    if (!t) { fprintf(stderr, "reference tensor %s missing\n", name); exit(1); }
    float* buf = (float*)mallocCheck(t->numel * sizeof(float));
    st_read_f32(f, t, buf);
    if (n) *n = t->numel;
    return buf;
}

static double max_abs(const float* x, size_t n) {
    double m = 0; for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

// max |a - b| / max |b|: the figure the tolerances above bound
static double rel_to_max(const float* a, const float* b, size_t n) {
    double d = 0; for (size_t i = 0; i < n; i++) { double e = fabs((double)a[i] - (double)b[i]); if (!(e <= d)) d = e; }
    double m = max_abs(b, n);
    return m > 0 ? d / m : d;
}

// Every parameter gradient of m against transformers'; returns the worst error relative to max |ref|.
static double check_grads(GPT2* mp, const ParamTable* ptp, const GPT2Config* cfgp, StFile* refp, char* worst_key_out, size_t wk) {
    GPT2& m = *mp; const ParamTable& pt = *ptp; const GPT2Config& cfg = *cfgp; StFile& ref = *refp;
    const int V = cfg.vocab_size;
    double worst = 0; char worst_key[300] = "";
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &pt.t[id];
        int layers = p->per_layer ? cfg.num_layers : 1;
        size_t rows = id == PT_WTE ? (size_t)V : p->rows, cols = p->cols;
        size_t ln = params_layer_numel(&pt, (ParamId)id);
        float* ours = (float*)mallocCheck(rows * cols * sizeof(float));
        float* gl = (float*)mallocCheck(ln * sizeof(float));
        for (int l = 0; l < layers; l++) {
            char key[256], gkey[300];
            params_hf_key(key, sizeof(key), (ParamId)id, l, "transformer.");
            snprintf(gkey, sizeof(gkey), "grad.%s", key);
            size_t n;
            float* want = read_ref(&ref, gkey, &n);
            TEST_CHECK(n == rows * cols, "%s size", gkey);
            ops_download_f32(gl, m.g[id] + (size_t)l * ln, ln);
            // HF Conv1D weights are [in, out]; ours are [out, in]
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++)
                    ours[p->hf_transposed ? c * rows + r : r * cols + c] = gl[r * cols + c];
            if (id == PT_WTE) // the padding rows of the vocabulary never get a gradient
                for (size_t i = (size_t)V * cols; i < p->rows * cols; i++) TEST_CHECK(gl[i] == 0.0f, "wte padding grad");
            double e = rel_to_max(ours, want, n);
            if (e > worst) { worst = e; snprintf(worst_key, sizeof(worst_key), "%s", gkey); }
            test_allclose(gkey, ours, want, n, 0.0, TOL_GRAD * max_abs(want, n));
            free(want);
        }
        free(ours); free(gl);
    }
    snprintf(worst_key_out, wk, "%s", worst_key);
    return worst;
}

int main(void) {
    ops_init(0);
    printf("backend: %s\n", ops_backend_name());
    GPT2Config cfg; ParamTable pt; float* host = NULL;
    model_load(REF_DIR, &cfg, &pt, &host);
    StFile ref;
    st_open(&ref, REF_DIR "/ref.safetensors");
    const StTensor* ti = st_find(&ref, "input_ids");
    TEST_CHECK(ti && ti->ndim == 2, "input_ids shape");
    const int B = (int)ti->shape[0], T = (int)ti->shape[1], V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    int* inputs = (int*)mallocCheck((size_t)B * T * sizeof(int));
    int* targets = (int*)mallocCheck((size_t)B * T * sizeof(int));
    st_read_i32(&ref, ti, inputs);
    st_read_i32(&ref, st_find(&ref, "targets"), targets);

    GPT2 m;
    gpt2_init(&m, &cfg, GPT2_TRAIN_ALL);
    gpt2_set_params(&m, host);
    gpt2_alloc_acts(&m, B, T);

    // ---- logits (forward without targets)
    gpt2_forward(&m, inputs, NULL, B, T, 0.0f, NULL);
    size_t nl;
    float* ref_logits = read_ref(&ref, "logits", &nl);
    TEST_CHECK(nl == (size_t)B * T * V, "logits size");
    float* logits = (float*)mallocCheck(nl * sizeof(float));
    float* lp = (float*)mallocCheck((size_t)B * T * Vp * sizeof(float));
    ops_download_f32(lp, m.acts.logits, (size_t)B * T * Vp);
    for (int i = 0; i < B * T; i++) memcpy(logits + (size_t)i * V, lp + (size_t)i * Vp, V * sizeof(float));
    printf("logits: max error %.3g of max |ref|\n", rel_to_max(logits, ref_logits, nl));
    test_allclose("logits", logits, ref_logits, nl, 0.0, TOL_LOGITS * max_abs(ref_logits, nl));

    // ---- loss and gradients
    long valid = 0;
    for (int i = 0; i < B * T; i++) valid += targets[i] >= 0;
    long n_valid = 0;
    gpt2_zero_grads(&m);
    double loss_sum = gpt2_forward(&m, inputs, targets, B, T, 1.0f / (float)valid, &n_valid);
    TEST_CHECK(n_valid == valid, "valid target count %ld vs %ld", n_valid, valid);
    float loss = (float)(loss_sum / (double)n_valid);
    float* ref_loss = read_ref(&ref, "loss", NULL);
    printf("loss %.7f (transformers %.7f, error %.3g)\n", loss, ref_loss[0], fabs((double)loss - ref_loss[0]));
    TEST_CHECK(fabs((double)loss - ref_loss[0]) <= TOL_LOSS, "loss %.7f vs transformers %.7f", loss, ref_loss[0]);
    gpt2_backward(&m);
    char worst_key[300];
    double worst = check_grads(&m, &pt, &cfg, &ref, worst_key, sizeof(worst_key));
    printf("gradients: worst error %.3g of max |ref| (%s)\n", worst, worst_key);

    // ---- the same loss and gradients with activation recompute level 2 (GELU and layernorms
    // recomputed in backward by the GELU / layernorm kernels instead of kept from the forward)
    {
        GPT2 mr;
        gpt2_init(&mr, &cfg, GPT2_TRAIN_ALL);
        gpt2_set_params(&mr, host);
        gpt2_set_recompute(&mr, GPT2_RECOMPUTE_LN);
        gpt2_alloc_acts(&mr, B, T);
        TEST_CHECK(mr.act_bytes < m.act_bytes, "recompute 2 does not shrink the activations");
        gpt2_zero_grads(&mr);
        long nvr = 0;
        double lr_sum = gpt2_forward(&mr, inputs, targets, B, T, 1.0f / (float)valid, &nvr);
        gpt2_backward(&mr);
        double lr_err = fabs(lr_sum / (double)nvr - ref_loss[0]);
        TEST_CHECK(lr_err <= TOL_LOSS, "recompute 2: loss error %.3g", lr_err);
        char wk[300];
        double wr = check_grads(&mr, &pt, &cfg, &ref, wk, sizeof(wk));
        printf("recompute 2: loss error %.3g, gradients: worst error %.3g of max |ref| (%s)\n", lr_err, wr, wk);
        gpt2_free(&mr);
    }

    // ---- 10 AdamW steps (fp32 master weights, stochastic rounding to bf16), hyperparameters as
    // stated in the reference's metadata
    float lr = (float)atof(st_meta(&ref, "lr")), b1 = (float)atof(st_meta(&ref, "beta1"));
    float b2 = (float)atof(st_meta(&ref, "beta2")), eps = (float)atof(st_meta(&ref, "eps"));
    float wd = (float)atof(st_meta(&ref, "weight_decay")), clip = (float)atof(st_meta(&ref, "grad_clip"));
    int steps = atoi(st_meta(&ref, "steps"));
    size_t ns;
    float* ref_losses = read_ref(&ref, "train_losses", &ns);
    float* ref_norms = read_ref(&ref, "train_grad_norms", NULL);
    TEST_CHECK((int)ns == steps, "train_losses length");
    TrainSeg segs[NUM_PARAM_TENSORS];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        segs[i].name = pt.t[i].name; segs[i].p = m.p[i]; segs[i].g = m.g[i];
        segs[i].n = pt.t[i].numel; segs[i].weight_decay = pt.t[i].weight_decay;
    }
    Optimizer opt;
    opt_init(&opt, segs, NUM_PARAM_TENSORS, 0, (size_t)-1);
    TEST_CHECK(opt.master != NULL, "the CUDA backend keeps fp32 master weights");
    float* losses = (float*)mallocCheck((size_t)steps * sizeof(float));
    float* norms = (float*)mallocCheck((size_t)steps * sizeof(float));
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; s < steps; s++) {
        gpt2_zero_grads(&m);
        long nv = 0;
        double ls = gpt2_forward(&m, inputs, targets, B, T, 1.0f / (float)valid, &nv);
        gpt2_backward(&m);
        double norm = sqrt(opt_grad_sumsq(&opt, 0, opt.total));
        opt_step(&opt, lr, b1, b2, eps, wd, opt_clip_scale(norm, clip), 1234u + (uint32_t)s);
        losses[s] = (float)(ls / (double)nv);
        norms[s] = (float)norm;
        worst_loss = fmax(worst_loss, fabs((double)losses[s] - ref_losses[s]));
        worst_norm = fmax(worst_norm, fabs((double)norms[s] - ref_norms[s]) / ref_norms[s]);
        printf("step %d: loss %.6f (ref %.6f) norm %.6f (ref %.6f)\n", s, losses[s], ref_losses[s], norms[s], ref_norms[s]);
    }
    printf("AdamW steps: worst loss error %.3g, worst relative norm error %.3g\n", worst_loss, worst_norm);
    test_allclose("10 AdamW step losses", losses, ref_losses, (size_t)steps, 0.0, TOL_STEP_LOSS);
    test_allclose("10 AdamW step grad norms", norms, ref_norms, (size_t)steps, TOL_NORM, 0.0);

    opt_free(&opt);
    gpt2_free(&m);
    st_close(&ref);
    free(host); free(inputs); free(targets); free(ref_logits); free(logits); free(lp); free(ref_loss);
    free(ref_losses); free(ref_norms); free(losses); free(norms);
    return test_finish("test_gpt2.cu");
}
