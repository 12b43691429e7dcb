#include "run/preftrain.h"
#include "base/check.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include "model/linear.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* const REF_FILES[2] = { "ref_logps_train.bin", "ref_logps_val.bin" };

static void pref_data_check(const DataLoader* dl, const char* flag, const char* objective) {
    if (dl->pairs) return;
    fatal("prepare the data from {\"prompt\", \"chosen\", \"rejected\"} records with data/prepare --pack T (docs/PREFERENCE.md), "
          "or train it with --objective sft",
          "%s '%s' holds no preference pairs: --objective %s trains on pairs", flag, dl->pattern, objective);
}

void preftrain_init(PrefTrain* p, const RunConfig* c, const DataLoader* train, const DataLoader* val, int B, int T, int accum) {
    memset(p, 0, sizeof(*p));
    pref_config_default(&p->cfg, (PrefObjective)c->objective);
    p->cfg.beta = c->f.pref_beta; p->cfg.label_smoothing = c->f.label_smoothing;
    p->cfg.orpo_lambda = c->f.orpo_lambda; p->cfg.simpo_gamma = c->f.simpo_gamma; // (checked: runconfig_derive)
    pref_data_check(train, "--train-data", c->f.objective);
    if (val) pref_data_check(val, "--val-data", c->f.objective);
    p->has_val = val != NULL;
    p->ref = !pref_uses_reference(p->cfg.objective) ? PREF_REF_NONE
           : c->mode == TRAIN_LORA && !c->f.ref_model ? PREF_REF_ADAPTERS_OFF : PREF_REF_STORED;
    p->B = B; p->T = T; p->accum = accum;
    p->maxp = dl_max_pairs(train);
    pref_work_init(&p->w, B, T);
    p->pairs = (PrefPair*)mallocCheck((size_t)accum * p->maxp * sizeof(PrefPair));
    p->ids = (int64_t*)mallocCheck((size_t)accum * p->maxp * sizeof(int64_t));
    p->n = (int*)callocCheck((size_t)accum, sizeof(int));
    p->seqs = (PrefSeqs*)callocCheck((size_t)p->maxp, sizeof(PrefSeqs));
    p->outs = (PrefPairOut*)callocCheck((size_t)p->maxp, sizeof(PrefPairOut));
}

// The reference model's id in the stored files: the path it was read from (absolute, as the run's
// record has it) and the seed (a model made from a size descriptor). Changing either is refused on
// resume, so a file another run left in --out, of the same data, is told apart by these.
static uint64_t pref_ref_id(const RunConfig* c) {
    const char* path = c->f.ref_model ? c->f.ref_model : c->f.model;
    char seed[32];
    snprintf(seed, sizeof(seed), "%d", c->f.seed);
    return ((uint64_t)crc32c(0, path, strlen(path)) << 32) | crc32c(0, seed, strlen(seed));
}

// The reference log-probabilities of one loader's pairs with model `ref` (an evaluation loader of
// its files: every pair once).
static void pref_ref_compute(PrefTrain* p, RefLogps* out, GPT2* ref, const DataLoader* dl, Comm* comm, uint64_t id) {
    DataLoader ev;
    dl_init_eval(&ev, dl->pattern, p->B, p->T, dl->rank, dl->world, dl->vocab_size);
    linear_set_training(ref->lin, 0, 0);
    reflogps_compute(out, ref, &p->w, &ev, comm, id);
    dl_free(&ev);
}

