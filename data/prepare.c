// data/prepare: text, JSONL or JSON records -> llm.c token shards (+ loss masks), with a
// train/validation split. See data/README.md for the flags, the record schemas and the exact
// layout of the .bin and .mask files.
#define _GNU_SOURCE
#include "text/tokenizer.h"
#include "base/json.h"
#include "text/chat.h"
#include "text/records.h"
#include "text/vocab.h"
#include "text/shard.h"
#include "base/crc32c.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "base/check.h"
#include "base/rand.h"
#include "run/runlock.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#define MAX_INPUTS 4096

enum { FMT_AUTO, FMT_TEXT, FMT_JSONL, FMT_JSON };
enum { SEP_FILE, SEP_BLANK, SEP_NONE };
enum { PACK_IN_ORDER, PACK_BEST_FIT, PACK_ONE }; // (PACK_ONE: one unit a window, preference pairs' --record-windows)

static void usage(FILE* f) {
    fprintf(f,
"usage: data/prepare --input FILE [FILE...] --out-dir DIR [options]\n"
"\n"
"Tokenizes text, JSONL or JSON records with the GPT-2 tokenizer into llm.c token shards\n"
"(DIR/NAME_val_000000.bin, DIR/NAME_train_000000.bin, ...). Records also get a loss mask per\n"
"shard (same name, .mask) that marks which tokens are trained on. Preference records\n"
"({\"prompt\", \"chosen\", \"rejected\"}: DPO, IPO, ORPO, SimPO) become pairs of records in one\n"
"window and need --pack T or --record-windows T. See data/README.md.\n"
"\n"
"  --input FILE...        input files; several may follow one --input, and --input may repeat\n"
"  --out-dir DIR          output directory (created if missing)\n"
"  --name NAME            shard file prefix (default: first input's file name without extension)\n"
"  --format text|jsonl|json\n"
"                         input format (default: jsonl for *.jsonl, json for *.json, else text).\n"
"                         json: a JSON array of records (as HF datasets and Alpaca ship them),\n"
"                         one record, or one record per line\n"
"  --schema " REC_SCHEMA_NAMES "\n"
"                         how records are read (default auto: detected per record)\n"
"  --field NAME=KEY[,...] the data calls field NAME KEY; NAME is one of\n"
"                         " REC_FIELD_NAMES "\n"
"  --role NAME=ROLE[,...] conversation role NAME is system, user or assistant (defaults:\n"
"                         system, user, human=user, assistant, gpt=assistant)\n"
"  --chat-template " CHAT_TEMPLATE_NAMES "\n"
"                         how conversations are written (default plain; generate --chat takes\n"
"                         the same names)\n"
"  --record-windows T     one record per window of T tokens (train with --seq-len T): longer\n"
"                         records are cut, shorter ones padded with untrained <|endoftext|>;\n"
"                         preference pairs: one pair per window\n"
"  --pack T               whole records packed into windows of T tokens (train with --seq-len T),\n"
"                         each record attending only to itself; the rest of a window is\n"
"                         untrained padding. The summary gives the packing efficiency.\n"
"                         Preference pairs are packed whole (both records in one window)\n"
"  --pack-order in-order|best-fit\n"
"                         in-order (default): records in input order, a new window when the\n"
"                         next does not fit; best-fit: longest first, each into the window it\n"
"                         fills most tightly (fewer windows, records reordered)\n"
"  --overlong truncate|drop\n"
"                         with --record-windows or --pack: what happens to records (preference\n"
"                         pairs: pairs) longer than T (default truncate)\n"
"  --doc-sep file|blank|none\n"
"                         text input: what a document is. file: each input file (default);\n"
"                         blank: text is cut after every blank line (\"\\n\\n\"), as llm.c's\n"
"                         tinyshakespeare script does; none: no <|endoftext|> separators at all\n"
"  --val-frac F           fraction of tokens for validation (default 0.1)\n"
"  --val-tokens N         number of validation tokens instead (0: no validation split)\n"
"  --shuffle              validation is records (documents) drawn at random, as Hugging Face's\n"
"                         train_test_split(shuffle=True) draws them (default: the first ones);\n"
"                         each side keeps the input order\n"
"  --seed S               the seed of --shuffle: the same seed, inputs and flags give the same\n"
"                         split (default 1337)\n"
"  --shard-tokens N       most tokens per shard file (default 100000000)\n"
"  --vocab PATH           tokenizer directory or file (default data/gpt2, here or near this program)\n"
"  --allow-special        recognise <|endoftext|> written in the input as the special token\n"
"                         (default: it is ordinary text)\n"
"  --train-on-inputs      train on every token of a record, prompts and user turns too (no loss\n"
"                         mask; with --record-windows / --pack the padding stays untrained)\n"
"  --quiet                print only errors\n"
"  --help                 this text\n"
"\n"
"usage: data/prepare --show FILE.bin [--tokens N] [--from K] [--ids] [--vocab PATH]\n"
"\n"
"Prints a shard as the trainer reads it (after the same checks): its text, the trained targets\n"
"between [[ and ]] (in green on a terminal).\n"
"  --tokens N             how many tokens (default 2000; 0: all)\n"
"  --from K               the first token shown (default 0)\n"
"  --ids                  one token a line: position, id, label (the id when trained, -100 when\n"
"                         not, as Hugging Face labels), text\n");
}

typedef struct {
    const char* inputs[MAX_INPUTS];
    int n_inputs;
    const char* out_dir;
    char name[256];
    int format;
    int doc_sep;
    double val_frac;
    long long val_tokens; // -1: use val_frac
    long long shard_tokens;
    const char* vocab;
    int allow_special;
    int train_on_inputs;  // every token of a record trained (no mask for a stream)
    int quiet;
    RecMapping map;
    const ChatTemplate* chat;
    int window;           // --record-windows T (0: one stream)
    int pack;             // --pack T (0: no packing)
    int pack_order;       // PACK_*
    int drop_overlong;
    int json_flags_given; // --schema / --field / --role / --chat-template (refused for text)
    int shuffle;          // --shuffle: validation's records drawn at random
    long long seed;       // --seed (-1: not given)
} Args;

// ----------------------------------------------------------------------------------------------
// the token stream: ids, per-token mask, and where documents start

typedef struct {
    uint16_t* tok; uint8_t* mask; size_t n, cap;
    size_t* doc_start; size_t n_doc, cap_doc;
    uint8_t* doc_stop;        // --pack: the mask of the token after each record (its stop)
    int has_mask;
    int eot;
    int window;               // record windows of this many tokens (0: a plain stream)
    int pack;                 // records of at most this many tokens, packed later (0: none)
    int packed;               // the stream holds packed windows (mask bit 1: record starts)
    int drop_overlong;
    int open;                 // a document is open (st_end_doc not yet called)
    int kind;                 // the records read so far: 0 none, 1 others, 2 preference pairs (never mixed)
    int pairs;                // documents 2k and 2k + 1 are a pair's chosen and rejected records,
                              // packed together as one unit (s->pack is the window)
    int pack_one;             // pairs of --record-windows: one pair a window
    long long no_target, truncated, dropped_long, dropped_empty, identical;
    size_t val_docs;          // --shuffle: validation is the first val_docs documents (0: split by size)
} Stream;

static void st_reserve(Stream* s, size_t extra) {
    if (s->n + extra <= s->cap) return;
    size_t cap = s->cap ? s->cap : (1 << 20);
    while (cap < s->n + extra) cap *= 2;
    uint16_t* t = (uint16_t*)realloc(s->tok, cap * sizeof(uint16_t));
    uint8_t* m = (uint8_t*)realloc(s->mask, cap);
    if (!t || !m) fatal("the machine is out of memory; prepare fewer files per run", "cannot hold %zu tokens", cap);
    s->tok = t; s->mask = m; s->cap = cap;
}

