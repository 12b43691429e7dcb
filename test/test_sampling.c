// Sampling: the key/value-cache forward and the token choice (llmc/model/sampler.h).
// - greedy generation equals transformers' generate (do_sample=False) on two tiny GPT-2s and
//   PEFT's generate with two adapters: same ids, per-step logits within 1e-4
//   (test/ref/sampling_ref.safetensors, made by dev/gen_sampling_ref.py);
// - with the cache equals without it (full forward per token): same tokens, logits within fp32
//   tolerance, for greedy, temperature and top-k sampling;
// - a fixed seed reproduces a completion; top-k 1 and temperature 0 are greedy; prompts fed in
//   chunks and B = 2 sequences give the logits of one-at-a-time B = 1;
// - sample_token draws from the right distribution (frequencies of many draws) and never
//   outside the top k; tiny (denormal) temperatures choose as greedy does;
// - top-p, min-p and the repetition penalty as transformers' logits processors on fixed logits
//   vectors: the same kept sets and probabilities to 1e-6 (test/ref/sample_filter_ref.safetensors,
//   made by dev/gen_sample_filter_ref.py), sample_token drawing from that distribution, and greedy
//   generation with the penalty giving transformers' ids; with these controls off, a seed picks
//   the token it picked before they existed.
#define _GNU_SOURCE // qsort_r
#include "test.h"
#include "../llmc/model/model.h"
#include "../llmc/model/sampler.h"
#include "../llmc/base/safetensors.h"
#include "../llmc/base/check.h"
#include "../llmc/base/rand.h"

#define REF "test/ref/sampling_ref.safetensors"
#define FILTER_REF "test/ref/sample_filter_ref.safetensors"
// temperature, top-k, seed; top-p, min-p and the repetition penalty off
#define SP(t, k, seed) { (t), (k), (seed), 1.0f, 0.0f, 1.0f }
#define MAXN 64

typedef struct { int n; int ids[MAXN]; float* logits; int V; int stop_after; } Rec; // logits: n x V; stop_after: the callback ends generation after that many tokens (0: never)

static int rec_cb(void* ctx, int tok, const float* logits, int V) {
    Rec* r = (Rec*)ctx;
    r->V = V;
    memcpy(r->logits + (size_t)r->n * V, logits, (size_t)V * sizeof(float));
    r->ids[r->n++] = tok;
    return r->stop_after > 0 && r->n >= r->stop_after;
}

// acts_T: activations for the no-cache path (also bounds the LoRA scratch, i.e. the cache chunk)
static void model_open(Model* x, const char* path, const char* adapter, int acts_T, int bf16) {
    LoraSource src;
    ModelSpec spec;
    memset(&src, 0, sizeof(src));
    memset(&spec, 0, sizeof(spec));
    spec.path = path;
    spec.B = 1; spec.T = acts_T;
    spec.base_bf16 = bf16;
    src.adapter = adapter;
    if (adapter) spec.lora_src = &src;
    model_assemble(x, &spec);
}

static int gen(Model* x, int use_kv, const int* prompt, int np, int n, SampleParams sp, Rec* r) {
    KVCache kv;
    r->n = 0;
    if (use_kv) kv_init(&kv, &x->gpt, 1, x->gpt.cfg.max_seq_len);
    int got = sample_generate(&x->gpt, use_kv ? &kv : NULL, prompt, np, n, &sp, -1, NULL, rec_cb, r);
    if (use_kv) kv_free(&kv);
    return got;
}

// The greedy steps whose context is the reference's: up to and including the first step whose
// choice differs (a near tie that bf16 rounding decides the other way; after it the contexts differ).
static int same_context_steps(const int* ids, const int* want, int n) {
    int k = 0;
    while (k < n && ids[k] == want[k]) k++;
    return k < n ? k + 1 : n;
}

static double max_abs_diff(const float* a, const float* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) { double d = fabs((double)a[i] - (double)b[i]); if (d > m) m = d; }
    return m;
}

