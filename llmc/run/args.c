#include "run/args.h"
#include "base/check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>

static void args_print_help(const ArgSpec* specs, int n, const char* usage_head) {
    printf("%s\n\nOptions:\n", usage_head);
    for (int i = 0; i < n; i++) {
        const ArgSpec* s = &specs[i];
        char left[96];
        const char* mv = s->type == ARG_BOOL ? "" : s->metavar ? s->metavar : "X";
        snprintf(left, sizeof(left), "  %s%s%s%s%s%s", s->alias ? s->alias : "", s->alias ? ", " : "", s->name,
                 s->type == ARG_BOOL ? "" : s->type == ARG_OPT_STR ? " [" : " ", mv, s->type == ARG_OPT_STR ? "]" : "");
        printf("%-34s %s", left, s->help);
        switch (s->type) {
        case ARG_INT: printf(" (default %d)", *(int*)s->dst); break;
        case ARG_INT64: printf(" (default %lld)", (long long)*(int64_t*)s->dst); break;
        case ARG_FLOAT: printf(" (default %g)", *(float*)s->dst); break;
        case ARG_STR: if (*(const char**)s->dst) printf(" (default %s)", *(const char**)s->dst); break;
        case ARG_STRS: printf(" (may be given several times)"); break;
        case ARG_BOOL: case ARG_OPT_STR: break;
        }
        if ((s->type == ARG_INT || s->type == ARG_INT64) && s->min <= s->max)
            printf(" [%.0f, %.0f]%s%s", s->min, s->max, s->choices ? " or " : "", s->choices ? s->choices[0] : "");
        if (s->type == ARG_FLOAT && s->min <= s->max) printf(" [%g, %g]", s->min, s->max);
        if (s->choices && (s->type == ARG_STR || s->type == ARG_STRS || s->type == ARG_BOOL)) { // (an optional word, an int's word: named above)
            printf(" [");
            for (int c = 0; s->choices[c]; c++) printf("%s%s", c ? "|" : "", s->choices[c]);
            printf("]");
        }
        printf("\n");
    }
    printf("  %-32s show this help\n", "-h, --help");
}

static const char* HINT = "run with --help to see every flag and its range";

static int int_value(const ArgSpec* s, const char* val, char* err, size_t cap) {
    if (s->type == ARG_INT && s->choices && !strcmp(val, s->choices[0])) { *(int*)s->dst = ARG_AUTO; return 0; }
    char* end = NULL;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (end == val || *end || errno) {
        snprintf(err, cap, "%s: '%s' is not an integer%s%s", s->name, val, s->type == ARG_INT && s->choices ? " nor " : "",
                 s->type == ARG_INT && s->choices ? s->choices[0] : "");
        return -1;
    }
    if (s->min <= s->max && (v < s->min || v > s->max)) {
        snprintf(err, cap, "%s: %lld is out of range [%.0f, %.0f]", s->name, v, s->min, s->max);
        return -1;
    }
    if (s->type == ARG_INT64) { *(int64_t*)s->dst = (int64_t)v; return 0; }
    if (v < -2147483647LL || v > 2147483647LL) { snprintf(err, cap, "%s: %lld is too large", s->name, v); return -1; }
    *(int*)s->dst = (int)v;
    return 0;
}

static int str_value(const ArgSpec* s, const char* val, char* err, size_t cap) {
    if (s->choices) {
        int ok = 0;
        for (int c = 0; s->choices[c]; c++) if (strcmp(s->choices[c], val) == 0) ok = 1;
        if (!ok) {
            char buf[512] = {0};
            for (int c = 0; s->choices[c]; c++) {
                strncat(buf, c ? ", " : "", sizeof(buf) - strlen(buf) - 1);
                strncat(buf, s->choices[c], sizeof(buf) - strlen(buf) - 1);
            }
            snprintf(err, cap, "%s: '%s' is not one of: %s", s->name, val, buf);
            return -1;
        }
    }
    const size_t len = strlen(val);
    if (s->type == ARG_STR && s->min <= s->max) { // (a range: the lengths allowed, empty included from 0)
        if (len < s->min || len > s->max) { snprintf(err, cap, "%s: %zu bytes, not in [%.0f, %.0f]", s->name, len, s->min, s->max); return -1; }
    } else if (!len) { snprintf(err, cap, "%s: empty value", s->name); return -1; }
    if (s->type != ARG_STRS) { *(const char**)s->dst = val; return 0; }
    ArgStrs* l = (ArgStrs*)s->dst;
    if (l->n == ARG_STRS_MAX) { snprintf(err, cap, "%s: given more than %d times", s->name, ARG_STRS_MAX); return -1; }
    l->v[l->n++] = val;
    return 0;
}