static void st_push(Stream* s, int id, uint8_t m) {
    if (id < 0 || id > 65535)
        fatal("llm.c shards store tokens as uint16; use a vocabulary of at most 65536 tokens",
              "token id %d does not fit a uint16 shard", id);
    st_reserve(s, 1);
    s->tok[s->n] = (uint16_t)id;
    s->mask[s->n] = m;
    s->n++;
}

static long long st_trained(const Stream* s, size_t from, size_t to) {
    long long k = 0;
    for (size_t i = from; i < to; i++) k += s->mask[i] & 1;
    return k;
}

// Record windows: the open document becomes exactly one window of s->window tokens. A longer one
// is cut (or dropped); a shorter one gets its closing <|endoftext|> (trained after a trained
// completion, like in a stream) and then untrained <|endoftext|> padding. A window that trains
// nothing is dropped: it would cost a full window of compute for no loss.
static void st_close_window(Stream* s, size_t start) {
    size_t T = (size_t)s->window, len = s->n - start;
    if (len > T) {
        if (s->drop_overlong) { s->n = start; s->n_doc--; s->dropped_long++; return; }
        s->n = start + T;
        s->truncated++;
    } else if (len < T) {
        st_push(s, s->eot, s->mask[s->n - 1]);
        while (s->n < start + T) st_push(s, s->eot, 0);
    }
    if (st_trained(s, start + 1, s->n) == 0) { s->n = start; s->n_doc--; s->dropped_empty++; }
}

// A record to pack later: a longer one than the pack length is cut (or dropped), one that trains
// nothing is dropped. Its stop is the mask of the token that will follow it in its window (the
// next record's <|endoftext|>, the padding's first): trained after a trained last token, as in a
// stream, but never after a cut.
static void st_close_record(Stream* s, size_t start) {
    size_t T = (size_t)s->pack;
    int cut = 0;
    if (s->n - start > T) {
        if (s->drop_overlong) { s->n = start; s->n_doc--; s->dropped_long++; return; }
        s->n = start + T;
        s->truncated++;
        cut = 1;
    }
    if (st_trained(s, start + 1, s->n) == 0) { s->n = start; s->n_doc--; s->dropped_empty++; return; }
    s->doc_stop[s->n_doc - 1] = cut ? 0 : s->mask[s->n - 1];
}

// The pair of the last two documents, to pack later as one unit. Longer together than the window
// T, it is cut (truncate: each record keeps its beginning; the shorter stays whole when it fits in
// half the window and the longer gets the rest, else each gets half) or dropped; a record left
// without a trained target drops the pair. Each record's stop: as st_close_record's.
static void st_close_pair(Stream* s) {
    const size_t T = (size_t)s->pack, c0 = s->doc_start[s->n_doc - 2], r0 = s->doc_start[s->n_doc - 1];
    const size_t lc = r0 - c0, lr = s->n - r0;
    size_t kc = lc, kr = lr;
    if (lc + lr > T) {
        if (s->drop_overlong) { s->n = c0; s->n_doc -= 2; s->dropped_long++; return; }
        if (lc <= T / 2) kr = T - lc;
        else if (lr <= T / 2) kc = T - lr;
        else { kc = T - T / 2; kr = T / 2; }
        memmove(s->tok + c0 + kc, s->tok + r0, kr * sizeof(uint16_t));
        memmove(s->mask + c0 + kc, s->mask + r0, kr);
        s->doc_start[s->n_doc - 1] = c0 + kc;
        s->n = c0 + kc + kr;
        s->truncated++;
    }
    if (st_trained(s, c0 + 1, c0 + kc) == 0 || st_trained(s, c0 + kc + 1, s->n) == 0) {
        s->n = c0; s->n_doc -= 2; s->dropped_empty++; return;
    }
    s->doc_stop[s->n_doc - 2] = kc < lc ? 0 : s->mask[c0 + kc - 1];
    s->doc_stop[s->n_doc - 1] = kr < lr ? 0 : s->mask[s->n - 1];
}

static void st_end_doc(Stream* s) {
    if (!s->open) return;
    s->open = 0;
    if (s->pairs) return; // (a pair is closed whole: st_close_pair)
    size_t start = s->doc_start[s->n_doc - 1];
    if (s->window) { st_close_window(s, start); return; }
    if (s->pack) { st_close_record(s, start); return; }
    if (s->has_mask && st_trained(s, start + 1, s->n) == 0) s->no_target++;
}

// Every document starts with <|endoftext|> (llm.c's convention). In a stream its mask copies the
// token before it: after a trained completion the EOT is trained too, so the model learns to
// stop; after a prompt (or at the very start) it is not. A window's first token is never trained:
// its "predecessor" is the last token of another record's window.
static void st_begin_doc(Stream* s) {
    st_end_doc(s);
    if (s->n_doc == s->cap_doc) {
        s->cap_doc = s->cap_doc ? 2 * s->cap_doc : 1024;
        s->doc_start = (size_t*)realloc(s->doc_start, s->cap_doc * sizeof(size_t));
        s->doc_stop = (uint8_t*)realloc(s->doc_stop, s->cap_doc);
        if (!s->doc_start || !s->doc_stop) fatal(NULL, "out of memory");
    }
    s->doc_start[s->n_doc++] = s->n;
    s->open = 1;
    st_push(s, s->eot, s->n && !s->window && !s->pack ? s->mask[s->n - 1] : 0); // (--pack: set when packed)
}

// After the last document: the stream's closing <|endoftext|> (for a trained completion: the stop
// token); for windows, the token the last window's last position predicts (untrained); records to
// pack get theirs when they are packed.
static void st_finish(Stream* s, int separators) {
    st_end_doc(s);
    if (s->pack) return;
    if (s->window) st_push(s, s->eot, 0);
    else if (separators) st_push(s, s->eot, s->n ? s->mask[s->n - 1] : 0);
}

static TokIds scratch;
static double tok_seconds = 0;
static size_t tok_bytes = 0;

static void st_encode(Stream* s, Tokenizer* tk, const char* text, size_t len, int allow_special, uint8_t m) {
    double t0 = timer_now_s();
    scratch.n = 0;
    tok_encode_append(tk, text, len, allow_special, &scratch);
    tok_seconds += timer_now_s() - t0;
    tok_bytes += len;
    st_reserve(s, scratch.n);
    for (size_t i = 0; i < scratch.n; i++) st_push(s, scratch.ids[i], m);
}

// ----------------------------------------------------------------------------------------------
// records -> tokens

typedef struct { Stream* s; Tokenizer* tk; const Args* a; int untrained; } EmitCtx;

// A chat piece. <|endoftext|> written in a message counts as the special token only with
// --allow-special; the templates' markers are ordinary text to GPT-2 either way.
static void emit_piece(void* ctx, const char* text, size_t len, int trained) {
    EmitCtx* e = (EmitCtx*)ctx;
    st_encode(e->s, e->tk, text, len, e->a->allow_special, (uint8_t)(!e->untrained && (trained || e->a->train_on_inputs)));
}

static Record g_record; // reused for every record

// The first record decides what the data set is: preference pairs or other records, never both.
// Pairs are packed whole (--pack T), or one a window (--record-windows T): never a stream, whose
// batches would cut pairs apart.
static void set_kind(Stream* s, const Args* a, int pairs, const char* where) {
    const int kind = pairs ? 2 : 1;
    if (s->kind && s->kind != kind)
        fatal("prepare preference pairs and other records separately (a data set is one or the other)",
              "%s: a %s among %s", where, pairs ? "preference pair" : "record that is not a preference pair",
              pairs ? "records that are not preference pairs" : "preference pairs");
    if (s->kind) return;
    s->kind = kind;
    if (!pairs) return;
    if (!s->pack && !s->window)
        fatal("pairs are trained whole in one window: add --pack T (pairs packed together) or --record-windows T (one pair a "
              "window), and train with --seq-len T", "%s: preference pairs need --pack or --record-windows", where);
    if (a->train_on_inputs)
        fatal("leave --train-on-inputs out: a preference objective scores the completions only", "%s: --train-on-inputs with preference pairs", where);
    if (s->window) { s->pack = s->window; s->window = 0; s->pack_one = 1; }
    s->pairs = 1;
}

