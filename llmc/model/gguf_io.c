// GPT-2 models and LoRA adapters in GGUF (what goes where: gguf_io.h; the container: base/gguf.h).
#define _GNU_SOURCE
#include "model/gguf_io.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/json.h"
#include "text/tokenizer.h"
#include "text/vocab.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_TOKEN_NORMAL 1   // gguf-py TokenType
#define GGUF_TOKEN_CONTROL 3

int gguf_parse_type(const char* s, GgmlType* out) {
    if (!strcmp(s, "f32")) *out = GGML_TYPE_F32;
    else if (!strcmp(s, "f16")) *out = GGML_TYPE_F16;
    else if (!strcmp(s, "bf16")) *out = GGML_TYPE_BF16;
    else if (!strcmp(s, "q8_0")) *out = GGML_TYPE_Q8_0;
    else return -1;
    return 0;
}

uint32_t gguf_file_type(GgmlType type) {
    switch (type) {
        case GGML_TYPE_F16: return 1;   // MOSTLY_F16
        case GGML_TYPE_Q8_0: return 7;  // MOSTLY_Q8_0
        case GGML_TYPE_BF16: return 32; // MOSTLY_BF16
        default: return 0;              // ALL_F32
    }
}

// GGUF names of the table's tensors ("%d": the layer), after gguf-py's MODEL_TENSOR names for gpt2.
static const char* const GGUF_NAMES[NUM_PARAM_TENSORS] = {
    "token_embd.weight", "position_embd.weight",
    "blk.%d.attn_norm.weight", "blk.%d.attn_norm.bias", "blk.%d.attn_qkv.weight", "blk.%d.attn_qkv.bias",
    "blk.%d.attn_output.weight", "blk.%d.attn_output.bias", "blk.%d.ffn_norm.weight", "blk.%d.ffn_norm.bias",
    "blk.%d.ffn_up.weight", "blk.%d.ffn_up.bias", "blk.%d.ffn_down.weight", "blk.%d.ffn_down.bias",
    "output_norm.weight", "output_norm.bias" };

void gguf_tensor_name(char* out, size_t cap, ParamId id, int layer) {
    if (strchr(GGUF_NAMES[id], '%')) snprintf(out, cap, GGUF_NAMES[id], layer);
    else snprintf(out, cap, "%s", GGUF_NAMES[id]);
}

// ---------------------------------------------------------------------------------------------
// the tokenizer, as convert_hf_to_gguf.py writes a GPT-2's: the byte-level BPE strings of the
// vocabulary file in id order, its merges as "a b" lines in rank order, special tokens CONTROL

typedef struct {
    char** tokens; int n;
    char** merges; int n_merges, cap_merges;
    int32_t* types;
    int eot;
} GgufVocab;

