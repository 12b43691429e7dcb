#define _GNU_SOURCE
#include "app/generate_batch.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/timer.h"
#include "text/records.h"
#include "text/textgen.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------------------------
// the prompts

#define GB_HINT "each line of --prompts is a JSON object: {\"prompt\": TEXT} or {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}"

static void genbatch_where(const GenPrompts* ps, int line, char* out, size_t cap) {
    if (ps->path) snprintf(out, cap, "--prompts '%s' line %d", ps->path, line);
    else snprintf(out, cap, "--prompt");
}

// One non-blank line: its object, read as a prompt or a conversation (the strings stay in the tree).
static void genbatch_line(GenPrompts* ps, const char* text, size_t len, int line, const ChatTemplate* tpl) {
    char err[256], where[LLMC_PATH_MAX + 64];
    genbatch_where(ps, line, where, sizeof(where));
    JsonValue* js = json_parse(text, len, err, sizeof(err));
    if (!js) fatal(GB_HINT, "%s is not JSON: %s", where, err);
    if (js->type != JSON_OBJECT) fatal(GB_HINT, "%s is a JSON %s, not an object", where, json_type_name(js->type));
    GenPrompt* p = &ps->p[ps->n];
    memset(p, 0, sizeof(*p));
    p->line = line;
    ps->trees[ps->n++] = js;
    if (json_get(js, "messages")) {
        if (!tpl) fatal("add --chat plain|chatml: the template the model was trained with", "%s has \"messages\", which need --chat", where);
        RecMapping map;
        rec_mapping_init(&map);
        map.schema = REC_MESSAGES;
        Record r;
        memset(&r, 0, sizeof(r));
        rec_from_json(&map, js, where, &r);
        p->n_msgs = r.n_msgs;
        p->msgs = (ChatMessage*)mallocCheck((size_t)r.n_msgs * sizeof(ChatMessage));
        memcpy(p->msgs, r.msgs, (size_t)r.n_msgs * sizeof(ChatMessage));
        rec_free(&r);
        return;
    }
    const JsonValue* pv = json_get(js, "prompt");
    if (!pv) fatal(GB_HINT, "%s has neither \"prompt\" nor \"messages\"", where);
    p->prompt = json_as_string(pv);
    if (!p->prompt) fatal(GB_HINT, "%s: \"prompt\" must be a string, not %s", where, json_type_name(pv->type));
}

typedef struct { GenPrompts* ps; const ChatTemplate* tpl; } GenLines;

static void genbatch_each(void* ctx, const char* line, size_t n, int lineno) {
    GenLines* g = (GenLines*)ctx;
    genbatch_line(g->ps, line, n, lineno, g->tpl);
}

void genbatch_read(GenPrompts* ps, const char* path, const char* prompt, const ChatTemplate* tpl) {
    memset(ps, 0, sizeof(*ps));
    ps->path = path;
    if (!path) {
        ps->p = (GenPrompt*)calloc(1, sizeof(GenPrompt));
        ps->trees = (JsonValue**)calloc(1, sizeof(JsonValue*));
        if (!ps->p || !ps->trees) fatal(NULL, "out of memory");
        ps->p[0].prompt = prompt ? prompt : "";
        ps->n = 1;
        return;
    }
    if (!file_exists(path)) fatal("pass a JSONL file of prompts", "--prompts '%s' does not exist", path);
    size_t len;
    char* text = read_file_all(path, &len);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    ps->p = (GenPrompt*)calloc(lines, sizeof(GenPrompt));
    ps->trees = (JsonValue**)calloc(lines, sizeof(JsonValue*));
    if (!ps->p || !ps->trees) fatal(NULL, "out of memory");
    GenLines g = { ps, tpl };
    jsonl_each_line(text, len, genbatch_each, &g);
    free(text);
    if (ps->n == 0) fatal(GB_HINT, "--prompts '%s' is empty: no prompt in it", path);
}

