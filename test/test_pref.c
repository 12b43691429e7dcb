// Preference objectives through the whole model, one source for both backends: a packed batch of
// preference pairs (test/ref/pref_tiny, dev/gen_pref_ref.py model: two windows of 64 holding two
// pairs each, a 3-token beside a 20-token completion, completions that differ only in their first
// token) scored by one forward, reduced per sequence (ops.h seq_logp_sums), the loss of
// llmc/model/prefloss.h and the backward through classifier_train_rows (llmc/model/prefmodel.h),
// against TRL 1.16 running the same pairs unpacked (its collators pad each sequence):
//   - each pair's loss alone, TRL's logged means over the batch (loss, rewards, accuracies,
//     margins, logps, ORPO's NLL and log odds), every gradient, and 10 AdamW steps (losses and
//     gradient norms), for DPO, IPO, ORPO and SimPO with TRL's defaults;
//   - full fine-tuning: the reference of DPO / IPO is another model (its log-probabilities against
//     TRL's too), and for the 10 steps the policy before training, scored once (TRL's
//     precompute_ref_log_probs);
//   - LoRA on every linear layer (PEFT + TRL): the reference is the same base with the adapters
//     off (model_set_adapters), and with modules_to_save ["ln_f"] (DPO) the base's ln_f;
//   - the stored reference log-probabilities (llmc/run/reflogps.h): the batch written as a pair
//     shard (the format of docs/FORMATS.md), scored through an evaluation loader with the
//     reference model (TRL's values again), saved, read back, looked up by the loader's pair
//     numbers; a file of another key (other data or pair count, other weights, other batches, the
//     format's version 1), changed, crafted (a pair count whose bytes overflow, values that are no
//     log-probabilities: NaN, 1e308) or cut short is not read back, with the reason.
//
// Builds: test/test_pref.c as C on the CPU backend (fp32); test/test_pref.cu includes this file
// for the CUDA backend (bf16), run under the CUDA-on-CPU harness, where the 10 steps run for DPO
// only (the harness runs a step a hundred times slower; every objective's gradients are checked).
//
// Tolerances. fp32 (CPU): losses and means 1e-5 (relative to the value, or absolute below 1),
// log-probabilities 1e-5 of their magnitude, gradients 1e-5 of max |ref| (+ 1e-5 relative), the
// 10 step losses 1e-5, grad norms 1e-4 relative; measured: 1.1e-6, 1.6e-6 of max |ref|. bf16
// (CUDA): the per-token log-probabilities are a bf16 model's and the objectives take differences
// of their sums: losses and means 5e-3 (measured under the harness 4.1e-4), log-probabilities
// 5e-3 relative (6e-5), gradients 6e-2 of max |ref| as test_lora's adapters (2.3e-2, a lora_A),
// step losses 5e-3 (+ 5e-3 relative; 2e-4 relative), norms 5e-2 relative (1.2e-3); a reward
// accuracy counts pairs, one of the four may flip where its margin is near 0.
#include "fixtures.h"
#include "../llmc/model/prefloss.h"
#include "../llmc/model/prefmodel.h"
#include "../llmc/run/reflogps.h"
#include "../llmc/base/crc32c.h"
#include "../llmc/base/fileio.h"
#include "test_child.h"
#include <math.h>
#include <unistd.h>

#define REF_DIR "test/ref/pref_tiny"

typedef struct { double loss, logp, grad, rel, step_loss, norm; } Tols;
static const Tols TOL_BF16 = { 5e-3, 5e-3, 6e-2, 0.0, 5e-3, 5e-2 };
static const Tols TOL_F32 = { 1e-5, 1e-5, 1e-5, 1e-5, 1e-5, 1e-4 };
static const Tols* tols(void) { return test_is_bf16() ? &TOL_BF16 : &TOL_F32; }

typedef struct {
    StFile* ref;
    RefBatch* b;
    int* doc_start;
    PrefPair pairs[16];
    int n;
    PrefWork w;
} Batch;

static double worst_loss = 0, worst_grad = 0; // (the full model's gradients: ref_check_lora_grads prints the adapters')

