// The text side of sampling, shared by generate and the trainers' --sample-* output: where the
// vocabulary is, a prompt as token ids, and sampled tokens streamed out as text.
#ifndef LLMC_TEXTGEN_H
#define LLMC_TEXTGEN_H

#include <stddef.h>
#include <stdio.h>
#include "text/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

// Where the vocabulary is: vocab_flag when given; else model_path when it is a directory that
// holds one (encoder.json + vocab.bpe, vocab.json + merges.txt or tokenizer.json), or the
// directory of a model file that does; else the bundled GPT-2 vocabulary (vocab_find_bundled:
// data/gpt2 in the working directory or near the program). Writes the path to out and returns 0,
// or returns -1 when there is none.
int textgen_find_vocab(const char* vocab_flag, const char* model_path, char* out, size_t cap);

// Token ids of --prompt (special tokens such as <|endoftext|> recognised; an empty prompt is
// <|endoftext|>), with room for n_new more tokens in the model's positions. Fatal if a token is
// outside the model's vocabulary or the prompt + n_new - 1 tokens (the last one is never fed back)
// exceed max_seq_len, naming the flag that sets n_new. *ids is malloc'd.
void textgen_encode_prompt(Tokenizer* tok, const char* prompt, int model_vocab, int max_seq_len, int n_new,
                           const char* n_flag, int** ids, int* n);

// Fatal unless a prompt of n_prompt tokens and n_new more (the last one never fed back) fit in
// max_seq_len positions; the message names the flag that sets n_new.
void textgen_check_fits(int n_prompt, int n_new, const char* n_flag, int max_seq_len);

// Print the prompt's text to out (and copy, if not NULL); nothing for the lone <|endoftext|>.
void textgen_echo_prompt(const Tokenizer* tok, const int* ids, int n, FILE* out, FILE* copy);

// Streams sampled tokens as bytes to up to two files (the second may be NULL); stops nothing.
typedef struct { const Tokenizer* tok; FILE* out; FILE* copy; int eot; } TextStream;
int textgen_stream_token(void* ctx, int token, const float* logits, int V); // a SampleCallback (never stops)

#ifdef __cplusplus
}
#endif
#endif // LLMC_TEXTGEN_H