// The tokens of one prompt: the text itself (special tokens recognised, as --prompt; empty:
// <|endoftext|>), or with a template the conversation's generation prompt.
static void genbatch_tokens(GenPrompt* p, Tokenizer* tok, const GenBatchSpec* spec, const char* where) {
    if (!spec->tpl) {
        size_t cnt = 0;
        tok_encode(tok, p->prompt, strlen(p->prompt), 1, &p->ids, &cnt);
        if (cnt == 0) {
            if (tok->eot_id < 0) fatal("give a non-empty prompt", "%s is empty and the vocabulary %s has no <|endoftext|> to start from", where, tok->source);
            free(p->ids);
            p->ids = (int*)mallocCheck(sizeof(int));
            p->ids[0] = tok->eot_id;
            cnt = 1;
        }
        p->n_ids = (int)cnt;
        return;
    }
    ChatMessage one[2];
    int nm = 0;
    if (!p->msgs && spec->system) one[nm++] = (ChatMessage){ CHAT_SYSTEM, spec->system, strlen(spec->system) };
    if (!p->msgs) one[nm++] = (ChatMessage){ CHAT_USER, p->prompt, strlen(p->prompt) };
    TokIds out = {0};
    chat_encode_prompt(spec->tpl, tok, p->msgs ? p->msgs : one, p->msgs ? p->n_msgs : nm, 0, &out);
    p->ids = out.ids;
    p->n_ids = (int)out.n;
}

void genbatch_encode(GenPrompts* ps, Tokenizer* tok, const GenBatchSpec* spec, const GPT2Config* cfg) {
    char where[LLMC_PATH_MAX + 64];
    for (int i = 0; i < ps->n; i++) {
        GenPrompt* p = &ps->p[i];
        genbatch_where(ps, p->line, where, sizeof(where));
        genbatch_tokens(p, tok, spec, where);
        for (int j = 0; j < p->n_ids; j++)
            if (p->ids[j] >= cfg->vocab_size)
                fatal("pass the vocabulary the model was trained with (--vocab)",
                      "%s: token id %d of the prompt (vocabulary %s) is outside the model's vocabulary of %d tokens", where,
                      p->ids[j], tok->source, cfg->vocab_size);
        if (p->n_ids + spec->max_new - 1 > cfg->max_seq_len)
            fatal("shorten the prompt or lower --max-new-tokens",
                  "%s: the prompt is %d tokens; with --max-new-tokens %d it needs %d positions, and the model has %d", where,
                  p->n_ids, spec->max_new, p->n_ids + spec->max_new - 1, cfg->max_seq_len);
    }
}

void genbatch_free(GenPrompts* ps) {
    for (int i = 0; i < ps->n; i++) {
        free(ps->p[i].ids);
        free(ps->p[i].msgs);
        if (ps->trees[i]) json_free(ps->trees[i]);
    }
    free(ps->p);
    free(ps->trees);
    memset(ps, 0, sizeof(*ps));
}

// ----------------------------------------------------------------------------------------------
// the completions

typedef enum { FIN_LENGTH, FIN_EOS, FIN_STOP } GenFinish;
static const char* const FINISH_NAMES[] = { "length", "eos", "stop" };

typedef struct {
    char* buf;            // the completion's text so far (bytes, not NUL-terminated)
    size_t len, cap;
    int tokens;
    double logprob;       // sum of the tokens' log-probabilities
    GenFinish finish;
} GenRow;

typedef struct {
    GenRow* rows;
    const Tokenizer* tok;
    const char* stops[1 + ARG_STRS_MAX]; // --stop's and the chat template's stop text
    int n_stops;
    const GenBatchSpec* spec;
    const char* where;    // the prompt (for the error on non-finite logits)
} GenBatchCtx;

// log softmax(logits)[token] over V entries, in double
static double genbatch_logprob(const float* logits, int V, int token) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - (double)mx);
    return (double)logits[token] - (double)mx - log(sum);
}