// |got - want| within tol of max(1, |want|)
static void check_scalar(const char* what, double got, double want, double tol) {
    const double err = fabs(got - want) / fmax(1.0, fabs(want));
    if (err > worst_loss) worst_loss = err;
    TEST_CHECK(err <= tol, "%s: %.9g, TRL %.9g (error %.3g, tolerance %.3g)", what, got, want, err, tol);
}

// The reference's sequence log-probabilities for each pair: pref_score of ref_model (or of m with
// its adapters off: LoRA).
static void score_reference(Model* m, Model* ref_model, Batch* bt, const int* targets, PrefSeqs* seqs) {
    Model* r = ref_model ? ref_model : m;
    if (!ref_model) model_set_adapters(m, 0);
    pref_score(&r->gpt, &bt->w, bt->b->inputs, targets, bt->doc_start, bt->b->B, bt->b->T, bt->pairs, bt->n, 1, 0, seqs, NULL, NULL);
    if (!ref_model) model_set_adapters(m, 1);
}

// The loss of pairs [0, n) of the batch (its reference from ref_seqs, or scored now), its terms
// and means; the forward's activations stay for pref_backward.
static void batch_loss(Model* m, const PrefConfig* c, Batch* bt, const PrefPair* pairs, int n, const PrefSeqs* ref_seqs,
                       Model* ref_model, PrefPairOut* outs, PrefMeans* mean, double* nll_tokens) {
    Batch sub = *bt;
    memcpy(sub.pairs, pairs, (size_t)n * sizeof(PrefPair));
    sub.n = n;
    const int* targets = pref_targets(&bt->w, c, bt->b->inputs, bt->b->targets, pairs, n);
    int* tcopy = (int*)mallocCheck((size_t)bt->b->B * bt->b->T * sizeof(int));
    memcpy(tcopy, targets, (size_t)bt->b->B * bt->b->T * sizeof(int));
    PrefSeqs seqs[16];
    memset(seqs, 0, sizeof(seqs));
    if (pref_uses_reference(c->objective)) {
        if (ref_seqs) for (int i = 0; i < n; i++) { seqs[i].ref_c = ref_seqs[i].ref_c; seqs[i].ref_r = ref_seqs[i].ref_r; }
        else score_reference(m, ref_model, &sub, tcopy, seqs);
    }
    double nll_sum = 0;
    long nll_n = 0;
    const int nll = pref_uses_nll(c->objective);
    pref_score(&m->gpt, &bt->w, bt->b->inputs, tcopy, bt->doc_start, bt->b->B, bt->b->T, pairs, n, 0, nll, seqs, &nll_sum, &nll_n);
    PrefMetrics mt;
    memset(&mt, 0, sizeof(mt));
    for (int i = 0; i < n; i++) { pref_pair(c, &seqs[i], &outs[i]); pref_metrics_add(&mt, &outs[i]); }
    mt.nll_sum = nll_sum; mt.nll_tokens = (double)nll_n;
    pref_metrics_mean(c, &mt, mean);
    *nll_tokens = (double)nll_n;
    free(tcopy);
}

