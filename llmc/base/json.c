#include "base/json.h"
#include "base/check.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

// ---------------------------------------------------------------------------------------------
// UTF-8

// Length of the well-formed UTF-8 sequence at s[0..avail), 0 if ill-formed (RFC 3629 table:
// no overlong forms, no surrogates D800-DFFF, nothing above U+10FFFF).
static size_t utf8_seq_len(const unsigned char* s, size_t avail) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t n; unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) n = 3;
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else return 0;
    if (avail < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++) if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

int json_utf8_valid(const char* s, size_t len, size_t* bad_offset) {
    const unsigned char* u = (const unsigned char*)s;
    size_t i = 0;
    while (i < len) {
        size_t n = utf8_seq_len(u + i, len - i);
        if (n == 0) { if (bad_offset) *bad_offset = i; return 0; }
        i += n;
    }
    return 1;
}

// ---------------------------------------------------------------------------------------------
// parser

typedef struct {
    const char* s;
    size_t len, pos;
    char* err; size_t errcap;
    int failed;
} Parser;

static void perr(Parser* p, const char* fmt, ...) {
    if (p->failed) return;
    p->failed = 1;
    if (!p->err || p->errcap == 0) return;
    int n = snprintf(p->err, p->errcap, "invalid JSON at byte %zu: ", p->pos);
    if (n < 0 || (size_t)n >= p->errcap) return;
    va_list ap; va_start(ap, fmt);
    vsnprintf(p->err + n, p->errcap - (size_t)n, fmt, ap);
    va_end(ap);
}

static void skip_ws(Parser* p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->pos++; else break;
    }
}

static void value_free_contents(JsonValue* v) {
    if (v->type == JSON_STRING) free(v->string);
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        for (int i = 0; i < v->n; i++) {
            value_free_contents(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items); free(v->keys);
    }
    memset(v, 0, sizeof(*v));
}

void json_free(JsonValue* v) {
    if (!v) return;
    value_free_contents(v);
    free(v);
}

static int hex4(Parser* p, unsigned* out) {
    if (p->len - p->pos < 4) { perr(p, "truncated \\u escape"); return 0; }
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos + i]; unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else { p->pos += (size_t)i; perr(p, "invalid hex digit in \\u escape"); return 0; }
        v = v * 16 + d;
    }
    p->pos += 4;
    *out = v;
    return 1;
}

static size_t utf8_encode(unsigned cp, char* out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

// Parses a string starting at the opening quote. The decoded text is never longer than the
// source, so one allocation of the source span suffices.
static char* parse_string(Parser* p, size_t* out_len) {
    p->pos++; // opening quote
    size_t start = p->pos, end = start;
    // find the closing quote (skipping escaped characters) to size the buffer
    while (end < p->len && p->s[end] != '"') { if (p->s[end] == '\\') end++; end++; }
    if (end >= p->len) { perr(p, "unterminated string"); return NULL; }
    char* out = (char*)malloc(end - start + 1);
    if (!out) { perr(p, "out of memory"); return NULL; }
    size_t o = 0;
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; out[o] = '\0'; if (out_len) *out_len = o; return out; }
        if (c < 0x20) { perr(p, "control character 0x%02x in string (must be escaped)", c); free(out); return NULL; }
        if (c == '\\') {
            p->pos++;
            if (p->pos >= p->len) break;
            char e = p->s[p->pos++];
            switch (e) {
                case '"': out[o++] = '"'; break;
                case '\\': out[o++] = '\\'; break;
                case '/': out[o++] = '/'; break;
                case 'b': out[o++] = '\b'; break;
                case 'f': out[o++] = '\f'; break;
                case 'n': out[o++] = '\n'; break;
                case 'r': out[o++] = '\r'; break;
                case 't': out[o++] = '\t'; break;
                case 'u': {
                    unsigned cp;
                    if (!hex4(p, &cp)) { free(out); return NULL; }
                    if (cp >= 0xDC00 && cp <= 0xDFFF) { perr(p, "lone low surrogate \\u%04X", cp); free(out); return NULL; }
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        unsigned lo;
                        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                            perr(p, "high surrogate \\u%04X not followed by a low surrogate", cp); free(out); return NULL;
                        }
                        p->pos += 2;
                        if (!hex4(p, &lo)) { free(out); return NULL; }
                        if (lo < 0xDC00 || lo > 0xDFFF) {
                            perr(p, "high surrogate \\u%04X followed by \\u%04X, not a low surrogate", cp, lo); free(out); return NULL;
                        }
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    o += utf8_encode(cp, out + o);
                    break;
                }
                default:
                    p->pos--; perr(p, "invalid escape '\\%c'", e); free(out); return NULL;
            }
            continue;
        }
        size_t n = utf8_seq_len((const unsigned char*)p->s + p->pos, p->len - p->pos);
        if (n == 0) { perr(p, "invalid UTF-8 byte 0x%02x in string", c); free(out); return NULL; }
        memcpy(out + o, p->s + p->pos, n); o += n; p->pos += n;
    }
    perr(p, "unterminated string");
    free(out);
    return NULL;
}

