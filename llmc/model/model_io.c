#define _FILE_OFFSET_BITS 64
#include "model/model_io.h"
#include "base/safetensors.h"
#include "base/json.h"
#include "base/bf16.h"
#include "base/rand.h"
#include "base/check.h"
#include "base/fileio.h"
#include "model/gguf_io.h"
#include "text/tokenizer.h"
#include "text/vocab.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_TOKENS_MAGIC 20240520
#define LLMC_STATE_MAGIC 20240527
#define CONVERT_CHUNK (1u << 20)

static const char* HINT_HF = "the checkpoint does not match a GPT-2 model; re-export it with transformers' save_pretrained";

static int ends_with(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// Directory part of a path ("." when there is none).
static void dir_of(const char* path, char* out, size_t cap) {
    const char* slash = strrchr(path, '/');
    if (!slash) { snprintf(out, cap, "."); return; }
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1; // "/file"
    if (n >= cap) fatal(NULL, "path too long: '%s'", path);
    memcpy(out, path, n);
    out[n] = '\0';
}

// Zero the vocabulary padding rows of wte (they are never trained nor read by the model).
static void zero_vocab_padding(const ParamTable* pt, float* params) {
    size_t C = (size_t)pt->cfg.channels;
    size_t V = (size_t)pt->cfg.vocab_size, Vp = (size_t)pt->cfg.padded_vocab_size;
    memset(params + pt->t[PT_WTE].offset + V * C, 0, (Vp - V) * C * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// llm.c checkpoints

static void load_llmc(const char* path, GPT2Config* cfg, ParamTable* pt, float** params_out) {
    int64_t fsize = file_size(path);
    FILE* fp = fopenCheck(path, "rb");
    const char* hint = "the file is not a complete llm.c model checkpoint; re-create or re-download it";
    if (fsize < 1024) fatal(hint, "'%s': truncated: %lld bytes, shorter than the 1024-byte llm.c header", path, (long long)fsize);
    int32_t h[256];
    freadCheck(h, sizeof(int32_t), 256, fp, path);
    if (h[0] != LLMC_MODEL_MAGIC) {
        if (h[0] == LLMC_TOKENS_MAGIC) fatal("pass a model checkpoint here; token shards go to the data flags", "'%s': this is an llm.c token shard (magic %d), not a model", path, h[0]);
        if (h[0] == LLMC_STATE_MAGIC) fatal("pass the model_*.bin of the checkpoint, not its state_*.bin", "'%s': this is an llm.c optimizer state file (magic %d), not a model", path, h[0]);
        if (((const char*)h)[0] == 'P' && ((const char*)h)[1] == 'K')
            fatal("convert it to safetensors (model.save_pretrained(dir, safe_serialization=True)) and pass that",
                  "'%s': this is a PyTorch pickle/zip checkpoint, which is not supported", path);
        fatal(hint, "'%s': bad magic number %d (expected %d): not an llm.c model checkpoint", path, h[0], LLMC_MODEL_MAGIC);
    }
    int version = h[1];
    if (version != 3 && version != 5)
        fatal("re-export the model with a current llm.c (train_gpt2.py writes version 3 and 5)",
              "'%s': unsupported llm.c checkpoint version %d (expected 3 = fp32 or 5 = bf16)", path, version);
    cfg->max_seq_len = h[2];
    cfg->vocab_size = h[3];
    cfg->num_layers = h[4];
    cfg->num_heads = h[5];
    cfg->channels = h[6];
    cfg->padded_vocab_size = h[7];
    char src[LLMC_PATH_MAX];
    snprintf(src, sizeof(src), "'%s' (llm.c header)", path);
    gpt2_config_validate(cfg, src);
    params_build(pt, cfg);
    size_t es = version == 3 ? 4 : 2;
    uint64_t want = 1024 + (uint64_t)pt->total * es;
    if ((uint64_t)fsize < want)
        fatal(hint, "'%s': truncated: %lld bytes, but the header describes %zu parameters x %zu bytes + 1024 = %llu bytes",
              path, (long long)fsize, pt->total, es, (unsigned long long)want);
    if ((uint64_t)fsize > want)
        fatal(hint, "'%s': %llu trailing bytes: %lld bytes, but the header describes %zu parameters x %zu bytes + 1024 = %llu bytes",
              path, (unsigned long long)((uint64_t)fsize - want), (long long)fsize, pt->total, es, (unsigned long long)want);
    float* params = (float*)mallocCheck(pt->total * sizeof(float));
    if (version == 3) {
        freadCheck(params, sizeof(float), pt->total, fp, path);
    } else {
        uint16_t* buf = (uint16_t*)mallocCheck(CONVERT_CHUNK * sizeof(uint16_t));
        for (size_t i = 0; i < pt->total; i += CONVERT_CHUNK) {
            size_t n = pt->total - i < CONVERT_CHUNK ? pt->total - i : CONVERT_CHUNK;
            freadCheck(buf, sizeof(uint16_t), n, fp, path);
            for (size_t j = 0; j < n; j++) params[i + j] = bf16_to_f32(buf[j]);
        }
        free(buf);
    }
    fclose(fp);
    zero_vocab_padding(pt, params);
    *params_out = params;
}

void model_save_llmc(const char* path, const ParamTable* pt, const float* params, int bf16) {
    int32_t h[256];
    memset(h, 0, sizeof(h));
    h[0] = LLMC_MODEL_MAGIC;
    h[1] = bf16 ? 5 : 3;
    h[2] = pt->cfg.max_seq_len;
    h[3] = pt->cfg.vocab_size;
    h[4] = pt->cfg.num_layers;
    h[5] = pt->cfg.num_heads;
    h[6] = pt->cfg.channels;
    h[7] = pt->cfg.padded_vocab_size;
    AtomicFile af;
    FILE* fp = atomic_open(&af, path);
    fwriteCheck(h, sizeof(int32_t), 256, fp, af.tmp_path);
    if (!bf16) {
        fwriteCheck(params, sizeof(float), pt->total, fp, af.tmp_path);
    } else {
        uint16_t* buf = (uint16_t*)mallocCheck(CONVERT_CHUNK * sizeof(uint16_t));
        for (size_t i = 0; i < pt->total; i += CONVERT_CHUNK) {
            size_t n = pt->total - i < CONVERT_CHUNK ? pt->total - i : CONVERT_CHUNK;
            for (size_t j = 0; j < n; j++) buf[j] = bf16_from_f32(params[i + j]);
            fwriteCheck(buf, sizeof(uint16_t), n, fp, af.tmp_path);
        }
        free(buf);
    }
    atomic_commit(&af);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json

static int cfg_int(const JsonValue* root, const char* key, const char* path, int required, int* out) {
    const JsonValue* v = json_get(root, key);
    if (!v) {
        if (required) fatal(HINT_HF, "'%s': missing \"%s\"", path, key);
        return 0;
    }
    if (!json_as_int(v, out)) fatal(HINT_HF, "'%s': \"%s\" must be an integer", path, key);
    return 1;
}

// Reads config.json; *tied = tie_word_embeddings (default true).
static void read_hf_config(const char* path, GPT2Config* cfg, int* tied) {
    size_t len;
    char* text = read_file_all(path, &len);
    char err[256];
    JsonValue* root = json_parse(text, len, err, sizeof(err));
    free(text);
    if (!root) fatal("fix or re-create config.json", "'%s': %s", path, err);
    if (root->type != JSON_OBJECT) fatal("fix or re-create config.json", "'%s': not a JSON object", path);
    const JsonValue* mt = json_get(root, "model_type");
    if (mt) {
        const char* s = json_as_string(mt);
        if (!s || strcmp(s, "gpt2") != 0)
            fatal("this tool trains GPT-2 models only", "'%s': model_type is %s%s%s; only \"gpt2\" is supported",
                  path, s ? "\"" : "", s ? s : "not a string", s ? "\"" : "");
    }
    memset(cfg, 0, sizeof(*cfg));
    cfg_int(root, "n_embd", path, 1, &cfg->channels);
    cfg_int(root, "n_layer", path, 1, &cfg->num_layers);
    cfg_int(root, "n_head", path, 1, &cfg->num_heads);
    cfg_int(root, "vocab_size", path, 1, &cfg->vocab_size);
    if (!cfg_int(root, "n_positions", path, 0, &cfg->max_seq_len) && !cfg_int(root, "n_ctx", path, 0, &cfg->max_seq_len))
        fatal(HINT_HF, "'%s': missing \"n_positions\" (or \"n_ctx\")", path);
    const JsonValue* act = json_get(root, "activation_function");
    if (act && !json_is_null(act)) {
        const char* s = json_as_string(act);
        // gelu_pytorch_tanh is the same tanh approximation computed by PyTorch's own kernel
        if (!s || (strcmp(s, "gelu_new") != 0 && strcmp(s, "gelu_pytorch_tanh") != 0))
            fatal("only GPT-2's tanh-approximated GELU is implemented", "'%s': activation_function is %s; expected \"gelu_new\"",
                  path, s ? s : "not a string");
    }
    const JsonValue* inner = json_get(root, "n_inner");
    if (inner && !json_is_null(inner)) {
        int ni;
        if (!json_as_int(inner, &ni) || ni != 4 * cfg->channels)
            fatal(HINT_HF, "'%s': n_inner must be null or 4 * n_embd (%d)", path, 4 * cfg->channels);
    }
    int b;
    if (json_as_bool(json_get(root, "scale_attn_weights"), &b) && !b)
        fatal(HINT_HF, "'%s': scale_attn_weights = false is not supported", path);
    if (json_as_bool(json_get(root, "scale_attn_by_inverse_layer_idx"), &b) && b)
        fatal(HINT_HF, "'%s': scale_attn_by_inverse_layer_idx = true is not supported", path);
    if (json_as_bool(json_get(root, "add_cross_attention"), &b) && b)
        fatal(HINT_HF, "'%s': add_cross_attention = true is not supported", path);
    const JsonValue* lne = json_get(root, "layer_norm_epsilon");
    if (lne && !json_is_null(lne)) {
        double eps;
        // 0 or less divides by zero (or worse) in every layernorm; 1e999 reads as infinity
        if (!json_as_number(lne, &eps) || !isfinite(eps) || eps <= 0.0)
            fatal(HINT_HF, "'%s': layer_norm_epsilon must be a positive finite number (GPT-2 uses 1e-5)", path);
        if (fabs(eps - 1e-5) > 1e-12)
            fprintf(stderr, "warning: '%s': layer_norm_epsilon is %g; this tool always uses 1e-5\n", path, eps);
    }
    *tied = 1;
    const JsonValue* tie = json_get(root, "tie_word_embeddings");
    if (tie && !json_as_bool(tie, tied)) fatal(HINT_HF, "'%s': tie_word_embeddings must be true or false", path);
    json_free(root);
    cfg->padded_vocab_size = gpt2_pad_vocab(cfg->vocab_size);
    gpt2_config_validate(cfg, path);
}

void model_read_hf_config(const char* path, GPT2Config* cfg) {
    int tied;
    read_hf_config(path, cfg, &tied);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face safetensors (single file or sharded)

typedef struct {
    const char* name;      // tensor name
    int file;              // index into files
    const StTensor* t;
    int used;
} HfEntry;

typedef struct {
    char src[LLMC_PATH_MAX];        // what the user passed (for messages)
    int nfiles;
    StFile* files;
    int n;
    HfEntry* e;            // sorted by name
    JsonValue* index;      // keeps weight_map names alive
} HfSource;

static int cmp_entry(const void* a, const void* b) {
    return strcmp(((const HfEntry*)a)->name, ((const HfEntry*)b)->name);
}

static HfEntry* hf_find(HfSource* s, const char* name) {
    HfEntry key; memset(&key, 0, sizeof(key));
    key.name = name;
    return (HfEntry*)bsearch(&key, s->e, (size_t)s->n, sizeof(HfEntry), cmp_entry);
}

// A single safetensors file as the source; takes over f, already opened and validated (the
// sniffing in model_load has parsed the header once: no need to parse it again).
static void hf_adopt_file(HfSource* s, const char* path, const StFile* f) {
    snprintf(s->src, sizeof(s->src), "%s", path);
    s->nfiles = 1;
    s->files = (StFile*)callocCheck(1, sizeof(StFile));
    s->files[0] = *f;
    s->n = s->files[0].n_tensors;
    s->e = (HfEntry*)callocCheck((size_t)s->n + 1, sizeof(HfEntry));
    for (int i = 0; i < s->n; i++) { s->e[i].name = s->files[0].tensors[i].name; s->e[i].file = 0; s->e[i].t = &s->files[0].tensors[i]; }
    qsort(s->e, (size_t)s->n, sizeof(HfEntry), cmp_entry);
}

static void hf_open_file(HfSource* s, const char* path) {
    StFile f;
    st_open(&f, path);
    hf_adopt_file(s, path, &f);
}

static void hf_open_index(HfSource* s, const char* path) {
    snprintf(s->src, sizeof(s->src), "%s", path);
    const char* hint = "the sharded checkpoint's index file is corrupt; re-download it";
    size_t len;
    char* text = read_file_all(path, &len);
    char err[256];
    s->index = json_parse(text, len, err, sizeof(err));
    free(text);
    if (!s->index) fatal(hint, "'%s': %s", path, err);
    const JsonValue* wm = json_get(s->index, "weight_map");
    if (!wm || wm->type != JSON_OBJECT) fatal(hint, "'%s': no \"weight_map\" object", path);
    const char* dup = json_find_duplicate_key(wm);
    if (dup) fatal(hint, "'%s': weight_map lists '%s' twice", path, dup);
    char dir[LLMC_PATH_MAX];
    dir_of(path, dir, sizeof(dir));
    // unique shard names, in order of first appearance
    const char** shard = (const char**)callocCheck((size_t)wm->n + 1, sizeof(char*));
    s->e = (HfEntry*)callocCheck((size_t)wm->n + 1, sizeof(HfEntry));
    for (int i = 0; i < wm->n; i++) {
        const char* f = json_as_string(&wm->items[i]);
        if (!f) fatal(hint, "'%s': weight_map value of '%s' is not a file name", path, wm->keys[i]);
        if (strchr(f, '/') || strcmp(f, "..") == 0 || f[0] == '\0')
            fatal(hint, "'%s': weight_map names shard '%s'; shards must be plain file names next to the index", path, f);
        int k;
        for (k = 0; k < s->nfiles; k++) if (strcmp(shard[k], f) == 0) break;
        if (k == s->nfiles) shard[s->nfiles++] = f;
        s->e[i].name = wm->keys[i];
        s->e[i].file = k;
    }
    s->n = wm->n;
    s->files = (StFile*)callocCheck((size_t)s->nfiles + 1, sizeof(StFile));
    for (int k = 0; k < s->nfiles; k++) {
        char sp[LLMC_PATH_MAX];
        path_join(sp, sizeof(sp), dir, shard[k]);
        if (!file_exists(sp)) fatal("download every shard the index names", "'%s': shard '%s' listed in the index does not exist", path, sp);
        st_open(&s->files[k], sp);
    }
    for (int i = 0; i < s->n; i++) {
        s->e[i].t = st_find(&s->files[s->e[i].file], s->e[i].name);
        if (!s->e[i].t)
            fatal(hint, "'%s': weight_map puts '%s' in '%s', but that shard has no such tensor", path, s->e[i].name, shard[s->e[i].file]);
    }
    free(shard);
    qsort(s->e, (size_t)s->n, sizeof(HfEntry), cmp_entry);
}

static void hf_close(HfSource* s) {
    for (int k = 0; k < s->nfiles; k++) st_close(&s->files[k]);
    free(s->files);
    free(s->e);
    json_free(s->index);
    memset(s, 0, sizeof(*s));
}

static void fmt_shape(char* out, size_t cap, int ndim, const int64_t* shape) {
    size_t o = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && o < cap; d++) o += (size_t)snprintf(out + o, cap - o, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (o < cap) snprintf(out + o, cap - o, "]");
}

// Expected HF shape of (id) for one layer: 1-D [rows]; 2-D [rows, cols] or, for Conv1D weights,
// [cols, rows]; wte has the unpadded vocab.
static int hf_expected_shape(const ParamTable* pt, ParamId id, int64_t* shape) {
    const ParamInfo* p = &pt->t[id];
    size_t rows = id == PT_WTE ? (size_t)pt->cfg.vocab_size : p->rows;
    if (p->ndim == 1) { shape[0] = (int64_t)rows; return 1; }
    if (p->hf_transposed) { shape[0] = (int64_t)p->cols; shape[1] = (int64_t)rows; }
    else { shape[0] = (int64_t)rows; shape[1] = (int64_t)p->cols; }
    return 2;
}

// h.<digits>.attn.bias / h.<digits>.attn.masked_bias, with or without "transformer."
static int is_ignored_buffer(const char* name) {
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    if (strncmp(name, "h.", 2) != 0) return 0;
    const char* p = name + 2;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return strcmp(p, ".attn.bias") == 0 || strcmp(p, ".attn.masked_bias") == 0;
}

static void check_float_dtype(const HfSource* s, const HfEntry* e) {
    if (e->t->dtype != ST_F32 && e->t->dtype != ST_BF16 && e->t->dtype != ST_F16)
        fatal("convert the checkpoint to float32, bfloat16 or float16", "'%s': tensor '%s' has dtype %s; only F32, BF16 and F16 are supported",
              s->files[e->file].path, e->name, st_dtype_name(e->t->dtype));
}

// The key prefix of a GPT-2 checkpoint: "transformer." (files saved by current transformers) or
// "" (the original gpt2 upload).
static const char* hf_key_prefix(HfSource* s) {
    if (hf_find(s, "transformer.wte.weight")) return "transformer.";
    if (hf_find(s, "wte.weight")) return "";
    fatal(HINT_HF, "'%s': no 'wte.weight' or 'transformer.wte.weight' tensor: not a GPT-2 checkpoint", s->src);
}

// No config.json: the sizes from the tensors themselves, n_head from GPT-2's head size of 64.
static void hf_infer_config(HfSource* s, const char* prefix, GPT2Config* cfg) {
    char key[256];
    snprintf(key, sizeof(key), "%swte.weight", prefix);
    const StTensor* wte = hf_find(s, key)->t;
    snprintf(key, sizeof(key), "%swpe.weight", prefix);
    HfEntry* wpe = hf_find(s, key);
    if (wte->ndim != 2) fatal(HINT_HF, "'%s': %swte.weight must be 2-D", s->src, prefix);
    if (!wpe || wpe->t->ndim != 2) fatal(HINT_HF, "'%s': missing or non-2-D tensor '%s'", s->src, key);
    memset(cfg, 0, sizeof(*cfg));
    cfg->vocab_size = (int)wte->shape[0];
    cfg->channels = (int)wte->shape[1];
    cfg->max_seq_len = (int)wpe->t->shape[0];
    int L = 0;
    for (;;) {
        snprintf(key, sizeof(key), "%sh.%d.ln_1.weight", prefix, L);
        if (!hf_find(s, key) || L > 100000) break;
        L++;
    }
    cfg->num_layers = L;
    if (cfg->channels % 64 != 0 || cfg->channels <= 0)
        fatal("put the model's config.json next to the weights", "'%s': no config.json, and n_head cannot be inferred (n_embd %d is not a multiple of 64)",
              s->src, cfg->channels);
    cfg->num_heads = cfg->channels / 64;
    cfg->padded_vocab_size = gpt2_pad_vocab(cfg->vocab_size);
    fprintf(stderr, "note: '%s': no config.json next to it; inferred n_layer %d, n_embd %d, vocab %d, n_positions %d "
            "from the tensors and assumed n_head = n_embd / 64 = %d (GPT-2's head size)\n",
            s->src, cfg->num_layers, cfg->channels, cfg->vocab_size, cfg->max_seq_len, cfg->num_heads);
    char src[LLMC_PATH_MAX + 32]; // the path and a note
    snprintf(src, sizeof(src), "'%s' (inferred config)", s->src);
    gpt2_config_validate(cfg, src);
}

// Every expected tensor is present with the exact shape and a float dtype, and nothing else is
// there except the attention-mask buffers and an lm_head (returned, or NULL).
static HfEntry* hf_check_tensors(HfSource* s, const char* prefix, const ParamTable* pt) {
    char key[256];
    const int L = pt->cfg.num_layers;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        int nl = pt->t[id].per_layer ? L : 1;
        for (int l = 0; l < nl; l++) {
            params_hf_key(key, sizeof(key), (ParamId)id, l, prefix);
            HfEntry* e = hf_find(s, key);
            if (!e) fatal(HINT_HF, "'%s': missing tensor '%s' (expected for a GPT-2 with n_layer %d)", s->src, key, L);
            int64_t want[2];
            int nd = hf_expected_shape(pt, (ParamId)id, want);
            int ok = e->t->ndim == nd;
            for (int d = 0; ok && d < nd; d++) ok = e->t->shape[d] == want[d];
            if (!ok) {
                char got_s[128], want_s[128];
                fmt_shape(got_s, sizeof(got_s), e->t->ndim, e->t->shape);
                fmt_shape(want_s, sizeof(want_s), nd, want);
                fatal("config.json and the weights disagree; use the config.json that belongs to these weights",
                      "'%s': shape mismatch with config: %s is %s, expected %s", s->files[e->file].path, key, got_s, want_s);
            }
            check_float_dtype(s, e);
            e->used = 1;
        }
    }
    HfEntry* lm_head = NULL;
    for (int i = 0; i < s->n; i++) {
        HfEntry* e = &s->e[i];
        if (e->used || is_ignored_buffer(e->name)) continue;
        if (strcmp(e->name, "lm_head.weight") == 0) { lm_head = e; continue; }
        fatal(HINT_HF, "'%s': unexpected tensor '%s' (not part of a GPT-2 with n_layer %d%s)", s->files[e->file].path, e->name, L,
              prefix[0] ? " and the 'transformer.' key prefix" : " and unprefixed keys");
    }
    return lm_head;
}

// Every tensor into the table's layout, widened to fp32, Conv1D weights transposed into [out, in].
static float* hf_read_params(HfSource* s, const char* prefix, const ParamTable* pt) {
    char key[256];
    float* params = (float*)callocCheck(pt->total, sizeof(float));
    float* tmp = NULL;
    size_t tmp_cap = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &pt->t[id];
        int nl = p->per_layer ? pt->cfg.num_layers : 1;
        for (int l = 0; l < nl; l++) {
            params_hf_key(key, sizeof(key), (ParamId)id, l, prefix);
            HfEntry* e = hf_find(s, key);
            float* dst = params + params_layer_offset(pt, (ParamId)id, l);
            StFile* f = &s->files[e->file];
            if (!p->hf_transposed) { st_read_f32(f, e->t, dst); continue; }
            size_t n = p->rows * p->cols;
            if (n > tmp_cap) { free(tmp); tmp = (float*)mallocCheck(n * sizeof(float)); tmp_cap = n; }
            st_read_f32(f, e->t, tmp);
            // tmp is [cols (in), rows (out)]; dst is [rows, cols]
            size_t R = p->rows, Cc = p->cols;
            for (size_t r = 0; r < R; r++)
                for (size_t c = 0; c < Cc; c++) dst[r * Cc + c] = tmp[c * R + r];
        }
    }
    free(tmp);
    return params;
}

// GPT-2 ties the output head to wte: an lm_head in the file must equal it, or it would be
// silently dropped.
static void hf_check_lm_head(HfSource* s, HfEntry* lm_head, const GPT2Config* cfg, const float* wte) {
    int64_t want[2] = { cfg->vocab_size, cfg->channels };
    int ok = lm_head->t->ndim == 2 && lm_head->t->shape[0] == want[0] && lm_head->t->shape[1] == want[1];
    if (!ok) fatal(HINT_HF, "'%s': lm_head.weight has the wrong shape (expected [%d,%d])", s->files[lm_head->file].path, cfg->vocab_size, cfg->channels);
    check_float_dtype(s, lm_head);
    size_t n = (size_t)cfg->vocab_size * (size_t)cfg->channels;
    float* head = (float*)mallocCheck(n * sizeof(float));
    st_read_f32(&s->files[lm_head->file], lm_head->t, head);
    int same = memcmp(head, wte, n * sizeof(float)) == 0;
    free(head);
    if (!same)
        fatal("this tool supports GPT-2 with the output head tied to the token embedding only",
              "'%s': lm_head.weight differs from wte.weight (an untied output head is not supported)", s->files[lm_head->file].path);
}

// A GPT-2 from Hugging Face tensors: the config (config.json, else inferred), every tensor
// checked before any is read, then read into the table's layout.
static void load_hf(HfSource* s, const char* config_path, GPT2Config* cfg, ParamTable* pt, float** params_out) {
    const char* prefix = hf_key_prefix(s);
    int tied = 1;
    if (config_path) read_hf_config(config_path, cfg, &tied);
    else hf_infer_config(s, prefix, cfg);
    params_build(pt, cfg);
    HfEntry* lm_head = hf_check_tensors(s, prefix, pt);
    if (!tied && !lm_head)
        fatal("this tool ties lm_head to wte (as GPT-2 does)", "'%s': config.json has tie_word_embeddings = false but the checkpoint has no lm_head.weight", s->src);
    float* params = hf_read_params(s, prefix, pt);
    if (lm_head) hf_check_lm_head(s, lm_head, cfg, params + pt->t[PT_WTE].offset);
    *params_out = params;
}

// ---------------------------------------------------------------------------------------------
// sniffing

void model_load(const char* path, GPT2Config* cfg_out, ParamTable* pt_out, float** params_out) {
    char buf[LLMC_PATH_MAX];
    if (dir_exists(path)) {
        char cfgp[LLMC_PATH_MAX];
        path_join(cfgp, sizeof(cfgp), path, "config.json");
        const char* cp = file_exists(cfgp) ? cfgp : NULL;
        HfSource s; memset(&s, 0, sizeof(s));
        path_join(buf, sizeof(buf), path, "model.safetensors");
        if (file_exists(buf)) hf_open_file(&s, buf);
        else {
            path_join(buf, sizeof(buf), path, "model.safetensors.index.json");
            if (file_exists(buf)) hf_open_index(&s, buf);
            else {
                path_join(buf, sizeof(buf), path, "pytorch_model.bin");
                if (file_exists(buf))
                    fatal("convert it to safetensors (model.save_pretrained(dir, safe_serialization=True))",
                          "'%s': has only pytorch_model.bin (a pickle checkpoint), which is not supported", path);
                fatal("pass a directory with model.safetensors (+ config.json), a .safetensors file or an llm.c .bin",
                      "'%s': directory has neither model.safetensors nor model.safetensors.index.json", path);
            }
        }
        load_hf(&s, cp, cfg_out, pt_out, params_out);
        hf_close(&s);
        return;
    }
    if (!file_exists(path)) fatal("check the path of the model", "model '%s' does not exist (or is not a regular file)", path);
    unsigned char head[8] = {0};
    FILE* fp = fopenCheck(path, "rb");
    size_t got = fread(head, 1, 8, fp);
    fclose(fp);
    int32_t magic = 0;
    if (got >= 4) memcpy(&magic, head, 4);
    if (magic == LLMC_MODEL_MAGIC || magic == LLMC_TOKENS_MAGIC || magic == LLMC_STATE_MAGIC) {
        load_llmc(path, cfg_out, pt_out, params_out);
        return;
    }
    if (got >= 4 && memcmp(head, GGUF_MAGIC, 4) == 0) { // a GGUF model (llmc/model/gguf_io.h)
        gguf_load_gpt2(path, cfg_out, pt_out, params_out);
        return;
    }
    if (got >= 2 && head[0] == 'P' && head[1] == 'K')
        fatal("convert it to safetensors (model.save_pretrained(dir, safe_serialization=True)) and pass that",
              "'%s': this is a PyTorch pickle/zip checkpoint, which is not supported", path);
    char dir[LLMC_PATH_MAX], cfgp[LLMC_PATH_MAX];
    dir_of(path, dir, sizeof(dir));
    path_join(cfgp, sizeof(cfgp), dir, "config.json");
    const char* cp = file_exists(cfgp) ? cfgp : NULL;
    HfSource s; memset(&s, 0, sizeof(s));
    if (ends_with(path, ".json") || head[0] == '{') {
        hf_open_index(&s, path);
    } else {
        // a safetensors file under any name; otherwise a .bin gets the llm.c diagnosis (bad
        // magic) and anything else the safetensors one
        StFile probe;
        char err[1024];
        if (st_try_open(&probe, path, err, sizeof(err)) != 0) {
            if (ends_with(path, ".bin")) { load_llmc(path, cfg_out, pt_out, params_out); return; }
            fatal("pass an llm.c .bin, a .safetensors file, a model.safetensors.index.json or a model directory", "%s", err);
        }
        hf_adopt_file(&s, path, &probe);
    }
    load_hf(&s, cp, cfg_out, pt_out, params_out);
    hf_close(&s);
}

// ---------------------------------------------------------------------------------------------
// saving as a Hugging Face model directory

typedef struct { const float* src; size_t rows, cols; } TransposeCtx;

// element k of the HF [cols, rows] layout is src[r, c] with c = k / rows, r = k % rows
static void fill_transposed(void* ctx, void* dst, uint64_t first, uint64_t count) {
    const TransposeCtx* t = (const TransposeCtx*)ctx;
    float* out = (float*)dst;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t k = first + i;
        size_t c = (size_t)(k / t->rows), r = (size_t)(k % t->rows);
        out[i] = t->src[r * t->cols + c];
    }
}

static void write_hf_generation_config(const char* dir, const GPT2Config* c);

static void write_hf_config(const char* path, const GPT2Config* c) {
    int tok = c->vocab_size == 50257 ? 50256 : c->vocab_size - 1;
    JsonWriter w;
    jw_init(&w, 1);
    jw_begin_object(&w);
    jw_key(&w, "activation_function"); jw_string(&w, "gelu_new");
    jw_key(&w, "architectures"); jw_begin_array(&w); jw_string(&w, "GPT2LMHeadModel"); jw_end_array(&w);
    jw_key(&w, "attn_pdrop"); jw_double(&w, 0.1);
    jw_key(&w, "bos_token_id"); jw_int(&w, tok);
    jw_key(&w, "embd_pdrop"); jw_double(&w, 0.1);
    jw_key(&w, "eos_token_id"); jw_int(&w, tok);
    jw_key(&w, "initializer_range"); jw_double(&w, 0.02);
    jw_key(&w, "layer_norm_epsilon"); jw_double(&w, 1e-5);
    jw_key(&w, "model_type"); jw_string(&w, "gpt2");
    jw_key(&w, "n_ctx"); jw_int(&w, c->max_seq_len);
    jw_key(&w, "n_embd"); jw_int(&w, c->channels);
    jw_key(&w, "n_head"); jw_int(&w, c->num_heads);
    jw_key(&w, "n_inner"); jw_null(&w);
    jw_key(&w, "n_layer"); jw_int(&w, c->num_layers);
    jw_key(&w, "n_positions"); jw_int(&w, c->max_seq_len);
    jw_key(&w, "reorder_and_upcast_attn"); jw_bool(&w, 0);
    jw_key(&w, "resid_pdrop"); jw_double(&w, 0.1);
    jw_key(&w, "scale_attn_by_inverse_layer_idx"); jw_bool(&w, 0);
    jw_key(&w, "scale_attn_weights"); jw_bool(&w, 1);
    jw_key(&w, "tie_word_embeddings"); jw_bool(&w, 1);
    jw_key(&w, "torch_dtype"); jw_string(&w, "float32");
    jw_key(&w, "use_cache"); jw_bool(&w, 1);
    jw_key(&w, "vocab_size"); jw_int(&w, c->vocab_size);
    jw_end_object(&w);
    atomic_write_file(path, w.buf, w.len);
    jw_free(&w);
}

void model_save_safetensors(const char* path, const ParamTable* pt, const float* params) {
    const int L = pt->cfg.num_layers;
    StWriter w;
    st_writer_init(&w);
    TransposeCtx* ctx = (TransposeCtx*)callocCheck((size_t)NUM_PARAM_TENSORS * (size_t)L + 1, sizeof(TransposeCtx));
    int nctx = 0;
    char key[256];
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &pt->t[id];
        int nl = p->per_layer ? L : 1;
        for (int l = 0; l < nl; l++) {
            params_hf_key(key, sizeof(key), (ParamId)id, l, "transformer.");
            int64_t shape[2];
            int nd = hf_expected_shape(pt, (ParamId)id, shape);
            const float* src = params + params_layer_offset(pt, (ParamId)id, l);
            if (p->hf_transposed) {
                TransposeCtx* t = &ctx[nctx++];
                t->src = src; t->rows = p->rows; t->cols = p->cols;
                st_writer_add_fn(&w, key, ST_F32, nd, shape, fill_transposed, t);
            } else {
                st_writer_add(&w, key, ST_F32, nd, shape, src); // wte: its first V rows are contiguous
            }
        }
    }
    st_writer_save(&w, path);
    st_writer_free(&w);
    free(ctx);
}

void model_save_hf(const char* dir, const ParamTable* pt, const float* params) {
    mkdir_p(dir);
    char path[LLMC_PATH_MAX];
    const GPT2Config* c = &pt->cfg;
    path_join(path, sizeof(path), dir, "model.safetensors");
    model_save_safetensors(path, pt, params);
    write_hf_generation_config(dir, c);
    // last: a new directory holds config.json only once it is complete (until then transformers
    // and model_load refuse it instead of loading a missing or partial model)
    path_join(path, sizeof(path), dir, "config.json");
    write_hf_config(path, c);
}

// ---------------------------------------------------------------------------------------------
// initialization

void model_init_gpt2(const ParamTable* pt, float* params, uint64_t seed) {
    const GPT2Config* c = &pt->cfg;
    double resid_std = 0.02 / sqrt(2.0 * (double)c->num_layers);
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamInfo* p = &pt->t[id];
        float* dst = params + p->offset;
        long long n = (long long)p->numel;
        if (p->ndim == 1) {
            float v = (id == PT_LN1W || id == PT_LN2W || id == PT_LNFW) ? 1.0f : 0.0f;
            for (long long i = 0; i < n; i++) dst[i] = v;
            continue;
        }
        double std = (id == PT_ATTPROJW || id == PT_FCPROJW) ? resid_std : 0.02;
        if (id == PT_WTE) n = (long long)c->vocab_size * c->channels; // real vocab rows only
        // element i = rand_normal(seed, id, i); generated in Box-Muller pairs
        long long npairs = (n + 1) / 2;
        #pragma omp parallel for schedule(static)
        for (long long j = 0; j < npairs; j++) {
            double e, o;
            rand_normal_pair(seed, (uint64_t)id, (uint64_t)j, &e, &o);
            dst[2 * j] = (float)(std * e);
            if (2 * j + 1 < n) dst[2 * j + 1] = (float)(std * o);
        }
    }
    zero_vocab_padding(pt, params);
}