// fp32: transformers' greedy ids, and its per-step logits to 1e-4. bf16 (generate --dtype bf16:
// the linear weights held in bf16, the lm_head rounded once per sequence): the per-step logits
// within bf16 rounding of transformers' fp32 ones over the steps that share its context, visibly
// not the fp32 numbers, and the cache giving the logits of the full recomputation (bf16 rounding).
static void test_reference(const char* key, const char* model, const char* adapter, int bf16) {
    StFile f;
    st_open(&f, REF);
    const StTensor* tp = st_find(&f, "prompt");
    int np = (int)tp->shape[0];
    int prompt[MAXN], want[MAXN], kv_ids[MAXN];
    st_read_i32(&f, tp, prompt);
    char name[128];
    snprintf(name, sizeof(name), "%s.ids", key);
    const StTensor* ti = st_find(&f, name);
    int n = (int)ti->shape[0];
    st_read_i32(&f, ti, want);
    snprintf(name, sizeof(name), "%s.logits", key);
    const StTensor* tl = st_find(&f, name);
    int V = (int)tl->shape[1];
    float* wl = (float*)mallocCheck((size_t)n * V * sizeof(float));
    float* kv_logits = (float*)mallocCheck((size_t)n * V * sizeof(float));
    st_read_f32(&f, tl, wl);
    st_close(&f);

    ops_set_gemm_dtype(bf16 ? OPS_BF16 : OPS_F32);
    Model x;
    model_open(&x, model, adapter, np + n, bf16);
    if (bf16) TEST_CHECK(x.base16 != NULL, "%s: bf16 GEMMs without training hold no bf16 base weights", key);
    Rec r = {0}; r.logits = (float*)mallocCheck((size_t)n * V * sizeof(float));
    SampleParams greedy = SP(0.0f, 0, 0);
    const char* tag = bf16 ? " bf16" : "";
    for (int kv = 1; kv >= 0; kv--) {
        int got = gen(&x, kv, prompt, np, n, greedy, &r);
        TEST_CHECK(got == n && r.V == V, "%s: %d tokens of %d, V %d vs %d", key, got, n, r.V, V);
        char what[160];
        snprintf(what, sizeof(what), "%s%s%s: per-step logits vs transformers", key, tag, kv ? "" : " (no cache)");
        if (!bf16) {
            int same = memcmp(r.ids, want, (size_t)n * sizeof(int)) == 0;
            TEST_CHECK(same, "%s%s: greedy ids differ from transformers' generate", key, kv ? "" : " (no cache)");
            if (same) printf("ok   %s%s: %d greedy ids equal transformers' generate\n", key, kv ? "" : " (no cache)", n);
            test_allclose(what, r.logits, wl, (size_t)n * V, 1e-4, 1e-4);
            continue;
        }
        const size_t steps = (size_t)same_context_steps(r.ids, want, n);
        test_allclose(what, r.logits, wl, steps * V, 1e-2, 5e-3); // a few bf16 ulps (2^-8 relative)
        const double d = max_abs_diff(r.logits, wl, steps * V);
        TEST_CHECK(d > 1e-5, "%s: max diff %.3g to the fp32 logits: the bf16 GEMMs did not run", what, d);
        if (kv) { memcpy(kv_ids, r.ids, sizeof(kv_ids)); memcpy(kv_logits, r.logits, (size_t)n * V * sizeof(float)); continue; }
        // the two paths' fp32 sums differ in the last bits, which a GEMM's rounding can turn into
        // a bf16 ulp: bf16 tolerance, over the steps where both chose the same tokens
        snprintf(what, sizeof(what), "%s bf16: cache vs full recomputation, logits", key);
        test_allclose(what, kv_logits, r.logits, (size_t)same_context_steps(r.ids, kv_ids, n) * V, 1e-2, 5e-3);
    }
    ops_set_gemm_dtype(OPS_F32);
    free(r.logits); free(wl); free(kv_logits);
    model_free(&x);
}

