// The preference objectives on the model (llmc/model/prefloss.h has the arithmetic): a batch of
// pairs (llmc/run/dataloader.h: whole pairs in packed windows, each record attending to itself)
// is scored by one forward, its per-token log-probabilities reduced per sequence on the device
// (ops.h seq_logp_sums: S doubles come back, never the logits); the loss and its derivatives are
// computed on the host per pair; the backward turns them into a weight per row of the classifier
// (ops.h classifier_train_rows, which recomputes the logits of the lm_head a row block at a time)
// and goes on through the model as after any training forward.
//
// A training micro-step:
//   [reference: pref_score(ref = 1) with model_set_adapters(m, 0) (LoRA: the same base without
//    its adapters), or the log-probabilities stored before training (llmc/run/reflogps.h)]
//   pref_score(ref = 0)                 the policy's forward; keeps its activations
//   pref_pair for each pair             (llmc/model/prefloss.h)
//   pref_backward                       weights per row, the classifier's backward, gpt2_backward
// The reference forward comes first and keeps nothing: the policy's forward writes over the same
// activations. ORPO's NLL covers the chosen records' prompts too (TRL's), so its forward has
// those targets as well (pref_targets).
#ifndef LLMC_PREFMODEL_H
#define LLMC_PREFMODEL_H

#include <stddef.h>
#include "model/gpt2.h"
#include "model/prefloss.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rows;                  // B x T the buffers serve
    int cap;                   // ranges: up to three per pair (chosen, rejected, the chosen record)
    int* ranges;               // host: 2 ints a range
    int* ranges_dev;           // backend memory
    double* sums;              // host: a sum a range
    double* sums_dev;          // backend memory
    float* row_w;              // host: each row's weight in the classifier's backward
    float* row_w_dev;          // backend memory
    int* targets;              // host: the targets of the last pref_targets
} PrefWork;

// Buffers for batches of up to B x T positions (at most B T / 2 pairs: a record has 2 tokens at
// least); pref_work_bytes: what they take in backend memory (the memory report).
void pref_work_init(PrefWork* w, int B, int T);
size_t pref_work_bytes(int B, int T);
void pref_work_free(PrefWork* w);

// The targets of a pair batch's forward: the loader's (the completions' targets), and for ORPO
// also those of the chosen records' prompts (the next input token). Returns w->targets.
const int* pref_targets(PrefWork* w, const PrefConfig* c, const int* inputs, const int* targets, const PrefPair* pairs, int n);

// One forward of m over the batch (targets from pref_targets, doc_start the records' starts)
// and the pairs' sequence log-probabilities: seqs[i].logp_c, logp_r, n_c, n_r, or with ref set
// seqs[i].ref_c and ref_r only. nll (ORPO): the chosen records' summed NLL into *nll_sum and
// their targets into *nll_tokens. The model keeps the forward's activations for pref_backward.
void pref_score(GPT2* m, PrefWork* w, const int* inputs, const int* targets, const int* doc_start, int B, int T,
                const PrefPair* pairs, int n, int ref, int nll, PrefSeqs* seqs, double* nll_sum, long* nll_tokens);

// The backward of loss = pair_scale * sum of the pairs' terms (outs: pref_pair's) + nll_scale *
// the chosen records' NLL (ORPO; 0 otherwise) after pref_score(ref = 0): the rows' weights, the
// classifier's backward (gpt2_classifier_backward_rows), then gpt2_backward (sink as there).
// pair_scale: 1 / the pairs of the global batch; nll_scale: 1 / its chosen records' targets.
void pref_backward(GPT2* m, PrefWork* w, const PrefPair* pairs, const PrefPairOut* outs, int n, double pair_scale,
                   double nll_scale, const GPT2GradSink* sink);

#ifdef __cplusplus
}
#endif
#endif // LLMC_PREFMODEL_H
