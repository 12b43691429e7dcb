#include "model/sampler.h"
#include "base/check.h"
#include "base/rand.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAX_CHUNK 256 // prompt tokens per forward call: bounds the activations, not the prompt

// The bytes of a cached key or value: bf16 where the GEMMs are (the CPU's --dtype bf16), else floatX's.
static size_t kv_elem_bytes(void) {
    return ops_caps().floatx == OPS_F32 && ops_gemm_dtype() == OPS_BF16 ? sizeof(uint16_t) : sizeof(floatX);
}

void kv_init(KVCache* kv, GPT2* m, int B, int maxT) {
    memset(kv, 0, sizeof(*kv));
    if (B < 1 || maxT < 1 || maxT > m->cfg.max_seq_len)
        fatal("ask for at most n_positions tokens in all", "key/value cache of %d sequences x %d tokens: the model holds at most %d positions",
              B, maxT, m->cfg.max_seq_len);
    kv->m = m; kv->B = B; kv->maxT = maxT;
    kv->chunk = maxT < KV_MAX_CHUNK ? maxT : KV_MAX_CHUNK;
    const int rows = linear_set_rows(m->lin) / B; // the adapters' scratch bounds the rows of a forward
    if (rows < 1) fatal("this is a bug in llmc", "adapter scratch of %d rows for a cache of %d sequences", linear_set_rows(m->lin), B);
    if (kv->chunk > rows) kv->chunk = rows;
    const size_t L = (size_t)m->cfg.num_layers, C = (size_t)m->cfg.channels, Vp = (size_t)m->cfg.padded_vocab_size;
    const size_t cache = L * (size_t)B * (size_t)maxT * C * kv_elem_bytes();
    if (kv_elem_bytes() == sizeof(floatX)) {
        kv->kcache = (floatX*)ops_alloc(cache);
        kv->vcache = (floatX*)ops_alloc(cache);
    } else {
        kv->kcache16 = (uint16_t*)ops_alloc(cache);
        kv->vcache16 = (uint16_t*)ops_alloc(cache);
    }
    const size_t N = (size_t)B * kv->chunk, X = sizeof(floatX);
    void** ptr[] = { (void**)&kv->x, (void**)&kv->res2, (void**)&kv->ln, (void**)&kv->qkv, (void**)&kv->atty, (void**)&kv->proj,
                     (void**)&kv->fch, (void**)&kv->fch_gelu, (void**)&kv->fcproj, (void**)&kv->logits, (void**)&kv->mean,
                     (void**)&kv->rstd, (void**)&kv->tokens_dev };
    size_t bytes[] = { N * C * X, N * C * X, N * C * X, N * 3 * C * X, N * C * X, N * C * X,
                       N * 4 * C * X, N * 4 * C * X, N * C * X, (size_t)B * Vp * X, N * sizeof(float),
                       N * sizeof(float), N * sizeof(int) };
    const int n = (int)(sizeof(bytes) / sizeof(bytes[0]));
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (bytes[i] + 255) & ~(size_t)255;
    kv->mem = ops_alloc(total);
    size_t off = 0;
    for (int i = 0; i < n; i++) { *ptr[i] = (char*)kv->mem + off; off += (bytes[i] + 255) & ~(size_t)255; }
    kv->logits_host = (float*)mallocCheck((size_t)B * Vp * sizeof(float));
    // the lm_head is the largest GEMM of a token: rounding its 50257 x C weight to bf16 for every
    // token took longer than the GEMM itself
    // (a frozen wte: the model's own bf16 copy, gpt2.wte16, serves)
    if (ops_gemm_dtype() == OPS_BF16 && ops_caps().floatx == OPS_F32 && !m->wte16 && !m->wte_q8)
        kv->wte16 = (uint16_t*)ops_alloc(Vp * C * sizeof(uint16_t));
}

