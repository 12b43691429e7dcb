// Where a tokenizer vocabulary is on disk: which files make one up, and where the bundled GPT-2
// vocabulary (data/gpt2) is when a program runs from another working directory.
#ifndef LLMC_VOCAB_H
#define LLMC_VOCAB_H

#include <stddef.h>
#include "base/fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

// Whether dir holds a vocabulary: encoder.json + vocab.bpe, vocab.json + merges.txt, or
// tokenizer.json (the sources tok_load reads).
int vocab_dir_has(const char* dir);

// The bundled GPT-2 vocabulary: data/gpt2 under the working directory; else, from the running
// program's own location (/proc/self/exe), gpt2/ next to it (data/prepare lives in data/) or
// data/gpt2 in its directory or one of the three above it (binaries in build trees). Writes the
// path to out and returns 0, or returns -1 when there is none.
int vocab_find_bundled(char* out, size_t cap);

// The files of a vocabulary path (a directory or one file, resolved as tok_load does): either
// the pair vocab (encoder.json / vocab.json) + merges (vocab.bpe / merges.txt), or
// tokenizer_json. Absent entries are "". Returns 0, or -1 when path holds no vocabulary.
typedef struct { char vocab[LLMC_PATH_MAX]; char merges[LLMC_PATH_MAX]; char tokenizer_json[LLMC_PATH_MAX]; } VocabFiles;
int vocab_files(const char* path, VocabFiles* f);

#ifdef __cplusplus
}
#endif
#endif // LLMC_VOCAB_H
