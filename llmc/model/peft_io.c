#include "model/peft_io.h"
#include "base/check.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/safetensors.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_CAP 160

// An adapter's tensors in a file: lora_A, lora_B, and with DoRA the magnitude (PEFT's key has no
// ".weight"), tensor w = 0, 1, 2 of adapter_tensors(lm).
static void adapter_key(char* out, size_t cap, const LoraAdapter* a, int w) {
    if (w == 2) snprintf(out, cap, LORA_KEY_PREFIX "%d.%s.lora_magnitude_vector", a->layer, lora_module_name(a->lin));
    else snprintf(out, cap, LORA_KEY_PREFIX "%d.%s.lora_%c.weight", a->layer, lora_module_name(a->lin), w ? 'B' : 'A');
}
static int adapter_tensors(const LoraModel* lm) { return lm->spec.dora ? 3 : 2; }
static size_t adapter_off(const LoraAdapter* a, int w) { return w == 0 ? a->a_off : w == 1 ? a->b_off : a->m_off; }
// Tensor w's shape: [rank, in], [out, rank], [out]; returns its dimensions.
static int adapter_shape(const LoraAdapter* a, int w, int64_t shape[2]) {
    shape[0] = w == 0 ? a->rank : a->out;
    shape[1] = w == 0 ? a->in : a->rank;
    return w == 2 ? 1 : 2;
}

static size_t extra_numel(const LoraModel* lm, const LoraExtra* e) { return params_layer_numel(&lm->pt, e->id); }

// Find a trained base slice in a file. PEFT before the base_layer wrapping (< 0.7) saved the bias
// of a LoRA-wrapped linear as "...<module>.bias"; accept that spelling too.
static const StTensor* find_extra(const StFile* f, const LoraExtra* e, const char** name) {
    static char alt[KEY_CAP];
    const StTensor* t = st_find(f, e->key);
    *name = e->key;
    const char* bl = strstr(e->key, ".base_layer.bias");
    if (!t && bl) {
        snprintf(alt, sizeof(alt), "%.*s.bias", (int)(bl - e->key), e->key);
        t = st_find(f, alt);
        if (t) *name = alt;
    }
    return t;
}

// ----------------------------------------------------------------------------
// tensors

// The adapter tensors (values, flat layout; NULL: lm's parameters) and the trained base slices
// (read from the model they are on: extra[i].p) as one safetensors file, atomically.
static void peft_write_tensors(const LoraModel* lm, const char* path, const float* values) {
    float* host = (float*)mallocCheck((lm->total ? lm->total : 1) * sizeof(float));
    if (values) memcpy(host, values, lm->total * sizeof(float));
    else lora_get_params(lm, host);
    size_t ne = 0;
    for (int i = 0; i < lm->n_extra; i++) ne += extra_numel(lm, &lm->extra[i]);
    float* ehost = (float*)mallocCheck((ne ? ne : 1) * sizeof(float));
    const int nt = adapter_tensors(lm);
    char (*keys)[KEY_CAP] = (char(*)[KEY_CAP])mallocCheck((size_t)lm->n * nt * KEY_CAP + 1);
    char split[8];
    StWriter w;
    st_writer_init(&w);
    // PEFT's order: the trained base slices interleave with the adapters by module name; the
    // order in the file does not matter to any reader, so they simply go first.
    for (size_t i = 0, off = 0; i < (size_t)lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        const size_t n = extra_numel(lm, e);
        if (!e->p) fatal("this is a bug in llmc", "peft_save_tensors: the trained base slice %s is on no model", e->key);
        ops_download_f32(ehost + off, e->p, n);
        const int64_t shape[1] = {(int64_t)n};
        st_writer_add(&w, e->key, ST_F32, 1, shape, ehost + off);
        off += n;
    }
    for (int i = 0; i < lm->n; i++)
        for (int t = 0; t < nt; t++) {
            const LoraAdapter* a = &lm->ad[i];
            int64_t shape[2];
            const int nd = adapter_shape(a, t, shape);
            adapter_key(keys[nt * i + t], KEY_CAP, a, t);
            st_writer_add(&w, keys[nt * i + t], ST_F32, nd, shape, host + adapter_off(a, t));
        }
    unsigned blocks = 0;
    for (int i = 0; i < lm->n; i++) blocks |= lm->ad[i].blocks;
    lora_split_name(blocks, split, sizeof(split));
    if (split[0]) st_writer_meta(&w, PEFT_META_QKV_SPLIT, split);
    st_writer_save(&w, path);
    st_writer_free(&w);
    free(keys);
    free(host);
    free(ehost);
}

void peft_save_tensors(const LoraModel* lm, const char* path) { peft_write_tensors(lm, path, NULL); }

// The trained base slices of f into the model the adapters are on; returns how many were read.
static int load_extras(LoraModel* lm, StFile* f, const char* path, const char* hint) {
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        const char* tname;
        const StTensor* t = find_extra(f, e, &tname);
        const size_t n = extra_numel(lm, e);
        if (!t) fatal(hint, "'%s': trained base tensor '%s' is missing", path, e->key);
        if (t->numel != n || t->ndim != 1) fatal(hint, "'%s': tensor '%s' has %llu elements, expected %zu", path, e->key, (unsigned long long)t->numel, n);
        if (!e->p) fatal("this is a bug in llmc", "peft_load_tensors: the trained base slice %s is on no model", e->key);
        float* tmp = (float*)mallocCheck(n * sizeof(float));
        st_read_f32(f, t, tmp);
        ops_upload_f32(e->p, tmp, n);
        free(tmp);
    }
    return lm->n_extra;
}

// Every adapter's tensors of f (lora_A, lora_B, DoRA's magnitude; nt of them: 2 reads the factors
// only) into host (flat layout), checked for shape; returns how many were read.
static int read_factors(const LoraModel* lm, StFile* f, const char* path, const char* hint, float* host, int nt) {
    int found = 0;
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        for (int w = 0; w < nt; w++) {
            char key[KEY_CAP];
            adapter_key(key, sizeof(key), a, w);
            const StTensor* t = st_find(f, key);
            if (!t) fatal(hint, "'%s': adapter tensor '%s' is missing", path, key);
            int64_t shape[2];
            const int nd = adapter_shape(a, w, shape);
            if (t->ndim != nd || t->shape[0] != shape[0] || (nd > 1 && t->shape[1] != shape[1]))
                fatal(hint, "'%s': tensor '%s' has %d dimensions [%lld, %lld], expected %d [%lld, %lld]", path, key, t->ndim,
                      (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), nd, (long long)shape[0],
                      (long long)(nd > 1 ? shape[1] : 0));
            st_read_f32(f, t, host + adapter_off(a, w));
            found++;
        }
    }
    return found;
}