// Parse val (text) into the flag's destination; 0, or -1 with the reason in err.
static int set_value(const ArgSpec* s, const char* val, char* err, size_t cap) {
    switch (s->type) {
    case ARG_INT: case ARG_INT64: return int_value(s, val, err, cap);
    case ARG_FLOAT: {
        char* end = NULL;
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(v)) { snprintf(err, cap, "%s: '%s' is not a finite number", s->name, val); return -1; }
        if (s->min <= s->max && (v < s->min || v > s->max)) {
            snprintf(err, cap, "%s: %g is out of range [%g, %g]", s->name, v, s->min, s->max);
            return -1;
        }
        *(float*)s->dst = (float)v;
        return 0;
    }
    case ARG_STR: case ARG_OPT_STR: case ARG_STRS: return str_value(s, val, err, cap);
    case ARG_BOOL:
        if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes")) *(int*)s->dst = 1;
        else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no")) *(int*)s->dst = 0;
        else { snprintf(err, cap, "%s: '%s' is not a boolean (use 0/1, true/false)", s->name, val); return -1; }
        return 0;
    }
    return -1;
}

static const ArgSpec* find_spec(const ArgSpec* specs, int n, const char* a, size_t keylen) {
    for (int k = 0; k < n; k++) {
        if ((strlen(specs[k].name) == keylen && !strncmp(specs[k].name, a, keylen)) ||
            (specs[k].alias && strlen(specs[k].alias) == keylen && !strncmp(specs[k].alias, a, keylen)))
            return &specs[k];
    }
    return NULL;
}

// ----------------------------------------------------------------------------
// "did you mean": an unknown flag is compared, with dashes and underscores alike and case
// ignored, with this program's flags (spelled the same, a unique prefix, or a few typing errors
// away) and with the names other tools give the same setting.

