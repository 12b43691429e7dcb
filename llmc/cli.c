#include "cli.h"

void cli_sample_defaults(SampleFlags* f) {
    f->prompt = "<|endoftext|>";
    f->temperature = 1.0f;
    f->top_k = 0;
    f->vocab = NULL;
}

void cli_sample_flags(SampleFlags* f, ArgSpec* out) {
    const ArgSpec specs[CLI_SAMPLE_NFLAGS] = {
        {"--prompt", NULL, ARG_STR, &f->prompt, "TEXT", "text to continue (<|endoftext|> is the special token; empty = <|endoftext|>)", 1, 0, NULL},
        {"--temperature", NULL, ARG_FLOAT, &f->temperature, "T", "softmax temperature; 0 = greedy (always the most likely token)", 0, 100, NULL},
        {"--top-k", NULL, ARG_INT, &f->top_k, "K", "sample among the K most likely tokens only; 0 = all", 0, 1 << 30, NULL},
        {"--vocab", NULL, ARG_STR, &f->vocab, "PATH", "vocabulary (dir or file; default: next to the model, else data/gpt2 here or near this program)", 1, 0, NULL},
    };
    for (int i = 0; i < CLI_SAMPLE_NFLAGS; i++) out[i] = specs[i];
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