static long long warned_identical = 0;

// A preference pair: prompt + chosen, then prompt + rejected, each a record; the prompt untrained,
// the completion trained (conversations: everything after the generation prompt), the stop after
// it too (its first token after the record). Closed whole (st_close_pair).
static void add_pair(Stream* s, Tokenizer* tk, const Args* a, const Record* r, const char* where) {
    for (int k = 0; k < 2; k++) {
        st_begin_doc(s);
        if (!r->pref_conv) {
            st_encode(s, tk, r->prompt, r->prompt_len, a->allow_special, 0);
            st_encode(s, tk, k ? r->rejected : r->chosen, k ? r->rejected_len : r->chosen_len, a->allow_special, 1);
            continue;
        }
        EmitCtx e = { s, tk, a, 1 };
        chat_render(a->chat, r->msgs, r->n_prompt, 1, emit_piece, &e);
        e.untrained = 0;
        chat_render_completion(a->chat, r->msgs + r->n_prompt + (k ? r->n_chosen : 0), k ? r->n_rejected : r->n_chosen, emit_piece, &e);
    }
    st_end_doc(s);
    st_close_pair(s);
    if (!r->pref_identical) return;
    s->identical++;
    if (!a->quiet && warned_identical++ < 5)
        printf("warning: %s: chosen and rejected are the same (kept: the pair's gradients cancel, it costs compute and teaches nothing)\n", where);
}

static void add_record(Stream* s, Tokenizer* tk, const Args* a, const JsonValue* obj, const char* where) {
    Record r = g_record;
    rec_from_json(&a->map, obj, where, &r);
    g_record = r;
    set_kind(s, a, r.schema == REC_PREFERENCE, where);
    if (r.schema == REC_PREFERENCE) { add_pair(s, tk, a, &r, where); return; }
    st_begin_doc(s);
    if (r.schema == REC_TEXT) st_encode(s, tk, r.text, r.text_len, a->allow_special, 1);
    else if (r.schema == REC_PROMPT) {
        st_encode(s, tk, r.prompt, r.prompt_len, a->allow_special, (uint8_t)a->train_on_inputs);
        st_encode(s, tk, r.completion, r.completion_len, a->allow_special, 1);
    } else {
        EmitCtx e = { s, tk, a, 0 };
        chat_render(a->chat, r.msgs, r.n_msgs, 0, emit_piece, &e);
    }
    st_end_doc(s);
}

// ----------------------------------------------------------------------------------------------
// inputs

static void add_text_file(Stream* s, Tokenizer* tk, const Args* a, const char* path) {
    size_t n;
    char* text = read_file_all(path, &n);
    if (a->doc_sep == SEP_FILE) {
        st_begin_doc(s);
        st_encode(s, tk, text, n, a->allow_special, 1);
    } else if (a->doc_sep == SEP_NONE) {
        st_encode(s, tk, text, n, a->allow_special, 1);
    } else {
        // cut after every "\n\n" (the separator stays with the paragraph before it)
        size_t i = 0;
        while (i < n) {
            const char* hit = (const char*)memmem(text + i, n - i, "\n\n", 2);
            size_t e = hit ? (size_t)(hit - text) + 2 : n;
            st_begin_doc(s);
            st_encode(s, tk, text + i, e - i, a->allow_special, 1);
            i = e;
        }
    }
    st_end_doc(s);
    free(text);
}

#define JSONL_HINT "each line must be one JSON object (a record; see data/README.md)"

// One JSON object per line (blank lines skipped). Returns the number of records.
static long add_json_lines(Stream* s, Tokenizer* tk, const Args* a, const char* path, const char* text, size_t n, size_t i) {
    long line = 0, records = 0;
    char err[256], where[LLMC_PATH_MAX];
    while (i < n) {
        const char* nl = (const char*)memchr(text + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - text) : n;
        line++;
        size_t b = i;
        while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r')) b++;
        if (b == e) { i = e + 1; continue; } // blank line
        JsonValue* v = json_parse(text + i, e - i, err, sizeof(err));
        if (!v && records == 0 && text[b] == '[')
            fatal("a file holding one JSON array of records is read with --format json (the default for *.json)",
                  "'%s' line %ld: malformed JSON: %s", path, line, err);
        if (!v) fatal(JSONL_HINT, "'%s' line %ld: malformed JSON: %s", path, line, err);
        snprintf(where, sizeof(where), "'%s' line %ld", path, line);
        add_record(s, tk, a, v, where);
        json_free(v);
        records++;
        i = e + 1;
    }
    return records;
}

// A JSON file: an array of records, one record, or (as HF datasets' to_json writes) one record
// per line. Returns the number of records.
static long add_json_doc(Stream* s, Tokenizer* tk, const Args* a, const char* path, const char* text, size_t n, size_t i) {
    char err[256], where[LLMC_PATH_MAX];
    JsonValue* v = json_parse(text + i, n - i, err, sizeof(err));
    if (!v) {
        size_t b = i;
        while (b < n && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r' || text[b] == '\n')) b++;
        if (b < n && text[b] == '[') fatal("the file must hold one JSON array of records", "'%s': malformed JSON: %s", path, err);
        return add_json_lines(s, tk, a, path, text, n, i);
    }
    long records = 0;
    if (v->type == JSON_ARRAY) {
        for (int k = 0; k < v->n; k++) {
            snprintf(where, sizeof(where), "'%s' array element %d", path, k);
            add_record(s, tk, a, json_at(v, k), where);
            records++;
        }
    } else if (v->type == JSON_OBJECT) {
        snprintf(where, sizeof(where), "'%s' (one JSON object, read as one record)", path);
        add_record(s, tk, a, v, where);
        records = 1;
    } else {
        fatal("a .json input is an array of records, one record, or one record per line",
              "'%s' holds a JSON %s, not records", path, json_type_name(v->type));
    }
    json_free(v);
    return records;
}

static void add_json_file(Stream* s, Tokenizer* tk, const Args* a, const char* path) {
    size_t n;
    char* text = read_file_all(path, &n);
    size_t i = 0;
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) i = 3; // a UTF-8 byte order mark is not JSON
    long records = a->format == FMT_JSON ? add_json_doc(s, tk, a, path, text, n, i)
                                         : add_json_lines(s, tk, a, path, text, n, i);
    free(text);
    if (records == 0) fatal("the file must hold at least one JSON record", "'%s': no records", path);
}

// ----------------------------------------------------------------------------------------------
// packing (--pack T): the records of a split into windows of T tokens. What is packed are units:
// a record, or a preference pair's two records (documents 2u and 2u + 1), which stay together.

static size_t unit_docs(const Stream* s) { return s->pairs ? 2 : 1; }
static size_t doc_end(const Stream* s, size_t d) { return d + 1 < s->n_doc ? s->doc_start[d + 1] : s->n; }
static size_t rec_len(const Stream* s, size_t u) {
    const size_t k = unit_docs(s);
    return doc_end(s, u * k + k - 1) - s->doc_start[u * k];
}

// In order: each unit goes into the current window, or starts a new one when it does not fit.
// Writes the units' order (here: r0, r0 + 1, ...) and where each window's run of it starts
// (wstart[w] .. wstart[w + 1]); returns the number of windows.
static size_t pack_in_order(const Stream* s, size_t r0, size_t r1, size_t T, size_t* order, size_t* wstart) {
    size_t nwin = 0, fill = T;
    for (size_t r = r0; r < r1; r++) {
        size_t len = rec_len(s, r);
        if (fill + len > T) { wstart[nwin++] = r - r0; fill = 0; }
        order[r - r0] = r;
        fill += len;
    }
    wstart[nwin] = r1 - r0;
    return nwin;
}

