// GPT-2 encode / decode (llmc/text/tokenizer.c) with the bundled vocabulary (data/gpt2, or
// $LLMC_FUZZ_VOCAB): the input is text (first byte: allow special tokens or not). decode(encode(x))
// must equal x for every byte string x (the tokenizer's contract), every id must be in the
// vocabulary, and decoding the input read as token ids must not fail. Nothing here calls fatal(),
// so LeakSanitizer stays on.
#include "fuzz.h"
#include "text/tokenizer.h"

static Tokenizer g_tok;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* v = getenv("LLMC_FUZZ_VOCAB");
    tok_load(&g_tok, v ? v : "data/gpt2");
    tok_cache_limit(&g_tok, 1024); // keep the piece cache small so it is also evicted and refilled
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const char* s = (const char*)data + 1;
    size_t n = size - 1;
    int* ids = NULL;
    size_t nid = 0;
    tok_encode(&g_tok, s, n, data[0] & 1, &ids, &nid);
    for (size_t i = 0; i < nid; i++) if (ids[i] < 0 || ids[i] >= g_tok.vocab_size) abort();
    size_t m = 0;
    char* back = tok_decode(&g_tok, ids, nid, &m);
    if (m != n || memcmp(back, s, n) != 0) abort(); // decode(encode(x)) != x
    free(back);
    free(ids);
    // the bytes as token ids (two bytes each, reduced to the vocabulary)
    size_t k = n / 2;
    int* raw = (int*)malloc((k ? k : 1) * sizeof(int));
    for (size_t i = 0; i < k; i++) raw[i] = (int)(((unsigned)(uint8_t)s[2 * i] | (unsigned)(uint8_t)s[2 * i + 1] << 8) % (unsigned)g_tok.vocab_size);
    char* text = tok_decode(&g_tok, raw, k, &m);
    free(text);
    free(raw);
    return 0;
}
