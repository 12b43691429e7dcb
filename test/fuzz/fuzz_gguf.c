// GGUF reader (llmc/base/gguf.c) and GPT-2 loader (llmc/model/gguf_io.c): the input is the file.
// gguf_try_open validates it without fatal(); every tensor it accepts must lie inside the file
// and read as raw bytes and as fp32 (F16 / BF16 / Q8_0 dequantized), every metadata entry must be
// found by its key. A file that opens then goes to gguf_load_gpt2 (refusals there are fatal());
// a model it loads must have a consistent parameter table.
#include "fuzz.h"
#include "base/gguf.h"
#include "model/gguf_io.h"

static volatile float g_sink;

static int read_all(size_t file_size) {
    GgufFile f;
    char err[1024];
    if (gguf_try_open(&f, fuzz_path("x.gguf"), err, sizeof(err)) != 0) return 0;
    for (int64_t i = 0; i < f.n_kv; i++) if (gguf_kv(&f, f.kv[i].key) != &f.kv[i]) abort();
    for (int64_t i = 0; i < f.n_tensors; i++) {
        const GgufTensor* t = &f.tensors[i];
        if (gguf_tensor(&f, t->name) != t) abort();
        if (f.data_start + t->offset + t->nbytes > file_size) abort(); // accepted a tensor outside the file
        if (t->nbytes > (1u << 24)) continue;                          // (small inputs: never, but stay bounded)
        void* raw = malloc(t->nbytes ? (size_t)t->nbytes : 1);
        gguf_read_raw(&f, t, raw);
        free(raw);
        float* x = (float*)malloc((size_t)t->numel * sizeof(float));
        gguf_read_f32(&f, t, x);
        for (uint64_t k = 0; k < t->numel; k += 31) g_sink += x[k];
        free(x);
    }
    const int has_arch = gguf_kv_str(&f, "general.architecture") != NULL;
    gguf_close(&f);
    return has_arch;
}

static void load_model(void) {
    GPT2Config cfg;
    ParamTable pt;
    float* params = NULL;
    gguf_load_gpt2(fuzz_path("x.gguf"), &cfg, &pt, &params);
    if (pt.total == 0 || pt.t[NUM_PARAM_TENSORS - 1].offset + pt.t[NUM_PARAM_TENSORS - 1].numel > pt.total) abort();
    for (size_t i = 0; i < pt.total; i += 97) g_sink += params[i];
    free(params);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_setup();
    fuzz_write("x.gguf", data, size);
    if (read_all(size)) FUZZ_RUN(load_model());
    return 0;
}
