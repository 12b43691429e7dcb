// GPT-2 byte-level BPE tokenizer. See tokenizer.h for what it does; this file is organised as
// vocabulary loading (three file layouts, one small JSON scanner), the piece splitter (the GPT-2
// pattern as a hand-written scanner), the BPE merge loop, a piece cache, and encode / decode.
#define _GNU_SOURCE
#include "text/tokenizer.h"
#include "base/check.h"
#include "base/fileio.h"
#include "text/vocab.h"
#include <utf8proc.h>
#include <stdint.h>
#include <string.h>
#include <limits.h>

// ----------------------------------------------------------------------------------------------
// small growable byte buffer

typedef struct { char* p; size_t n, cap; } Buf;

static void buf_reserve(Buf* b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    char* p = (char*)realloc(b->p, cap);
    if (!p) fatal("the machine is out of memory", "cannot allocate %zu bytes for the tokenizer", cap);
    b->p = p; b->cap = cap;
}
static void buf_put(Buf* b, const void* s, size_t n) {
    if (n == 0) return; // b->p may still be NULL: no pointer arithmetic or memcpy on it
    buf_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void tokids_push(TokIds* v, int id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        int* p = (int*)realloc(v->ids, cap * sizeof(int));
        if (!p) fatal("the machine is out of memory", "cannot allocate %zu token ids", cap);
        v->ids = p; v->cap = cap;
    }
    v->ids[v->n++] = id;
}
void tokids_free(TokIds* v) { free(v->ids); v->ids = NULL; v->n = v->cap = 0; }

static uint64_t hash_bytes(const char* s, size_t n) {
    // FNV-1a, 64 bit: pieces are short, so a byte-at-a-time hash is fine.
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ULL; }
    return h ^ (h >> 29);
}

// ----------------------------------------------------------------------------------------------
// UTF-8 and character classes

// Decode one code point from s[0..n) (n >= 1). Returns its length in bytes; *cp = -1 for a byte
// that does not start a well-formed sequence (overlong forms, surrogates and values past
// U+10FFFF are not well-formed), which then stands alone as a 1-byte "character".
static inline int u8_decode(const uint8_t* s, size_t n, int32_t* cp) {
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) {
        if (n >= 2 && (s[1] & 0xC0) == 0x80) { *cp = ((c & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    } else if (c >= 0xE0 && c <= 0xEF) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; // no UTF-16 surrogates
        if (n >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80) {
            *cp = ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F); return 3;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        if (n >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80) {
            *cp = ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
            return 4;
        }
    }
    *cp = -1;
    return 1;
}

enum { CLS_OTHER = 0, CLS_L = 1, CLS_N = 2, CLS_S = 4 };

// Letters and numbers new in Unicode 15.1 / 16.0. utf8proc 2.8 (Debian 12) knows Unicode 15.0 and
// reports these as unassigned, while tiktoken's regex engine knows 16.0; consulted only for code
// points utf8proc calls unassigned, so a newer utf8proc simply never gets here. The list is the
// difference between the two found by dev/gen_tokenizer_ref.py's code point probe.
static const int32_t newer_unicode[][3] = {
    {0x1C89, 0x1C8A, CLS_L}, {0xA7CB, 0xA7CD, CLS_L}, {0xA7DA, 0xA7DC, CLS_L},
    {0x105C0, 0x105F3, CLS_L}, {0x10D40, 0x10D49, CLS_N}, {0x10D4A, 0x10D65, CLS_L},
    {0x10D6F, 0x10D85, CLS_L}, {0x10EC2, 0x10EC4, CLS_L}, {0x11380, 0x11389, CLS_L},
    {0x1138B, 0x1138B, CLS_L}, {0x1138E, 0x1138E, CLS_L}, {0x11390, 0x113B5, CLS_L},
    {0x113B7, 0x113B7, CLS_L}, {0x113D1, 0x113D1, CLS_L}, {0x113D3, 0x113D3, CLS_L},
    {0x116D0, 0x116E3, CLS_N}, {0x11BC0, 0x11BE0, CLS_L}, {0x11BF0, 0x11BF9, CLS_N},
    {0x13460, 0x143FA, CLS_L}, {0x16100, 0x1611D, CLS_L}, {0x16130, 0x16139, CLS_N},
    {0x16D40, 0x16D6C, CLS_L}, {0x16D70, 0x16D79, CLS_N}, {0x18CFF, 0x18CFF, CLS_L},
    {0x1CCF0, 0x1CCF9, CLS_N}, {0x1E5D0, 0x1E5ED, CLS_L}, {0x1E5F0, 0x1E5F0, CLS_L},
    {0x1E5F1, 0x1E5FA, CLS_N}, {0x2EBF0, 0x2EE5D, CLS_L},
};

static uint8_t ascii_cls[128];
static int ascii_cls_ready = 0;

static void init_ascii_cls(void) {
    for (int c = 0; c < 128; c++) {
        uint8_t k = CLS_OTHER;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k = CLS_L;
        else if (c >= '0' && c <= '9') k = CLS_N;
        else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) k = CLS_S;
        ascii_cls[c] = k;
    }
    ascii_cls_ready = 1;
}

int tok_codepoint_class(int32_t cp) {
    if (cp < 0) return CLS_OTHER; // a stray byte
    if (cp < 128) {
        if (!ascii_cls_ready) init_ascii_cls();
        return ascii_cls[cp];
    }
    // \s is the Unicode White_Space property (what tiktoken's regex engine uses).
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000: return CLS_S;
    default: break;
    }
    if (cp >= 0x2000 && cp <= 0x200A) return CLS_S;
    if (cp > 0x10FFFF) return CLS_OTHER;
    utf8proc_category_t k = utf8proc_category(cp);
    switch (k) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return CLS_L;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return CLS_N;
    case UTF8PROC_CATEGORY_CN: {
        int n = (int)(sizeof(newer_unicode) / sizeof(newer_unicode[0]));
        for (int i = 0; i < n; i++)
            if (cp >= newer_unicode[i][0] && cp <= newer_unicode[i][1]) return newer_unicode[i][2];
        return CLS_OTHER;
    }
    default: return CLS_OTHER;
    }
}

