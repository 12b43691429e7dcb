// Tokenizer tests. References come from tiktoken (dev/gen_tokenizer_ref.py), built offline from
// the same data/gpt2 vocabulary files:
//   - all of tinyshakespeare must encode to exactly tiktoken's ids (test/ref/tok_shakespeare.u16)
//   - every Unicode stress case must encode to exactly tiktoken's ids (test/ref/tok_stress*)
//   - every code point must be classified (letter / number / whitespace / other) exactly as
//     tiktoken's pattern does (test/ref/tok_unicode_classes.txt)
//   - decode(encode(x)) == x for all of these plus invalid UTF-8 and random bytes
//   - the Hugging Face layouts (vocab.json + merges.txt, tokenizer.json with both merge forms),
//     written here from the bundled files, give the same ids
#include "text/tokenizer.h"
#include "base/fileio.h"
#include "base/check.h"
#include "../test/test.h"
#include "../test/test_child.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char* build_dir(void) { const char* b = getenv("BUILD"); return b && *b ? b : "build"; }

static int ids_equal(const int* a, size_t na, const int* b, size_t nb, const char* what) {
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i]) {
            fprintf(stderr, "  %s: first difference at token %zu: got %d want %d\n", what, i, a[i], b[i]);
            return 0;
        }
    }
    if (na != nb) { fprintf(stderr, "  %s: got %zu tokens, want %zu\n", what, na, nb); return 0; }
    return 1;
}

static int roundtrip(Tokenizer* t, const char* s, size_t n, int allow_special) {
    int* ids; size_t nid;
    tok_encode(t, s, n, allow_special, &ids, &nid);
    size_t m;
    char* back = tok_decode(t, ids, nid, &m);
    // pieces must tile the text too
    size_t pos = 0, pieces_ok = 1;
    while (pos < n) { size_t e = tok_next_piece(s, n, pos); if (e <= pos || e > n) { pieces_ok = 0; break; } pos = e; }
    int ok = m == n && memcmp(back, s, n) == 0 && pieces_ok;
    free(ids); free(back);
    return ok;
}

typedef struct { char* text; size_t len; int special; int* ids; size_t nids; } Case;

static int load_stress(Case** out) {
    size_t n, m;
    char* s = read_file_all("test/ref/tok_stress.txt", &n);
    char* idt = read_file_all("test/ref/tok_stress_ids.txt", &m);
    int cap = 64, nc = 0;
    Case* cs = (Case*)calloc((size_t)cap, sizeof(Case));
    size_t i = 0;
    char* ip = idt;
    while (i < n) {
        size_t len; char kind[32];
        if (sscanf(s + i, "#case %zu %31s", &len, kind) != 2) { fprintf(stderr, "bad stress header at %zu\n", i); exit(1); }
        char* nl = (char*)memchr(s + i, '\n', n - i);
        i = (size_t)(nl - s) + 1;
        if (nc == cap) { cap *= 2; cs = (Case*)realloc(cs, (size_t)cap * sizeof(Case)); }
        Case* c = &cs[nc++];
        c->text = (char*)malloc(len + 1);
        memcpy(c->text, s + i, len); c->text[len] = 0;
        c->len = len;
        c->special = strcmp(kind, "special") == 0;
        i += len + 1;
        char* end;
        c->nids = strtoul(ip, &end, 10); ip = end;
        c->ids = (int*)malloc((c->nids + 1) * sizeof(int));
        for (size_t k = 0; k < c->nids; k++) { c->ids[k] = (int)strtol(ip, &end, 10); ip = end; }
    }
    free(s); free(idt);
    *out = cs;
    return nc;
}

static void write_text(const char* path, const char* s, size_t n) { atomic_write_file(path, s, n); }

