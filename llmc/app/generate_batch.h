// `generate`'s batched side: --num-samples continuations of each prompt decoded together
// (sample_generate_batch), prompts from a JSONL file (--prompts), stop strings (--stop), and one
// JSON object per completion (--out FILE, or stdout).
//
// Input, one JSON object per line (blank lines skipped): {"prompt": TEXT} (with --chat: the
// user's message, after --system) or {"messages": [{"role", "content"}, ...]} (needs --chat: the
// conversation rendered as data/prepare renders it, then the assistant's header).
// Output, one line per completion: {"index": prompt's number (0-based), "prompt": TEXT (prompt
// lines only), "sample": i, "text", "tokens", "finish_reason": "eos" | "stop" | "length",
// "mean_logprob"}. tokens counts the generated tokens, the one that ended the completion
// (<|endoftext|>, or the one that completed a stop text) included; mean_logprob is the mean over
// those tokens of log softmax(logits) of the chosen token, at temperature 1 over the whole
// vocabulary (the model's own probability, before temperature and top-k).
#ifndef LLMC_GENERATE_BATCH_H
#define LLMC_GENERATE_BATCH_H

#include "base/json.h"
#include "model/model.h"
#include "model/sampler.h"
#include "run/args.h"
#include "text/chat.h"
#include "text/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int line;              // 1-based line of the prompts file (0: --prompt)
    const char* prompt;    // a prompt line's text, or NULL (messages)
    ChatMessage* msgs;     // a messages line's conversation (n_msgs), or NULL
    int n_msgs;
    int* ids;              // the tokens (genbatch_encode)
    int n_ids;
} GenPrompt;

typedef struct {
    const char* path;      // the prompts file, or NULL: the one --prompt
    GenPrompt* p;
    int n;
    JsonValue** trees;     // the lines' JSON (the strings above point into them)
} GenPrompts;

typedef struct {
    const char* model_path;    // for messages
    const char* adapter;
    const ChatTemplate* tpl;   // --chat, or NULL
    const char* system;        // --system, or NULL
    const char* out_path;      // --out, or NULL: stdout
    const ArgStrs* stops;      // --stop (n may be 0)
    int num_samples, max_new, quiet;
    SampleParams sp;
} GenBatchSpec;

// Read the prompts file (fatal, naming the file and line, for an empty file, a line that is not a
// JSON object, one without "prompt" or "messages", or messages without --chat), or the one
// --prompt when path is NULL.
void genbatch_read(GenPrompts* ps, const char* path, const char* prompt, const ChatTemplate* tpl);
// Tokenize every prompt (the --chat template, the model's vocabulary) and check it fits the
// context with max_new more tokens; fatal naming the prompt's line otherwise.
void genbatch_encode(GenPrompts* ps, Tokenizer* tok, const GenBatchSpec* spec, const GPT2Config* cfg);
// Generate the completions of every prompt and write them as JSONL.
void genbatch_run(Model* m, Tokenizer* tok, GenPrompts* ps, const GenBatchSpec* spec);
void genbatch_free(GenPrompts* ps);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GENERATE_BATCH_H