static void test_kv_equals_full(void) {
    Model x;
    const int np = 7, n = 30;
    model_open(&x, "test/ref/sampling_tiny", NULL, np + n, 0);
    const int V = x.gpt.cfg.vocab_size;
    int prompt[7] = { 1, 2, 3, 50, 60, 70, 99 };
    Rec a = {0}, b = {0};
    a.logits = (float*)mallocCheck((size_t)n * V * sizeof(float));
    b.logits = (float*)mallocCheck((size_t)n * V * sizeof(float));
    SampleParams cases[] = { SP(0.0f, 0, 1), SP(1.0f, 0, 42), SP(0.8f, 10, 7), SP(1.5f, 3, 123) };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        gen(&x, 1, prompt, np, n, cases[c], &a);
        gen(&x, 0, prompt, np, n, cases[c], &b);
        char what[160];
        snprintf(what, sizeof(what), "cache vs full forward: T=%g top-k %d seed %llu logits", cases[c].temperature,
                 cases[c].top_k, (unsigned long long)cases[c].seed);
        TEST_CHECK(a.n == n && b.n == n && memcmp(a.ids, b.ids, (size_t)n * sizeof(int)) == 0,
                   "cache vs full forward: T=%g top-k %d: tokens differ", cases[c].temperature, cases[c].top_k);
        test_allclose(what, a.logits, b.logits, (size_t)n * V, 1e-5, 1e-5);
    }
    // reproducible with a seed; another seed gives another completion
    SampleParams s1 = SP(1.0f, 0, 1234), s2 = SP(1.0f, 0, 1235);
    gen(&x, 1, prompt, np, n, s1, &a);
    gen(&x, 1, prompt, np, n, s1, &b);
    TEST_CHECK(memcmp(a.ids, b.ids, (size_t)n * sizeof(int)) == 0, "same seed, different tokens");
    gen(&x, 1, prompt, np, n, s2, &b);
    TEST_CHECK(memcmp(a.ids, b.ids, (size_t)n * sizeof(int)) != 0, "seeds 1234 and 1235 gave the same %d tokens", n);
    // top-k 1 and temperature 0 are greedy
    SampleParams g = SP(0.0f, 0, 0), k1 = SP(1.3f, 1, 99), t0 = SP(0.0f, 40, 5);
    gen(&x, 1, prompt, np, n, g, &a);
    gen(&x, 1, prompt, np, n, k1, &b);
    TEST_CHECK(memcmp(a.ids, b.ids, (size_t)n * sizeof(int)) == 0, "top-k 1 is not greedy");
    gen(&x, 1, prompt, np, n, t0, &b);
    TEST_CHECK(memcmp(a.ids, b.ids, (size_t)n * sizeof(int)) == 0, "temperature 0 is not greedy");
    // a sampled completion differs from greedy (the test above is not vacuous)
    gen(&x, 1, prompt, np, n, s1, &b);
    TEST_CHECK(memcmp(a.ids, b.ids, (size_t)n * sizeof(int)) != 0, "sampling at temperature 1 reproduced greedy");
    printf("ok   seeds reproduce; top-k 1 and temperature 0 are greedy\n");
    // a callback that asks to stop ends generation after that token (generate --chat's stop text)
    for (int kv = 1; kv >= 0; kv--) {
        b.stop_after = 5;
        int got = gen(&x, kv, prompt, np, n, g, &b);
        b.stop_after = 0;
        TEST_CHECK(got == 5 && b.n == 5 && memcmp(a.ids, b.ids, 5 * sizeof(int)) == 0,
                   "a callback returning 1 after 5 tokens%s: %d tokens generated, %d seen", kv ? "" : " (no cache)", got, b.n);
    }
    free(a.logits); free(b.logits);

    // a sequence fed at once, in chunks of 5, and token by token: the same last logits
    const int Vp = x.gpt.cfg.padded_vocab_size, L = 30;
    int seq[30];
    for (int i = 0; i < L; i++) seq[i] = (i * 37 + 11) % V;
    float* once = (float*)mallocCheck((size_t)Vp * sizeof(float));
    float* other = (float*)mallocCheck((size_t)Vp * sizeof(float));
    KVCache kv;
    kv_init(&kv, &x.gpt, 1, 40);
    memcpy(once, kv_forward(&kv, seq, L), (size_t)Vp * sizeof(float));
    kv_reset(&kv);
    const float* lg = NULL;
    for (int i = 0; i < L; i++) lg = kv_forward(&kv, seq + i, 1);
    memcpy(other, lg, (size_t)Vp * sizeof(float));
    test_allclose("cache: whole prompt vs token by token", once, other, (size_t)V, 1e-5, 1e-5);
    kv_reset(&kv);
    kv.chunk = 5; // buffers are sized for more: a smaller chunk only splits the prompt
    memcpy(other, kv_forward(&kv, seq, L), (size_t)Vp * sizeof(float));
    test_allclose("cache: prompt in chunks of 5 vs at once", other, once, (size_t)V, 1e-5, 1e-5);
    kv_free(&kv);
    // B = 2: row 0 is seq, row 1 another sequence; each equals its B = 1 result
    int two[60];
    for (int i = 0; i < L; i++) { two[i] = seq[i]; two[L + i] = (i * 13 + 5) % V; }
    kv_init(&kv, &x.gpt, 2, 40);
    const float* l2 = kv_forward(&kv, two, L);
    test_allclose("cache B=2: sequence 0 vs B=1", l2, once, (size_t)V, 1e-5, 1e-5);
    memcpy(other, l2 + Vp, (size_t)V * sizeof(float));
    kv_free(&kv);
    kv_init(&kv, &x.gpt, 1, 40);
    test_allclose("cache B=2: sequence 1 vs B=1", other, kv_forward(&kv, two + L, L), (size_t)V, 1e-5, 1e-5);
    kv_free(&kv);
    free(once); free(other);
    model_free(&x);
}

