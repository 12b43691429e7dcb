// The `convert` program: flags, then load (and merge) -> write (llmc/model/convert.h).
#include "app/convert_cli.h"
#include "model/config.h"
#include "model/convert.h"
#include "model/gguf_io.h"
#include "model/peft_io.h"
#include "run/args.h"
#include "base/check.h"
#include "run/checkpoint.h"
#include "run/cli.h"
#include "run/runlock.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "text/textgen.h"
#include <string.h>

typedef struct {
    const char* model;
    ArgStrs adapters;     // --adapter, merged in the order given
    const char* adapter;  // the first of them (NULL: none)
    const char* out;
    const char* format;
    const char* gguf_type;
    const char* vocab;
    int seed, threads;
} ConvertFlags;

static void convert_parse(ConvertFlags* f, int argc, char** argv) {
    static const char* const formats[] = { "auto", "hf", "llmc", "llmc-bf16", "safetensors", "gguf", "gguf-lora", NULL };
    static const char* const gguf_types[] = { "f32", "f16", "bf16", "q8_0", NULL };
    static const char* const fmt_help =
        "hf: transformers directory (config.json, model.safetensors F32, generation_config.json, tokenizer files); "
        "llmc / llmc-bf16: llm.c .bin fp32 (v3) / bf16 (v5); safetensors: one .safetensors file (the directory's weights); "
        "gguf: a GGUF model for llama.cpp / Ollama (tokenizer included); gguf-lora: --adapter alone as a GGUF LoRA adapter "
        "(llama.cpp --lora) for the base --model; auto: by the --out name (.bin, .safetensors, .gguf), else hf";
    memset(f, 0, sizeof(*f));
    f->format = "auto";
    f->gguf_type = "f16";
    ArgSpec specs[10];
    int n = 0;
    specs[n++] = cli_flag_model(&f->model, "model: llm.c .bin (fp32/bf16), .safetensors, sharded index, transformers model dir, GGUF, "
                                           "4-bit bitsandbytes dir (dequantized), or d6..d48 / tiny (GPT-2 init from --seed)");
    specs[n++] = (ArgSpec){"--adapter", NULL, ARG_STRS, &f->adapters, "DIR", "merge this LoRA adapter (PEFT directory) into the model; "
                           "given several times, each is merged in turn into the model the ones before made (PEFT's merge_and_unload "
                           "of each in turn); with --to gguf-lora: the one adapter to export", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--out", "-o", ARG_STR, &f->out, "PATH", "where to write: a .bin, .safetensors or .gguf file, or a directory (transformers)", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--to", NULL, ARG_STR, &f->format, "FMT", fmt_help, 1, 0, formats};
    specs[n++] = (ArgSpec){"--format", NULL, ARG_STR, &f->format, "FMT", "the same as --to", 1, 0, formats};
    specs[n++] = (ArgSpec){"--gguf-type", NULL, ARG_STR, &f->gguf_type, "T",
                           "GGUF weight type of the matmul weights and token embedding: f32, f16 (default, as llama.cpp's converter), bf16, "
                           "q8_0 (llama.cpp's 8-bit blocks); biases, norms and position embedding stay f32", 1, 0, gguf_types};
    specs[n++] = (ArgSpec){"--vocab", NULL, ARG_STR, &f->vocab, "PATH",
                           "vocabulary for the tokenizer of an hf or gguf output (default: next to the model, else data/gpt2)", 1, 0, NULL};
    specs[n] = cli_flag_seed(&f->seed);
    specs[n++].help = "with --model d6..d48 / tiny: the seed of the initialization (the weights a trainer starts from with the same "
                      "--model and --seed); unused for a model read from a file";
    specs[n++] = cli_flag_threads(&f->threads);
    args_parse(argc, argv, specs, n,
               "usage: convert --model PATH [--adapter DIR] --out PATH [--to auto|hf|llmc|llmc-bf16|safetensors|gguf|gguf-lora] [--gguf-type T]\n\n"
               "Converts a GPT-2 between the formats this tool reads and writes, optionally merging a LoRA adapter;\n"
               "writes GGUF models and LoRA adapters for llama.cpp. Conversions are exact where the output holds the\n"
               "values (fp32 -> hf -> fp32, bf16 -> hf -> bf16, fp32 -> gguf f32 -> fp32).", NULL);
    f->adapter = f->adapters.n ? f->adapters.v[0] : NULL;
    if (!f->model) fatal("run with --help to see every flag (with --to gguf-lora, --model is the adapter's base)", "--model is required");
    if (!f->out) fatal("give --out FILE.bin (llm.c), FILE.gguf, FILE.safetensors or --out DIR (transformers)", "--out is required");
}

