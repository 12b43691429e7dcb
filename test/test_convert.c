// llmc/model/convert.h against PEFT and bitsandbytes: a base with a PEFT adapter merged by
// convert_merge_adapter (every adapter set of test/ref/lora_tiny: q/v split, all-linear, rsLoRA,
// layers_to_transform, trained biases and ln_f) gives the logits of PEFT's merge_and_unload, and
// a chain of them merged in turn the logits of PEFT's merge_and_unload of each in turn;
// a transformers + bitsandbytes 4-bit checkpoint read by convert_load is dequantized to the
// weights bitsandbytes computes with (with the test/ref/qlora_tiny adapters merged: the logits of
// the fp32 GPT-2 on dequant(quant(W)) + the merged adapter). A size descriptor gives the
// trainers' initialization. The byte-level round trips of the program are test/test_convert.sh.
#include "test.h"
#include "fixtures.h"
#include "../llmc/model/convert.h"
#include "../llmc/ops/ops.h"

#define BASE_DIR "test/ref/gpt2_tiny"
#define LREF "test/ref/lora_tiny"
#define QREF "test/ref/qlora_tiny"

static TestBase g_tb;

// The logits of a plain model on hm's weights for the base's batch vs `key` of dir/ref.safetensors.
static void check_logits(const char* what, const HostModel* hm, const char* dir, const char* key, double tol) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/ref.safetensors", dir);
    StFile ref;
    st_open(&ref, path);
    Model m;
    test_model(&m, &g_tb, hm->params, 0, NULL, 0, 0);
    gpt2_forward(&m.gpt, g_tb.batch.inputs, NULL, NULL, g_tb.batch.B, g_tb.batch.T, 0.0f, NULL);
    float* logits = ref_logits_unpadded(&m.gpt, g_tb.batch.B * g_tb.batch.T);
    size_t nl;
    float* want = ref_read(&ref, key, &nl);
    test_allclose(what, logits, want, nl, tol, tol * ref_max_abs(want, nl));
    free(want); free(logits);
    model_free(&m);
    st_close(&ref);
}

static void test_merge(const char* set) {
    char dir[256], what[256];
    snprintf(dir, sizeof(dir), LREF "/%s", set);
    HostModel hm;
    convert_load(&hm, BASE_DIR, 0);
    convert_merge_adapter(&hm, dir);
    TEST_CHECK(strstr(hm.source, "(merged)") != NULL, "source names the merge: %s", hm.source);
    snprintf(what, sizeof(what), "%s: base + adapter merged by convert vs PEFT merge_and_unload logits", set);
    check_logits(what, &hm, dir, "merged_logits", 1e-4);
    convert_free(&hm);
}

// A chain of adapters merged one after another (convert --adapter A --adapter B ...) vs PEFT's
// merge_and_unload of each in turn (test/ref/lora_chain, dev/gen_lora_chain_ref.py).
static void test_merge_chain(void) {
    const char* chain[] = { LREF "/all_linear", LREF "/qv", LREF "/bias_all" };
    HostModel hm;
    convert_load(&hm, BASE_DIR, 0);
    for (int i = 0; i < 3; i++) convert_merge_adapter(&hm, chain[i]);
    check_logits("all_linear, qv, bias_all merged in turn vs PEFT's merge_and_unload of each in turn", &hm, "test/ref/lora_chain",
                 "merged_logits", 1e-4);
    convert_free(&hm);
}

static void test_4bit(const char* set) {
    char dir[256], what[256];
    snprintf(dir, sizeof(dir), QREF "/%s", set);
    HostModel hm;
    convert_load(&hm, QREF "/base_4bit", 0);
    TEST_CHECK(strstr(hm.source, "dequantized") != NULL, "source says dequantized: %s", hm.source);
    // the non-quantized tensors are the base's own
    TEST_CHECK(memcmp(hm.params, g_tb.weights, hm.pt.t[PT_WTE].numel * sizeof(float)) == 0, "4-bit checkpoint: wte as stored");
    // the quantized ones differ from the fp32 base (NF4 rounding), by less than a block's step
    const ParamInfo* q = &hm.pt.t[PT_QKVW];
    double maxd = 0.0;
    for (size_t i = 0; i < q->numel; i++) {
        double d = fabs((double)hm.params[q->offset + i] - (double)g_tb.weights[q->offset + i]);
        if (d > maxd) maxd = d;
    }
    TEST_CHECK(maxd > 0.0 && maxd < 0.1, "dequantized qkvw differs from the fp32 base by %g", maxd);
    convert_merge_adapter(&hm, dir);
    snprintf(what, sizeof(what), "%s: 4-bit base dequantized + adapter merged vs bitsandbytes + PEFT merged logits", set);
    check_logits(what, &hm, dir, "merged_logits", 1e-5);
    convert_free(&hm);
}

// A size descriptor: the weights model_assemble initializes for the trainers (same seed).
static void test_descriptor(void) {
    HostModel hm;
    convert_load(&hm, "tiny", 7);
    ModelSpec s;
    memset(&s, 0, sizeof(s));
    s.path = "tiny"; s.seed = 7;
    Model m;
    model_assemble(&m, &s);
    float* got = (float*)mallocCheck(hm.pt.total * sizeof(float));
    gpt2_get_params(&m.gpt, got);
    TEST_CHECK(hm.pt.total == m.gpt.pt.total && memcmp(got, hm.params, hm.pt.total * sizeof(float)) == 0,
               "convert_load(\"tiny\", 7) == the trainers' initialization");
    printf("ok   size descriptor: %zu weights equal to the model assembly's initialization\n", hm.pt.total);
    free(got);
    model_free(&m);
    convert_free(&hm);
}

static void test_is_hf_dir(void) {
    TEST_CHECK(convert_is_hf_dir(BASE_DIR), "gpt2_tiny is an HF directory");
    TEST_CHECK(convert_is_hf_dir("test/ref/hf_formats/hf_f16_sharded"), "a sharded directory (index) is one");
    TEST_CHECK(!convert_is_hf_dir(LREF "/qv"), "an adapter directory is not");
    TEST_CHECK(!convert_is_hf_dir("test/ref/hf_formats/expect_f32.bin"), "a file is not");
    TEST_CHECK(!convert_is_hf_dir("test/ref/no_such_dir"), "a missing path is not");
}

int main(void) {
    ops_init(0);
    test_base_load(&g_tb, BASE_DIR);
    const char* sets[] = { "c_attn", "qv", "all_linear", "proj_fc", "layers", "rslora", "bias_all", "bias_lnf" };
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) test_merge(sets[i]);
    test_merge_chain();
    test_4bit("c_attn");
    test_4bit("all_linear");
    test_descriptor();
    test_is_hf_dir();
    test_base_free(&g_tb);
    return test_finish("test_convert");
}
