// The `generate` program (text completion from a GPT-2, optionally with a LoRA adapter) and the
// pieces of it the trainer's --sample-* flags share: finding the vocabulary, encoding a prompt,
// streaming the sampled text.
#ifndef LLMC_GENERATE_H
#define LLMC_GENERATE_H

#include <stddef.h>
#include <stdio.h>
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

// Where the vocabulary is: vocab_flag when given; else model_path when it is a directory that
// holds one (encoder.json + vocab.bpe, vocab.json + merges.txt or tokenizer.json), or the
// directory of a model file that does; else the bundled GPT-2 vocabulary (vocab_find_bundled:
// data/gpt2 in the working directory or near the program). Writes the path to out and returns 0,
// or returns -1 when there is none.
int gen_find_vocab(const char* vocab_flag, const char* model_path, char* out, size_t cap);

// Token ids of a prompt (special tokens such as <|endoftext|> recognised; an empty prompt is
// <|endoftext|>). Fatal, naming `flag`, if a token is outside the model's vocabulary. *ids is
// malloc'd.
void gen_encode_prompt(Tokenizer* tok, const char* prompt, int model_vocab, const char* flag, int** ids, int* n);

// Streams sampled tokens as bytes to up to two files (the second may be NULL); stops nothing.
typedef struct { const Tokenizer* tok; FILE* out; FILE* copy; int eot; } GenStream;
void gen_stream_token(void* ctx, int token, const float* logits, int V); // a SampleCallback

int generate_main(int argc, char** argv);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GENERATE_H