// sample_token alone: frequencies of many draws against the softmax.
static void test_sample_token(void) {
    const int V = 6, D = 200000;
    float logits[6] = { 1.0f, 3.0f, -1.0f, 2.5f, 0.0f, 2.9f };
    struct { float t; int k; } cs[] = { {1.0f, 0}, {0.5f, 0}, {2.0f, 3} };
    for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
        SampleParams sp = SP(cs[c].t, cs[c].k, 77);
        double p[6], sum = 0.0;
        // top 3 of the logits above: ids 1, 5, 3
        for (int i = 0; i < V; i++) {
            int kept = cs[c].k == 0 || i == 1 || i == 5 || i == 3;
            p[i] = kept ? exp(logits[i] / cs[c].t) : 0.0;
            sum += p[i];
        }
        long cnt[6] = {0};
        for (int d = 0; d < D; d++) cnt[sample_token(logits, V, &sp, (uint64_t)d, NULL, NULL)]++;
        float got[6], want[6];
        for (int i = 0; i < V; i++) { got[i] = (float)cnt[i] / D; want[i] = (float)(p[i] / sum); }
        char what[96];
        snprintf(what, sizeof(what), "sample_token T=%g top-k %d: frequencies of %d draws", cs[c].t, cs[c].k, D);
        test_allclose(what, got, want, (size_t)V, 0.0, 0.005); // binomial sd <= 0.0012
        if (cs[c].k) TEST_CHECK(cnt[0] == 0 && cnt[2] == 0 && cnt[4] == 0, "top-k drew outside the top 3");
    }
    SampleParams g = SP(0.0f, 0, 0);
    TEST_CHECK(sample_token(logits, V, &g, 0, NULL, NULL) == 1, "greedy picks the argmax");
}

// Tiny temperatures (down to the smallest denormal) choose as their limit, greedy: 1 / T overflows
// to inf below ~2.9e-39, and scaling by it made the maximum's logit 0 * inf = NaN, so no
// cumulative sum ever passed u and the last token (50256, <|endoftext|> in GPT-2) came out. With
// tied maxima the draws stay among them (and reach each one).
static void test_sample_tiny_temperature(void) {
    const int V = 6;
    const float logits[6] = { 1.0f, 3.0f, -1.0f, 2.5f, 0.0f, 2.9f }, tied[6] = { 3.0f, 1.0f, 3.0f, -2.0f, 0.0f, 2.0f };
    const float ts[] = { 1.4e-45f, 1e-45f, 1e-42f, 1e-40f, 2e-39f, 3e-39f, 1e-38f, 1e-30f, 1e-7f };
    int all_greedy = 1, tied_ok = 1, seen0 = 0, seen2 = 0;
    for (size_t c = 0; c < sizeof(ts) / sizeof(ts[0]); c++)
        for (int k = 0; k <= 3; k += 3)
            for (uint64_t d = 0; d < 200; d++) {
                SampleParams sp = SP(ts[c], k, 5);
                if (sample_token(logits, V, &sp, d, NULL, NULL) != 1) all_greedy = 0;
                const int t = sample_token(tied, V, &sp, d, NULL, NULL);
                if (t != 0 && t != 2) tied_ok = 0;
                seen0 |= t == 0; seen2 |= t == 2;
            }
    TEST_CHECK(all_greedy, "denormal / tiny temperatures (1.4e-45 .. 1e-7) choose the argmax, as their limit (greedy) does");
    TEST_CHECK(tied_ok && seen0 && seen2, "tiny temperatures with two tied maxima draw among them only, each of them");
}

// One case of FILTER_REF: transformers' logits processors on a fixed logits vector.
typedef struct { int V, n; float* logits; int* seq; float params[5]; int* kept; float* probs; } FilterCase;