// Every parameter gradient of a fully trained model against TRL's <set>.grad.<HF name>.
static void check_full_grads(const char* set, GPT2* m, StFile* ref) {
    const ParamTable* pt = &m->pt;
    const int V = m->cfg.vocab_size;
    double worst = 0;
    char worst_key[400] = "";
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &pt->t[id];
        const int layers = p->per_layer ? m->cfg.num_layers : 1;
        const size_t rows = id == PT_WTE ? (size_t)V : p->rows, cols = p->cols, ln = params_layer_numel(pt, (ParamId)id);
        float* ours = (float*)mallocCheck(rows * cols * sizeof(float));
        float* gl = (float*)mallocCheck(ln * sizeof(float));
        for (int l = 0; l < layers; l++) {
            char key[256], gkey[400];
            params_hf_key(key, sizeof(key), (ParamId)id, l, "transformer.");
            snprintf(gkey, sizeof(gkey), "%s.grad.%s", set, key);
            size_t n;
            float* want = ref_read(ref, gkey, &n);
            TEST_CHECK(n == rows * cols, "%s size", gkey);
            ops_download_f32(gl, m->g[id] + (size_t)l * ln, ln);
            for (size_t r = 0; r < rows; r++) // (HF Conv1D weights are [in, out]; ours [out, in])
                for (size_t c = 0; c < cols; c++) ours[p->hf_transposed ? c * rows + r : r * cols + c] = gl[r * cols + c];
            ref_note_error(ours, want, n, gkey, &worst, worst_key, sizeof(worst_key));
            test_allclose(gkey, ours, want, n, tols()->rel, tols()->grad * ref_max_abs(want, n));
            free(want);
        }
        free(ours); free(gl);
    }
    if (worst > worst_grad) worst_grad = worst;
    printf("%s: gradients: worst error %.3g of max |ref| (%s)\n", set, worst, worst_key);
}

// One set: each pair alone, the batch's means, every gradient.
static void check_set(const char* set, Model* m, const PrefConfig* c, Batch* bt, const PrefSeqs* ref_seqs, Model* ref_model) {
    char key[160], what[200];
    snprintf(key, sizeof(key), "%s.pair_loss", set);
    size_t np;
    float* want_pair = ref_read(bt->ref, key, &np);
    TEST_CHECK((int)np == bt->n, "%s: %zu pairs", key, np);
    PrefPairOut outs[16];
    PrefMeans mean;
    double nll_tokens;
    for (int i = 0; i < bt->n; i++) { // each pair alone (TRL: a batch of one pair; ORPO: its own NLL mean)
        batch_loss(m, c, bt, &bt->pairs[i], 1, ref_seqs ? &ref_seqs[i] : NULL, ref_model, outs, &mean, &nll_tokens);
        snprintf(what, sizeof(what), "%s: pair %d's loss", set, i);
        check_scalar(what, mean.loss, want_pair[i], tols()->loss);
    }
    gpt2_zero_grads(&m->gpt);
    batch_loss(m, c, bt, bt->pairs, bt->n, ref_seqs, ref_model, outs, &mean, &nll_tokens);
    snprintf(key, sizeof(key), "%s.metrics", set);
    float* want = ref_read(bt->ref, key, NULL);
    const double got[10] = { mean.loss, mean.rewards_c, mean.rewards_r, mean.accuracies, mean.margins, mean.logps_c, mean.logps_r,
                             mean.nll_loss, mean.log_odds_ratio, mean.log_odds_chosen };
    static const char* names[10] = { "loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
                                     "logps/chosen", "logps/rejected", "nll_loss", "log_odds_ratio", "log_odds_chosen" };
    for (int k = 0; k < 10; k++) {
        snprintf(what, sizeof(what), "%s: %s", set, names[k]);
        // (an accuracy counts pairs: a reward margin near 0 may flip in bf16, a quarter of the pairs here)
        check_scalar(what, got[k], want[k], k == 3 && test_is_bf16() ? 0.26 : tols()->loss);
    }
    printf("%s: loss %.7f (TRL %.7f), rewards/margins %.6f (TRL %.6f), accuracy %.2f (TRL %.2f)\n", set, mean.loss, want[0],
           mean.margins, want[4], mean.accuracies, want[3]);
    pref_backward(&m->gpt, &bt->w, bt->pairs, outs, bt->n, 1.0 / bt->n, pref_uses_nll(c->objective) ? 1.0 / nll_tokens : 0.0, NULL);
    snprintf(key, sizeof(key), "%s.grad.", set);
    if (m->lora) {
        ref_check_lora_grads(set, m->lora, 1, bt->ref, key, tols()->rel, tols()->grad);
    } else check_full_grads(set, &m->gpt, bt->ref);
    free(want_pair); free(want);
}