static void genbatch_check_finite(const GenBatchCtx* c, const GenRow* row, int r, const float* logits, int V) {
    for (int i = 0; i < V; i++)
        if (!isfinite(logits[i]))
            fatal("check the model's weights (a training run that diverged saves NaN weights; its last good checkpoint is the one to use)",
                  "%s, sample %d: the logits for new token %d are not finite (logit of token %d is %g): '%s'%s%s computes no usable text",
                  c->where, r, row->tokens + 1, i, (double)logits[i], c->spec->model_path, c->spec->adapter ? " with the adapter " : "",
                  c->spec->adapter ? c->spec->adapter : "");
}

static void genbatch_append(GenRow* row, const char* bytes, size_t n) {
    if (row->len + n > row->cap) {
        row->cap = (row->len + n) * 2 + 64;
        row->buf = (char*)realloc(row->buf, row->cap);
        if (!row->buf) fatal(NULL, "out of memory");
    }
    memcpy(row->buf + row->len, bytes, n);
    row->len += n;
}

// The earliest stop text that the last n new bytes completed: the text is cut where it starts.
static int genbatch_cut_stop(const GenBatchCtx* c, GenRow* row, size_t n) {
    size_t cut = row->len;
    for (int s = 0; s < c->n_stops; s++) {
        const size_t sl = strlen(c->stops[s]);
        const size_t from = row->len - n + 1 > sl ? row->len - n + 1 - sl : 0; // only matches that end in the new bytes
        const char* hit = (const char*)memmem(row->buf + from, row->len - from, c->stops[s], sl);
        if (hit && (size_t)(hit - row->buf) < cut) cut = (size_t)(hit - row->buf);
    }
    if (cut == row->len) return 0;
    row->len = cut;
    return 1;
}

static int genbatch_token(void* ctx, int r, int token, const float* logits, int V) {
    GenBatchCtx* c = (GenBatchCtx*)ctx;
    GenRow* row = &c->rows[r];
    genbatch_check_finite(c, row, r, logits, V);
    row->tokens++;
    row->logprob += genbatch_logprob(logits, V, token);
    if (token == c->tok->eot_id) { row->finish = FIN_EOS; return 1; }
    size_t n = 0;
    const char* bytes = token < c->tok->vocab_size ? tok_token_bytes(c->tok, token, &n) : NULL;
    if (!bytes) return 0; // an id the model has but the vocabulary does not (padding of a tiny vocabulary)
    genbatch_append(row, bytes, n);
    if (genbatch_cut_stop(c, row, n)) { row->finish = FIN_STOP; return 1; }
    return 0;
}

// s[0..n) as valid UTF-8: each byte that starts no valid sequence becomes U+FFFD (a token can end
// inside a character, e.g. where the completion was cut at --max-new-tokens). Malloc'd.
static char* genbatch_utf8(const char* s, size_t n, size_t* out_n) {
    char* out = (char*)mallocCheck(n * 3 + 1);
    size_t o = 0, bad;
    while (!json_utf8_valid(s, n, &bad)) {
        memcpy(out + o, s, bad); o += bad;
        memcpy(out + o, "\xef\xbf\xbd", 3); o += 3;
        s += bad + 1; n -= bad + 1;
    }
    memcpy(out + o, s, n);
    *out_n = o + n;
    return out;
}

static void genbatch_write_row(FILE* out, const GenPrompts* ps, int i, int r, const GenRow* row) {
    JsonWriter w;
    jw_init(&w, 0);
    jw_begin_object(&w);
    jw_key(&w, "index"); jw_int(&w, i);
    if (ps->p[i].prompt) { jw_key(&w, "prompt"); jw_string(&w, ps->p[i].prompt); }
    jw_key(&w, "sample"); jw_int(&w, r);
    size_t n;
    char* text = genbatch_utf8(row->buf ? row->buf : "", row->len, &n);
    jw_key(&w, "text"); jw_string_n(&w, text, n);
    free(text);
    jw_key(&w, "tokens"); jw_int(&w, row->tokens);
    jw_key(&w, "finish_reason"); jw_string(&w, FINISH_NAMES[row->finish]);
    jw_key(&w, "mean_logprob"); jw_double(&w, row->tokens ? row->logprob / row->tokens : 0.0);
    jw_end_object(&w);
    fwrite(w.buf, 1, w.len, out);
    fputc('\n', out);
    fflush(out);
    jw_free(&w);
}

