// Tokenizer vocabulary files (llmc/text/tokenizer.c tok_load). Input: one byte choosing the format
// (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json), then the first file and,
// for the pairs, FUZZ_SEP and the second. A vocabulary that loads has a token for every byte, so
// decode(encode(x)) must give x back for any x: checked on a fixed text and on the input itself.
#include "fuzz.h"
#include "text/tokenizer.h"

#define FUZZ_SEP "\n==merges==\n"

static const uint8_t* g_text;
static size_t g_text_n;

static void roundtrip(Tokenizer* t, const char* s, size_t n, int special) {
    int* ids = NULL;
    size_t nid = 0;
    tok_encode(t, s, n, special, &ids, &nid);
    for (size_t i = 0; i < nid; i++) if (ids[i] < 0 || ids[i] >= t->vocab_size) abort();
    size_t m = 0;
    char* back = tok_decode(t, ids, nid, &m);
    if (m != n || memcmp(back, s, n) != 0) abort(); // decode(encode(x)) != x
    free(back);
    free(ids);
}

static void load(void) {
    Tokenizer t;
    tok_load(&t, g_fuzz_dir);
    const char* fixed = "Hello world, it's 2024!\n\t \xe2\x82\xac <|endoftext|> \xff\xfe";
    roundtrip(&t, fixed, strlen(fixed), 0);
    roundtrip(&t, fixed, strlen(fixed), 1);
    roundtrip(&t, (const char*)g_text, g_text_n, 0);
    tok_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    if (size < 1) return 0;
    static const char* names[3][2] = {{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}, {"tokenizer.json", NULL}};
    for (int f = 0; f < 3; f++) for (int k = 0; k < 2; k++) if (names[f][k]) fuzz_remove(names[f][k]);
    int fmt = data[0] % 3;
    const uint8_t *a, *b;
    size_t na, nb;
    fuzz_split(data + 1, size - 1, FUZZ_SEP, &a, &na, &b, &nb);
    fuzz_write(names[fmt][0], a, na);
    if (names[fmt][1]) fuzz_write(names[fmt][1], b, nb);
    g_text = data + 1; g_text_n = size - 1 < 256 ? size - 1 : 256;
    FUZZ_RUN(load());
    return 0;
}
