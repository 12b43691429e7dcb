// LoRA+ and BitFit against their references (dev/gen_loraplus_ref.py, on the tiny GPT-2 of
// test/ref/gpt2_tiny and its batch), fp32 on the CPU backend:
//   loraplus: from PEFT's saved adapter (attn.c_proj + mlp.c_fc, r=4, bias="lora_only", ln_f trained),
//     10 AdamW steps with plus_ratio 16 give the losses, gradient norms and every trained tensor
//     (lora_A, lora_B, the biases, ln_f) of torch's AdamW over PEFT's create_loraplus_optimizer
//     groups, each element within 1e-5.
//   bitfit: rank 0 with bias all (no adapter at all), 10 AdamW steps give the losses, norms and
//     every bias of transformers with only the biases trainable, within 1e-5; the plan counts no
//     adapter parameter.
#include "fixtures.h"

#define BASE_DIR "test/ref/gpt2_tiny"
#define ATOL 1e-5

static TestBase g_tb;

static LoraModel* make_spec_lora(int rank, float alpha, const char* targets, int bias, int ln_f) {
    LoraSpec spec;
    memset(&spec, 0, sizeof(spec));
    char err[512];
    spec.rank = rank; spec.alpha = alpha; spec.bias = bias; spec.train_ln_f = ln_f;
    if (lora_parse_targets(targets, &spec.targets, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    if (lora_parse_layers("all", g_tb.cfg.num_layers, &spec, err, sizeof(err))) { fprintf(stderr, "%s\n", err); exit(1); }
    return lora_create(&g_tb.cfg, &spec);
}

// One trained tensor (n elements at host) against final.<key> of the reference.
static void check_final(const char* set, StFile* ref, const char* key, const float* host, size_t n) {
    char rkey[300], what[400];
    snprintf(rkey, sizeof(rkey), "final.%s", key);
    size_t nr;
    float* want = ref_read(ref, rkey, &nr);
    TEST_CHECK(nr == n, "%s %s: %zu elements, the reference %zu", set, key, n, nr);
    snprintf(what, sizeof(what), "%s %s after 10 steps", set, key);
    test_allclose(what, host, want, n < nr ? n : nr, 0.0, ATOL);
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

static void test_loraplus(void) {
    printf("---- loraplus\n");
    StFile ref;
    st_open(&ref, "test/ref/lora_tiny/loraplus/ref.safetensors");
    LoraModel* lm = make_spec_lora(4, 8.0f, "attn.c_proj,mlp.c_fc", LORA_BIAS_LORA_ONLY, 1);
    lm->plus_ratio = (float)atof(st_meta(&ref, "lora_plus_ratio"));
    TEST_CHECK(lm->plus_ratio > 1.0f, "the reference's ratio %g is not 1 (the test would not see it)", lm->plus_ratio);
    Model m;
    test_model(&m, &g_tb, g_tb.weights, lora_base_trainable_mask(lm), lm, 0, 0);
    TrainSeg segs[64];
    TEST_CHECK(lora_max_segments(lm) <= 64, "segments");
    const int nseg = lora_segments(lm, segs);
    TEST_CHECK(nseg == 2 * lm->n + lm->n_extra && segs[1].lr_scale == lm->plus_ratio && segs[0].lr_scale == 1.0f,
               "LoRA+: one segment per A and per B, %d for %d adapters and %d base slices", nseg, lm->n, lm->n_extra);
    peft_load_tensors(lm, "test/ref/lora_tiny/loraplus/adapter_model.safetensors");
    RefAdamW h = ref_adamw(&ref);
    float losses[64], norms[64];
    TEST_CHECK(h.steps <= 64, "steps");
    ref_train(&m, &g_tb.batch, &h, losses, norms);
    ref_check_train("loraplus", &ref, losses, norms, h.steps, ATOL, 1e-4);
    float* host = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, host);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        char key[256];
        snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.%s.lora_A.weight", a->layer, lora_module_name(a->lin));
        check_final("loraplus", &ref, key, host + a->a_off, (size_t)a->rank * a->in);
        snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.%s.lora_B.weight", a->layer, lora_module_name(a->lin));
        check_final("loraplus", &ref, key, host + a->b_off, (size_t)a->out * a->rank);
    }
    check_final_extras("loraplus", &ref, lm, peft_name);
    free(host);
    model_free(&m);
    lora_free(lm);
    st_close(&ref);
}

int main(void) {
    ops_init(0);
    test_base_load(&g_tb, BASE_DIR);
    test_loraplus();
    test_base_free(&g_tb);
    return test_finish("test_loraplus");
}
