// Model files through model_load (llmc/model/model_io.c), which sniffs the format: llm.c .bin (v3 fp32,
// v5 bf16), a safetensors file (with config.json next to it, or the config inferred from the
// tensor shapes), a sharded index. Input: the file, optionally followed by FUZZ_SEP and the text
// of a config.json placed beside it. Refusals are fatal(); a model that loads must have a
// consistent parameter table.
#include "fuzz.h"
#include "model/model_io.h"
#include "model/params.h"

#define FUZZ_SEP "\n==config.json==\n"

static volatile float g_sink;

static void load(void) {
    GPT2Config cfg;
    ParamTable pt;
    float* params = NULL;
    model_load(fuzz_path("model.bin"), &cfg, &pt, &params);
    if (pt.total == 0 || pt.t[NUM_PARAM_TENSORS - 1].offset + pt.t[NUM_PARAM_TENSORS - 1].numel > pt.total) abort();
    for (size_t i = 0; i < pt.total; i += 97) g_sink += params[i]; // every element is readable
    free(params);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    fuzz_write_pair(data, size, FUZZ_SEP, "model.bin", "config.json");
    FUZZ_RUN(load());
    return 0;
}