void peft_load_tensors(LoraModel* lm, const char* path) {
    StFile f;
    st_open(&f, path);
    const char* hint = "resume with the same --lora-* flags as the run that wrote the checkpoint";
    float* host = (float*)callocCheck(lm->total ? lm->total : 1, sizeof(float));
    int found = read_factors(lm, &f, path, hint, host, adapter_tensors(lm));
    found += load_extras(lm, &f, path, hint);
    if (found != f.n_tensors)
        fatal(hint, "'%s' holds %d tensors; this run's adapters have %d", path, f.n_tensors, found);
    lora_set_params(lm, host);
    free(host);
    st_close(&f);
}

void peft_read_factors(const LoraModel* lm, const char* path, float* host) {
    StFile f;
    st_open(&f, path);
    read_factors(lm, &f, path, "resume with the same --lora-* and --init flags as the run that wrote it", host, 2);
    st_close(&f);
}

// ----------------------------------------------------------------------------
// adapter_config.json

static int is_integral(double x) { return x == floor(x) && fabs(x) < 1e9; }

static void jw_number(JsonWriter* w, double x) {
    if (is_integral(x)) jw_int(w, (int64_t)x); else jw_double(w, x);
}

// target_modules: the fewest PEFT module names that select exactly the adapted linears.
static void write_targets(JsonWriter* w, const LoraModel* lm) {
    unsigned lins = 0;
    for (int i = 0; i < lm->n; i++) lins |= 1u << lm->ad[i].lin;
    jw_key(w, "target_modules");
    jw_begin_array(w);
    if (lins & (1u << LINEAR_QKV)) jw_string(w, "c_attn");
    if ((lins & (1u << LINEAR_ATTPROJ)) && (lins & (1u << LINEAR_FCPROJ))) jw_string(w, "c_proj");
    else if (lins & (1u << LINEAR_ATTPROJ)) jw_string(w, "attn.c_proj");
    else if (lins & (1u << LINEAR_FCPROJ)) jw_string(w, "mlp.c_proj");
    if (lins & (1u << LINEAR_FC)) jw_string(w, "c_fc");
    jw_end_array(w);
}

// layers_to_transform: the layers that have an adapter (null: every layer).
static void write_layers(JsonWriter* w, const LoraModel* lm) {
    unsigned char on[LORA_MAX_LAYERS] = {0};
    int all = 1;
    for (int i = 0; i < lm->n; i++) on[lm->ad[i].layer] = 1;
    for (int l = 0; l < lm->cfg.num_layers; l++) all &= on[l];
    jw_key(w, "layers_to_transform");
    if (all) jw_null(w);
    else {
        jw_begin_array(w);
        for (int l = 0; l < lm->cfg.num_layers; l++) if (on[l]) jw_int(w, l);
        jw_end_array(w);
    }
    jw_key(w, "layers_pattern");
    if (all) jw_null(w); else jw_string(w, "h");
}

// exclude_modules, only when the adapters are not every target in every adapted layer (an
// adapter loaded with exclude_modules, or a pattern): the modules of that rectangle without one.
static void write_exclude(JsonWriter* w, const LoraModel* lm) {
    unsigned lins = 0;
    unsigned char on[LORA_MAX_LAYERS] = {0};
    for (int i = 0; i < lm->n; i++) { lins |= 1u << lm->ad[i].lin; on[lm->ad[i].layer] = 1; }
    int holes = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) { if (!holes) return; jw_key(w, "exclude_modules"); jw_begin_array(w); }
        for (int l = 0; l < lm->cfg.num_layers; l++)
            for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
                if (!on[l] || !(lins & (1u << k)) || lm->lookup[l][k] >= 0) continue;
                char full[128];
                snprintf(full, sizeof(full), "transformer.h.%d.%s", l, lora_module_name(k));
                if (pass) jw_string(w, full); else holes++;
            }
    }
    jw_end_array(w);
}

// rank_pattern (alpha = 0) or alpha_pattern (1): the adapters whose rank / alpha differ from the
// global ones (the stacked q/k/v split, or a loaded adapter with patterns), by module when uniform
// across layers, else by layer.
static void write_pattern(JsonWriter* w, const LoraModel* lm, int alpha) {
    const double global = alpha ? (double)lm->spec.alpha : (double)lm->spec.rank;
    jw_key(w, alpha ? "alpha_pattern" : "rank_pattern");
    jw_begin_object(w);
    for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
        int first = -1, uniform = 1, differs = 0;
        for (int i = 0; i < lm->n; i++) {
            if (lm->ad[i].lin != k) continue;
            const double v = alpha ? (double)lm->ad[i].alpha : (double)lm->ad[i].rank;
            if (v != global) differs = 1;
            if (first < 0) first = i;
            else if ((alpha ? (double)lm->ad[first].alpha : (double)lm->ad[first].rank) != v) uniform = 0;
        }
        for (int i = 0; differs && i < lm->n; i++) {
            const LoraAdapter* a = &lm->ad[i];
            if (a->lin != k) continue;
            char key[128];
            if (uniform) snprintf(key, sizeof(key), "%s", lora_module_name(k));
            else snprintf(key, sizeof(key), "transformer.h.%d.%s", a->layer, lora_module_name(k));
            jw_key(w, key);
            if (alpha) jw_number(w, a->alpha); else jw_int(w, a->rank);
            if (uniform) break;
        }
    }
    jw_end_object(w);
}

// The adapter's files with the adapter values given (NULL: lm's parameters) and
// init_lora_weights: true, or the name of init (gaussian, pissa, olora).
static void peft_save_files(const LoraModel* lm, const char* dir, const float* values, int init) {
    mkdir_p(dir);
    char path[LLMC_PATH_MAX];
    path_join(path, sizeof(path), dir, "adapter_model.safetensors");
    peft_write_tensors(lm, path, values);
    const LoraSpec* s = &lm->spec;
    JsonWriter w;
    jw_init(&w, 1);
    jw_begin_object(&w);
    jw_key(&w, "peft_type"); jw_string(&w, "LORA");
    jw_key(&w, "task_type"); jw_string(&w, "CAUSAL_LM");
    jw_key(&w, "r"); jw_int(&w, s->rank);
    jw_key(&w, "lora_alpha"); jw_number(&w, s->alpha);
    jw_key(&w, "lora_dropout"); jw_double(&w, s->dropout);
    write_targets(&w, lm);
    jw_key(&w, "fan_in_fan_out"); jw_bool(&w, 1);
    jw_key(&w, "bias"); jw_string(&w, s->bias == LORA_BIAS_ALL ? "all" : s->bias == LORA_BIAS_LORA_ONLY ? "lora_only" : "none");
    jw_key(&w, "use_rslora"); jw_bool(&w, s->rslora);
    jw_key(&w, "use_dora"); jw_bool(&w, s->dora);
    jw_key(&w, "modules_to_save");
    if (s->train_ln_f) { jw_begin_array(&w); jw_string(&w, "ln_f"); jw_end_array(&w); } else jw_null(&w);
    jw_key(&w, "init_lora_weights");
    if (init == LORA_INIT_DEFAULT) jw_bool(&w, 1); else jw_string(&w, LORA_INIT_NAMES[init]);
    jw_key(&w, "inference_mode"); jw_bool(&w, 1);
    jw_key(&w, "base_model_name_or_path"); jw_string(&w, lm->base_name);
    jw_key(&w, "revision"); jw_null(&w);
    write_layers(&w, lm);
    write_exclude(&w, lm);
    write_pattern(&w, lm, 0);
    write_pattern(&w, lm, 1);
    jw_end_object(&w);
    jw_raw(&w, "\n", 1);
    path_join(path, sizeof(path), dir, "adapter_config.json");
    atomic_write_file(path, w.buf, w.len);
    jw_free(&w);
}