static const Stream* g_sort_stream; // (qsort has no context argument)
static int cmp_longer_first(const void* x, const void* y) {
    size_t a = *(const size_t*)x, b = *(const size_t*)y;
    size_t la = rec_len(g_sort_stream, a), lb = rec_len(g_sort_stream, b);
    return la != lb ? (la < lb ? 1 : -1) : (a > b) - (a < b);
}

// Best-fit decreasing (TRL's "bfd"): records longest first (ties in input order), each into the
// open window whose free space it fills most tightly, or a new window. The windows with f tokens
// free are a stack (head[f], next[w]); a bitmap of the non-empty stacks finds the tightest fit in
// T / 64 word reads. Windows come out in the order they were opened, each with its records in the
// order they were placed. Same outputs as pack_in_order.
static size_t pack_best_fit(const Stream* s, size_t r0, size_t r1, size_t T, size_t* order, size_t* wstart) {
    const size_t n = r1 - r0, nwords = T / 64 + 1;
    size_t* byLen = (size_t*)mallocCheck((n + 1) * sizeof(size_t));
    size_t* win = (size_t*)mallocCheck((n + 1) * sizeof(size_t));   // window of byLen[i]
    size_t* next = (size_t*)mallocCheck((n + 1) * sizeof(size_t));  // stack links, by window
    size_t* head = (size_t*)mallocCheck((T + 1) * sizeof(size_t));
    uint64_t* has = (uint64_t*)callocCheck(nwords, sizeof(uint64_t));
    for (size_t i = 0; i < n; i++) byLen[i] = r0 + i;
    g_sort_stream = s;
    qsort(byLen, n, sizeof(size_t), cmp_longer_first);
    size_t nwin = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t len = rec_len(s, byLen[i]);
        size_t f = len, w;
        for (size_t k = f / 64; k < nwords; k++) {   // the smallest non-empty free size >= len
            uint64_t bits = has[k] & (k == f / 64 ? ~0ull << (f % 64) : ~0ull);
            if (bits) { f = k * 64 + (size_t)__builtin_ctzll(bits); break; }
            if (k + 1 == nwords) f = T + 1;
        }
        if (f <= T) { // take a window with f free from its stack
            w = head[f]; head[f] = next[w];
            if (head[f] == SIZE_MAX) has[f / 64] &= ~(1ull << (f % 64));
        } else { w = nwin++; f = T; }
        win[i] = w;
        if ((f -= len) > 0) {
            if (!(has[f / 64] >> (f % 64) & 1)) { head[f] = SIZE_MAX; has[f / 64] |= 1ull << (f % 64); }
            next[w] = head[f]; head[f] = w;
        }
    }
    // windows in opening order, records in placing order: a counting sort by window
    memset(wstart, 0, (nwin + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) wstart[win[i] + 1]++;
    for (size_t w = 0; w < nwin; w++) wstart[w + 1] += wstart[w];
    memcpy(next, wstart, nwin * sizeof(size_t));   // (reused: where window w's next record goes)
    for (size_t i = 0; i < n; i++) order[next[win[i]]++] = byLen[i];
    free(byLen); free(win); free(next); free(head); free(has);
    return nwin;
}

// One per window (the pairs of --record-windows).
static size_t pack_one(size_t r0, size_t r1, size_t* order, size_t* wstart) {
    for (size_t r = r0; r <= r1; r++) { wstart[r - r0] = r - r0; if (r < r1) order[r - r0] = r; }
    return r1 - r0;
}

// The windows into out: each record's tokens and masks, its first token marked as a record start
// (and, of a pair, as its chosen or rejected record) and given the stop of what came before it
// (the previous record's, 0 after padding or at the very start); a window's free tail is
// <|endoftext|> padding, a record of its own (start mark on its first token, which is the last
// record's stop target; the rest untrained). *stop carries the mask of the token after the last
// window.
static void pack_emit(const Stream* s, const size_t* order, const size_t* wstart, size_t nwin, size_t T, Stream* out, uint8_t* stop) {
    const size_t ku = unit_docs(s);
    for (size_t w = 0; w < nwin; w++) {
        size_t fill = 0;
        for (size_t k = wstart[w]; k < wstart[w + 1]; k++)
            for (size_t d = order[k] * ku; d < order[k] * ku + ku; d++) {
                const size_t a = s->doc_start[d], len = doc_end(s, d) - a;
                const uint8_t role = !s->pairs ? 0 : d % 2 ? MASK_REJECTED : MASK_CHOSEN;
                st_push(out, s->tok[a], (uint8_t)(*stop | MASK_START | role));
                for (size_t i = a + 1; i < a + len; i++) st_push(out, s->tok[i], s->mask[i]);
                *stop = s->doc_stop[d];
                fill += len;
            }
        for (size_t i = fill; i < T; i++) {
            st_push(out, s->eot, (uint8_t)(i == fill ? *stop | MASK_START : 0));
            *stop = 0;
        }
    }
}

// Units [r0, r1) of s packed into windows appended to out; returns the number of windows.
static size_t pack_split(const Args* a, const Stream* s, size_t r0, size_t r1, Stream* out, uint8_t* stop) {
    const size_t T = (size_t)s->pack, n = r1 - r0;
    size_t* order = (size_t*)mallocCheck((n + 1) * sizeof(size_t));
    size_t* wstart = (size_t*)mallocCheck((n + 1) * sizeof(size_t));
    size_t nwin = s->pack_one ? pack_one(r0, r1, order, wstart)
                : a->pack_order == PACK_BEST_FIT ? pack_best_fit(s, r0, r1, T, order, wstart)
                                                 : pack_in_order(s, r0, r1, T, order, wstart);
    pack_emit(s, order, wstart, nwin, T, out, stop);
    free(order); free(wstart);
    return nwin;
}

// Every record packed, validation's (those before the token split) first, each split into windows
// of its own; then the closing token the last window's last position predicts. The packed
// stream's split: *cut (training's first window), *val_hi (validation's windows + that token).
static void pack_records(const Args* a, const Stream* s, size_t split, Stream* out, size_t* cut, size_t* val_hi) {
    memset(out, 0, sizeof(*out));
    out->eot = s->eot; out->window = s->pack; out->packed = 1; out->has_mask = 1; out->pairs = s->pairs;
    const size_t ku = unit_docs(s), units = s->n_doc / ku;
    size_t kval = 0; // (units before the split: split_point cut at a unit's start)
    while (kval < units && s->doc_start[kval * ku] < split) kval++;
    uint8_t stop = 0;
    const size_t nv = pack_split(a, s, 0, kval, out, &stop);
    const size_t nt = pack_split(a, s, kval, units, out, &stop);
    st_push(out, s->eot, stop);
    *cut = nv * (size_t)s->pack;
    *val_hi = nv ? *cut + 1 : 0;
    out->n_doc = nv + nt; // (windows, for the summary)
}

// ----------------------------------------------------------------------------------------------
// output

static void write_file(const Args* a, const char* fname, const int32_t* header, const void* data, size_t elem, size_t n) {
    char path[LLMC_PATH_MAX];
    path_join(path, sizeof(path), a->out_dir, fname);
    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    fwriteCheck(header, sizeof(int32_t), 256, fp, af.tmp_path);
    fwriteCheck(data, elem, n, fp, af.tmp_path);
    atomic_commit(&af);
}