static inline int cls_at(const uint8_t* s, size_t n, int* len) {
    if (s[0] < 0x80) { *len = 1; return ascii_cls[s[0]]; }
    int32_t cp;
    *len = u8_decode(s, n, &cp);
    return tok_codepoint_class(cp);
}

// The GPT-2 pattern  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// as a scanner: alternatives are tried in order and each is greedy, exactly like the regex.
size_t tok_next_piece(const char* text, size_t len, size_t pos) {
    if (!ascii_cls_ready) init_ascii_cls();
    const uint8_t* s = (const uint8_t*)text;
    uint8_t c0 = s[pos];
    if (c0 == '\'' && pos + 1 < len) { // contractions (lowercase only, as in the pattern)
        uint8_t c1 = s[pos + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
        if (pos + 2 < len) {
            uint8_t c2 = s[pos + 2];
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return pos + 3;
        }
    }
    size_t i = pos;
    int l;
    int k = cls_at(s + i, len - i, &l);
    if (c0 == ' ' && pos + 1 < len) {
        // " ?X+": a single space joins a following run of letters / numbers / other
        int l2;
        int k2 = cls_at(s + pos + 1, len - pos - 1, &l2);
        if (k2 != CLS_S) { i = pos + 1; k = k2; l = l2; }
    }
    if (k != CLS_S) {
        i += (size_t)l;
        while (i < len && cls_at(s + i, len - i, &l) == k) i += (size_t)l;
        return i;
    }
    // Whitespace run. \s+(?!\S): the whole run if it ends the text, else all of it but the last
    // character (which then goes with what follows, e.g. " word"); a single whitespace character
    // before non-space is matched by the final \s+.
    size_t last = i;
    i += (size_t)l;
    while (i < len && cls_at(s + i, len - i, &l) == CLS_S) { last = i; i += (size_t)l; }
    if (i == len) return i;
    if (last > pos) return last;
    return i;
}

// ----------------------------------------------------------------------------------------------
// vocabulary: bytes -> id table

// A slot holds id + 1 (0 = empty) in the low 32 bits and the upper half of the key's hash in
// the high 32 bits: most non-matching slots are rejected without touching the token bytes.
static int map_find(const Tokenizer* t, const char* s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & t->map_mask;
    for (;;) {
        uint64_t e = t->map[i];
        if (!e) return -1;
        if ((uint32_t)(e >> 32) == tag) {
            int id = (int)(uint32_t)e - 1;
            if (t->tok_len[id] == n && memcmp(t->blob + t->tok_off[id], s, n) == 0) return id;
        }
        i = (i + 1) & t->map_mask;
    }
}

// Merge rank of the token spelled s[0..n), or -1 if no merge makes it.
static inline int32_t rank_of(const Tokenizer* t, const char* s, size_t n) {
    int id = map_find(t, s, n);
    return id < 0 ? -1 : t->rank[id];
}

// ----------------------------------------------------------------------------------------------
// loading: a vocabulary is a list of (token bytes, id) plus a list of merges (pairs of token
// byte strings), whatever file layout it came from.

typedef struct {
    Buf bytes;                  // token and merge strings, back to back
    size_t n_tok, cap_tok;
    size_t* tok_off; uint32_t* tok_len; int64_t* tok_id;
    uint8_t* tok_added;         // 1: from tokenizer.json's added_tokens (raw text, not the byte alphabet)
    size_t n_merge, cap_merge;
    size_t* m_off; uint32_t* m_len; // 2 per merge: a, b
    long* m_line;               // line (merges.txt) or index (tokenizer.json) for messages
} VocabSrc;

static void vs_add_token(VocabSrc* v, const char* s, size_t n, int64_t id, int added) {
    if (v->n_tok == v->cap_tok) {
        v->cap_tok = v->cap_tok ? v->cap_tok * 2 : 1024;
        v->tok_off = (size_t*)realloc(v->tok_off, v->cap_tok * sizeof(size_t));
        v->tok_len = (uint32_t*)realloc(v->tok_len, v->cap_tok * sizeof(uint32_t));
        v->tok_id = (int64_t*)realloc(v->tok_id, v->cap_tok * sizeof(int64_t));
        v->tok_added = (uint8_t*)realloc(v->tok_added, v->cap_tok);
        if (!v->tok_off || !v->tok_len || !v->tok_id || !v->tok_added) fatal(NULL, "out of memory loading the vocabulary");
    }
    v->tok_off[v->n_tok] = v->bytes.n;
    v->tok_len[v->n_tok] = (uint32_t)n;
    v->tok_id[v->n_tok] = id;
    v->tok_added[v->n_tok] = (uint8_t)added;
    v->n_tok++;
    buf_put(&v->bytes, s, n);
}

static void vs_add_merge(VocabSrc* v, const char* a, size_t na, const char* b, size_t nb, long line) {
    if (v->n_merge == v->cap_merge) {
        v->cap_merge = v->cap_merge ? v->cap_merge * 2 : 1024;
        v->m_off = (size_t*)realloc(v->m_off, 2 * v->cap_merge * sizeof(size_t));
        v->m_len = (uint32_t*)realloc(v->m_len, 2 * v->cap_merge * sizeof(uint32_t));
        v->m_line = (long*)realloc(v->m_line, v->cap_merge * sizeof(long));
        if (!v->m_off || !v->m_len || !v->m_line) fatal(NULL, "out of memory loading the vocabulary");
    }
    size_t k = v->n_merge;
    v->m_off[2 * k] = v->bytes.n; v->m_len[2 * k] = (uint32_t)na; buf_put(&v->bytes, a, na);
    v->m_off[2 * k + 1] = v->bytes.n; v->m_len[2 * k + 1] = (uint32_t)nb; buf_put(&v->bytes, b, nb);
    v->m_line[k] = line;
    v->n_merge++;
}

static void vs_free(VocabSrc* v) {
    free(v->bytes.p); free(v->tok_off); free(v->tok_len); free(v->tok_id); free(v->tok_added);
    free(v->m_off); free(v->m_len); free(v->m_line);
    memset(v, 0, sizeof(*v));
}

// GPT-2's bytes_to_unicode alphabet: printable bytes stand for themselves, the other 68 bytes are
// written as U+0100.. in byte order. unicode_to_byte inverts it (-1: not in the alphabet).
static int unicode_to_byte[324];
static void init_byte_alphabet(void) {
    for (int i = 0; i < 324; i++) unicode_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int u = printable ? b : 256 + extra++;
        unicode_to_byte[u] = b;
    }
}

