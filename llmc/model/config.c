#include "model/config.h"
#include "base/check.h"
#include "ops/sizes.h"
#include <string.h>

#if GPT2_MAX_HEAD_SIZE != OPS_CUDA_ATTN_MAX_HS
#error "the config check follows the CUDA attention kernels (llmc/ops/sizes.h)"
#endif

int gpt2_pad_vocab(int vocab_size) { return ((vocab_size + 127) / 128) * 128; }

int gpt2_config_from_descriptor(GPT2Config* cfg, const char* desc) {
    int L, C, NH;
    if      (strcmp(desc, "d6") == 0)   { L = 6;  C = 384;  NH = 6;  }
    else if (strcmp(desc, "d12") == 0)  { L = 12; C = 768;  NH = 12; }
    else if (strcmp(desc, "d24") == 0)  { L = 24; C = 1024; NH = 16; }
    else if (strcmp(desc, "d36") == 0)  { L = 36; C = 1280; NH = 20; }
    else if (strcmp(desc, "d48") == 0)  { L = 48; C = 1600; NH = 25; }
    else if (strcmp(desc, "tiny") == 0) { L = 2;  C = 64;   NH = 4;  }
    else return -1;
    cfg->max_seq_len = strcmp(desc, "tiny") == 0 ? 256 : 1024;
    cfg->vocab_size = 50257;
    cfg->padded_vocab_size = gpt2_pad_vocab(cfg->vocab_size);
    cfg->num_layers = L;
    cfg->channels = C;
    cfg->num_heads = NH;
    return 0;
}

const char* gpt2_config_hf_name(const GPT2Config* c) {
    static const struct { int L, C, NH; const char* name; } sizes[] = {
        {12, 768, 12, "gpt2"}, {24, 1024, 16, "gpt2-medium"}, {36, 1280, 20, "gpt2-large"}, {48, 1600, 25, "gpt2-xl"} };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (c->num_layers == sizes[i].L && c->channels == sizes[i].C && c->num_heads == sizes[i].NH && c->vocab_size == 50257 &&
            c->max_seq_len == 1024)
            return sizes[i].name;
    return NULL;
}

void gpt2_config_validate(const GPT2Config* c, const char* source) {
    const char* hint = "the model file or config.json is corrupt or not a GPT-2 model";
    if (c->num_layers <= 0 || c->num_layers > 1024) fatal(hint, "%s: num_layers = %d is out of range", source, c->num_layers);
    if (c->channels <= 0 || c->channels > 65536) fatal(hint, "%s: channels = %d is out of range", source, c->channels);
    if (c->num_heads <= 0 || c->channels % c->num_heads != 0)
        fatal(hint, "%s: channels (%d) must be a positive multiple of num_heads (%d)", source, c->channels, c->num_heads);
    if (c->channels / c->num_heads > GPT2_MAX_HEAD_SIZE)
        fatal("use a model whose heads are at most 128 wide (n_embd / n_head; every GPT-2 size has 64)",
              "%s: the head size n_embd / n_head = %d / %d = %d is larger than %d, the largest the attention kernels take "
              "(llmc/cuda/attention.cu; refused on every backend, so that a model trains and runs on both)",
              source, c->channels, c->num_heads, c->channels / c->num_heads, GPT2_MAX_HEAD_SIZE);
    if (c->max_seq_len <= 0 || c->max_seq_len > (1 << 20)) fatal(hint, "%s: max_seq_len = %d is out of range", source, c->max_seq_len);
    if (c->vocab_size <= 0 || c->vocab_size > (1 << 24)) fatal(hint, "%s: vocab_size = %d is out of range", source, c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size % 128 != 0)
        fatal(hint, "%s: padded_vocab_size = %d must be a multiple of 128 and >= vocab_size (%d)",
              source, c->padded_vocab_size, c->vocab_size);
}
