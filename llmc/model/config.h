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
// Returns 0 on success, -1 if the descriptor is not one of those.
int gpt2_config_from_descriptor(GPT2Config* cfg, const char* desc);

// Check a config for consistency; fatal with a message naming `source` otherwise.
void gpt2_config_validate(const GPT2Config* cfg, const char* source);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CONFIG_H
