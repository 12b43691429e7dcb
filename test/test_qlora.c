// QLoRA against transformers + bitsandbytes + PEFT on CPU (test/ref/qlora_tiny, made by
// dev/gen_qlora_ref.py from the tiny GPT-2 of test/ref/gpt2_tiny):
//   - quantizing gpt2_tiny's fp32 matmul weights in [out, in] orientation with double
//     quantization gives exactly the bytes transformers + bitsandbytes saved (codes, 8-bit absmax,
//     nested scales, offset), and the 4-bit checkpoint loads (qlora_load_hf4bit) to the same state
//     and the same fp32 embeddings / layernorms / biases;
//   - the QLoRA model holds no floatX copy of those weights (memory accounting checked) and the
//     backend op nf4_dequantize_op gives nf4_dequantize_rows' values for any row range;
//   - per target set: logits, loss, every lora_A / lora_B gradient and 10 AdamW steps match PEFT
//     on the Linear4bit base, and merging into dequant(quant(W)) matches the fp32 model built from
//     bitsandbytes' dequantized weights; the same for QDoRA (test/ref/qdora_tiny: DoRA adapters on
//     that base, whose norms are those of dequant(quant(W)) + scaling B A, the magnitudes' gradients too).
// Tolerances: logits 1e-5 relative (+ 1e-5 of the largest), loss 2e-6, gradients rtol 1e-3 +
// 1e-4 of the largest, losses of the 10 steps 1e-5 absolute. Both sides compute in fp32 on
// bit-identical dequantized weights (the reference keeps bitsandbytes off its bf16 CPU shortcut,
// see dev/gen_qlora_ref.py), so the only differences are GEMM summation orders: observed ~1.5e-7
// on logits, ~5e-9 on gradients, <1e-6 on the losses.
//
// Builds: as C on the CPU backend (the figures above); test/test_qlora.cu includes this file for
// the CUDA backend, run in CI under the CUDA-on-CPU harness (test_qlora_model_cuda) and, as
// test_qlora_gpu, on a real GPU (mk/gpucheck.mk). There the dequantized weights, activations and
// adapters are bf16, so the tolerances are test_gpt2.c's bf16 ones (relative to the largest
// magnitude of each reference): logits 2e-2, loss 5e-3 nats, step losses 5e-3, grad norms 2e-2
// relative, and test_lora.c's 6e-2 for the adapter gradients (the LoRA branch's extra bf16
// roundings; measured under the harness: adapter gradients up to 2.3e-2, loss 1.4e-4, step losses
// 3.8e-4); the NF4 bytes and the host dequantization stay exact, and nf4_dequantize_op gives them
// rounded to bf16 bit for bit.
#include "fixtures.h"
#include "../llmc/base/bf16.h"

#define BASE_DIR "test/ref/gpt2_tiny"
#define QREF "test/ref/qlora_tiny"
#define QDREF "test/ref/qdora_tiny" // QDoRA: DoRA adapters over the same NF4 base (dev/gen_dora_ref.py)

// tolerances by the backend's element type (ops_caps()): bf16 storage (CUDA) or fp32 (CPU)
typedef struct { double logits, logits_rel, loss, grad, grad_rel, step_loss, norm; } Tols;
static const Tols TOL_BF16 = { 2e-2, 0.0, 5e-3, 6e-2, 0.0, 5e-3, 2e-2 };
static const Tols TOL_F32 = { 1e-5, 1e-5, 2e-6, 1e-4, 1e-3, 1e-5, 1e-3 };
static const Tols* tols(void) { return test_is_bf16() ? &TOL_BF16 : &TOL_F32; }

// x as the backend stores a floatX: rounded to bf16 on CUDA, unchanged on the CPU
static void as_stored(float* x, size_t n) {
    if (sizeof(floatX) == 2)
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(bf16_from_f32(x[i]));
}

static TestBase g_tb; // the tiny GPT-2 and its reference batch

