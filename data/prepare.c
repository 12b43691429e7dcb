// data/prepare: text or JSONL -> llm.c token shards (+ loss masks for JSONL), with a
// train/validation split. See data/README.md for the flags, the record formats and the exact
// layout of the .bin and .mask files.
#define _GNU_SOURCE
#include "tokenizer.h"
#include "json.h"
#include "fileio.h"
#include "check.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <time.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define MASK_MAGIC 20261122
#define MASK_VERSION 1
#define MAX_INPUTS 4096

static void usage(FILE* f) {
    fprintf(f,
"usage: data/prepare --input FILE [FILE...] --out-dir DIR [options]\n"
"\n"
"Tokenizes text or JSONL with the GPT-2 tokenizer into llm.c token shards\n"
"(DIR/NAME_val_000000.bin, DIR/NAME_train_000000.bin, ...). JSONL input also gets a loss mask\n"
"per shard (same name, .mask) that marks which tokens are trained on. See data/README.md.\n"
"\n"
"  --input FILE...        input files; several may follow one --input, and --input may repeat\n"
"  --out-dir DIR          output directory (created if missing)\n"
"  --name NAME            shard file prefix (default: first input's file name without extension)\n"
"  --format text|jsonl    input format (default: jsonl for *.jsonl files, text otherwise)\n"
"  --doc-sep file|blank|none\n"
"                         text input: what a document is. file: each input file (default);\n"
"                         blank: text is cut after every blank line (\"\\n\\n\"), as llm.c's\n"
"                         tinyshakespeare script does; none: no <|endoftext|> separators at all\n"
"  --val-frac F           fraction of tokens for validation (default 0.1)\n"
"  --val-tokens N         number of validation tokens instead (0: no validation split)\n"
"  --shard-tokens N       most tokens per shard file (default 100000000)\n"
"  --vocab PATH           tokenizer directory or file (default data/gpt2)\n"
"  --allow-special        recognise <|endoftext|> written in the input as the special token\n"
"                         (default: it is ordinary text)\n"
"  --quiet                print only errors\n"
"  --help                 this text\n"
"\n"
"JSONL records (one JSON object per line): {\"text\": ...} (all trained), {\"prompt\": ...,\n"
"\"completion\": ...} (completion trained), {\"messages\": [{\"role\": \"system\"|\"user\"|\n"
"\"assistant\", \"content\": ...}, ...]} (assistant turns trained).\n");
}

typedef struct {
    const char* inputs[MAX_INPUTS];
    int n_inputs;
    const char* out_dir;
    char name[256];
    int format;        // 0 auto, 1 text, 2 jsonl
    int doc_sep;       // 0 file, 1 blank, 2 none
    double val_frac;
    long long val_tokens; // -1: use val_frac
    long long shard_tokens;
    const char* vocab;
    int allow_special;
    int quiet;
} Args;

// ----------------------------------------------------------------------------------------------
// the token stream: ids, per-token mask, and where documents start

