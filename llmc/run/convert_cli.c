// The `convert` program: flags, then load (and merge) -> write (llmc/model/convert.h).
#include "model/convert.h"
#include "run/args.h"
#include "base/check.h"
#include "run/cli.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "text/textgen.h"
#include <string.h>

typedef struct {
    const char* model;
    const char* adapter;
    const char* out;
    const char* format;
    const char* vocab;
    int seed, threads;
} ConvertFlags;

static void convert_parse(ConvertFlags* f, int argc, char** argv) {
    static const char* const formats[] = { "auto", "hf", "llmc", "llmc-bf16", NULL };
    memset(f, 0, sizeof(*f));
    f->format = "auto";
    ArgSpec specs[8];
    int n = 0;
    specs[n++] = cli_flag_model(&f->model, "model: llm.c .bin (fp32/bf16), .safetensors, sharded index, transformers model dir, "
                                           "4-bit bitsandbytes dir (dequantized), or d6..d48 / tiny (GPT-2 init from --seed)");
    specs[n++] = (ArgSpec){"--adapter", NULL, ARG_STR, &f->adapter, "DIR", "merge this LoRA adapter (PEFT directory) into the model", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--out", "-o", ARG_STR, &f->out, "PATH", "where to write: a .bin file (llm.c) or a directory (transformers)", 1, 0, NULL};
    specs[n++] = (ArgSpec){"--format", NULL, ARG_STR, &f->format, "FMT",
                           "hf: transformers directory (config.json, model.safetensors F32, generation_config.json, tokenizer files); "
                           "llmc / llmc-bf16: llm.c .bin fp32 (v3) / bf16 (v5); auto: llmc when --out ends in .bin, else hf", 1, 0, formats};
    specs[n++] = (ArgSpec){"--vocab", NULL, ARG_STR, &f->vocab, "PATH",
                           "vocabulary for the tokenizer files of an hf output (default: next to the model, else data/gpt2)", 1, 0, NULL};
    specs[n++] = cli_flag_seed(&f->seed);
    specs[n++] = cli_flag_threads(&f->threads);
    args_parse(argc, argv, specs, n,
               "usage: convert --model PATH [--adapter DIR] --out PATH [--format auto|hf|llmc|llmc-bf16]\n\n"
               "Converts a GPT-2 between the formats this tool reads and writes, optionally merging a LoRA adapter.\n"
               "Conversions are exact where the output holds the values (fp32 -> hf -> fp32, bf16 -> hf -> bf16).", NULL);
    if (!f->model) fatal("run with --help to see every flag", "--model is required");
    if (!f->out) fatal("give --out FILE.bin (llm.c) or --out DIR (transformers)", "--out is required");
}

static ConvertFormat convert_format_of(const ConvertFlags* f) {
    if (!strcmp(f->format, "hf")) return CONVERT_HF;
    if (!strcmp(f->format, "llmc")) return CONVERT_LLMC_FP32;
    if (!strcmp(f->format, "llmc-bf16")) return CONVERT_LLMC_BF16;
    size_t n = strlen(f->out);
    return n >= 4 && !strcmp(f->out + n - 4, ".bin") ? CONVERT_LLMC_FP32 : CONVERT_HF;
}

// Refuse an --out of the wrong kind before anything is read or written.
static void convert_check_out(const char* out, ConvertFormat fmt) {
    if (fmt == CONVERT_HF && file_exists(out))
        fatal("give a directory for --format hf (it is created if missing)", "--out '%s' is a file", out);
    if (fmt != CONVERT_HF && dir_exists(out))
        fatal("give a file name for an llm.c output, e.g. --out model.bin", "--out '%s' is a directory", out);
}

static const char* convert_format_name(ConvertFormat fmt) {
    return fmt == CONVERT_HF ? "transformers directory" : fmt == CONVERT_LLMC_BF16 ? "llm.c bf16" : "llm.c fp32";
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

int convert_main(int argc, char** argv) {
    ConvertFlags f;
    convert_parse(&f, argc, argv);
    const ConvertFormat fmt = convert_format_of(&f);
    convert_check_out(f.out, fmt);
    HostModel hm;
    convert_load(&hm, f.model, (uint64_t)f.seed);
    if (f.adapter) {
        ops_init(f.threads); // the adapter is read into the backend's memory
        convert_merge_adapter(&hm, f.adapter);
    }
    if (fmt == CONVERT_HF) {
        char vpath[LLMC_PATH_MAX];
        convert_write_hf(f.out, &hm.pt, hm.params, convert_vocab(&f, &hm.cfg, vpath, sizeof(vpath)));
    } else {
        model_save_llmc(f.out, &hm.pt, hm.params, fmt == CONVERT_LLMC_BF16);
    }
    printf("converted: %s -> %s (%s) | L=%d C=%d NH=%d vocab=%d max_seq_len=%d | %zu parameters\n", hm.source, f.out,
           convert_format_name(fmt), hm.cfg.num_layers, hm.cfg.channels, hm.cfg.num_heads, hm.cfg.vocab_size, hm.cfg.max_seq_len,
           params_count_unpadded(&hm.pt));
    convert_free(&hm);
    return 0;
}