// The split's id, written into each of its shards (and masks): a CRC-32C of how the split is cut
// (tokens per shard, shards, window length, packed, masked) and of its tokens and mask bytes. The
// loader groups shards by it, to tell a whole data/prepare output from part of one.
static uint32_t split_id(const Stream* s, size_t lo, size_t hi, size_t step, int nshards) {
    const int32_t cut[5] = { (int32_t)step, nshards, s->window, s->packed, s->has_mask };
    uint32_t crc = crc32c(0, cut, sizeof(cut));
    if (s->pairs) crc = crc32c(crc, &s->pairs, sizeof(s->pairs)); // (the ids of other outputs stay as they were)
    crc = crc32c(crc, s->tok + lo, (hi - lo) * sizeof(uint16_t));
    return s->has_mask ? crc32c(crc, s->mask + lo, hi - lo) : crc;
}

// Shard k of a split holds tokens [a0, a1). In a stream, shards are consecutive slices. With
// record windows a shard holds whole windows plus the next window's first token (the target of
// its last position), so a window never straddles two files. Each mask is committed before its
// shard: a .bin (what the loader looks for) never exists without the mask it says it has, and a
// mask of another run beside it names another shard (header fields 3-9), so a kill anywhere
// leaves nothing the loader takes for a whole, masked data set when it is not.
static void write_split(const Args* a, const Stream* s, const char* split, size_t lo, size_t hi) {
    size_t per = (size_t)a->shard_tokens, step = per;
    if (s->window) step = (per - 1) / (size_t)s->window * (size_t)s->window;
    size_t body = s->window ? hi - lo - 1 : hi - lo;
    int nshards = (int)((body + step - 1) / step);
    const uint32_t set = split_id(s, lo, hi, step, nshards);
    for (int k = 0; k < nshards; k++) {
        size_t a0 = lo + (size_t)k * step, a1 = a0 + step < lo + body ? a0 + step : lo + body;
        if (s->window) a1++;
        int32_t header[256] = {0};
        header[0] = SHARD_MAGIC; header[1] = SHARD_VERSION; header[2] = (int32_t)(a1 - a0);
        header[SHARD_WINDOW] = s->window;
        header[SHARD_PACKED] = s->packed;
        header[SHARD_HAS_MASK] = s->has_mask;
        header[SHARD_PAIRS] = s->pairs;
        header[SHARD_INDEX] = k; header[SHARD_COUNT] = nshards;
        header[SHARD_CRC] = (int32_t)crc32c(0, s->tok + a0, (a1 - a0) * sizeof(uint16_t));
        header[SHARD_SET] = (int32_t)set;
        char fname[512];
        if (s->has_mask) {
            int32_t mheader[256];
            memcpy(mheader, header, sizeof(header));
            mheader[0] = MASK_MAGIC; mheader[1] = s->pairs ? MASK_VERSION_PAIRS : s->packed ? MASK_VERSION_PACKED : MASK_VERSION;
            mheader[MASK_CRC] = (int32_t)crc32c(0, s->mask + a0, a1 - a0);
            snprintf(fname, sizeof(fname), "%s_%s_%06d.mask", a->name, split, k);
            write_file(a, fname, mheader, s->mask + a0, 1, a1 - a0);
        }
        snprintf(fname, sizeof(fname), "%s_%s_%06d.bin", a->name, split, k);
        write_file(a, fname, header, s->tok + a0, sizeof(uint16_t), a1 - a0);
        if (a->quiet) continue;
        // (the count printed is of targets inside this shard: its first token has no predecessor here)
        if (s->has_mask) printf("wrote %s/%s_%s_%06d.bin (+ .mask): %zu tokens, %lld trained\n", a->out_dir, a->name, split, k,
                                a1 - a0, st_trained(s, a0 + 1, a1));
        else printf("wrote %s/%s_%s_%06d.bin: %zu tokens\n", a->out_dir, a->name, split, k, a1 - a0);
    }
}

// 1 when f is this run's kind of output, NAME_{train,val}_NNNNNN.{bin,mask}.
static int is_output_name(const Args* a, const char* f) {
    size_t nl = strlen(a->name);
    if (strncmp(f, a->name, nl) != 0 || f[nl] != '_') return 0;
    const char* r = f + nl + 1;
    const char* digits = NULL;
    if (strncmp(r, "train_", 6) == 0) digits = r + 6;
    else if (strncmp(r, "val_", 4) == 0) digits = r + 4;
    if (!digits) return 0;
    for (int k = 0; k < 6; k++) if (digits[k] < '0' || digits[k] > '9') return 0;
    const char* ext = digits + 6;
    const size_t el = strncmp(ext, ".bin", 4) == 0 ? 4 : strncmp(ext, ".mask", 5) == 0 ? 5 : 0;
    return el && ext[el] == '\0';
}

static int is_output_ctx(const char* f, void* a) { return is_output_name((const Args*)a, f); }

// --out-dir is locked for this run's names (llmc/run/runlock.h) once it exists: refused while a
// trainer runs there or a data/prepare of the same --name writes there; returns 1 when held.
static int lock_out_dir(const Args* a, int argc, char** argv) {
    char key[300];
    snprintf(key, sizeof(key), "%s_{train,val}_NNNNNN.{bin,mask}", a->name);
    const char* names[1] = { key };
    return runlock_writer_acquire(a->out_dir, "--out-dir", names, 1, argc, argv);
}

// Before anything is written: every NAME_{train,val}_NNNNNN.{bin,mask} of the directory (an
// earlier output of this name; .bin files first, so no shard is ever without its mask), and,
// holding the lock of the name (locked), the temporary files of killed runs of it, whatever host
// or pid wrote them. A run stopped at any point then leaves its own files, whole or not, and
// never a mix with an earlier run's that a loader could take for one data set: the loader
// refuses a data/prepare output with a shard missing (llmc/run/dataloader.h).
static void remove_previous(const Args* a, int locked) {
    int removed = 0;
    for (int pass = 0; pass < 2; pass++) {
        DIR* d = opendir(a->out_dir);
        if (!d) return;
        struct dirent* de;
        while ((de = readdir(d))) {
            const char* f = de->d_name;
            if (!is_output_name(a, f)) continue;
            if ((strstr(f, ".bin") != NULL) != (pass == 0)) continue; // shards in the first pass, masks in the second
            char path[LLMC_PATH_MAX];
            path_join(path, sizeof(path), a->out_dir, f);
            if (unlink(path) == 0) removed++;
        }
        closedir(d);
    }
    if (locked) runlock_writer_clean(a->quiet ? NULL : stdout, a->out_dir, is_output_ctx, (void*)a);
    if (!a->quiet && removed) printf("removed the %d file(s) of an earlier '%s' output in %s\n", removed, a->name, a->out_dir);
}

// ----------------------------------------------------------------------------------------------
// flags

static long long parse_ll(const char* flag, const char* v, long long lo, long long hi) {
    char* end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) fatal("run data/prepare --help", "%s: '%s' is not an integer in [%lld, %lld]", flag, v, lo, hi);
    return x;
}