// Names in other tools (HF TrainingArguments, PEFT, axolotl, llm.c, transformers' generate, and
// this program's earlier short flags) for a flag here: suggested where the program has the flag.
static const struct { const char* other; const char* flag; const char* note; } ARG_OTHER_NAMES[] = {
    {"learning-rate", "--lr", NULL}, {"lr-scheduler-type", "--schedule", NULL}, {"lr-scheduler", "--schedule", NULL},
    {"scheduler", "--schedule", NULL}, {"epoch", "--epochs", NULL}, {"num-train-epochs", "--epochs", NULL},
    {"num-epochs", "--epochs", NULL}, {"max-steps", "--steps", NULL}, {"num-steps", "--steps", NULL},
    {"max-iters", "--steps", NULL}, {"per-device-train-batch-size", "--batch-size", "the micro-batch per rank"},
    {"micro-batch-size", "--batch-size", NULL}, {"train-batch-size", "--batch-size", "the micro-batch per rank"},
    {"gradient-accumulation-steps", "--total-batch-tokens", "tokens per optimizer step; accumulation makes up the difference"},
    {"max-seq-length", "--seq-len", NULL}, {"max-seq-len", "--seq-len", NULL}, {"sequence-len", "--seq-len", NULL},
    {"block-size", "--seq-len", NULL}, {"context-length", "--seq-len", NULL}, {"output-dir", "--out", NULL},
    {"output", "--out", NULL}, {"warmup-ratio", "--warmup-steps", "a number of steps, not a fraction"},
    {"num-warmup-steps", "--warmup-steps", NULL}, {"max-grad-norm", "--grad-clip", NULL}, {"adam-beta1", "--beta1", NULL},
    {"adam-beta2", "--beta2", NULL}, {"adam-epsilon", "--eps", NULL}, {"eval-steps", "--eval-every", NULL},
    {"save-steps", "--save-every", NULL}, {"save-total-limit", "--keep-checkpoints", NULL},
    {"resume-from-checkpoint", "--resume", NULL}, {"y", "--resume", "llm.c's -y"}, {"gradient-checkpointing", "--recompute", NULL},
    {"lora-r", "--lora-rank", NULL}, {"r", "--lora-rank", NULL}, {"rank", "--lora-rank", NULL},
    {"target-modules", "--lora-targets", NULL}, {"lora-target-modules", "--lora-targets", NULL},
    {"lora-target-linear", "--lora-targets", "--lora-targets all-linear"}, {"use-rslora", "--rslora", NULL}, {"use-dora", "--dora", NULL},
    {"modules-to-save", "--train-ln-f", "ln_f is the module that can be saved"}, {"load-in-4bit", "--qlora", NULL},
    {"lora-model-dir", "--adapter", NULL}, {"adapter-path", "--adapter", NULL}, {"peft-model", "--adapter", NULL},
    {"model-name-or-path", "--model", NULL}, {"base-model", "--model", NULL}, {"model-name", "--model", NULL},
    {"dataset", "--train-data", NULL}, {"train-file", "--train-data", NULL}, {"validation-file", "--val-data", NULL},
    {"eval-file", "--val-data", NULL}, {"bf16", "--dtype", "--dtype bf16"}, {"fp32", "--dtype", "--dtype fp32"},
    {"fp16", "--dtype", "bf16 or fp32"}, {"num-threads", "--threads", NULL}, {"zero-stage", "--zero", NULL},
    {"max-tokens", "--max-new-tokens", NULL}, {"max-length", "--max-new-tokens", NULL}, {"num-tokens", "--max-new-tokens", NULL},
    {"temp", "--temperature", NULL}, {"repeat-penalty", "--repetition-penalty", NULL}, {"n", "--max-new-tokens", "-n is the trainers' --save-every, as in llm.c"},
    {"q", "--quiet", "-q is the trainers' --final-lr-frac, as in llm.c"}, {"merge-and-unload", "--merge", NULL},
};

// s without leading dashes, lower case, '_' as '-'.
static void norm_flag(const char* s, size_t n, char* out, size_t cap) {
    size_t i = 0;
    while (n && *s == '-') { s++; n--; }
    for (; n && i + 1 < cap; s++, n--) out[i++] = *s == '_' ? '-' : (*s >= 'A' && *s <= 'Z') ? (char)(*s - 'A' + 'a') : *s;
    out[i] = '\0';
}

// Edits (insert, delete, replace, swap of two neighbours) from a to b (names up to 40 characters).
static int edit_distance(const char* a, const char* b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 40 || lb > 40) return 99;
    int d[41][41];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v) v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

// The flag of specs an unknown flag (key[0..n)) most likely meant, or NULL; *note: what to add.
static const ArgSpec* args_suggest(const ArgSpec* specs, int ns, const char* key, size_t n, const char** note) {
    char u[64], f[64];
    norm_flag(key, n, u, sizeof(u));
    *note = NULL;
    for (int k = 0; k < ns; k++) { // the same flag spelled otherwise (--lora_rank, -lr)
        norm_flag(specs[k].name, strlen(specs[k].name), f, sizeof(f));
        if (!strcmp(u, f)) return &specs[k];
    }
    const size_t lu = strlen(u);
    for (int fuzzy = 0; fuzzy < 2; fuzzy++) // another tool's name, then one typing error from one (--max-step)
        for (size_t i = 0; i < sizeof(ARG_OTHER_NAMES) / sizeof(ARG_OTHER_NAMES[0]); i++) {
            if (fuzzy ? lu < 6 || edit_distance(u, ARG_OTHER_NAMES[i].other) > 1 : strcmp(u, ARG_OTHER_NAMES[i].other) != 0) continue;
            const ArgSpec* s = find_spec(specs, ns, ARG_OTHER_NAMES[i].flag, strlen(ARG_OTHER_NAMES[i].flag));
            if (s) { *note = ARG_OTHER_NAMES[i].note; return s; }
        }
    const ArgSpec* best = NULL;
    int prefix_of = 0, best_d = 99;
    for (int k = 0; k < ns; k++) { // a unique beginning (--warmup)
        norm_flag(specs[k].name, strlen(specs[k].name), f, sizeof(f));
        if (lu >= 3 && !strncmp(f, u, lu)) { prefix_of++; best = &specs[k]; }
    }
    if (prefix_of == 1) return best;
    best = NULL;
    for (int k = 0; k < ns; k++) { // a few typing errors away: 1 in a short name, 2 from 6 characters, 3 from 12
        norm_flag(specs[k].name, strlen(specs[k].name), f, sizeof(f));
        const int d = edit_distance(u, f);
        if (d < best_d) { best_d = d; best = &specs[k]; }
    }
    return best && lu >= 2 && best_d <= (lu < 6 ? 1 : lu < 12 ? 2 : 3) ? best : NULL;
}