void kv_free(KVCache* kv) {
    if (kv->kcache) { ops_free(kv->kcache); ops_free(kv->vcache); }
    if (kv->kcache16) { ops_free(kv->kcache16); ops_free(kv->vcache16); }
    if (kv->mem) ops_free(kv->mem);
    if (kv->wte16) ops_free(kv->wte16);
    free(kv->logits_host);
    memset(kv, 0, sizeof(*kv));
}

void kv_reset(KVCache* kv) { kv->pos = 0; }

size_t kv_bytes(const KVCache* kv) {
    const GPT2Config* c = &kv->m->cfg;
    size_t cache = 2 * (size_t)c->num_layers * kv->B * kv->maxT * c->channels * (kv->kcache16 ? sizeof(uint16_t) : sizeof(floatX));
    size_t N = (size_t)kv->B * kv->chunk;
    const size_t wte16 = kv->wte16 ? (size_t)c->padded_vocab_size * c->channels * sizeof(uint16_t) : 0;
    return cache + N * (size_t)c->channels * 15 * sizeof(floatX) + (size_t)kv->B * c->padded_vocab_size * sizeof(floatX) + wte16;
}

// One forward over Tn <= chunk new tokens for the first nb <= B sequences (ids already checked):
// the blocks of gpt2_forward (gpt2_block_forward) with attention against the cache, one set of row
// buffers reused by every layer (each block's output replaces its input in x; ln holds the next
// layernorm's output), and logits for the last new position of each sequence only. The cache keeps
// its layout for B sequences whatever nb is (sequence b of layer l at the same place).
static void kv_forward_chunk(KVCache* kv, const int* tokens, int Tn, int nb) {
    GPT2* m = kv->m;
    const int L = m->cfg.num_layers, C = m->cfg.channels, Vp = m->cfg.padded_vocab_size;
    const size_t layer_cache = (size_t)kv->B * kv->maxT * C;
    ops_to_device(kv->tokens_dev, tokens, (size_t)nb * Tn * sizeof(int));
    gpt2_embed_forward(m, kv->x, kv->ln, kv->mean, kv->rstd, kv->tokens_dev, NULL, nb, Tn, kv->pos);
    GPT2BlockIO io = {
        kv->x, kv->ln, kv->qkv, kv->atty, NULL, kv->proj, kv->res2, kv->ln, kv->mean, kv->rstd,
        kv->fch, kv->fch_gelu, kv->fcproj, kv->x, kv->ln, kv->mean, kv->rstd,
    };
    for (int l = 0; l < L; l++) {
        GPT2KVSlot slot = { NULL, NULL, NULL, NULL, kv->pos, kv->maxT };
        if (kv->kcache16) { slot.k16 = kv->kcache16 + l * layer_cache; slot.v16 = kv->vcache16 + l * layer_cache; }
        else { slot.k = kv->kcache + l * layer_cache; slot.v = kv->vcache + l * layer_cache; }
        gpt2_block_forward(m, l, &io, nb, Tn, &slot);
    }
    // (lm_head tied to wte; a bf16 copy gives the same products as matmul_forward's rounding).
    // One new token per sequence: the last rows are the nb rows of ln, one GEMM reads the weight
    // once for all of them (batched decoding); longer feeds take each sequence's last row.
    const uint16_t* w16 = m->wte16 ? m->wte16 : kv->wte16;
    const int calls = Tn == 1 ? 1 : nb, rows = Tn == 1 ? nb : 1;
    for (int b = 0; b < calls; b++) {
        floatX* out = kv->logits + (size_t)b * Vp;
        const floatX* row = kv->ln + ((size_t)b * Tn + Tn - 1) * C;
        if (m->wte_q8) matmul_forward_q8(out, NULL, row, m->wte_q8, NULL, rows, C, Vp);
        else if (w16) matmul_forward_w16(out, NULL, row, w16, NULL, rows, C, Vp);
        else matmul_forward(out, NULL, row, m->p[PT_WTE], NULL, rows, C, Vp);
    }
    kv->pos += Tn;
}

