#include "model/prefmodel.h"
#include "base/check.h"
#include <stdlib.h>
#include <string.h>

static int pref_cap(int B, int T) { return 3 * ((B * T) / 2 + 1); }

size_t pref_work_bytes(int B, int T) {
    const size_t cap = (size_t)pref_cap(B, T);
    return cap * 2 * sizeof(int) + cap * sizeof(double) + (size_t)B * T * sizeof(float);
}

void pref_work_init(PrefWork* w, int B, int T) {
    memset(w, 0, sizeof(*w));
    w->rows = B * T;
    w->cap = pref_cap(B, T);
    w->ranges = (int*)mallocCheck((size_t)w->cap * 2 * sizeof(int));
    w->sums = (double*)mallocCheck((size_t)w->cap * sizeof(double));
    w->row_w = (float*)mallocCheck((size_t)w->rows * sizeof(float));
    w->targets = (int*)mallocCheck((size_t)w->rows * sizeof(int));
    w->ranges_dev = (int*)ops_alloc((size_t)w->cap * 2 * sizeof(int));
    w->sums_dev = (double*)ops_alloc((size_t)w->cap * sizeof(double));
    w->row_w_dev = (float*)ops_alloc((size_t)w->rows * sizeof(float));
}

void pref_work_free(PrefWork* w) {
    free(w->ranges); free(w->sums); free(w->row_w); free(w->targets);
    if (w->ranges_dev) { ops_free(w->ranges_dev); ops_free(w->sums_dev); ops_free(w->row_w_dev); }
    memset(w, 0, sizeof(*w));
}

// The pairs must lie in the batch, each range inside its record: a bug in the loader otherwise.
static void pref_check_pairs(const PrefWork* w, const PrefPair* pairs, int n) {
    if (3 * n > w->cap) fatal("this is a bug in llmc", "%d pairs in a batch of %d positions", n, w->rows);
    for (int i = 0; i < n; i++) {
        const PrefPair* p = &pairs[i];
        if (!(0 <= p->c_first && p->c_first <= p->c_begin && p->c_begin < p->c_end && p->c_end <= p->r_begin &&
              p->r_begin < p->r_end && p->r_end <= w->rows))
            fatal("this is a bug in llmc", "pair %d: chosen [%d, %d, %d), rejected [%d, %d) in %d positions", i, p->c_first, p->c_begin,
                  p->c_end, p->r_begin, p->r_end, w->rows);
    }
}

const int* pref_targets(PrefWork* w, const PrefConfig* c, const int* inputs, const int* targets, const PrefPair* pairs, int n) {
    pref_check_pairs(w, pairs, n);
    memcpy(w->targets, targets, (size_t)w->rows * sizeof(int));
    if (pref_uses_nll(c->objective))
        for (int i = 0; i < n; i++) // (the chosen record's prompt: each position predicts the next input, in the record)
            for (int t = pairs[i].c_first; t < pairs[i].c_begin; t++) w->targets[t] = inputs[t + 1];
    return w->targets;
}

void pref_score(GPT2* m, PrefWork* w, const int* inputs, const int* targets, const int* doc_start, int B, int T,
                const PrefPair* pairs, int n, int ref, int nll, PrefSeqs* seqs, double* nll_sum, long* nll_tokens) {
    if (B * T > w->rows) fatal("this is a bug in llmc", "pref_score of %d x %d positions with buffers for %d", B, T, w->rows);
    pref_check_pairs(w, pairs, n);
    gpt2_forward(m, inputs, targets, doc_start, B, T, 0.0f, NULL);
    const int per = nll ? 3 : 2;
    for (int i = 0; i < n; i++) {
        int* r = w->ranges + 2 * per * i;
        r[0] = pairs[i].c_begin; r[1] = pairs[i].c_end;
        r[2] = pairs[i].r_begin; r[3] = pairs[i].r_end;
        if (nll) { r[4] = pairs[i].c_first; r[5] = pairs[i].c_end; }
    }
    const int S = per * n;
    if (!S) return;
    ops_to_device_async(w->ranges_dev, w->ranges, (size_t)S * 2 * sizeof(int));
    seq_logp_sums(w->sums_dev, m->acts.losses, w->ranges_dev, S);
    ops_to_host(w->sums, w->sums_dev, (size_t)S * sizeof(double));
    if (nll) { *nll_sum = 0; *nll_tokens = 0; }
    for (int i = 0; i < n; i++) {
        const double* s = w->sums + per * i;
        PrefSeqs* q = &seqs[i];
        if (ref) { q->ref_c = s[0]; q->ref_r = s[1]; continue; }
        q->logp_c = s[0]; q->logp_r = s[1];
        q->n_c = pairs[i].c_end - pairs[i].c_begin;
        q->n_r = pairs[i].r_end - pairs[i].r_begin;
        if (nll) { *nll_sum -= s[2]; *nll_tokens += pairs[i].c_end - pairs[i].c_first; }
    }
}

void pref_backward(GPT2* m, PrefWork* w, const PrefPair* pairs, const PrefPairOut* outs, int n, double pair_scale,
                   double nll_scale, const GPT2GradSink* sink) {
    pref_check_pairs(w, pairs, n);
    const int N = m->cur_B * m->cur_T;
    memset(w->row_w, 0, (size_t)N * sizeof(float));
    // loss = pair_scale * sum terms + nll_scale * sum (-log p): a row's weight is -d loss / d log p
    for (int i = 0; i < n; i++) {
        const PrefPair* p = &pairs[i];
        const double wc = -pair_scale * outs[i].gc, wr = -pair_scale * outs[i].gr;
        for (int t = p->c_first; t < p->c_end; t++) w->row_w[t] = (float)((t >= p->c_begin ? wc : 0.0) + nll_scale);
        for (int t = p->r_begin; t < p->r_end; t++) w->row_w[t] = (float)wr;
    }
    ops_to_device_async(w->row_w_dev, w->row_w, (size_t)N * sizeof(float));
    gpt2_classifier_backward_rows(m, w->row_w_dev);
    gpt2_backward(m, sink);
}