// 10 AdamW steps on the batch (the reference's hyperparameters); DPO / IPO of full fine-tuning
// against the policy before training, scored once.
static void check_steps(const char* set, Model* m, const PrefConfig* c, Batch* bt) {
    RefAdamW h = ref_adamw(bt->ref);
    TrainSeg* segs = (TrainSeg*)mallocCheck((size_t)model_max_segments(m) * sizeof(TrainSeg));
    const int nseg = model_segments(m, segs);
    Optimizer opt;
    opt_init(&opt, segs, nseg, 0, (size_t)-1);
    free(segs);
    float losses[16], norms[16];
    PrefSeqs ref0[16];
    const int frozen_ref = !m->lora && pref_uses_reference(c->objective);
    if (frozen_ref) {
        const int* targets = pref_targets(&bt->w, c, bt->b->inputs, bt->b->targets, bt->pairs, bt->n);
        int* tcopy = (int*)mallocCheck((size_t)bt->b->B * bt->b->T * sizeof(int));
        memcpy(tcopy, targets, (size_t)bt->b->B * bt->b->T * sizeof(int));
        pref_score(&m->gpt, &bt->w, bt->b->inputs, tcopy, bt->doc_start, bt->b->B, bt->b->T, bt->pairs, bt->n, 1, 0, ref0, NULL, NULL);
        free(tcopy);
    }
    for (int s = 0; s < h.steps; s++) {
        PrefPairOut outs[16];
        PrefMeans mean;
        double nll_tokens;
        gpt2_zero_grads(&m->gpt);
        batch_loss(m, c, bt, bt->pairs, bt->n, frozen_ref ? ref0 : NULL, NULL, outs, &mean, &nll_tokens);
        pref_backward(&m->gpt, &bt->w, bt->pairs, outs, bt->n, 1.0 / bt->n, pref_uses_nll(c->objective) ? 1.0 / nll_tokens : 0.0, NULL);
        const double norm = sqrt(opt_grad_sumsq(&opt, 0, opt.total));
        opt_step(&opt, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, opt_clip_scale(norm, h.grad_clip), 1234u + (uint32_t)s);
        losses[s] = (float)mean.loss;
        norms[s] = (float)norm;
    }
    opt_free(&opt);
    char key[160];
    snprintf(key, sizeof(key), "%s", set);
    StFile* ref = bt->ref;
    // (ref_check_train reads train_losses / train_grad_norms: the set's, under their full names)
    size_t ns;
    snprintf(key, sizeof(key), "%s.train_losses", set);
    float* want_l = ref_read(ref, key, &ns);
    snprintf(key, sizeof(key), "%s.train_grad_norms", set);
    float* want_n = ref_read(ref, key, NULL);
    char what[200];
    snprintf(what, sizeof(what), "%s: %d AdamW step losses", set, h.steps);
    test_allclose(what, losses, want_l, (size_t)h.steps, tols()->step_loss, tols()->step_loss);
    snprintf(what, sizeof(what), "%s: %d AdamW step grad norms", set, h.steps);
    test_allclose(what, norms, want_n, (size_t)h.steps, tols()->norm, 1e-6);
    printf("%s: %d steps: loss %.6f -> %.6f (TRL %.6f -> %.6f)\n", set, h.steps, losses[0], losses[h.steps - 1], want_l[0], want_l[h.steps - 1]);
    free(want_l); free(want_n);
}

static void read_batch(Batch* bt, StFile* ref, RefBatch* b) {
    memset(bt, 0, sizeof(*bt));
    bt->ref = ref; bt->b = b;
    const StTensor* td = st_find(ref, "doc_start");
    const StTensor* tp = st_find(ref, "pairs");
    TEST_CHECK(td && td->numel == (size_t)b->B * b->T && tp && tp->ndim == 2 && tp->shape[1] == 5 && tp->shape[0] <= 16, "doc_start, pairs");
    bt->doc_start = (int*)mallocCheck(td->numel * sizeof(int));
    st_read_i32(ref, td, bt->doc_start);
    int raw[16 * 5];
    st_read_i32(ref, tp, raw);
    bt->n = (int)tp->shape[0];
    for (int i = 0; i < bt->n; i++) {
        PrefPair* p = &bt->pairs[i];
        p->c_first = raw[5 * i]; p->c_begin = raw[5 * i + 1]; p->c_end = raw[5 * i + 2]; p->r_begin = raw[5 * i + 3]; p->r_end = raw[5 * i + 4];
    }
    pref_work_init(&bt->w, b->B, b->T);
}