int preftrain_reference(PrefTrain* p, const RunConfig* c, Model* m, DataLoader* train, DataLoader* val, Comm* comm,
                        const char* out_dir, int resume) {
    if (p->ref != PREF_REF_STORED) return 0;
    const uint64_t id = pref_ref_id(c);
    DataLoader* dls[2] = { train, val };
    int have[2] = { 0, 0 };
    char path[LLMC_PATH_MAX];
    for (int i = 0; i < 1 + p->has_val; i++) {
        if (!out_dir) continue;
        path_join(path, sizeof(path), out_dir, REF_FILES[i]);
        have[i] = reflogps_load(&p->stored[i], path, dls[i]->data_id, id);
        if (!have[i] && resume && !c->f.ref_model)
            fatal("give the reference as --ref-model PATH (the model the run started from) to compute them again",
                  "'%s' is missing: the resumed run's model is trained, no longer its reference", path);
    }
    if (have[0] && (have[1] || !p->has_val)) return 0;
    Model other;
    Model* ref = m;
    if (c->f.ref_model) {
        ModelSpec spec;
        memset(&spec, 0, sizeof(spec));
        spec.path = c->f.ref_model; spec.seed = (uint64_t)c->f.seed; spec.B = p->B; spec.T = p->T; spec.T_flag = "--seq-len";
        model_assemble(&other, &spec);
        if (other.gpt.cfg.vocab_size != m->gpt.cfg.vocab_size)
            fatal("give a reference model of the same vocabulary (the same family of checkpoints)", "--ref-model %s has a vocabulary of %d tokens, --model %d",
                  c->f.ref_model, other.gpt.cfg.vocab_size, m->gpt.cfg.vocab_size);
        ref = &other;
    }
    for (int i = 0; i < 1 + p->has_val; i++) {
        if (have[i]) continue;
        pref_ref_compute(p, &p->stored[i], &ref->gpt, dls[i], comm, id);
        if (!out_dir || comm->rank != 0) continue;
        path_join(path, sizeof(path), out_dir, REF_FILES[i]);
        reflogps_save(&p->stored[i], path);
    }
    if (ref == &other) model_free(&other);
    comm_barrier(comm);
    return 1;
}

void preftrain_describe(const PrefTrain* p, const RunConfig* c, char* out, size_t cap) {
    const PrefConfig* q = &p->cfg;
    char set[128];
    switch (q->objective) {
    case PREF_ORPO: snprintf(set, sizeof(set), "lambda %g", q->orpo_lambda); break;
    case PREF_SIMPO: snprintf(set, sizeof(set), "beta %g, gamma %g, label smoothing %g", q->beta, q->simpo_gamma, q->label_smoothing); break;
    case PREF_DPO: snprintf(set, sizeof(set), "beta %g, label smoothing %g", q->beta, q->label_smoothing); break;
    default: snprintf(set, sizeof(set), "beta %g", q->beta); break;
    }
    const int64_t pairs = p->stored[0].n_pairs + p->stored[1].n_pairs;
    char ref[512];
    // the time, in model FLOPs per parameter and token: a forward 2, a step 6 (full) or 4 (LoRA:
    // the frozen weights' backward computes the inputs' gradients only)
    const char* epoch_share = c->mode == TRAIN_LORA ? "half" : "a third";
    if (p->ref == PREF_REF_NONE) snprintf(ref, sizeof(ref), "none (reference-free)");
    else if (p->ref == PREF_REF_ADAPTERS_OFF)
        snprintf(ref, sizeof(ref), "the base with the adapters off: one more forward per micro-step (about +50%% of the step's FLOPs), "
                 "no memory (no activations kept)");
    else
        snprintf(ref, sizeof(ref), "%s, log-probabilities of %lld pairs computed once before training (a forward pass over the data: "
                 "about %s of an epoch's training time), %.1f KiB of host memory, stored in %s", c->f.ref_model ? c->f.ref_model : "the model before training",
                 (long long)pairs, epoch_share, (double)pairs * 16.0 / 1024.0, c->write_outputs ? "OUT/ref_logps_*.bin" : "memory only (--out none)");
    snprintf(out, cap, "%s (%s) | reference: %s | %.2f MiB of pair buffers", pref_objective_name(q->objective), set, ref,
             (double)pref_work_bytes(p->B, p->T) / (1024.0 * 1024.0));
}