static char* xstrndup(const char* s, size_t n) {
    char* d = (char*)mallocCheck(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static void gv_add_merge(GgufVocab* gv, char* m) {
    if (gv->n_merges == gv->cap_merges) {
        gv->cap_merges = gv->cap_merges ? 2 * gv->cap_merges : 1024;
        char** nm = (char**)realloc(gv->merges, (size_t)gv->cap_merges * sizeof(char*));
        if (!nm) fatal(NULL, "out of memory");
        gv->merges = nm;
    }
    gv->merges[gv->n_merges++] = m;
}

static JsonValue* gv_parse_json(const char* path) {
    size_t n;
    char* text = read_file_all(path, &n);
    char err[256];
    JsonValue* root = json_parse(text, n, err, sizeof(err));
    free(text);
    if (!root) fatal("the vocabulary file is damaged", "'%s': %s", path, err);
    return root;
}

// token -> id members of obj into gv->tokens (ids outside the vocabulary are a damaged file)
static void gv_put_tokens(GgufVocab* gv, const JsonValue* obj, const char* path) {
    if (!obj || obj->type != JSON_OBJECT) fatal("the vocabulary file is damaged", "'%s': no token -> id object", path);
    for (int i = 0; i < obj->n; i++) {
        int id;
        if (!json_as_int(&obj->items[i], &id) || id < 0 || id >= gv->n)
            fatal("the vocabulary file is damaged", "'%s': token '%s' has id outside 0..%d", path, obj->keys[i], gv->n - 1);
        free(gv->tokens[id]);
        gv->tokens[id] = xstrndup(obj->keys[i], strlen(obj->keys[i]));
    }
}

static void gv_read_merges_txt(GgufVocab* gv, const char* path) {
    size_t n;
    char* text = read_file_all(path, &n);
    size_t i = 0;
    for (int line = 1; i < n; line++) {
        size_t e = i;
        while (e < n && text[e] != '\n') e++;
        size_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (!(line == 1 && le - i >= 8 && memcmp(text + i, "#version", 8) == 0) && le > i) gv_add_merge(gv, xstrndup(text + i, le - i));
        i = e + 1;
    }
    free(text);
}

static void gv_read_tokenizer_json(GgufVocab* gv, const char* path) {
    JsonValue* root = gv_parse_json(path);
    const JsonValue* model = json_get(root, "model");
    gv_put_tokens(gv, model ? json_get(model, "vocab") : NULL, path);
    const JsonValue* added = json_get(root, "added_tokens");
    for (int i = 0; added && added->type == JSON_ARRAY && i < added->n; i++) {
        int id;
        const char* content = json_as_string(json_get(&added->items[i], "content"));
        if (content && json_as_int(json_get(&added->items[i], "id"), &id) && id >= 0 && id < gv->n && !gv->tokens[id])
            gv->tokens[id] = xstrndup(content, strlen(content));
    }
    const JsonValue* merges = model ? json_get(model, "merges") : NULL;
    for (int i = 0; merges && merges->type == JSON_ARRAY && i < merges->n; i++) {
        const JsonValue* m = &merges->items[i];
        if (m->type == JSON_STRING) { gv_add_merge(gv, xstrndup(m->string, m->string_len)); continue; }
        const char* a = json_as_string(json_at(m, 0));
        const char* b = json_as_string(json_at(m, 1));
        if (m->type != JSON_ARRAY || m->n != 2 || !a || !b) fatal("the vocabulary file is damaged", "'%s': merge %d is malformed", path, i);
        char* s = (char*)mallocCheck(strlen(a) + strlen(b) + 2);
        sprintf(s, "%s %s", a, b);
        gv_add_merge(gv, s);
    }
    json_free(root);
}

// The vocabulary at vocab_path (validated by the tool's own tokenizer first) for a model of V tokens.
static void gv_load(GgufVocab* gv, const char* vocab_path, int V) {
    memset(gv, 0, sizeof(*gv));
    if (!vocab_path) fatal("GGUF files carry the tokenizer: pass --vocab DIR (the model's vocabulary)", "no vocabulary for the GGUF file");
    Tokenizer tk;
    tok_load(&tk, vocab_path);
    if (tk.vocab_size != V)
        fatal("pass the vocabulary the model was trained with (--vocab)", "the vocabulary '%s' has %d tokens, the model %d: a GGUF file needs the model's own tokenizer",
              vocab_path, tk.vocab_size, V);
    gv->n = V;
    gv->eot = tk.eot_id;
    gv->tokens = (char**)callocCheck((size_t)V, sizeof(char*));
    gv->types = (int32_t*)mallocCheck((size_t)V * sizeof(int32_t));
    for (int i = 0; i < V; i++) gv->types[i] = GGUF_TOKEN_NORMAL;
    for (int k = 0; k < tk.n_special; k++) gv->types[tk.special_ids[k]] = GGUF_TOKEN_CONTROL;
    tok_free(&tk);
    VocabFiles vf;
    if (vocab_files(vocab_path, &vf) != 0) fatal(NULL, "'%s' holds no vocabulary", vocab_path);
    if (vf.vocab[0]) {
        JsonValue* root = gv_parse_json(vf.vocab);
        gv_put_tokens(gv, root, vf.vocab);
        json_free(root);
        gv_read_merges_txt(gv, vf.merges);
    } else {
        gv_read_tokenizer_json(gv, vf.tokenizer_json);
    }
    for (int i = 0; i < V; i++)
        if (!gv->tokens[i]) fatal("the vocabulary file is damaged", "'%s': no token has id %d", vocab_path, i);
}

static void gv_free(GgufVocab* gv) {
    for (int i = 0; i < gv->n; i++) free(gv->tokens[i]);
    for (int i = 0; i < gv->n_merges; i++) free(gv->merges[i]);
    free(gv->tokens); free(gv->merges); free(gv->types);
}

static void gguf_put_tokenizer(GgufWriter* w, const GgufVocab* gv) {
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    gguf_set_str_array(w, "tokenizer.ggml.tokens", (const char* const*)gv->tokens, (size_t)gv->n);
    gguf_set_i32_array(w, "tokenizer.ggml.token_type", gv->types, (size_t)gv->n);
    gguf_set_str_array(w, "tokenizer.ggml.merges", (const char* const*)gv->merges, (size_t)gv->n_merges);
    if (gv->eot >= 0) {
        // GPT-2's tokenizer_config: bos = eos = unk = <|endoftext|>; no BOS is added to prompts
        gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)gv->eot);
        gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)gv->eot);
        gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)gv->eot);
    }
    gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
}