void peft_save_adapter(const LoraModel* lm, const char* dir) { peft_save_files(lm, dir, NULL, lm->spec.init); }

void peft_save_adapter_init(const LoraModel* lm, const char* dir) {
    if (!lm->init0) fatal("this is a bug in llmc", "peft_save_adapter_init without the initial adapter values");
    peft_save_files(lm, dir, lm->init0, LORA_INIT_DEFAULT);
}

void peft_save_adapter_final(const LoraModel* lm, const char* dir) {
    if (!lm->init0) { peft_save_adapter(lm, dir); return; }
    float* values;
    LoraModel* conv = lora_converted(lm, &values);
    peft_save_files(conv, dir, values, LORA_INIT_DEFAULT);
    free(values);
    lora_free(conv);
}

// ----------------------------------------------------------------------------
// loading an adapter: the reader's state, then one function per part of the files

typedef struct {
    char* err;                     // the message of a refusal
    size_t errcap;
    const GPT2Config* cfg;
    ParamTable pt;                 // the base's shapes
    char cpath[LLMC_PATH_MAX];     // adapter_config.json
    char tpath[LLMC_PATH_MAX];     // adapter_model.safetensors
    char* text;
    JsonValue* js;
    StFile f;
    int f_open;
    LoraSpec spec;                 // r, alpha, rslora, dropout, bias, ln_f, layers of the config
    const char* bias_name;
    int all_linear;                // target_modules "all-linear"; else a pattern or a list:
    const char* target_re;         // target_modules as a (plain) regular expression, fullmatch
    const JsonValue* targets;      // target_modules as a list of module names
    const char* exclude_re;        // exclude_modules: a pattern (fullmatch) or a list, or neither
    const JsonValue* exclude;
    int layers_given;              // layers_to_transform selects layers (a non-empty list or an index)
    int file_layers;               // 1 + the highest layer index of the file's LoRA tensors
    const JsonValue* rank_pattern;
    const JsonValue* alpha_pattern;
    int matched;                   // tensors of the file accounted for
} PeftReader;

static int refuse(PeftReader* P, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err, P->errcap, fmt, ap);
    va_end(ap);
    return -1;
}

static int ends_with_module(const char* name, const char* target) {
    // PEFT list semantics: the module's key equals the target or ends with "." + target
    size_t a = strlen(name), b = strlen(target);
    if (a == b) return !strcmp(name, target);
    return a > b && name[a - b - 1] == '.' && !strcmp(name + a - b, target);
}

// PEFT reads some keys as Python regular expressions: target_modules and exclude_modules given as
// one string (re.fullmatch), the keys of rank_pattern / alpha_pattern (re.match of "(.*\.)?(KEY)$").
// The subset read here, exactly: characters that stand for themselves, '.' (any character), "\."
// (a dot), a leading '^' and a trailing '$'. Whether re is in that subset:
static int plain_regex(const char* re) {
    for (const char* p = re; *p; p++) {
        if (*p == '\\') { if (p[1] != '.') return 0; p++; }
        else if ((*p == '^' && p == re) || (*p == '$' && !p[1])) continue;
        else if (strchr("[](){}|*+?^$", *p)) return 0;
    }
    return 1;
}

// Whether s[0..n) is matched by the whole of a plain regular expression without its anchors.
static int plain_match_n(const char* s, size_t n, const char* re) {
    size_t i = 0;
    for (const char* p = re; *p; p++, i++) {
        if (*p == '$' && !p[1]) break;
        if (i >= n) return 0;
        if (*p == '\\') { if (s[i] != *++p) return 0; }
        else if (*p != '.' && s[i] != *p) return 0;
    }
    return i == n;
}

// re.fullmatch(re, name)
static int plain_fullmatch(const char* re, const char* name) {
    return plain_match_n(name, strlen(name), re[0] == '^' ? re + 1 : re);
}

// re.match("(.*\.)?(KEY)$", name): the key matches the whole name or a part after a '.' (the
// whole name only when the key starts with '^').
static int plain_key_match(const char* key, const char* name) {
    if (key[0] == '^') return plain_fullmatch(key, name);
    const size_t n = strlen(name);
    for (size_t s = 0; s < n; s++)
        if ((s == 0 || name[s - 1] == '.') && plain_match_n(name + s, n - s, key)) return 1;
    return 0;
}

// Value of a rank_pattern / alpha_pattern object for module "transformer.h.L.MOD": the first key
// matching, as PEFT's get_pattern_key takes it (the keys are checked by read_config_patterns).
// NULL if none.
static const JsonValue* pattern_lookup(const JsonValue* pat, const char* full) {
    if (!pat || pat->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < pat->n; i++)
        if (plain_key_match(pat->keys[i], full)) return &pat->items[i];
    return NULL;
}

