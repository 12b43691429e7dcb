// Flag definitions shared by the programs (train_gpt2, train_lora, generate): a flag that more than
// one program takes is defined here once (name, alias, type, range, help), so it means the same
// everywhere. Each program lists its own flags (llmc/run/runconfig.c, llmc/app/generate.c) around these.
#ifndef LLMC_CLI_H
#define LLMC_CLI_H

#include <stddef.h>
#include "run/args.h"
#include "model/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

// How a completion is sampled (generate, and the trainers' --sample-* output).
typedef struct {
    const char* prompt;   // text to continue; <|endoftext|> by default
    float temperature;    // 0 = greedy
    int top_k;            // 0 = the whole vocabulary
    float top_p;          // 1 = off
    float min_p;          // 0 = off
    float repetition_penalty; // 1 = off
    const char* vocab;    // NULL: next to the model, else data/gpt2
} SampleFlags;

#define CLI_SAMPLE_NFLAGS 7
void cli_sample_defaults(SampleFlags* f);
// --prompt, --temperature, --top-k, --top-p, --min-p, --repetition-penalty, --vocab into
// out[0 .. CLI_SAMPLE_NFLAGS).
void cli_sample_flags(SampleFlags* f, ArgSpec* out);
// The checks the table's inclusive ranges cannot make: --top-p in (0, 1], --repetition-penalty
// > 0 (and each a float once parsed: 1e-300 is 0 in a float). 0, or -1 with the message in err.
int cli_sample_check(const SampleFlags* f, char* err, size_t cap);
// The sampler's parameters for these flags and seed.
SampleParams cli_sample_params(const SampleFlags* f, int seed);

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
