// Model test, one source for both backends: the tiny GPT-2 saved by transformers
// (test/ref/gpt2_tiny, dev/gen_gpt2_ref.py) must give transformers' logits, loss and every
// parameter gradient (also with activation recompute level 2), and 10 AdamW steps the losses of
// torch.optim.AdamW.
//
// Builds: test/test_gpt2.c as C on the CPU backend (fp32); test/test_gpt2.cu includes this file
// for the CUDA backend (bf16 storage, fp32 accumulation and master weights), run in CI under the
// CUDA-on-CPU harness (GEMMs routed to the CPU BLAS on bf16-rounded inputs) and, with
// test_gpt2_gpu (`make BACKEND=cuda gpu-tests`, mk/cuda.mk), on a real GPU.
//
// Tolerances. Errors are measured relative to the largest magnitude of each reference tensor
// (elementwise relative errors of values near zero are meaningless after bf16 rounding).
//   fp32 (CPU): logits and gradients 1e-4 * max|ref| (+ 1e-4 relative), loss 1e-5, the 10 step
//     losses 1e-4, grad norms 1e-4 relative. Measured: about 1e-8 .. 5e-7.
//   bf16 (CUDA): one rounding is a relative error up to 2^-9 and every activation is rounded once
//     per op, so: logits 2e-2 * max|ref| (measured under the harness 6.3e-3), loss 5e-3 nats
//     (1.3e-5), every gradient 2.5e-2 * max|ref| (worst 9.1e-3, ln_1.weight), step losses 5e-3
//     (7.2e-4), grad norms 2e-2 relative (3.9e-3): about 3x the harness' errors, since a GPU rounds
//     in other places (cuBLASLt's accumulation order, FMA contraction) with the same storage.
#include "fixtures.h"
#include "../llmc/base/gguf.h"
#include "../llmc/ops/device.h"

#define REF_DIR "test/ref/gpt2_tiny"
// tolerances by the backend's element type: fp32 (CPU) or bf16 storage (CUDA)
typedef struct { double logits, rel, loss, grad, step_loss, norm; } Tols;
static const Tols TOL_BF16 = { 2e-2, 0.0, 5e-3, 2.5e-2, 5e-3, 2e-2 };
static const Tols TOL_F32 = { 1e-4, 1e-4, 1e-5, 1e-4, 1e-4, 1e-4 };
static const Tols* tols(void) { return test_is_bf16() ? &TOL_BF16 : &TOL_F32; }

// max |a - b| / max |b|: the figure the tolerances above bound
static double rel_to_max(const float* a, const float* b, size_t n) {
    double d = 0; for (size_t i = 0; i < n; i++) { double e = fabs((double)a[i] - (double)b[i]); if (!(e <= d)) d = e; }
    double m = ref_max_abs(b, n);
    return m > 0 ? d / m : d;
}

// Every parameter gradient of m against transformers'; returns the worst error relative to max |ref|.
static double check_grads(GPT2* mp, const ParamTable* ptp, const GPT2Config* cfgp, StFile* refp, char* worst_key_out, size_t wk) {
    const int V = cfgp->vocab_size;
    double worst = 0; char worst_key[300] = "";
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &ptp->t[id];
        int layers = p->per_layer ? cfgp->num_layers : 1;
        size_t rows = id == PT_WTE ? (size_t)V : p->rows, cols = p->cols;
        size_t ln = params_layer_numel(ptp, (ParamId)id);
        float* ours = (float*)mallocCheck(rows * cols * sizeof(float));
        float* gl = (float*)mallocCheck(ln * sizeof(float));
        for (int l = 0; l < layers; l++) {
            char key[256], gkey[300];
            params_hf_key(key, sizeof(key), (ParamId)id, l, "transformer.");
            snprintf(gkey, sizeof(gkey), "grad.%s", key);
            size_t n;
            float* want = ref_read(refp, gkey, &n);
            TEST_CHECK(n == rows * cols, "%s size", gkey);
            ops_download_f32(gl, mp->g[id] + (size_t)l * ln, ln);
            // HF Conv1D weights are [in, out]; ours are [out, in]
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++)
                    ours[p->hf_transposed ? c * rows + r : r * cols + c] = gl[r * cols + c];
            if (id == PT_WTE) // the padding rows of the vocabulary never get a gradient
                for (size_t i = (size_t)V * cols; i < p->rows * cols; i++) TEST_CHECK(gl[i] == 0.0f, "wte padding grad");
            double e = rel_to_max(ours, want, n);
            if (e > worst) { worst = e; snprintf(worst_key, sizeof(worst_key), "%s", gkey); }
            test_allclose(gkey, ours, want, n, tols()->rel, tols()->grad * ref_max_abs(want, n));
            free(want);
        }
        free(ours); free(gl);
    }
    snprintf(worst_key_out, wk, "%s", worst_key);
    return worst;
}