// ---------------------------------------------------------------------------------------------
// the rest of a Hugging Face model directory: generation and tokenizer files

// generation_config.json as save_pretrained writes it for GPT-2: generation stops at the
// end-of-text token (pipeline() and generate() read it from here).
static void write_hf_generation_config(const char* dir, const GPT2Config* c) {
    int tok = c->vocab_size == 50257 ? 50256 : c->vocab_size - 1; // as write_hf_config
    char path[LLMC_PATH_MAX];
    path_join(path, sizeof(path), dir, "generation_config.json");
    JsonWriter w;
    jw_init(&w, 1);
    jw_begin_object(&w);
    jw_key(&w, "_from_model_config"); jw_bool(&w, 1);
    jw_key(&w, "bos_token_id"); jw_int(&w, tok);
    jw_key(&w, "eos_token_id"); jw_int(&w, tok);
    jw_end_object(&w);
    atomic_write_file(path, w.buf, w.len);
    jw_free(&w);
}

static void copy_file_atomic(const char* src, const char* dir, const char* name) {
    char dst[LLMC_PATH_MAX];
    path_join(dst, sizeof(dst), dir, name);
    size_t n;
    char* data = read_file_all(src, &n);
    atomic_write_file(dst, data, n);
    free(data);
}

// tokenizer_config.json + special_tokens_map.json: GPT-2's settings (no BOS added, no prefix
// space, <|endoftext|> as bos/eos/unk when the vocabulary has it).
static void write_hf_tokenizer_config(const char* dir, const Tokenizer* tk, int max_len, int fast_only) {
    char path[LLMC_PATH_MAX];
    const char* eot = tk->eot_id >= 0 ? "<|endoftext|>" : NULL;
    for (int file = 0; file < 2; file++) {
        JsonWriter w;
        jw_init(&w, 1);
        jw_begin_object(&w);
        if (file == 0) {
            jw_key(&w, "add_bos_token"); jw_bool(&w, 0);
            jw_key(&w, "add_prefix_space"); jw_bool(&w, 0);
        }
        const char* keys[3] = { "bos_token", "eos_token", "unk_token" };
        for (int k = 0; k < 3 && eot; k++) { jw_key(&w, keys[k]); jw_string(&w, eot); }
        if (file == 0) {
            jw_key(&w, "clean_up_tokenization_spaces"); jw_bool(&w, 0);
            jw_key(&w, "errors"); jw_string(&w, "replace");
            jw_key(&w, "model_max_length"); jw_int(&w, max_len);
            jw_key(&w, "tokenizer_class"); jw_string(&w, fast_only ? "GPT2TokenizerFast" : "GPT2Tokenizer");
        }
        jw_end_object(&w);
        path_join(path, sizeof(path), dir, file == 0 ? "tokenizer_config.json" : "special_tokens_map.json");
        atomic_write_file(path, w.buf, w.len);
        jw_free(&w);
    }
}