// The two files of path (a directory, or its adapter_model.safetensors), which must exist.
static int reader_paths(PeftReader* P, const char* path) {
    char dir[LLMC_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    if (!dir_exists(path)) {
        char* slash = strrchr(dir, '/');
        if (slash) *slash = '\0'; else snprintf(dir, sizeof(dir), ".");
    }
    path_join(P->cpath, sizeof(P->cpath), dir, "adapter_config.json");
    if (dir_exists(path)) path_join(P->tpath, sizeof(P->tpath), dir, "adapter_model.safetensors");
    else snprintf(P->tpath, sizeof(P->tpath), "%s", path);
    if (!dir_exists(path) && !file_exists(path))
        return refuse(P, "'%s' does not exist (expected an adapter directory with adapter_config.json and adapter_model.safetensors)", path);
    if (!file_exists(P->cpath))
        return refuse(P, "'%s' does not exist: an adapter directory holds adapter_config.json and adapter_model.safetensors", P->cpath);
    if (!file_exists(P->tpath)) {
        char bin[LLMC_PATH_MAX];
        path_join(bin, sizeof(bin), dir, "adapter_model.bin");
        if (file_exists(bin)) return refuse(P, "'%s': pickled adapters are not supported; save it with safe_serialization=True", bin);
        return refuse(P, "'%s' does not exist", P->tpath);
    }
    return 0;
}

// bias and modules_to_save: the base tensors trained with the adapters.
static int read_config_extras(PeftReader* P) {
    const char* c = P->cpath;
    const char* bias = json_as_string(json_get(P->js, "bias"));
    P->bias_name = bias ? bias : "none";
    if (!bias || !strcmp(bias, "none")) P->spec.bias = LORA_BIAS_NONE;
    else if (!strcmp(bias, "all")) P->spec.bias = LORA_BIAS_ALL;
    else if (!strcmp(bias, "lora_only")) P->spec.bias = LORA_BIAS_LORA_ONLY;
    else return refuse(P, "'%s': bias \"%s\" is not one of \"none\", \"all\", \"lora_only\"", c, bias);
    const JsonValue* mts = json_get(P->js, "modules_to_save");
    if (!mts || json_is_null(mts)) return 0;
    if (mts->type != JSON_ARRAY) return refuse(P, "'%s': modules_to_save must be null or a list", c);
    for (int i = 0; i < mts->n; i++) {
        const char* s = json_as_string(&mts->items[i]);
        if (s && (!strcmp(s, "ln_f") || !strcmp(s, "transformer.ln_f"))) P->spec.train_ln_f = 1;
        else return refuse(P, "'%s': modules_to_save entry %s%s%s is not supported (only \"ln_f\")", c, s ? "\"" : "",
                           s ? s : "(not a string)", s ? "\"" : "");
    }
    return 0;
}

// The JSON and its scalar keys: peft_type, r, lora_alpha, lora_dropout, use_rslora, use_dora.
static int read_config_scalars(PeftReader* P) {
    const char* c = P->cpath;
    size_t len;
    char jerr[256];
    P->text = read_file_all(c, &len);
    P->js = json_parse(P->text, len, jerr, sizeof(jerr));
    if (!P->js) return refuse(P, "'%s': %s", c, jerr);
    const JsonValue* js = P->js;
    if (js->type != JSON_OBJECT) return refuse(P, "'%s': expected a JSON object", c);
    const char* pt = json_as_string(json_get(js, "peft_type"));
    if (pt && strcmp(pt, "LORA")) return refuse(P, "'%s': peft_type is \"%s\"; only LORA adapters are supported", c, pt);
    double alpha, dropout = 0.0;
    if (!json_as_int(json_get(js, "r"), &P->spec.rank) || P->spec.rank < 1) return refuse(P, "'%s': key \"r\" must be a positive integer", c);
    if (!json_as_number(json_get(js, "lora_alpha"), &alpha)) return refuse(P, "'%s': key \"lora_alpha\" must be a number", c);
    if (json_get(js, "lora_dropout") && !json_as_number(json_get(js, "lora_dropout"), &dropout))
        return refuse(P, "'%s': key \"lora_dropout\" must be a number", c);
    const JsonValue* rs = json_get(js, "use_rslora");
    if (rs && !json_is_null(rs) && !json_as_bool(rs, &P->spec.rslora)) return refuse(P, "'%s': key \"use_rslora\" must be true or false", c);
    const JsonValue* dora = json_get(js, "use_dora");
    if (dora && !json_is_null(dora) && !json_as_bool(dora, &P->spec.dora)) return refuse(P, "'%s': key \"use_dora\" must be true or false", c);
    if (dropout < 0.0 || dropout >= 1.0) return refuse(P, "'%s': lora_dropout %g is outside [0, 1)", c, dropout);
    P->spec.alpha = (float)alpha;
    P->spec.dropout = (float)dropout;
    P->rank_pattern = json_get(js, "rank_pattern");
    P->alpha_pattern = json_get(js, "alpha_pattern");
    return read_config_extras(P);
}

// A config value that turns something on: present and not null, false, 0, "", [] or {}.
static int json_set(const JsonValue* v) {
    if (!v) return 0;
    switch (v->type) {
    case JSON_NULL: return 0;
    case JSON_BOOL: return v->boolean;
    case JSON_NUMBER: return v->number != 0.0;
    case JSON_STRING: return v->string_len > 0;
    default: return v->n > 0;
    }
}

// Fields of PEFT's LoraConfig (src/peft/tuners/lora/config.py) that change which tokens or modules
// an adapter acts on, or what it computes there, and are not implemented here: refused by name
// when set, so that no such adapter is applied as a plain LoRA. (Fields that only steer training
// or initialisation, such as loftq_config, eva_config or corda_config, or that concern other
// models, such as megatron_config, change nothing once the adapter is saved; init_lora_weights
// is read_config_init's.)
static const struct { const char* key; const char* what; } PEFT_UNSUPPORTED[] = {
    {"alora_invocation_tokens", "Activated LoRA (aLoRA: the adapter acts only on the tokens from its invocation sequence on)"},
    {"target_parameters", "LoRA on parameters (nn.Parameter tensors, as in mixture-of-experts layers) instead of modules"},
    {"trainable_token_indices", "training rows of the token embedding beside the adapter"},
    {"layer_replication", "layer replication (a deeper model built from repeated base layers)"},
    {"lora_bias", "a bias on lora_B"},
    {"use_qalora", "QA-LoRA (the adapter's inputs pooled in groups)"},
    {"use_bdlora", "block-diagonal LoRA (BD-LoRA)"},
    {"velora_config", "VeLoRA (lora_A trained on compressed activations)"},
    {"monteclora_config", "MonteCLoRA (sampled adapter weights)"},
    {"arrow_config", "Arrow (routing among several adapters)"},
    {"kasa_config", "KaSA (truncated base weights, learned singular values between lora_A and lora_B)"},
};

static int read_config_unsupported(PeftReader* P) {
    for (size_t i = 0; i < sizeof(PEFT_UNSUPPORTED) / sizeof(PEFT_UNSUPPORTED[0]); i++)
        if (json_set(json_get(P->js, PEFT_UNSUPPORTED[i].key)))
            return refuse(P, "'%s': \"%s\" is set: %s is not supported (only plain LoRA is; applied as plain LoRA, this adapter "
                          "would compute something else)", P->cpath, PEFT_UNSUPPORTED[i].key, PEFT_UNSUPPORTED[i].what);
    return 0;
}

// init_lora_weights: how PEFT initialises an adapter, also when it loads one from its files. Most
// ways set values the file then replaces. PiSSA, OLoRA, CorDA, LoftQ and LoRA-GA also rewrite the
// base weights (minus the initial adapter, or LoftQ's quantized ones), so lora_A / lora_B of such
// a file hold the change to those rewritten weights, not to the base model's; MiCA keeps lora_B
// frozen in training. "pissa" is read as PEFT loads it: spec.init says that the base is to be
// rewritten to the PiSSA residual first (model_assemble, convert_merge_adapter). PEFT's "olora"
// on GPT-2's Conv1D layers factors the untransposed weight (llmc/model/lora_init.c), which is
// not ours: refused like the others.
static int read_config_init(PeftReader* P) {
    const char* s = json_as_string(json_get(P->js, "init_lora_weights"));
    if (s && !strcmp(s, "pissa")) { P->spec.init = LORA_INIT_PISSA; return 0; }
    static const char* const values_only[] = {"gaussian", "eva", "orthogonal"};
    static const char* const base_rewriting[] = {"pissa", "olora", "corda", "loftq", "lora_ga"};
    if (!s) return 0; // true, false or absent: PEFT's default initialisation, or random values
    for (size_t i = 0; i < sizeof(values_only) / sizeof(values_only[0]); i++)
        if (!strcmp(s, values_only[i])) return 0;
    for (size_t i = 0; i < sizeof(base_rewriting) / sizeof(base_rewriting[0]); i++)
        if (!strncmp(s, base_rewriting[i], strlen(base_rewriting[i])))
            return refuse(P, "'%s': init_lora_weights \"%s\" is not supported: PEFT rewrites the base model's weights when it creates "
                          "or loads such an adapter, and its lora_A / lora_B are relative to those weights; convert it into a plain "
                          "LoRA adapter first (PEFT: save_pretrained(..., path_initial_model_for_weight_conversion=...))", P->cpath, s);
    if (!strcmp(s, "mica")) return refuse(P, "'%s': init_lora_weights \"mica\" (MiCA: lora_B frozen in training) is not supported", P->cpath);
    return refuse(P, "'%s': init_lora_weights \"%s\" is not a value PEFT's LoraConfig knows", P->cpath, s);
}

// The keys of rank_pattern / alpha_pattern: module names, or the regular expressions plain_regex
// reads exactly.
static int read_config_patterns(PeftReader* P) {
    const char* names[2] = {"rank_pattern", "alpha_pattern"};
    const JsonValue* pats[2] = {P->rank_pattern, P->alpha_pattern};
    for (int j = 0; j < 2; j++) {
        const JsonValue* v = pats[j];
        if (!v || json_is_null(v)) continue;
        if (v->type != JSON_OBJECT) return refuse(P, "'%s': key \"%s\" must be an object", P->cpath, names[j]);
        for (int i = 0; i < v->n; i++)
            if (!plain_regex(v->keys[i]))
                return refuse(P, "'%s': %s key \"%s\" is a regular expression beyond what is read here (module names, '.', '\\.', a "
                              "leading '^'); name the modules instead, e.g. \"transformer.h.0.attn.c_attn\"", P->cpath, names[j], v->keys[i]);
    }
    return 0;
}

// exclude_modules: modules the targets would include but PEFT leaves alone: a list of names
// (matched as target_modules' are) or one regular expression (re.fullmatch).
static int read_config_exclude(PeftReader* P) {
    const JsonValue* ex = json_get(P->js, "exclude_modules");
    if (!json_set(ex)) return 0;
    if (ex->type == JSON_STRING) {
        if (!plain_regex(ex->string))
            return refuse(P, "'%s': exclude_modules \"%s\" is a regular expression beyond what is read here (module names, '.', '\\.', "
                          "'^', '$'); list the modules instead", P->cpath, ex->string);
        P->exclude_re = ex->string;
        return 0;
    }
    if (ex->type != JSON_ARRAY) return refuse(P, "'%s': key \"exclude_modules\" must be null, a string or a list of strings", P->cpath);
    for (int i = 0; i < ex->n; i++)
        if (!json_as_string(&ex->items[i])) return refuse(P, "'%s': exclude_modules[%d] is not a string", P->cpath, i);
    P->exclude = ex;
    return 0;
}

// target_modules: "all-linear" or a list of module names of GPT-2's linear layers.
static int read_config_targets(PeftReader* P) {
    const char* c = P->cpath;
    const JsonValue* tm = json_get(P->js, "target_modules");
    if (!tm) return refuse(P, "'%s': key \"target_modules\" is missing", c);
    if (tm->type == JSON_STRING) {
        if (!strcmp(tm->string, "all-linear")) P->all_linear = 1;
        else if (plain_regex(tm->string)) P->target_re = tm->string;
        else return refuse(P, "'%s': target_modules \"%s\" is a regular expression beyond what is read here (module names, '.', "
                           "'\\.', '^', '$'); list the module names instead, e.g. [\"c_attn\", \"c_proj\"], or use \"all-linear\"", c, tm->string);
        return read_config_exclude(P);
    }
    if (tm->type != JSON_ARRAY) return refuse(P, "'%s': key \"target_modules\" must be a list of strings", c);
    for (int i = 0; i < tm->n; i++) {
        const char* s = json_as_string(&tm->items[i]);
        if (!s) return refuse(P, "'%s': target_modules[%d] is not a string", c, i);
        int known = 0;
        for (int l = 0; l < P->cfg->num_layers && !known; l++)
            for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
                char full[128];
                snprintf(full, sizeof(full), "transformer.h.%d.%s", l, lora_module_name(k));
                if (ends_with_module(full, s)) known = 1;
            }
        if (!known) return refuse(P, "'%s': unknown target module \"%s\" for GPT-2 (LoRA applies to c_attn, attn.c_proj, c_fc, mlp.c_proj)", c, s);
    }
    P->targets = tm;
    return read_config_exclude(P);
}