static int parse_number(Parser* p, JsonValue* v) {
    size_t start = p->pos;
    const char* s = p->s;
    int neg = 0, is_int = 1;
    if (p->pos < p->len && s[p->pos] == '-') { neg = 1; p->pos++; }
    if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9') { perr(p, "invalid number"); return 0; }
    if (s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') { perr(p, "leading zero in number"); return 0; }
    } else {
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    size_t int_end = p->pos;
    if (p->pos < p->len && s[p->pos] == '.') {
        is_int = 0; p->pos++;
        if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9') { perr(p, "expected a digit after '.'"); return 0; }
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->len && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
        is_int = 0; p->pos++;
        if (p->pos < p->len && (s[p->pos] == '+' || s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || s[p->pos] < '0' || s[p->pos] > '9') { perr(p, "expected a digit in exponent"); return 0; }
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9') p->pos++;
    }
    // strtod needs a NUL-terminated copy (the input is not necessarily terminated)
    size_t n = p->pos - start;
    char stackbuf[64];
    char* buf = n < sizeof(stackbuf) ? stackbuf : (char*)malloc(n + 1);
    if (!buf) { perr(p, "out of memory"); return 0; }
    memcpy(buf, s + start, n); buf[n] = '\0';
    v->type = JSON_NUMBER;
    v->number = strtod(buf, NULL);
    if (buf != stackbuf) free(buf);
    v->int_kind = 0;
    if (is_int) {
        uint64_t u = 0; int overflow = 0;
        for (size_t i = start + (size_t)neg; i < int_end; i++) {
            unsigned d = (unsigned)(s[i] - '0');
            if (u > (UINT64_MAX - d) / 10) { overflow = 1; break; }
            u = u * 10 + d;
        }
        if (!overflow) {
            if (!neg) { v->int_kind = 1; v->uint_value = u; if (u <= (uint64_t)INT64_MAX) v->int_value = (int64_t)u; }
            else if (u <= (uint64_t)INT64_MAX + 1) {
                v->int_kind = u == 0 ? 1 : 2; // "-0" is zero
                v->int_value = u == 0 ? 0 : (int64_t)(0 - u);
                v->uint_value = 0;
            }
        }
    }
    return 1;
}

static int match_lit(Parser* p, const char* lit) {
    size_t n = strlen(lit);
    if (p->len - p->pos >= n && memcmp(p->s + p->pos, lit, n) == 0) { p->pos += n; return 1; }
    return 0;
}

static int parse_value(Parser* p, JsonValue* v, int depth);

static int grow(Parser* p, JsonValue* v, int* cap, int with_keys) {
    if (v->n < *cap) return 1;
    int nc = *cap ? *cap * 2 : 4;
    JsonValue* items = (JsonValue*)realloc(v->items, (size_t)nc * sizeof(JsonValue));
    if (!items) { perr(p, "out of memory"); return 0; }
    v->items = items;
    if (with_keys) {
        char** keys = (char**)realloc(v->keys, (size_t)nc * sizeof(char*));
        if (!keys) { perr(p, "out of memory"); return 0; }
        v->keys = keys;
    }
    *cap = nc;
    return 1;
}

static int parse_container(Parser* p, JsonValue* v, int depth, int is_obj) {
    if (depth >= JSON_MAX_DEPTH) { perr(p, "nesting deeper than %d levels", JSON_MAX_DEPTH); return 0; }
    v->type = is_obj ? JSON_OBJECT : JSON_ARRAY;
    p->pos++; // '{' or '['
    int cap = 0;
    char close = is_obj ? '}' : ']';
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 1; }
    for (;;) {
        skip_ws(p);
        if (!grow(p, v, &cap, is_obj)) return 0;
        JsonValue* item = &v->items[v->n];
        memset(item, 0, sizeof(*item));
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') { perr(p, "expected a string key"); return 0; }
            char* key = parse_string(p, NULL);
            if (!key) return 0;
            v->keys[v->n] = key;
            v->n++; // the member exists from here on, so it is freed on error
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') { perr(p, "expected ':' after object key"); return 0; }
            p->pos++;
            skip_ws(p);
            if (!parse_value(p, item, depth + 1)) return 0;
        } else {
            v->n++;
            if (!parse_value(p, item, depth + 1)) return 0;
        }
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 1; }
        perr(p, is_obj ? "expected ',' or '}' in object" : "expected ',' or ']' in array");
        return 0;
    }
}

