// Several adapters combined into one (lora_mix, generate --adapter A --adapter B) against PEFT's
// add_weighted_adapter (test/ref/lora_mix, made by dev/gen_lora_mix_ref.py from the PEFT adapters
// of test/ref/lora_tiny on the tiny GPT-2): per case (cat of ranks 4 and 2 with a negative weight;
// linear of two rank-4 adapters on different modules; linear whose first adapter is rsLoRA),
// the combined adapter has PEFT's structure (modules, rank, scaling) and tensors (within 1e-6),
// the model with it gives PEFT's logits, and merged, PEFT's merge_and_unload logits. Adapters
// PEFT cannot combine, or combines as something else, are refused with the reason.
#include "fixtures.h"

#define BASE_DIR "test/ref/gpt2_tiny"
#define MREF "test/ref/lora_mix"

static TestBase g_tb;

// The source adapters of a case (its metadata's comma list), loaded; returns their count.
static int load_sources(StFile* ref, LoraModel** in, float* w) {
    char list[2048], weights[256];
    snprintf(list, sizeof(list), "%s", st_meta(ref, "sources"));
    snprintf(weights, sizeof(weights), "%s", st_meta(ref, "weights"));
    int n = 0;
    char *save = NULL, *wsave = NULL;
    for (char* t = strtok_r(list, ",", &save); t && n < LORA_MIX_MAX; t = strtok_r(NULL, ",", &save)) in[n++] = peft_load_adapter(t, &g_tb.cfg);
    int k = 0;
    for (char* t = strtok_r(weights, ",", &wsave); t && k < n; t = strtok_r(NULL, ",", &wsave)) w[k++] = (float)atof(t);
    TEST_CHECK(k == n && n >= 2, "%d sources, %d weights", n, k);
    return n;
}

static void test_case(const char* name) {
    char path[512], what[256];
    printf("---- %s\n", name);
    snprintf(path, sizeof(path), MREF "/%s/ref.safetensors", name);
    StFile ref;
    st_open(&ref, path);
    LoraModel* in[LORA_MIX_MAX];
    float w[LORA_MIX_MAX];
    const int n = load_sources(&ref, in, w);
    const int how = strcmp(st_meta(&ref, "combination_type"), "linear") ? LORA_MIX_CAT : LORA_MIX_LINEAR;
    char err[512] = "";
    LoraModel* lm = lora_mix(in, w, n, how, err, sizeof(err));
    TEST_CHECK(lm != NULL, "%s: lora_mix refused: %s", name, err);
    if (!lm) { st_close(&ref); return; }
    // PEFT's combined adapter, as it saved it
    snprintf(path, sizeof(path), MREF "/%s/mix", name);
    LoraModel* pm = peft_load_adapter(path, &g_tb.cfg);
    TEST_CHECK(lm->n == pm->n && lm->total == pm->total, "%s: %d modules / %zu parameters, PEFT's %d / %zu", name, lm->n, lm->total, pm->n, pm->total);
    for (int i = 0; i < lm->n && i < pm->n; i++)
        TEST_CHECK(lm->ad[i].layer == pm->ad[i].layer && lm->ad[i].lin == pm->ad[i].lin && lm->ad[i].rank == pm->ad[i].rank &&
                   fabsf(lm->ad[i].scaling - pm->ad[i].scaling) < 1e-6f, "%s module %d: h.%d.%s r=%d scaling %g, PEFT's h.%d.%s r=%d scaling %g",
                   name, i, lm->ad[i].layer, lora_module_name(lm->ad[i].lin), lm->ad[i].rank, lm->ad[i].scaling, pm->ad[i].layer,
                   lora_module_name(pm->ad[i].lin), pm->ad[i].rank, pm->ad[i].scaling);
    TEST_CHECK(fabsf(lm->ad[0].scaling - (float)atof(st_meta(&ref, "scaling"))) < 1e-6f, "%s: scaling %g, PEFT's %s", name,
               lm->ad[0].scaling, st_meta(&ref, "scaling"));
    if (lm->total == pm->total) {
        float* a = (float*)mallocCheck(lm->total * sizeof(float));
        float* b = (float*)mallocCheck(lm->total * sizeof(float));
        lora_get_params(lm, a);
        lora_get_params(pm, b);
        snprintf(what, sizeof(what), "%s: the combined lora_A / lora_B vs PEFT's", name);
        test_allclose(what, a, b, lm->total, 1e-6, 1e-7);
        free(a); free(b);
    }
    size_t nl;
    float* want = ref_read(&ref, "logits", &nl);
    float* got = test_batch_logits(&g_tb, g_tb.weights, lm);
    snprintf(what, sizeof(what), "%s: logits with the combined adapter vs PEFT's", name);
    test_allclose(what, got, want, nl, 1e-5, 1e-5 * ref_max_abs(want, nl));
    free(want); free(got);
    float* merged = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    memcpy(merged, g_tb.weights, g_tb.pt.total * sizeof(float));
    lora_merge(lm, &g_tb.pt, merged);
    want = ref_read(&ref, "merged_logits", &nl);
    got = test_batch_logits(&g_tb, merged, NULL);
    snprintf(what, sizeof(what), "%s: merged logits vs PEFT's merge_and_unload", name);
    test_allclose(what, got, want, nl, 1e-5, 1e-5 * ref_max_abs(want, nl));
    free(want); free(got); free(merged);
    lora_free(pm);
    lora_free(lm);
    for (int i = 0; i < n; i++) lora_free(in[i]);
    st_close(&ref);
}

// lora_mix(a, b) must refuse, with want in its reason.
static void expect_refused(const char* what, const char* a, const char* b, int how, const char* want) {
    LoraModel* in[2] = {peft_load_adapter(a, &g_tb.cfg), peft_load_adapter(b, &g_tb.cfg)};
    const float w[2] = {1.0f, 1.0f};
    char err[512] = "";
    LoraModel* lm = lora_mix(in, w, 2, how, err, sizeof(err));
    TEST_CHECK(lm == NULL && strstr(err, want) != NULL, "%s: refused with '%s' (got '%s')", what, want, err);
    if (lm) lora_free(lm);
    lora_free(in[0]);
    lora_free(in[1]);
}

int main(void) {
    ops_init(0);
    test_base_load(&g_tb, BASE_DIR);
    test_case("cat");
    test_case("linear");
    test_case("linear_rslora_first");
    printf("---- refused\n");
    expect_refused("linear over ranks 4 and 2", "test/ref/lora_tiny/c_attn", "test/ref/lora_tiny/all_linear", LORA_MIX_LINEAR, "one rank");
    expect_refused("a DoRA adapter", "test/ref/lora_tiny/c_attn", "test/ref/dora_tiny/c_attn", LORA_MIX_CAT, "DoRA");
    expect_refused("an adapter that trains biases", "test/ref/lora_tiny/bias_all", "test/ref/lora_tiny/c_attn", LORA_MIX_CAT, "base tensors");
    test_base_free(&g_tb);
    return test_finish("test_lora_mix");
}
