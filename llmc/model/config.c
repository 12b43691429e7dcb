#include "model/config.h"
#include "base/check.h"
#include <string.h>

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

void gpt2_config_validate(const GPT2Config* c, const char* source) {
    const char* hint = "the model file or config.json is corrupt or not a GPT-2 model";
    if (c->num_layers <= 0 || c->num_layers > 1024) fatal(hint, "%s: num_layers = %d is out of range", source, c->num_layers);
    if (c->channels <= 0 || c->channels > 65536) fatal(hint, "%s: channels = %d is out of range", source, c->channels);
    if (c->num_heads <= 0 || c->channels % c->num_heads != 0)
        fatal(hint, "%s: channels (%d) must be a positive multiple of num_heads (%d)", source, c->channels, c->num_heads);
    if (c->max_seq_len <= 0 || c->max_seq_len > (1 << 20)) fatal(hint, "%s: max_seq_len = %d is out of range", source, c->max_seq_len);
    if (c->vocab_size <= 0 || c->vocab_size > (1 << 24)) fatal(hint, "%s: vocab_size = %d is out of range", source, c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size % 128 != 0)
        fatal(hint, "%s: padded_vocab_size = %d must be a multiple of 128 and >= vocab_size (%d)",
              source, c->padded_vocab_size, c->vocab_size);
}