static int parse_value(Parser* p, JsonValue* v, int depth) {
    if (p->pos >= p->len) { perr(p, "unexpected end of input"); return 0; }
    char c = p->s[p->pos];
    switch (c) {
        case '{': return parse_container(p, v, depth, 1);
        case '[': return parse_container(p, v, depth, 0);
        case '"': {
            char* s = parse_string(p, &v->string_len);
            if (!s) return 0;
            v->type = JSON_STRING; v->string = s;
            return 1;
        }
        case 't': if (match_lit(p, "true")) { v->type = JSON_BOOL; v->boolean = 1; return 1; } break;
        case 'f': if (match_lit(p, "false")) { v->type = JSON_BOOL; v->boolean = 0; return 1; } break;
        case 'n': if (match_lit(p, "null")) { v->type = JSON_NULL; return 1; } break;
        default:
            if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    }
    unsigned char uc = (unsigned char)c;
    if (uc >= 0x20 && uc < 0x7F) perr(p, "unexpected character '%c'", c);
    else perr(p, "unexpected byte 0x%02x", uc);
    return 0;
}

JsonValue* json_parse(const char* text, size_t len, char* err, size_t errcap) {
    Parser p = { text, len, 0, err, errcap, 0 };
    if (err && errcap) err[0] = '\0';
    // validate the whole text up front so that an invalid byte anywhere (even in whitespace
    // position) is reported as invalid UTF-8, not as a confusing syntax error
    size_t bad;
    if (!json_utf8_valid(text, len, &bad)) {
        p.pos = bad;
        perr(&p, "invalid UTF-8 (byte 0x%02x)", (unsigned char)text[bad]);
        return NULL;
    }
    JsonValue* v = (JsonValue*)calloc(1, sizeof(JsonValue));
    if (!v) { perr(&p, "out of memory"); return NULL; }
    skip_ws(&p);
    if (!parse_value(&p, v, 0)) { json_free(v); return NULL; }
    skip_ws(&p);
    if (p.pos != len) { perr(&p, "unexpected data after the JSON value"); json_free(v); return NULL; }
    return v;
}

// ---------------------------------------------------------------------------------------------
// queries

const JsonValue* json_get(const JsonValue* obj, const char* key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->n; i++) if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

const JsonValue* json_at(const JsonValue* arr, int i) {
    if (!arr || arr->type != JSON_ARRAY || i < 0 || i >= arr->n) return NULL;
    return &arr->items[i];
}