// JSON-escape s[0..n) (a token string of the byte alphabet: valid UTF-8) into b.
static void json_escape(char** b, size_t* bn, size_t* bcap, const char* s, size_t n) {
    if (*bn + 2 * n + 8 > *bcap) { *bcap = 2 * (*bcap + 2 * n + 8); *b = (char*)realloc(*b, *bcap); }
    char* o = *b + *bn;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) { if (s[i] == '"' || s[i] == '\\') *o++ = '\\'; *o++ = s[i]; }
    *o++ = '"';
    *bn = (size_t)(o - *b);
}
static void append(char** b, size_t* bn, size_t* bcap, const char* s) {
    size_t n = strlen(s);
    if (*bn + n + 1 > *bcap) { *bcap = 2 * (*bcap + n + 1); *b = (char*)realloc(*b, *bcap); }
    memcpy(*b + *bn, s, n); *bn += n;
}

// Build a tokenizer.json from encoder.json + vocab.bpe: merges as "a b" strings or ["a","b"] pairs.
static void write_tokenizer_json(const char* path, int pairs) {
    // the pairs variant also carries an added token that model.vocab lacks
    const char* extra = pairs ? ", {\"id\": 50257, \"content\": \"<|im_start|>\", \"special\": true}" : "";
    size_t ne, nm;
    char* enc = read_file_all("data/gpt2/encoder.json", &ne);
    char* mer = read_file_all("data/gpt2/vocab.bpe", &nm);
    char* b = NULL; size_t bn = 0, bcap = 0;
    append(&b, &bn, &bcap, "{\"version\": \"1.0\", \"truncation\": null, \"added_tokens\": [{\"id\": 50256, "
           "\"content\": \"<|endoftext|>\", \"special\": true}");
    append(&b, &bn, &bcap, extra);
    append(&b, &bn, &bcap, "], \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
           "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n\"model\": {\"type\": \"BPE\", "
           "\"dropout\": null, \"unk_token\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": ");
    // encoder.json's text is already a JSON object: embed it as is
    if (bn + ne + 1 > bcap) { bcap = bn + ne + 1024; b = (char*)realloc(b, bcap); }
    memcpy(b + bn, enc, ne); bn += ne;
    append(&b, &bn, &bcap, ", \"merges\": [");
    size_t i = 0; int first = 1;
    while (i < nm) {
        char* nl = (char*)memchr(mer + i, '\n', nm - i);
        size_t e = nl ? (size_t)(nl - mer) : nm;
        if (e > i && !(i == 0 && memcmp(mer, "#version", 8) == 0)) {
            if (!first) append(&b, &bn, &bcap, ",\n");
            first = 0;
            char* sp = (char*)memchr(mer + i, ' ', e - i);
            if (pairs) {
                append(&b, &bn, &bcap, "[");
                json_escape(&b, &bn, &bcap, mer + i, (size_t)(sp - (mer + i)));
                append(&b, &bn, &bcap, ", ");
                json_escape(&b, &bn, &bcap, sp + 1, e - (size_t)(sp + 1 - mer));
                append(&b, &bn, &bcap, "]");
            } else {
                json_escape(&b, &bn, &bcap, mer + i, e - i);
            }
        }
        i = e + 1;
    }
    append(&b, &bn, &bcap, "]}, \"decoder\": {\"type\": \"ByteLevel\"}}\n");
    write_text(path, b, bn);
    free(b); free(enc); free(mer);
}

static void decode_bad_id(void* arg) {
    int id = 50257; // a padded-vocabulary row: never a token
    char* s = tok_decode((const Tokenizer*)arg, &id, 1, NULL);
    free(s);
}

static TestRng g_rng = { 0x9E3779B97F4A7C15ULL, 0 };
static uint32_t rnd(void) { return (uint32_t)(test_rand_u64(&g_rng) >> 32); }

int main(void) {
    Tokenizer tok;
    tok_load(&tok, "data/gpt2");
    TEST_CHECK(tok.vocab_size == 50257, "vocab_size %d", tok.vocab_size);
    TEST_CHECK(tok.eot_id == 50256, "eot_id %d", tok.eot_id);
    TEST_CHECK(tok.n_special == 1, "%d special tokens", tok.n_special);

    // --- Unicode classes: every code point against tiktoken's pattern
    {
        size_t n;
        char* s = read_file_all("test/ref/tok_unicode_classes.txt", &n);
        int32_t starts[4096]; int cls[4096]; int nr = 0;
        char* p = strchr(s, '\n') + 1; // skip the comment line
        while (*p && nr < 4096) {
            char* end;
            starts[nr] = (int32_t)strtol(p, &end, 16);
            cls[nr] = (int)strtol(end, &end, 10);
            nr++;
            p = end; while (*p == '\n') p++;
        }
        free(s);
        long bad = 0, tested = 0; int32_t first_bad = -1;
        for (int r = 0; r < nr; r++) {
            int32_t hi = r + 1 < nr ? starts[r + 1] : 0x110000;
            if (cls[r] < 0) continue;
            for (int32_t cp = starts[r]; cp < hi; cp++) {
                tested++;
                if (tok_codepoint_class(cp) != cls[r]) { if (first_bad < 0) first_bad = cp; bad++; }
            }
        }
        TEST_CHECK(tested > 1100000 && bad == 0, "%ld of %ld code points classified differently from tiktoken (first U+%04X)",
                   bad, tested, (unsigned)first_bad);
        printf("ok   unicode classes: %ld code points match tiktoken's pattern\n", tested);
    }

    // --- tinyshakespeare: exact ids
    size_t text_len, ref_bytes;
    char* text = read_file_all("data/tinyshakespeare.txt", &text_len);
    char* ref_raw = read_file_all("test/ref/tok_shakespeare.u16", &ref_bytes);
    size_t nref = ref_bytes / 2;
    int* ref = (int*)malloc(nref * sizeof(int));
    for (size_t i = 0; i < nref; i++) ref[i] = (uint8_t)ref_raw[2 * i] | ((uint8_t)ref_raw[2 * i + 1] << 8);
    free(ref_raw);
    int* ids; size_t nids;
    tok_encode(&tok, text, text_len, 0, &ids, &nids);
    TEST_CHECK(ids_equal(ids, nids, ref, nref, "tinyshakespeare"), "tinyshakespeare ids differ from tiktoken");
    printf("ok   tinyshakespeare: %zu tokens identical to tiktoken\n", nids);
    free(ids);
    // again, now answered from the piece cache
    tok_encode(&tok, text, text_len, 0, &ids, &nids);
    TEST_CHECK(ids_equal(ids, nids, ref, nref, "tinyshakespeare (cached)"), "cached encode differs");
    size_t m;
    {
        // a small cache that fills up and is cleared many times on the way gives the same ids
        Tokenizer t3;
        tok_load(&t3, "data/gpt2");
        tok_cache_limit(&t3, 1);
        int* ids3; size_t n3;
        tok_encode(&t3, text, text_len, 0, &ids3, &n3);
        uint64_t hits, misses;
        tok_cache_stats(&t3, &hits, &misses);
        TEST_CHECK(ids_equal(ids3, n3, ref, nref, "tinyshakespeare (small cache)") && misses > 15030,
                   "small-cache encode differs (misses %llu)", (unsigned long long)misses);
        free(ids3);
        tok_free(&t3);
    }
    char* back = tok_decode(&tok, ids, nids, &m);
    TEST_CHECK(m == text_len && memcmp(back, text, m) == 0, "decode(encode(shakespeare)) != shakespeare");
    free(back); free(ids);

    // --- stress cases
    Case* cs;
    int nc = load_stress(&cs);
    int stress_bad = 0;
    for (int c = 0; c < nc; c++) {
        tok_encode(&tok, cs[c].text, cs[c].len, cs[c].special, &ids, &nids);
        char what[64]; snprintf(what, sizeof(what), "stress case %d", c);
        if (!ids_equal(ids, nids, cs[c].ids, cs[c].nids, what)) {
            stress_bad++;
            fprintf(stderr, "  case %d text: %.80s\n", c, cs[c].text);
        }
        free(ids);
        TEST_CHECK(roundtrip(&tok, cs[c].text, cs[c].len, cs[c].special), "roundtrip of stress case %d", c);
        TEST_CHECK(roundtrip(&tok, cs[c].text, cs[c].len, !cs[c].special), "roundtrip of stress case %d (other special mode)", c);
    }
    TEST_CHECK(nc >= 40 && stress_bad == 0, "%d of %d stress cases differ from tiktoken", stress_bad, nc);
    printf("ok   %d Unicode stress cases identical to tiktoken\n", nc);

    // --- special token handling
    {
        const char* s = "a<|endoftext|>b";
        tok_encode(&tok, s, strlen(s), 1, &ids, &nids);
        TEST_CHECK(nids == 3 && ids[1] == 50256, "allow_special: %zu ids", nids);
        free(ids);
        tok_encode(&tok, s, strlen(s), 0, &ids, &nids);
        int has_eot = 0;
        for (size_t i = 0; i < nids; i++) has_eot |= ids[i] == 50256;
        TEST_CHECK(nids > 3 && !has_eot, "without allow_special the text must not become <|endoftext|>");
        free(ids);
        int eot = 50256;
        back = tok_decode(&tok, &eot, 1, &m);
        TEST_CHECK(m == 13 && memcmp(back, "<|endoftext|>", 13) == 0, "decode(50256)");
        free(back);
    }

    {
        static const char* const want[] = {"token id 50257 is not in the vocabulary", NULL};
        TEST_CHECK(test_expect_fatal("decode of an id past the vocabulary", decode_bad_id, &tok, want), "decode(50257)");
    }

    // --- invalid UTF-8 and random bytes survive encode -> decode
    {
        static const char* invalid[] = {
            "\xff", "\xfe\xff", "abc\x80" "def", "\xc3", "\xc3(", "\xe2\x82", "\xe2\x82(x", "\xf0\x9f\x98",
            "\xf0\x9f\x98 end", "\xed\xa0\x80 surrogate", "\xc0\xaf overlong", "\xe0\x80\xaf", "\xf4\x90\x80\x80 >10FFFF",
            "\xf8\x88\x80\x80\x80", " \xff\xff ", "'\xff's", "word\xffword", "123\x80" "456", "\n\xff\n", "\x80\x80\x80\x80",
            "\xc2\xa0\xc2", "caf\xc3\xa9\xc3", "\xe3\x80\x80\xe3\x80", "<|endoftext|\xff>",
        };
        int nbad = 0;
        for (size_t k = 0; k < sizeof(invalid) / sizeof(invalid[0]); k++)
            for (int sp = 0; sp < 2; sp++)
                if (!roundtrip(&tok, invalid[k], strlen(invalid[k]), sp)) { nbad++; fprintf(stderr, "  invalid case %zu\n", k); }
        // embedded NUL bytes
        if (!roundtrip(&tok, "a\0b\0\0 c", 7, 0)) nbad++;
        TEST_CHECK(nbad == 0, "%d invalid UTF-8 cases do not round-trip", nbad);
        static const char* frags[] = {"a", "Z", "7", " ", "\n", "\t", "'", "s", "'s", "\xc3\xa9", "\xe4\xb8\xad",
                                      "\xf0\x9f\x98\x80", "\xe2\x80\x8d", "\xc2\xa0", "\xe3\x80\x80", "!", "<|endoftext|>",
                                      "\xff", "\x80", "\xe2", "\xf0\x9f", "\r\n", "\xd9\xa3"};
        int nf = (int)(sizeof(frags) / sizeof(frags[0]));
        char buf[2048];
        int rbad = 0;
        for (int it = 0; it < 3000; it++) {
            size_t n = 0;
            int mode = it % 3;
            size_t target = rnd() % 400;
            while (n < target) {
                if (mode == 0) buf[n++] = (char)(rnd() & 0xFF);            // uniform bytes
                else if (mode == 1) buf[n++] = (char)(0x80 | (rnd() & 0x7F)); // high bytes only
                else {
                    const char* f = frags[rnd() % (unsigned)nf];
                    size_t l = strlen(f);
                    if (n + l > sizeof(buf)) break;
                    memcpy(buf + n, f, l);
                    n += l;
                }
            }
            if (!roundtrip(&tok, buf, n, (int)(rnd() & 1))) rbad++;
        }
        TEST_CHECK(rbad == 0, "%d of 3000 random byte strings do not round-trip", rbad);
        printf("ok   invalid UTF-8 and 3000 random byte strings round-trip\n");
    }

    // --- Hugging Face layouts give the same ids
    {
        char dir[512], p1[600], p2[600];
        snprintf(dir, sizeof(dir), "%s/test_tok_hf", build_dir());
        mkdir_p(dir);
        size_t n;
        char* s = read_file_all("data/gpt2/encoder.json", &n);
        snprintf(p1, sizeof(p1), "%s/vocab.json", dir); write_text(p1, s, n); free(s);
        s = read_file_all("data/gpt2/vocab.bpe", &n);
        // HF's merges.txt is the same content; use CRLF line ends here to exercise that path
        char* crlf = (char*)malloc(2 * n + 1); size_t o = 0;
        for (size_t i = 0; i < n; i++) { if (s[i] == '\n') crlf[o++] = '\r'; crlf[o++] = s[i]; }
        snprintf(p2, sizeof(p2), "%s/merges.txt", dir); write_text(p2, crlf, o); free(s); free(crlf);
        const size_t sub = 200000; // a prefix of shakespeare keeps this quick under the sanitizers
        const char* variants[4] = {dir, p1, NULL, NULL};
        char tj_dir[600], tj_pairs[700];
        snprintf(tj_dir, sizeof(tj_dir), "%.500s/tj", build_dir()); mkdir_p(tj_dir);
        char tj_str[700]; snprintf(tj_str, sizeof(tj_str), "%s/tokenizer.json", tj_dir);
        write_tokenizer_json(tj_str, 0);
        snprintf(tj_pairs, sizeof(tj_pairs), "%s/pairs_tokenizer.json", tj_dir);
        write_tokenizer_json(tj_pairs, 1);
        variants[2] = tj_dir; variants[3] = tj_pairs;
        int* want; size_t nwant;
        tok_encode(&tok, text, sub, 0, &want, &nwant);
        for (int v = 0; v < 4; v++) {
            Tokenizer t2;
            tok_load(&t2, variants[v]);
            int want_v = v == 3 ? 50258 : 50257;
            TEST_CHECK(t2.vocab_size == want_v && t2.eot_id == 50256, "%s: vocab %d eot %d", variants[v], t2.vocab_size, t2.eot_id);
            if (v == 3) { // the added token is a special token: recognised only when asked
                const char* sx = "x<|im_start|>assistant<|endoftext|>";
                tok_encode(&t2, sx, strlen(sx), 1, &ids, &nids);
                TEST_CHECK(nids >= 4 && ids[0] != 50257 && ids[1] == 50257 && ids[nids - 1] == 50256, "added token: %zu ids", nids);
                char* d = tok_decode(&t2, ids, nids, &m);
                TEST_CHECK(m == strlen(sx) && memcmp(d, sx, m) == 0, "added token decode");
                free(d); free(ids);
                tok_encode(&t2, sx, strlen(sx), 0, &ids, &nids);
                int hit = 0;
                for (size_t k = 0; k < nids; k++) hit |= ids[k] >= 50256;
                TEST_CHECK(!hit, "added token used without allow_special");
                free(ids);
            }
            TEST_CHECK(memcmp(t2.rank, tok.rank, sizeof(int32_t) * 50257) == 0, "%s: merge ranks differ", variants[v]);
            tok_encode(&t2, text, sub, 0, &ids, &nids);
            TEST_CHECK(ids_equal(ids, nids, want, nwant, variants[v]), "%s: ids differ", variants[v]);
            free(ids);
            for (int c = 0; c < nc; c++) {
                tok_encode(&t2, cs[c].text, cs[c].len, cs[c].special, &ids, &nids);
                TEST_CHECK(ids_equal(ids, nids, cs[c].ids, cs[c].nids, variants[v]), "%s: stress case %d", variants[v], c);
                free(ids);
            }
            printf("ok   loading %s gives the same ids\n", variants[v]);
            tok_free(&t2);
        }
        free(want);
    }

    for (int c = 0; c < nc; c++) { free(cs[c].text); free(cs[c].ids); }
    free(cs);
    free(text); free(ref);
    tok_free(&tok);
    return test_finish("test_tokenizer");
}