static int same_nf4(const NF4Tensor* a, const NF4Tensor* b) {
    if (a->n != b->n || a->double_quant != b->double_quant || a->n_blocks != b->n_blocks) return 0;
    if (memcmp(a->packed, b->packed, (size_t)(a->n + 1) / 2)) return 0;
    if (memcmp(a->code4, b->code4, sizeof(a->code4))) return 0;
    if (!a->double_quant) return !memcmp(a->absmax, b->absmax, (size_t)a->n_blocks * sizeof(float));
    return a->offset == b->offset && a->n_dq_blocks == b->n_dq_blocks &&
           !memcmp(a->absmax_q, b->absmax_q, (size_t)a->n_blocks) &&
           !memcmp(a->absmax_scale, b->absmax_scale, (size_t)a->n_dq_blocks * sizeof(float)) &&
           !memcmp(a->code8, b->code8, sizeof(a->code8));
}

static void test_quantization(void) {
    printf("---- quantization vs transformers + bitsandbytes 4-bit checkpoint\n");
    // the model quantizes the fp32 base itself (model_assemble with qlora)
    Model m;
    test_model(&m, &g_tb, g_tb.weights, 0, NULL, 1, 0);
    Nf4Base* ours = m.nf4;
    TEST_CHECK(qlora_is_hf4bit(QREF "/base_4bit") && !qlora_is_hf4bit(BASE_DIR), "4-bit checkpoint detection");
    GPT2Config c2; ParamTable p2; float* h2 = NULL;
    Nf4Base* hf = qlora_load_hf4bit(QREF "/base_4bit", &c2, &p2, &h2);
    TEST_CHECK(p2.total == g_tb.pt.total && hf->L == ours->L, "same table");
    int same = 0;
    for (int i = 0; i < QLORA_NQ * ours->L; i++) same += same_nf4(&ours->t[i], &hf->t[i]);
    TEST_CHECK(same == QLORA_NQ * ours->L, "%d of %d quantized weights bit-identical to bitsandbytes'", same, QLORA_NQ * ours->L);
    printf("ok   %d of %d weights quantized ([out, in], double quant) bit-identical to the bitsandbytes checkpoint\n", same, QLORA_NQ * ours->L);
    size_t diff = 0, nq = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (qlora_is_quantized((ParamId)i)) { nq += g_tb.pt.t[i].numel; continue; }
        diff += memcmp(h2 + g_tb.pt.t[i].offset, g_tb.weights + g_tb.pt.t[i].offset, g_tb.pt.t[i].numel * sizeof(float)) != 0;
    }
    TEST_CHECK(diff == 0, "%zu unquantized tensors of the 4-bit checkpoint differ from the fp32 base", diff);
    TEST_CHECK((int64_t)nq == ours->n_quant && ours->n_quant == hf->n_quant && ours->bytes == hf->bytes, "accounting");
    size_t want = 0;
    for (int i = 0; i < QLORA_NQ * ours->L; i++) want += nf4_bytes_for(ours->t[i].n, 1);
    TEST_CHECK(ours->bytes == want, "bytes %zu vs %zu", ours->bytes, want);
    // 4.127 bits per weight for large matrices: 4 + 8/64 + (32/256)/64 (+ one fp32 offset per tensor)
    TEST_CHECK(fabs(nf4_bits_per_param(768 * 2304, 1) - 4.127) < 1e-3, "124M c_attn: %.5f bits/weight", nf4_bits_per_param(768 * 2304, 1));
    printf("ok   bits/weight: tiny base %.4f, 124M c_attn %.4f\n", 8.0 * (double)ours->bytes / (double)ours->n_quant,
           nf4_bits_per_param(768 * 2304, 1));

    // the backend op on row ranges == the reference dequantization
    const GPT2* g = &m.gpt;
    TEST_CHECK(g->params_n == g_tb.pt.total - qlora_replaced_numel(&g_tb.pt) && !g->p[PT_QKVW] && !g->p[PT_FCPROJW] && g->p[PT_FCB],
               "no floatX copy of the quantized weights (%zu of %zu elements allocated)", g->params_n, g_tb.pt.total);
    TEST_CHECK(g->lin->shared.wbuf_n == params_layer_numel(&g_tb.pt, PT_FCW), "dequantization buffer = the largest layer weight");
    const NF4Tensor* t = &ours->t[2 * ours->L + 1]; // fcw of layer 1: [256, 64]
    float* a = (float*)mallocCheck((size_t)t->n * sizeof(float));
    float* b = (float*)mallocCheck((size_t)t->n * sizeof(float));
    floatX* d = (floatX*)ops_alloc((size_t)t->n * sizeof(floatX));
    const size_t ranges[3][2] = {{0, 256}, {3, 17}, {255, 1}};
    for (int k = 0; k < 3; k++) {
        nf4_dequantize_rows(t, (int64_t)ranges[k][0], (int64_t)(ranges[k][0] + ranges[k][1]), a);
        as_stored(a, ranges[k][1] * 64);
        nf4_dequantize_op(d, ours->dev[2 * ours->L + 1], ranges[k][0], ranges[k][1]);
        ops_download_f32(b, d, ranges[k][1] * 64);
        TEST_CHECK(!memcmp(a, b, ranges[k][1] * 64 * sizeof(float)), "nf4_dequantize_op rows [%zu, +%zu)", ranges[k][0], ranges[k][1]);
    }
    // gpt2_get_params: dequant(quant(W)) for the quantized weights, the rest as set
    float* h = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    gpt2_set_params(&m.gpt, g_tb.weights);
    gpt2_get_params(&m.gpt, h);
    qlora_dequant_host(ours, &g_tb.pt, PT_ATTPROJW, a);
    TEST_CHECK(!memcmp(h + g_tb.pt.t[PT_ATTPROJW].offset, a, g_tb.pt.t[PT_ATTPROJW].numel * sizeof(float)), "get_params dequantizes");
    float* wte = (float*)mallocCheck(g_tb.pt.t[PT_WTE].numel * sizeof(float));
    memcpy(wte, g_tb.weights + g_tb.pt.t[PT_WTE].offset, g_tb.pt.t[PT_WTE].numel * sizeof(float));
    as_stored(wte, g_tb.pt.t[PT_WTE].numel);
    TEST_CHECK(!memcmp(h + g_tb.pt.t[PT_WTE].offset, wte, g_tb.pt.t[PT_WTE].numel * sizeof(float)), "get_params wte");
    free(wte);
    double err = 0, ref = 0;
    for (size_t i = 0; i < g_tb.pt.t[PT_QKVW].numel; i++) {
        size_t o = g_tb.pt.t[PT_QKVW].offset + i;
        err += (h[o] - g_tb.weights[o]) * (double)(h[o] - g_tb.weights[o]); ref += (double)g_tb.weights[o] * g_tb.weights[o];
    }
    printf("ok   NF4 round trip of qkvw: relative RMS error %.4f\n", sqrt(err / ref));
    TEST_CHECK(sqrt(err / ref) > 1e-3 && sqrt(err / ref) < 0.2, "NF4 error %.4f is in the expected range", sqrt(err / ref));
    free(a); free(b); free(h); ops_free(d);
    model_free(&m);
    qlora_free(hf); free(h2);
}