// Convert a token string in the byte alphabet (UTF-8) to raw bytes in out. Returns 0 if a
// character is not in the alphabet (*bad = that code point).
static int alphabet_to_bytes(const char* s, size_t n, Buf* out, int32_t* bad) {
    out->n = 0;
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        int l = u8_decode((const uint8_t*)s + i, n - i, &cp);
        if (cp < 0 || cp >= 324 || unicode_to_byte[cp] < 0) { *bad = cp; return 0; }
        char b = (char)unicode_to_byte[cp];
        buf_put(out, &b, 1);
        i += (size_t)l;
    }
    return 1;
}

// --- a minimal streaming JSON scanner (the vocabulary files are big flat objects; we only need
// strings, integers and skipping) ---

typedef struct { const char* s; size_t n, i; const char* path; } Js;

__attribute__((noreturn)) static void js_fail(Js* j, const char* what) {
    long line = 1, col = 1;
    for (size_t k = 0; k < j->i && k < j->n; k++) { if (j->s[k] == '\n') { line++; col = 1; } else col++; }
    fatal("the vocabulary file is damaged or not in the expected format; re-download it",
          "'%s': malformed JSON at line %ld, column %ld: %s", j->path, line, col, what);
}
static void js_ws(Js* j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\n' || j->s[j->i] == '\r' || j->s[j->i] == '\t')) j->i++;
}
static int js_peek(Js* j) { js_ws(j); return j->i < j->n ? (unsigned char)j->s[j->i] : -1; }
static void js_expect(Js* j, char c) {
    if (js_peek(j) != (unsigned char)c) {
        char msg[32]; snprintf(msg, sizeof(msg), "expected '%c'", c); js_fail(j, msg);
    }
    j->i++;
}
static int js_hex4(Js* j) {
    if (j->i + 4 > j->n) js_fail(j, "truncated \\u escape");
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = j->s[j->i++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else js_fail(j, "bad hex digit in \\u escape");
    }
    return v;
}
static void put_utf8(Buf* b, int32_t cp) {
    char u[4]; int n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) { u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); n = 3; }
    else { u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4; }
    buf_put(b, u, (size_t)n);
}
// Decode a JSON string into out (UTF-8).
static void js_string(Js* j, Buf* out) {
    out->n = 0;
    js_expect(j, '"');
    for (;;) {
        if (j->i >= j->n) js_fail(j, "unterminated string");
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') { j->i++; return; }
        if (c < 0x20) js_fail(j, "control character inside a string");
        if (c != '\\') {
            size_t k = j->i + 1;
            while (k < j->n && j->s[k] != '"' && j->s[k] != '\\' && (unsigned char)j->s[k] >= 0x20) k++;
            buf_put(out, j->s + j->i, k - j->i);
            j->i = k;
            continue;
        }
        j->i++;
        if (j->i >= j->n) js_fail(j, "unterminated escape");
        char e = j->s[j->i++];
        char ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            int32_t cp = js_hex4(j);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (j->i + 2 > j->n || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u') js_fail(j, "lone UTF-16 surrogate in \\u escape");
                j->i += 2;
                int32_t lo = js_hex4(j);
                if (lo < 0xDC00 || lo > 0xDFFF) js_fail(j, "bad UTF-16 surrogate pair in \\u escape");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                js_fail(j, "lone UTF-16 surrogate in \\u escape");
            }
            put_utf8(out, cp);
            continue;
        }
        default: js_fail(j, "unknown escape in string");
        }
        buf_put(out, &ch, 1);
    }
}
static int64_t js_int(Js* j) {
    js_ws(j);
    size_t st = j->i;
    int neg = 0;
    if (j->i < j->n && j->s[j->i] == '-') { neg = 1; j->i++; }
    int64_t v = 0; int nd = 0;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        if (v > (INT64_MAX - 9) / 10) js_fail(j, "integer too large");
        v = v * 10 + (j->s[j->i++] - '0'); nd++;
    }
    if (!nd || (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))) {
        j->i = st; js_fail(j, "expected an integer token id");
    }
    return neg ? -v : v;
}
// After a member of an object or an element of a list: 1 (the ',' consumed) when another follows,
// 0 (`close` consumed) at its end; anything else is malformed, named by `where` when given.
static int js_more(Js* j, char close, const char* where) {
    int d = js_peek(j);
    if (d == ',') { j->i++; return 1; }
    if (d == close) { j->i++; return 0; }
    char msg[96];
    snprintf(msg, sizeof(msg), "expected ',' or '%c'%s%s", close, where ? " in " : "", where ? where : "");
    js_fail(j, msg);
}
static void js_skip(Js* j, int depth) {
    if (depth > 64) js_fail(j, "nesting too deep");
    int c = js_peek(j);
    if (c == '"') { Buf tmp = {0}; js_string(j, &tmp); free(tmp.p); return; }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->i++;
        if (js_peek(j) == close) { j->i++; return; }
        for (;;) {
            if (c == '{') { Buf tmp = {0}; js_string(j, &tmp); free(tmp.p); js_expect(j, ':'); }
            js_skip(j, depth + 1);
            if (!js_more(j, close, NULL)) return;
        }
    }
    // number or literal
    size_t st = j->i;
    while (j->i < j->n && j->s[j->i] && strchr("+-0123456789.eEtruefalsn", j->s[j->i])) j->i++;
    if (j->i == st) js_fail(j, "unexpected character");
}

