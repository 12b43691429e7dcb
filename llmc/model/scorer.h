// Scoring given text under the model: the log-probability of each sequence's scored tokens (a
// completion after its prompt, or a whole text), the number evaluation compares checkpoints by.
//
// Sequences are packed whole into B rows of T positions (packed records: each attends only to
// itself and starts at position 0, llmc/model/gpt2.h doc_start), one forward scores them all, and
// the per-token losses are summed per sequence on the device (ops.h seq_logp_sums): S doubles come
// back, never the logits. A sequence scored in a batch gets what it gets alone.
#ifndef LLMC_SCORER_H
#define LLMC_SCORER_H

#include "model/gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

// ids[0..n): the sequence; tokens ids[first..n) are scored, each given those before it
// (1 <= first < n), or with a mask only those t >= first with mask[t] set (the trained pieces
// of a conversation; tokens outside the mask count 0).
typedef struct { const int* ids; int n, first; const unsigned char* mask; } ScoreSeq;

typedef struct {
    int B, T;              // rows x positions of a forward (the model's activations must hold them)
    int *in, *tg, *ds;     // host, B x T: inputs, targets (-1 where unscored), record starts
    int* ranges;           // host: 2 ints a sequence (its scored positions)
    int* ranges_dev;       // backend memory
    double* sums;          // host: a log-probability a sequence
    double* sums_dev;      // backend memory
} Scorer;

// Buffers for forwards of B x T positions; a sequence of n tokens takes n - 1 of them.
void scorer_init(Scorer* s, int B, int T);
void scorer_free(Scorer* s);

// Scores seqs[0..), as many as fit in one forward, in order (at least the first: each must have
// n - 1 <= T): logp[i] = the sum of log p of its scored tokens (natural log). Returns how many
// were scored. Dropout off during the forward.
int scorer_run(Scorer* s, GPT2* m, const ScoreSeq* seqs, int n, double* logp);

#ifdef __cplusplus
}
#endif
#endif // LLMC_SCORER_H
