#define _GNU_SOURCE
#include "generate.h"
#include "args.h"
#include "chat.h"
#include "check.h"
#include "fileio.h"
#include "gpt2.h"
#include "lora.h"
#include "model_io.h"
#include "ops.h"
#include "sampler.h"
#include "vocab.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

int gen_find_vocab(const char* vocab_flag, const char* model_path, char* out, size_t cap) {
    if (vocab_flag) { snprintf(out, cap, "%s", vocab_flag); return 0; }
    if (model_path && dir_exists(model_path) && vocab_dir_has(model_path)) { snprintf(out, cap, "%s", model_path); return 0; }
    if (model_path && !dir_exists(model_path)) {
        char dir[4200];
        snprintf(dir, sizeof(dir), "%s", model_path);
        char* slash = strrchr(dir, '/');
        if (slash) { *slash = 0; if (!*dir) strcpy(dir, "/"); } else strcpy(dir, ".");
        if (vocab_dir_has(dir)) { snprintf(out, cap, "%s", dir); return 0; }
    }
    return vocab_find_bundled(out, cap);
}

void gen_encode_prompt(Tokenizer* tok, const char* prompt, int model_vocab, const char* flag, int** ids, int* n) {
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
    *n = (int)cnt;
}

void gen_stream_token(void* ctx, int token, const float* logits, int V) {
    GenStream* s = (GenStream*)ctx;
    if (token == s->eot) return; // the end of the text, not part of it
    size_t len = 0;
    const char* bytes = token < s->tok->vocab_size ? tok_token_bytes(s->tok, token, &len) : NULL;
    if (!bytes) return; // an id the model has but the vocabulary does not (padding of a tiny vocabulary)
    fwrite(bytes, 1, len, s->out);
    fflush(s->out);
    if (s->copy) fwrite(bytes, 1, len, s->copy);
}

// --chat: the reply is printed up to the template's stop text (held back while it may be
// starting), and nothing after it.
typedef struct { GenStream gs; ChatStopFilter stop; } ChatStream;

static void gen_chat_stream_token(void* ctx, int token, const float* logits, int V) {
    ChatStream* c = (ChatStream*)ctx;
    if (token == c->gs.eot || c->stop.stopped) return;
    size_t len = 0;
    const char* bytes = token < c->gs.tok->vocab_size ? tok_token_bytes(c->gs.tok, token, &len) : NULL;
    if (!bytes) return;
    const char* out;
    size_t n = chat_stop_feed(&c->stop, bytes, len, &out);
    fwrite(out, 1, n, c->gs.out);
    fflush(c->gs.out);
}