// The attention's scratch as the op interface counts it, independently: the CPU backend's K^T
// copy (B C floats a position, T rounded up to 64), the CUDA backend's backward scratch of
// llmc/cuda/README.md ("Flash attention", Memory): the D and lse rows (8 bytes a head and position,
// padded to 64 positions) and, deterministic (the default), nt (nt + 1) / 2 dS tiles of 64 x 64
// bf16 a head (nt = T / 64 rounded up; far below the 256 MiB cap here).
static size_t want_attn_scratch(int B, int T, int C, int NH) {
    const size_t Tp = (size_t)(T + 63) / 64 * 64, nt = Tp / 64;
    if (ops_caps().floatx == OPS_F32) return (size_t)B * C * Tp * sizeof(float);
    return 8 * (size_t)B * NH * Tp + (size_t)B * NH * nt * (nt + 1) / 2 * 64 * 64 * 2;
}

// The activations' memory: what gpt2_acts_bytes counts before anything is allocated (the
// trainers' device memory check) is what the model then holds (gpt2_acts_held: the memory
// report), the attention's training scratch included; and under the CUDA-on-CPU harness, which
// counts every byte cudaMalloc hands out (cudaMemGetInfo), it is what the device lost to
// model_alloc_acts, which therefore took the attention backward's scratch up front. First in the
// program: the attention's scratch buffer is still empty, so reserving it allocates all of it.
static void check_acts_memory(const TestBase* tb) {
    const GPT2Config* cfg = &tb->cfg;
    const int B = tb->batch.B, T = tb->batch.T, C = cfg->channels, NH = cfg->num_heads;
    Model mm;
    ModelSpec s;
    memset(&s, 0, sizeof(s));
    s.cfg = cfg; s.host = tb->weights; s.trainable = GPT2_TRAIN_ALL;
    model_assemble(&mm, &s);   // B = 0: no activations yet
    size_t free0 = 0, free1 = 0, total = 0;
    const int known = device_memory(&free0, &total);
    model_alloc_acts(&mm, B, T, 1);
    if (known) device_memory(&free1, &total);
    const size_t want = gpt2_acts_bytes(cfg, B, T, GPT2_RECOMPUTE_NONE, 1);
    const size_t attn = attention_scratch_bytes(B, T, C, NH, 1), attn_fwd = attention_scratch_bytes(B, T, C, NH, 0);
    TEST_CHECK(gpt2_acts_held(&mm.gpt) == want, "the model holds %zu bytes of activations, gpt2_acts_bytes counted %zu",
               gpt2_acts_held(&mm.gpt), want);
    TEST_CHECK(attn == want_attn_scratch(B, T, C, NH) && mm.gpt.attn_bytes == attn,
               "attention scratch %zu bytes (the model: %zu), want %zu", attn, mm.gpt.attn_bytes, want_attn_scratch(B, T, C, NH));
    TEST_CHECK(want - gpt2_acts_bytes(cfg, B, T, GPT2_RECOMPUTE_NONE, 0) == attn - attn_fwd,
               "training adds the attention backward's scratch to the activations");
    printf("activations at B %d, T %d: %zu bytes, the attention's scratch %zu of them (%zu without backward)\n", B, T,
           want, attn, attn_fwd);
    if (known && strstr(ops_backend_name(), "emulated")) {
        TEST_CHECK(free0 - free1 == want, "model_alloc_acts took %zu bytes of device memory, the count is %zu", free0 - free1, want);
        printf("the harness' device lost exactly those %zu bytes to model_alloc_acts\n", free0 - free1);
    } else if (known) {   // a GPU: the driver's granularity makes the free memory a rough figure
        printf("the GPU's free memory fell by %zu bytes at model_alloc_acts\n", free0 - free1);
    }
    model_free(&mm);
}

