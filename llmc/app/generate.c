#define _GNU_SOURCE
#include "app/generate.h"
#include "app/generate_batch.h"
#include "app/gen_score.h"
#include "run/args.h"
#include "text/chat.h"
#include "base/check.h"
#include "run/cli.h"
#include "run/runlock.h"
#include "base/fileio.h"
#include "base/json.h"
#include "model/model.h"
#include "model/gguf_io.h"
#include "ops/ops.h"
#include "model/sampler.h"
#include "text/textgen.h"
#include "base/timer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char* model;
    const char* adapter;  // the first --adapter (its base_model_name_or_path is the default --model)
    ArgStrs adapters;     // --adapter, each of them; more than one: combined (lora_mix)
    const char* adapter_weights; // --adapter-weights W1,W2,...
    const char* adapter_combine; // --adapter-combine cat|linear
    float weights[ARG_STRS_MAX];
    char adapter_desc[2048]; // what the messages call the adapter: its path, or the combination
    SampleFlags s;
    const char* chat;     // chat template name, or NULL: plain continuation
    const char* system;   // --chat: a system message
    const char* dtype;    // --dtype fp32|bf16|auto
    const char* wtype;    // --weights auto|q8_0|dense
    const char* logits_out; // --logits-out FILE
    const char* prompts;  // --prompts FILE (JSONL)
    const char* out;      // --out FILE (JSONL)
    ArgStrs stops;        // --stop TEXT (each of them)
    const char* score;    // --score FILE: score its records instead of generating
    int max_new, seed, no_kv, threads, quiet, num_samples;
} GenFlags;

// JSONL out (llmc/app/generate_batch.h) for a prompts file, a --out file or several samples;
// otherwise the one completion is streamed as text.
static int gen_batched(const GenFlags* g) { return !g->score && (g->prompts || g->out || g->num_samples > 1); }

// The adapters: one, or several combined with their weights (default 1 each); adapter_desc names them.
static void gen_adapters(GenFlags* g) {
    const int n = g->adapters.n;
    g->adapter = n ? g->adapters.v[0] : NULL;
    snprintf(g->adapter_desc, sizeof(g->adapter_desc), "%s", g->adapter ? g->adapter : "");
    if (n < 2 && (g->adapter_weights || g->adapter_combine))
        fatal("give two or more --adapter to combine", "--adapter-weights / --adapter-combine with %d --adapter", n);
    if (n < 2) return;
    for (int i = 0; i < n; i++) g->weights[i] = 1.0f;
    if (g->adapter_weights) {
        const char* p = g->adapter_weights;
        for (int i = 0; i < n; i++) {
            char* end;
            g->weights[i] = strtof(p, &end);
            if (end == p || !isfinite(g->weights[i]) || (*end != (i + 1 < n ? ',' : '\0')))
                fatal("give one number per --adapter, e.g. --adapter-weights 0.7,0.3", "--adapter-weights '%s' is not %d comma-separated numbers",
                      g->adapter_weights, n);
            p = end + 1;
        }
    }
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof(g->adapter_desc); i++)
        len += (size_t)snprintf(g->adapter_desc + len, sizeof(g->adapter_desc) - len, "%s%s x %g", i ? " + " : "", g->adapters.v[i], (double)g->weights[i]);
    if (len < sizeof(g->adapter_desc))
        snprintf(g->adapter_desc + len, sizeof(g->adapter_desc) - len, " (%s)", g->adapter_combine ? g->adapter_combine : "cat");
}