static void filter_case_read(StFile* f, const char* name, FilterCase* c) {
    char key[96];
    snprintf(key, sizeof(key), "%s.logits", name);
    const StTensor* t = st_find(f, key);
    c->V = (int)t->shape[0];
    c->logits = (float*)mallocCheck((size_t)c->V * sizeof(float));
    c->kept = (int*)mallocCheck((size_t)c->V * sizeof(int));
    c->probs = (float*)mallocCheck((size_t)c->V * sizeof(float));
    st_read_f32(f, t, c->logits);
    snprintf(key, sizeof(key), "%s.seq", name);
    t = st_find(f, key);
    c->n = (int)t->shape[0];
    c->seq = (int*)mallocCheck((size_t)c->n * sizeof(int));
    st_read_i32(f, t, c->seq);
    snprintf(key, sizeof(key), "%s.params", name);
    st_read_f32(f, st_find(f, key), c->params);
    snprintf(key, sizeof(key), "%s.kept", name);
    st_read_i32(f, st_find(f, key), c->kept);
    snprintf(key, sizeof(key), "%s.probs", name);
    st_read_f32(f, st_find(f, key), c->probs);
}

static void filter_case_free(FilterCase* c) { free(c->logits); free(c->seq); free(c->kept); free(c->probs); }

static SampleParams filter_case_params(const FilterCase* c, uint64_t seed) {
    SampleParams sp = { c->params[0], (int)c->params[1], seed, c->params[2], c->params[3], c->params[4] };
    return sp;
}

static int cmp_float_desc(const void* a, const void* b) { float x = *(const float*)a, y = *(const float*)b; return (x < y) - (x > y); }

// The penalized logits (sample_penalize, as sample_generate calls it) through sample_probs.
static int filter_case_run(const FilterCase* c, float* logits, float* probs, int* kept) {
    SampleParams sp = filter_case_params(c, 0);
    memcpy(logits, c->logits, (size_t)c->V * sizeof(float));
    sample_penalize(logits, c->V, c->seq, c->n, sp.repetition_penalty);
    return sample_probs(logits, c->V, &sp, probs, kept);
}

// Where top-p cuts a group of tied tokens, transformers keeps those torch.sort happens to list
// last: the number kept and the probabilities (sorted) must agree, the ids need not.
static void filter_check_tied(const char* name, const FilterCase* c, float* probs, int n_kept) {
    int want_n = 0;
    for (int i = 0; i < c->V; i++) want_n += c->kept[i];
    float* a = (float*)mallocCheck((size_t)c->V * sizeof(float));
    float* b = (float*)mallocCheck((size_t)c->V * sizeof(float));
    memcpy(a, probs, (size_t)c->V * sizeof(float));
    memcpy(b, c->probs, (size_t)c->V * sizeof(float));
    qsort(a, (size_t)c->V, sizeof(float), cmp_float_desc);
    qsort(b, (size_t)c->V, sizeof(float), cmp_float_desc);
    TEST_CHECK(n_kept == want_n, "%s: %d tokens kept, transformers keeps %d", name, n_kept, want_n);
    char what[128];
    snprintf(what, sizeof(what), "%s (top-p cuts a tie): sorted probabilities vs transformers", name);
    test_allclose(what, a, b, (size_t)c->V, 0.0, 1e-6);
    free(a); free(b);
}

// sample_probs after sample_penalize against transformers' processors (FILTER_REF): the same
// kept set and probabilities to 1e-6.
static void test_filter_reference(void) {
    StFile f;
    st_open(&f, FILTER_REF);
    char names[1024], tied[256];
    snprintf(names, sizeof(names), "%s", st_meta(&f, "cases"));
    snprintf(tied, sizeof(tied), ",%s,", st_meta(&f, "topp_tie_cases"));
    int n_cases = 0;
    for (char* name = strtok(names, ","); name; name = strtok(NULL, ","), n_cases++) {
        FilterCase c;
        filter_case_read(&f, name, &c);
        float* logits = (float*)mallocCheck((size_t)c.V * sizeof(float));
        float* probs = (float*)mallocCheck((size_t)c.V * sizeof(float));
        int* kept = (int*)mallocCheck((size_t)c.V * sizeof(int));
        const int n_kept = filter_case_run(&c, logits, probs, kept);
        char key[96], what[160];
        snprintf(key, sizeof(key), ",%s,", name);
        if (strstr(tied, key)) {
            filter_check_tied(name, &c, probs, n_kept);
        } else {
            int diff = -1, count = 0;
            for (int i = 0; i < c.V; i++) { count += kept[i]; if (kept[i] != c.kept[i] && diff < 0) diff = i; }
            TEST_CHECK(diff < 0 && count == n_kept, "%s: kept sets differ from transformers' at id %d (ours %d, theirs %d)", name, diff,
                       diff < 0 ? 0 : kept[diff], diff < 0 ? 0 : c.kept[diff]);
            snprintf(what, sizeof(what), "%s: %d of %d kept as transformers keeps them; probabilities", name, n_kept, c.V);
            test_allclose(what, probs, c.probs, (size_t)c.V, 0.0, 1e-6);
        }
        free(logits); free(probs); free(kept);
        filter_case_free(&c);
    }
    TEST_CHECK(n_cases >= 10, "%s lists %d cases", FILTER_REF, n_cases);
    st_close(&f);
}