// ---------------------------------------------------------------------------------------------
// writing

static int gguf_strip_suffix(char* s, const char* suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    if (n <= k || strcmp(s + n - k, suffix) != 0) return 0;
    s[n - k] = '\0';
    return 1;
}

void gguf_model_name(const char* path, char* out, size_t cap) {
    char full[PATH_MAX];
    if (!realpath(path, full)) snprintf(full, sizeof(full), "%s", path); // (a size descriptor)
    for (size_t n = strlen(full); n > 1 && full[n - 1] == '/'; n--) full[n - 1] = '\0';
    char* base = strrchr(full, '/');
    if (base && (!strcmp(base + 1, "model.safetensors") || !strcmp(base + 1, "model.safetensors.index.json") || !strcmp(base + 1, "config.json"))) {
        *base = '\0'; // the directory's name
        base = strrchr(full, '/');
    }
    snprintf(out, cap, "%s", base ? base + 1 : full);
    const char* const suffixes[] = {".gguf", ".bin", ".safetensors", ".json"};
    for (int i = 0; i < 4 && !gguf_strip_suffix(out, suffixes[i]); i++) {}
    if (!out[0]) snprintf(out, cap, "model");
}

// general.*: what the file is and where it came from
static void gguf_put_general(GgufWriter* w, const char* path, const char* type, GgmlType wtype, const GgufProvenance* prov) {
    char name[256];
    if (prov && prov->name) snprintf(name, sizeof(name), "%s", prov->name);
    else {
        const char* b = strrchr(path, '/');
        snprintf(name, sizeof(name), "%s", b ? b + 1 : path);
        size_t n = strlen(name);
        if (n > 5 && !strcmp(name + n - 5, ".gguf")) name[n - 5] = '\0';
    }
    gguf_set_str(w, "general.architecture", "gpt2");
    gguf_set_str(w, "general.type", type);
    gguf_set_str(w, "general.name", name);
    if (prov && prov->finetune) gguf_set_str(w, "general.finetune", prov->finetune);
    if (prov && prov->description) gguf_set_str(w, "general.description", prov->description);
    if (prov && prov->base_model) {
        gguf_set_u32(w, "general.base_model.count", 1);
        gguf_set_str(w, "general.base_model.0.name", prov->base_model);
    }
    gguf_set_u32(w, "general.quantization_version", 2); // ggml's GGML_QNT_VERSION
    gguf_set_u32(w, "general.file_type", gguf_file_type(wtype));
}

// The stored type of a 2-D weight whose rows hold cols values (gguf-py's Q8_0 fallback).
static GgmlType gguf_weight_type(GgmlType want, uint64_t cols) {
    return want == GGML_TYPE_Q8_0 && cols % GGUF_QK8_0 ? GGML_TYPE_F16 : want;
}

static void gguf_put_param(GgufWriter* w, const ParamTable* pt, const float* params, ParamId id, int layer, GgmlType type) {
    const ParamInfo* in = &pt->t[id];
    char name[64];
    gguf_tensor_name(name, sizeof(name), id, layer);
    const float* p = params + params_layer_offset(pt, id, layer);
    if (in->ndim == 1) { gguf_add_tensor(w, name, GGML_TYPE_F32, 0, in->rows * in->cols, p, 1.0f); return; }
    const uint64_t rows = id == PT_WTE ? (uint64_t)pt->cfg.vocab_size : in->rows;
    const GgmlType t = id == PT_WPE ? GGML_TYPE_F32 : gguf_weight_type(type, in->cols);
    gguf_add_tensor(w, name, t, rows, in->cols, p, 1.0f);
}