// Read a {"token": id, ...} object (encoder.json / vocab.json / tokenizer.json's model.vocab).
static void js_vocab_object(Js* j, VocabSrc* v) {
    Buf key = {0}, raw = {0};
    js_expect(j, '{');
    if (js_peek(j) == '}') { j->i++; free(key.p); free(raw.p); return; }
    for (;;) {
        js_string(j, &key);
        js_expect(j, ':');
        size_t at = j->i;
        int64_t id = js_int(j);
        if (id < 0 || id >= (1 << 24)) { j->i = at; js_fail(j, "token id out of range (0..16777215)"); }
        int32_t bad;
        if (!alphabet_to_bytes(key.p, key.n, &raw, &bad)) {
            fatal("this does not look like a GPT-2 style byte-level BPE vocabulary",
                  "'%s': token id %lld is written with character U+%04X, which is not in the "
                  "byte-level alphabet", j->path, (long long)id, (unsigned)bad);
        }
        vs_add_token(v, raw.p, raw.n, id, 0);
        if (!js_more(j, '}', "the vocabulary object")) break;
    }
    free(key.p); free(raw.p);
}

static void load_vocab_json(const char* path, VocabSrc* v) {
    size_t n;
    char* text = read_file_all(path, &n);
    Js j = {text, n, 0, path};
    js_vocab_object(&j, v);
    if (js_peek(&j) != -1) js_fail(&j, "trailing data after the vocabulary object");
    free(text);
}

// merges.txt / vocab.bpe: an optional "#version" line, then one "a b" merge per line.
static void load_merges_txt(const char* path, VocabSrc* v) {
    size_t n;
    char* text = read_file_all(path, &n);
    Buf a = {0}, b = {0};
    size_t i = 0;
    long line = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && text[e] != '\n') e++;
        line++;
        size_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (!(line == 1 && le - i >= 8 && memcmp(text + i, "#version", 8) == 0) && le > i) {
            const char* sp = (const char*)memchr(text + i, ' ', le - i);
            if (!sp || sp == text + i || sp + 1 == text + le || memchr(sp + 1, ' ', (size_t)(text + le - sp - 1)))
                fatal("each line of a merges file is two tokens separated by one space",
                      "'%s' line %ld: malformed merge rule '%.*s'", path, line, (int)(le - i > 80 ? 80 : le - i), text + i);
            int32_t bad;
            if (!alphabet_to_bytes(text + i, (size_t)(sp - (text + i)), &a, &bad) ||
                !alphabet_to_bytes(sp + 1, (size_t)(text + le - sp - 1), &b, &bad))
                fatal("this does not look like a GPT-2 style byte-level BPE merges file",
                      "'%s' line %ld: character U+%04X is not in the byte-level alphabet", path, line, (unsigned)bad);
            vs_add_merge(v, a.p, a.n, b.p, b.n, line);
        }
        i = e + 1;
    }
    free(a.p); free(b.p); free(text);
}

// tokenizer.json: {"model": {"type": "BPE", "vocab": {...}, "merges": ["a b", ...] or [["a","b"], ...]}, ...}
// Read by one function per part of the file; Tj holds the scanner and the scratch buffers.
typedef struct {
    Js j;
    VocabSrc* v;
    Buf key, s1, s2, r1, r2;
    int have_model, have_vocab, have_merges;
} Tj;

// One merge of model.merges, "a b" or ["a", "b"], the idx-th (1-based).
static void tj_merge(Tj* t, long idx) {
    Js* j = &t->j;
    int c = js_peek(j);
    if (c == '"') { // "a b"
        js_string(j, &t->s1);
        // (an empty string has no buffer yet: t->s1.p may be NULL, which memchr must not get)
        const char* sp = t->s1.n ? (const char*)memchr(t->s1.p, ' ', t->s1.n) : NULL;
        if (!sp || sp == t->s1.p || sp + 1 == t->s1.p + t->s1.n || memchr(sp + 1, ' ', (size_t)(t->s1.p + t->s1.n - sp - 1)))
            js_fail(j, "merge is not two tokens separated by one space");
        size_t la = (size_t)(sp - t->s1.p);
        t->s2.n = 0; buf_put(&t->s2, sp + 1, t->s1.n - la - 1);
        t->s1.n = la;
    } else if (c == '[') { // ["a", "b"]
        j->i++;
        js_string(j, &t->s1);
        js_expect(j, ',');
        js_string(j, &t->s2);
        js_expect(j, ']');
    } else js_fail(j, "a merge must be a string \"a b\" or a pair [\"a\", \"b\"]");
    int32_t bad;
    if (!alphabet_to_bytes(t->s1.p, t->s1.n, &t->r1, &bad) || !alphabet_to_bytes(t->s2.p, t->s2.n, &t->r2, &bad))
        fatal("this does not look like a GPT-2 style byte-level BPE tokenizer",
              "'%s': merge #%ld has character U+%04X, which is not in the byte-level alphabet", j->path, idx, (unsigned)bad);
    vs_add_merge(t->v, t->r1.p, t->r1.n, t->r2.p, t->r2.n, idx);
}

static void tj_merges(Tj* t) {
    Js* j = &t->j;
    t->have_merges = 1;
    js_expect(j, '[');
    if (js_peek(j) == ']') { j->i++; return; }
    for (long idx = 1;; idx++) {
        tj_merge(t, idx);
        if (!js_more(j, ']', "model.merges")) return;
    }
}

// The "model" object: type (BPE only), vocab, merges; other members skipped.
static void tj_model(Tj* t) {
    Js* j = &t->j;
    t->have_model = 1;
    j->i++;
    if (js_peek(j) == '}') { j->i++; return; }
    for (;;) {
        js_string(j, &t->key);
        js_expect(j, ':');
        if (t->key.n == 5 && memcmp(t->key.p, "vocab", 5) == 0) {
            js_vocab_object(j, t->v); t->have_vocab = 1;
        } else if (t->key.n == 6 && memcmp(t->key.p, "merges", 6) == 0) {
            tj_merges(t);
        } else if (t->key.n == 4 && memcmp(t->key.p, "type", 4) == 0 && js_peek(j) == '"') {
            js_string(j, &t->s1);
            if (!(t->s1.n == 3 && memcmp(t->s1.p, "BPE", 3) == 0))
                fatal("only BPE tokenizers (like GPT-2's) are supported",
                      "'%s': model.type is '%.*s', not 'BPE'", j->path, (int)t->s1.n, t->s1.p);
        } else {
            js_skip(j, 1);
        }
        if (!js_more(j, '}', "model")) return;
    }
}

