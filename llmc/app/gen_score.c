#include "app/gen_score.h"
#include "model/scorer.h"
#include "text/records.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/timer.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCORE_POSITIONS 2048 // positions of one forward: bounds the logits (2048 x 50304 fp32: 400 MB)

typedef struct {
    TokIds ids;              // every record's tokens, one after another
    unsigned char* mask;     // per token: scored
    size_t mask_cap;
    int* start; int* line;   // per record: its first token, its line in the file
    int n, cap;
    Tokenizer* tok;
} ScoreSet;

// The tokens from n0 on marked scored or not.
static void set_mark(ScoreSet* s, size_t n0, int scored) {
    if (s->ids.n > s->mask_cap) {
        s->mask_cap = s->ids.n * 2;
        s->mask = (unsigned char*)realloc(s->mask, s->mask_cap);
        if (!s->mask) fatal("free some memory", "out of memory for %zu tokens to score", s->ids.n);
    }
    memset(s->mask + n0, scored ? 1 : 0, s->ids.n - n0);
}

static void set_push(ScoreSet* s, const char* text, size_t len, int scored) {
    const size_t n0 = s->ids.n;
    tok_encode_append(s->tok, text, len, 0, &s->ids);
    set_mark(s, n0, scored);
}

static void set_piece(void* ctx, const char* text, size_t len, int trained) { set_push((ScoreSet*)ctx, text, len, trained); }

// A record's tokens as data/prepare makes them: <|endoftext|> (unscored), then its pieces, the
// trained ones scored.
static void set_add(ScoreSet* s, const Record* r, const ChatTemplate* tpl, const char* where) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->start = (int*)realloc(s->start, (size_t)(s->cap + 1) * sizeof(int));
        s->line = (int*)realloc(s->line, (size_t)s->cap * sizeof(int));
        if (!s->start || !s->line) fatal("free some memory", "out of memory for %d records to score", s->cap);
    }
    s->start[s->n] = (int)s->ids.n;
    if (s->tok->eot_id >= 0) { tokids_push(&s->ids, s->tok->eot_id); set_mark(s, s->ids.n - 1, 0); }
    if (r->schema == REC_PREFERENCE)
        fatal("score the chosen and the rejected completions as two prompt/completion records", "%s: a preference pair", where);
    if (r->schema == REC_TEXT) set_push(s, r->text, r->text_len, 1);
    else if (r->schema == REC_PROMPT) { set_push(s, r->prompt, r->prompt_len, 0); set_push(s, r->completion, r->completion_len, 1); }
    else if (!tpl) fatal("add --chat plain|chatml: conversations are rendered with a chat template", "%s: a conversation", where);
    else chat_render(tpl, r->msgs, r->n_msgs, 0, set_piece, s);
    s->start[++s->n] = (int)s->ids.n;
}

typedef struct { ScoreSet* s; const char* path; const ChatTemplate* tpl; RecMapping map; Record rec; } ScoreLines;

static void set_line(void* ctx, const char* line, size_t n, int lineno) {
    ScoreLines* l = (ScoreLines*)ctx;
    char where[LLMC_PATH_MAX + 32], err[256];
    snprintf(where, sizeof(where), "'%s' line %d", l->path, lineno);
    JsonValue* js = json_parse(line, n, err, sizeof(err));
    if (!js) fatal("give one JSON object a line", "--score %s: not JSON: %s", where, err);
    rec_from_json(&l->map, js, where, &l->rec);
    set_add(l->s, &l->rec, l->tpl, where);
    l->s->line[l->s->n - 1] = lineno;
    json_free(js);
}

// Every line of path as a record (blank lines skipped).
static void set_read(ScoreSet* s, const char* path, const ChatTemplate* tpl) {
    size_t len;
    char* text = read_file_all(path, &len);
    ScoreLines l = { s, path, tpl, {0}, {0} };
    rec_mapping_init(&l.map);
    jsonl_each_line(text, len, set_line, &l);
    rec_free(&l.rec);
    free(text);
    if (!s->n) fatal("give one JSON record a line: {\"text\": ...}, {\"prompt\": ..., \"completion\": ...} or {\"messages\": [...]}",
                     "--score '%s' holds no records", path);
}