// The N completions of prompt i, written as they end; returns the tokens generated.
static int genbatch_prompt(Model* m, KVCache* kv, GenBatchCtx* c, const GenPrompts* ps, int i, FILE* out) {
    const GenBatchSpec* spec = c->spec;
    char where[LLMC_PATH_MAX + 64];
    genbatch_where(ps, ps->p[i].line, where, sizeof(where));
    c->where = where;
    for (int r = 0; r < spec->num_samples; r++) {
        GenRow* row = &c->rows[r];
        row->len = 0; row->tokens = 0; row->logprob = 0.0; row->finish = FIN_LENGTH;
    }
    const int got = sample_generate_batch(&m->gpt, kv, ps->p[i].ids, ps->p[i].n_ids, spec->max_new, &spec->sp,
                                          c->tok->eot_id, genbatch_token, c);
    for (int r = 0; r < spec->num_samples; r++) genbatch_write_row(out, ps, i, r, &c->rows[r]);
    return got;
}

static int genbatch_max_need(const GenPrompts* ps, int max_new) {
    int need = 1;
    for (int i = 0; i < ps->n; i++) if (ps->p[i].n_ids + max_new - 1 > need) need = ps->p[i].n_ids + max_new - 1;
    return need;
}

void genbatch_run(Model* m, Tokenizer* tok, GenPrompts* ps, const GenBatchSpec* spec) {
    const int N = spec->num_samples, need = genbatch_max_need(ps, spec->max_new);
    // the decoding steps are N rows of one token; with adapters their scratch also bounds the
    // prompt's chunk (as generate's one sequence has it)
    model_alloc_acts(m, N, m->lora ? (need < 64 ? need : 64) : 1, 0);
    KVCache kv;
    kv_init(&kv, &m->gpt, N, need);
    GenBatchCtx c = { (GenRow*)calloc((size_t)N, sizeof(GenRow)), tok, { NULL, NULL }, 0, spec, NULL };
    if (!c.rows) fatal(NULL, "out of memory");
    for (int i = 0; i < spec->stops->n; i++) c.stops[c.n_stops++] = spec->stops->v[i];
    if (spec->tpl) c.stops[c.n_stops++] = spec->tpl->stop;
    AtomicFile af;
    FILE* out = spec->out_path ? atomic_open(&af, spec->out_path) : stdout;
    long total = 0;
    const double t_all = timer_now_s();
    for (int i = 0; i < ps->n; i++) {
        const double t0 = timer_now_s();
        const int got = genbatch_prompt(m, &kv, &c, ps, i, out);
        total += got;
        const double dt = timer_now_s() - t0;
        if (!spec->quiet)
            fprintf(stderr, "prompt %d/%d (%d tokens): %d samples, %d tokens in %.3f s (%.2f tokens/s)\n", i + 1, ps->n,
                    ps->p[i].n_ids, N, got, dt, dt > 0 ? got / dt : 0.0);
    }
    if (spec->out_path) atomic_commit(&af);
    const double dt = timer_now_s() - t_all;
    if (!spec->quiet)
        fprintf(stderr, "generated %ld tokens for %d prompts x %d samples in %.3f s (%.2f tokens/s)%s%s\n", total, ps->n, N, dt,
                dt > 0 ? total / dt : 0.0, spec->out_path ? ", written to " : "", spec->out_path ? spec->out_path : "");
    for (int r = 0; r < N; r++) free(c.rows[r].buf);
    free(c.rows);
    kv_free(&kv);
}