static int ends_with(const char* s, const char* suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static ConvertFormat convert_format_of(const ConvertFlags* f) {
    static const char* const names[] = { "hf", "llmc", "llmc-bf16", "safetensors", "gguf", "gguf-lora" };
    static const ConvertFormat fmts[] = { CONVERT_HF, CONVERT_LLMC_FP32, CONVERT_LLMC_BF16, CONVERT_SAFETENSORS, CONVERT_GGUF, CONVERT_GGUF_LORA };
    for (int i = 0; i < 6; i++) if (!strcmp(f->format, names[i])) return fmts[i];
    if (ends_with(f->out, ".bin")) return CONVERT_LLMC_FP32;
    if (ends_with(f->out, ".safetensors")) return CONVERT_SAFETENSORS;
    if (ends_with(f->out, ".gguf")) return CONVERT_GGUF;
    return CONVERT_HF;
}

// The last component of path (a trailing '/' left out) into out.
static void convert_basename(const char* path, char* out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), path + b);
}

// 1 when name is an entry of a training checkpoint (llmc/run/checkpoint.h: model_SSSSSSSS.bin,
// adapter_SSSSSSSS/, state_SSSSSSSS_RRRRR.bin, DONE_SSSSSSSS, PENDING_SSSSSSSS).
static int convert_is_ckpt_name(const char* name) {
    static const char* const kinds[] = { "model", "adapter", "state", "DONE", "PENDING" };
    for (int k = 0; k < 5; k++) {
        const size_t kl = strlen(kinds[k]);
        if (strncmp(name, kinds[k], kl) != 0 || name[kl] != '_') continue;
        const char* d = name + kl + 1;
        long step = 0;
        int rank = 0, i;
        for (i = 0; i < 8 && d[i] >= '0' && d[i] <= '9'; i++) step = step * 10 + (d[i] - '0');
        if (i < 8) continue;
        for (i = 9; k == 2 && d[8] == '_' && i < 14 && d[i] >= '0' && d[i] <= '9'; i++) rank = rank * 10 + (d[i] - '0');
        char want[96];
        ckpt_name(want, sizeof(want), kinds[k], step, rank);
        const size_t n = strlen(name);
        if (strncmp(want, name, n) == 0 && (want[n] == '\0' || want[n] == '/')) return 1; // (an adapter's: its directory)
    }
    return 0;
}

// Refuse an --out of the wrong kind before anything is read or written.
static void convert_check_out(const ConvertFlags* f, ConvertFormat fmt) {
    const char* out = f->out;
    char base[LLMC_PATH_MAX], parent[LLMC_PATH_MAX], up[LLMC_PATH_MAX];
    convert_basename(out, base, sizeof(base));
    snprintf(parent, sizeof(parent), "%s", out);
    char* slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    convert_basename(slash ? parent : ".", up, sizeof(up));
    if (convert_is_ckpt_name(base) || (fmt != CONVERT_HF && convert_is_ckpt_name(up)))
        fatal("choose another name: a trainer with this folder as --out would take the file for its checkpoint, or write its own over it",
              "--out '%s' has the name of a training checkpoint's entry (%s)", out, convert_is_ckpt_name(base) ? base : up);
    if (fmt == CONVERT_HF && file_exists(out))
        fatal("give a directory for --to hf (it is created if missing)", "--out '%s' is a file", out);
    if (fmt == CONVERT_HF && (ends_with(out, ".safetensors") || ends_with(out, ".gguf")))
        fatal("leave out --to hf to write that file, or give a directory name", "--out '%s' names a file but --to hf writes a directory", out);
    if (fmt != CONVERT_HF && dir_exists(out))
        fatal("give a file name, e.g. --out model.bin, model.safetensors or model.gguf", "--out '%s' is a directory", out);
    if (fmt == CONVERT_GGUF_LORA && f->adapters.n != 1)
        fatal("give the one PEFT adapter directory to export with --adapter (or merge the others first: convert --adapter A --adapter B)",
              "--to gguf-lora needs one --adapter (%d given)", f->adapters.n);
}