// --dtype fp16 on the CPU (fp16 GEMM operands, dynamic loss scaling) against torch.autocast("cpu",
// float16) + torch.amp.GradScaler (test/ref/gpt2_tiny/fp16.safetensors, dev/gen_fp16_ref.py): the
// scaler starts at 2^24 with a growth interval of 3, so the first steps overflow fp16 and are
// skipped, and the scale grows, overflows and backs off again later. The loss scale and the
// skipped steps must be GradScaler's at every step; the losses within FP16_LOSS nats and the
// norms of the steps taken within FP16_NORM relative (torch also rounds every activation to fp16,
// the emulation only the GEMM operands).
#define FP16_LOSS 3e-4
#define FP16_NORM 2e-3
static void test_fp16_train(const TestBase* tb) {
    StFile ref;
    st_open(&ref, REF_DIR "/fp16.safetensors");
    const RefAdamW h = ref_adamw(&ref);
    LossScale ls;
    loss_scale_init(&ls);
    ls.scale = (float)atof(st_meta(&ref, "init_scale"));
    ls.growth_interval = atoi(st_meta(&ref, "growth_interval"));
    ops_set_gemm_dtype(OPS_F16);
    Model m;
    test_model(&m, tb, tb->weights, GPT2_TRAIN_ALL, NULL, 0, GPT2_RECOMPUTE_NONE);
    float* losses = (float*)mallocCheck((size_t)h.steps * sizeof(float));
    float* norms = (float*)mallocCheck((size_t)h.steps * sizeof(float));
    float* scales = (float*)mallocCheck((size_t)h.steps * sizeof(float));
    int* skipped = (int*)mallocCheck((size_t)h.steps * sizeof(int));
    ref_train_scaled(&m, &tb->batch, &h, &ls, losses, norms, scales, skipped);
    ops_set_gemm_dtype(OPS_F32);
    size_t n;
    float *want_l = ref_read(&ref, "train_losses", &n), *want_n = ref_read(&ref, "train_grad_norms", NULL);
    float* want_s = ref_read(&ref, "loss_scales", NULL);
    float* want_k = ref_read(&ref, "skipped", NULL); // (1.0: skipped)
    TEST_CHECK((int)n == h.steps, "fp16.safetensors has %zu steps, the run %d", n, h.steps);
    int taken = 0;
    double worst_l = 0, worst_n = 0;
    for (int s = 0; s < h.steps && s < (int)n; s++) {
        TEST_CHECK(scales[s] == want_s[s] && skipped[s] == (int)want_k[s], "fp16 step %d: scale %g skipped %d; GradScaler: scale %g skipped %d",
                   s, scales[s], skipped[s], want_s[s], (int)want_k[s]);
        worst_l = fmax(worst_l, fabs((double)losses[s] - want_l[s]));
        if (want_k[s] != 0.0f) { TEST_CHECK(!isfinite(norms[s]), "fp16 step %d: skipped by GradScaler, our norm %g is finite", s, norms[s]); continue; }
        taken++;
        worst_n = fmax(worst_n, fabs((double)norms[s] - want_n[s]) / want_n[s]);
    }
    TEST_CHECK(worst_l <= FP16_LOSS && worst_n <= FP16_NORM, "fp16: worst loss error %.3g (limit %g), norm %.3g (limit %g)",
               worst_l, FP16_LOSS, worst_n, FP16_NORM);
    printf("fp16 with loss scaling: %d steps (%d taken, %.0f skipped in all), scales and skips as GradScaler's; loss %.6f -> %.6f "
           "(torch %.6f -> %.6f), worst loss error %.3g, worst norm error %.3g\n", h.steps, taken, (double)ls.skipped,
           losses[0], losses[h.steps - 1], want_l[0], want_l[h.steps - 1], worst_l, worst_n);
    free(losses); free(norms); free(scales); free(skipped); free(want_l); free(want_n); free(want_s); free(want_k);
    model_free(&m);
    st_close(&ref);
}