void gguf_save_gpt2(const char* path, const ParamTable* pt, const float* params, GgmlType type,
                    const char* vocab_path, const GgufProvenance* prov) {
    const GPT2Config* c = &pt->cfg;
    GgufVocab gv;
    gv_load(&gv, vocab_path, c->vocab_size);
    GgufWriter* w = gguf_writer_new();
    gguf_put_general(w, path, "model", type, prov);
    gguf_set_u32(w, "gpt2.context_length", (uint32_t)c->max_seq_len);
    gguf_set_u32(w, "gpt2.embedding_length", (uint32_t)c->channels);
    gguf_set_u32(w, "gpt2.feed_forward_length", (uint32_t)(4 * c->channels));
    gguf_set_u32(w, "gpt2.block_count", (uint32_t)c->num_layers);
    gguf_set_u32(w, "gpt2.attention.head_count", (uint32_t)c->num_heads);
    gguf_set_f32(w, "gpt2.attention.layer_norm_epsilon", 1e-5f);
    gguf_put_tokenizer(w, &gv);
    gguf_put_param(w, pt, params, PT_WTE, 0, type);
    gguf_put_param(w, pt, params, PT_WPE, 0, type);
    for (int l = 0; l < c->num_layers; l++)
        for (int id = PT_LN1W; id <= PT_FCPROJB; id++) gguf_put_param(w, pt, params, (ParamId)id, l, type);
    gguf_put_param(w, pt, params, PT_LNFW, 0, type);
    gguf_put_param(w, pt, params, PT_LNFB, 0, type);
    gguf_writer_save(w, path);
    gguf_writer_free(w);
    gv_free(&gv);
}

void gguf_save_lora(const char* path, const LoraModel* lm, GgmlType type, const GgufProvenance* prov) {
    if (lm->spec.dora)
        fatal("export the merged model instead: convert --to gguf --model BASE --adapter DIR",
              "the adapter is DoRA (use_dora): a GGUF LoRA adapter (llama.cpp's) has no magnitude vector to carry");
    if (lm->n_extra > 0)
        fatal("export the merged model instead: convert --to gguf --model BASE --adapter DIR",
              "the adapter also trains %d base tensor slice(s) (%s...: bias= or modules_to_save), which a GGUF LoRA adapter cannot carry",
              lm->n_extra, lm->extra[0].key);
    if (lm->n == 0) fatal(NULL, "the adapter has no LoRA layers");
    float* host = (float*)mallocCheck(lm->total * sizeof(float));
    lora_get_params(lm, host);
    // one alpha for the file (llama.cpp's scale of an adapter is alpha / its rank): lora_alpha, or
    // for rsLoRA (scaling alpha / sqrt(r)) alpha x sqrt(r); adapters off that rule get a folded B
    const float alpha = lm->spec.rslora ? lm->spec.alpha * sqrtf((float)lm->spec.rank) : lm->spec.alpha;
    GgufWriter* w = gguf_writer_new();
    gguf_put_general(w, path, "adapter", type, prov);
    gguf_set_str(w, "adapter.type", "lora");
    gguf_set_f32(w, "adapter.lora.alpha", alpha);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* ad = &lm->ad[i];
        char base[64], name[80];
        gguf_tensor_name(base, sizeof(base), ad->wid, ad->layer);
        const float llama_scale = alpha / (float)ad->rank;
        const float ratio = ad->scaling / llama_scale;
        const float fold = fabsf(ratio - 1.0f) < 1e-6f ? 1.0f : ratio; // (rounding noise is not folded)
        snprintf(name, sizeof(name), "%s.lora_a", base);
        gguf_add_tensor(w, name, gguf_weight_type(type, (uint64_t)ad->in), (uint64_t)ad->rank, (uint64_t)ad->in, host + ad->a_off, 1.0f);
        snprintf(name, sizeof(name), "%s.lora_b", base);
        gguf_add_tensor(w, name, gguf_weight_type(type, (uint64_t)ad->rank), (uint64_t)ad->out, (uint64_t)ad->rank, host + ad->b_off, fold);
    }
    gguf_writer_save(w, path);
    gguf_writer_free(w);
    free(host);
}

// ---------------------------------------------------------------------------------------------
// reading a model back

#define GGUF_HINT "pass a GGUF model written by `convert --to gguf` (or llama.cpp's convert_hf_to_gguf.py) for a GPT-2"