// Feed Tn tokens per sequence to the first nb sequences (tokens: host (nb, Tn)); the logits of
// their last positions to kv->logits_host (nb rows).
static const float* kv_forward_rows(KVCache* kv, const int* tokens, int Tn, int nb) {
    GPT2* m = kv->m;
    const int V = m->cfg.vocab_size;
    if (Tn < 1 || kv->pos + Tn > kv->maxT)
        fatal("generate fewer tokens or use a shorter prompt", "%d tokens in all exceed the key/value cache of %d positions",
              kv->pos + Tn, kv->maxT);
    for (int i = 0; i < nb * Tn; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            fatal("the prompt was tokenized with a different vocabulary than the model's",
                  "token id %d is out of range for the model's vocabulary (%d)", tokens[i], V);
    if (kv->wte16 && kv->pos == 0) gpt2_wte_to_bf16(m, kv->wte16); // (a trainer's samples come between optimizer steps)
    int* part = (int*)mallocCheck((size_t)nb * kv->chunk * sizeof(int));
    for (int t0 = 0; t0 < Tn; t0 += kv->chunk) {
        int cn = Tn - t0 < kv->chunk ? Tn - t0 : kv->chunk;
        for (int b = 0; b < nb; b++) memcpy(part + (size_t)b * cn, tokens + (size_t)b * Tn + t0, (size_t)cn * sizeof(int));
        kv_forward_chunk(kv, part, cn, nb);
    }
    free(part);
    ops_download_f32(kv->logits_host, kv->logits, (size_t)nb * m->cfg.padded_vocab_size);
    return kv->logits_host;
}

const float* kv_forward(KVCache* kv, const int* tokens, int Tn) { return kv_forward_rows(kv, tokens, Tn, kv->B); }

// Sequence 0's cache copied to sequences 1..B-1, layer by layer, in doubling blocks (sequences
// [0, k) onto [k, 2k)): log2(B) copies a layer instead of B - 1. Whole sequences are copied, the
// positions past pos too (unused: each sequence writes its own before attending to them).
static void kv_copy_row0(KVCache* kv) {
    const size_t E = kv->kcache16 ? sizeof(uint16_t) : sizeof(floatX);
    const size_t per_seq = (size_t)kv->maxT * kv->m->cfg.channels * E, layer_cache = (size_t)kv->B * per_seq; // (bytes)
    char* kbase = kv->kcache16 ? (char*)kv->kcache16 : (char*)kv->kcache;
    char* vbase = kv->kcache16 ? (char*)kv->vcache16 : (char*)kv->vcache;
    for (int l = 0; l < kv->m->cfg.num_layers; l++)
        for (int k = 1; k < kv->B; k *= 2) {
            const size_t n = (size_t)(k < kv->B - k ? k : kv->B - k) * per_seq;
            char* kc = kbase + l * layer_cache;
            char* vc = vbase + l * layer_cache;
            ops_memcpy(kc + (size_t)k * per_seq, kc, n);
            ops_memcpy(vc + (size_t)k * per_seq, vc, n);
        }
}

const float* kv_prefill_shared(KVCache* kv, const int* tokens, int Tn) {
    const float* logits = kv_forward_rows(kv, tokens, Tn, 1);
    kv_copy_row0(kv);
    return logits;
}

// ----------------------------------------------------------------------------
// choosing a token

// min-heap on (logit, then higher id counts as smaller so lower ids win ties) of the top k
static int heap_less(const float* lg, int a, int b) { return lg[a] < lg[b] || (lg[a] == lg[b] && a > b); }
static void heap_down(int* h, int n, int i, const float* lg) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, s = i;
        if (l < n && heap_less(lg, h[l], h[s])) s = l;
        if (r < n && heap_less(lg, h[r], h[s])) s = r;
        if (s == i) return;
        int t = h[i]; h[i] = h[s]; h[s] = t;
        i = s;
    }
}