int model_save_hf_tokenizer(const char* dir, const char* vocab_path, const GPT2Config* cfg, char* why, size_t why_cap) {
    VocabFiles f;
    if (vocab_files(vocab_path, &f) != 0) { snprintf(why, why_cap, "'%s' holds no vocabulary", vocab_path); return -1; }
    Tokenizer tk;
    tok_load(&tk, vocab_path); // fatal on a broken vocabulary: better now than in the user's transformers
    int V = tk.vocab_size;
    if (V != cfg->vocab_size) {
        snprintf(why, why_cap, "the vocabulary '%s' has %d tokens, the model %d", vocab_path, V, cfg->vocab_size);
        tok_free(&tk);
        return -1;
    }
    mkdir_p(dir);
    if (f.tokenizer_json[0]) copy_file_atomic(f.tokenizer_json, dir, "tokenizer.json");
    else {
        // OpenAI's encoder.json / vocab.bpe are Hugging Face's vocab.json / merges.txt
        copy_file_atomic(f.vocab, dir, "vocab.json");
        copy_file_atomic(f.merges, dir, "merges.txt");
    }
    write_hf_tokenizer_config(dir, &tk, cfg->max_seq_len, f.tokenizer_json[0] != 0);
    tok_free(&tk);
    return 0;
}