// Q8_0 linear weights and lm_head (ModelSpec.base_q8, generate --weights q8_0): on weights whose
// linear matrices and wte are already Q8_0 values (ggml's quantizer, then its dequantization), the
// logits are the dense model's on the same values to rounding, and gpt2_get_params gives those
// values back exactly (the blocks quantized at load are the values' own: Q8_0 values quantize to
// themselves), where the backend holds them in fp32.
static void test_q8_weights(const TestBase* tb) {
    const ParamTable* pt = &tb->pt;
    float* w = (float*)mallocCheck(pt->total * sizeof(float));
    memcpy(w, tb->weights, pt->total * sizeof(float));
    const ParamId ids[] = {PT_WTE, PT_QKVW, PT_ATTPROJW, PT_FCW, PT_FCPROJW};
    for (int k = 0; k < 5; k++) {
        const size_t n = pt->t[ids[k]].numel;
        uint8_t* q = (uint8_t*)mallocCheck(n / OPS_Q8_BLOCK * OPS_Q8_BLOCK_BYTES);
        gguf_quantize_q8_0(w + pt->t[ids[k]].offset, q, n);
        gguf_dequantize_q8_0(q, w + pt->t[ids[k]].offset, n);
        free(q);
    }
    float* dense = test_batch_logits(tb, w, NULL);
    Model mq;
    ModelSpec s;
    memset(&s, 0, sizeof(s));
    s.cfg = &tb->cfg; s.host = w; s.base_q8 = MODEL_Q8_ON; s.B = tb->batch.B; s.T = tb->batch.T;
    model_assemble(&mq, &s);
    TEST_CHECK(mq.base_q8 && mq.wte_q8 && !mq.gpt.p[PT_QKVW], "base_q8: Q8_0 blocks held, the fp32 linear weights not allocated");
    gpt2_forward(&mq.gpt, tb->batch.inputs, NULL, NULL, tb->batch.B, tb->batch.T, 0.0f, NULL);
    const size_t nl = (size_t)tb->batch.B * tb->batch.T * tb->cfg.vocab_size;
    float* q8 = ref_logits_unpadded(&mq.gpt, tb->batch.B * tb->batch.T);
    printf("Q8_0 weights: logits max error %.3g of max |dense|\n", rel_to_max(q8, dense, nl));
    test_allclose("Q8_0 weights: logits vs dense on the same values", q8, dense, nl, tols()->rel, tols()->logits * ref_max_abs(dense, nl));
    if (ops_caps().floatx == OPS_F32) {
        float* back = (float*)mallocCheck(pt->total * sizeof(float));
        gpt2_get_params(&mq.gpt, back);
        int same = 1;
        for (int k = 1; k < 5; k++)
            same &= !memcmp(back + pt->t[ids[k]].offset, w + pt->t[ids[k]].offset, pt->t[ids[k]].numel * sizeof(float));
        TEST_CHECK(same, "gpt2_get_params of Q8_0 linear weights: not the values they were quantized from");
        free(back);
    }
    model_free(&mq);
    free(w); free(dense); free(q8);
}