static int gguf_cfg_u32(const GgufFile* f, const char* key) {
    int64_t v;
    if (gguf_kv_int(f, key, &v) != 0 || v < 1 || v > (1 << 24))
        fatal(GGUF_HINT, "'%s': metadata '%s' is missing or not a positive integer", f->path, key);
    return (int)v;
}

static void gguf_read_config(const GgufFile* f, GPT2Config* cfg) {
    const char* arch = gguf_kv_str(f, "general.architecture");
    const char* type = gguf_kv_str(f, "general.type");
    if (!arch || strcmp(arch, "gpt2") != 0)
        fatal(GGUF_HINT, "'%s': general.architecture is '%s', this tool runs gpt2 only", f->path, arch ? arch : "(missing)");
    if (type && strcmp(type, "model") != 0)
        fatal("a GGUF LoRA adapter is applied by llama.cpp (--lora); for this tool pass the PEFT adapter directory",
              "'%s': general.type is '%s', not a model", f->path, type);
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_seq_len = gguf_cfg_u32(f, "gpt2.context_length");
    cfg->channels = gguf_cfg_u32(f, "gpt2.embedding_length");
    cfg->num_layers = gguf_cfg_u32(f, "gpt2.block_count");
    cfg->num_heads = gguf_cfg_u32(f, "gpt2.attention.head_count");
    if (gguf_cfg_u32(f, "gpt2.feed_forward_length") != 4 * cfg->channels)
        fatal(GGUF_HINT, "'%s': gpt2.feed_forward_length is not 4 x embedding_length (GPT-2's MLP)", f->path);
    double eps;
    if (gguf_kv_num(f, "gpt2.attention.layer_norm_epsilon", &eps) == 0 && fabs(eps - 1e-5) > 1e-9)
        fprintf(stderr, "warning: '%s': layer_norm_epsilon is %g; this tool always uses 1e-5\n", f->path, eps);
    // the vocabulary: token_embd's rows, which the token list (llama.cpp's n_vocab) must agree with
    const GgufTensor* te = gguf_tensor(f, "token_embd.weight");
    if (!te || te->ndim != 2) fatal(GGUF_HINT, "'%s': no 2-D token_embd.weight", f->path);
    if (te->ne[1] > (1 << 24)) fatal(GGUF_HINT, "'%s': token_embd.weight has %lld rows", f->path, (long long)te->ne[1]);
    const GgufKV* toks = gguf_kv(f, "tokenizer.ggml.tokens");
    if (toks && (toks->type != GGUF_ARRAY || toks->n != (uint64_t)te->ne[1]))
        fatal(GGUF_HINT, "'%s': tokenizer.ggml.tokens has %llu tokens, token_embd.weight %lld rows", f->path,
              (unsigned long long)(toks->type == GGUF_ARRAY ? toks->n : 1), (long long)te->ne[1]);
    cfg->vocab_size = (int)te->ne[1];
    cfg->padded_vocab_size = gpt2_pad_vocab(cfg->vocab_size);
    gpt2_config_validate(cfg, f->path);
}

// What a read holds while it runs, released by an error exit on the way too (llmc_on_fatal): the
// open file (its metadata: the token list, the merges), the weights read so far, the two tensors
// gguf_check_output compares.
static GgufFile* g_reading;
static float* g_reading_params;
static uint8_t* g_reading_cmp[2];
static void gguf_reading_release(void) {
    if (g_reading) gguf_close(g_reading);
    g_reading = NULL;
    free(g_reading_params);
    free(g_reading_cmp[0]);
    free(g_reading_cmp[1]);
    g_reading_params = NULL;
    g_reading_cmp[0] = g_reading_cmp[1] = NULL;
}

// output.weight is accepted only as a copy of token_embd.weight (GPT-2 ties them).
static void gguf_check_output(GgufFile* f) {
    const GgufTensor* o = gguf_tensor(f, "output.weight");
    const GgufTensor* e = gguf_tensor(f, "token_embd.weight");
    if (!o) return;
    int same = o->type == e->type && o->nbytes == e->nbytes && o->ndim == e->ndim && o->ne[0] == e->ne[0] && o->ne[1] == e->ne[1];
    if (same) {
        uint8_t** ab = g_reading_cmp;
        ab[0] = (uint8_t*)mallocCheck((size_t)o->nbytes); ab[1] = (uint8_t*)mallocCheck((size_t)e->nbytes);
        gguf_read_raw(f, o, ab[0]); gguf_read_raw(f, e, ab[1]);
        same = memcmp(ab[0], ab[1], (size_t)o->nbytes) == 0;
        free(ab[0]); free(ab[1]);
        ab[0] = ab[1] = NULL;
    }
    if (!same) fatal("this tool's GPT-2 ties the output head to the token embedding", "'%s': output.weight differs from token_embd.weight", f->path);
}

