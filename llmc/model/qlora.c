#include "model/qlora.h"
#include "base/check.h"
#include "model/model_io.h"
#include "base/safetensors.h"
#include "base/fileio.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

// Slot q of a layer holds the weight of linear kind q (linear_weight_id).

int qlora_is_quantized(ParamId id) { return linear_kind_of(id) >= 0; }

static Nf4Base* base_new(int L) {
    Nf4Base* b = (Nf4Base*)calloc(1, sizeof(Nf4Base));
    if (!b) fatal(NULL, "out of host memory (QLoRA base)");
    b->L = L;
    b->t = (NF4Tensor*)calloc((size_t)QLORA_NQ * L, sizeof(NF4Tensor));
    if (!b->t) fatal(NULL, "out of host memory (QLoRA base)");
    return b;
}

static void base_account(Nf4Base* b) {
    b->n_quant = 0; b->bytes = 0;
    for (int i = 0; i < QLORA_NQ * b->L; i++) { b->n_quant += b->t[i].n; b->bytes += nf4_bytes(&b->t[i]); }
}

Nf4Base* qlora_quantize(const ParamTable* pt, const float* host) {
    const int L = pt->cfg.num_layers;
    Nf4Base* b = base_new(L);
    for (int q = 0; q < QLORA_NQ; q++) {
        const ParamInfo* w = &pt->t[linear_weight_id(q)];
        const int64_t shape[2] = {(int64_t)w->rows, (int64_t)w->cols}; // [out, in], as Linear4bit holds it
        for (int l = 0; l < L; l++)
            nf4_quantize(&b->t[q * L + l], host + params_layer_offset(pt, linear_weight_id(q), l), 2, shape, 1);
    }
    base_account(b);
    return b;
}

void qlora_release_host(const ParamTable* pt, float* host) {
#if defined(__linux__) && defined(MADV_DONTNEED)
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int q = 0; q < QLORA_NQ; q++) {
        const ParamInfo* w = &pt->t[linear_weight_id(q)];
        uintptr_t b = (uintptr_t)(host + w->offset), e = (uintptr_t)(host + w->offset + w->numel);
        b = (b + page - 1) & ~(page - 1); // whole pages inside the tensor only
        e &= ~(page - 1);
        if (e > b) madvise((void*)b, e - b, MADV_DONTNEED);
    }
#else
    (void)pt; (void)host;
#endif
}

// ------------------------------------------------------------------------------------------------
// transformers + bitsandbytes 4-bit checkpoints

static int is_dir(const char* p) { struct stat s; return stat(p, &s) == 0 && S_ISDIR(s.st_mode); }
static int is_file(const char* p) { struct stat s; return stat(p, &s) == 0 && S_ISREG(s.st_mode); }

// The safetensors file of a model path and the config.json beside it.
static int hf4_paths(const char* path, char* st, size_t stcap, char* cfg, size_t cfgcap) {
    size_t n = strlen(path);
    if (is_dir(path)) {
        path_join(st, stcap, path, "model.safetensors");
        path_join(cfg, cfgcap, path, "config.json");
        return is_file(st);
    }
    if (n < 12 || strcmp(path + n - 12, ".safetensors") != 0 || !is_file(path)) return 0;
    snprintf(st, stcap, "%s", path);
    const char* slash = strrchr(path, '/');
    char dir[LLMC_PATH_MAX];
    if (!slash) snprintf(dir, sizeof(dir), ".");
    else snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path > 0 ? slash - path : 1), path);
    path_join(cfg, cfgcap, dir, "config.json");
    return 1;
}

int qlora_is_hf4bit(const char* path) {
    char st[LLMC_PATH_MAX], cfg[LLMC_PATH_MAX], err[512];
    if (!hf4_paths(path, st, sizeof(st), cfg, sizeof(cfg))) return 0;
    StFile f;
    if (st_try_open(&f, st, err, sizeof(err)) != 0) return 0; // model_load reports the problem
    int found = 0;
    for (int i = 0; i < f.n_tensors && !found; i++) {
        const char* s = strstr(f.tensors[i].name, ".quant_state.bitsandbytes__");
        found = s != NULL;
    }
    st_close(&f);
    return found;
}