static void args_unknown(const ArgSpec* specs, int ns, const char* a, size_t keylen) {
    const char* note;
    const ArgSpec* s = args_suggest(specs, ns, a, keylen, &note);
    if (!s) fatal(HINT, "unknown flag '%.*s'", (int)keylen, a);
    fatal(HINT, "unknown flag '%.*s': did you mean %s%s%s%s?%s%s%s", (int)keylen, a, s->name, s->alias ? " (" : "", s->alias ? s->alias : "",
          s->alias ? ")" : "", note ? " (" : "", note ? note : "", note ? ")" : "");
}

static int is_bool_word(const char* s) {
    return !strcmp(s, "0") || !strcmp(s, "1") || !strcmp(s, "true") || !strcmp(s, "false");
}

// An int flag holding the word it takes (ARG_AUTO).
static int is_int_word(const ArgSpec* s) { return s->type == ARG_INT && s->choices && *(const int*)s->dst == ARG_AUTO; }

static int is_choice(const ArgSpec* s, const char* word) {
    for (int c = 0; s->choices && s->choices[c]; c++) if (!strcmp(s->choices[c], word)) return 1;
    return 0;
}

void args_parse(int argc, char** argv, const ArgSpec* specs, int n, const char* usage_head, unsigned char* given) {
    if (given) memset(given, 0, (size_t)n);
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { args_print_help(specs, n, usage_head); exit(0); }
        if (a[0] != '-') fatal(HINT, "unexpected argument '%s' (flags start with --)", a);
        const char* eq = strchr(a, '=');
        size_t keylen = eq ? (size_t)(eq - a) : strlen(a);
        const ArgSpec* s = find_spec(specs, n, a, keylen);
        if (!s) args_unknown(specs, n, a, keylen);
        const char* val;
        if (eq) val = eq + 1;
        else if (s->type == ARG_BOOL) // a bool takes an explicit value only when the next word is one
            val = i + 1 < argc && is_bool_word(argv[i + 1]) ? argv[++i] : "1";
        else if (s->type == ARG_OPT_STR) // likewise: the next word only when it is one of the choices
            val = i + 1 < argc && is_choice(s, argv[i + 1]) ? argv[++i] : s->choices[0];
        else {
            if (i + 1 >= argc) fatal(HINT, "%s needs a value (%s)", s->name, s->metavar ? s->metavar : "X");
            val = argv[++i];
        }
        char err[768];
        const int by_alias = s->alias && strlen(s->alias) == keylen && !strncmp(s->alias, a, keylen);
        if (set_value(s, val, err, sizeof(err)) != 0) fatal(HINT, "%s%s%s%s", err, by_alias ? " (given as " : "", by_alias ? s->alias : "", by_alias ? ")" : "");
        if (given) given[s - specs] = 1;
    }
}

void args_json_key(const ArgSpec* s, char* out, size_t cap) {
    const char* p = s->name;
    while (*p == '-') p++;
    snprintf(out, cap, "%s", p);
    for (char* c = out; *c; c++) if (*c == '-') *c = '_';
}

// The shortest decimal that reads back as the same float (0.0002, not 0.00019999999494757503).
static double float_shortest(float f) {
    char t[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(t, sizeof(t), "%.*g", p, (double)f);
        if ((float)strtod(t, NULL) == f) break;
    }
    return strtod(t, NULL);
}

