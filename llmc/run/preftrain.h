// Preference training in the trainers (--objective dpo|ipo|orpo|simpo): the step's batches of
// pairs, the reference, one micro-step's forward passes, loss and backward, and the evaluation on
// held-out pairs. The arithmetic is llmc/model/prefloss.h's, the model side prefmodel.h's; this
// file is what the loop of llmc/app/trainer.c calls instead of the cross-entropy's forward.
//
// The reference model of DPO and IPO, one of three ways (the start-up report says which, with its
// memory and time):
//   adapters off   train_lora without --ref-model: the same base with its adapters switched off
//                  (model_set_adapters), one more forward per micro-step that keeps nothing (the
//                  policy's forward writes over its activations): no memory, a third more FLOPs;
//   stored         train_gpt2 (the model before its first step), or --ref-model PATH in either
//                  trainer: every pair's log-probabilities computed once before training
//                  (llmc/run/reflogps.h), kept in host memory (16 bytes a pair) and in
//                  OUT/ref_logps_*.bin, read back on resume for the weights, data and batches they
//                  were computed for (RefKey; --recompute-reference computes them again);
//   none           orpo and simpo are reference-free.
//
// A step reads every micro-batch first: the loss is the mean of the pair terms over the global
// batch's pairs (plus ORPO's NLL over the chosen records' targets), so each micro-batch's backward
// is scaled by 1 / (the global batch's pairs) and 1 / (its chosen targets), known before the first
// backward. Pairs are whole in a window, so whole on a rank and in a micro-batch. The metrics
// (PrefMetrics) are sums over micro-batches and ranks, then averaged; the loss is computed on the
// host from the pairs' sequence log-probabilities, which come back with each forward anyway.
#ifndef LLMC_PREFTRAIN_H
#define LLMC_PREFTRAIN_H

#include <stdint.h>
#include "comm/comm.h"
#include "model/model.h"
#include "model/prefloss.h"
#include "model/prefmodel.h"
#include "run/dataloader.h"
#include "run/reflogps.h"
#include "run/runconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PREF_REF_NONE = 0, PREF_REF_ADAPTERS_OFF, PREF_REF_STORED } PrefRefKind;

typedef struct {
    PrefConfig cfg;
    PrefRefKind ref;
    PrefWork w;                // backend buffers for one micro-batch
    int B, T, maxp, accum;
    PrefPair* pairs;           // accum x maxp: the step's micro-batches' pairs ...
    int64_t* ids;              // ... their numbers in the data set ...
    int* n;                    // ... and how many each micro-batch holds
    PrefSeqs* seqs;            // maxp
    PrefPairOut* outs;         // maxp
    RefLogps stored[2];        // PREF_REF_STORED: the training data's [0] and the validation data's [1]
    int has_val;
    int ref_bad;               // a reference value of this step (or evaluation) was not finite, on any rank
    double pair_scale, nll_scale; // this step's: 1 / the global batch's pairs, 1 / its chosen targets (orpo)
} PrefTrain;

// The objective of the configuration (c->objective != PREF_SFT) on the loaders' data: fatal,
// naming the data and the flag, when the data is not made of pairs (and, in the trainer, when it
// is and the objective is sft). Buffers for B x T micro-batches, accum of them a step.
void preftrain_init(PrefTrain* p, const RunConfig* c, const DataLoader* train, const DataLoader* val, int B, int T, int accum);
// The reference, PREF_REF_STORED: read back from out_dir (a resumed run, or files an interrupted
// start left) when a file is whole and of this run's key (reflogps.h's RefKey: the reference's
// weights, the data, the batches), or computed with m (train_gpt2, a new run: the model before
// training), with the model of --ref-model, or on resume with --recompute-reference from train_gpt2's
// --model (the model the run started from); then written to out_dir by rank 0 (out_dir NULL:
// --out none, kept in memory only). A new run computes over a file it cannot use (noted); a
// resumed run (m holds trained weights) is refused, naming the file and what computes it again.
// Computed values that are not log-probability sums are refused naming the reference. Every rank
// ends with every pair's values. Returns 1 when it computed values (rather than reading them back,
// or having no stored reference).
int preftrain_reference(PrefTrain* p, const RunConfig* c, Model* m, DataLoader* train, DataLoader* val, Comm* comm,
                         const char* out_dir, int resume);
// The start-up report's line: the objective, its settings, the reference and what it costs.
void preftrain_describe(const PrefTrain* p, const RunConfig* c, char* out, size_t cap);

// Reads the step's accum micro-batches (inputs, targets, docs: accum x B*T) and sets the step's
// scales; returns the global batch's pairs (0: nothing to train on).
int64_t preftrain_read(PrefTrain* p, DataLoader* dl, int* inputs, int* targets, int* docs, Comm* comm);
// Micro-batch k of the step (or of an evaluation: the loader's batch in slot 0): the reference's
// forward, the policy's (dropout as linear_set_training(training, tick)), each pair's term and
// its metrics added to *acc; training: then the backward (sink: gpt2_backward's, NULL for the
// model's own gradients). which: the data the ids number, 0 training, 1 validation (the stored
// reference's table).
void preftrain_micro(PrefTrain* p, Model* m, int k, const int* inputs, const int* targets, const int* docs, int which,
                     int training, uint64_t tick, const GPT2GradSink* sink, PrefMetrics* acc);
// An evaluation over `batches` batches of the validation loader (from its start): the means over
// every pair of them (summed across ranks) in *out; returns the loss.
double preftrain_eval(PrefTrain* p, Model* m, DataLoader* val, int64_t batches, int* inputs, int* targets, int* docs, Comm* comm,
                      PrefMeans* out);
// The sums over ranks, then the means (and ref_bad, over ranks).
void preftrain_reduce(PrefTrain* p, PrefMetrics* acc, Comm* comm, PrefMeans* out);
// A run whose last steps were not finite because its reference's log-probabilities were not (the
// base with the adapters off whose weights are not finite, say): 1, with the sentence that names
// the reference and what to do in out; 0 when the reference was finite.
int preftrain_nonfinite_reference(const PrefTrain* p, const RunConfig* c, char* out, size_t cap);
void preftrain_free(PrefTrain* p);

#ifdef __cplusplus
}
#endif
#endif // LLMC_PREFTRAIN_H