// layers_pattern, read where layers_to_transform selects layers: the name of the list of blocks
// before the layer index in a module's name, "h" in GPT-2 (PEFT: "...\.PATTERN\.(\d+)\.").
// Another name matches no module of GPT-2's, so PEFT would adapt nothing.
static int read_layers_pattern(PeftReader* P) {
    const JsonValue* lp = json_get(P->js, "layers_pattern");
    if (!json_set(lp)) return 0; // any "<name>.<index>." in the module's name: GPT-2's "h.<l>."
    const int n = lp->type == JSON_ARRAY ? lp->n : 1;
    int has_h = 0;
    for (int i = 0; i < n; i++) {
        const char* s = json_as_string(lp->type == JSON_ARRAY ? &lp->items[i] : lp);
        if (!s) return refuse(P, "'%s': key \"layers_pattern\" must be null, a string or a list of strings", P->cpath);
        for (const char* q = s; *q; q++)
            if (!(*q == '_' || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9')))
                return refuse(P, "'%s': layers_pattern \"%s\" is a regular expression; only the name of the list of blocks (\"h\" in "
                              "GPT-2) is read here", P->cpath, s);
        has_h |= !strcmp(s, "h");
    }
    if (!has_h)
        return refuse(P, "'%s': layers_pattern names no list of blocks of GPT-2 (its blocks are \"h\"): PEFT would adapt no layer of "
                      "this base model (wrong base model?)", P->cpath);
    return 0;
}

// layers_to_transform: null or [] (every layer), a layer index or a list of them.
static int read_config_layers(PeftReader* P) {
    const char* c = P->cpath;
    const int L = P->cfg->num_layers;
    const JsonValue* ltt = json_get(P->js, "layers_to_transform");
    int v;
    if (!ltt || json_is_null(ltt) || (ltt->type == JSON_ARRAY && ltt->n == 0)) {
        for (int l = 0; l < L; l++) P->spec.layers[l] = 1;
        P->spec.all_layers = 1;
        return 0;
    }
    P->layers_given = 1;
    if (json_as_int(ltt, &v)) {
        if (v < 0 || v >= L) return refuse(P, "'%s': layers_to_transform %d is outside 0-%d (the base model has %d layers)", c, v, L - 1, L);
        P->spec.layers[v] = 1;
        return read_layers_pattern(P);
    }
    if (ltt->type != JSON_ARRAY) return refuse(P, "'%s': key \"layers_to_transform\" must be null, an integer or a list of integers", c);
    for (int i = 0; i < ltt->n; i++) {
        if (!json_as_int(&ltt->items[i], &v) || v < 0 || v >= L)
            return refuse(P, "'%s': layers_to_transform[%d] is not a layer index 0-%d (the base model has %d layers)", c, i, L - 1, L);
        P->spec.layers[v] = 1;
    }
    return read_layers_pattern(P);
}

// Every tensor of the file must belong to a layer of the base (its names are checked later).
static int check_tensor_layers(PeftReader* P) {
    const size_t np = strlen(LORA_KEY_PREFIX);
    for (int i = 0; i < P->f.n_tensors; i++) {
        const char* name = P->f.tensors[i].name;
        if (!strncmp(name, "base_model.model.transformer.ln_f.", 34)) continue; // modules_to_save / bias: checked below
        if (strncmp(name, LORA_KEY_PREFIX, np) != 0)
            return refuse(P, "'%s': unexpected tensor '%s' (expected " LORA_KEY_PREFIX "<layer>.<module>.lora_A|lora_B.weight)", P->tpath, name);
        const int l = atoi(name + np);
        if (l < 0 || l >= P->cfg->num_layers)
            return refuse(P, "'%s': tensor '%s' is for layer %d but the base model has %d layers (wrong base model?)", P->tpath, name, l,
                          P->cfg->num_layers);
        if (l + 1 > P->file_layers) P->file_layers = l + 1;
    }
    return 0;
}

static int excluded(const PeftReader* P, const char* full) {
    if (P->exclude_re) return plain_fullmatch(P->exclude_re, full);
    for (int i = 0; P->exclude && i < P->exclude->n; i++)
        if (ends_with_module(full, P->exclude->items[i].string)) return 1;
    return 0;
}

// Whether the config adapts linear k of layer l, as PEFT's check_target_module_exists decides: not
// excluded, and matched by the target pattern, or by a list entry that is the module's whole name
// (in any layer) or ends it (in a layer of layers_to_transform). "all-linear" is the list of
// GPT-2's linear layers.
static int targeted(const PeftReader* P, int l, int k) {
    char full[128];
    snprintf(full, sizeof(full), "transformer.h.%d.%s", l, lora_module_name(k));
    if (excluded(P, full)) return 0;
    if (P->target_re) return plain_fullmatch(P->target_re, full);
    int t = P->all_linear;
    for (int i = 0; !t && i < P->targets->n; i++) {
        if (!strcmp(full, P->targets->items[i].string)) return 1;
        t = ends_with_module(full, P->targets->items[i].string);
    }
    return t && P->spec.layers[l];
}

// The rank and alpha of linear k of layer l: r / lora_alpha, or their rank_pattern / alpha_pattern.
static int rank_alpha(PeftReader* P, const char* full, int* rank, double* alpha) {
    *rank = P->spec.rank;
    *alpha = P->spec.alpha;
    const JsonValue* rv = pattern_lookup(P->rank_pattern, full);
    if (rv && (!json_as_int(rv, rank) || *rank < 1)) return refuse(P, "'%s': rank_pattern value for %s must be a positive integer", P->cpath, full);
    const JsonValue* av = pattern_lookup(P->alpha_pattern, full);
    if (av && !json_as_number(av, alpha)) return refuse(P, "'%s': alpha_pattern value for %s must be a number", P->cpath, full);
    return 0;
}

// DoRA's magnitude of adapter a (use_dora): present, [out].
static int read_magnitude(PeftReader* P, const LoraAdapter* a, const char* ka) {
    char km[KEY_CAP];
    adapter_key(km, sizeof(km), a, 2);
    const StTensor* t = st_find(&P->f, km);
    if (!t) return refuse(P, "'%s': '%s' has no DoRA magnitude '%s', and '%s' says use_dora (config/tensor disagreement)", P->tpath, ka, km, P->cpath);
    if (t->ndim != 1 || t->shape[0] != a->out)
        return refuse(P, "'%s': '%s' has %d dimensions [%lld]; the base model's layer has %d outputs (wrong base model?)", P->tpath, km,
                      t->ndim, (long long)t->shape[0], a->out);
    P->matched++;
    return 0;
}

// The adapter on linear k of layer l, if the file has one (*found), checked against the config
// and the base's shapes.
static int read_adapter(PeftReader* P, int l, int k, LoraAdapter* a, int* found) {
    const char *c = P->cpath, *t = P->tpath;
    char ka[KEY_CAP], kb[KEY_CAP], full[128];
    memset(a, 0, sizeof(*a));
    a->lin = k; a->wid = linear_weight_id(k); a->layer = l;
    a->out = (int)P->pt.t[a->wid].rows;
    a->in = (int)P->pt.t[a->wid].cols;
    adapter_key(ka, sizeof(ka), a, 0);
    adapter_key(kb, sizeof(kb), a, 1);
    snprintf(full, sizeof(full), "transformer.h.%d.%s", l, lora_module_name(k));
    const StTensor* ta = st_find(&P->f, ka);
    const StTensor* tb = st_find(&P->f, kb);
    *found = ta || tb;
    if (!*found && targeted(P, l, k) && P->file_layers > 0 && l >= P->file_layers && !P->layers_given && !P->target_re)
        return refuse(P, "'%s' has LoRA tensors for layers 0-%d only, but '%s' adapts %s in every layer and the base model has %d layers: "
                      "the adapter was made for a %d-layer model, not for this one (wrong base model?)", t, P->file_layers - 1, c,
                      lora_module_name(k), P->cfg->num_layers, P->file_layers);
    if (!*found) return targeted(P, l, k) ? refuse(P, "'%s' targets %s but '%s' has no tensors for it (config/tensor disagreement)", c, full, t) : 0;
    if (!ta) return refuse(P, "'%s': '%s' has no matching lora_A tensor '%s'", t, kb, ka);
    if (!tb) return refuse(P, "'%s': '%s' has no matching lora_B tensor '%s'", t, ka, kb);
    if (!targeted(P, l, k)) return refuse(P, "'%s': tensor '%s' is for %s, which adapter_config.json does not target (config/tensor disagreement)", t, ka, full);
    if (ta->ndim != 2 || tb->ndim != 2) return refuse(P, "'%s': '%s' and '%s' must be 2-D", t, ka, kb);
    if (ta->shape[1] != a->in)
        return refuse(P, "'%s': '%s' has shape [%lld, %lld]; the base model's %s takes %d inputs (wrong base model?)", t, ka,
                      (long long)ta->shape[0], (long long)ta->shape[1], full, a->in);
    if (tb->shape[0] != a->out)
        return refuse(P, "'%s': '%s' has shape [%lld, %lld]; the base model's %s has %d outputs (wrong base model?)", t, kb,
                      (long long)tb->shape[0], (long long)tb->shape[1], full, a->out);
    if (ta->shape[0] != tb->shape[1])
        return refuse(P, "'%s': rank mismatch: '%s' has rank %lld but '%s' has rank %lld", t, ka, (long long)ta->shape[0], kb, (long long)tb->shape[1]);
    double alpha;
    if (rank_alpha(P, full, &a->rank, &alpha)) return -1;
    if (ta->shape[0] != a->rank)
        return refuse(P, "'%s': '%s' has rank %lld but adapter_config.json says r = %d for %s (config/tensor disagreement)", t, ka,
                      (long long)ta->shape[0], a->rank, full);
    a->alpha = (float)alpha;
    a->scaling = lora_scaling(a->alpha, a->rank, P->spec.rslora);
    P->matched += 2;
    return P->spec.dora ? read_magnitude(P, a, ka) : 0;
}

// "q,v" -> the block bits 1 | 4 (lora_split_name's inverse); 0 if s names anything else.
static unsigned split_blocks(const char* s) {
    unsigned blocks = 0;
    for (const char* p = s; *p; p++) {
        const char* q = strchr("qkv", *p);
        if (q) blocks |= 1u << (q - "qkv");
        else if (*p != ',') return 0;
    }
    return blocks;
}

// The q/k/v split the tensor file names (PEFT_META_QKV_SPLIT) on every c_attn adapter.
static int read_split(PeftReader* P, LoraAdapter* ad, int n) {
    const char* s = st_meta(&P->f, PEFT_META_QKV_SPLIT);
    if (!s) return 0;
    const unsigned blocks = split_blocks(s);
    if (!blocks) return refuse(P, "'%s': metadata %s \"%s\" is not a list of q, k, v", P->tpath, PEFT_META_QKV_SPLIT, s);
    int nb = 0, on_qkv = 0;
    for (int j = 0; j < 3; j++) nb += (blocks >> j) & 1;
    for (int i = 0; i < n; i++) {
        if (ad[i].lin != LINEAR_QKV) continue;
        if (ad[i].rank % nb)
            return refuse(P, "'%s': metadata %s \"%s\" does not divide the rank %d of layer %d's c_attn adapter", P->tpath,
                          PEFT_META_QKV_SPLIT, s, ad[i].rank, ad[i].layer);
        ad[i].blocks = blocks;
        on_qkv = 1;
    }
    if (!on_qkv) return refuse(P, "'%s': metadata %s \"%s\" names a split of c_attn, which has no adapter", P->tpath, PEFT_META_QKV_SPLIT, s);
    P->spec.targets = (P->spec.targets & ~LORA_T_CATTN) | (blocks << 1);
    return 0;
}

// Every adapter of the file, checked against the config; the config's structure for them.
static int read_adapters(PeftReader* P, LoraAdapter* ad, int* n) {
    const int L = P->cfg->num_layers;
    static const unsigned TARGET_BIT[LINEAR_PER_BLOCK] = {LORA_T_CATTN, LORA_T_ATTPROJ, LORA_T_FC, LORA_T_FCPROJ};
    if (check_tensor_layers(P)) return -1;
    *n = 0;
    for (int l = 0; l < L; l++)
        for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
            int found;
            if (read_adapter(P, l, k, &ad[*n], &found)) return -1;
            if (!found) continue;
            P->spec.targets |= TARGET_BIT[k];
            (*n)++;
        }
    if (*n == 0) return refuse(P, "'%s' holds no LoRA tensors", P->tpath);
    // the layers adapted (a target pattern may reach layers layers_to_transform does not name)
    memset(P->spec.layers, 0, sizeof(P->spec.layers));
    for (int i = 0; i < *n; i++) P->spec.layers[ad[i].layer] = 1;
    P->spec.all_layers = 1;
    for (int l = 0; l < L; l++) P->spec.all_layers &= P->spec.layers[l];
    if (read_split(P, ad, *n)) return -1;
    if (P->spec.dora && P->spec.init != LORA_INIT_DEFAULT)
        return refuse(P, "'%s': use_dora with init_lora_weights \"%s\": a DoRA adapter over a rewritten base is not supported", P->cpath,
                      LORA_INIT_NAMES[P->spec.init]);
    if (P->spec.dora && (P->spec.targets & (LORA_T_Q | LORA_T_K | LORA_T_V)))
        return refuse(P, "'%s': use_dora with a q/k/v split (metadata %s): DoRA's magnitude covers the whole c_attn", P->tpath, PEFT_META_QKV_SPLIT);
    return 0;
}

// The trained base slices the config announces (bias, modules_to_save) must all be in the file.
// A tensor the adapter's values are read from must hold floats (st_read_f32 converts these three).
static int check_float(PeftReader* P, const char* key, const StTensor* t) {
    if (t->dtype == ST_F32 || t->dtype == ST_BF16 || t->dtype == ST_F16) return 0;
    return refuse(P, "'%s': '%s' has dtype %s; expected F32, BF16 or F16", P->tpath, key, st_dtype_name(t->dtype));
}

static int check_extras(PeftReader* P, const LoraModel* lm) {
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        const char* tname;
        const StTensor* t = find_extra(&P->f, e, &tname);
        if (!t)
            return refuse(P, "'%s': bias \"%s\"%s in '%s' needs tensor '%s', which is missing (config/tensor disagreement)", P->tpath,
                          P->bias_name, P->spec.train_ln_f ? " / modules_to_save [\"ln_f\"]" : "", P->cpath, e->key);
        if (t->ndim != 1 || t->numel != extra_numel(lm, e))
            return refuse(P, "'%s': '%s' has %llu elements; the base model's tensor has %zu (wrong base model?)", P->tpath, e->key,
                          (unsigned long long)t->numel, extra_numel(lm, e));
        const int rc = check_float(P, tname, t);
        if (rc) return rc;
        P->matched++;
    }
    return 0;
}