int main(int argc, char** argv) {
    TestBase tb;
    StFile ref;
    test_model_start(argc, argv, REF_DIR, &tb, &ref);
    const GPT2Config cfg = tb.cfg;
    const ParamTable pt = tb.pt;
    const int B = tb.batch.B, T = tb.batch.T, V = cfg.vocab_size;
    const int* inputs = tb.batch.inputs;
    const int* targets = tb.batch.targets;
    check_acts_memory(&tb);

    Model model;
    test_model(&model, &tb, tb.weights, GPT2_TRAIN_ALL, NULL, 0, GPT2_RECOMPUTE_NONE);
    GPT2* m = &model.gpt;

    // ---- logits (forward without targets)
    gpt2_forward(m, inputs, NULL, NULL, B, T, 0.0f, NULL);
    size_t nl;
    float* ref_logits = ref_read(&ref, "logits", &nl);
    TEST_CHECK(nl == (size_t)B * T * V, "logits size");
    float* logits = ref_logits_unpadded(m, B * T);
    printf("logits: max error %.3g of max |ref|\n", rel_to_max(logits, ref_logits, nl));
    test_allclose("logits", logits, ref_logits, nl, tols()->rel, tols()->logits * ref_max_abs(ref_logits, nl));

    // ---- loss and gradients
    const long valid = tb.batch.valid;
    long n_valid = 0;
    gpt2_zero_grads(m);
    double loss_sum = gpt2_forward(m, inputs, targets, NULL, B, T, 1.0f / (float)valid, &n_valid);
    TEST_CHECK(n_valid == valid, "valid target count %ld vs %ld", n_valid, valid);
    float loss = (float)(loss_sum / (double)n_valid);
    float* ref_loss = ref_read(&ref, "loss", NULL);
    printf("loss %.7f (transformers %.7f, error %.3g)\n", loss, ref_loss[0], fabs((double)loss - ref_loss[0]));
    TEST_CHECK(fabs((double)loss - ref_loss[0]) <= tols()->loss, "loss %.7f vs transformers %.7f", loss, ref_loss[0]);
    gpt2_backward(m, NULL);
    char worst_key[300];
    double worst = check_grads(m, &pt, &cfg, &ref, worst_key, sizeof(worst_key));
    printf("gradients: worst error %.3g of max |ref| (%s)\n", worst, worst_key);

    // ---- the same loss and gradients with activation recompute level 2 (GELU and layernorms
    // recomputed in backward by the GELU / layernorm kernels instead of kept from the forward)
    if (!test_quick()) {
        Model mr;
        test_model(&mr, &tb, tb.weights, GPT2_TRAIN_ALL, NULL, 0, GPT2_RECOMPUTE_LN);
        TEST_CHECK(mr.gpt.act_bytes < m->act_bytes, "recompute 2 does not shrink the activations");
        gpt2_zero_grads(&mr.gpt);
        long nvr = 0;
        double lr_sum = gpt2_forward(&mr.gpt, inputs, targets, NULL, B, T, 1.0f / (float)valid, &nvr);
        gpt2_backward(&mr.gpt, NULL);
        double lr_err = fabs(lr_sum / (double)nvr - ref_loss[0]);
        TEST_CHECK(lr_err <= tols()->loss, "recompute 2: loss error %.3g", lr_err);
        char wk[300];
        double wr = check_grads(&mr.gpt, &pt, &cfg, &ref, wk, sizeof(wk));
        printf("recompute 2: loss error %.3g, gradients: worst error %.3g of max |ref| (%s)\n", lr_err, wr, wk);
        model_free(&mr);
    }

    // ---- 10 AdamW steps (fp32 master weights, stochastic rounding to bf16), hyperparameters as
    // stated in the reference's metadata
    if (!test_quick()) {
        RefAdamW h = ref_adamw(&ref);
        float* losses = (float*)mallocCheck((size_t)h.steps * sizeof(float));
        float* norms = (float*)mallocCheck((size_t)h.steps * sizeof(float));
        int had_master = ref_train(&model, &tb.batch, &h, losses, norms);
        TEST_CHECK(had_master == ops_caps().master_weights, "fp32 master weights exactly when the backend keeps them");
        ref_check_train("gpt2_tiny", &ref, losses, norms, h.steps, tols()->step_loss, tols()->norm);
        free(losses); free(norms);
    }

    // (the CPU backend only: the CUDA backend's GEMMs are bf16)
    if (!test_quick() && argc < 2 && ops_caps().floatx == OPS_F32) test_fp16_train(&tb);
    test_q8_weights(&tb);

    model_free(&model);
    st_close(&ref);
    test_base_free(&tb);
    free(ref_logits); free(logits); free(ref_loss);
    return test_finish("test_gpt2");
}