// What convert writes: the files of a transformers directory, or the --out file (its directory's
// lock, runlock.h, is taken for them).
static const char* const CONVERT_HF_FILES[] = { "config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                                                "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json" };
typedef struct { const char* const* names; int n; const char* one[1]; char dir[LLMC_PATH_MAX], base[LLMC_PATH_MAX]; } ConvertOut;

static int convert_ours(const char* name, void* ctx) {
    const ConvertOut* o = (const ConvertOut*)ctx;
    for (int i = 0; i < o->n; i++) if (!strcmp(name, o->names[i])) return 1;
    return 0;
}

// Lock the directory written (the --out directory, or the --out file's) once it exists: refused
// while a trainer runs there or another program writes these names; then the temporaries of
// killed conversions of them go.
static void convert_lock(const ConvertFlags* f, ConvertFormat fmt, ConvertOut* o, int argc, char** argv) {
    if (fmt == CONVERT_HF) {
        snprintf(o->dir, sizeof(o->dir), "%s", f->out);
        o->names = CONVERT_HF_FILES; o->n = (int)(sizeof(CONVERT_HF_FILES) / sizeof(CONVERT_HF_FILES[0]));
    } else {
        convert_basename(f->out, o->base, sizeof(o->base));
        snprintf(o->dir, sizeof(o->dir), "%s", f->out);
        char* slash = strrchr(o->dir, '/');
        if (slash) *slash = '\0'; else snprintf(o->dir, sizeof(o->dir), ".");
        if (!o->dir[0]) snprintf(o->dir, sizeof(o->dir), "/");
        o->one[0] = o->base; o->names = o->one; o->n = 1;
    }
    if (runlock_writer_acquire(o->dir, "--out", o->names, o->n, argc, argv) == 1) runlock_writer_clean(stdout, o->dir, convert_ours, o);
}

static const char* convert_format_name(ConvertFormat fmt) {
    static const char* const names[] = { "transformers directory", "llm.c fp32", "llm.c bf16", "safetensors file", "GGUF", "GGUF LoRA adapter" };
    return names[fmt];
}

// The vocabulary of an hf output: --vocab must fit the model; one found next to the model or
// bundled is used when it fits, else the directory gets no tokenizer files (with a note).
static const char* convert_vocab(const ConvertFlags* f, const GPT2Config* cfg, char* vpath, size_t cap) {
    char why[LLMC_PATH_MAX + 200];
    const int found = textgen_find_vocab(f->vocab, f->model, vpath, cap) == 0;
    if (convert_vocab_fits(found ? vpath : NULL, cfg, why, sizeof(why)) == 0) return vpath;
    if (f->vocab) fatal("pass the vocabulary the model was trained with, or leave out --vocab", "--vocab: %s", why);
    printf("note: no tokenizer files in %s: %s\n", f->out, why);
    return NULL;
}

// general.*'s names of --model and --adapter, not their paths (gguf_model_name); init: what a size
// descriptor's weights are (their seed), else "".
static void convert_gguf_names(const ConvertFlags* f, char* base, char* init, char* adapter, size_t cap) {
    GPT2Config scratch;
    gguf_model_name(f->model, base, cap);
    init[0] = adapter[0] = '\0';
    if (gpt2_config_from_descriptor(&scratch, f->model) == 0) snprintf(init, cap, " (GPT-2 init, seed %d)", f->seed);
    for (int i = 0; i < f->adapters.n; i++) {
        char one[256];
        gguf_model_name(f->adapters.v[i], one, sizeof(one));
        const size_t len = strlen(adapter);
        snprintf(adapter + len, cap - len, "%s%s", i ? " + " : "", one);
    }
}

// A GGUF model of hm, with its tokenizer (a vocabulary that fits is required) and provenance.
static void convert_write_gguf(const ConvertFlags* f, const HostModel* hm, GgmlType type) {
    char vpath[LLMC_PATH_MAX], why[LLMC_PATH_MAX + 200], desc[3 * LLMC_PATH_MAX];
    const int found = textgen_find_vocab(f->vocab, f->model, vpath, sizeof(vpath)) == 0;
    if (convert_vocab_fits(found ? vpath : NULL, &hm->cfg, why, sizeof(why)) != 0)
        fatal("a GGUF file carries the tokenizer: pass the model's vocabulary with --vocab", "%s", why);
    char base[1024], init[1024], adapter[1024];
    convert_gguf_names(f, base, init, adapter, sizeof(base));
    if (f->adapter) snprintf(desc, sizeof(desc), "GPT-2 from %s%s with the LoRA adapter%s %s merged in, written by llmc-ft convert", base, init,
                             f->adapters.n > 1 ? "s" : "", adapter);
    else snprintf(desc, sizeof(desc), "GPT-2 from %s%s, written by llmc-ft convert", base, init);
    GgufProvenance prov = { NULL, base, f->adapter ? "lora-merged" : NULL, desc };
    gguf_save_gpt2(f->out, &hm->pt, hm->params, type, vpath, &prov);
}

// The adapter alone, checked against the base --model (a wrong base is refused by the adapter loader).
static void convert_write_gguf_lora(const ConvertFlags* f, const HostModel* hm, GgmlType type) {
    char desc[3 * LLMC_PATH_MAX];
    LoraModel* lm = peft_load_adapter(f->adapter, &hm->cfg);
    if (lora_init_rewrites_base(lm->spec.init))
        fatal("merge it instead (--to gguf with --adapter), or convert it to a plain LoRA first (PEFT: path_initial_model_for_weight_conversion)",
              "--adapter %s: a PiSSA adapter holds the factors of a rewritten base, which a GGUF LoRA adapter cannot carry", f->adapter);
    char base[1024], init[1024], adapter[1024];
    convert_gguf_names(f, base, init, adapter, sizeof(base));
    snprintf(desc, sizeof(desc), "LoRA adapter %s for GPT-2 %s%s, written by llmc-ft convert", adapter, base, init);
    GgufProvenance prov = { NULL, base, "lora", desc };
    gguf_save_lora(f->out, lm, type, &prov);
    lora_free(lm);
}

int convert_main(int argc, char** argv) {
    ConvertFlags f;
    convert_parse(&f, argc, argv);
    const ConvertFormat fmt = convert_format_of(&f);
    convert_check_out(&f, fmt);
    ConvertOut lock;
    convert_lock(&f, fmt, &lock, argc, argv); // (a directory still to be made: once made, below)
    GgmlType gtype;
    gguf_parse_type(f.gguf_type, &gtype); // (one of the choices args_parse allowed)
    HostModel hm;
    convert_load(&hm, f.model, (uint64_t)f.seed);
    if (f.adapter) ops_init(f.threads); // the adapter is read into the backend's memory
    for (int i = 0; i < f.adapters.n && fmt != CONVERT_GGUF_LORA; i++) convert_merge_adapter(&hm, f.adapters.v[i]);
    if (fmt == CONVERT_HF) {
        char vpath[LLMC_PATH_MAX];
        const char* vocab = convert_vocab(&f, &hm.cfg, vpath, sizeof(vpath));
        mkdir_p(f.out);
        convert_lock(&f, fmt, &lock, argc, argv);
        convert_write_hf(f.out, &hm.pt, hm.params, vocab);
    } else if (fmt == CONVERT_SAFETENSORS) {
        convert_write_safetensors(f.out, &hm.pt, hm.params);
    } else if (fmt == CONVERT_GGUF) {
        convert_write_gguf(&f, &hm, gtype);
    } else if (fmt == CONVERT_GGUF_LORA) {
        convert_write_gguf_lora(&f, &hm, gtype);
    } else {
        model_save_llmc(f.out, &hm.pt, hm.params, fmt == CONVERT_LLMC_BF16);
    }
    const int gg = fmt == CONVERT_GGUF || fmt == CONVERT_GGUF_LORA;
    printf("converted: %s%s%s -> %s (%s%s%s) | L=%d C=%d NH=%d vocab=%d max_seq_len=%d | %zu parameters\n", hm.source,
           fmt == CONVERT_GGUF_LORA ? " + adapter " : "", fmt == CONVERT_GGUF_LORA ? f.adapter : "", f.out, convert_format_name(fmt),
           gg ? " " : "", gg ? f.gguf_type : "", hm.cfg.num_layers, hm.cfg.channels, hm.cfg.num_heads, hm.cfg.vocab_size,
           hm.cfg.max_seq_len, params_count_unpadded(&hm.pt));
    convert_free(&hm);
    runlock_writer_release();
    return 0;
}