// Whether name is a tensor of lm: an adapter's lora_A / lora_B or a trained base slice.
static int known_tensor(const PeftReader* P, const LoraModel* lm, const char* name) {
    for (int e = 0; e < lm->n_extra; e++) {
        const char* tname;
        if (find_extra(&P->f, &lm->extra[e], &tname) && !strcmp(tname, name)) return 1;
    }
    for (int i = 0; i < lm->n; i++)
        for (int w = 0; w < adapter_tensors(lm); w++) {
            char key[KEY_CAP];
            adapter_key(key, sizeof(key), &lm->ad[i], w);
            if (!strcmp(key, name)) return 1;
        }
    return 0;
}

static int check_unknown_tensors(PeftReader* P, const LoraModel* lm) {
    if (P->matched == P->f.n_tensors) return 0;
    for (int i = 0; i < P->f.n_tensors; i++)
        if (!known_tensor(P, lm, P->f.tensors[i].name))
            return refuse(P, "'%s': unknown tensor '%s' (neither a lora_A / lora_B%s of a GPT-2 linear layer nor a base tensor trained by the "
                          "config's bias / modules_to_save)", P->tpath, P->f.tensors[i].name, lm->spec.dora ? " / lora_magnitude_vector" : "");
    return 0;
}

// A split adapter's B must be zero outside its blocks (the file was not trained as a whole c_attn).
static int check_split_zeros(PeftReader* P, const LoraAdapter* a, const float* B) {
    const size_t n = (size_t)a->out * a->rank;
    float* mask = (float*)mallocCheck(n * sizeof(float));
    lora_b_mask_host(a, mask);
    size_t bad = 0;
    for (size_t j = 0; j < n; j++) bad += mask[j] == 0.0f && B[j] != 0.0f;
    free(mask);
    if (!bad) return 0;
    char kb[KEY_CAP];
    adapter_key(kb, sizeof(kb), a, 1);
    return refuse(P, "'%s': '%s' has %zu non-zero entries outside the q/k/v blocks its metadata %s \"%s\" names", P->tpath, kb, bad,
                  PEFT_META_QKV_SPLIT, st_meta(&P->f, PEFT_META_QKV_SPLIT));
}