void sample_penalize(float* logits, int V, const int* seq, int n, float R) {
    if (!(R > 0.0f) || R == 1.0f || n < 1) return;
    unsigned char* seen = (unsigned char*)calloc((size_t)V, 1);
    if (!seen) fatal("free some memory", "out of memory for the repetition penalty over %d tokens", V);
    for (int i = 0; i < n; i++) {
        const int t = seq[i];
        if (t < 0 || t >= V || seen[t]) continue; // (each id once, however often it occurs)
        seen[t] = 1;
        logits[t] = logits[t] < 0.0f ? logits[t] * R : logits[t] / R;
    }
    free(seen);
}

// Top-k as transformers' TopKLogitsWarper: the ids whose logit is >= the k-th largest logit
// (all ties at the boundary), into idx in increasing id order; returns how many.
static int sample_top_k(const float* logits, int V, int k, int* idx) {
    if (k <= 0 || k >= V) {
        for (int i = 0; i < V; i++) idx[i] = i;
        return V;
    }
    // a min-heap of the k largest: its root is the k-th largest value
    for (int i = 0; i < k; i++) idx[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) heap_down(idx, k, i, logits);
    for (int i = k; i < V; i++)
        if (heap_less(logits, idx[0], i)) { idx[0] = i; heap_down(idx, k, 0, logits); }
    const float kth = logits[idx[0]];
    int n = 0;
    for (int i = 0; i < V; i++) if (logits[i] >= kth) idx[n++] = i;
    return n;
}

