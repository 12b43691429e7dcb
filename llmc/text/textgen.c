#include "text/textgen.h"
#include "base/check.h"
#include "base/fileio.h"
#include "text/vocab.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void textgen_check_fits(int n_prompt, int n_new, const char* n_flag, int max_seq_len) {
    if ((int64_t)n_prompt + n_new - 1 <= max_seq_len) return;
    char hint[128];
    snprintf(hint, sizeof(hint), "lower %s or shorten --prompt", n_flag);
    fatal(hint, "the prompt (%d tokens) + %s %d exceed the model's %d positions", n_prompt, n_flag, n_new, max_seq_len);
}

int textgen_find_vocab(const char* vocab_flag, const char* model_path, char* out, size_t cap) {
    if (vocab_flag) { snprintf(out, cap, "%s", vocab_flag); return 0; }
    if (model_path && dir_exists(model_path) && vocab_dir_has(model_path)) { snprintf(out, cap, "%s", model_path); return 0; }
    if (model_path && !dir_exists(model_path)) {
        char dir[LLMC_PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", model_path);
        char* slash = strrchr(dir, '/');
        if (slash) { *slash = 0; if (!*dir) strcpy(dir, "/"); } else strcpy(dir, ".");
        if (vocab_dir_has(dir)) { snprintf(out, cap, "%s", dir); return 0; }
    }
    return vocab_find_bundled(out, cap);
}

void textgen_encode_prompt(Tokenizer* tok, const char* prompt, int model_vocab, int max_seq_len, int n_new,
                           const char* n_flag, int** ids, int* n) {
    const char* flag = "--prompt";
    size_t cnt = 0;
    *ids = NULL;
    if (prompt && *prompt) tok_encode(tok, prompt, strlen(prompt), 1, ids, &cnt);
    if (cnt == 0) {
        if (tok->eot_id < 0) fatal("give a non-empty --prompt", "%s is empty and the vocabulary %s has no <|endoftext|> to start from", flag, tok->source);
        free(*ids);
        *ids = (int*)mallocCheck(sizeof(int));
        (*ids)[0] = tok->eot_id;
        cnt = 1;
    }
    for (size_t i = 0; i < cnt; i++)
        if ((*ids)[i] >= model_vocab)
            fatal("pass the vocabulary the model was trained with (--vocab)",
                  "%s: token id %d of the prompt (vocabulary %s) is outside the model's vocabulary of %d tokens",
                  flag, (*ids)[i], tok->source, model_vocab);
    textgen_check_fits((int)cnt, n_new, n_flag, max_seq_len);
    *n = (int)cnt;
}

int textgen_stream_token(void* ctx, int token, const float* logits, int V) {
    TextStream* s = (TextStream*)ctx;
    if (token == s->eot) return 0; // the end of the text, not part of it (sample_generate stops there)
    size_t len = 0;
    const char* bytes = token < s->tok->vocab_size ? tok_token_bytes(s->tok, token, &len) : NULL;
    if (!bytes) return 0; // an id the model has but the vocabulary does not (padding of a tiny vocabulary)
    fwrite(bytes, 1, len, s->out);
    fflush(s->out);
    if (s->copy) fwrite(bytes, 1, len, s->copy);
    return 0;
}

void textgen_echo_prompt(const Tokenizer* tok, const int* ids, int n, FILE* out, FILE* copy) {
    if (n == 1 && ids[0] == tok->eot_id) return; // the default prompt is no text
    char* text = tok_decode(tok, ids, (size_t)n, NULL);
    fputs(text, out);
    fflush(out);
    if (copy) fputs(text, copy);
    free(text);
}