int64_t preftrain_read(PrefTrain* p, DataLoader* dl, int* inputs, int* targets, int* docs, Comm* comm) {
    const size_t BT = (size_t)p->B * p->T;
    int64_t count[2] = { 0, 0 }; // pairs, chosen records' targets (ORPO's NLL)
    for (int k = 0; k < p->accum; k++) {
        PrefPair* pairs = p->pairs + (size_t)k * p->maxp;
        dl_next_pref(dl, inputs + k * BT, targets + k * BT, docs + k * BT, pairs, p->ids + (size_t)k * p->maxp, &p->n[k]);
        count[0] += p->n[k];
        for (int i = 0; i < p->n[k]; i++) count[1] += pairs[i].c_end - pairs[i].c_first;
    }
    comm_allreduce_sum_i64(comm, count, 2);
    p->pair_scale = count[0] ? 1.0 / (double)count[0] : 0.0;
    p->nll_scale = pref_uses_nll(p->cfg.objective) && count[1] ? 1.0 / (double)count[1] : 0.0;
    return count[0];
}

void preftrain_micro(PrefTrain* p, Model* m, int k, const int* inputs, const int* targets, const int* docs, int which,
                     int training, uint64_t tick, const GPT2GradSink* sink, PrefMetrics* acc) {
    const PrefPair* pairs = p->pairs + (size_t)k * p->maxp;
    const int n = p->n[k];
    const int* tg = pref_targets(&p->w, &p->cfg, inputs, targets, pairs, n);
    memset(p->seqs, 0, (size_t)p->maxp * sizeof(PrefSeqs));
    if (p->ref == PREF_REF_ADAPTERS_OFF) { // (no dropout: the reference is the model as it is)
        linear_set_training(m->gpt.lin, 0, 0);
        model_set_adapters(m, 0);
        pref_score(&m->gpt, &p->w, inputs, tg, docs, p->B, p->T, pairs, n, 1, 0, p->seqs, NULL, NULL);
        model_set_adapters(m, 1);
    } else if (p->ref == PREF_REF_STORED) reflogps_lookup(&p->stored[which], p->ids + (size_t)k * p->maxp, n, p->seqs);
    linear_set_training(m->gpt.lin, training, tick);
    double nll_sum = 0.0;
    long nll_n = 0;
    const int nll = pref_uses_nll(p->cfg.objective);
    pref_score(&m->gpt, &p->w, inputs, tg, docs, p->B, p->T, pairs, n, 0, nll, p->seqs, &nll_sum, &nll_n);
    for (int i = 0; i < n; i++) {
        pref_pair(&p->cfg, &p->seqs[i], &p->outs[i]);
        pref_metrics_add(acc, &p->outs[i]);
    }
    acc->nll_sum += nll_sum;
    acc->nll_tokens += (double)nll_n;
    if (training) pref_backward(&m->gpt, &p->w, pairs, p->outs, n, p->pair_scale, p->nll_scale, sink);
}

void preftrain_reduce(const PrefTrain* p, PrefMetrics* acc, Comm* comm, PrefMeans* out) {
    comm_allreduce_sum_f64(comm, (double*)acc, PREF_METRICS_N);
    pref_metrics_mean(&p->cfg, acc, out);
}

double preftrain_eval(PrefTrain* p, Model* m, DataLoader* val, int64_t batches, int* inputs, int* targets, int* docs, Comm* comm,
                      PrefMeans* out) {
    PrefMetrics acc;
    memset(&acc, 0, sizeof(acc));
    dl_reset(val);
    for (int64_t b = 0; b < batches; b++) {
        dl_next_pref(val, inputs, targets, docs, p->pairs, p->ids, &p->n[0]);
        if (p->n[0] > 0) preftrain_micro(p, m, 0, inputs, targets, docs, 1, 0, 0, NULL, &acc);
    }
    preftrain_reduce(p, &acc, comm, out);
    return acc.pairs > 0 ? out->loss : NAN;
}

void preftrain_free(PrefTrain* p) {
    pref_work_free(&p->w);
    free(p->pairs); free(p->ids); free(p->n); free(p->seqs); free(p->outs);
    for (int i = 0; i < 2; i++) reflogps_free(&p->stored[i]);
    memset(p, 0, sizeof(*p));
}
