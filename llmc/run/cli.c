#include "run/cli.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "ops/ops.h"

void cli_sample_defaults(SampleFlags* f) {
    f->prompt = "<|endoftext|>";
    f->temperature = 1.0f;
    f->top_k = 0;
    f->top_p = 1.0f;
    f->min_p = 0.0f;
    f->repetition_penalty = 1.0f;
    f->vocab = NULL;
}

void cli_sample_flags(SampleFlags* f, ArgSpec* out) {
    const ArgSpec specs[CLI_SAMPLE_NFLAGS] = {
        {"--prompt", NULL, ARG_STR, &f->prompt, "TEXT", "text to continue (<|endoftext|> is the special token; empty = <|endoftext|>)", 0, 1 << 30, NULL},
        {"--temperature", NULL, ARG_FLOAT, &f->temperature, "T", "softmax temperature; 0 = greedy (always the most likely token)", 0, 100, NULL},
        {"--top-k", NULL, ARG_INT, &f->top_k, "K", "sample among the K most likely tokens only (and any tied with the K-th); 0 = all", 0, 1 << 30, NULL},
        {"--top-p", NULL, ARG_FLOAT, &f->top_p, "P", "nucleus sampling: among the most likely tokens whose probabilities add up to P "
         "(the one that crosses P included), 0 < P <= 1; 1 = off", 0, 1, NULL},
        {"--min-p", NULL, ARG_FLOAT, &f->min_p, "P", "sample only among tokens at least P times as likely as the most likely one; 0 = off", 0, 1, NULL},
        {"--repetition-penalty", NULL, ARG_FLOAT, &f->repetition_penalty, "R", "divide the logit of every token already in the text "
         "(prompt included) by R, or multiply it by R where it is negative, before choosing (greedy too); R > 0, 1 = off, "
         "above 1 discourages repeats", 0, 1e6, NULL},
        {"--vocab", NULL, ARG_STR, &f->vocab, "PATH", "vocabulary (dir or file; default: next to the model, else data/gpt2 here or near this program)", 1, 0, NULL},
    };
    for (int i = 0; i < CLI_SAMPLE_NFLAGS; i++) out[i] = specs[i];
}

int cli_sample_check(const SampleFlags* f, char* err, size_t cap) {
    if (!(f->top_p > 0.0f && f->top_p <= 1.0f)) {
        snprintf(err, cap, "--top-p: %g is out of range (0, 1]: 0 would keep no token (1 = off)", (double)f->top_p);
        return -1;
    }
    if (!(f->repetition_penalty > 0.0f) || !isfinite(f->repetition_penalty)) {
        snprintf(err, cap, "--repetition-penalty: %g must be a finite number > 0 (1 = off)", (double)f->repetition_penalty);
        return -1;
    }
    return 0;
}

SampleParams cli_sample_params(const SampleFlags* f, int seed) {
    SampleParams sp = { f->temperature, f->top_k, (uint64_t)seed, f->top_p, f->min_p, f->repetition_penalty };
    return sp;
}

ArgSpec cli_flag_model(const char** dst, const char* help) {
    ArgSpec s = {"--model", "-e", ARG_STR, dst, "PATH", help, 1, 0, NULL};
    return s;
}

ArgSpec cli_flag_seed(int* dst) {
    ArgSpec s = {"--seed", NULL, ARG_INT, dst, "S", "random seed: the same seed reproduces the run (init from scratch, shuffling, dropout, sampling)", 0, 2147483647, NULL};
    return s;
}

ArgSpec cli_flag_threads(int* dst) {
    ArgSpec s = {"--threads", NULL, ARG_INT, dst, "N", "CPU threads; 0 = all cores", 0, 4096, NULL};
    return s;
}

static const char* const DTYPE_NAMES[] = {"auto", "fp32", "bf16", "fp16", NULL};

ArgSpec cli_flag_dtype(const char** dst) {
    ArgSpec s = {"--dtype", NULL, ARG_STR, dst, "D", "GEMM precision: fp32, bf16 (bf16 operands, fp32 accumulation; with LoRA the frozen base is held in bf16), fp16 (fp16 operands, fp32 accumulation, dynamic loss scaling as torch's GradScaler; on the CPU an emulation of its numerics), auto = bf16 where the hardware computes it natively (CPU: AVX512-BF16 or AMX), fp32 otherwise", 1, 0, DTYPE_NAMES};
    return s;
}

int cli_apply_dtype(const char* dtype, char* desc, size_t cap) {
    const char* why = "";
    const int native = ops_bf16_native(&why);
    const int autoset = dtype == NULL || strcmp(dtype, "auto") == 0;
    const int bf16 = autoset ? native : strcmp(dtype, "bf16") == 0;
    const int fp16 = !autoset && strcmp(dtype, "fp16") == 0;
    ops_set_gemm_dtype(fp16 ? OPS_F16 : bf16 ? OPS_BF16 : OPS_F32);
    if (fp16) snprintf(desc, cap, "fp16 GEMMs, fp32 accumulation, dynamic loss scaling when training (--dtype: an emulation on the CPU)");
    else snprintf(desc, cap, "%s (%s: %s)", bf16 ? "bf16 GEMMs, fp32 accumulation" : "fp32", autoset ? "auto" : "--dtype", why);
    return bf16 && !fp16;
}
