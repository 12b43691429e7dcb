// GPT-2 model configuration and the model-size descriptors (d6, d12, ...).
#ifndef LLMC_CONFIG_H
#define LLMC_CONFIG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int max_seq_len;       // n_positions, e.g. 1024
    int vocab_size;        // e.g. 50257
    int padded_vocab_size; // vocab rounded up to a multiple of 128 (llm.c), e.g. 50304
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// Round a vocabulary size up to the next multiple of 128.
int gpt2_pad_vocab(int vocab_size);

// Fill a config from a descriptor: "d6", "d12", "d24", "d36", "d48" (GPT-2 vocab, 1024
// positions) or "tiny" (a 2-layer, 64-channel test model with the GPT-2 vocabulary).
// Returns 0 on success, -1 if the descriptor is not one of those. d12, d24, d36 and d48 are the
// shapes of OpenAI's four GPT-2 sizes (Hugging Face gpt2, gpt2-medium, gpt2-large, gpt2-xl:
// n_embd 768 / 1024 / 1280 / 1600, n_head 12 / 16 / 20 / 25, n_layer 12 / 24 / 36 / 48, every
// head of 64).
int gpt2_config_from_descriptor(GPT2Config* cfg, const char* desc);
// The Hugging Face name of a config with one of those four shapes ("gpt2-medium"), else NULL.
const char* gpt2_config_hf_name(const GPT2Config* cfg);

// The largest head size (n_embd / n_head) the attention kernels take: the CUDA backend's
// (llmc/ops/sizes.h: its flash kernels take multiples of 16 up to 128, its CUDA-core fallback any
// size up to 128). The CPU backend would take any, but a model is refused on both, so that what
// one backend trains the other runs.
#define GPT2_MAX_HEAD_SIZE 128

// Check a config for consistency and for what the kernels support; fatal with a message naming
// `source` otherwise.
void gpt2_config_validate(const GPT2Config* cfg, const char* source);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CONFIG_H
