// PEFT adapters through the adapter loader (llmc/model/peft_io.c peft_try_load_adapter): input is
// adapter_config.json, FUZZ_SEP, adapter_model.safetensors, loaded for a 2-layer, 64-channel
// GPT-2 (the shapes of test/ref/lora_tiny). An adapter that loads is merged into a base, which
// touches every adapter matrix at the shapes the loader accepted. The loader reports errors
// without fatal(), so LeakSanitizer stays on.
#include "fuzz.h"
#include "model/lora.h"
#include "ops/ops.h"
#include "model/peft_io.h"
#include "model/params.h"

#define FUZZ_SEP "\n==adapter_model.safetensors==\n"

static GPT2Config g_cfg = { 64, 100, 128, 2, 4, 64 }; // max_seq_len, vocab, padded, L, NH, C
static ParamTable g_pt;
static float* g_base;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    ops_init(1);
    params_build(&g_pt, &g_cfg);
    g_base = (float*)calloc(g_pt.total, sizeof(float));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    fuzz_write_pair(data, size, FUZZ_SEP, "adapter_config.json", "adapter_model.safetensors");
    char err[1024];
    LoraModel* lm = NULL;
    FUZZ_RUN(lm = peft_try_load_adapter(g_fuzz_dir, &g_cfg, err, sizeof(err)));
    if (lm) {
        lora_merge(lm, &g_pt, g_base);
        lora_free(lm);
    }
    return 0;
}