// The prompt of --chat: --system (if any) and --prompt as the user's message, rendered as
// data/prepare renders a conversation, then the assistant's header.
static void gen_chat_prompt(const ChatTemplate* t, Tokenizer* tok, const char* system, const char* user, int model_vocab,
                            int** ids, int* n) {
    ChatMessage msgs[2];
    int nm = 0;
    if (system) msgs[nm++] = (ChatMessage){ CHAT_SYSTEM, system, strlen(system) };
    msgs[nm++] = (ChatMessage){ CHAT_USER, user, strlen(user) };
    TokIds out = {0};
    chat_encode_prompt(t, tok, msgs, nm, 0, &out);
    for (size_t i = 0; i < out.n; i++)
        if (out.ids[i] >= model_vocab)
            fatal("pass the vocabulary the model was trained with (--vocab)",
                  "--prompt: token id %d of the chat prompt is outside the model's vocabulary of %d tokens", out.ids[i], model_vocab);
    *ids = out.ids;
    *n = (int)out.n;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int generate_main(int argc, char** argv) {
    const char* model = NULL; const char* adapter = NULL; const char* prompt = "<|endoftext|>"; const char* vocab = NULL;
    const char* chat = NULL; const char* system = NULL;
    int max_new = 64, top_k = 0, seed = 1337, no_kv = 0, threads = 0, quiet = 0;
    float temperature = 1.0f;
    static const char* const chat_choices[] = { "plain", "chatml", NULL };
    const ArgSpec specs[] = {
        {"--model", "-e", ARG_STR, &model, "PATH", "model: llm.c .bin, .safetensors, sharded index, transformers model dir", 1, 0, NULL},
        {"--adapter", NULL, ARG_STR, &adapter, "DIR", "apply this LoRA adapter (PEFT: adapter_config.json + adapter_model.safetensors)", 1, 0, NULL},
        {"--prompt", NULL, ARG_STR, &prompt, "TEXT", "text to continue (<|endoftext|> is the special token; empty = <|endoftext|>); with --chat the user's message", 1, 0, NULL},
        {"--max-new-tokens", "-n", ARG_INT, &max_new, "N", "tokens to generate (fewer if <|endoftext|> comes first)", 1, 1 << 20, NULL},
        {"--temperature", NULL, ARG_FLOAT, &temperature, "T", "softmax temperature; 0 = greedy (always the most likely token)", 0, 100, NULL},
        {"--top-k", NULL, ARG_INT, &top_k, "K", "sample among the K most likely tokens only; 0 = all", 0, 1 << 30, NULL},
        {"--seed", NULL, ARG_INT, &seed, "S", "random seed: the same seed gives the same completion", 0, 2147483647, NULL},
        {"--no-kv-cache", NULL, ARG_BOOL, &no_kv, NULL, "recompute the whole sequence for every token (slow; for checking the cache)", 1, 0, NULL},
        {"--vocab", NULL, ARG_STR, &vocab, "PATH", "vocabulary (dir or file; default: next to the model, else data/gpt2 here or near this program)", 1, 0, NULL},
        {"--chat", NULL, ARG_STR, &chat, "TEMPLATE", "--prompt is a user message: render it with this chat template as data/prepare --chat-template does, answer as the assistant", 1, 0, chat_choices},
        {"--system", NULL, ARG_STR, &system, "TEXT", "with --chat: a system message before the user's", 1, 0, NULL},
        {"--threads", NULL, ARG_INT, &threads, "N", "CPU threads; 0 = all cores", 0, 4096, NULL},
        {"--quiet", "-q", ARG_BOOL, &quiet, NULL, "print only the text (no prompt echo, no statistics)", 1, 0, NULL},
    };
    args_parse(argc, argv, specs, (int)(sizeof(specs) / sizeof(specs[0])),
               "usage: generate --model PATH [--adapter DIR] [--prompt TEXT] [options]\n\n"
               "Continues a prompt with a GPT-2 (and optionally a LoRA adapter), streaming the text to stdout.");
    if (!model) fatal("run with --help to see every flag", "--model is required");
    if (system && !chat) fatal("add --chat plain|chatml", "--system is for --chat");
    if (chat && !args_given("--prompt")) fatal("with --chat, --prompt is the user's message", "--chat needs --prompt");
    const ChatTemplate* tpl = chat ? chat_template_get(chat) : NULL;
    char vpath[4200];
    if (gen_find_vocab(vocab, model, vpath, sizeof(vpath)) != 0)
        fatal("pass --vocab DIR (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json), or keep data/gpt2 next to this program",
              "no vocabulary found for --model %s", model);
    ops_init(threads);

    GPT2Config cfg; ParamTable pt; float* host = NULL;
    model_load(model, &cfg, &pt, &host);
    Tokenizer tok;
    tok_load(&tok, vpath);
    int* prompt_ids = NULL; int np = 0;
    if (tpl) gen_chat_prompt(tpl, &tok, system, prompt, cfg.vocab_size, &prompt_ids, &np);
    else gen_encode_prompt(&tok, prompt, cfg.vocab_size, "--prompt", &prompt_ids, &np);
    if (np + max_new - 1 > cfg.max_seq_len)
        fatal("lower --max-new-tokens or shorten --prompt", "the prompt (%d tokens) + --max-new-tokens %d exceed the model's %d positions",
              np, max_new, cfg.max_seq_len);
    LoraModel* lm = adapter ? lora_load_peft(adapter, &cfg) : NULL;
    GPT2 m;
    gpt2_init(&m, &cfg, 0);
    gpt2_set_params(&m, host);
    free(host);
    const int need = np + max_new - 1;
    // without the cache the full forward needs activations for the whole sequence; with it,
    // only the adapters' scratch (sized by the activations) bounds the prompt chunk
    gpt2_alloc_acts(&m, 1, no_kv ? need : (lm ? (need < 64 ? need : 64) : 1));
    if (lm) lora_attach(lm, &m);
    KVCache kv;
    if (!no_kv) kv_init(&kv, &m, 1, need);

    if (!quiet) {
        fprintf(stderr, "model: %s | L=%d C=%d NH=%d vocab=%d | backend %s%s%s\n", model, cfg.num_layers, cfg.channels,
                cfg.num_heads, cfg.vocab_size, ops_backend_name(), lm ? " | adapter " : "", lm ? adapter : "");
        fprintf(stderr, "prompt: %d tokens | temperature %g | top-k %d | seed %d | %s\n", np, temperature, top_k, seed,
                no_kv ? "no kv cache" : "kv cache");
        int skip = tpl && tok.eot_id >= 0; // --chat: the rendered prompt without its leading <|endoftext|>
        char* text = tok_decode(&tok, prompt_ids + skip, (size_t)(np - skip), NULL);
        if (!(np == 1 && prompt_ids[0] == tok.eot_id)) { fputs(text, stdout); fflush(stdout); }
        free(text);
    }
    SampleParams sp = { temperature, top_k, (uint64_t)seed };
    GenStream gs = { &tok, stdout, NULL, tok.eot_id };
    ChatStream cs = { gs, {0} };
    if (tpl) chat_stop_init(&cs.stop, tpl->stop);
    double t0 = now_s();
    int got = sample_generate(&m, no_kv ? NULL : &kv, prompt_ids, np, max_new, &sp, tok.eot_id, NULL,
                              tpl ? gen_chat_stream_token : gen_stream_token, tpl ? (void*)&cs : (void*)&gs);
    double dt = now_s() - t0;
    if (tpl) {
        const char* rest;
        size_t n = chat_stop_flush(&cs.stop, &rest);
        fwrite(rest, 1, n, stdout);
        chat_stop_free(&cs.stop);
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (!quiet) fprintf(stderr, "generated %d tokens in %.3f s (%.2f tokens/s)\n", got, dt, dt > 0 ? got / dt : 0.0);

    if (!no_kv) kv_free(&kv);
    free(prompt_ids);
    tok_free(&tok);
    gpt2_free(&m);
    lora_free(lm);
    return 0;
}
