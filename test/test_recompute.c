// Activation recompute (--recompute 1: GELU, 2: GELU + layernorms) must not change a single bit:
// the tiny GPT-2 of test/ref/gpt2_tiny gives the same loss, the same gradient of every parameter
// and the same loss after an AdamW step at levels 0, 1 and 2 (CPU backend), while the activation
// memory shrinks by exactly the buffers backward recomputes.
#include "fixtures.h"

#define REF_DIR "test/ref/gpt2_tiny"

typedef struct { double loss, loss2; float *grads, *grads2; size_t n; size_t act_bytes, scr_bytes; } Run;

static Run run_level(int level, const TestBase* tb) {
    Run r;
    Model model;
    test_model(&model, tb, tb->weights, GPT2_TRAIN_ALL, NULL, 0, level);
    GPT2* m = &model.gpt;
    const int B = tb->batch.B, T = tb->batch.T;
    const int* inputs = tb->batch.inputs;
    const int* targets = tb->batch.targets;
    r.act_bytes = m->act_bytes; r.scr_bytes = m->scr_bytes;
    gpt2_zero_grads(m);
    long nv = 0;
    r.loss = gpt2_forward(m, inputs, targets, NULL, B, T, 1.0f / (float)(B * T), &nv);
    gpt2_backward(m, NULL);
    r.n = m->grads_n;
    r.grads = (float*)mallocCheck(r.n * sizeof(float));
    ops_download_f32(r.grads, m->grads, r.n);
    // one AdamW step, then the loss of the updated model (backward again: a second pass over the
    // recomputed buffers with other contents)
    TrainSeg segs[NUM_PARAM_TENSORS];
    int nseg = model_segments(&model, segs);
    Optimizer opt;
    opt_init(&opt, segs, nseg, 0, (size_t)-1);
    opt_step(&opt, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 7);
    gpt2_zero_grads(m);
    r.loss2 = gpt2_forward(m, inputs, targets, NULL, B, T, 1.0f / (float)(B * T), &nv);
    gpt2_backward(m, NULL);
    r.grads2 = (float*)mallocCheck(r.n * sizeof(float));
    ops_download_f32(r.grads2, m->grads, r.n);
    opt_free(&opt);
    model_free(&model);
    return r;
}

static size_t r256(size_t b) { return (b + 255) & ~(size_t)255; }

int main(void) {
    ops_init(2);
    TestBase tb;
    test_base_load(&tb, REF_DIR);
    const GPT2Config cfg = tb.cfg;
    const int B = tb.batch.B, T = tb.batch.T;

    Run r[3];
    for (int k = 0; k < 3; k++) r[k] = run_level(k, &tb);
    const size_t L = (size_t)cfg.num_layers, C = (size_t)cfg.channels, BT = (size_t)B * T, X = sizeof(floatX);
    for (int k = 1; k < 3; k++) {
        int failures_before = test_failures;
        TEST_CHECK(r[k].loss == r[0].loss, "recompute %d: loss %.17g differs from %.17g", k, r[k].loss, r[0].loss);
        TEST_CHECK(r[k].loss2 == r[0].loss2, "recompute %d: loss after an AdamW step %.17g differs from %.17g", k, r[k].loss2, r[0].loss2);
        TEST_CHECK(r[k].n == r[0].n && memcmp(r[k].grads, r[0].grads, r[0].n * sizeof(float)) == 0,
                   "recompute %d: gradients differ from recompute 0", k);
        TEST_CHECK(memcmp(r[k].grads2, r[0].grads2, r[0].n * sizeof(float)) == 0,
                   "recompute %d: gradients after an AdamW step differ from recompute 0", k);
        if (test_failures == failures_before)
            printf("recompute %d: loss, %zu gradients, and loss and gradients after an AdamW step bit-identical to recompute 0\n", k, r[0].n);
    }
    // memory: level 1 drops L-1 layers of fch_gelu (B*T*4C), level 2 also L-1 layers of ln1 and ln2,
    // and adds two (B*T) fp32 statistics to the scratch
    size_t want1 = r[0].act_bytes - (r256(L * BT * 4 * C * X) - r256(BT * 4 * C * X));
    size_t want2 = want1 - 2 * (r256(L * BT * C * X) - r256(BT * C * X));
    TEST_CHECK(r[1].act_bytes == want1, "recompute 1: activations %zu bytes, want %zu", r[1].act_bytes, want1);
    TEST_CHECK(r[2].act_bytes == want2, "recompute 2: activations %zu bytes, want %zu", r[2].act_bytes, want2);
    TEST_CHECK(r[1].scr_bytes == r[0].scr_bytes && r[2].scr_bytes == r[0].scr_bytes + 2 * r256(BT * sizeof(float)),
               "scratch bytes %zu %zu %zu", r[0].scr_bytes, r[1].scr_bytes, r[2].scr_bytes);
    printf("activation bytes: recompute 0 %zu, 1 %zu, 2 %zu (+ scratch %zu, %zu, %zu)\n", r[0].act_bytes, r[1].act_bytes,
           r[2].act_bytes, r[0].scr_bytes, r[1].scr_bytes, r[2].scr_bytes);

    for (int k = 0; k < 3; k++) { free(r[k].grads); free(r[k].grads2); }
    test_base_free(&tb);
    return test_finish("test_recompute");
}