// The adapters' values into lm, the trained base slices' into lm->extra_host.
static int read_values(PeftReader* P, LoraModel* lm) {
    float* host = (float*)callocCheck(lm->total ? lm->total : 1, sizeof(float));
    int rc = 0;
    for (int i = 0; i < lm->n && !rc; i++) {
        const LoraAdapter* a = &lm->ad[i];
        for (int w = 0; w < adapter_tensors(lm) && !rc; w++) {
            char key[KEY_CAP];
            adapter_key(key, sizeof(key), a, w);
            const StTensor* t = st_find(&P->f, key);
            rc = check_float(P, key, t);
            if (!rc) st_read_f32(&P->f, t, host + adapter_off(a, w));
        }
        if (!rc && a->blocks) rc = check_split_zeros(P, a, host + a->b_off);
    }
    if (!rc) lora_set_params(lm, host);
    free(host);
    size_t ne = 0;
    for (int i = 0; i < lm->n_extra; i++) ne += extra_numel(lm, &lm->extra[i]);
    lm->extra_host = (float*)mallocCheck((ne ? ne : 1) * sizeof(float));
    for (size_t i = 0, off = 0; !rc && i < (size_t)lm->n_extra; i++) {
        const char* tname;
        st_read_f32(&P->f, find_extra(&P->f, &lm->extra[i], &tname), lm->extra_host + off);
        off += extra_numel(lm, &lm->extra[i]);
    }
    return rc;
}