// Our rule where top-p cuts a tie: the lower ids first (FILTER_REF's ties_topp: four tied
// maxima 7, 13, 21, 40, three of them kept; at top-p 0.05 one).
static void test_filter_tie_rule(void) {
    StFile f;
    st_open(&f, FILTER_REF);
    const char* names[] = { "ties_topp", "ties_topp_tiny" };
    const int want[2][3] = { { 7, 13, 21 }, { 7, -1, -1 } };
    for (int k = 0; k < 2; k++) {
        FilterCase c;
        filter_case_read(&f, names[k], &c);
        float* logits = (float*)mallocCheck((size_t)c.V * sizeof(float));
        float* probs = (float*)mallocCheck((size_t)c.V * sizeof(float));
        int* kept = (int*)mallocCheck((size_t)c.V * sizeof(int));
        const int n = filter_case_run(&c, logits, probs, kept);
        int ok = n == (k == 0 ? 3 : 1);
        for (int j = 0; j < 3 && want[k][j] >= 0; j++) ok &= kept[want[k][j]];
        TEST_CHECK(ok, "%s: top-p keeps %d tokens, not the lowest ids of the tie", names[k], n);
        free(logits); free(probs); free(kept);
        filter_case_free(&c);
    }
    st_close(&f);
}

// sample_token draws from sample_probs' distribution: frequencies of many draws on cases with
// every control on, and never a token outside the kept set.
static void test_filter_draws(void) {
    StFile f;
    st_open(&f, FILTER_REF);
    const char* names[] = { "penalty_all", "ties_all", "minp_hot" };
    const int D = 200000;
    for (int k = 0; k < 3; k++) {
        FilterCase c;
        filter_case_read(&f, names[k], &c);
        float* logits = (float*)mallocCheck((size_t)c.V * sizeof(float));
        float* probs = (float*)mallocCheck((size_t)c.V * sizeof(float));
        float* freq = (float*)calloc((size_t)c.V, sizeof(float));
        int* kept = (int*)mallocCheck((size_t)c.V * sizeof(int));
        filter_case_run(&c, logits, probs, kept);
        SampleParams sp = filter_case_params(&c, 91);
        int outside = 0;
        for (int d = 0; d < D; d++) {
            const int t = sample_token(logits, c.V, &sp, (uint64_t)d, NULL, NULL);
            outside += !kept[t];
            freq[t] += 1.0f / D;
        }
        char what[128];
        snprintf(what, sizeof(what), "sample_token on %s: frequencies of %d draws vs sample_probs", names[k], D);
        test_allclose(what, freq, probs, (size_t)c.V, 0.0, 0.005);
        TEST_CHECK(outside == 0, "%s: %d draws outside the kept set", names[k], outside);
        free(logits); free(probs); free(freq); free(kept);
        filter_case_free(&c);
    }
    st_close(&f);
}