// The reference model's log-probabilities (full fine-tuning's DPO / IPO) against TRL's.
static void check_reference(Model* ref_model, const PrefConfig* c, Batch* bt, PrefSeqs* seqs) {
    const int* targets = pref_targets(&bt->w, c, bt->b->inputs, bt->b->targets, bt->pairs, bt->n);
    int* tcopy = (int*)mallocCheck((size_t)bt->b->B * bt->b->T * sizeof(int));
    memcpy(tcopy, targets, (size_t)bt->b->B * bt->b->T * sizeof(int));
    pref_score(&ref_model->gpt, &bt->w, bt->b->inputs, tcopy, bt->doc_start, bt->b->B, bt->b->T, bt->pairs, bt->n, 1, 0, seqs, NULL, NULL);
    free(tcopy);
    size_t n;
    float* want = ref_read(bt->ref, "full.ref_logps", &n);
    float got[32];
    for (int i = 0; i < bt->n; i++) { got[2 * i] = (float)seqs[i].ref_c; got[2 * i + 1] = (float)seqs[i].ref_r; }
    TEST_CHECK(n == (size_t)2 * bt->n, "full.ref_logps size");
    test_allclose("reference model's log-probabilities (full fine-tuning) vs TRL's", got, want, n, tols()->logp, 1e-6);
    free(want);
}

// ---- the stored reference log-probabilities

// The batch as a pair shard (docs/FORMATS.md): its tokens and the closing one; the mask's bit 0
// from the targets, bit 1 at each record start (doc_start), 4 / 8 at a pair's chosen / rejected
// record (its first position, and where the chosen record's targets end).
static void write_batch_shard(const char* path, const Batch* bt) {
    const int N = bt->b->B * bt->b->T, T = bt->b->T;
    uint16_t* tok = (uint16_t*)mallocCheck((size_t)(N + 1) * sizeof(uint16_t));
    uint8_t* mask = (uint8_t*)callocCheck((size_t)N + 1, 1);
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)bt->b->inputs[i];
    tok[N] = 99;
    for (int i = 0; i < N; i++) {
        if (bt->b->targets[i] >= 0) mask[i + 1] |= MASK_TRAINED;
        if (bt->doc_start[i] == i % T) mask[i] |= MASK_START;
    }
    for (int k = 0; k < bt->n; k++) { mask[bt->pairs[k].c_first] |= MASK_CHOSEN; mask[bt->pairs[k].c_end] |= MASK_REJECTED; }
    int32_t h[256] = {0};
    h[0] = SHARD_MAGIC; h[1] = 1; h[2] = N + 1; h[SHARD_WINDOW] = T; h[SHARD_PACKED] = 1; h[SHARD_HAS_MASK] = 1; h[SHARD_PAIRS] = 1;
    FILE* f = fopen(path, "wb");
    fwrite(h, 4, 256, f); fwrite(tok, 2, (size_t)N + 1, f); fclose(f);
    char mp[600];
    shard_mask_path(mp, sizeof(mp), path);
    h[0] = MASK_MAGIC; h[1] = MASK_VERSION_PAIRS; h[SHARD_PAIRS] = 0;
    f = fopen(mp, "wb");
    fwrite(h, 4, 256, f); fwrite(mask, 1, (size_t)N + 1, f); fclose(f);
    free(tok); free(mask);
}

// reflogps_load of a file changed after it was written: the outcome and the words of its reason.
static void expect_load(const char* what, const char* path, const RefKey* key, int outcome, const char* want) {
    RefLogps r;
    char why[1024] = "";
    const int got = reflogps_load(&r, path, key, why, sizeof(why));
    TEST_CHECK(got == outcome && strstr(why, want) != NULL && r.logp == NULL, "%s: outcome %d (want %d), '%s'", what, got, outcome, why);
    reflogps_free(&r);
}

