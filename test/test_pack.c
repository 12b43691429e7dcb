// Packed records (data/prepare --pack): a batch of two windows, each holding several records
// (lengths 1, 70 across the 64-position tile edge, 30, padding; 40, 24, 64 starting on the tile
// edge), must give every position the logits and the loss transformers' GPT2LMHeadModel gives
// when the position's record runs alone (test/ref/pack_tiny, dev/gen_pack_ref.py): positions start
// again at 0 in every record and attention keeps to the record. Without the record starts the same
// batch must give other logits (the test can fail). Gradients: a training step on the packed batch
// (the whole model, and LoRA adapters on every linear layer) equals the sum of the steps on each
// record alone, run through the same code unpacked (whose gradients test_gpt2 / test_lora hold to
// transformers and PEFT). TEST_QUICK=1 (compute-sanitizer's initcheck in scripts/gpu_check.sh):
// the whole model only, which runs every packed-records path of the kernels once.
//
// Builds: test/test_pack.c as C on the CPU backend (fp32); test/test_pack.cu includes this file
// for the CUDA backend (bf16), run in CI under the CUDA-on-CPU harness and, as test_pack_gpu, on
// a real GPU.
//
// Tolerances. fp32 (CPU): logits 1e-4 * max |ref| (+ 1e-4 relative), per-token losses 1e-4 nats,
// the mean loss 1e-5, gradients 1e-4 * max (+ 1e-4 relative); measured about 4e-7. bf16 (CUDA),
// as test_gpt2's: logits 2e-2 * max, per-token losses 5e-2 nats, the mean loss 5e-3, gradients
// 2.5e-2 * max. The same batch without its record starts is off by 0.31 of max |ref|: the test
// asks for more than 5x the logits' tolerance.
#include "fixtures.h"
#include "../llmc/model/lora.h"

#define REF_DIR "test/ref/pack_tiny"

typedef struct { double logits, rel, token_loss, loss, grad; } Tols;
static const Tols TOL_BF16 = { 2e-2, 0.0, 5e-2, 5e-3, 2.5e-2 };
static const Tols TOL_F32 = { 1e-4, 1e-4, 1e-4, 1e-5, 1e-4 };
static const Tols* tols(void) { return test_is_bf16() ? &TOL_BF16 : &TOL_F32; }

static double max_err_rel(const float* a, const float* b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) { double e = fabs((double)a[i] - (double)b[i]); if (!(e <= d)) d = e; }
    double mx = ref_max_abs(b, n);
    return mx > 0 ? d / mx : d;
}

// The records of the batch: runs of equal doc_start in each row (the padding is one too).
typedef struct { int row, start, len; } Run;
static int find_runs(const int* doc_start, int B, int T, Run* runs) {
    int n = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            if (doc_start[b * T + t] != t) continue;
            runs[n].row = b; runs[n].start = t; runs[n].len = 0; n++;
        }
    for (int k = 0; k < n; k++)
        while (runs[k].start + runs[k].len < T && doc_start[runs[k].row * T + runs[k].start + runs[k].len] == runs[k].start) runs[k].len++;
    return n;
}

// Logits and per-token losses of the packed batch against the records alone (transformers).
static void check_forward(GPT2* m, const RefBatch* b, const int* doc_start, StFile* ref) {
    const int B = b->B, T = b->T, V = m->cfg.vocab_size;
    size_t nl;
    float* want = ref_read(ref, "logits", &nl);
    TEST_CHECK(nl == (size_t)B * T * V, "logits size");
    gpt2_forward(m, b->inputs, NULL, doc_start, B, T, 0.0f, NULL);
    float* got = ref_logits_unpadded(m, B * T);
    printf("packed logits: max error %.3g of max |ref|\n", max_err_rel(got, want, nl));
    test_allclose("packed logits == each record alone (transformers)", got, want, nl, tols()->rel, tols()->logits * ref_max_abs(want, nl));
    free(got);
    // the same batch as plain rows: records see their neighbours, positions run on
    gpt2_forward(m, b->inputs, NULL, NULL, B, T, 0.0f, NULL);
    got = ref_logits_unpadded(m, B * T);
    const double plain = max_err_rel(got, want, nl);
    TEST_CHECK(plain > 5 * tols()->logits, "without the record starts the logits should differ (max error %.3g)", plain);
    printf("ok   the same batch unpacked differs (max error %.3g of max |ref|)\n", plain);
    free(got); free(want);

    long nv = 0;
    double sum = gpt2_forward(m, b->inputs, b->targets, doc_start, B, T, 0.0f, &nv);
    float* losses = (float*)mallocCheck((size_t)B * T * sizeof(float));
    ops_to_host(losses, m->acts.losses, (size_t)B * T * sizeof(float));
    float* want_l = ref_read(ref, "losses", NULL);
    float* want_loss = ref_read(ref, "loss", NULL);
    test_allclose("packed per-token losses == each record alone", losses, want_l, (size_t)B * T, 0.0, tols()->token_loss);
    const double loss = sum / (double)nv;
    TEST_CHECK(nv == b->valid && fabs(loss - want_loss[0]) <= tols()->loss, "mean loss %.7f over %ld targets, transformers %.7f over %ld",
               loss, nv, want_loss[0], b->valid);
    printf("packed loss %.7f (transformers, each record alone: %.7f)\n", loss, want_loss[0]);
    free(losses); free(want_l); free(want_loss);
}

