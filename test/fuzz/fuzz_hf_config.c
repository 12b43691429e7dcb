// Hugging Face config.json (llmc/model/model_io.c model_read_hf_config): the input is the file. A config
// it accepts must describe a GPT-2 this tool can build (gpt2_config_validate ranges).
#include "fuzz.h"
#include "model/model_io.h"

static void read_config(void) {
    GPT2Config cfg;
    model_read_hf_config(fuzz_path("config.json"), &cfg);
    if (cfg.num_layers <= 0 || cfg.channels <= 0 || cfg.num_heads <= 0 || cfg.channels % cfg.num_heads ||
        cfg.vocab_size <= 0 || cfg.padded_vocab_size < cfg.vocab_size || cfg.max_seq_len <= 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    fuzz_write("config.json", data, size);
    FUZZ_RUN(read_config());
    return 0;
}