static int ends_with(const char* s, const char* suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static int pick(const char* flag, const char* v, const char* const* names, const char* list) {
    for (int i = 0; names[i]; i++) if (strcmp(v, names[i]) == 0) return i;
    fatal("run data/prepare --help", "%s: unknown value '%s' (use %s)", flag, v, list);
}

// The flags that take a value; returns 0 when f is none of them.
static int parse_value_flag(Args* a, const char* f, char* v, int* have_frac) {
    static const char* const formats[] = { "auto", "text", "jsonl", "json", NULL };
    static const char* const seps[] = { "file", "blank", "none", NULL };
    static const char* const overlong[] = { "truncate", "drop", NULL };
    static const char* const orders[] = { "in-order", "best-fit", NULL };
    char err[512];
    if (strcmp(f, "--out-dir") == 0) a->out_dir = v;
    else if (strcmp(f, "--name") == 0) {
        if (!*v || strlen(v) >= sizeof(a->name) || strchr(v, '/')) fatal("a plain file name prefix, e.g. tinyshakespeare", "--name: '%s' is not usable", v);
        snprintf(a->name, sizeof(a->name), "%s", v);
    } else if (strcmp(f, "--format") == 0) a->format = pick(f, v, formats, "text, jsonl or json");
    else if (strcmp(f, "--doc-sep") == 0) a->doc_sep = pick(f, v, seps, "file, blank or none");
    else if (strcmp(f, "--overlong") == 0) a->drop_overlong = pick(f, v, overlong, "truncate or drop");
    else if (strcmp(f, "--pack-order") == 0) a->pack_order = pick(f, v, orders, "in-order or best-fit");
    else if (strcmp(f, "--schema") == 0) {
        int sc = rec_schema_parse(v);
        if (sc < 0) fatal("run data/prepare --help", "--schema: unknown schema '%s' (use %s)", v, REC_SCHEMA_NAMES);
        a->map.schema = (RecSchema)sc; a->json_flags_given = 1;
    } else if (strcmp(f, "--field") == 0) {
        if (rec_mapping_set_fields(&a->map, v, err, sizeof(err))) fatal("e.g. --field prompt=question,completion=answer", "--field: %s", err);
        a->json_flags_given = 1;
    } else if (strcmp(f, "--role") == 0) {
        if (rec_mapping_set_roles(&a->map, v, err, sizeof(err))) fatal("e.g. --role bot=assistant,customer=user", "--role: %s", err);
        a->json_flags_given = 1;
    } else if (strcmp(f, "--chat-template") == 0) {
        a->chat = chat_template_get(v);
        if (!a->chat) fatal("run data/prepare --help", "--chat-template: unknown template '%s' (use %s)", v, CHAT_TEMPLATE_NAMES);
        a->json_flags_given = 1;
    } else if (strcmp(f, "--val-frac") == 0) {
        char* end;
        a->val_frac = strtod(v, &end);
        if (!*v || *end || !(a->val_frac >= 0.0 && a->val_frac < 1.0)) fatal("a fraction like 0.1", "--val-frac: '%s' is not in [0, 1)", v);
        *have_frac = 1;
    } else if (strcmp(f, "--val-tokens") == 0) a->val_tokens = parse_ll(f, v, 0, INT32_MAX);
    else if (strcmp(f, "--shard-tokens") == 0) a->shard_tokens = parse_ll(f, v, 1, INT32_MAX);
    else if (strcmp(f, "--record-windows") == 0) a->window = (int)parse_ll(f, v, 2, 1 << 20);
    else if (strcmp(f, "--pack") == 0) a->pack = (int)parse_ll(f, v, 2, 1 << 20);
    else if (strcmp(f, "--vocab") == 0) a->vocab = v;
    else if (strcmp(f, "--seed") == 0) a->seed = parse_ll(f, v, 0, INT32_MAX);
    else return 0;
    return 1;
}

static void parse_args(Args* a, int argc, char** argv) {
    memset(a, 0, sizeof(*a));
    a->val_frac = 0.1; a->val_tokens = -1; a->shard_tokens = 100000000; a->seed = -1;
    rec_mapping_init(&a->map);
    a->chat = chat_template_get("plain");
    int have_frac = 0, overlong_given = 0, order_given = 0;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) { usage(stdout); exit(0); }
        if (strcmp(f, "--allow-special") == 0) { a->allow_special = 1; continue; }
        if (strcmp(f, "--train-on-inputs") == 0) { a->train_on_inputs = 1; continue; }
        if (strcmp(f, "--quiet") == 0) { a->quiet = 1; continue; }
        if (strcmp(f, "--shuffle") == 0) { a->shuffle = 1; continue; }
        if (strcmp(f, "--ids") == 0) fatal("data/prepare --show FILE.bin --ids", "--ids goes with --show");
        if (strcmp(f, "--input") == 0) {
            int got = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (a->n_inputs == MAX_INPUTS) fatal("prepare the data in several runs with different --name", "more than %d input files", MAX_INPUTS);
                a->inputs[a->n_inputs++] = argv[++i]; got++;
            }
            if (!got) fatal("run data/prepare --help", "--input needs at least one file");
            continue;
        }
        if (i + 1 >= argc) fatal("run data/prepare --help", "%s needs a value (or is not a flag)", f);
        overlong_given |= strcmp(f, "--overlong") == 0;
        order_given |= strcmp(f, "--pack-order") == 0;
        if (strcmp(f, "--tokens") == 0 || strcmp(f, "--from") == 0)
            fatal("data/prepare --show FILE.bin [--tokens N] [--from K]", "%s goes with --show", f);
        if (!parse_value_flag(a, f, argv[++i], &have_frac)) fatal("run data/prepare --help", "unknown flag '%s'", f);
    }
    if (a->n_inputs == 0) { usage(stderr); fatal("run data/prepare --help", "--input is required"); }
    if (!a->out_dir) fatal("run data/prepare --help", "--out-dir is required");
    if (have_frac && a->val_tokens >= 0) fatal("give one of them", "--val-frac and --val-tokens are mutually exclusive");
    if (overlong_given && !a->window && !a->pack)
        fatal("--overlong is for --record-windows and --pack", "--overlong given without --record-windows or --pack");
    if (a->window && a->pack) fatal("give one of them: one record per window, or records packed together", "--record-windows and --pack are mutually exclusive");
    if (order_given && !a->pack) fatal("--pack-order is for --pack", "--pack-order given without --pack");
    if (a->seed >= 0 && !a->shuffle) fatal("add --shuffle to draw validation's records at random with this seed", "--seed is the seed of --shuffle");
}

static void check_inputs(Args* a) {
    for (int k = 0; k < a->n_inputs; k++)
        if (!file_exists(a->inputs[k])) fatal("check the path given to --input", "input file '%s' not found", a->inputs[k]);
    if (a->format == FMT_AUTO) {
        int nl = 0, nj = 0;
        for (int k = 0; k < a->n_inputs; k++) { nl += ends_with(a->inputs[k], ".jsonl"); nj += ends_with(a->inputs[k], ".json"); }
        if ((nl || nj) && nl + nj != a->n_inputs) fatal("pass --format, or prepare text and JSON files separately", "inputs mix *.jsonl / *.json and other files");
        if (nl && nj) fatal("pass --format json (it reads one record per line too), or prepare them separately", "inputs mix *.jsonl and *.json files");
        a->format = nl ? FMT_JSONL : nj ? FMT_JSON : FMT_TEXT;
    }
    if (a->format != FMT_TEXT && a->doc_sep != SEP_FILE) fatal("--doc-sep is for text input; each JSON record is a document", "--doc-sep given with JSON input");
    if (a->format == FMT_TEXT && a->json_flags_given)
        fatal("--schema, --field, --role and --chat-template are for JSON records (pass --format jsonl or json)", "they were given with text input");
    if (a->window && a->doc_sep == SEP_NONE) fatal("--record-windows needs documents: use --doc-sep file or blank", "--record-windows with --doc-sep none");
    if (a->pack && a->doc_sep == SEP_NONE) fatal("--pack needs documents: use --doc-sep file or blank", "--pack with --doc-sep none");
    if (a->shuffle && a->doc_sep == SEP_NONE) fatal("--shuffle draws documents: use --doc-sep file or blank", "--shuffle with --doc-sep none");
    const int W = a->window ? a->window : a->pack;
    if (W && a->shard_tokens <= W) fatal("raise --shard-tokens", "--shard-tokens %lld cannot hold one window of %d tokens + 1", a->shard_tokens, W);
    if (!a->name[0]) {
        const char* b = strrchr(a->inputs[0], '/');
        b = b ? b + 1 : a->inputs[0];
        snprintf(a->name, sizeof(a->name), "%s", b);
        char* dot = strrchr(a->name, '.');
        if (dot && dot != a->name) *dot = '\0';
    }
}

// ----------------------------------------------------------------------------------------------

#define SHUFFLE_RNG_STREAM 0x53504c4954ull // ("SPLIT": the permutation of --shuffle, llmc/base/rand.h)
#define SPLIT_DEFAULT_SEED 1337               // (the trainers' default --seed)