// One entry of added_tokens, {"id": 50256, "content": "<|endoftext|>", ...}: content is plain text.
static void tj_added_token(Tj* t) {
    Js* j = &t->j;
    js_expect(j, '{');
    int64_t id = -1; int have_content = 0;
    if (js_peek(j) == '}') j->i++;
    else for (;;) {
        js_string(j, &t->key);
        js_expect(j, ':');
        if (t->key.n == 2 && memcmp(t->key.p, "id", 2) == 0) {
            size_t at = j->i;
            id = js_int(j);
            if (id < 0 || id >= (1 << 24)) { j->i = at; js_fail(j, "added token id out of range (0..16777215)"); }
        } else if (t->key.n == 7 && memcmp(t->key.p, "content", 7) == 0) {
            js_string(j, &t->s1); have_content = 1;
        } else js_skip(j, 2);
        if (!js_more(j, '}', "an added token")) break;
    }
    if (id < 0 || !have_content || t->s1.n == 0) js_fail(j, "an added token needs an \"id\" and a non-empty \"content\"");
    vs_add_token(t->v, t->s1.p, t->s1.n, id, 1);
}

static void tj_added_tokens(Tj* t) {
    Js* j = &t->j;
    j->i++;
    if (js_peek(j) == ']') { j->i++; return; }
    for (;;) {
        tj_added_token(t);
        if (!js_more(j, ']', "added_tokens")) return;
    }
}

static void load_tokenizer_json(const char* path, VocabSrc* v) {
    size_t n;
    char* text = read_file_all(path, &n);
    Tj t = {{text, n, 0, path}, v, {0}, {0}, {0}, {0}, {0}, 0, 0, 0};
    Js* j = &t.j;
    js_expect(j, '{');
    if (js_peek(j) == '}') j->i++;
    else for (;;) {
        js_string(j, &t.key);
        js_expect(j, ':');
        if (t.key.n == 5 && memcmp(t.key.p, "model", 5) == 0 && js_peek(j) == '{') tj_model(&t);
        else if (t.key.n == 12 && memcmp(t.key.p, "added_tokens", 12) == 0 && js_peek(j) == '[') tj_added_tokens(&t);
        else js_skip(j, 1);
        if (!js_more(j, '}', NULL)) break;
    }
    if (js_peek(j) != -1) js_fail(j, "trailing data after the top-level object");
    free(t.key.p); free(t.s1.p); free(t.s2.p); free(t.r1.p); free(t.r2.p); free(text);
    if (!t.have_model || !t.have_vocab || !t.have_merges)
        fatal("expected a Hugging Face tokenizer.json with model.vocab and model.merges",
              "'%s': no %s found", path, !t.have_model ? "\"model\" object" : !t.have_vocab ? "model.vocab" : "model.merges");
}

// The token table: every id's bytes in one blob, and the hash map from bytes to id. Vocabulary
// entries first, then added tokens (tokenizer.json), which may repeat one of them.
static void build_tokens(Tokenizer* t, const VocabSrc* v, const char* vocab_path) {
    int64_t max_id = -1;
    for (size_t k = 0; k < v->n_tok; k++) if (v->tok_id[k] > max_id) max_id = v->tok_id[k];
    if (v->n_tok == 0) fatal("the vocabulary file is empty or damaged", "'%s': no tokens", vocab_path);
    t->vocab_size = (int)(max_id + 1);
    size_t V = (size_t)t->vocab_size;
    t->tok_off = (uint32_t*)callocCheck(V, sizeof(uint32_t));
    t->tok_len = (uint32_t*)callocCheck(V, sizeof(uint32_t));
    uint8_t* seen = (uint8_t*)callocCheck(V, 1);
    t->blob = (char*)mallocCheck(v->bytes.n + 1);
    size_t cap = 1;
    while (cap < 4 * V) cap *= 2;
    t->map = (uint64_t*)callocCheck(cap, sizeof(uint64_t));
    t->map_mask = cap - 1;
    size_t boff = 0;
    for (int pass = 0; pass < 2; pass++) for (size_t k = 0; k < v->n_tok; k++) {
        if (v->tok_added[k] != pass) continue;
        int id = (int)v->tok_id[k];
        size_t n = v->tok_len[k];
        // refused before its bytes are looked at: with only empty tokens, v->bytes is still NULL
        if (n == 0) fatal("the vocabulary file is damaged", "'%s': token id %d is an empty string", vocab_path, id);
        const char* s = v->bytes.p + v->tok_off[k];
        if (seen[id]) {
            if (pass == 1 && t->tok_len[id] == n && memcmp(t->blob + t->tok_off[id], s, n) == 0) continue;
            fatal("the vocabulary file is damaged", "'%s': token id %d appears twice%s", vocab_path, id,
                  pass ? " (added_tokens gives it another text than model.vocab)" : "");
        }
        seen[id] = 1;
        memcpy(t->blob + boff, s, n);
        t->tok_off[id] = (uint32_t)boff;
        t->tok_len[id] = (uint32_t)n;
        boff += n;
        int other = map_find(t, s, n);
        if (other >= 0) fatal("the vocabulary file is damaged", "'%s': token ids %d and %d have the same text", vocab_path, other, id);
        uint64_t h = hash_bytes(s, n);
        size_t i = (size_t)h & t->map_mask;
        while (t->map[i]) i = (i + 1) & t->map_mask;
        t->map[i] = ((h >> 32) << 32) | ((uint64_t)id + 1);
    }
    free(seen);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = map_find(t, &c, 1);
        if (t->byte_id[b] < 0)
            fatal("a byte-level BPE vocabulary has a token for each of the 256 bytes",
                  "'%s': no token for byte 0x%02X", vocab_path, b);
    }
}

