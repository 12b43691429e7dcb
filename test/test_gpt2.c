// Model test: a tiny GPT-2 saved by transformers (test/ref/gpt2_tiny, made by
// dev/gen_gpt2_ref.py) must give transformers' logits, loss and every parameter gradient, and
// 10 AdamW steps must give the same losses as torch.optim.AdamW.
#include "test.h"
#include "ref.h"
#include "../llmc/gpt2.h"
#include "../llmc/model_io.h"
#include "../llmc/optimizer.h"
#include "../llmc/safetensors.h"
#include "../llmc/check.h"

#define REF_DIR "test/ref/gpt2_tiny"


int main(void) {
    ops_init(0);
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
    float* ref_logits = ref_read(&ref, "logits", &nl);
    TEST_CHECK(nl == (size_t)B * T * V, "logits size");
    float* logits = (float*)mallocCheck(nl * sizeof(float));
    float* lp = (float*)mallocCheck((size_t)B * T * Vp * sizeof(float));
    ops_download_f32(lp, m.acts.logits, (size_t)B * T * Vp);
    for (int i = 0; i < B * T; i++) memcpy(logits + (size_t)i * V, lp + (size_t)i * Vp, V * sizeof(float));
    test_allclose("logits", logits, ref_logits, nl, 1e-4, 1e-4 * ref_max_abs(ref_logits, nl));

    // ---- loss and gradients
    long valid = 0;
    for (int i = 0; i < B * T; i++) valid += targets[i] >= 0;
    long n_valid = 0;
    gpt2_zero_grads(&m);
    double loss_sum = gpt2_forward(&m, inputs, targets, B, T, 1.0f / (float)valid, &n_valid);
    TEST_CHECK(n_valid == valid, "valid target count %ld vs %ld", n_valid, valid);
    float loss = (float)(loss_sum / (double)n_valid);
    float* ref_loss = ref_read(&ref, "loss", NULL);
    TEST_CHECK(fabsf(loss - ref_loss[0]) < 1e-5f, "loss %.7f vs transformers %.7f", loss, ref_loss[0]);
    printf("loss %.7f (transformers %.7f)\n", loss, ref_loss[0]);
    gpt2_backward(&m);
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &pt.t[id];
        int layers = p->per_layer ? cfg.num_layers : 1;
        size_t rows = id == PT_WTE ? (size_t)V : p->rows, cols = p->cols;
        float* ours = (float*)mallocCheck(rows * cols * sizeof(float));
        for (int l = 0; l < layers; l++) {
            char key[256], gkey[300];
            params_hf_key(key, sizeof(key), (ParamId)id, l, "transformer.");
            snprintf(gkey, sizeof(gkey), "grad.%s", key);
            size_t n;
            float* want = ref_read(&ref, gkey, &n);
            TEST_CHECK(n == rows * cols, "%s size", gkey);
            float* gl = (float*)mallocCheck(params_layer_numel(&pt, (ParamId)id) * sizeof(float));
            ops_download_f32(gl, m.g[id] + (size_t)l * params_layer_numel(&pt, (ParamId)id), params_layer_numel(&pt, (ParamId)id));
            // HF Conv1D weights are [in, out]; ours are [out, in]
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++)
                    ours[p->hf_transposed ? c * rows + r : r * cols + c] = gl[r * cols + c];
            if (id == PT_WTE) // the padding rows of the vocabulary never get a gradient
                for (size_t i = (size_t)V * cols; i < p->rows * cols; i++) TEST_CHECK(gl[i] == 0.0f, "wte padding grad");
            test_allclose(gkey, ours, want, n, 1e-4, 1e-4 * ref_max_abs(want, n));
            free(want); free(gl);
        }
        free(ours);
    }

    // ---- 10 AdamW steps, hyperparameters as stated in the reference's metadata
    float lr = (float)atof(st_meta(&ref, "lr")), b1 = (float)atof(st_meta(&ref, "beta1"));
    float b2 = (float)atof(st_meta(&ref, "beta2")), eps = (float)atof(st_meta(&ref, "eps"));
    float wd = (float)atof(st_meta(&ref, "weight_decay")), clip = (float)atof(st_meta(&ref, "grad_clip"));
    int steps = atoi(st_meta(&ref, "steps"));
    size_t ns;
    float* ref_losses = ref_read(&ref, "train_losses", &ns);
    float* ref_norms = ref_read(&ref, "train_grad_norms", NULL);
    TEST_CHECK((int)ns == steps, "train_losses length");
    TrainSeg segs[NUM_PARAM_TENSORS];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        segs[i].name = pt.t[i].name; segs[i].p = m.p[i]; segs[i].g = m.g[i];
        segs[i].n = pt.t[i].numel; segs[i].weight_decay = pt.t[i].weight_decay;
    }
    Optimizer opt;
    opt_init(&opt, segs, NUM_PARAM_TENSORS, 0, (size_t)-1);
    float* losses = (float*)mallocCheck((size_t)steps * sizeof(float));
    float* norms = (float*)mallocCheck((size_t)steps * sizeof(float));
    for (int s = 0; s < steps; s++) {
        gpt2_zero_grads(&m);
        long nv = 0;
        double ls = gpt2_forward(&m, inputs, targets, B, T, 1.0f / (float)valid, &nv);
        gpt2_backward(&m);
        double norm = sqrt(opt_grad_sumsq(&opt, 0, opt.total));
        opt_step(&opt, lr, b1, b2, eps, wd, opt_clip_scale(norm, clip), 1234);
        losses[s] = (float)(ls / (double)nv);
        norms[s] = (float)norm;
        printf("step %d: loss %.6f (ref %.6f) norm %.6f (ref %.6f)\n", s, losses[s], ref_losses[s], norms[s], ref_norms[s]);
    }
    test_allclose("10 AdamW step losses", losses, ref_losses, (size_t)steps, 0.0, 1e-4);
    test_allclose("10 AdamW step grad norms", norms, ref_norms, (size_t)steps, 1e-4, 1e-5);

    opt_free(&opt);
    gpt2_free(&m);
    st_close(&ref);
    free(host); free(inputs); free(targets); free(ref_logits); free(logits); free(lp); free(ref_loss);
    free(ref_losses); free(ref_norms); free(losses); free(norms);
    return test_finish("test_gpt2");
}
