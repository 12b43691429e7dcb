#include "run/preftrain.h"
#include "base/check.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include "model/linear.h"
#include "run/runrecord.h"
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

// The reference model as the messages name it: "--ref-model PATH", or "--model PATH" (train_gpt2:
// the model the run started from).
static const char* pref_ref_flag(const RunConfig* c) { return c->f.ref_model ? "--ref-model" : "--model"; }
static const char* pref_ref_path(const RunConfig* c) { return c->f.ref_model ? c->f.ref_model : c->f.model; }

// The reference model's id in the stored files: what its weights are, a CRC-32C of the sizes and
// CRC-32Cs of the files they load from (runrecord_model_files: the file or directory, its
// config.json, an index's shards), or of the size descriptor and the seed they are drawn from
// (d12, tiny); in the high half the files' bytes. Rank 0 reads the files and sends the id to the
// other ranks. Fatal, naming the file, when one is gone: a resumed run reads its stored values
// back only against the weights they were computed from.
static uint64_t pref_ref_id(const RunConfig* c, Comm* comm, int resume) {
    uint64_t id = 0;
    if (comm->rank == 0) {
        RunBaseFile files[RUNCFG_MAX_BASE_FILES];
        char missing[LLMC_PATH_MAX], seed[64];
        const char* path = pref_ref_path(c);
        const int n = runrecord_model_files(path, files, missing, sizeof(missing));
        if (n < 0)
            fatal(resume ? "put the model the run started from back at that path: the stored reference log-probabilities are read back only "
                           "with the weights they were computed from" : "check the path of the reference model",
                  "%s %s: '%s' does not exist (the reference's weights)", pref_ref_flag(c), path, missing);
        uint32_t crc = 0;
        uint64_t bytes = 0;
        for (int i = 0; i < n; i++) {
            const uint64_t f[2] = { files[i].bytes, files[i].crc };
            crc = crc32c(crc, f, sizeof(f));
            bytes += files[i].bytes;
        }
        if (n == 0) { // a size descriptor: the weights are the seed's
            snprintf(seed, sizeof(seed), "%s seed %d", path, c->f.seed);
            crc = crc32c(0, seed, strlen(seed));
            bytes = strlen(seed);
        }
        id = ((uint64_t)(uint32_t)(bytes ^ (bytes >> 32)) << 32) | crc;
    }
    comm_broadcast(comm, &id, sizeof(id), 0);
    return id;
}

// The hint of a resumed run whose stored reference cannot be read back: the flag that computes it
// again, from the model the run started from.
static void pref_resume_hint(const RunConfig* c, int outcome, char* out, size_t cap) {
    if (outcome == REFLOGPS_OTHER)
        snprintf(out, cap, "put back what the run started with (the model at %s %s, the data, --batch-size and --seq-len); or give "
                 "--recompute-reference to compute the reference for this run as it is now, from %s %s (one forward pass over the data)",
                 pref_ref_flag(c), pref_ref_path(c), pref_ref_flag(c), pref_ref_path(c));
    else
        snprintf(out, cap, "give --recompute-reference: it computes the reference log-probabilities again from %s %s, the model the run "
                 "started from (one forward pass over the data)", pref_ref_flag(c), pref_ref_path(c));
}

// The stored values of loader i's pairs read back from path (1), or 0 when they must be computed:
// a new run computes them over whatever it finds (a note says what was wrong with a file an
// interrupted start left); a resumed run, whose model is trained, is refused naming the file and
// what computes them again. With --recompute-reference nothing is read.
static int pref_ref_read(PrefTrain* p, const RunConfig* c, int i, const char* path, const RefKey* key, int resume, int rank) {
    if (c->f.recompute_reference) return 0;
    char why[3 * LLMC_PATH_MAX], hint[2 * LLMC_PATH_MAX];
    const int got = reflogps_load(&p->stored[i], path, key, why, sizeof(why));
    if (got == REFLOGPS_READ) return 1;
    if (resume) {
        pref_resume_hint(c, got, hint, sizeof(hint));
        if (got == REFLOGPS_NONE) fatal(hint, "'%s' is missing: the resumed run's model is trained, no longer its reference", path);
        fatal(hint, "%s: the resumed run's model is trained, no longer its reference", why);
    }
    if (got != REFLOGPS_NONE && rank == 0) printf("note: %s: computing the reference log-probabilities again\n", why);
    return 0;
}

// The model the reference is computed with: m (a new run of train_gpt2: the model before
// training), or loaded into *other: --ref-model, or on resume train_gpt2's --model (the model the
// run started from; m holds trained weights). Its sequence length and vocabulary must be the run's.
static Model* pref_ref_model(const PrefTrain* p, const RunConfig* c, Model* m, Model* other, int resume) {
    if (!c->f.ref_model && !resume) return m;
    ModelSpec spec;
    memset(&spec, 0, sizeof(spec));
    spec.path = pref_ref_path(c); spec.seed = (uint64_t)c->f.seed; // (activations below, once its n_positions is known)
    model_assemble(other, &spec);
    const GPT2Config* rc = &other->gpt.cfg;
    if (rc->max_seq_len < p->T)
        fatal("give a reference model whose n_positions is at least --seq-len, or train with a --seq-len it holds (and data prepared for it)",
              "%s %s holds sequences of at most %d tokens (n_positions), but --seq-len is %d", pref_ref_flag(c), spec.path, rc->max_seq_len, p->T);
    if (rc->vocab_size != m->gpt.cfg.vocab_size)
        fatal("give a reference model of the same vocabulary (the same family of checkpoints)", "%s %s has a vocabulary of %d tokens, the policy %d",
              pref_ref_flag(c), spec.path, rc->vocab_size, m->gpt.cfg.vocab_size);
    model_alloc_acts(other, p->B, p->T, 0);
    return other;
}

