// Flag definitions shared by the programs (train_gpt2, train_lora, generate): a flag that more than
// one program takes is defined here once (name, alias, type, range, help), so it means the same
// everywhere. Each program lists its own flags (llmc/run/runconfig.c, llmc/app/generate.c) around these.
#ifndef LLMC_CLI_H
#define LLMC_CLI_H

#include <stddef.h>
#include "run/args.h"

#ifdef __cplusplus
extern "C" {
#endif

// How a completion is sampled (generate, and the trainers' --sample-* output).
typedef struct {
    const char* prompt;   // text to continue; <|endoftext|> by default
    float temperature;    // 0 = greedy
    int top_k;            // 0 = the whole vocabulary
    const char* vocab;    // NULL: next to the model, else data/gpt2
} SampleFlags;

#define CLI_SAMPLE_NFLAGS 4
void cli_sample_defaults(SampleFlags* f);
// --prompt, --temperature, --top-k, --vocab into out[0 .. CLI_SAMPLE_NFLAGS).
void cli_sample_flags(SampleFlags* f, ArgSpec* out);

// --model (help: what the program accepts), --seed, --threads.
ArgSpec cli_flag_model(const char** dst, const char* help);
ArgSpec cli_flag_seed(int* dst);
ArgSpec cli_flag_threads(int* dst);
// --dtype fp32|bf16|fp16|auto: the precision of the GEMMs (llmc/ops/ops.h, ops_set_gemm_dtype).
ArgSpec cli_flag_dtype(const char** dst);
// Apply a --dtype value to the backend (after ops_init): auto is bf16 where ops_bf16_native, fp32
// otherwise. Writes the banner's phrase into desc, e.g. "bf16 GEMMs, fp32 accumulation (auto:
// the CPU has AVX512-BF16)", and returns 1 for bf16 (0 for fp32 and fp16).
int cli_apply_dtype(const char* dtype, char* desc, size_t cap);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CLI_H