// Top-p restated by brute force (every token sorted by logit, ties by id): the kept flags.
static int cmp_logit_desc(const void* a, const void* b, void* lg) {
    const float* l = (const float*)lg;
    const int x = *(const int*)a, y = *(const int*)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void topp_brute(const float* lg, int V, float t, float top_p, int* kept) {
    int* ord = (int*)mallocCheck((size_t)V * sizeof(int));
    float* w = (float*)mallocCheck((size_t)V * sizeof(float));
    float mx = -INFINITY;
    double sum = 0.0, above = 0.0;
    for (int i = 0; i < V; i++) { ord[i] = i; if (lg[i] > mx) mx = lg[i]; }
    for (int i = 0; i < V; i++) { w[i] = expf((lg[i] - mx) / t); sum += w[i]; }
    qsort_r(ord, (size_t)V, sizeof(int), cmp_logit_desc, (void*)lg);
    for (int j = 0; j < V; j++) { kept[ord[j]] = j == 0 || above < (double)top_p * sum; above += w[ord[j]]; }
    free(ord); free(w);
}

// sample_probs' top-p (which sorts only the tokens that can matter) keeps what sorting all keeps,
// on random logits of many spreads, including ones with many ties and tiny weights.
static void test_topp_brute(void) {
    const int V = 700;
    float lg[700];
    float probs[700];
    int kept[700], want[700], same = 1, cases = 0;
    const float ps[] = { 0.05f, 0.3f, 0.9f, 0.999f };
    for (int r = 0; r < 120; r++) {
        const double spread = 0.01 * pow(10.0, (r % 8) * 0.7); // 0.01 .. ~800 nats (weights that underflow to 0)
        for (int i = 0; i < V; i++) {
            double x = (rand_uniform(8, 2, (uint64_t)(r * V + i)) * 2.0 - 1.0) * spread;
            lg[i] = (float)(r % 5 == 0 ? floor(x * 4.0) / 4.0 : x); // (every 5th: on a grid, so ties)
        }
        for (int k = 0; k < 4; k++) {
            SampleParams sp = SP(r % 3 == 0 ? 0.7f : 1.0f, 0, 1);
            sp.top_p = ps[k];
            sample_probs(lg, V, &sp, probs, kept);
            topp_brute(lg, V, sp.temperature, ps[k], want);
            same &= memcmp(kept, want, sizeof(kept)) == 0;
            cases++;
        }
    }
    TEST_CHECK(same, "top-p: the kept set differs from sorting every token");
    if (same) printf("ok   top-p keeps what sorting every token keeps (%d random cases)\n", cases);
}

// The rule of sample_token before top-p, min-p and the repetition penalty existed, restated:
// the top k (lower ids first among ties at the boundary) in increasing id order, weights
// expf((l - max) / T) summed in double, the first whose running sum exceeds u * sum.
static int old_rule_token(const float* lg, int V, float t, int k, uint64_t seed, uint64_t counter) {
    int* idx = (int*)mallocCheck((size_t)V * sizeof(int));
    int n = 0;
    for (int i = 0; i < V; i++) {
        int rank = 0; // how many come before i in (logit desc, id asc)
        for (int j = 0; j < V; j++) rank += lg[j] > lg[i] || (lg[j] == lg[i] && j < i);
        if (k <= 0 || k >= V || rank < k) idx[n++] = i;
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (lg[idx[i]] > mx) mx = lg[idx[i]];
    float* p = (float*)mallocCheck((size_t)n * sizeof(float));
    double sum = 0.0, c = 0.0;
    for (int i = 0; i < n; i++) { p[i] = expf((lg[idx[i]] - mx) / t); sum += p[i]; }
    const double u = rand_uniform(seed, SAMPLE_RNG_STREAM, counter) * sum;
    int tok = idx[n - 1];
    for (int i = 0; i < n; i++) { c += p[i]; if (u < c) { tok = idx[i]; break; } }
    free(idx); free(p);
    return tok;
}

// With the new controls off (their defaults, and a zero-initialized struct's 0s), a seed picks
// the token it picked before they existed.
static void test_controls_off(void) {
    const int V = 97;
    float lg[97];
    int same = 1, same_zero = 1, differs = 0;
    for (int r = 0; r < 40; r++) {
        for (int i = 0; i < V; i++) lg[i] = (float)(rand_uniform(5, 1, (uint64_t)(r * V + i)) * 8.0 - 4.0);
        const float t = 0.5f + 0.1f * (float)(r % 10);
        const int k = (r % 4) * 7;
        for (uint64_t d = 0; d < 50; d++) {
            SampleParams off = SP(t, k, 1234), zero = { t, k, 1234, 0.0f, 0.0f, 0.0f }, on = SP(t, k, 1234);
            on.top_p = 0.5f;
            const int want = old_rule_token(lg, V, t, k, 1234, d);
            same &= sample_token(lg, V, &off, d, NULL, NULL) == want;
            same_zero &= sample_token(lg, V, &zero, d, NULL, NULL) == want;
            differs |= sample_token(lg, V, &on, d, NULL, NULL) != want;
        }
    }
    TEST_CHECK(same, "top-p 1, min-p 0: sample_token chooses other tokens than the rule before these controls");
    TEST_CHECK(same_zero, "top-p, min-p, penalty 0 (a zero-initialized struct): other tokens than with them off");
    TEST_CHECK(differs, "top-p 0.5 chose as the old rule everywhere: the comparison above is vacuous");
    if (same && same_zero) printf("ok   the controls off: 2000 seeded draws choose as before them\n");
}

// sample_penalize: each id once however often it occurs, by sign, and ids out of range ignored.
static void test_penalize(void) {
    float lg[6] = { 2.0f, -2.0f, 0.0f, 3.0f, -1.0f, 1.0f };
    const int seq[] = { 0, 0, 1, 1, 1, 2, 7, -3, 0 };
    sample_penalize(lg, 6, seq, 9, 2.0f);
    const float want[6] = { 1.0f, -4.0f, 0.0f, 3.0f, -1.0f, 1.0f };
    test_allclose("sample_penalize R=2 on ids 0 (x3), 1 (x3), 2 and two out of range", lg, want, 6, 0.0, 0.0);
    sample_penalize(lg, 6, seq, 9, 1.0f);
    test_allclose("sample_penalize R=1 changes nothing", lg, want, 6, 0.0, 0.0);
}

// Greedy generation with the repetition penalty equals transformers' generate (do_sample=False,
// repetition_penalty R: the penalty over the prompt and the tokens so far, then the argmax), with
// and without the cache.
static void test_penalty_reference(void) {
    StFile f;
    st_open(&f, FILTER_REF);
    const StTensor* tp = st_find(&f, "prompt");
    int np = (int)tp->shape[0], prompt[MAXN], want[MAXN];
    st_read_i32(&f, tp, prompt);
    char cases[128];
    snprintf(cases, sizeof(cases), "%s", st_meta(&f, "greedy"));
    Model x;
    model_open(&x, "test/ref/sampling_tiny", NULL, MAXN, 0);
    Rec r = {0};
    r.logits = (float*)mallocCheck((size_t)MAXN * x.gpt.cfg.vocab_size * sizeof(float));
    for (char* name = strtok(cases, ","); name; name = strtok(NULL, ",")) {
        char key[96];
        float R;
        snprintf(key, sizeof(key), "greedy.%s.ids", name);
        const StTensor* ti = st_find(&f, key);
        const int n = (int)ti->shape[0];
        st_read_i32(&f, ti, want);
        snprintf(key, sizeof(key), "greedy.%s.penalty", name);
        st_read_f32(&f, st_find(&f, key), &R);
        SampleParams sp = SP(0.0f, 0, 0);
        sp.repetition_penalty = R;
        for (int kv = 1; kv >= 0; kv--) {
            const int got = gen(&x, kv, prompt, np, n, sp, &r);
            const int same = got == n && memcmp(r.ids, want, (size_t)n * sizeof(int)) == 0;
            TEST_CHECK(same, "greedy, repetition penalty %g%s: ids differ from transformers' generate", R, kv ? "" : " (no cache)");
            if (same) printf("ok   greedy with repetition penalty %g%s: %d ids equal transformers' generate\n", R, kv ? "" : " (no cache)", n);
        }
    }
    free(r.logits);
    model_free(&x);
    st_close(&f);
}

int main(void) {
    ops_init(0);
    test_reference("base", "test/ref/sampling_tiny", NULL, 0);
    test_reference("tiny", "test/ref/gpt2_tiny", NULL, 0);
    test_reference("lora.all_linear", "test/ref/gpt2_tiny", "test/ref/lora_tiny/all_linear", 0);
    test_reference("lora.bias_lnf", "test/ref/gpt2_tiny", "test/ref/lora_tiny/bias_lnf", 0);
    test_reference("tiny", "test/ref/gpt2_tiny", NULL, 1); // bf16 GEMMs (generate --dtype bf16)
    test_reference("lora.all_linear", "test/ref/gpt2_tiny", "test/ref/lora_tiny/all_linear", 1);
    test_kv_equals_full();
    test_sample_token();
    test_sample_tiny_temperature();
    test_penalize();
    test_filter_reference();
    test_filter_tie_rule();
    test_filter_draws();
    test_topp_brute();
    test_controls_off();
    test_penalty_reference();
    return test_finish("test_sampling");
}