typedef struct {
    uint16_t* tok; uint8_t* mask; size_t n, cap;
    size_t* doc_start; size_t n_doc, cap_doc;
    int has_mask;
    int eot;
    long long docs_without_target;
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

// Every document starts with <|endoftext|> (llm.c's convention). Its mask copies the token before
// it: after a trained completion the EOT is trained too, so the model learns to stop; after a
// prompt (or at the very start) it is not.
static void st_begin_doc(Stream* s) {
    if (s->n_doc == s->cap_doc) {
        s->cap_doc = s->cap_doc ? 2 * s->cap_doc : 1024;
        s->doc_start = (size_t*)realloc(s->doc_start, s->cap_doc * sizeof(size_t));
        if (!s->doc_start) fatal(NULL, "out of memory");
    }
    s->doc_start[s->n_doc++] = s->n;
    st_push(s, s->eot, s->n ? s->mask[s->n - 1] : 0);
}

static TokIds scratch;
static double tok_seconds = 0;
static size_t tok_bytes = 0;

static double now_s(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void st_encode(Stream* s, Tokenizer* tk, const char* text, size_t len, int allow_special, uint8_t m) {
    double t0 = now_s();
    scratch.n = 0;
    tok_encode_append(tk, text, len, allow_special, &scratch);
    tok_seconds += now_s() - t0;
    tok_bytes += len;
    st_reserve(s, scratch.n);
    for (size_t i = 0; i < scratch.n; i++) st_push(s, scratch.ids[i], m);
}

// ----------------------------------------------------------------------------------------------
// inputs

static void add_text_file(Stream* s, Tokenizer* tk, const Args* a, const char* path) {
    size_t n;
    char* text = read_file_all(path, &n);
    if (a->doc_sep == 0) {
        st_begin_doc(s);
        st_encode(s, tk, text, n, a->allow_special, 1);
    } else if (a->doc_sep == 2) {
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
    free(text);
}

static const char* role_header(const char* role) {
    if (strcmp(role, "system") == 0) return "System:";
    if (strcmp(role, "user") == 0) return "User:";
    if (strcmp(role, "assistant") == 0) return "Assistant:";
    return NULL;
}

#define JSONL_HINT "each line must be one JSON object: {\"text\": ...}, {\"prompt\": ..., \"completion\": ...} " \
                   "or {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} (see data/README.md)"

static const char* need_string(const JsonValue* obj, const char* key, const char* path, long line, const char* where) {
    const JsonValue* v = json_get(obj, key);
    if (!v) fatal(JSONL_HINT, "'%s' line %ld: %s has no \"%s\" field", path, line, where, key);
    const char* s = json_as_string(v);
    if (!s) fatal(JSONL_HINT, "'%s' line %ld: \"%s\" in %s must be a string, not %s", path, line, key, where, json_type_name(v->type));
    return s;
}

static void add_jsonl_file(Stream* s, Tokenizer* tk, const Args* a, const char* path) {
    size_t n;
    char* text = read_file_all(path, &n);
    size_t i = 0;
    long line = 0, records = 0;
    char err[256];
    char* buf = NULL; size_t cap = 0;
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) i = 3; // a UTF-8 byte order mark is not JSON
    while (i < n) {
        char* nl = (char*)memchr(text + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - text) : n;
        line++;
        size_t b = i;
        while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r')) b++;
        if (b == e) { i = e + 1; continue; } // blank line
        JsonValue* v = json_parse(text + i, e - i, err, sizeof(err));
        if (!v) fatal(JSONL_HINT, "'%s' line %ld: malformed JSON: %s", path, line, err);
        if (v->type != JSON_OBJECT) fatal(JSONL_HINT, "'%s' line %ld: expected a JSON object, got %s", path, line, json_type_name(v->type));
        const JsonValue* msgs = json_get(v, "messages");
        size_t before = s->n;
        long long trained = 0;
        if (msgs) {
            if (msgs->type != JSON_ARRAY || msgs->n == 0)
                fatal(JSONL_HINT, "'%s' line %ld: \"messages\" must be a non-empty array", path, line);
            st_begin_doc(s);
            for (int k = 0; k < msgs->n; k++) {
                const JsonValue* m = json_at(msgs, k);
                char where[64]; snprintf(where, sizeof(where), "message %d", k);
                if (m->type != JSON_OBJECT) fatal(JSONL_HINT, "'%s' line %ld: %s is not an object", path, line, where);
                const char* role = need_string(m, "role", path, line, where);
                const JsonValue* cv = json_get(m, "content");
                if (!cv) fatal(JSONL_HINT, "'%s' line %ld: %s has no \"content\" field", path, line, where);
                if (!json_as_string(cv)) fatal(JSONL_HINT, "'%s' line %ld: \"content\" in %s must be a string, not %s",
                                               path, line, where, json_type_name(cv->type));
                const char* hdr = role_header(role);
                if (!hdr) fatal("roles are \"system\", \"user\" and \"assistant\"", "'%s' line %ld: %s has unknown role '%s'",
                                path, line, where, role);
                uint8_t m1 = strcmp(role, "assistant") == 0;
                // "Role:" (never trained), then " content\n" (trained for the assistant)
                st_encode(s, tk, hdr, strlen(hdr), 0, 0);
                size_t cl = cv->string_len;
                if (cl + 3 > cap) { cap = cl + 3; buf = (char*)realloc(buf, cap); if (!buf) fatal(NULL, "out of memory"); }
                buf[0] = ' ';
                memcpy(buf + 1, cv->string, cl);
                buf[cl + 1] = '\n';
                st_encode(s, tk, buf, cl + 2, a->allow_special, m1);
            }
        } else if (json_get(v, "prompt") || json_get(v, "completion")) {
            const char* p = need_string(v, "prompt", path, line, "the record");
            const char* c = need_string(v, "completion", path, line, "the record");
            st_begin_doc(s);
            st_encode(s, tk, p, json_get(v, "prompt")->string_len, a->allow_special, 0);
            st_encode(s, tk, c, json_get(v, "completion")->string_len, a->allow_special, 1);
        } else if (json_get(v, "text")) {
            const char* t = need_string(v, "text", path, line, "the record");
            st_begin_doc(s);
            st_encode(s, tk, t, json_get(v, "text")->string_len, a->allow_special, 1);
        } else {
            fatal(JSONL_HINT, "'%s' line %ld: the object has none of \"text\", \"prompt\"/\"completion\", \"messages\"", path, line);
        }
        for (size_t k = before + 1; k < s->n; k++) trained += s->mask[k];
        if (trained == 0) s->docs_without_target++;
        json_free(v);
        records++;
        i = e + 1;
    }
    free(buf);
    free(text);
    if (records == 0) fatal("the file must hold at least one JSON record", "'%s': no records", path);
}

// ----------------------------------------------------------------------------------------------
// output

static void write_split(const Args* a, const Stream* s, const char* split, size_t lo, size_t hi, char written[][512], int* nw) {
    size_t n = hi - lo;
    size_t per = (size_t)a->shard_tokens;
    int nshards = (int)((n + per - 1) / per);
    for (int k = 0; k < nshards; k++) {
        size_t a0 = lo + (size_t)k * per, a1 = a0 + per < hi ? a0 + per : hi;
        int32_t header[256] = {0};
        header[0] = SHARD_MAGIC; header[1] = SHARD_VERSION; header[2] = (int32_t)(a1 - a0);
        char fname[512], path[4096];
        snprintf(fname, sizeof(fname), "%s_%s_%06d.bin", a->name, split, k);
        path_join(path, sizeof(path), a->out_dir, fname);
        AtomicFile af;
        FILE* fp = atomic_open(&af, path);
        fwriteCheck(header, sizeof(int32_t), 256, fp, af.tmp_path);
        fwriteCheck(s->tok + a0, sizeof(uint16_t), a1 - a0, fp, af.tmp_path);
        atomic_commit(&af);
        snprintf(written[(*nw)++], 512, "%s", fname);
        long long trained = 0;
        if (s->has_mask) {
            header[0] = MASK_MAGIC; header[1] = MASK_VERSION;
            snprintf(fname, sizeof(fname), "%s_%s_%06d.mask", a->name, split, k);
            path_join(path, sizeof(path), a->out_dir, fname);
            fp = atomic_open(&af, path);
            fwriteCheck(header, sizeof(int32_t), 256, fp, af.tmp_path);
            fwriteCheck(s->mask + a0, 1, a1 - a0, fp, af.tmp_path);
            // (the count printed is of targets inside this shard: its first token has no
            // predecessor here)
            for (size_t i = a0 + 1; i < a1; i++) trained += s->mask[i];
            atomic_commit(&af);
            snprintf(written[(*nw)++], 512, "%s", fname);
        }
        if (!a->quiet) {
            if (s->has_mask) printf("wrote %s/%s_%s_%06d.bin (+ .mask): %zu tokens, %lld trained\n", a->out_dir, a->name, split, k, a1 - a0, trained);
            else printf("wrote %s/%s_%s_%06d.bin: %zu tokens\n", a->out_dir, a->name, split, k, a1 - a0);
        }
    }
}

// Remove NAME_{train,val}_NNNNNN.{bin,mask} left from an earlier run that this run did not
// write: a loader globbing the directory would otherwise mix old shards (or old masks) in.
static void remove_stale(const Args* a, char written[][512], int nw) {
    DIR* d = opendir(a->out_dir);
    if (!d) return;
    struct dirent* de;
    size_t nl = strlen(a->name);
    while ((de = readdir(d))) {
        const char* f = de->d_name;
        if (strncmp(f, a->name, nl) != 0 || f[nl] != '_') continue;
        const char* r = f + nl + 1;
        const char* digits = NULL;
        if (strncmp(r, "train_", 6) == 0) digits = r + 6;
        else if (strncmp(r, "val_", 4) == 0) digits = r + 4;
        if (!digits) continue;
        int ok = 1;
        for (int k = 0; k < 6; k++) ok &= digits[k] >= '0' && digits[k] <= '9';
        if (!ok || !(strcmp(digits + 6, ".bin") == 0 || strcmp(digits + 6, ".mask") == 0)) continue;
        int mine = 0;
        for (int k = 0; k < nw; k++) mine |= strcmp(written[k], f) == 0;
        if (mine) continue;
        char path[4096];
        path_join(path, sizeof(path), a->out_dir, f);
        if (unlink(path) == 0 && !a->quiet) printf("removed stale %s (not part of this run)\n", path);
    }
    closedir(d);
}

// ----------------------------------------------------------------------------------------------

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

int main(int argc, char** argv) {
    Args a;
    memset(&a, 0, sizeof(a));
    a.val_frac = 0.1; a.val_tokens = -1; a.shard_tokens = 100000000; a.vocab = "data/gpt2";
    int have_frac = 0;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) { usage(stdout); return 0; }
        if (strcmp(f, "--allow-special") == 0) { a.allow_special = 1; continue; }
        if (strcmp(f, "--quiet") == 0) { a.quiet = 1; continue; }
        if (strcmp(f, "--input") == 0) {
            int got = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (a.n_inputs == MAX_INPUTS) fatal("prepare the data in several runs with different --name", "more than %d input files", MAX_INPUTS);
                a.inputs[a.n_inputs++] = argv[++i]; got++;
            }
            if (!got) fatal("run data/prepare --help", "--input needs at least one file");
            continue;
        }
        if (i + 1 >= argc) fatal("run data/prepare --help", "%s needs a value (or is not a flag)", f);
        const char* v = argv[++i];
        if (strcmp(f, "--out-dir") == 0) a.out_dir = v;
        else if (strcmp(f, "--name") == 0) {
            if (!*v || strlen(v) >= sizeof(a.name) || strchr(v, '/')) fatal("a plain file name prefix, e.g. tinyshakespeare", "--name: '%s' is not usable", v);
            snprintf(a.name, sizeof(a.name), "%s", v);
        } else if (strcmp(f, "--format") == 0) {
            if (strcmp(v, "text") == 0) a.format = 1;
            else if (strcmp(v, "jsonl") == 0) a.format = 2;
            else fatal("use text or jsonl", "--format: unknown format '%s'", v);
        } else if (strcmp(f, "--doc-sep") == 0) {
            if (strcmp(v, "file") == 0) a.doc_sep = 0;
            else if (strcmp(v, "blank") == 0) a.doc_sep = 1;
            else if (strcmp(v, "none") == 0) a.doc_sep = 2;
            else fatal("use file, blank or none", "--doc-sep: unknown value '%s'", v);
        } else if (strcmp(f, "--val-frac") == 0) {
            char* end;
            a.val_frac = strtod(v, &end);
            if (!*v || *end || !(a.val_frac >= 0.0 && a.val_frac < 1.0)) fatal("a fraction like 0.1", "--val-frac: '%s' is not in [0, 1)", v);
            have_frac = 1;
        } else if (strcmp(f, "--val-tokens") == 0) a.val_tokens = parse_ll(f, v, 0, INT32_MAX);
        else if (strcmp(f, "--shard-tokens") == 0) a.shard_tokens = parse_ll(f, v, 1, INT32_MAX);
        else if (strcmp(f, "--vocab") == 0) a.vocab = v;
        else fatal("run data/prepare --help", "unknown flag '%s'", f);
    }
    if (a.n_inputs == 0) { usage(stderr); fatal("run data/prepare --help", "--input is required"); }
    if (!a.out_dir) fatal("run data/prepare --help", "--out-dir is required");
    if (have_frac && a.val_tokens >= 0) fatal("give one of them", "--val-frac and --val-tokens are mutually exclusive");
    for (int k = 0; k < a.n_inputs; k++)
        if (!file_exists(a.inputs[k])) fatal("check the path given to --input", "input file '%s' not found", a.inputs[k]);
    if (!a.format) {
        int nj = 0;
        for (int k = 0; k < a.n_inputs; k++) nj += ends_with(a.inputs[k], ".jsonl");
        if (nj && nj != a.n_inputs) fatal("pass --format, or prepare text and JSONL files separately", "inputs mix *.jsonl and other files");
        a.format = nj ? 2 : 1;
    }
    if (a.format == 2 && a.doc_sep != 0) fatal("--doc-sep is for text input; in JSONL each line is a document", "--doc-sep given with JSONL input");
    if (!a.name[0]) {
        const char* b = strrchr(a.inputs[0], '/');
        b = b ? b + 1 : a.inputs[0];
        snprintf(a.name, sizeof(a.name), "%s", b);
        char* dot = strrchr(a.name, '.');
        if (dot && dot != a.name) *dot = '\0';
    }

    Tokenizer tk;
    tok_load(&tk, a.vocab);
    if (tk.eot_id < 0 && a.doc_sep != 2) fatal("use --doc-sep none, or a vocabulary with <|endoftext|>", "'%s' has no <|endoftext|> token", tk.source);
    if (tk.vocab_size > 65536) fatal("llm.c shards store uint16 tokens", "vocabulary '%s' has %d tokens, more than 65536", tk.source, tk.vocab_size);

    Stream s;
    memset(&s, 0, sizeof(s));
    s.eot = tk.eot_id;
    s.has_mask = a.format == 2;
    for (int k = 0; k < a.n_inputs; k++) {
        if (a.format == 2) add_jsonl_file(&s, &tk, &a, a.inputs[k]);
        else add_text_file(&s, &tk, &a, a.inputs[k]);
    }
    // a final <|endoftext|> closes the last document (for a trained completion: the stop token)
    if (a.doc_sep != 2) st_push(&s, s.eot, s.n ? s.mask[s.n - 1] : 0);
    size_t content = s.n - s.n_doc - (a.doc_sep != 2);
    if (content == 0) fatal("check the --input files", "the input holds no text (only empty documents)");
    if (s.n < 2) fatal("give more text", "the input has only %zu token", s.n);

    // Split: validation is the first documents, cut at the document boundary nearest to the
    // requested size (so no document is split), or exactly at it if there is no inner boundary.
    size_t total = s.n;
    size_t target = a.val_tokens >= 0 ? (size_t)a.val_tokens : (size_t)(a.val_frac * (double)total + 0.5);
    size_t cut = 0, val_hi = 0;
    int exact_cut = 0;
    if (target > 0) {
        if (target >= total) fatal("ask for fewer validation tokens", "a validation split of %zu tokens leaves no training tokens (the input has %zu)", target, total);
        size_t best = 0, bestd = SIZE_MAX;
        for (size_t d = 0; d < s.n_doc; d++) {
            size_t b = s.doc_start[d];
            if (b == 0) continue;
            size_t dist = b > target ? b - target : target - b;
            if (dist < bestd) { bestd = dist; best = b; }
        }
        if (best) { cut = best; val_hi = best + 1; } // val keeps the EOT that closes its last document
        else { cut = target; val_hi = target; exact_cut = 1; }
    }
    mkdir_p(a.out_dir);
    size_t per = (size_t)a.shard_tokens;
    size_t max_files = 2 * ((val_hi + per - 1) / per + (total - cut + per - 1) / per);
    if (max_files > 100000) fatal("raise --shard-tokens", "that would write %zu files", max_files);
    char (*written)[512] = (char (*)[512])callocCheck(max_files, 512);
    int nw = 0;
    if (val_hi) write_split(&a, &s, "val", 0, val_hi, written, &nw);
    write_split(&a, &s, "train", cut, total, written, &nw);
    remove_stale(&a, written, nw);

    if (!a.quiet) {
        printf("%s: %zu documents, %zu tokens (val %zu, train %zu)%s\n", a.name, s.n_doc, total, val_hi, total - cut,
               s.has_mask ? "; loss masks written" : "");
        if (target && !exact_cut && val_hi != target)
            printf("note: validation ends at a document boundary: %zu tokens for a target of %zu\n", val_hi, target);
        if (exact_cut) printf("note: no document boundary to cut at; validation cut at token %zu\n", target);
        if (s.docs_without_target) printf("warning: %lld record(s) have no trained tokens (empty completion / no assistant turn)\n", s.docs_without_target);
        double mb = (double)tok_bytes / 1e6;
        printf("tokenized %.2f MB in %.3f s (%.1f MB/s)\n", mb, tok_seconds, tok_seconds > 0 ? mb / tok_seconds : 0.0);
    }
    free(written);
    free(s.tok); free(s.mask); free(s.doc_start);
    tokids_free(&scratch);
    tok_free(&tk);
    return 0;
}