void args_value_text(const ArgSpec* s, char* out, size_t cap) {
    switch (s->type) {
    case ARG_INT:
        if (is_int_word(s)) snprintf(out, cap, "%s", s->choices[0]);
        else snprintf(out, cap, "%d", *(const int*)s->dst);
        break;
    case ARG_INT64: snprintf(out, cap, "%lld", (long long)*(const int64_t*)s->dst); break;
    case ARG_FLOAT: snprintf(out, cap, "%.9g", float_shortest(*(const float*)s->dst)); break;
    case ARG_BOOL: snprintf(out, cap, "%s", *(const int*)s->dst ? "on" : "off"); break;
    case ARG_STR: case ARG_OPT_STR: {
        const char* v = *(const char* const*)s->dst;
        snprintf(out, cap, "%s", v ? v : "none");
        break;
    }
    case ARG_STRS: {
        const ArgStrs* l = (const ArgStrs*)s->dst;
        size_t o = 0;
        out[0] = '\0';
        for (int i = 0; i < l->n && o < cap; i++) o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "", l->v[i]);
        if (!l->n) snprintf(out, cap, "none");
        break;
    }
    }
}

void args_write_json(JsonWriter* w, const ArgSpec* s) {
    char key[128];
    args_json_key(s, key, sizeof(key));
    jw_key(w, key);
    switch (s->type) {
    case ARG_INT: if (is_int_word(s)) jw_string(w, s->choices[0]); else jw_int(w, *(int*)s->dst); break;
    case ARG_INT64: jw_int(w, *(int64_t*)s->dst); break;
    case ARG_FLOAT: jw_double(w, float_shortest(*(float*)s->dst)); break;
    case ARG_STR: case ARG_OPT_STR: if (*(const char**)s->dst) jw_string(w, *(const char**)s->dst); else jw_null(w); break;
    case ARG_BOOL: jw_bool(w, *(int*)s->dst); break;
    case ARG_STRS:
        jw_begin_array(w);
        for (int i = 0; i < ((const ArgStrs*)s->dst)->n; i++) jw_string(w, ((const ArgStrs*)s->dst)->v[i]);
        jw_end_array(w);
        break;
    }
}

// An ARG_STRS flag from a JSON array of strings (its values replaced).
static int strs_set_json(const ArgSpec* s, const JsonValue* v, char* err, size_t cap) {
    if (v->type != JSON_ARRAY) { snprintf(err, cap, "%s: not an array of strings", s->name); return -1; }
    ((ArgStrs*)s->dst)->n = 0;
    for (int i = 0; i < v->n; i++) {
        const JsonValue* e = json_at(v, i);
        const char* val = json_as_string(e);
        if (!val || strlen(val) != e->string_len) { snprintf(err, cap, "%s: element %d is not a string (without NUL bytes)", s->name, i); return -1; }
        if (set_value(s, val, err, cap) != 0) return -1;
    }
    return 0;
}

int args_set_json(const ArgSpec* s, const JsonValue* v, char* err, size_t cap) {
    char text[64];
    const char* val = text;
    int64_t i64;
    double d;
    int b;
    switch (s->type) {
    case ARG_INT: case ARG_INT64:
        if (s->type == ARG_INT && s->choices && json_as_string(v)) { val = json_as_string(v); break; } // (its word)
        if (!json_as_int64(v, &i64)) { snprintf(err, cap, "%s: not an integer", s->name); return -1; }
        snprintf(text, sizeof(text), "%lld", (long long)i64);
        break;
    case ARG_FLOAT: // 9 significant digits give back the same float
        if (!json_as_number(v, &d)) { snprintf(err, cap, "%s: not a number", s->name); return -1; }
        snprintf(text, sizeof(text), "%.9g", d);
        break;
    case ARG_STR: case ARG_OPT_STR:
        if (json_is_null(v)) { *(const char**)s->dst = NULL; return 0; }
        val = json_as_string(v);
        if (!val) { snprintf(err, cap, "%s: not a string", s->name); return -1; }
        if (strlen(val) != v->string_len) { snprintf(err, cap, "%s: the string holds a NUL byte", s->name); return -1; }
        break;
    case ARG_BOOL:
        if (!json_as_bool(v, &b)) { snprintf(err, cap, "%s: not true or false", s->name); return -1; }
        val = b ? "1" : "0";
        break;
    case ARG_STRS: return strs_set_json(s, v, err, cap);
    }
    return set_value(s, val, err, cap);
}