// The GGUF tensor of (id, layer), checked to have the table's shape (fatal naming it otherwise).
static const GgufTensor* gguf_param_tensor(const GgufFile* f, const ParamTable* pt, ParamId id, int layer) {
    const ParamInfo* in = &pt->t[id];
    char name[64];
    gguf_tensor_name(name, sizeof(name), id, layer);
    const GgufTensor* t = gguf_tensor(f, name);
    const int64_t rows = id == PT_WTE ? pt->cfg.vocab_size : (int64_t)in->rows;
    const int ok = t && (in->ndim == 1 ? t->ndim == 1 && t->ne[0] == (int64_t)(in->rows * in->cols)
                                       : t->ndim == 2 && t->ne[0] == (int64_t)in->cols && t->ne[1] == rows);
    if (!ok)
        fatal(GGUF_HINT, "'%s': tensor '%s' is %s (expected %s [%lld x %zu])", f->path, name, t ? "of another shape" : "missing",
              in->ndim == 1 ? "1-D" : "2-D", (long long)(in->ndim == 1 ? 1 : rows), in->ndim == 1 ? in->rows * in->cols : in->cols);
    return t;
}

// Every tensor of a GPT-2 of pt's shape is there with its shape, and no other (output.weight only
// as token_embd's copy): all checked before any weight is read.
static void gguf_check_tensors(GgufFile* f, const ParamTable* pt) {
    int64_t expected = 0;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++)
        for (int l = 0; l < (pt->t[id].per_layer ? pt->cfg.num_layers : 1); l++, expected++) gguf_param_tensor(f, pt, (ParamId)id, l);
    gguf_check_output(f);
    if (f->n_tensors != expected + (gguf_tensor(f, "output.weight") ? 1 : 0))
        fatal(GGUF_HINT, "'%s': %lld tensors, a GPT-2 of this size has %lld; the file holds tensors this tool does not know", f->path,
              (long long)f->n_tensors, (long long)expected);
}

// Opens a GPT-2 GGUF model and checks it (config, every tensor's shape) before a weight is read.
static void gguf_open_gpt2(GgufFile* f, const char* path, GPT2Config* cfg, ParamTable* pt) {
    gguf_open(f, path);
    g_reading = f;
    llmc_on_fatal(gguf_reading_release);
    gguf_read_config(f, cfg);
    params_build(pt, cfg);
    gguf_check_tensors(f, pt);
}

void gguf_read_gpt2_config(const char* path, GPT2Config* cfg_out) {
    GgufFile f;
    ParamTable pt;
    gguf_open_gpt2(&f, path, cfg_out, &pt);
    gguf_reading_release();
}

int gguf_gpt2_linear_q8_0(const char* path) {
    if (!gguf_is_gguf(path)) return 0;
    GgufFile f;
    GPT2Config cfg;
    ParamTable pt;
    gguf_open_gpt2(&f, path, &cfg, &pt);
    const ParamId ids[] = {PT_QKVW, PT_ATTPROJW, PT_FCW, PT_FCPROJW};
    int q8 = 1;
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < cfg.num_layers; l++) q8 &= gguf_param_tensor(&f, &pt, ids[k], l)->type == GGML_TYPE_Q8_0;
    gguf_reading_release();
    return q8;
}

void gguf_load_gpt2(const char* path, GPT2Config* cfg_out, ParamTable* pt_out, float** params_out) {
    GgufFile f;
    gguf_open_gpt2(&f, path, cfg_out, pt_out);
    g_reading_params = (float*)callocCheck(pt_out->total, sizeof(float));
    for (int id = 0; id < NUM_PARAM_TENSORS; id++)
        for (int l = 0; l < (pt_out->t[id].per_layer ? cfg_out->num_layers : 1); l++)
            gguf_read_f32(&f, gguf_param_tensor(&f, pt_out, (ParamId)id, l), g_reading_params + params_layer_offset(pt_out, (ParamId)id, l));
    *params_out = g_reading_params;
    g_reading_params = NULL;
    gguf_reading_release();
}