// Every trained gradient (the model's and the adapters') after one backward: ours, then the
// adapters', as host fp32.
static float* all_grads(Model* mo, size_t* n) {
    const size_t ng = mo->gpt.grads_n, na = mo->lora ? mo->lora->total : 0;
    float* g = (float*)mallocCheck((ng + na + 1) * sizeof(float));
    if (ng) ops_download_f32(g, mo->gpt.grads, ng);
    if (na) lora_get_grads(mo->lora, g + ng);
    *n = ng + na;
    return g;
}

// One training step's gradients: the packed batch at once, and each record alone (unpacked, the
// same 1 / (trained targets) scale) accumulated.
static void check_grads(const char* what, Model* mo, const RefBatch* b, const int* doc_start) {
    GPT2* m = &mo->gpt;
    const int B = b->B, T = b->T;
    const float dloss = 1.0f / (float)b->valid;
    gpt2_zero_grads(m);
    gpt2_forward(m, b->inputs, b->targets, doc_start, B, T, dloss, NULL);
    gpt2_backward(m, NULL);
    size_t n;
    float* packed = all_grads(mo, &n);
    Run runs[64];
    const int nr = find_runs(doc_start, B, T, runs);
    gpt2_zero_grads(m);
    for (int k = 0; k < nr; k++) {
        const int off = runs[k].row * T + runs[k].start;
        gpt2_forward(m, b->inputs + off, b->targets + off, NULL, 1, runs[k].len, dloss, NULL);
        if (m->has_targets) gpt2_backward(m, NULL);
    }
    float* alone = all_grads(mo, &n);
    char w[200];
    snprintf(w, sizeof(w), "%s: packed step gradients == the sum over the %d records alone", what, nr);
    printf("%s: gradients: max error %.3g of max |alone|\n", what, max_err_rel(packed, alone, n));
    test_allclose(w, packed, alone, n, tols()->rel, tols()->grad * ref_max_abs(alone, n));
    TEST_CHECK(ref_max_abs(alone, n) > 0, "%s: the gradients are not all zero", what);
    free(packed); free(alone);
}

// LoRA on every linear layer, r = 8, with B drawn non-zero (PEFT starts it at 0, where A would
// get no gradient).
static LoraModel* make_lora(const GPT2Config* cfg) {
    LoraSpec spec;
    memset(&spec, 0, sizeof(spec));
    char err[256];
    spec.rank = 8; spec.alpha = 16;
    if (lora_parse_targets("all-linear", &spec.targets, err, sizeof(err))) fatal(NULL, "%s", err);
    if (lora_parse_layers("all", cfg->num_layers, &spec, err, sizeof(err))) fatal(NULL, "%s", err);
    LoraModel* lm = lora_create(cfg, &spec);
    lora_init_params(lm, 11);
    float* p = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, p);
    TestRng rng = { 77, 0 };
    for (int i = 0; i < lm->n; i++)
        for (size_t j = 0; j < (size_t)lm->ad[i].out * lm->ad[i].rank; j++)
            p[lm->ad[i].b_off + j] = 0.05f * (float)(2.0 * test_rand_uniform(&rng) - 1.0);
    lora_set_params(lm, p);
    free(p);
    return lm;
}

int main(int argc, char** argv) {
    TestBase tb;
    StFile ref;
    test_model_start(argc, argv, REF_DIR, &tb, &ref);
    const StTensor* td = st_find(&ref, "doc_start");
    TEST_CHECK(td && td->numel == (size_t)tb.batch.B * tb.batch.T, "doc_start [B, T] in the reference");
    int* doc_start = (int*)mallocCheck(td->numel * sizeof(int));
    st_read_i32(&ref, td, doc_start);

    Model full;
    test_model(&full, &tb, tb.weights, GPT2_TRAIN_ALL, NULL, 0, GPT2_RECOMPUTE_NONE);
    check_forward(&full.gpt, &tb.batch, doc_start, &ref);
    check_grads("full model", &full, &tb.batch, doc_start);
    model_free(&full);

    if (!test_quick()) {
        LoraModel* lm = make_lora(&tb.cfg);
        Model lora;
        test_model(&lora, &tb, tb.weights, 0, lm, 0, GPT2_RECOMPUTE_NONE);
        check_grads("LoRA r=8 on all linear layers", &lora, &tb.batch, doc_start);
        model_free(&lora);
        lora_free(lm);
    }

    free(doc_start);
    st_close(&ref);
    test_base_free(&tb);
    return test_finish("test_pack");
}
