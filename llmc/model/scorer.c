#include "model/scorer.h"
#include "base/check.h"
#include "ops/ops.h"
#include <stdlib.h>
#include <string.h>

void scorer_init(Scorer* s, int B, int T) {
    if (B < 1 || T < 1) fatal("this is a bug in llmc", "scorer of %d x %d positions", B, T);
    memset(s, 0, sizeof(*s));
    s->B = B; s->T = T;
    const size_t N = (size_t)B * T; // at most N sequences: each takes a position at least
    s->in = (int*)mallocCheck(N * sizeof(int));
    s->tg = (int*)mallocCheck(N * sizeof(int));
    s->ds = (int*)mallocCheck(N * sizeof(int));
    s->ranges = (int*)mallocCheck(2 * N * sizeof(int));
    s->sums = (double*)mallocCheck(N * sizeof(double));
    s->ranges_dev = (int*)ops_alloc(2 * N * sizeof(int));
    s->sums_dev = (double*)ops_alloc(N * sizeof(double));
}

void scorer_free(Scorer* s) {
    free(s->in); free(s->tg); free(s->ds); free(s->ranges); free(s->sums);
    if (s->ranges_dev) { ops_free(s->ranges_dev); ops_free(s->sums_dev); }
    memset(s, 0, sizeof(*s));
}

// Sequence q at position p of a row that starts at flat position row0: inputs ids[0..n-1), the
// target of each its next token where that token is scored (-1, a loss of 0, elsewhere), every position's record start p.
static void scorer_place(Scorer* s, const ScoreSeq* q, int row0, int p, int* range) {
    const int len = q->n - 1;
    for (int t = 0; t < len; t++) {
        s->in[row0 + p + t] = q->ids[t];
        s->tg[row0 + p + t] = t + 1 >= q->first && (!q->mask || q->mask[t + 1]) ? q->ids[t + 1] : -1;
        s->ds[row0 + p + t] = p;
    }
    range[0] = row0 + p + q->first - 1;
    range[1] = row0 + p + len;
}

// Positions [p, T) of a row: padding, unscored, one record starting at p.
static void scorer_pad(Scorer* s, int row, int p) {
    for (int t = p; t < s->T; t++) { s->in[row * s->T + t] = 0; s->tg[row * s->T + t] = -1; s->ds[row * s->T + t] = p; }
}

int scorer_run(Scorer* s, GPT2* m, const ScoreSeq* seqs, int n, double* logp) {
    if (s->B > m->B || s->T > m->T)
        fatal("this is a bug in llmc", "scoring %d x %d positions with activations for %d x %d", s->B, s->T, m->B, m->T);
    int done = 0, row = 0, p = 0;
    while (done < n) {
        const ScoreSeq* q = &seqs[done];
        if (q->first < 1 || q->first >= q->n || q->n - 1 > s->T)
            fatal("this is a bug in llmc", "scoring a sequence of %d tokens from token %d in rows of %d positions", q->n, q->first, s->T);
        if (p + q->n - 1 > s->T) { // the row is full: its rest is padding, a record of its own
            scorer_pad(s, row, p);
            if (++row == s->B) break;
            p = 0;
        }
        scorer_place(s, q, row * s->T, p, s->ranges + 2 * done);
        p += q->n - 1;
        done++;
    }
    if (row < s->B) scorer_pad(s, row++, p);
    const int was_training = m->lin->shared.training;
    const uint64_t tick = m->lin->shared.tick;
    linear_set_training(m->lin, 0, tick);
    gpt2_forward(m, s->in, s->tg, s->ds, row, s->T, 0.0f, NULL);
    linear_set_training(m->lin, was_training, tick);
    ops_to_device_async(s->ranges_dev, s->ranges, (size_t)done * 2 * sizeof(int));
    seq_logp_sums(s->sums_dev, m->acts.losses, s->ranges_dev, done);
    ops_to_host(s->sums, s->sums_dev, (size_t)done * sizeof(double));
    memcpy(logp, s->sums, (size_t)done * sizeof(double));
    return done;
}