// The file's header field k set to v, the header's CRC-32C (field 8) and, with values, the values'
// (field 5) written again to match: a file as someone crafting it would make it.
static void craft(const char* path, int k, int64_t v, int values_crc) {
    FILE* f = fopen(path, "r+b");
    int64_t h[128];
    TEST_CHECK(f && fread(h, 8, 128, f) == 128, "read %s", path);
    h[k] = v;
    if (values_crc) { // (the values that are there: what the file's size holds)
        fseek(f, 0, SEEK_END);
        const long n = ftell(f) - 1024;
        double* x = (double*)malloc((size_t)n + 1);
        fseek(f, 1024, SEEK_SET);
        TEST_CHECK(fread(x, 1, (size_t)n, f) == (size_t)n, "values");
        h[5] = crc32c(0, x, (size_t)n);
        free(x);
    }
    h[8] = crc32c(0, h, 8 * sizeof(int64_t));
    fseek(f, 0, SEEK_SET);
    fwrite(h, 8, 128, f);
    fclose(f);
}

// Value v written at pair 0's chosen slot of path, the CRC-32Cs matched: refused as no log-probability.
static void craft_value(const char* path, const RefKey* key, double v, const char* what) {
    FILE* f = fopen(path, "r+b");
    fseek(f, 1024, SEEK_SET); fwrite(&v, sizeof(v), 1, f); fclose(f);
    craft(path, 0, REFLOGPS_MAGIC, 1);
    expect_load(what, path, key, REFLOGPS_DAMAGED, "not sums of log-probabilities");
}