static float* test_logits(Model* m) { return ref_logits_unpadded(&m->gpt, g_tb.batch.B * g_tb.batch.T); }

// The set of dir (QREF, or QDREF: QDoRA) named set; name: what the checks say.
static void test_set(const char* dir, const char* set) {
    char path[512], name[64];
    snprintf(name, sizeof(name), "%s%s", strcmp(dir, QDREF) ? "" : "QDoRA ", set);
    printf("---- %s\n", name);
    snprintf(path, sizeof(path), "%s/%s/ref.safetensors", dir, set);
    StFile ref;
    st_open(&ref, path);
    snprintf(path, sizeof(path), "%s/%s", dir, set);
    LoraModel* lm = peft_load_adapter(path, &g_tb.cfg);
    TEST_CHECK(lm->total == (size_t)atol(st_meta(&ref, "n_trainable")), "%s: %zu adapter parameters vs PEFT %s",
               name, lm->total, st_meta(&ref, "n_trainable"));
    float* p0 = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, p0);
    Model m;
    test_model(&m, &g_tb, g_tb.weights, 0, lm, 1, 0);
    const RefBatch* b = &g_tb.batch;

    gpt2_forward(&m.gpt, b->inputs, NULL, NULL, b->B, b->T, 0.0f, NULL);
    size_t nl;
    float* logits = test_logits(&m);
    float* want = ref_read(&ref, "logits", &nl);
    char what[400];
    snprintf(what, sizeof(what), "%s logits vs PEFT on Linear4bit", name);
    test_allclose(what, logits, want, nl, tols()->logits_rel, tols()->logits * ref_max_abs(want, nl));
    free(want); free(logits);
    gpt2_zero_grads(&m.gpt);
    long nv;
    // (two statements: the operands of / are unsequenced, nv must be read after the call)
    double loss = gpt2_forward(&m.gpt, b->inputs, b->targets, NULL, b->B, b->T, 1.0f / (float)b->valid, &nv);
    loss /= (double)nv;
    gpt2_backward(&m.gpt, NULL);
    float* rl = ref_read(&ref, "loss", NULL);
    TEST_CHECK(fabs(loss - rl[0]) < tols()->loss, "%s loss %.7f vs PEFT %.7f", name, loss, rl[0]);
    printf("%s: loss %.7f (PEFT+bnb %.7f, diff %.2e)\n", name, loss, rl[0], fabs(loss - rl[0]));
    free(rl);
    ref_check_lora_grads(name, lm, 1, &ref, "grad.", tols()->grad_rel, tols()->grad);

    // merge into dequant(quant(W)) == the fp32 model of bitsandbytes' dequantized weights + B A
    float* merged = (float*)mallocCheck(g_tb.pt.total * sizeof(float));
    gpt2_get_params(&m.gpt, merged);
    lora_merge(lm, &g_tb.pt, merged);
    Model mm;
    test_model(&mm, &g_tb, merged, 0, NULL, 0, 0);
    gpt2_forward(&mm.gpt, b->inputs, NULL, NULL, b->B, b->T, 0.0f, NULL);
    logits = test_logits(&mm);
    want = ref_read(&ref, "merged_logits", &nl);
    snprintf(what, sizeof(what), "%s merged into dequant(quant(W)): logits", name);
    test_allclose(what, logits, want, nl, tols()->logits_rel, tols()->logits * ref_max_abs(want, nl));
    free(want); free(logits); free(merged);
    model_free(&mm);

    // 10 AdamW steps
    RefAdamW h = ref_adamw(&ref);
    float* losses = (float*)mallocCheck((size_t)h.steps * sizeof(float));
    float* norms = (float*)mallocCheck((size_t)h.steps * sizeof(float));
    ref_train(&m, b, &h, losses, norms);
    ref_check_train(name, &ref, losses, norms, h.steps, tols()->step_loss, tols()->norm);
    free(losses); free(norms); free(p0);
    model_free(&m);
    lora_free(lm);
    st_close(&ref);
}

int main(int argc, char** argv) {
    ops_init(0);
    test_gemm_dtype(argc, argv);
    test_base_load(&g_tb, BASE_DIR);

    test_quantization();
    test_set(QREF, "c_attn");
    if (!test_quick()) { // (TEST_QUICK: one set)
        test_set(QREF, "all_linear");
        test_set(QDREF, "c_attn");
        test_set(QDREF, "all_linear");
    }

    test_base_free(&g_tb);
    return test_finish("test_qlora");
}