LoraModel* peft_try_load_adapter(const char* path, const GPT2Config* cfg, char* err, size_t errcap) {
    PeftReader P;
    memset(&P, 0, sizeof(P));
    P.err = err; P.errcap = errcap; P.cfg = cfg;
    params_build(&P.pt, cfg);
    LoraModel* lm = NULL;
    LoraAdapter* ad = (LoraAdapter*)callocCheck((size_t)cfg->num_layers * LINEAR_PER_BLOCK + 1, sizeof(LoraAdapter));
    int n = 0, rc = cfg->num_layers > LORA_MAX_LAYERS ? refuse(&P, "models with more than %d layers are not supported", LORA_MAX_LAYERS) : 0;
    if (!rc) rc = reader_paths(&P, path);
    if (!rc) rc = read_config_scalars(&P);
    if (!rc) rc = read_config_unsupported(&P);
    if (!rc) rc = read_config_init(&P);
    if (!rc) rc = read_config_patterns(&P);
    if (!rc) rc = read_config_targets(&P);
    if (!rc) rc = read_config_layers(&P);
    if (!rc) { rc = st_try_open(&P.f, P.tpath, err, errcap); P.f_open = rc == 0; }
    if (!rc) rc = read_adapters(&P, ad, &n);
    if (!rc) { lm = lora_from_adapters(cfg, &P.spec, ad, n); ad = NULL; }
    if (!rc) rc = check_extras(&P, lm);
    if (!rc) rc = check_unknown_tensors(&P, lm);
    if (!rc) rc = read_values(&P, lm);
    const char* base = rc ? NULL : json_as_string(json_get(P.js, "base_model_name_or_path"));
    if (base) snprintf(lm->base_name, sizeof(lm->base_name), "%s", base);
    if (rc && lm) { lora_free(lm); lm = NULL; }
    free(ad);
    if (P.f_open) st_close(&P.f);
    json_free(P.js);
    free(P.text);
    return lm;
}

LoraModel* peft_load_adapter(const char* path, const GPT2Config* cfg) {
    char err[1024];
    LoraModel* lm = peft_try_load_adapter(path, cfg, err, sizeof(err));
    if (!lm) fatal("check that the adapter was trained for this base model (--model) and saved by PEFT or train_lora", "%s", err);
    return lm;
}
