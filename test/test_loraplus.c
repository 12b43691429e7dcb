// LoRA+ and BitFit against their references (dev/gen_loraplus_ref.py, on the tiny GPT-2 of
// test/ref/gpt2_tiny and its batch), fp32 on the CPU backend:
//   loraplus: from PEFT's saved adapter (attn.c_proj + mlp.c_fc, r=4, bias="lora_only", ln_f trained),
//     10 AdamW steps with plus_ratio 16 give the losses, gradient norms and every trained tensor
//     (lora_A, lora_B, the biases, ln_f) of torch's AdamW over PEFT's create_loraplus_optimizer
//     groups, each element within 1e-5; the same with the optimizer offload (the update on the
//     host, in pieces). The same with DoRA (dev/gen_dora_ref.py: attn.c_proj + mlp.c_fc, r=4):
//     the magnitudes learn in B's group, decayed.
//   bitfit: rank 0 with bias all (no adapter at all), 10 AdamW steps give the losses, norms and
//     every bias of transformers with only the biases trainable, within 1e-5 (c_attn's key third,
//     whose gradient is zero but for rounding: check_final), and no frozen weight moves.
#include "fixtures.h"

#define BASE_DIR "test/ref/gpt2_tiny"
#define ATOL 1e-5

static TestBase g_tb;