static void gen_parse(GenFlags* g, int argc, char** argv) {
    static const char* const chat_choices[] = { "plain", "chatml", NULL };
    memset(g, 0, sizeof(*g));
    g->max_new = 64; g->seed = 1337; g->num_samples = 1;
    cli_sample_defaults(&g->s);
    ArgSpec specs[32]; // (the flags below: 26)
    int n = 0;
    specs[n++] = cli_flag_model(&g->model, "model: llm.c .bin, .safetensors, sharded index, transformers model dir (also 4-bit bitsandbytes); "
                                           "with --adapter, default: the adapter's base_model_name_or_path");
    specs[n++] = (ArgSpec){"--adapter", NULL, ARG_STRS, &g->adapters, "DIR", "apply this LoRA adapter (PEFT: adapter_config.json + adapter_model.safetensors); "
                           "given several times, their combination (--adapter-weights, --adapter-combine)", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--adapter-weights", NULL, ARG_STR, &g->adapter_weights, "W1,W2,...", "with several --adapter: the weight of each "
                           "(default 1 each; negative subtracts), as PEFT's add_weighted_adapter takes them", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--adapter-combine", NULL, ARG_STR, &g->adapter_combine, "HOW", "with several --adapter, PEFT's combination_type: "
                           "cat = exactly the weighted sum of their changes (one adapter of the summed ranks), linear = PEFT's linear "
                           "(adapters of one rank; A and B summed apart, an approximation)", 1, 0, LORA_MIX_NAMES};
    const int i_prompt = n;
    cli_sample_flags(&g->s, specs + n);
    specs[i_prompt].help = "text to continue (<|endoftext|> is the special token; empty = <|endoftext|>); with --chat the user's message";
    n += CLI_SAMPLE_NFLAGS;
    specs[n++] = (ArgSpec){"--max-new-tokens", "-g", ARG_INT, &g->max_new, "N", "tokens to generate (fewer if <|endoftext|> comes first)", 1, 1 << 20, NULL};
    specs[n] = cli_flag_seed(&g->seed);
    specs[n++].help = "seed of the sampling: the same seed, model and flags give the same text (unused by greedy decoding)";
    specs[n++] = (ArgSpec){"--no-kv-cache", NULL, ARG_BOOL, &g->no_kv, NULL, "recompute the whole sequence for every token (slow; for checking the cache)", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--chat", NULL, ARG_STR, &g->chat, "TEMPLATE", "--prompt (and --prompts' prompts) is a user message, --prompts' messages a conversation: render it with this chat template as data/prepare --chat-template does, answer as the assistant", 1, 0, chat_choices};
    specs[n++] = (ArgSpec){"--system", NULL, ARG_STR, &g->system, "TEXT", "with --chat: a system message before the user's", 1, 0, NULL};
    specs[n++] = cli_flag_threads(&g->threads);
    specs[n++] = cli_flag_dtype(&g->dtype);
    static const char* const weight_choices[] = {"auto", "q8_0", "dense", NULL};
    specs[n++] = (ArgSpec){"--weights", NULL, ARG_STR, &g->wtype, "W",
                           "the linear weights and the lm_head: q8_0 = in llama.cpp's 8-bit blocks, multiplied as they are (a token reads ~half of bf16's bytes; "
                           "from a Q8_0 GGUF file exactly its blocks, from others quantized as llama.cpp does), dense = --dtype's, "
                           "auto = q8_0 for a Q8_0 GGUF model on the CPU (not under a DoRA adapter), dense otherwise", 1, 0, weight_choices};
    specs[n++] = (ArgSpec){"--quiet", NULL, ARG_BOOL, &g->quiet, NULL, "print only the text (no prompt echo, no statistics)", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--logits-out", NULL, ARG_STR, &g->logits_out, "FILE",
                           "also write FILE: per generated token its id and the two largest logits (for comparing backends)", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--num-samples", NULL, ARG_INT, &g->num_samples, "N",
                           "N completions of each prompt, decoded together (the prompt fed once); more than 1: JSONL out", 1, 1 << 16, NULL};
    specs[n++] = (ArgSpec){"--prompts", NULL, ARG_STR, &g->prompts, "FILE",
                           "JSONL, one prompt a line: {\"prompt\": TEXT} or {\"messages\": [...]} (with --chat); JSONL out", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--out", "-o", ARG_STR, &g->out, "FILE",
                           "write the completions as JSONL to FILE (atomically) instead of stdout", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--stop", NULL, ARG_STRS, &g->stops, "TEXT",
                           "end a completion where its text contains TEXT (TEXT not printed; finish_reason \"stop\"); given several times, at the first of them", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--score", NULL, ARG_STR, &g->score, "FILE",
                           "score the records of a JSONL file (text, prompt + completion, or --chat conversations) instead of generating: "
                           "one JSON line each (stdout, or --out) with the tokens' log-probability and perplexity", 1, 0, NULL};
    unsigned char given[32];
    args_parse(argc, argv, specs, n,
               "usage: generate --model PATH [--adapter DIR] [--prompt TEXT] [options]\n"
               "       generate --adapter DIR [--prompt TEXT] [options]     (the adapter's own base model)\n\n"
               "Continues a prompt with a GPT-2 (and optionally a LoRA adapter), streaming the text to stdout. With --num-samples N > 1,\n"
               "--prompts FILE or --out FILE: N samples of each prompt decoded together, one JSON line per completion (docs/GENERATE.md).", given);
    char err[256];
    if (cli_sample_check(&g->s, err, sizeof(err))) fatal("run with --help to see every flag and its range", "%s", err);
    gen_adapters(g);
    if (!g->model && !g->adapter) fatal("run with --help to see every flag", "--model is required (or --adapter, whose base model is used)");
    if (g->system && !g->chat) fatal("add --chat plain|chatml", "--system is for --chat");
    if (g->chat && !given[i_prompt] && !g->prompts && !g->score)
        fatal("with --chat, --prompt is the user's message", "--chat needs --prompt (or --prompts)");
    if (g->score && (given[i_prompt] || g->system || g->logits_out || g->no_kv))
        fatal("--score reads its text from the file", "--score with --prompt, --system, --logits-out or --no-kv-cache");
    if (g->score && (g->prompts || g->num_samples > 1 || g->stops.n))
        fatal("--score reads its text from the file and generates nothing", "--score with --prompts, --num-samples or --stop");
    if (g->prompts && given[i_prompt]) fatal("put the prompt in the --prompts file", "--prompt and --prompts: give one of them");
    if (gen_batched(g) && g->no_kv) fatal("leave out --no-kv-cache", "--num-samples, --prompts and --out decode with the key/value cache; --no-kv-cache is for one streamed completion");
    if (gen_batched(g) && g->logits_out) fatal("leave out --logits-out", "--logits-out is for one streamed completion, not with --num-samples, --prompts or --out");
}

// --adapter without --model: the base the adapter names (base_model_name_or_path in its
// adapter_config.json), as PEFT's AutoPeftModelForCausalLM loads it: the path as written.
static const char* gen_adapter_base(const char* adapter, char* out, size_t cap) {
    char dir[LLMC_PATH_MAX], cpath[LLMC_PATH_MAX], err[256];
    if (!dir_exists(adapter) && !file_exists(adapter))
        fatal("pass the adapter directory (adapter_config.json + adapter_model.safetensors)", "--adapter '%s' does not exist", adapter);
    snprintf(dir, sizeof(dir), "%s", adapter);
    char* slash = strrchr(dir, '/');
    if (!dir_exists(adapter)) { if (slash) *slash = '\0'; else snprintf(dir, sizeof(dir), "."); } // its adapter_model.safetensors
    path_join(cpath, sizeof(cpath), dir, "adapter_config.json");
    if (!file_exists(cpath)) fatal("pass the adapter directory (adapter_config.json + adapter_model.safetensors)", "'%s' does not exist", cpath);
    size_t len;
    char* text = read_file_all(cpath, &len);
    JsonValue* js = json_parse(text, len, err, sizeof(err));
    if (!js) fatal("the adapter's config is not valid JSON", "'%s': %s", cpath, err);
    const char* base = json_as_string(json_get(js, "base_model_name_or_path"));
    if (!base || !*base) fatal("pass the base model with --model", "'%s' names no base_model_name_or_path", cpath);
    snprintf(out, cap, "%s", base);
    json_free(js);
    free(text);
    if (!dir_exists(out) && !file_exists(out))
        fatal("pass the base model with --model", "the adapter's base model '%s' (base_model_name_or_path in '%s') is not here", out, cpath);
    return out;
}

// The model (any kind the trainers write, incl. 4-bit NF4 checkpoints) and its adapter; the
// activations are sized once the prompt is known (model_alloc_acts).
static void gen_model(Model* m, const GenFlags* g, int bf16) {
    const int autow = !g->wtype || !strcmp(g->wtype, "auto");
    LoraSource src;
    ModelSpec spec;
    memset(&src, 0, sizeof(src));
    memset(&spec, 0, sizeof(spec));
    spec.path = g->model;
    spec.B = 1; spec.T = 1;
    spec.base_bf16 = bf16; // nothing is trained: the linear weights held in bf16 only, as train_lora holds its base
    if (autow) spec.base_q8 = ops_caps().floatx == OPS_F32 && gguf_gpt2_linear_q8_0(g->model) ? MODEL_Q8_WHERE_ABLE : 0;
    else spec.base_q8 = !strcmp(g->wtype, "q8_0") ? MODEL_Q8_ON : MODEL_Q8_OFF;
    src.adapter = g->adapter;
    if (g->adapters.n > 1) { // (combined in model_assemble, once the base's shape is known)
        src.adapter = NULL;
        src.mix = g->adapters.v; src.n_mix = g->adapters.n; src.mix_weights = g->weights;
        src.mix_how = g->adapter_combine && !strcmp(g->adapter_combine, "linear") ? LORA_MIX_LINEAR : LORA_MIX_CAT;
    }
    if (g->adapter) spec.lora_src = &src;
    model_assemble(m, &spec);
    linear_set_dora_cache(m->gpt.lin, 1); // (nothing changes the weights: DoRA's norms once)
}

// --logits-out: one line per generated token, "id top1 top2" (the two largest logits, the first
// of them the chosen token's under greedy decoding), collected here and written atomically at
// the end. The margin top1 - top2 says how close the choice was: two backends that round
// differently may differ where it is small (test/test_sample_backends.sh, dev/check_outputs.py).
typedef struct { SampleCallback inner; void* inner_ctx; char* buf; size_t len, cap; } LogitsOut;
#define LOGITS_LINE 64 // the most one line takes: an id and two %.9g floats

static int gen_logits_token(void* ctx, int token, const float* logits, int V) {
    LogitsOut* o = (LogitsOut*)ctx;
    float top1 = -INFINITY, top2 = -INFINITY;
    for (int i = 0; i < V; i++) {
        if (logits[i] > top1) { top2 = top1; top1 = logits[i]; }
        else if (logits[i] > top2) top2 = logits[i];
    }
    if (o->len + LOGITS_LINE <= o->cap)
        o->len += (size_t)snprintf(o->buf + o->len, o->cap - o->len, "%d %.9g %.9g\n", token, top1, top2);
    return o->inner(o->inner_ctx, token, logits, V);
}

// Logits that are not all finite (NaN or infinite: broken weights, such as a diverged run's, or an
// overflow) choose nothing: greedy decoding would pick token 0 ("!") every time. Generation stops
// before the token is printed, and generate_main ends with an error.
typedef struct { SampleCallback inner; void* inner_ctx; int step, bad, bad_id; float bad_value; } FiniteCheck;

static int gen_finite_token(void* ctx, int token, const float* logits, int V) {
    FiniteCheck* f = (FiniteCheck*)ctx;
    for (int i = 0; i < V; i++)
        if (!isfinite(logits[i])) { f->bad = 1; f->bad_id = i; f->bad_value = logits[i]; return 1; }
    f->step++;
    return f->inner(f->inner_ctx, token, logits, V);
}

static void gen_check_finite(const FiniteCheck* f, const GenFlags* g) {
    if (!f->bad) return;
    fflush(stdout);
    fatal("check the model's weights (a training run that diverged saves NaN weights; its last good checkpoint is the one to use)",
          "the logits for new token %d are not finite (logit of token %d is %g): '%s'%s%s computes no usable text", f->step + 1,
          f->bad_id, (double)f->bad_value, g->model, g->adapter ? " with the adapter " : "", g->adapter_desc);
}

// --chat and --stop: the text is printed up to the template's stop text and then up to --stop's
// (each held back while it may be starting), and generation ends with the token that completes one.
typedef struct { TextStream ts; ChatStopFilter stop[1 + ARG_STRS_MAX]; int n_stop; } StopStream;

// bytes through the filters in turn; returns non-zero once one has stopped
static int gen_stop_feed(StopStream* c, const char* bytes, size_t n) {
    int stopped = 0;
    for (int f = 0; f < c->n_stop; f++) {
        n = chat_stop_feed(&c->stop[f], bytes, n, &bytes);
        stopped |= c->stop[f].stopped;
    }
    fwrite(bytes, 1, n, c->ts.out);
    fflush(c->ts.out);
    return stopped;
}

static int gen_stop_stream_token(void* ctx, int token, const float* logits, int V) {
    StopStream* c = (StopStream*)ctx;
    (void)logits; (void)V;
    for (int f = 0; f < c->n_stop; f++) if (c->stop[f].stopped) return 1;
    if (token == c->ts.eot) return 0;
    size_t len = 0;
    const char* bytes = token < c->ts.tok->vocab_size ? tok_token_bytes(c->ts.tok, token, &len) : NULL;
    if (!bytes) return 0;
    return gen_stop_feed(c, bytes, len);
}

// At the end: what each filter still holds goes through the ones after it.
static void gen_stop_finish(StopStream* c) {
    for (int f = 0; f < c->n_stop; f++) {
        const char* rest;
        size_t n = chat_stop_flush(&c->stop[f], &rest);
        for (int g = f + 1; g < c->n_stop; g++) n = chat_stop_feed(&c->stop[g], rest, n, &rest);
        fwrite(rest, 1, n, c->ts.out);
    }
    for (int f = 0; f < c->n_stop; f++) chat_stop_free(&c->stop[f]);
}

// The prompt of --chat: --system (if any) and --prompt as the user's message, rendered as
// data/prepare renders a conversation, then the assistant's header.
static void gen_chat_prompt(const ChatTemplate* t, Tokenizer* tok, const GenFlags* g, const GPT2Config* cfg, int** ids, int* n) {
    ChatMessage msgs[2];
    int nm = 0;
    if (g->system) msgs[nm++] = (ChatMessage){ CHAT_SYSTEM, g->system, strlen(g->system) };
    msgs[nm++] = (ChatMessage){ CHAT_USER, g->s.prompt, strlen(g->s.prompt) };
    TokIds out = {0};
    chat_encode_prompt(t, tok, msgs, nm, 0, &out);
    for (size_t i = 0; i < out.n; i++)
        if (out.ids[i] >= cfg->vocab_size)
            fatal("pass the vocabulary the model was trained with (--vocab)",
                  "--prompt: token id %d of the chat prompt is outside the model's vocabulary of %d tokens", out.ids[i], cfg->vocab_size);
    textgen_check_fits((int)out.n, g->max_new, "--max-new-tokens", cfg->max_seq_len);
    *ids = out.ids;
    *n = (int)out.n;
}

static void gen_report(const Model* m, const GenFlags* g, const Tokenizer* tok, const int* ids, int np, int chat, const char* dtype) {
    const GPT2Config* cfg = &m->gpt.cfg;
    fprintf(stderr, "model: %s | L=%d C=%d NH=%d vocab=%d | backend %s%s%s\n", m->source, cfg->num_layers, cfg->channels,
            cfg->num_heads, cfg->vocab_size, ops_backend_name(), m->lora ? " | adapter " : "", m->lora ? g->adapter_desc : "");
    fprintf(stderr, "dtype: %s\n", dtype);
    fprintf(stderr, "prompt: %d tokens | temperature %g | top-k %d | top-p %g | min-p %g | repetition penalty %g | seed %d | %s\n",
            np, g->s.temperature, g->s.top_k, g->s.top_p, g->s.min_p, g->s.repetition_penalty, g->seed, g->no_kv ? "no kv cache" : "kv cache");
    const int skip = chat && tok->eot_id >= 0; // --chat: the rendered prompt without its leading <|endoftext|>
    textgen_echo_prompt(tok, ids + skip, np - skip, stdout, NULL);
}

// --logits-out FILE or --out FILE: its directory is locked for the file (llmc/run/runlock.h) from
// the start, refused while a trainer runs there or another program writes FILE; then the
// temporaries of killed writes of FILE go.
typedef struct { char dir[LLMC_PATH_MAX]; const char* name; } GenOut;

static int gen_out_ours(const char* name, void* ctx) { return !strcmp(name, ((const GenOut*)ctx)->name); }

static void gen_lock_out(const char* path, const char* flag, GenOut* o, int argc, char** argv) {
    snprintf(o->dir, sizeof(o->dir), "%s", path);
    char* slash = strrchr(o->dir, '/');
    if (slash == o->dir) slash[1] = '\0'; else if (slash) *slash = '\0'; else snprintf(o->dir, sizeof(o->dir), ".");
    o->name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (runlock_writer_acquire(o->dir, flag, &o->name, 1, argc, argv) == 1) runlock_writer_clean(stderr, o->dir, gen_out_ours, o); // (stdout is the text)
}

// One completion streamed to stdout as text (with --logits-out, --no-kv-cache, --chat, --stop).
static void gen_stream(const GenFlags* g, Model* m, Tokenizer* tok, const ChatTemplate* tpl, const char* dtype) {
    const GPT2Config* cfg = &m->gpt.cfg;
    int* prompt_ids = NULL; int np = 0;
    if (tpl) gen_chat_prompt(tpl, tok, g, cfg, &prompt_ids, &np);
    else textgen_encode_prompt(tok, g->s.prompt, cfg->vocab_size, cfg->max_seq_len, g->max_new, "--max-new-tokens", &prompt_ids, &np);
    const int need = np + g->max_new - 1;
    // without the cache the full forward needs activations for the whole sequence; with it,
    // only the adapters' scratch (sized by the activations) bounds the prompt chunk
    model_alloc_acts(m, 1, g->no_kv ? need : (m->lora ? (need < 64 ? need : 64) : 1), 0);
    KVCache kv;
    if (!g->no_kv) kv_init(&kv, &m->gpt, 1, need);
    if (!g->quiet) gen_report(m, g, tok, prompt_ids, np, tpl != NULL, dtype);
    SampleParams sp = cli_sample_params(&g->s, g->seed);
    StopStream cs = { { tok, stdout, NULL, tok->eot_id }, { {0}, {0} }, 0 };
    if (tpl) chat_stop_init(&cs.stop[cs.n_stop++], tpl->stop);
    for (int i = 0; i < g->stops.n; i++) chat_stop_init(&cs.stop[cs.n_stop++], g->stops.v[i]);
    LogitsOut lo = { cs.n_stop ? gen_stop_stream_token : textgen_stream_token, cs.n_stop ? (void*)&cs : (void*)&cs.ts, NULL, 0, 0 };
    if (g->logits_out) { lo.cap = (size_t)g->max_new * LOGITS_LINE; lo.buf = (char*)mallocCheck(lo.cap); }
    FiniteCheck fc = { g->logits_out ? gen_logits_token : lo.inner, g->logits_out ? (void*)&lo : lo.inner_ctx, 0, 0, 0, 0.0f };
    double t0 = timer_now_s();
    int got = sample_generate(&m->gpt, g->no_kv ? NULL : &kv, prompt_ids, np, g->max_new, &sp, tok->eot_id, NULL, gen_finite_token, &fc);
    double dt = timer_now_s() - t0;
    gen_check_finite(&fc, g);
    if (g->logits_out) {
        atomic_write_file(g->logits_out, lo.buf, lo.len);
        free(lo.buf);
    }
    gen_stop_finish(&cs);
    fputc('\n', stdout);
    fflush(stdout);
    if (!g->quiet) fprintf(stderr, "generated %d tokens in %.3f s (%.2f tokens/s)\n", got, dt, dt > 0 ? got / dt : 0.0);
    if (!g->no_kv) kv_free(&kv);
    free(prompt_ids);
}

// --num-samples, --prompts, --out: the completions as JSONL (llmc/app/generate_batch.c).
static void gen_batch(const GenFlags* g, Model* m, Tokenizer* tok, const ChatTemplate* tpl, GenPrompts* ps, const char* dtype) {
    GenBatchSpec spec = { g->model, g->adapter ? g->adapter_desc : NULL, tpl, g->system, g->out, &g->stops, g->num_samples, g->max_new, g->quiet,
                          cli_sample_params(&g->s, g->seed) };
    genbatch_encode(ps, tok, &spec, &m->gpt.cfg);
    if (!g->quiet) {
        const GPT2Config* cfg = &m->gpt.cfg;
        fprintf(stderr, "model: %s | L=%d C=%d NH=%d vocab=%d | backend %s%s%s\n", m->source, cfg->num_layers, cfg->channels,
                cfg->num_heads, cfg->vocab_size, ops_backend_name(), m->lora ? " | adapter " : "", m->lora ? g->adapter_desc : "");
        fprintf(stderr, "dtype: %s\n", dtype);
        fprintf(stderr, "prompts: %d | samples %d | temperature %g | top-k %d | seed %d\n", ps->n, g->num_samples, g->s.temperature,
                g->s.top_k, g->seed);
    }
    genbatch_run(m, tok, ps, &spec);
}

// --score FILE: the log-probability of each record's text, one JSON line each on stdout or in --out (llmc/app/gen_score.c).
static void gen_score(const GenFlags* g, Model* m, Tokenizer* tok, const ChatTemplate* tpl, const char* dtype) {
    if (!g->quiet) fprintf(stderr, "model: %s | backend %s%s%s | dtype: %s\n", m->source, ops_backend_name(), m->lora ? " | adapter " : "",
                           m->lora ? g->adapter_desc : "", dtype);
    size_t len;
    char* out = gen_score_file(m, tok, g->score, tpl, !g->quiet, &len);
    if (g->out) atomic_write_file(g->out, out, len);
    else { fwrite(out, 1, len, stdout); fflush(stdout); }
    free(out);
}

int generate_main(int argc, char** argv) {
    GenFlags g;
    gen_parse(&g, argc, argv);
    GenOut out_lock;
    if (g.logits_out) gen_lock_out(g.logits_out, "--logits-out", &out_lock, argc, argv);
    if (g.out) gen_lock_out(g.out, "--out", &out_lock, argc, argv);
    char base[LLMC_PATH_MAX];
    if (!g.model) g.model = gen_adapter_base(g.adapter, base, sizeof(base));
    const ChatTemplate* tpl = g.chat ? chat_template_get(g.chat) : NULL;
    GenPrompts ps;
    if (gen_batched(&g)) genbatch_read(&ps, g.prompts, g.s.prompt, tpl); // (bad lines refused before the model loads)
    char vpath[LLMC_PATH_MAX];
    if (textgen_find_vocab(g.s.vocab, g.model, vpath, sizeof(vpath)) != 0)
        fatal("pass --vocab DIR (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json), or keep data/gpt2 next to this program",
              "no vocabulary found for --model %s", g.model);
    ops_init(g.threads);
    char dtype[224];
    const int bf16 = cli_apply_dtype(g.dtype, dtype, sizeof(dtype));
    Model m;
    gen_model(&m, &g, bf16);
    if (m.base_q8) snprintf(dtype + strlen(dtype), sizeof(dtype) - strlen(dtype), "; linear weights and lm_head in Q8_0");
    Tokenizer tok;
    tok_load(&tok, vpath);
    if (g.score) gen_score(&g, &m, &tok, tpl, dtype);
    else if (gen_batched(&g)) { gen_batch(&g, &m, &tok, tpl, &ps, dtype); genbatch_free(&ps); }
    else gen_stream(&g, &m, &tok, tpl, dtype);
    tok_free(&tok);
    model_free(&m);
    runlock_writer_release();
    return 0;
}