typedef struct { float logit; int id, pos; } TopPItem;
// more likely first; among equal logits the lower id first
static int topp_cmp(const void* a, const void* b) {
    const TopPItem *x = (const TopPItem*)a, *y = (const TopPItem*)b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

// A weight's binade for top-p's candidates: 1 - its binary exponent (frexpf), so a smaller
// weight never has a smaller binade; 0 and the weights below 2^-62 share the last.
#define TOPP_BINADES 64
static int topp_binade(float w) {
    int e;
    frexpf(w, &e);
    const int b = 1 - e;
    return w > 0.0f && b < TOPP_BINADES - 1 ? b : TOPP_BINADES - 1;
}

// The candidates of top-p into order (position, logit, id), most likely first: the tokens of the
// binades up to the first where the mass from the top reaches limit, or all n with all = 1.
// Every other token has a smaller weight, so a smaller logit, and comes after all of them.
// Returns how many.
static int topp_candidates(const float* logits, const int* idx, const float* w, int n, double limit, int all, TopPItem* order) {
    int last = TOPP_BINADES - 1;
    if (!all) {
        double mass[TOPP_BINADES] = {0};
        for (int j = 0; j < n; j++) mass[topp_binade(w[j])] += w[j];
        double c = 0.0;
        for (int b = 0; b < TOPP_BINADES; b++) { c += mass[b]; if (c >= limit) { last = b; break; } }
    }
    int m = 0;
    for (int j = 0; j < n; j++) {
        if (topp_binade(w[j]) > last) continue;
        order[m].logit = logits[idx[j]]; order[m].id = idx[j]; order[m].pos = j; m++;
    }
    qsort(order, (size_t)m, sizeof(TopPItem), topp_cmp);
    return m;
}

// Top-p as transformers' TopPLogitsWarper (min_tokens_to_keep 1): from the most likely down, a
// token stays while the tokens above it hold less than top_p of the mass sum; the others get
// weight -1 (removed). w: the weights of idx[0..n). Only the candidates are sorted; if their
// mass, summed in order, falls short of the limit by rounding, all n are.
static void sample_top_p(const float* logits, const int* idx, float* w, int n, double sum, float top_p) {
    TopPItem* order = (TopPItem*)mallocCheck((size_t)n * sizeof(TopPItem));
    const double limit = (double)top_p * sum;
    for (int all = 0; all < 2; all++) {
        const int m = topp_candidates(logits, idx, w, n, limit, all, order);
        double above = 0.0;
        int j = 0;
        for (; j < m && (j == 0 || above < limit); j++) above += w[order[j].pos];
        if (j == m && m < n && above < limit) continue; // (the boundary lies past the candidates)
        // the first j stay: their weights aside (in the sort key, no longer needed), all removed, the j back
        for (int k = 0; k < j; k++) order[k].logit = w[order[k].pos];
        for (int i = 0; i < n; i++) w[i] = -1.0f;
        for (int k = 0; k < j; k++) w[order[k].pos] = order[k].logit;
        break;
    }
    free(order);
}

// The kept tokens (idx, increasing ids) and their weights exp((logit - max) / T) (w) after
// top-k, top-p and min-p; returns how many, *sum their total. Not for greedy (T <= 0).
static int sample_filter(const float* logits, int V, const SampleParams* sp, float* w, int* idx, double* sum) {
    int n = sample_top_k(logits, V, sp->top_k, idx);
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (logits[idx[i]] > mx) mx = logits[idx[i]];
    // (l - max) / T, not (l - max) * (1 / T): below T ~ 2.9e-39 the reciprocal is inf, and the
    // maximum's 0 * inf is NaN. Divided, every T > 0 gives the maximum exp(0) = 1 and the others
    // their share, which underflows to 0 as T -> 0: the limit, greedy (ties shared).
    const float t = sp->temperature;
    double s = 0.0;
    for (int i = 0; i < n; i++) { w[i] = expf((logits[idx[i]] - mx) / t); s += w[i]; }
    const int topp = sp->top_p > 0.0f && sp->top_p < 1.0f, minp = sp->min_p > 0.0f;
    if (topp) sample_top_p(logits, idx, w, n, s, sp->top_p);
    // min-p as MinPLogitsWarper: p_i < min_p * p_max removed; p_max's weight is exp(0) = 1
    if (!topp && !minp) { *sum = s; return n; }
    int kept = 0;
    s = 0.0;
    for (int i = 0; i < n; i++) {
        if (w[i] < 0.0f || (minp && w[i] < sp->min_p)) continue; // (top-p's removed: -1)
        idx[kept] = idx[i]; w[kept] = w[i]; s += w[i]; kept++;
    }
    *sum = s;
    return kept;
}

static int sample_argmax(const float* logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

int sample_probs(const float* logits, int V, const SampleParams* sp, float* probs, int* kept) {
    memset(probs, 0, (size_t)V * sizeof(float));
    if (kept) memset(kept, 0, (size_t)V * sizeof(int));
    if (sp->temperature <= 0.0f) {
        const int best = sample_argmax(logits, V);
        probs[best] = 1.0f;
        if (kept) kept[best] = 1;
        return 1;
    }
    float* w = (float*)mallocCheck((size_t)V * sizeof(float));
    int* idx = (int*)mallocCheck((size_t)V * sizeof(int));
    double sum;
    const int n = sample_filter(logits, V, sp, w, idx, &sum);
    for (int i = 0; i < n; i++) {
        probs[idx[i]] = (float)(w[i] / sum);
        if (kept) kept[idx[i]] = 1;
    }
    free(w); free(idx);
    return n;
}

int sample_token(const float* logits, int V, const SampleParams* sp, uint64_t counter, float* scratch_f, int* scratch_i) {
    if (sp->temperature <= 0.0f) return sample_argmax(logits, V);
    float* p = scratch_f ? scratch_f : (float*)mallocCheck((size_t)V * sizeof(float));
    int* idx = scratch_i ? scratch_i : (int*)mallocCheck((size_t)V * sizeof(int));
    double sum;
    const int n = sample_filter(logits, V, sp, p, idx, &sum);
    double u = rand_uniform(sp->seed, SAMPLE_RNG_STREAM, counter) * sum, c = 0.0;
    int tok = idx[n - 1];
    for (int i = 0; i < n; i++) { c += p[i]; if (u < c) { tok = idx[i]; break; } }
    if (!scratch_f) free(p);
    if (!scratch_i) free(idx);
    return tok;
}

int sample_generate(GPT2* m, KVCache* kv, const int* prompt, int n_prompt, int n_new,
                    const SampleParams* sp, int stop_id, int* out, SampleCallback cb, void* ctx) {
    const int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    if (n_prompt < 1) fatal("give a prompt of at least one token", "sampling needs a prompt (got %d tokens)", n_prompt);
    if (n_new < 1) return 0;
    if (kv && kv->B != 1) fatal("this is a bug in llmc", "sample_generate with a cache of %d sequences (it generates one)", kv->B);
    const int need = n_prompt + n_new - 1; // the last token is emitted, never fed back
    if (kv ? need > kv->maxT : (m->B < 1 || need > m->T))
        fatal("generate fewer tokens or use a shorter prompt", "prompt (%d tokens) + %d new tokens exceed the %d positions available",
              n_prompt, n_new, kv ? kv->maxT : m->T);
    const int was_training = m->lin->shared.training;
    const uint64_t tick = m->lin->shared.tick;
    linear_set_training(m->lin, 0, tick); // no dropout
    int* seq = (int*)mallocCheck((size_t)(need + 1) * sizeof(int));
    memcpy(seq, prompt, (size_t)n_prompt * sizeof(int));
    float* sf = (float*)mallocCheck((size_t)V * sizeof(float));
    int* si = (int*)mallocCheck((size_t)V * sizeof(int));
    float* row = kv ? NULL : (float*)mallocCheck((size_t)Vp * sizeof(float));
    const float R = sp->repetition_penalty;
    float* pen = R > 0.0f && R != 1.0f ? (float*)mallocCheck((size_t)V * sizeof(float)) : NULL; // the penalized copy
    int len = n_prompt, produced = 0;
    if (kv) kv_reset(kv);
    for (int i = 0; i < n_new; i++) {
        const float* logits;
        if (kv) {
            logits = kv_forward(kv, seq + kv->pos, len - kv->pos);
        } else {
            gpt2_forward(m, seq, NULL, NULL, 1, len, 0.0f, NULL);
            ops_download_f32(row, m->acts.logits + (size_t)(len - 1) * Vp, (size_t)Vp);
            logits = row;
        }
        const float* choose = logits;
        if (pen) { memcpy(pen, logits, (size_t)V * sizeof(float)); sample_penalize(pen, V, seq, len, R); choose = pen; }
        int tok = sample_token(choose, V, sp, (uint64_t)i, sf, si);
        if (out) out[produced] = tok;
        produced++;
        if (cb && cb(ctx, tok, logits, V)) break;
        if (tok == stop_id) break;
        seq[len++] = tok;
    }
    free(seq); free(sf); free(si); free(row); free(pen);
    linear_set_training(m->lin, was_training, tick);
    return produced;
}

// A batch's decoding state: each row's last token, whether it ended, and for the repetition
// penalty its history (the prompt, then its tokens: n_prompt + i entries at step i).
typedef struct {
    int B, V, Vp, stop_id, cap;
    const SampleParams* sp;
    int* last;
    unsigned char* done;
    int* hist;                  // (B, cap), or NULL without a repetition penalty
    float *sf, *pen;            // scratch; pen: the penalized copy of a row's logits
    int* si;
    SampleRowCallback cb;
    void* ctx;
} BatchRun;

// The first token of every row comes from the prompt's logits (one row); later ones from row r of
// the step's logits. Returns the tokens emitted this step; sets done[r] for the rows that ended.
static int batch_step(BatchRun* b, const float* logits, int shared, int i, int n_prompt) {
    int emitted = 0;
    for (int r = 0; r < b->B; r++) {
        if (b->done[r]) continue;
        const float* lg = logits + (shared ? 0 : (size_t)r * b->Vp);
        const float* choose = lg;
        int* h = b->hist ? b->hist + (size_t)r * b->cap : NULL;
        if (h) {
            memcpy(b->pen, lg, (size_t)b->V * sizeof(float));
            sample_penalize(b->pen, b->V, h, n_prompt + i, b->sp->repetition_penalty);
            choose = b->pen;
        }
        const int tok = sample_token(choose, b->V, b->sp, SAMPLE_ROW_COUNTER(r, i), b->sf, b->si);
        emitted++;
        b->last[r] = tok;
        if (h) h[n_prompt + i] = tok;
        if ((b->cb && b->cb(b->ctx, r, tok, lg, b->V)) || tok == b->stop_id) b->done[r] = 1;
    }
    return emitted;
}

static void batch_run_init(BatchRun* b, const KVCache* kv, const int* prompt, int n_prompt, int n_new, const SampleParams* sp) {
    const int V = kv->m->cfg.vocab_size, B = kv->B;
    const float R = sp->repetition_penalty;
    memset(b, 0, sizeof(*b));
    b->B = B; b->V = V; b->Vp = kv->m->cfg.padded_vocab_size; b->sp = sp; b->cap = n_prompt + n_new;
    b->sf = (float*)mallocCheck((size_t)V * sizeof(float));
    b->si = (int*)mallocCheck((size_t)V * sizeof(int));
    b->last = (int*)mallocCheck((size_t)B * sizeof(int));
    b->done = (unsigned char*)calloc((size_t)B, 1);
    if (!b->done) fatal(NULL, "out of memory");
    if (!(R > 0.0f && R != 1.0f)) return;
    b->pen = (float*)mallocCheck((size_t)V * sizeof(float));
    b->hist = (int*)mallocCheck((size_t)B * b->cap * sizeof(int));
    for (int r = 0; r < B; r++) memcpy(b->hist + (size_t)r * b->cap, prompt, (size_t)n_prompt * sizeof(int));
}

static void batch_run_free(BatchRun* b) { free(b->sf); free(b->si); free(b->last); free(b->done); free(b->hist); free(b->pen); }

int sample_generate_batch(GPT2* m, KVCache* kv, const int* prompt, int n_prompt, int n_new,
                          const SampleParams* sp, int stop_id, SampleRowCallback cb, void* ctx) {
    if (n_prompt < 1) fatal("give a prompt of at least one token", "sampling needs a prompt (got %d tokens)", n_prompt);
    if (n_new < 1) return 0;
    if (n_prompt + n_new - 1 > kv->maxT)
        fatal("generate fewer tokens or use a shorter prompt", "prompt (%d tokens) + %d new tokens exceed the %d positions available",
              n_prompt, n_new, kv->maxT);
    const int was_training = m->lin->shared.training;
    const uint64_t tick = m->lin->shared.tick;
    linear_set_training(m->lin, 0, tick); // no dropout
    BatchRun b;
    batch_run_init(&b, kv, prompt, n_prompt, n_new, sp);
    b.stop_id = stop_id; b.cb = cb; b.ctx = ctx;
    kv_reset(kv);
    const float* logits = kv_prefill_shared(kv, prompt, n_prompt);
    int produced = 0, live = b.B;
    for (int i = 0; i < n_new && live > 0; i++) {
        if (i > 0) logits = kv_forward(kv, b.last, 1);
        produced += batch_step(&b, logits, i == 0, i, n_prompt);
        live = 0;
        for (int r = 0; r < b.B; r++) live += !b.done[r];
    }
    batch_run_free(&b);
    linear_set_training(m->lin, was_training, tick);
    return produced;
}