// The validation size asked for, in tokens of a stream of `total`.
static size_t val_target(const Args* a, size_t total) {
    return a->val_tokens >= 0 ? (size_t)a->val_tokens : (size_t)(a->val_frac * (double)total + 0.5);
}

// --shuffle: which units (records; preference pairs) are validation's. A permutation of them from
// --seed (Fisher-Yates, draw i = rand_uniform(seed, SHUFFLE_RNG_STREAM, i)); its first k units,
// k >= 1 with the total nearest to the requested size and one unit left for training, are
// marked in val. Returns k (0: no split, or fewer than two units).
static size_t shuffle_pick(const Args* a, const Stream* s, uint8_t* val) {
    const size_t ku = unit_docs(s), units = s->n_doc / ku, target = val_target(a, s->n);
    if (units < 2 || target == 0) return 0;
    size_t* perm = (size_t*)mallocCheck(units * sizeof(size_t));
    for (size_t u = 0; u < units; u++) perm[u] = u;
    const uint64_t seed = (uint64_t)(a->seed >= 0 ? a->seed : SPLIT_DEFAULT_SEED);
    for (size_t i = units - 1; i > 0; i--) {
        size_t j = (size_t)(rand_uniform(seed, SHUFFLE_RNG_STREAM, i) * (double)(i + 1));
        if (j > i) j = i;
        const size_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    size_t k = 0, cum = 0;
    while (k < units - 1) {
        const size_t next = cum + rec_len(s, perm[k]);
        if (k > 0 && next >= target && next - target >= target - cum) break; // (the total before it is nearer)
        cum = next; k++;
        if (cum >= target) break;
    }
    memset(val, 0, units);
    for (size_t i = 0; i < k; i++) val[perm[i]] = 1;
    free(perm);
    return k;
}

// --shuffle: the documents rearranged, validation's units first, then training's, each in input
// order, so that the split is the boundary after validation's (s->val_docs). In a stream a
// document's first <|endoftext|> takes the mask of the token now before it (st_begin_doc's rule);
// in windows and packed records it stays untrained. Runs once every document is closed.
static void shuffle_split(const Args* a, Stream* s) {
    const size_t ku = unit_docs(s), units = s->n_doc / ku;
    if (s->n_doc == 0 || s->doc_start[0] != 0) return;
    uint8_t* val = (uint8_t*)mallocCheck(units + 1);
    const size_t k = shuffle_pick(a, s, val);
    if (k == 0) { free(val); return; }
    uint16_t* tok = (uint16_t*)mallocCheck(s->cap * sizeof(uint16_t));
    uint8_t* mask = (uint8_t*)mallocCheck(s->cap);
    size_t* start = (size_t*)mallocCheck(s->cap_doc * sizeof(size_t));
    uint8_t* stop = (uint8_t*)mallocCheck(s->cap_doc);
    size_t n = 0, nd = 0;
    for (int side = 1; side >= 0; side--)
        for (size_t u = 0; u < units; u++) {
            if (val[u] != side) continue;
            for (size_t d = u * ku; d < u * ku + ku; d++) {
                const size_t b = s->doc_start[d], len = doc_end(s, d) - b;
                memcpy(tok + n, s->tok + b, len * sizeof(uint16_t));
                memcpy(mask + n, s->mask + b, len);
                if (!s->window && !s->pack) mask[n] = n ? mask[n - 1] : 0;
                start[nd] = n; stop[nd] = s->pack ? s->doc_stop[d] : 0;
                n += len; nd++;
            }
        }
    free(s->tok); free(s->mask); free(s->doc_start); free(s->doc_stop); free(val);
    s->tok = tok; s->mask = mask; s->doc_start = start; s->doc_stop = stop;
    s->val_docs = k * ku;
}

// Validation is the first documents, cut at the document boundary nearest to the requested size
// (so no document is split), or exactly at it if there is no inner boundary. Returns the size
// asked for; *cut is where training starts, *val_hi where validation ends (one past the EOT
// that closes its last document, which also starts training).
static size_t split_point(const Args* a, const Stream* s, size_t* cut, size_t* val_hi, int* exact) {
    size_t total = s->n;
    size_t target = val_target(a, total);
    *cut = *val_hi = 0; *exact = 0;
    if (target == 0) return 0;
    if (target >= total) fatal("ask for fewer validation tokens", "a validation split of %zu tokens leaves no training tokens (the input has %zu)", target, total);
    size_t best = s->val_docs ? s->doc_start[s->val_docs] : 0, bestd = s->val_docs ? 0 : SIZE_MAX; // (--shuffle: its boundary)
    for (size_t d = 0; d < s->n_doc && !s->val_docs; d++) {
        if (s->pairs && d % 2) continue; // (a pair is never split)
        size_t b = s->doc_start[d];
        if (b == 0) continue;
        size_t dist = b > target ? b - target : target - b;
        if (dist < bestd) { bestd = dist; best = b; }
    }
    if (best) { *cut = best; *val_hi = best + 1; }
    else if (s->window || s->pack)
        fatal("ask for --val-tokens 0, or give more records", "a validation split needs two %s; there is %zu",
              s->window ? "record windows" : s->pairs ? "preference pairs" : "records", s->n_doc / unit_docs(s));
    else { *cut = target; *val_hi = target; *exact = 1; }
    return target;
}

// --pack: how full the windows are. Record tokens and trained targets per window slot, and what
// one record per window (--record-windows) would have made of the same records.
static void print_packing(const Args* a, const Stream* s, const Stream* w) {
    const size_t units = s->n_doc / unit_docs(s);
    const double slots = (double)w->n_doc * s->pack, rw_slots = (double)units * s->pack;
    const double real = (double)s->n, trained = (double)st_trained(w, 1, w->n);
    const char* what = s->pairs ? "preference pairs" : "records";
    if (s->pack_one) {
        printf("pairs: %zu preference pairs, one a window of %d tokens: %.1f%% of the window slots hold record tokens, %.1f%% are trained targets\n",
               units, s->pack, 100.0 * real / slots, 100.0 * trained / slots);
        return;
    }
    printf("pack: %zu %s in %zu windows of %d tokens (%s): %.1f%% of the window slots hold record tokens, %.1f%% are trained targets\n",
           units, what, w->n_doc, s->pack, a->pack_order == PACK_BEST_FIT ? "best-fit" : "in order", 100.0 * real / slots, 100.0 * trained / slots);
    printf("pack: one %s per window (--record-windows %d) would take %zu windows: %.1f%% record tokens, %.1f%% trained targets\n",
           s->pairs ? "pair" : "record", s->pack, units, 100.0 * real / rw_slots, 100.0 * trained / rw_slots);
}

// How validation was chosen (at a document boundary): drawn at random, or the first units.
static void print_split(const Args* a, const Stream* s, size_t cut, int exact) {
    const size_t ku = unit_docs(s), units = s->n_doc / ku;
    const char* what = s->pairs ? "preference pairs" : a->format == FMT_TEXT ? "documents" : "records";
    if (s->val_docs) {
        printf("split: validation is %zu of the %zu %s, drawn at random (--shuffle, --seed %lld); each side in input order\n",
               s->val_docs / ku, units, what, a->seed >= 0 ? a->seed : (long long)SPLIT_DEFAULT_SEED);
        return;
    }
    if (!cut || exact || s->pack) return; // (no split, a cut inside a document; packed: cut counts window tokens)
    size_t k = 0;
    while (k < units && s->doc_start[k * ku] < cut) k++;
    printf("split: validation is the first %zu of the %zu %s (--shuffle draws them at random)\n", k, units, what);
}

// s: the documents read; w: what was written (s, or its packed windows)
static void print_summary(const Args* a, const Stream* s, const Stream* w, size_t target, size_t cut, size_t val_hi, int exact) {
    printf("%s: %zu documents, %zu tokens (val %zu, train %zu)%s\n", a->name, s->n_doc, w->n, val_hi, w->n - cut,
           s->has_mask ? "; loss masks written" : "");
    if (s->window || s->pack)
        printf("%s of %d tokens: %lld %s truncated, %lld dropped as too long, %lld dropped with no trained token\n",
               s->window ? "record windows" : s->pack_one ? "pair windows" : "packed windows", s->window ? s->window : s->pack, s->truncated,
               s->pairs ? "pair(s)" : "record(s)", s->dropped_long, s->dropped_empty);
    print_split(a, s, cut, exact);
    if (s->identical)
        printf("warning: %lld pair(s) have the same chosen and rejected completion (their gradients cancel: they teach nothing)\n", s->identical);
    if (s->pack) print_packing(a, s, w);
    if (target && !exact && val_hi != target && !s->pack) // (--pack: val_hi counts window tokens)
        printf("note: validation ends at a document boundary: %zu tokens for a target of %zu\n", val_hi, target);
    if (exact) printf("note: no document boundary to cut at; validation cut at token %zu\n", target);
    if (s->no_target) printf("warning: %lld record(s) have no trained tokens (empty completion / no assistant turn)\n", s->no_target);
    double mb = (double)tok_bytes / 1e6;
    printf("tokenized %.2f MB in %.3f s (%.1f MB/s)\n", mb, tok_seconds, tok_seconds > 0 ? mb / tok_seconds : 0.0);
}

static void load_vocab(Tokenizer* tk, const Args* a) {
    char vpath[LLMC_PATH_MAX];
    if (a->vocab) snprintf(vpath, sizeof(vpath), "%s", a->vocab);
    else if (vocab_find_bundled(vpath, sizeof(vpath)) != 0)
        fatal("pass --vocab DIR (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json)",
              "the GPT-2 vocabulary (data/gpt2) is neither in the working directory nor near this program");
    tok_load(tk, vpath);
    if (tk->eot_id < 0 && a->doc_sep != SEP_NONE) fatal("use --doc-sep none, or a vocabulary with <|endoftext|>", "'%s' has no <|endoftext|> token", tk->source);
    if (tk->vocab_size > 65536) fatal("llm.c shards store uint16 tokens", "vocabulary '%s' has %d tokens, more than 65536", tk->source, tk->vocab_size);
}

// data/prepare --show FILE: the shard's text with its trained targets marked (or its tokens, one
// a line), after the checks the trainer's loader makes (llmc/text/shard.h).
static int show_main(int argc, char** argv) {
    Args a;
    memset(&a, 0, sizeof(a));
    const char* path = NULL;
    long long count = 2000, from = 0;
    int ids = 0;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (strcmp(f, "--ids") == 0) { ids = 1; continue; }
        if (i + 1 >= argc) fatal("run data/prepare --help", "%s needs a value (or is not a flag)", f);
        const char* v = argv[++i];
        if (strcmp(f, "--show") == 0) path = v;
        else if (strcmp(f, "--tokens") == 0) count = parse_ll(f, v, 0, INT64_MAX / 4);
        else if (strcmp(f, "--from") == 0) from = parse_ll(f, v, 0, INT64_MAX / 4);
        else if (strcmp(f, "--vocab") == 0) a.vocab = v;
        else fatal("with --show, data/prepare takes only --tokens, --from, --ids and --vocab", "'%s' is not a --show flag", f);
    }
    Tokenizer tk;
    load_vocab(&tk, &a);
    const char* nc = getenv("NO_COLOR");
    shard_show(stdout, path, &tk, from, count, ids, isatty(1) && !(nc && *nc));
    tok_free(&tk);
    return 0;
}