// The merge rank of every token a merge produces (the first, lowest rank wins); -1 for the others.
static void build_ranks(Tokenizer* t, const VocabSrc* v, const char* vocab_path, const char* merges_path) {
    t->rank = (int32_t*)mallocCheck((size_t)t->vocab_size * sizeof(int32_t));
    for (int k = 0; k < t->vocab_size; k++) t->rank[k] = -1;
    const char* where = strstr(merges_path, ".json") ? "merge #" : "line ";
    Buf cat = {0};
    for (size_t k = 0; k < v->n_merge; k++) {
        const char* a = v->bytes.p + v->m_off[2 * k];
        const char* b = v->bytes.p + v->m_off[2 * k + 1];
        size_t na = v->m_len[2 * k], nb = v->m_len[2 * k + 1];
        if (map_find(t, a, na) < 0 || map_find(t, b, nb) < 0)
            fatal("the merges file does not belong to this vocabulary file",
                  "'%s' %s%ld: a side of the merge is not a token of '%s'", merges_path, where, v->m_line[k], vocab_path);
        cat.n = 0; buf_put(&cat, a, na); buf_put(&cat, b, nb);
        int id = map_find(t, cat.p, cat.n);
        if (id < 0)
            fatal("the merges file does not belong to this vocabulary file",
                  "'%s' %s%ld: the merged token is not in '%s'", merges_path, where, v->m_line[k], vocab_path);
        if (k >= INT32_MAX) fatal(NULL, "'%s': too many merges", merges_path);
        if (t->rank[id] < 0) t->rank[id] = (int32_t)k;
    }
    free(cat.p);
}

// Specials: multi-byte tokens no merge produces, spelled <|...|> (GPT-2: <|endoftext|>).
static void build_specials(Tokenizer* t) {
    int cap_sp = 8;
    t->special_ids = (int*)mallocCheck(sizeof(int) * (size_t)cap_sp);
    t->n_special = 0;
    t->eot_id = -1;
    for (size_t id = 0; id < (size_t)t->vocab_size; id++) {
        size_t n = t->tok_len[id];
        const char* s = t->blob + t->tok_off[id];
        if (n < 5 || t->rank[id] >= 0 || memcmp(s, "<|", 2) != 0 || memcmp(s + n - 2, "|>", 2) != 0) continue;
        if (t->n_special == cap_sp) {
            cap_sp *= 2;
            t->special_ids = (int*)realloc(t->special_ids, sizeof(int) * (size_t)cap_sp);
            if (!t->special_ids) fatal(NULL, "out of memory");
        }
        t->special_ids[t->n_special++] = (int)id;
        if (n == 13 && memcmp(s, "<|endoftext|>", 13) == 0) t->eot_id = (int)id;
    }
}

// Turn the loaded lists into the tokenizer's tables.
static void build(Tokenizer* t, VocabSrc* v, const char* vocab_path, const char* merges_path) {
    build_tokens(t, v, vocab_path);
    build_ranks(t, v, vocab_path, merges_path);
    build_specials(t);
}

static int ends_with(const char* s, const char* suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static void load_pair(Tokenizer* t, const char* vocab_path, const char* merges_path) {
    VocabSrc v = {0};
    load_vocab_json(vocab_path, &v);
    load_merges_txt(merges_path, &v);
    build(t, &v, vocab_path, merges_path);
    vs_free(&v);
    // a name for messages: each path cut at 2000 characters so that both fit
    snprintf(t->source, sizeof(t->source), "%.2000s + %.2000s", vocab_path, merges_path);
}

static void load_tokjson(Tokenizer* t, const char* path) {
    VocabSrc v = {0};
    load_tokenizer_json(path, &v);
    build(t, &v, path, path);
    vs_free(&v);
    snprintf(t->source, sizeof(t->source), "%s", path);
}

#define VOCAB_HINT "pass the directory holding GPT-2's encoder.json + vocab.bpe (bundled in data/gpt2/), " \
                   "or a Hugging Face model directory with vocab.json + merges.txt or tokenizer.json"

// Why path holds no vocabulary (vocab_files found none), as one message.
__attribute__((noreturn)) static void tok_vocab_fatal(const char* path) {
    static const char* pairs[2][2] = {{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    char a[LLMC_PATH_MAX], b[LLMC_PATH_MAX];
    if (dir_exists(path)) {
        for (int p = 0; p < 2; p++) { // one half of a pair: say which half is missing
            path_join(a, sizeof(a), path, pairs[p][0]);
            path_join(b, sizeof(b), path, pairs[p][1]);
            if (file_exists(a) != file_exists(b))
                fatal(VOCAB_HINT, "vocabulary incomplete: found '%s' but not '%s'",
                      file_exists(a) ? a : b, file_exists(a) ? b : a);
        }
        fatal(VOCAB_HINT, "vocabulary not found: looked for encoder.json+vocab.bpe, vocab.json+merges.txt, "
              "tokenizer.json in '%s'", path);
    }
    if (!file_exists(path))
        fatal(VOCAB_HINT, "vocabulary not found: '%s' is neither a file nor a directory", path);
    // a single file that is not tokenizer.json: one half of a pair without its partner next to it
    int is_merges = ends_with(path, ".bpe") || ends_with(path, ".txt");
    if (!is_merges && !ends_with(path, ".json"))
        fatal(VOCAB_HINT, "'%s': not a vocabulary file (expected encoder.json, vocab.json, vocab.bpe, "
              "merges.txt or tokenizer.json)", path);
    fatal(VOCAB_HINT, "vocabulary incomplete: '%s' needs %s or %s next to it", path,
          pairs[0][is_merges ? 0 : 1], pairs[1][is_merges ? 0 : 1]);
}

void tok_load(Tokenizer* t, const char* path) {
    memset(t, 0, sizeof(*t));
    init_byte_alphabet();
    init_ascii_cls();
    VocabFiles f;   // which files, found as llmc/text/vocab.c finds them for every other reader
    if (vocab_files(path, &f) != 0) tok_vocab_fatal(path);
    if (f.tokenizer_json[0]) load_tokjson(t, f.tokenizer_json);
    else load_pair(t, f.vocab, f.merges);
}

// ----------------------------------------------------------------------------------------------
// BPE on one piece

typedef struct { int32_t rank; uint32_t pos, end; } HeapEnt;

// One cache slot: the piece's hash (0 = empty), where its bytes are, and its ids (inline when
// there is just one, which is most words). One slot fits in one load, so a hit costs one or two
// cache-line reads plus a short memcmp.
typedef struct {
    uint64_t hash;
    uint32_t key_off;
    uint16_t key_len, val_n;
    uint32_t val;        // the id if val_n == 1, else the offset of the ids in vals
} CacheEnt;

struct TokCache {
    // piece -> ids, open addressing, grown by doubling up to CACHE_MAX_SLOTS, then cleared
    // wholesale when full (simple, and the working set of common words refills quickly).
    CacheEnt* ent;
    size_t mask, count;
    Buf keys;            // piece bytes
    int* vals; size_t nvals, cap_vals;
    uint64_t hits, misses;
    size_t max_slots;
    // scratch for the merge loop
    uint32_t* next; uint32_t* prev; uint8_t* alive;
    HeapEnt* heap; size_t cap_piece, cap_heap;
};

#define CACHE_MIN_SLOTS (1u << 14)  // the smallest limit tok_cache_limit sets
#define CACHE_START_SLOTS (1u << 10) // grown by doubling: a short text or a small vocabulary stays cheap
#define CACHE_MAX_SLOTS (1u << 22)
#define CACHE_MAX_PIECE 256
#define CACHE_MAX_KEYS (64u << 20)
#define CACHE_MAX_VALS (16u << 20)

static TokCache* cache_get(Tokenizer* t) {
    if (t->cache) return t->cache;
    TokCache* c = (TokCache*)callocCheck(1, sizeof(TokCache));
    c->ent = (CacheEnt*)callocCheck(CACHE_START_SLOTS, sizeof(CacheEnt));
    c->mask = CACHE_START_SLOTS - 1;
    c->max_slots = CACHE_MAX_SLOTS;
    c->cap_vals = 1 << 10;
    c->vals = (int*)mallocCheck(c->cap_vals * sizeof(int));
    t->cache = c;
    return c;
}

static void cache_clear(TokCache* c) {
    memset(c->ent, 0, (c->mask + 1) * sizeof(CacheEnt));
    c->count = 0; c->keys.n = 0; c->nvals = 0;
}

// Double the table (same entries, rehashed), or clear it once it is at its largest.
static void cache_make_room(TokCache* c, size_t key_len, size_t nv) {
    if (c->keys.n + key_len > CACHE_MAX_KEYS || c->nvals + nv > CACHE_MAX_VALS) { cache_clear(c); return; }
    if (c->count + 1 <= ((c->mask + 1) / 4) * 3) return;
    size_t slots = c->mask + 1;
    if (slots >= c->max_slots) { cache_clear(c); return; }
    CacheEnt* old = c->ent;
    c->ent = (CacheEnt*)callocCheck(2 * slots, sizeof(CacheEnt));
    c->mask = 2 * slots - 1;
    for (size_t i = 0; i < slots; i++) {
        if (!old[i].hash) continue;
        size_t j = (size_t)old[i].hash & c->mask;
        while (c->ent[j].hash) j = (j + 1) & c->mask;
        c->ent[j] = old[i];
    }
    free(old);
}

static inline int heap_less(const HeapEnt* a, const HeapEnt* b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}
static void heap_push(TokCache* c, size_t* hn, HeapEnt e) {
    size_t i = (*hn)++;
    HeapEnt* h = c->heap;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p]; i = p;
    }
    h[i] = e;
}
static HeapEnt heap_pop(TokCache* c, size_t* hn) {
    HeapEnt* h = c->heap;
    HeapEnt top = h[0], e = h[--(*hn)];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = (l + 1 < n && heap_less(&h[l + 1], &h[l])) ? l + 1 : l;
        if (!heap_less(&h[m], &e)) break;
        h[i] = h[m]; i = m;
    }
    if (n) h[i] = e;
    return top;
}

