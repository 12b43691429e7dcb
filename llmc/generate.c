#define _GNU_SOURCE
#include "generate.h"
#include "args.h"
#include "check.h"
#include "timer.h"
#include "cli.h"
#include "fileio.h"
#include "textgen.h"
#include "model.h"
#include "ops.h"
#include "sampler.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char* model;
    const char* adapter;
    SampleFlags s;
    int max_new, seed, no_kv, threads, quiet;
} GenFlags;

static void gen_parse(GenFlags* g, int argc, char** argv) {
    memset(g, 0, sizeof(*g));
    g->max_new = 64; g->seed = 1337;
    cli_sample_defaults(&g->s);
    ArgSpec specs[16];
    int n = 0;
    specs[n++] = cli_flag_model(&g->model, "model: llm.c .bin, .safetensors, sharded index, transformers model dir (also 4-bit bitsandbytes)");
    specs[n++] = (ArgSpec){"--adapter", NULL, ARG_STR, &g->adapter, "DIR", "apply this LoRA adapter (PEFT: adapter_config.json + adapter_model.safetensors)", 1, 0, NULL};
    cli_sample_flags(&g->s, specs + n);
    n += CLI_SAMPLE_NFLAGS;
    specs[n++] = (ArgSpec){"--max-new-tokens", "-n", ARG_INT, &g->max_new, "N", "tokens to generate (fewer if <|endoftext|> comes first)", 1, 1 << 20, NULL};
    specs[n++] = cli_flag_seed(&g->seed);
    specs[n++] = (ArgSpec){"--no-kv-cache", NULL, ARG_BOOL, &g->no_kv, NULL, "recompute the whole sequence for every token (slow; for checking the cache)", 1, 0, NULL};
    specs[n++] = cli_flag_threads(&g->threads);
    specs[n++] = (ArgSpec){"--quiet", "-q", ARG_BOOL, &g->quiet, NULL, "print only the text (no prompt echo, no statistics)", 1, 0, NULL};
    args_parse(argc, argv, specs, n,
               "usage: generate --model PATH [--adapter DIR] [--prompt TEXT] [options]\n\n"
               "Continues a prompt with a GPT-2 (and optionally a LoRA adapter), streaming the text to stdout.", NULL);
    if (!g->model) fatal("run with --help to see every flag", "--model is required");
}

// The model (any kind the trainers write, incl. 4-bit NF4 checkpoints) and its adapter; the
// activations are sized once the prompt is known (model_alloc_acts).
static void gen_model(Model* m, const GenFlags* g) {
    LoraSource src;
    ModelSpec spec;
    memset(&src, 0, sizeof(src));
    memset(&spec, 0, sizeof(spec));
    spec.path = g->model;
    spec.B = 1; spec.T = 1;
    src.adapter = g->adapter;
    if (g->adapter) spec.lora_src = &src;
    model_assemble(m, &spec);
}

int generate_main(int argc, char** argv) {
    GenFlags g;
    gen_parse(&g, argc, argv);
    char vpath[LLMC_PATH_MAX];
    if (textgen_find_vocab(g.s.vocab, g.model, vpath, sizeof(vpath)) != 0)
        fatal("pass --vocab DIR (encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json), or run from the repository root (data/gpt2)",
              "no vocabulary found for --model %s", g.model);
    ops_init(g.threads);
    Model m;
    gen_model(&m, &g);
    const GPT2Config* cfg = &m.gpt.cfg;
    Tokenizer tok;
    tok_load(&tok, vpath);
    int* prompt_ids = NULL; int np = 0;
    textgen_encode_prompt(&tok, g.s.prompt, cfg->vocab_size, cfg->max_seq_len, g.max_new, "--max-new-tokens", &prompt_ids, &np);
    const int need = np + g.max_new - 1;
    // without the cache the full forward needs activations for the whole sequence; with it,
    // only the adapters' scratch (sized by the activations) bounds the prompt chunk
    model_alloc_acts(&m, 1, g.no_kv ? need : (m.lora ? (need < 64 ? need : 64) : 1));
    KVCache kv;
    if (!g.no_kv) kv_init(&kv, &m.gpt, 1, need);
    if (!g.quiet) {
        fprintf(stderr, "model: %s | L=%d C=%d NH=%d vocab=%d | backend %s%s%s\n", m.source, cfg->num_layers, cfg->channels,
                cfg->num_heads, cfg->vocab_size, ops_backend_name(), m.lora ? " | adapter " : "", m.lora ? g.adapter : "");
        fprintf(stderr, "prompt: %d tokens | temperature %g | top-k %d | seed %d | %s\n", np, g.s.temperature, g.s.top_k, g.seed,
                g.no_kv ? "no kv cache" : "kv cache");
        textgen_echo_prompt(&tok, prompt_ids, np, stdout, NULL);
    }
    SampleParams sp = { g.s.temperature, g.s.top_k, (uint64_t)g.seed };
    TextStream gs = { &tok, stdout, NULL, tok.eot_id };
    double t0 = timer_now_s();
    int got = sample_generate(&m.gpt, g.no_kv ? NULL : &kv, prompt_ids, np, g.max_new, &sp, tok.eot_id, NULL, textgen_stream_token, &gs);
    double dt = timer_now_s() - t0;
    fputc('\n', stdout);
    fflush(stdout);
    if (!g.quiet) fprintf(stderr, "generated %d tokens in %.3f s (%.2f tokens/s)\n", got, dt, dt > 0 ? got / dt : 0.0);
    if (!g.no_kv) kv_free(&kv);
    free(prompt_ids);
    tok_free(&tok);
    model_free(&m);
    return 0;
}