// Record i as a sequence: from its first scored token on (fatal, naming its line, when it has none
// or does not fit the model's positions).
static ScoreSeq set_seq(const ScoreSet* s, int i, int max_seq_len, const char* path) {
    const int a = s->start[i], n = s->start[i + 1] - a;
    int first = 1;
    while (first < n && !s->mask[a + first]) first++;
    if (first >= n)
        fatal("give each record text to score (a completion, or an assistant reply with --chat)",
              "--score '%s' line %d: no token to score (%d tokens, the first <|endoftext|> included, none a completion's)", path, s->line[i], n);
    if (n - 1 > max_seq_len)
        fatal("shorten the record or score it in parts", "--score '%s' line %d: %d tokens (<|endoftext|> first) take %d positions; the model has %d",
              path, s->line[i], n, n - 1, max_seq_len);
    return (ScoreSeq){ s->ids.ids + a, n, first, s->mask + a };
}

static void set_free(ScoreSet* s) { tokids_free(&s->ids); free(s->mask); free(s->start); free(s->line); }

// One output line: {"line", "tokens", "logprob", "mean_logprob", "perplexity"}.
static void score_line(JsonWriter* out, int line, int tokens, double lp) {
    JsonWriter w;
    jw_init(&w, 0);
    jw_begin_object(&w);
    jw_key(&w, "line"); jw_int(&w, line);
    jw_key(&w, "tokens"); jw_int(&w, tokens);
    jw_key(&w, "logprob"); jw_double(&w, lp);
    jw_key(&w, "mean_logprob"); jw_double(&w, lp / tokens);
    jw_key(&w, "perplexity"); jw_double(&w, exp(-lp / tokens));
    jw_end_object(&w);
    jw_raw(out, w.buf, w.len);
    jw_raw(out, "\n", 1);
    jw_free(&w);
}

char* gen_score_file(Model* m, Tokenizer* tok, const char* path, const ChatTemplate* tpl, int report, size_t* len) {
    ScoreSet set;
    memset(&set, 0, sizeof(set));
    set.tok = tok;
    set_read(&set, path, tpl);
    const int S = set.n, maxT = m->gpt.cfg.max_seq_len;
    ScoreSeq* seqs = (ScoreSeq*)mallocCheck((size_t)S * sizeof(ScoreSeq));
    int T = 1;
    for (int i = 0; i < S; i++) { seqs[i] = set_seq(&set, i, maxT, path); if (seqs[i].n - 1 > T) T = seqs[i].n - 1; }
    const int B = SCORE_POSITIONS / T < 1 ? 1 : (SCORE_POSITIONS / T < S ? SCORE_POSITIONS / T : S);
    model_alloc_acts(m, B, T, 0);
    Scorer sc;
    scorer_init(&sc, B, T);
    double* lp = (double*)mallocCheck((size_t)S * sizeof(double));
    const double t0 = timer_now_s();
    for (int i = 0; i < S;) i += scorer_run(&sc, &m->gpt, seqs + i, S - i, lp + i);
    const double dt = timer_now_s() - t0;
    JsonWriter out;
    jw_init(&out, 0);
    double total = 0.0;
    long long tokens = 0;
    for (int i = 0; i < S; i++) {
        int k = 0;
        for (int t = seqs[i].first; t < seqs[i].n; t++) k += seqs[i].mask[t];
        if (!isfinite(lp[i]))
            fatal("check the model's weights (a training run that diverged saves NaN weights)", "--score '%s' line %d: the log-probability is %g",
                  path, set.line[i], lp[i]);
        score_line(&out, set.line[i], k, lp[i]);
        total += lp[i]; tokens += k;
    }
    if (report)
        fprintf(stderr, "scored %d records, %lld tokens in %.3f s (%d x %d positions a forward): mean log-prob %.6f, perplexity %.4f\n",
                S, tokens, dt, B, T, total / (double)tokens, exp(-total / (double)tokens));
    scorer_free(&sc);
    free(lp); free(seqs);
    set_free(&set);
    *len = out.len;
    return out.buf;
}