Nf4Base* qlora_load_hf4bit(const char* path, GPT2Config* cfg, ParamTable* pt, float** host_out) {
    char stp[LLMC_PATH_MAX], cfgp[LLMC_PATH_MAX], key[512];
    if (!hf4_paths(path, stp, sizeof(stp), cfgp, sizeof(cfgp)))
        fatal("pass the directory transformers' save_pretrained wrote", "'%s': no model.safetensors", path);
    if (!is_file(cfgp))
        fatal("a 4-bit checkpoint needs its config.json (the shapes of the quantized tensors are not in the file)",
              "'%s': missing", cfgp);
    model_read_hf_config(cfgp, cfg);
    params_build(pt, cfg);
    StFile f;
    st_open(&f, stp);
    const char* prefix = st_find(&f, "transformer.wte.weight") ? "transformer." : "";
    float* host = (float*)calloc(pt->total, sizeof(float));
    if (!host) fatal(NULL, "out of host memory loading '%s'", stp);
    const int L = cfg->num_layers;
    Nf4Base* b = base_new(L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const ParamInfo* w = &pt->t[i];
        const int nl = w->per_layer ? L : 1;
        const int q = linear_kind_of((ParamId)i);
        for (int l = 0; l < nl; l++) {
            params_hf_key(key, sizeof(key), (ParamId)i, l, prefix);
            if (q >= 0) {
                NF4Tensor* t = &b->t[q * L + l];
                nf4_from_hf_state(t, &f, key);
                if (t->ndim != 2 || t->shape[0] != (int64_t)w->rows || t->shape[1] != (int64_t)w->cols)
                    fatal("the checkpoint does not match its config.json",
                          "'%s': '%s' is quantized with shape [%lld, %lld], expected [%zu, %zu] (Linear4bit [out, in])",
                          stp, key, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 1), w->rows, w->cols);
                continue;
            }
            const StTensor* st = st_find(&f, key);
            if (!st) fatal("the checkpoint does not match a GPT-2 model", "'%s': tensor '%s' is missing", stp, key);
            // wte: HF stores the unpadded vocabulary; the padding rows stay zero
            size_t want = i == PT_WTE ? (size_t)cfg->vocab_size * w->cols : params_layer_numel(pt, (ParamId)i);
            if (st->numel != want)
                fatal("the checkpoint does not match its config.json", "'%s': tensor '%s' has %llu elements, expected %zu",
                      stp, key, (unsigned long long)st->numel, want);
            st_read_f32(&f, st, host + params_layer_offset(pt, (ParamId)i, l));
        }
    }
    st_close(&f);
    base_account(b);
    *host_out = host;
    return b;
}

// ------------------------------------------------------------------------------------------------
// use in the model

void qlora_upload(Nf4Base* b) {
    b->dev = (Nf4Op**)mallocCheck((size_t)QLORA_NQ * b->L * sizeof(Nf4Op*));
    for (int i = 0; i < QLORA_NQ * b->L; i++) b->dev[i] = nf4_op_upload(&b->t[i]);
}

void qlora_dequant_host(const Nf4Base* b, const ParamTable* pt, ParamId id, float* out) {
    const int q = linear_kind_of(id);
    if (q < 0) fatal("this is a bug in llmc", "qlora_dequant_host of a tensor that is not quantized");
    for (int l = 0; l < b->L; l++) nf4_dequantize(&b->t[q * b->L + l], out + (size_t)l * params_layer_numel(pt, id));
}

size_t qlora_replaced_numel(const ParamTable* pt) {
    size_t n = 0;
    for (int q = 0; q < QLORA_NQ; q++) n += pt->t[linear_weight_id(q)].numel;
    return n;
}

void qlora_free(Nf4Base* b) {
    if (!b) return;
    for (int i = 0; i < QLORA_NQ * b->L; i++) {
        if (b->dev) nf4_op_free(b->dev[i]);
        nf4_free(&b->t[i]);
    }
    free(b->dev);
    free(b->t);
    free(b);
}