static void check_reflogps(Model* refm, Batch* bt, const PrefSeqs* want) {
    char dir[] = "/tmp/llmc-reflogps-XXXXXX", shard[256], path[256];
    TEST_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(shard, sizeof(shard), "%s/p_val_000000.bin", dir);
    snprintf(path, sizeof(path), "%s/ref_logps.bin", dir);
    write_batch_shard(shard, bt);
    DataLoader dl;
    dl_init_eval(&dl, shard, 1, bt->b->T, 0, 1, refm->gpt.cfg.vocab_size); // (a window a batch: 2 batches)
    PrefWork w;
    pref_work_init(&w, 1, bt->b->T);
    RefLogps r, back;
    const RefKey key = { 0x1234abcd5678ull, dl.data_id, dl.n_pairs, 1, bt->b->T };
    reflogps_compute(&r, &refm->gpt, &w, &dl, NULL, &key);
    TEST_CHECK(r.key.n_pairs == bt->n && reflogps_first_bad(&r) < 0, "%lld pairs, all log-probability sums", (long long)r.key.n_pairs);
    float got[32], exp[32];
    for (int i = 0; i < bt->n; i++) {
        got[2 * i] = (float)r.logp[2 * i]; got[2 * i + 1] = (float)r.logp[2 * i + 1];
        exp[2 * i] = (float)want[i].ref_c; exp[2 * i + 1] = (float)want[i].ref_r;
    }
    test_allclose("reference log-probabilities through the loader (a window a batch) == the batch's", got, exp, (size_t)2 * bt->n, tols()->logp, 1e-6);
    char why[1024];
    TEST_CHECK(reflogps_load(&back, path, &key, why, sizeof(why)) == REFLOGPS_NONE, "no file yet: none");
    reflogps_save(&r, path);
    TEST_CHECK(reflogps_load(&back, path, &key, why, sizeof(why)) == REFLOGPS_READ && back.key.n_pairs == r.key.n_pairs &&
               memcmp(back.logp, r.logp, (size_t)(2 * r.key.n_pairs) * sizeof(double)) == 0, "saved and read back, bit for bit");
    int64_t ids[2] = { 3, 0 };
    PrefSeqs q[2];
    reflogps_lookup(&back, ids, 2, q);
    TEST_CHECK(q[0].ref_c == r.logp[6] && q[0].ref_r == r.logp[7] && q[1].ref_c == r.logp[0], "looked up by pair number");
    printf("ok   reference log-probabilities stored and read back (%lld pairs)\n", (long long)back.key.n_pairs);
    // another key: each thing the values depend on
    RefKey k2 = key; k2.data_id ^= 1u;
    expect_load("reference log-probabilities of other data", path, &k2, REFLOGPS_OTHER, "of other data");
    k2 = key; k2.n_pairs = key.n_pairs + 1;
    expect_load("of as many pairs as the data has (the loader's n_pairs)", path, &k2, REFLOGPS_OTHER, "of other data");
    k2 = key; k2.model_id += 1;
    expect_load("of other weights", path, &k2, REFLOGPS_OTHER, "of other weights (model id 00001234abcd5678; this run's reference: 00001234abcd5679)");
    k2 = key; k2.B = 2;
    expect_load("computed in other batches", path, &k2, REFLOGPS_OTHER, "computed in batches of 1 x 64 tokens (this run's: 2 x 64)");
    // damaged or crafted files, each refused before anything is allocated or read from their body
    const size_t bytes = (size_t)(1024 + 16 * r.key.n_pairs);
    char* saved = read_file_all(path, NULL);
#define RESTORE() atomic_write_file(path, saved, bytes)
    FILE* f = fopen(path, "r+b");
    fseek(f, 1024 + 9, SEEK_SET); fputc(0x5a, f); fclose(f);
    expect_load("changed values", path, &key, REFLOGPS_DAMAGED, "values' CRC-32C is not the header's");
    RESTORE(); craft(path, 6, 1, 0); f = fopen(path, "r+b"); fseek(f, 6 * 8, SEEK_SET); fputc(2, f); fclose(f);
    expect_load("a changed header", path, &key, REFLOGPS_DAMAGED, "header's CRC-32C is not the header's fields'");
    RESTORE(); craft(path, 2, ((int64_t)1 << 60) + key.n_pairs, 1); // (2^60 more pairs: their bytes wrap to the file's in 64 bits)
    expect_load("a pair count whose bytes overflow to the file's (2^60 + 4 pairs, 64 value bytes, CRC-32Cs matched)", path, &key, REFLOGPS_DAMAGED,
                "1152921504606846980 pairs do not make its 1088 bytes");
    RESTORE(); craft(path, 2, -1, 1);
    expect_load("a negative pair count", path, &key, REFLOGPS_DAMAGED, "pairs do not make its");
    RESTORE(); craft(path, 1, 1, 0);
    expect_load("a file of version 1 (its model id is no fingerprint of the weights)", path, &key, REFLOGPS_OTHER, "earlier version (1)");
    RESTORE(); craft_value(path, &key, NAN, "a NaN value (CRC-32Cs matched)");
    RESTORE(); craft_value(path, &key, 1e308, "a value of 1e308 (CRC-32Cs matched)");
    RESTORE(); craft_value(path, &key, -1e308, "a value of -1e308 (CRC-32Cs matched)");
    RESTORE();
    TEST_CHECK(truncate(path, 1024 + 8) == 0, "truncate");
    expect_load("a file cut short", path, &key, REFLOGPS_DAMAGED, "(truncated?)");
    TEST_CHECK(truncate(path, 100) == 0, "truncate");
    expect_load("a file shorter than its header", path, &key, REFLOGPS_DAMAGED, "too short");
#undef RESTORE
    free(saved);
    reflogps_free(&r); reflogps_free(&back);
    pref_work_free(&w);
    dl_free(&dl);
    unlink(path); unlink(shard);
    char mp[300];
    shard_mask_path(mp, sizeof(mp), shard);
    unlink(mp); rmdir(dir);
}

static LoraModel* load_adapter(const TestBase* tb, const char* name) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", REF_DIR, name);
    return peft_load_adapter(path, &tb->cfg);
}

