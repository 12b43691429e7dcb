// Activation recompute (--recompute 1: GELU, 2: GELU + layernorms) must not change a single bit:
// the tiny GPT-2 of test/ref/gpt2_tiny gives the same loss, the same gradient of every parameter
// and the same loss after an AdamW step at levels 0, 1 and 2 (CPU backend), while the activation
// memory shrinks by exactly the buffers backward recomputes.
#include "test.h"
#include "ref.h"
#include "../llmc/gpt2.h"
#include "../llmc/model_io.h"
#include "../llmc/optimizer.h"
#include "../llmc/safetensors.h"
#include "../llmc/check.h"

#define REF_DIR "test/ref/gpt2_tiny"

typedef struct { double loss, loss2; float *grads, *grads2; size_t n; size_t act_bytes, scr_bytes; } Run;

static Run run_level(int level, const GPT2Config* cfg, const float* host, const int* inputs, const int* targets,
                     int B, int T) {
    Run r;
    GPT2 m;
    gpt2_init(&m, cfg, GPT2_TRAIN_ALL);
    gpt2_set_params(&m, host);
    gpt2_set_recompute(&m, level);
    gpt2_alloc_acts(&m, B, T);
    r.act_bytes = m.act_bytes; r.scr_bytes = m.scr_bytes;
    gpt2_zero_grads(&m);
    long nv = 0;
    r.loss = gpt2_forward(&m, inputs, targets, B, T, 1.0f / (float)(B * T), &nv);
    gpt2_backward(&m, NULL);
    r.n = m.grads_n;
    r.grads = (float*)mallocCheck(r.n * sizeof(float));
    ops_download_f32(r.grads, m.grads, r.n);
    // one AdamW step, then the loss of the updated model (backward again: a second pass over the
    // recomputed buffers with other contents)
    TrainSeg segs[NUM_PARAM_TENSORS];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        segs[i].name = m.pt.t[i].name; segs[i].p = m.p[i]; segs[i].g = m.g[i];
        segs[i].n = m.pt.t[i].numel; segs[i].weight_decay = m.pt.t[i].weight_decay;
    }
    Optimizer opt;
    opt_init(&opt, segs, NUM_PARAM_TENSORS, 0, (size_t)-1);
    opt_step(&opt, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 7);
    gpt2_zero_grads(&m);
    r.loss2 = gpt2_forward(&m, inputs, targets, B, T, 1.0f / (float)(B * T), &nv);
    gpt2_backward(&m, NULL);
    r.grads2 = (float*)mallocCheck(r.n * sizeof(float));
    ops_download_f32(r.grads2, m.grads, r.n);
    opt_free(&opt);
    gpt2_free(&m);
    return r;
}

static size_t r256(size_t b) { return (b + 255) & ~(size_t)255; }

int main(void) {
    ops_init(2);
    GPT2Config cfg; ParamTable pt; float* host = NULL;
    model_load(REF_DIR, &cfg, &pt, &host);
    StFile ref;
    st_open(&ref, REF_DIR "/ref.safetensors");
    RefBatch batch = ref_read_batch(&ref);
    const int B = batch.B, T = batch.T;
    int* inputs = batch.inputs;
    int* targets = batch.targets;

    Run r[3];
    for (int k = 0; k < 3; k++) r[k] = run_level(k, &cfg, host, inputs, targets, B, T);
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
    st_close(&ref);
    free(host); free(inputs); free(targets);
    return test_finish("test_recompute");
}