// What helps when every record was dropped from its window: records dropped as too long
// (--overlong drop) fit with a longer window or when cut (truncate, the default); records left
// without a trained token (the completion, the assistant's turns, cut off beyond the window, or
// empty) need a longer window, or --train-on-inputs to train on their prompts too.
static const char* no_fit_hint(const Args* a, const Stream* s, char* buf, size_t cap) {
    const char* flag = a->pack ? "--pack" : "--record-windows";
    int n = snprintf(buf, cap, "raise %s", flag);
    if (s->dropped_long) n += snprintf(buf + n, cap - (size_t)n, ", or use --overlong truncate (the default: a record keeps its first tokens)");
    if (s->dropped_empty)
        snprintf(buf + n, cap - (size_t)n, "%s: the trained tokens (completions, assistant turns) lie beyond the first %d tokens or are empty%s",
                 s->dropped_long ? "; for the records with no trained token" : "", a->pack ? a->pack : a->window,
                 s->pairs ? "" : " (or train on the prompts too with --train-on-inputs)");
    return buf;
}

static int has_flag(int argc, char** argv, const char* flag) {
    for (int i = 1; i < argc; i++) if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

int main(int argc, char** argv) {
    if (has_flag(argc, argv, "--show") && !has_flag(argc, argv, "--help")) return show_main(argc, argv);
    Args a;
    parse_args(&a, argc, argv);
    check_inputs(&a);
    lock_out_dir(&a, argc, argv); // (a directory still to be made: once made, below)
    Tokenizer tk;
    load_vocab(&tk, &a);

    Stream s;
    memset(&s, 0, sizeof(s));
    s.eot = tk.eot_id;
    s.window = a.window;
    s.pack = a.pack;
    s.drop_overlong = a.drop_overlong;
    s.has_mask = (a.format != FMT_TEXT && !a.train_on_inputs) || a.window || a.pack; // window padding must not be trained
    for (int k = 0; k < a.n_inputs; k++) {
        if (a.format == FMT_TEXT) add_text_file(&s, &tk, &a, a.inputs[k]);
        else add_json_file(&s, &tk, &a, a.inputs[k]);
    }
    if (a.shuffle) shuffle_split(&a, &s);
    st_finish(&s, a.doc_sep != SEP_NONE);
    if ((s.window || s.pack) && s.n_doc == 0) {
        char hint[512];
        fatal(no_fit_hint(&a, &s, hint, sizeof(hint)), "no record fits a window (%lld too long, %lld with no trained token)",
              s.dropped_long, s.dropped_empty);
    }
    size_t content = s.n - s.n_doc - (a.doc_sep != SEP_NONE);
    if (!s.window && !s.pack && content == 0) fatal("check the --input files", "the input holds no text (only empty documents)");
    if (s.n < 2) fatal("give more text", "the input has only %zu token", s.n);

    size_t cut, val_hi;
    int exact;
    size_t target = split_point(&a, &s, &cut, &val_hi, &exact);
    Stream packed;
    const Stream* w = &s; // what is written: the stream, or the windows packed from its records
    if (s.pack) { pack_records(&a, &s, cut, &packed, &cut, &val_hi); w = &packed; }
    mkdir_p(a.out_dir);
    const int locked = lock_out_dir(&a, argc, argv);
    size_t per = (size_t)a.shard_tokens;
    if (w->window) per = (per - 1) / (size_t)w->window * (size_t)w->window; // whole windows per shard
    size_t max_files = 2 * ((val_hi + per - 1) / per + (w->n - cut + per - 1) / per) + 4;
    if (max_files > 100000) fatal("raise --shard-tokens", "that would write %zu files", max_files);
    remove_previous(&a, locked);
    if (val_hi) write_split(&a, w, "val", 0, val_hi);
    write_split(&a, w, "train", cut, w->n);
    if (!a.quiet) print_summary(&a, &s, w, target, cut, val_hi, exact);
    if (s.pack) { free(packed.tok); free(packed.mask); }
    free(s.tok); free(s.mask); free(s.doc_start); free(s.doc_stop);
    rec_free(&g_record);
    tokids_free(&scratch);
    tok_free(&tk);
    runlock_writer_release();
    return 0;
}