// Merge the piece p[0..n) and append its ids. The parts are identified by their start offset;
// next[i] is the start of the part after the one starting at i (n for the last). A heap holds
// every adjacent pair with its merge rank; an entry is stale once its left part died or the
// right end of the pair moved, and is then skipped. Popping (rank, position) in order gives
// the lowest rank, leftmost first, which is the order tiktoken merges in.
static void bpe_piece(Tokenizer* t, TokCache* c, const char* p, uint32_t n, TokIds* out) {
    if (n + 1 > c->cap_piece) {
        c->cap_piece = (size_t)n + 64;
        free(c->next); free(c->prev); free(c->alive); free(c->heap);
        c->next = (uint32_t*)mallocCheck(c->cap_piece * sizeof(uint32_t));
        c->prev = (uint32_t*)mallocCheck(c->cap_piece * sizeof(uint32_t));
        c->alive = (uint8_t*)mallocCheck(c->cap_piece);
        c->cap_heap = 3 * c->cap_piece;
        c->heap = (HeapEnt*)mallocCheck(c->cap_heap * sizeof(HeapEnt));
    }
    uint32_t* next = c->next; uint32_t* prev = c->prev; uint8_t* alive = c->alive;
    size_t hn = 0;
    for (uint32_t i = 0; i < n; i++) { next[i] = i + 1; prev[i] = i ? i - 1 : UINT32_MAX; alive[i] = 1; }
    for (uint32_t i = 0; i + 1 < n; i++) {
        int32_t r = rank_of(t, p + i, 2);
        if (r >= 0) heap_push(c, &hn, (HeapEnt){r, i, i + 2});
    }
    while (hn) {
        HeapEnt e = heap_pop(c, &hn);
        uint32_t i = e.pos;
        if (!alive[i] || next[i] >= n || next[next[i]] != e.end) continue; // stale
        uint32_t j = next[i];
        alive[j] = 0;
        next[i] = next[j];
        if (next[i] < n) prev[next[i]] = i;
        if (hn + 2 > c->cap_heap) { // cannot happen (each merge pushes <= 2, kills >= 1), but be safe
            c->cap_heap *= 2;
            c->heap = (HeapEnt*)realloc(c->heap, c->cap_heap * sizeof(HeapEnt));
            if (!c->heap) fatal(NULL, "out of memory in the tokenizer");
        }
        if (prev[i] != UINT32_MAX) {
            uint32_t a = prev[i];
            int32_t r = rank_of(t, p + a, next[i] - a);
            if (r >= 0) heap_push(c, &hn, (HeapEnt){r, a, next[i]});
        }
        if (next[i] < n) {
            uint32_t end = next[next[i]];
            int32_t r = rank_of(t, p + i, end - i);
            if (r >= 0) heap_push(c, &hn, (HeapEnt){r, i, end});
        }
    }
    for (uint32_t i = 0; i < n; i = next[i]) {
        int id = map_find(t, p + i, next[i] - i);
        assertCheck(id >= 0);
        tokids_push(out, id);
    }
}