static int cmp_strp(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

const char* json_find_duplicate_key(const JsonValue* obj) {
    if (!obj || obj->type != JSON_OBJECT || obj->n < 2) return NULL;
    // sort a copy of the key pointers: O(n log n) even for headers with millions of entries
    char** k = (char**)mallocCheck((size_t)obj->n * sizeof(char*));
    memcpy(k, obj->keys, (size_t)obj->n * sizeof(char*));
    qsort(k, (size_t)obj->n, sizeof(char*), cmp_strp);
    const char* dup = NULL;
    for (int i = 1; i < obj->n; i++) if (strcmp(k[i - 1], k[i]) == 0) { dup = k[i]; break; }
    free(k);
    return dup;
}

const char* json_type_name(JsonType t) {
    switch (t) {
        case JSON_NULL: return "null";
        case JSON_BOOL: return "boolean";
        case JSON_NUMBER: return "number";
        case JSON_STRING: return "string";
        case JSON_ARRAY: return "array";
        case JSON_OBJECT: return "object";
    }
    return "?";
}

int json_as_int64(const JsonValue* v, int64_t* out) {
    if (!v || v->type != JSON_NUMBER || v->int_kind == 0) return 0;
    if (v->int_kind == 1 && v->uint_value > (uint64_t)INT64_MAX) return 0;
    *out = v->int_value;
    return 1;
}

int json_as_int(const JsonValue* v, int* out) {
    int64_t x;
    if (!json_as_int64(v, &x) || x < INT32_MIN || x > INT32_MAX) return 0;
    *out = (int)x;
    return 1;
}

int json_as_uint64(const JsonValue* v, uint64_t* out) {
    if (!v || v->type != JSON_NUMBER || v->int_kind != 1) return 0;
    *out = v->uint_value;
    return 1;
}

int json_as_number(const JsonValue* v, double* out) {
    if (!v || v->type != JSON_NUMBER) return 0;
    *out = v->number;
    return 1;
}

int json_as_bool(const JsonValue* v, int* out) {
    if (!v || v->type != JSON_BOOL) return 0;
    *out = v->boolean;
    return 1;
}

const char* json_as_string(const JsonValue* v) {
    return v && v->type == JSON_STRING ? v->string : NULL;
}

int json_is_null(const JsonValue* v) { return v && v->type == JSON_NULL; }

// ---------------------------------------------------------------------------------------------
// writer

void jw_init(JsonWriter* w, int pretty) {
    memset(w, 0, sizeof(*w));
    w->pretty = pretty;
    w->cap = 256;
    w->buf = (char*)mallocCheck(w->cap);
    w->buf[0] = '\0';
}

void jw_free(JsonWriter* w) { free(w->buf); w->buf = NULL; w->len = w->cap = 0; }

void jw_raw(JsonWriter* w, const char* s, size_t n) {
    if (w->len + n + 1 > w->cap) {
        while (w->len + n + 1 > w->cap) w->cap *= 2;
        char* nb = (char*)realloc(w->buf, w->cap);
        if (!nb) fatal(NULL, "out of memory building JSON text (%zu bytes)", w->cap);
        w->buf = nb;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void jw_str(JsonWriter* w, const char* s) { jw_raw(w, s, strlen(s)); }

static void jw_newline(JsonWriter* w) {
    if (!w->pretty) return;
    jw_raw(w, "\n", 1);
    for (int i = 0; i < w->depth; i++) jw_raw(w, "  ", 2);
}

// Called before every value and key: separators and indentation.
static void jw_pre_value(JsonWriter* w) {
    if (w->after_key) { w->after_key = 0; return; }
    if (w->depth > 0) {
        if (w->count[w->depth] > 0) jw_raw(w, ",", 1);
        jw_newline(w);
        w->count[w->depth]++;
    }
}

// Append s as a quoted, escaped JSON string to w's buffer (no comma logic).
static void jw_append_escaped(JsonWriter* w, const char* s, size_t n) {
    jw_raw(w, "\"", 1);
    for (const unsigned char* p = (const unsigned char*)s; p < (const unsigned char*)s + n; p++) {
        char esc[8];
        switch (*p) {
            case '"': jw_raw(w, "\\\"", 2); break;
            case '\\': jw_raw(w, "\\\\", 2); break;
            case '\n': jw_raw(w, "\\n", 2); break;
            case '\r': jw_raw(w, "\\r", 2); break;
            case '\t': jw_raw(w, "\\t", 2); break;
            case '\b': jw_raw(w, "\\b", 2); break;
            case '\f': jw_raw(w, "\\f", 2); break;
            default:
                if (*p < 0x20) { snprintf(esc, sizeof(esc), "\\u%04x", *p); jw_raw(w, esc, 6); }
                else jw_raw(w, (const char*)p, 1); // UTF-8 passes through unchanged
        }
    }
    jw_raw(w, "\"", 1);
}

static void jw_open(JsonWriter* w, char c) {
    jw_pre_value(w);
    if (w->depth >= JSON_MAX_DEPTH) fatal("this is a bug in llmc", "JSON writer nesting too deep");
    jw_raw(w, &c, 1);
    w->depth++;
    w->count[w->depth] = 0;
}

static void jw_close(JsonWriter* w, char c) {
    assertCheck(w->depth > 0 && !w->after_key);
    int had = w->count[w->depth];
    w->depth--;
    if (had) jw_newline(w);
    jw_raw(w, &c, 1);
    if (w->depth == 0 && w->pretty) jw_raw(w, "\n", 1);
}

void jw_begin_object(JsonWriter* w) { jw_open(w, '{'); }
void jw_end_object(JsonWriter* w) { jw_close(w, '}'); }
void jw_begin_array(JsonWriter* w) { jw_open(w, '['); }
void jw_end_array(JsonWriter* w) { jw_close(w, ']'); }

void jw_key(JsonWriter* w, const char* key) {
    assertCheck(w->depth > 0 && !w->after_key);
    jw_pre_value(w);
    jw_append_escaped(w, key, strlen(key));
    jw_str(w, w->pretty ? ": " : ":");
    w->after_key = 1;
}

void jw_string(JsonWriter* w, const char* s) { jw_pre_value(w); jw_append_escaped(w, s, strlen(s)); }
void jw_string_n(JsonWriter* w, const char* s, size_t n) { jw_pre_value(w); jw_append_escaped(w, s, n); }

void jw_int(JsonWriter* w, int64_t v) {
    char b[32]; snprintf(b, sizeof(b), "%lld", (long long)v);
    jw_pre_value(w); jw_str(w, b);
}

void jw_uint(JsonWriter* w, uint64_t v) {
    char b[32]; snprintf(b, sizeof(b), "%llu", (unsigned long long)v);
    jw_pre_value(w); jw_str(w, b);
}

void jw_double(JsonWriter* w, double v) {
    if (!isfinite(v)) fatal("this is a bug in llmc", "cannot write a non-finite number (%g) as JSON", v);
    char b[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(b, sizeof(b), "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    if (!strpbrk(b, ".eEn")) strcat(b, ".0");
    jw_pre_value(w); jw_str(w, b);
}

void jw_bool(JsonWriter* w, int v) { jw_pre_value(w); jw_str(w, v ? "true" : "false"); }
void jw_null(JsonWriter* w) { jw_pre_value(w); jw_str(w, "null"); }

int jsonl_each_line(const char* text, size_t len, JsonlLineFn fn, void* ctx) {
    int lineno = 0, passed = 0;
    for (size_t at = 0; at < len;) {
        const char* nl = (const char*)memchr(text + at, '\n', len - at);
        const size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        lineno++;
        size_t q = 0;
        while (q < n && (text[at + q] == ' ' || text[at + q] == '\t' || text[at + q] == '\r')) q++;
        if (q < n) { fn(ctx, text + at, n, lineno); passed++; }
        at += n + 1;
    }
    return passed;
}
