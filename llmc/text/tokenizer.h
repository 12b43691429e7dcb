// GPT-2 byte-level BPE tokenizer (encode and decode), compatible token for token with OpenAI's
// GPT-2 encoding (as implemented by tiktoken) when given the GPT-2 vocabulary.
//
// Vocabulary sources, all holding the same information (token strings in the GPT-2
// bytes-to-unicode alphabet, and the merge list in rank order):
//   - OpenAI's encoder.json + vocab.bpe (bundled in data/gpt2/)
//   - Hugging Face's vocab.json + merges.txt
//   - Hugging Face's tokenizer.json (model.vocab + model.merges; merges as "a b" strings or
//     ["a", "b"] pairs)
//
// Encoding: the text is split into pieces with the GPT-2 pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (implemented by hand as a scanner; Unicode categories from utf8proc), then each piece is merged
// pair by pair, always merging the adjacent pair whose concatenation has the lowest merge rank
// (leftmost first on ties), until no adjacent pair forms a token. Bytes that are not valid UTF-8
// are kept as they are (each one counts as a punctuation-like character), so
// decode(encode(x)) == x for every byte string x.
//
// Special tokens (<|endoftext|>) are only recognised in the text when the caller asks for it.
//
// Threads: encoding updates the tokenizer's piece cache, so use one Tokenizer per thread for
// encoding; decoding only reads and may be shared.
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "base/fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

// Growable list of token ids.
typedef struct {
    int* ids;
    size_t n, cap;
} TokIds;

typedef struct TokCache TokCache;

typedef struct {
    int vocab_size;        // number of token ids (max id + 1)
    char* blob;            // bytes of every token, back to back
    uint32_t* tok_off;     // token id -> offset of its bytes in blob
    uint32_t* tok_len;     // token id -> number of bytes (0 for ids missing from the vocab)
    int32_t* rank;         // token id -> merge rank (-1: not made by a merge, e.g. bytes, specials)
    uint64_t* map;         // bytes -> id hash table (open addressing; id + 1 | hash tag << 32, 0 = empty)
    size_t map_mask;       // capacity - 1 (power of two)
    int byte_id[256];      // token id of each single byte
    int eot_id;            // id of <|endoftext|>, -1 if the vocabulary has none
    int n_special;
    int* special_ids;      // tokens written <|...|> that no merge produces
    TokCache* cache;       // piece -> ids cache (see tokenizer.c)
    char source[LLMC_PATH_MAX];     // what was loaded, for messages
} Tokenizer;

// Load a vocabulary. path is a directory (searched for encoder.json + vocab.bpe, then
// vocab.json + merges.txt, then tokenizer.json) or a file (tokenizer.json, or one file of the
// two pairs, whose partner is looked for next to it). Fatal with a clear message on failure.
void tok_load(Tokenizer* t, const char* path);
void tok_free(Tokenizer* t);

// Append the tokens of text[0..len) to out. allow_special: recognise special tokens
// (<|endoftext|>) written in the text; otherwise they are encoded as ordinary text.
void tok_encode_append(Tokenizer* t, const char* text, size_t len, int allow_special, TokIds* out);
// Same, returning a malloc'd array (free() it) of *n ids.
void tok_encode(Tokenizer* t, const char* text, size_t len, int allow_special, int** ids, size_t* n);

// Bytes of the token (not NUL-terminated) and their count. Fatal if id is out of range.
const char* tok_token_bytes(const Tokenizer* t, int id, size_t* len);
// Concatenated bytes of ids[0..n): malloc'd, NUL-terminated (free() it); *out_len bytes
// (out_len may be NULL). Fatal on an id outside the vocabulary.
char* tok_decode(const Tokenizer* t, const int* ids, size_t n, size_t* out_len);

void tokids_push(TokIds* v, int id);
void tokids_free(TokIds* v);

// Piece splitter on its own (exposed for tests): returns the end of the piece that starts at
// text[pos] (pos < len).
size_t tok_next_piece(const char* text, size_t len, size_t pos);
// Character class the splitter uses for a code point: 1 letter (\p{L}), 2 number (\p{N}),
// 4 whitespace (\s), 0 anything else.
int tok_codepoint_class(int32_t cp);

// Cap the piece cache at about max_slots entries (rounded to a power of two, at least 16384;
// default 4M); it is cleared when full. For tests of the clearing path and for small machines.
void tok_cache_limit(Tokenizer* t, size_t max_slots);
// Piece cache statistics (hits, misses) since load, for benchmarks.
void tok_cache_stats(const Tokenizer* t, uint64_t* hits, uint64_t* misses);

#ifdef __cplusplus
}
#endif
#endif // LLMC_TOKENIZER_H