static void encode_piece(Tokenizer* t, const char* p, size_t n, TokIds* out) {
    if (n == 1) { tokids_push(out, t->byte_id[(uint8_t)p[0]]); return; }
    TokCache* c = cache_get(t);
    uint64_t h = 0;
    if (n <= CACHE_MAX_PIECE) {
        h = hash_bytes(p, n) | 1; // never 0 (0 marks an empty slot)
        size_t slot = (size_t)h & c->mask;
        for (;;) {
            const CacheEnt* e = &c->ent[slot];
            if (!e->hash) break;
            if (e->hash == h && e->key_len == n && memcmp(c->keys.p + e->key_off, p, n) == 0) {
                c->hits++;
                if (e->val_n == 1) tokids_push(out, (int)e->val);
                else for (uint32_t k = 0; k < e->val_n; k++) tokids_push(out, c->vals[e->val + k]);
                return;
            }
            slot = (slot + 1) & c->mask;
        }
    }
    c->misses++;
    size_t before = out->n;
    // A piece that is itself a token is emitted as is (tiktoken does the same).
    int whole = map_find(t, p, n);
    if (whole >= 0 && t->rank[whole] >= 0) tokids_push(out, whole);
    else bpe_piece(t, c, p, (uint32_t)n, out);
    if (n > CACHE_MAX_PIECE) return;
    size_t nv = out->n - before; // <= n <= CACHE_MAX_PIECE, fits uint16
    cache_make_room(c, n, nv);
    size_t slot = (size_t)h & c->mask;
    while (c->ent[slot].hash) slot = (slot + 1) & c->mask;
    CacheEnt* e = &c->ent[slot];
    e->hash = h;
    e->key_off = (uint32_t)c->keys.n; e->key_len = (uint16_t)n; e->val_n = (uint16_t)nv;
    buf_put(&c->keys, p, n);
    if (nv == 1) {
        e->val = (uint32_t)out->ids[before];
    } else {
        if (c->nvals + nv > c->cap_vals) {
            while (c->nvals + nv > c->cap_vals) c->cap_vals *= 2;
            c->vals = (int*)realloc(c->vals, c->cap_vals * sizeof(int));
            if (!c->vals) fatal(NULL, "out of memory in the tokenizer cache");
        }
        e->val = (uint32_t)c->nvals;
        memcpy(c->vals + c->nvals, out->ids + before, nv * sizeof(int));
        c->nvals += nv;
    }
    c->count++;
}

static void encode_ordinary(Tokenizer* t, const char* text, size_t len, TokIds* out) {
    size_t pos = 0;
    while (pos < len) {
        size_t e = tok_next_piece(text, len, pos);
        encode_piece(t, text + pos, e - pos, out);
        pos = e;
    }
}

void tok_encode_append(Tokenizer* t, const char* text, size_t len, int allow_special, TokIds* out) {
    if (!allow_special || t->n_special == 0) { encode_ordinary(t, text, len, out); return; }
    // Special tokens cut the text; the pieces between them are encoded on their own.
    size_t start = 0, i = 0;
    while (i + 1 < len) {
        const char* hit = (const char*)memchr(text + i, '<', len - i - 1);
        if (!hit) break;
        i = (size_t)(hit - text);
        int found = -1;
        if (text[i + 1] == '|') {
            for (int k = 0; k < t->n_special; k++) {
                int id = t->special_ids[k];
                size_t n = t->tok_len[id];
                if (i + n <= len && memcmp(text + i, t->blob + t->tok_off[id], n) == 0) { found = id; break; }
            }
        }
        if (found < 0) { i++; continue; }
        encode_ordinary(t, text + start, i - start, out);
        tokids_push(out, found);
        i += t->tok_len[found];
        start = i;
    }
    encode_ordinary(t, text + start, len - start, out);
}

void tok_encode(Tokenizer* t, const char* text, size_t len, int allow_special, int** ids, size_t* n) {
    TokIds v = {0};
    tok_encode_append(t, text, len, allow_special, &v);
    if (!v.ids) v.ids = (int*)mallocCheck(sizeof(int)); // a valid pointer even for no tokens
    *ids = v.ids;
    *n = v.n;
}

// ----------------------------------------------------------------------------------------------
// decode

const char* tok_token_bytes(const Tokenizer* t, int id, size_t* len) {
    if (id < 0 || id >= t->vocab_size || t->tok_len[id] == 0)
        fatal("token ids must be below the vocabulary size (50257 for GPT-2); padded-vocabulary "
              "rows are never valid tokens", "token id %d is not in the vocabulary (%s)", id, t->source);
    *len = t->tok_len[id];
    return t->blob + t->tok_off[id];
}

char* tok_decode(const Tokenizer* t, const int* ids, size_t n, size_t* out_len) {
    size_t total = 0, len;
    for (size_t i = 0; i < n; i++) { tok_token_bytes(t, ids[i], &len); total += len; }
    char* s = (char*)mallocCheck(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char* b = tok_token_bytes(t, ids[i], &len);
        memcpy(s + o, b, len);
        o += len;
    }
    s[o] = '\0';
    if (out_len) *out_len = o;
    return s;
}

void tok_cache_limit(Tokenizer* t, size_t max_slots) {
    TokCache* c = cache_get(t);
    size_t m = CACHE_MIN_SLOTS;
    while (m < max_slots && m < CACHE_MAX_SLOTS) m *= 2;
    c->max_slots = m;
}

void tok_cache_stats(const Tokenizer* t, uint64_t* hits, uint64_t* misses) {
    *hits = t->cache ? t->cache->hits : 0;
    *misses = t->cache ? t->cache->misses : 0;
}

void tok_free(Tokenizer* t) {
    free(t->blob); free(t->tok_off); free(t->tok_len); free(t->rank); free(t->map); free(t->special_ids);
    TokCache* c = t->cache;
    if (c) {
        free(c->ent); free(c->keys.p); free(c->vals); free(c->next); free(c->prev); free(c->alive); free(c->heap);
        free(c);
    }
    memset(t, 0, sizeof(*t));
}