static LoraModel* make_spec_lora(int rank, float alpha, const char* targets, int bias, int ln_f, int dora) {
    LoraSpec spec;
    memset(&spec, 0, sizeof(spec));
    char err[512];
    spec.rank = rank; spec.alpha = alpha; spec.bias = bias; spec.train_ln_f = ln_f; spec.dora = dora;
    if (lora_parse_targets(targets, &spec.targets, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    if (lora_parse_layers("all", g_tb.cfg.num_layers, &spec, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    return lora_create(&g_tb.cfg, &spec);
}

// One trained tensor (n elements at host) against final.<key> of the reference, within ATOL. The
// key third of c_attn's bias is the exception: softmax does not see a shift of every key, so its
// gradient is zero but for rounding, of the size of AdamW's eps, and where the update divides
// rounding by rounding no two implementations agree; it must stay put instead (both moved less
// than KBIAS_MOVE from the base over the 10 steps; q and v's thirds move by about 1e-2).
#define KBIAS_MOVE 1e-4
static void check_final(const char* set, StFile* ref, const char* key, const float* host, size_t n) {
    char rkey[300], what[400];
    snprintf(rkey, sizeof(rkey), "final.%s", key);
    size_t nr;
    float* want = ref_read(ref, rkey, &nr);
    TEST_CHECK(nr == n, "%s %s: %zu elements, the reference %zu", set, key, n, nr);
    const size_t len = strlen(key), C = (size_t)g_tb.cfg.channels;
    const int kbias = len >= 16 && !strcmp(key + len - 16, "attn.c_attn.bias") && n == 3 * C;
    snprintf(what, sizeof(what), "%s %s after 10 steps%s", set, key, kbias ? " (q and v thirds)" : "");
    if (!kbias) test_allclose(what, host, want, n < nr ? n : nr, 0.0, ATOL);
    else {
        test_allclose(what, host, want, C, 0.0, ATOL);
        test_allclose(what, host + 2 * C, want + 2 * C, C, 0.0, ATOL);
        // the base's key third, where the table holds it (the bias is not per-layer adapted here)
        const int layer = atoi(strstr(key, ".h.") + 3);
        const float* base = g_tb.weights + params_layer_offset(&g_tb.pt, PT_QKVB, layer) + C;
        snprintf(what, sizeof(what), "%s %s after 10 steps: the key third stays within %g of the base (ours)", set, key, KBIAS_MOVE);
        test_allclose(what, host + C, base, C, 0.0, KBIAS_MOVE);
        snprintf(what, sizeof(what), "%s %s after 10 steps: the key third stays within %g of the base (reference)", set, key, KBIAS_MOVE);
        test_allclose(what, want + C, base, C, 0.0, KBIAS_MOVE);
    }
    free(want);
}

// Every trained base slice (bias, ln_f) against the reference, named by name_of (its key in
// the reference file).
static void check_final_extras(const char* set, StFile* ref, const LoraModel* lm, const char* (*name_of)(const LoraExtra*, char*, size_t)) {
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        const size_t n = params_layer_numel(&lm->pt, e->id);
        float* host = (float*)mallocCheck(n * sizeof(float));
        ops_download_f32(host, e->p, n);
        char key[300];
        check_final(set, ref, name_of(e, key, sizeof(key)), host, n);
        free(host);
    }
}

static const char* peft_name(const LoraExtra* e, char* out, size_t cap) { snprintf(out, cap, "%s", e->key); return out; }

// ---- LoRA+

// h->steps AdamW steps of m's segments as ref_train takes them, with the optimizer offload
// (opt_offload, --offload-optimizer: the update on the host, in pieces of chunk elements).
static void train_offloaded(Model* m, const RefAdamW* h, size_t chunk) {
    TrainSeg* segs = (TrainSeg*)mallocCheck((size_t)model_max_segments(m) * sizeof(TrainSeg));
    Optimizer opt;
    opt_init(&opt, segs, model_segments(m, segs), 0, (size_t)-1);
    free(segs);
    opt_offload(&opt);
    opt.offload_chunk = chunk;
    const RefBatch* b = &g_tb.batch;
    for (int s = 0; s < h->steps; s++) {
        gpt2_zero_grads(&m->gpt);
        long nv = 0;
        gpt2_forward(&m->gpt, b->inputs, b->targets, NULL, b->B, b->T, 1.0f / (float)b->valid, &nv);
        gpt2_backward(&m->gpt, NULL);
        const double norm = sqrt(opt_grad_sumsq(&opt, 0, opt.total));
        opt_step(&opt, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, opt_clip_scale(norm, h->grad_clip), 1234u + (uint32_t)s);
    }
    opt_free(&opt);
}

static void test_loraplus(int offload, int dora) {
    const char* dir = dora ? "test/ref/dora_tiny/loraplus" : "test/ref/lora_tiny/loraplus";
    const char* set = dora ? "loraplus (DoRA)" : "loraplus";
    char path[256];
    printf("---- %s%s\n", set, offload ? " with the optimizer offload" : "");
    StFile ref;
    snprintf(path, sizeof(path), "%s/ref.safetensors", dir);
    st_open(&ref, path);
    LoraModel* lm = dora ? make_spec_lora(4, 8.0f, "attn.c_proj,mlp.c_fc", LORA_BIAS_NONE, 0, 1)
                         : make_spec_lora(4, 8.0f, "attn.c_proj,mlp.c_fc", LORA_BIAS_LORA_ONLY, 1, 0);
    lm->plus_ratio = (float)atof(st_meta(&ref, "lora_plus_ratio"));
    TEST_CHECK(lm->plus_ratio > 1.0f, "the reference's ratio %g is not 1 (the test would not see it)", lm->plus_ratio);
    Model m;
    test_model(&m, &g_tb, g_tb.weights, lora_base_trainable_mask(lm), lm, 0, 0);
    TrainSeg segs[64];
    TEST_CHECK(lora_max_segments(lm) <= 64, "segments");
    const int nseg = lora_segments(lm, segs);
    TEST_CHECK(nseg == 2 * lm->n + lm->n_extra && segs[1].lr_scale == lm->plus_ratio && segs[0].lr_scale == 1.0f,
               "LoRA+: one segment per A and per B, %d for %d adapters and %d base slices", nseg, lm->n, lm->n_extra);
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    peft_load_tensors(lm, path);
    RefAdamW h = ref_adamw(&ref);
    float losses[64], norms[64];
    TEST_CHECK(h.steps <= 64, "steps");
    if (offload) train_offloaded(&m, &h, 700); // (pieces smaller than a B: every segment in several)
    else {
        ref_train(&m, &g_tb.batch, &h, losses, norms);
        ref_check_train(set, &ref, losses, norms, h.steps, ATOL, 1e-4);
    }
    float* host = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, host);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        char key[256];
        snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.%s.lora_A.weight", a->layer, lora_module_name(a->lin));
        check_final(set, &ref, key, host + a->a_off, (size_t)a->rank * a->in);
        snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.%s.lora_B.weight", a->layer, lora_module_name(a->lin));
        check_final(set, &ref, key, host + a->b_off, (size_t)a->out * a->rank);
        if (!dora) continue;
        // (the magnitude is in B's group, at the ratio, and decayed: PEFT's 1-D parameters, HF Trainer's decay)
        snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.%s.lora_magnitude_vector", a->layer, lora_module_name(a->lin));
        check_final(set, &ref, key, host + a->m_off, (size_t)a->out);
    }
    check_final_extras(set, &ref, lm, peft_name);
    free(host);
    model_free(&m);
    lora_free(lm);
    st_close(&ref);
}

// ---- BitFit

// transformers' name of a trained base slice: its PEFT key without the PeftModel's prefix
static const char* hf_name(const LoraExtra* e, char* out, size_t cap) {
    const char* prefix = "base_model.model.";
    snprintf(out, cap, "%s", strncmp(e->key, prefix, strlen(prefix)) ? e->key : e->key + strlen(prefix));
    return out;
}

static void test_bitfit(void) {
    printf("---- bitfit\n");
    StFile ref;
    st_open(&ref, "test/ref/lora_tiny/bitfit/ref.safetensors");
    LoraModel* lm = make_spec_lora(0, 0.0f, "c_attn", LORA_BIAS_ALL, 0, 0);
    TEST_CHECK(lm->n == 0 && lm->total == 0 && lora_is_bitfit(lm), "rank 0: no adapter (%d adapters, %zu parameters)", lm->n, lm->total);
    TEST_CHECK(lm->n_extra == atoi(st_meta(&ref, "tensors")), "rank 0: %d bias tensors, transformers %s", lm->n_extra, st_meta(&ref, "tensors"));
    TEST_CHECK(lora_trainable_numel(lm) == (size_t)atol(st_meta(&ref, "n_trained")), "rank 0: %zu trained, transformers %s",
               lora_trainable_numel(lm), st_meta(&ref, "n_trained"));
    Model m;
    test_model(&m, &g_tb, g_tb.weights, lora_base_trainable_mask(lm), lm, 0, 0);
    TrainSeg segs[64];
    const int nseg = lora_segments(lm, segs);
    TEST_CHECK(nseg == lm->n_extra, "rank 0: %d optimizer segments, one per bias (%d)", nseg, lm->n_extra);
    RefAdamW h = ref_adamw(&ref);
    TEST_CHECK(h.weight_decay > 0.0f, "the reference passes a weight decay (%g) that no bias may take", h.weight_decay);
    float losses[64], norms[64];
    ref_train(&m, &g_tb.batch, &h, losses, norms);
    ref_check_train("bitfit", &ref, losses, norms, h.steps, ATOL, 1e-4);
    check_final_extras("bitfit", &ref, lm, hf_name);
    // nothing else moved: the frozen weights are the base's
    float* now = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    gpt2_get_params(&m.gpt, now);
    size_t moved = 0;
    const unsigned trained = lora_base_trainable_mask(lm);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (size_t k = 0; !((trained >> t) & 1) && k < g_tb.pt.t[t].numel; k++)
            moved += now[g_tb.pt.t[t].offset + k] != g_tb.weights[g_tb.pt.t[t].offset + k];
    TEST_CHECK(moved == 0, "bitfit: %zu frozen weights changed", moved);
    free(now);
    model_free(&m);
    lora_free(lm);
    st_close(&ref);
}

int main(void) {
    ops_init(0);
    test_base_load(&g_tb, BASE_DIR);
    test_loraplus(0, 0);
    test_loraplus(1, 0);
    test_loraplus(0, 1);
    test_bitfit();
    test_base_free(&g_tb);
    return test_finish("test_loraplus");
}
