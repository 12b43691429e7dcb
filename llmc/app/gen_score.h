// generate --score FILE: the log-probability of given text under the model, for comparing
// checkpoints on held-out data. Each JSONL line is a record as data/prepare reads it (text,
// prompt + completion, or a conversation rendered with --chat's template); the tokens data/prepare
// would train on are scored, each given everything before it (<|endoftext|> first, as prepare
// starts a record). One JSON object a record comes out: its line, the scored tokens' count, the
// summed and mean log-probability (natural log) and the perplexity exp(-mean).
#ifndef LLMC_GEN_SCORE_H
#define LLMC_GEN_SCORE_H

#include <stddef.h>
#include "model/model.h"
#include "text/chat.h"
#include "text/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

// Scores every record of path (fatal, naming the file and line, for a line that is not a JSON
// record, a record with no token to score or one longer than the model's positions, an empty
// file). Sizes the model's activations itself. Returns the JSONL text (malloc'd, *len bytes);
// with report set, a summary on stderr.
char* gen_score_file(Model* m, Tokenizer* tok, const char* path, const ChatTemplate* tpl, int report, size_t* len);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GEN_SCORE_H