// The reference log-probabilities of one loader's pairs with model `ref` (an evaluation loader of
// its files: every pair once), refused, naming the reference, when they are not log-probability
// sums (weights that are not finite, or overflow). (A resumed run keeps its --ref-model.)
static void pref_ref_compute(PrefTrain* p, const RunConfig* c, RefLogps* out, GPT2* ref, const DataLoader* dl, const char* flag, Comm* comm,
                             const RefKey* key, int resume) {
    DataLoader ev;
    dl_init_eval(&ev, dl->pattern, p->B, p->T, dl->rank, dl->world, dl->vocab_size);
    if (ev.data_id != dl->data_id || ev.n_pairs != dl->n_pairs)
        fatal("leave the data as it is while a run trains on it (data/prepare into another --out-dir)",
              "%s '%s' changed during the run (its files are not those the run opened)", flag, dl->pattern);
    linear_set_training(ref->lin, 0, 0);
    reflogps_compute(out, ref, &p->w, &ev, comm, key);
    dl_free(&ev);
    const int64_t bad = reflogps_first_bad(out);
    if (bad >= 0)
        fatal(resume ? "check the reference's weights (./generate --model PATH shows whether it produces text) and put the model the run started from back"
                     : "check the reference's weights (./generate --model PATH shows whether it produces text), or give another one as --ref-model",
              "the reference model %s %s gives pair %lld of %s '%s' the log-probabilities %g (chosen) and %g (rejected): not finite sums of "
              "log-probabilities (every step's loss would be non-finite)", c->f.ref_model ? "--ref-model" : "(the model before training) --model", pref_ref_path(c),
              (long long)bad, flag, dl->pattern, out->logp[2 * bad], out->logp[2 * bad + 1]);
}

int preftrain_reference(PrefTrain* p, const RunConfig* c, Model* m, DataLoader* train, DataLoader* val, Comm* comm,
                        const char* out_dir, int resume) {
    if (p->ref != PREF_REF_STORED) return 0;
    const uint64_t id = out_dir ? pref_ref_id(c, comm, resume) : 0; // (the files' key: --out none has none)
    DataLoader* dls[2] = { train, val };
    static const char* const flags[2] = { "--train-data", "--val-data" };
    RefKey keys[2];
    int64_t have[2] = { 0, 0 };
    char path[LLMC_PATH_MAX];
    for (int i = 0; i < 1 + p->has_val; i++) {
        keys[i] = (RefKey){ id, dls[i]->data_id, dls[i]->n_pairs, p->B, p->T };
        if (!out_dir) continue;
        path_join(path, sizeof(path), out_dir, REF_FILES[i]);
        have[i] = pref_ref_read(p, c, i, path, &keys[i], resume, comm->rank);
    }
    comm_allreduce_sum_i64(comm, have, 2); // (every rank reads the same files: the ranks agree on what to compute)
    for (int i = 0; i < 2; i++)
        if (have[i] != comm->world) { have[i] = 0; reflogps_free(&p->stored[i]); }
    if (have[0] && (have[1] || !p->has_val)) return 0;
    Model other;
    Model* ref = pref_ref_model(p, c, m, &other, resume);
    for (int i = 0; i < 1 + p->has_val; i++) {
        if (have[i]) continue;
        pref_ref_compute(p, c, &p->stored[i], &ref->gpt, dls[i], flags[i], comm, &keys[i], resume);
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
    const int64_t pairs = p->stored[0].key.n_pairs + p->stored[1].key.n_pairs;
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
    p->ref_bad = 0; // (this step's: preftrain_micro, preftrain_reduce)
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
    for (int i = 0; p->ref != PREF_REF_NONE && i < n; i++) p->ref_bad |= !isfinite(p->seqs[i].ref_c) || !isfinite(p->seqs[i].ref_r);
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

void preftrain_reduce(PrefTrain* p, PrefMetrics* acc, Comm* comm, PrefMeans* out) {
    double buf[PREF_METRICS_N + 1]; // the metrics and whether a reference value was not finite, in one sum
    memcpy(buf, acc, sizeof(double) * PREF_METRICS_N);
    buf[PREF_METRICS_N] = p->ref_bad;
    comm_allreduce_sum_f64(comm, buf, PREF_METRICS_N + 1);
    memcpy(acc, buf, sizeof(double) * PREF_METRICS_N);
    p->ref_bad = buf[PREF_METRICS_N] > 0;
    pref_metrics_mean(&p->cfg, acc, out);
}

int preftrain_nonfinite_reference(const PrefTrain* p, const RunConfig* c, char* out, size_t cap) {
    if (!p->ref_bad) return 0;
    if (p->ref == PREF_REF_ADAPTERS_OFF)
        snprintf(out, cap, "the reference (the base with the adapters off) gave log-probabilities that are not finite: the weights of --model %s are "
                 "not finite, or overflow; no learning rate or data helps: give a base model whose weights are finite (or a --ref-model)", c->f.model);
    else
        snprintf(out, cap, "the stored reference log-probabilities (OUT/ref_logps_*.bin, of %s %s) are not finite; no learning rate or data helps: "
                 "resume with --recompute-reference", pref_ref_flag(c), pref_ref_path(c));
    return 1;
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