int main(int argc, char** argv) {
    TestBase tb;
    StFile ref;
    test_model_start(argc, argv, REF_DIR, &tb, &ref);
    Batch bt;
    read_batch(&bt, &ref, &tb.batch);
    // LLMC_PREF_SHARD=PATH: write the reference batch as a pair shard and stop (test/test_pref_train.sh
    // trains the trainers on it against the same TRL references)
    const char* shard_out = getenv("LLMC_PREF_SHARD");
    if (shard_out && *shard_out) {
        write_batch_shard(shard_out, &bt);
        printf("wrote %s\n", shard_out);
        pref_work_free(&bt.w);
        free(bt.doc_start);
        st_close(&ref);
        test_base_free(&tb);
        return 0;
    }
    static const PrefObjective objs[4] = { PREF_DPO, PREF_IPO, PREF_ORPO, PREF_SIMPO };

    // ---- full fine-tuning; the reference of DPO / IPO: another model
    Model refm;
    ModelSpec rs;
    memset(&rs, 0, sizeof(rs));
    rs.path = REF_DIR "/ref"; rs.B = tb.batch.B; rs.T = tb.batch.T;
    model_assemble(&refm, &rs);
    PrefSeqs ref_seqs[16];
    for (int k = 0; k < 4; k++) {
        PrefConfig c;
        pref_config_default(&c, objs[k]);
        char set[64];
        snprintf(set, sizeof(set), "full.%s", pref_objective_name(objs[k]));
        Model full;
        test_model(&full, &tb, tb.weights, GPT2_TRAIN_ALL, NULL, 0, GPT2_RECOMPUTE_NONE);
        if (pref_uses_reference(objs[k])) check_reference(&refm, &c, &bt, ref_seqs);
        if (objs[k] == PREF_DPO) check_reflogps(&refm, &bt, ref_seqs);
        check_set(set, &full, &c, &bt, pref_uses_reference(objs[k]) ? ref_seqs : NULL, NULL);
        model_free(&full);
        if (test_quick() || (test_is_bf16() && objs[k] != PREF_DPO)) continue; // (the harness is slow: DPO's steps stand for all)
        test_model(&full, &tb, tb.weights, GPT2_TRAIN_ALL, NULL, 0, GPT2_RECOMPUTE_NONE);
        check_steps(set, &full, &c, &bt);
        model_free(&full);
    }
    model_free(&refm);

    // ---- LoRA: the reference is the base with the adapters off
    for (int k = 0; k < 4 && !test_quick(); k++) {
        PrefConfig c;
        pref_config_default(&c, objs[k]);
        char set[64];
        snprintf(set, sizeof(set), "lora.%s", pref_objective_name(objs[k]));
        for (int pass = 0; pass < 2; pass++) {
            LoraModel* lm = load_adapter(&tb, "lora");
            Model m;
            test_model(&m, &tb, tb.weights, lora_base_trainable_mask(lm), lm, 0, GPT2_RECOMPUTE_NONE);
            if (pass == 0) check_set(set, &m, &c, &bt, NULL, NULL);
            else if (!test_is_bf16() || objs[k] == PREF_DPO) check_steps(set, &m, &c, &bt);
            model_free(&m);
            lora_free(lm);
        }
    }
    // modules_to_save ["ln_f"]: the reference uses the base's ln_f (DPO)
    {
        PrefConfig c;
        pref_config_default(&c, PREF_DPO);
        LoraModel* lm = load_adapter(&tb, "lora_lnf");
        Model m;
        test_model(&m, &tb, tb.weights, lora_base_trainable_mask(lm), lm, 0, GPT2_RECOMPUTE_NONE);
        TEST_CHECK(m.ref_lnf != NULL, "lora_lnf: the base's ln_f kept for the reference");
        check_set("lora_lnf.dpo", &m, &c, &bt, NULL, NULL);
        model_free(&m);
        lora_free(lm);
    }
    printf("worst: losses and means %.3g (relative above 1), full fine-tuning's gradients %.3g of max |ref|\n", worst_loss, worst_grad);

    pref_work_free(&bt.w);
    free(bt.doc_start);
    st_close(&ref);
    test_base_free(&tb);
    return test_finish("test_pref");
}
