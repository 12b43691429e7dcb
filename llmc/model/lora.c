#include "model/lora.h"
#include "base/check.h"
#include "base/rand.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Module names as PEFT sees them (relative to a block), per LINEAR_*.
static const char* const LIN_MODULE[LINEAR_PER_BLOCK] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
#define RNG_STREAM_INIT 0x4C6F5241ull   // "LoRA": A init streams are this + adapter (layer, lin)

// ----------------------------------------------------------------------------
// flag parsing

int lora_parse_targets(const char* s, unsigned* out, char* err, size_t errcap) {
    unsigned t = 0;
    char buf[512];
    if (strlen(s) >= sizeof(buf)) { snprintf(err, errcap, "--lora-targets: list too long"); return -1; }
    strcpy(buf, s);
    char* save = NULL;
    for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        if (!strcmp(tok, "c_attn") || !strcmp(tok, "attn.c_attn")) t |= LORA_T_CATTN;
        else if (!strcmp(tok, "q")) t |= LORA_T_Q;
        else if (!strcmp(tok, "k")) t |= LORA_T_K;
        else if (!strcmp(tok, "v")) t |= LORA_T_V;
        else if (!strcmp(tok, "attn.c_proj")) t |= LORA_T_ATTPROJ;
        else if (!strcmp(tok, "mlp.c_fc") || !strcmp(tok, "c_fc")) t |= LORA_T_FC;
        else if (!strcmp(tok, "mlp.c_proj")) t |= LORA_T_FCPROJ;
        else if (!strcmp(tok, "c_proj")) t |= LORA_T_ATTPROJ | LORA_T_FCPROJ;
        else if (!strcmp(tok, "all-linear")) t |= LORA_T_ALL;
        else {
            snprintf(err, errcap, "--lora-targets: unknown target '%s' (choose from c_attn, q, k, v, attn.c_proj, "
                     "mlp.c_fc, mlp.c_proj, c_proj, all-linear)", tok);
            return -1;
        }
    }
    if (!t) { snprintf(err, errcap, "--lora-targets: empty target list"); return -1; }
    if ((t & LORA_T_CATTN) && (t & (LORA_T_Q | LORA_T_K | LORA_T_V))) {
        snprintf(err, errcap, "--lora-targets: c_attn (the whole fused q/k/v layer) cannot be combined with q, k or v");
        return -1;
    }
    *out = t;
    return 0;
}

int lora_parse_layers(const char* s, int L, LoraSpec* spec, char* err, size_t errcap) {
    memset(spec->layers, 0, sizeof(spec->layers));
    if (L > LORA_MAX_LAYERS) { snprintf(err, errcap, "models with more than %d layers are not supported", LORA_MAX_LAYERS); return -1; }
    if (!s || !strcmp(s, "all")) {
        for (int l = 0; l < L; l++) spec->layers[l] = 1;
        spec->all_layers = 1;
        return 0;
    }
    const char* p = s;
    while (*p) {
        char* end;
        long a = strtol(p, &end, 10), b;
        if (end == p) { snprintf(err, errcap, "--lora-layers '%s': expected a layer index at '%s'", s, p); return -1; }
        p = end; b = a;
        if (*p == '-') {
            p++;
            b = strtol(p, &end, 10);
            if (end == p) { snprintf(err, errcap, "--lora-layers '%s': expected the end of a range at '%s'", s, p); return -1; }
            p = end;
        }
        if (a < 0 || b >= L || a > b) {
            snprintf(err, errcap, "--lora-layers '%s': range %ld-%ld is outside the model's layers 0-%d", s, a, b, L - 1);
            return -1;
        }
        for (long l = a; l <= b; l++) spec->layers[l] = 1;
        if (*p == ',') p++;
        else if (*p) { snprintf(err, errcap, "--lora-layers '%s': unexpected '%c'", s, *p); return -1; }
    }
    int all = 1;
    for (int l = 0; l < L; l++) all &= spec->layers[l];
    spec->all_layers = all;
    return 0;
}

// ----------------------------------------------------------------------------
// construction

float lora_scaling(float alpha, int rank, int rslora) {
    return rslora ? alpha / sqrtf((float)rank) : alpha / (float)rank;
}

const char* lora_module_name(int lin) { return LIN_MODULE[lin]; }

static void add_extra(LoraModel* lm, ParamId id, int layer, const char* key) {
    for (int i = 0; i < lm->n_extra; i++) if (lm->extra[i].id == id && lm->extra[i].layer == layer) return;
    LoraExtra* e = &lm->extra[lm->n_extra++];
    e->id = id; e->layer = layer;
    snprintf(e->key, sizeof(e->key), "%s", key);
}

// The bias of linear k in layer l, named as PEFT names it (base_layer when LoRA wraps it).
static void add_linear_bias(LoraModel* lm, int l, int k) {
    char key[160];
    snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.%s.%sbias", l, LIN_MODULE[k], lm->lookup[l][k] >= 0 ? "base_layer." : "");
    add_extra(lm, (ParamId)(linear_weight_id(k) + 1), l, key); // the bias follows its weight in the table
}

// Trained base slices of spec.bias / spec.train_ln_f, in PEFT's parameter order.
static void build_extras(LoraModel* lm) {
    const int L = lm->cfg.num_layers;
    lm->extra = (LoraExtra*)callocCheck((size_t)L * 6 + 3, sizeof(LoraExtra));
    char key[160];
    if (lm->spec.bias == LORA_BIAS_ALL) {
        for (int l = 0; l < L; l++) {
            snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.ln_1.bias", l);
            add_extra(lm, PT_LN1B, l, key);
            add_linear_bias(lm, l, LINEAR_QKV);
            add_linear_bias(lm, l, LINEAR_ATTPROJ);
            snprintf(key, sizeof(key), LORA_KEY_PREFIX "%d.ln_2.bias", l);
            add_extra(lm, PT_LN2B, l, key);
            add_linear_bias(lm, l, LINEAR_FC);
            add_linear_bias(lm, l, LINEAR_FCPROJ);
        }
    } else if (lm->spec.bias == LORA_BIAS_LORA_ONLY) {
        for (int i = 0; i < lm->n; i++) add_linear_bias(lm, lm->ad[i].layer, lm->ad[i].lin);
    }
    if (lm->spec.train_ln_f) add_extra(lm, PT_LNFW, -1, "base_model.model.transformer.ln_f.weight");
    if (lm->spec.bias == LORA_BIAS_ALL || lm->spec.train_ln_f) add_extra(lm, PT_LNFB, -1, "base_model.model.transformer.ln_f.bias");
}

static size_t extra_numel(const LoraModel* lm, const LoraExtra* e) { return params_layer_numel(&lm->pt, e->id); }

void lora_b_mask_host(const LoraAdapter* a, float* mask) {
    const size_t n = (size_t)a->out * a->rank;
    if (!a->blocks) { for (size_t i = 0; i < n; i++) mask[i] = 1.0f; return; }
    int C = a->out / 3, nb = 0, col_block[3] = {0, 0, 0};
    for (int j = 0; j < 3; j++) if ((a->blocks >> j) & 1) col_block[nb++] = j;
    const int r = a->rank / nb;
    for (int o = 0; o < a->out; o++)
        for (int j = 0; j < a->rank; j++) mask[(size_t)o * a->rank + j] = (o / C == col_block[j / r]) ? 1.0f : 0.0f;
}

// The masks of the split adapters in one backend buffer of moff elements.
static void upload_masks(LoraModel* lm, size_t moff) {
    lm->masks = (floatX*)ops_alloc(moff * sizeof(floatX));
    float* hm = (float*)mallocCheck(moff * sizeof(float));
    size_t mo = 0;
    for (int i = 0; i < lm->n; i++) {
        LoraAdapter* a = &lm->ad[i];
        if (!a->blocks) continue;
        lora_b_mask_host(a, hm + mo);
        a->b_mask = lm->masks + mo;
        mo += (size_t)a->out * a->rank;
    }
    ops_upload_f32(lm->masks, hm, moff);
    free(hm);
}

// The structure: offsets, sizes and trained base slices, nothing in backend memory yet.
static LoraModel* lora_structure(const GPT2Config* cfg, const LoraSpec* spec, LoraAdapter* ad, int n) {
    LoraModel* lm = (LoraModel*)callocCheck(1, sizeof(LoraModel));
    lm->cfg = *cfg;
    params_build(&lm->pt, cfg);
    lm->spec = *spec;
    lm->n = n;
    lm->ad = ad;
    for (int l = 0; l < LORA_MAX_LAYERS; l++) for (int k = 0; k < LINEAR_PER_BLOCK; k++) lm->lookup[l][k] = -1;
    size_t off = 0, moff = 0, zeros = 0;
    for (int i = 0; i < n; i++) {
        LoraAdapter* a = &ad[i];
        lm->lookup[a->layer][a->lin] = i;
        a->a_off = off; off += (size_t)a->rank * a->in;
        a->b_off = off; off += (size_t)a->out * a->rank;
        if (spec->dora) { a->m_off = off; off += (size_t)a->out; a->norm_off = lm->norms_n; lm->norms_n += (size_t)a->out; }
        if (a->blocks) {
            moff += (size_t)a->out * a->rank;
            // each B row of a targeted block keeps r of the nb*r columns; the untargeted rows none
            zeros += (size_t)a->out * a->rank - (size_t)(a->out / 3) * a->rank;
        }
    }
    lm->total = off;
    lm->n_trainable = off - zeros;
    lm->masks_n = moff;
    lm->plus_ratio = 1.0f;
    build_extras(lm);
    return lm;
}

LoraModel* lora_from_adapters(const GPT2Config* cfg, const LoraSpec* spec, LoraAdapter* ad, int n) {
    LoraModel* lm = lora_structure(cfg, spec, ad, n);
    const size_t off = lm->total;
    lm->params = (floatX*)ops_alloc(off * sizeof(floatX));
    lm->grads = (floatX*)ops_alloc(off * sizeof(floatX));
    ops_zero(lm->params, off * sizeof(floatX));
    ops_zero(lm->grads, off * sizeof(floatX));
    if (lm->masks_n) upload_masks(lm, lm->masks_n);
    if (lm->norms_n) {
        lm->norms = (float*)ops_alloc(lm->norms_n * sizeof(float));
        ops_zero(lm->norms, lm->norms_n * sizeof(float));
        lm->norm_ready = (int*)callocCheck((size_t)n, sizeof(int));
    }
    return lm;
}

// The adapters spec puts on a model of config cfg (checked: fatal on an inconsistent spec), laid
// out; *n gets their count.
static LoraAdapter* lora_adapters_for(const GPT2Config* cfg, const LoraSpec* spec, int* n_out) {
    const char* hint = "check the --lora-* flags (run with --help)";
    const int L = cfg->num_layers;
    if (spec->rank < 0) fatal(hint, "--lora-rank must be at least 0 (got %d)", spec->rank);
    if (L > LORA_MAX_LAYERS) fatal(hint, "models with more than %d layers are not supported", LORA_MAX_LAYERS);
    *n_out = 0;
    if (spec->rank == 0) { // BitFit: no adapter, only the base slices of spec.bias
        if (spec->dora) fatal("give --lora-rank 1 or more with --dora", "--dora with --lora-rank 0: BitFit has no adapter to decompose");
        if (spec->bias != LORA_BIAS_ALL) fatal("add --lora-bias all (BitFit: every bias)", "--lora-rank 0 makes no adapter, and only --lora-bias all gives it something to train");
        return NULL;
    }
    if (!(spec->dropout >= 0.0f && spec->dropout < 1.0f)) fatal(hint, "--lora-dropout must be in [0, 1) (got %g)", spec->dropout);
    if (!spec->targets) fatal(hint, "no LoRA target layers");
    int nl = 0;
    for (int l = 0; l < L; l++) nl += spec->layers[l] != 0;
    if (!nl) fatal(hint, "--lora-layers selects no layer of the model (it has %d)", L);
    ParamTable pt;
    params_build(&pt, cfg);
    LoraAdapter* ad = (LoraAdapter*)callocCheck((size_t)L * LINEAR_PER_BLOCK, sizeof(LoraAdapter));
    int n = 0;
    const unsigned qkv_bits = (spec->targets >> 1) & 7u; // q, k, v -> blocks 1, 2, 4
    if (spec->dora && lora_init_rewrites_base(spec->init))
        fatal("use --init default or gaussian with --dora", "--dora with --init %s: the adapter PEFT writes for a rewritten base (a plain LoRA of rank 2r) has no DoRA form",
              LORA_INIT_NAMES[spec->init]);
    if (spec->dora && qkv_bits)
        fatal("with --dora, target the whole c_attn (--lora-targets c_attn,...)",
              "--dora with a q/k/v split of c_attn: DoRA's magnitude covers every output row of the fused layer, so the split is not separate adapters any more");
    const unsigned want[LINEAR_PER_BLOCK] = {(spec->targets & LORA_T_CATTN) | qkv_bits, spec->targets & LORA_T_ATTPROJ,
                                             spec->targets & LORA_T_FC, spec->targets & LORA_T_FCPROJ};
    for (int l = 0; l < L; l++) {
        if (!spec->layers[l]) continue;
        for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
            if (!want[k]) continue;
            LoraAdapter* a = &ad[n++];
            a->lin = k; a->wid = linear_weight_id(k); a->layer = l;
            a->blocks = k == LINEAR_QKV ? qkv_bits : 0;
            a->out = (int)pt.t[a->wid].rows;
            a->in = (int)pt.t[a->wid].cols;
            int nb = 0;
            for (int j = 0; j < 3; j++) nb += (a->blocks >> j) & 1;
            a->rank = spec->rank * (a->blocks ? nb : 1);
            a->scaling = lora_scaling(spec->alpha, spec->rank, spec->rslora);
            // exported alpha: the one that gives the same scaling at the stacked rank
            a->alpha = spec->rslora ? a->scaling * sqrtf((float)a->rank) : a->scaling * (float)a->rank;
            if (a->rank == spec->rank) a->alpha = spec->alpha;
        }
    }
    *n_out = n;
    return ad;
}

LoraModel* lora_create(const GPT2Config* cfg, const LoraSpec* spec) {
    int n;
    LoraAdapter* ad = lora_adapters_for(cfg, spec, &n);
    return lora_from_adapters(cfg, spec, ad, n);
}

LoraModel* lora_layout(const GPT2Config* cfg, const LoraSpec* spec) {
    int n;
    LoraAdapter* ad = lora_adapters_for(cfg, spec, &n);
    return lora_structure(cfg, spec, ad, n);
}

void lora_free(LoraModel* lm) {
    if (!lm) return;
    if (lm->params) ops_free(lm->params); // (NULL: a layout, lora_layout)
    if (lm->grads) ops_free(lm->grads);
    if (lm->masks) ops_free(lm->masks);
    if (lm->norms) ops_free(lm->norms);
    free(lm->norm_ready);
    free(lm->ad);
    free(lm->extra);
    free(lm->extra_host);
    free(lm->init0);
    free(lm);
}

void lora_init_params(LoraModel* lm, uint64_t seed) {
    float* host = (float*)callocCheck(lm->total, sizeof(float));
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        // kaiming_uniform_(a=sqrt(5)) on [rank, in]: bound = sqrt(6 / ((1 + 5) in)) = 1 / sqrt(in)
        double bound = 1.0 / sqrt((double)a->in);
        uint64_t stream = RNG_STREAM_INIT + (uint64_t)a->layer * LINEAR_PER_BLOCK + (uint64_t)a->lin;
        size_t na = (size_t)a->rank * a->in;
        for (size_t j = 0; j < na; j++) host[a->a_off + j] = (float)((2.0 * rand_uniform(seed, stream, j) - 1.0) * bound);
    }
    ops_upload_f32(lm->params, host, lm->total);
    free(host);
}

void lora_get_params(const LoraModel* lm, float* host) { ops_download_f32(host, lm->params, lm->total); }
void lora_set_params(LoraModel* lm, const float* host) { ops_upload_f32(lm->params, host, lm->total); }
void lora_get_grads(const LoraModel* lm, float* host) { ops_download_f32(host, lm->grads, lm->total); }

LinearAdapter lora_linear_adapter(const LoraModel* lm, int i) {
    const LoraAdapter* a = &lm->ad[i];
    LinearAdapter v;
    memset(&v, 0, sizeof(v));
    v.rank = a->rank;
    v.scaling = a->scaling;
    v.A = lm->params + a->a_off;
    v.B = lm->params + a->b_off;
    v.dA = lm->grads + a->a_off;
    v.dB = lm->grads + a->b_off;
    v.b_mask = a->b_mask;
    if (lm->spec.dora) {
        v.m = lm->params + a->m_off;
        v.dm = lm->grads + a->m_off;
        v.norm = lm->norms + a->norm_off;
        v.norm_ready = &lm->norm_ready[i];
    }
    v.stream = (uint32_t)(a->layer * LINEAR_PER_BLOCK + a->lin);
    return v;
}

// ----------------------------------------------------------------------------
// the report

void lora_split_name(unsigned blocks, char* out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int j = 0; j < 3 && n + 3 <= cap; j++)
        if ((blocks >> j) & 1) n += (size_t)snprintf(out + n, cap - n, "%s%c", n ? "," : "", "qkv"[j]);
}

// The adapted modules: "q,v,mlp.c_fc", "c_attn,attn.c_proj", "all-linear".
static void describe_targets(const LoraModel* lm, char* out, size_t cap) {
    unsigned lins = 0, blocks = 0;
    for (int i = 0; i < lm->n; i++) { lins |= 1u << lm->ad[i].lin; blocks |= lm->ad[i].blocks; }
    if (lins == (1u << LINEAR_PER_BLOCK) - 1 && !blocks) { snprintf(out, cap, "all-linear"); return; }
    lora_split_name(blocks, out, cap);
    for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
        if (!((lins >> k) & 1) || (k == LINEAR_QKV && blocks)) continue;
        const size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%s", n ? "," : "", k == LINEAR_QKV ? "c_attn" : LIN_MODULE[k]);
    }
}

// The adapted layers: "all", or ranges "0-5,8".
static void describe_layers(const LoraModel* lm, char* out, size_t cap) {
    const int L = lm->cfg.num_layers;
    const unsigned char* on = lm->spec.layers;
    if (lm->spec.all_layers) { snprintf(out, cap, "all"); return; }
    out[0] = '\0';
    for (int l = 0; l < L; l++) {
        if (!on[l] || (l > 0 && on[l - 1])) continue;
        int e = l;
        while (e + 1 < L && on[e + 1]) e++;
        const size_t n = strlen(out);
        if (e > l) snprintf(out + n, cap - n, "%s%d-%d", n ? "," : "", l, e);
        else snprintf(out + n, cap - n, "%s%d", n ? "," : "", l);
    }
}

// The adapters whose rank (per q/k/v block) or scaling differ from r and alpha (a loaded
// adapter's rank_pattern / alpha_pattern): " | h.3.attn.c_attn r=16 scaling=2".
static void describe_patterns(const LoraModel* lm, char* out, size_t cap) {
    const LoraSpec* s = &lm->spec;
    const float scaling = lora_scaling(s->alpha, s->rank, s->rslora);
    out[0] = '\0';
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        int nb = 0;
        for (int j = 0; j < 3; j++) nb += (a->blocks >> j) & 1;
        const int r = a->blocks ? a->rank / nb : a->rank;
        if (r == s->rank && fabsf(a->scaling - scaling) <= 1e-6f * scaling) continue;
        const size_t n = strlen(out);
        snprintf(out + n, cap - n, " | h.%d.%s r=%d scaling=%g", a->layer, LIN_MODULE[a->lin], r, a->scaling);
    }
}

void lora_describe(const LoraModel* lm, char* out, size_t cap) {
    const LoraSpec* s = &lm->spec;
    if (lora_is_bitfit(lm)) { snprintf(out, cap, "BitFit: no adapter | biases trained%s", s->train_ln_f ? " | ln_f trained" : ""); return; }
    char targets[64], layers[LORA_MAX_LAYERS * 5], patterns[512];
    describe_targets(lm, targets, sizeof(targets));
    describe_layers(lm, layers, sizeof(layers));
    describe_patterns(lm, patterns, sizeof(patterns));
    char init[32] = "";
    if (s->init != LORA_INIT_DEFAULT) snprintf(init, sizeof(init), " | init %s", LORA_INIT_NAMES[s->init]);
    snprintf(out, cap, "r=%d alpha=%g%s%s dropout=%g | targets %s | layers %s%s%s%s%s", s->rank, s->alpha, s->rslora ? " (rsLoRA)" : "", s->dora ? " DoRA" : "",
             s->dropout, targets, layers, patterns, init,
             s->bias == LORA_BIAS_ALL ? " | biases trained" : s->bias == LORA_BIAS_LORA_ONLY ? " | biases of adapted layers trained" : "",
             s->train_ln_f ? " | ln_f trained" : "");
}

// ----------------------------------------------------------------------------
// trained base slices, optimizer, merge

unsigned lora_base_trainable_mask(const LoraModel* lm) {
    unsigned mask = 0;
    for (int i = 0; i < lm->n_extra; i++) mask |= 1u << lm->extra[i].id;
    return mask;
}

void lora_put_base_values(LoraModel* lm) {
    if (!lm->extra_host) return;
    size_t off = 0;
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        if (!e->p) fatal("this is a bug in llmc", "lora_put_base_values before the base slice %s is bound", e->key);
        ops_upload_f32(e->p, lm->extra_host + off, extra_numel(lm, e));
        off += extra_numel(lm, e);
    }
    free(lm->extra_host);
    lm->extra_host = NULL;
}

size_t lora_trainable_numel(const LoraModel* lm) {
    size_t n = lm->total;
    for (int i = 0; i < lm->n_extra; i++) n += extra_numel(lm, &lm->extra[i]);
    return n;
}

size_t lora_scratch_numel(const LoraModel* lm, size_t rows) {
    int max_in = 0, max_r = 0, max_out = 0;
    for (int i = 0; i < lm->n; i++) {
        if (lm->ad[i].in > max_in) max_in = lm->ad[i].in;
        if (lm->ad[i].rank > max_r) max_r = lm->ad[i].rank;
        if (lm->ad[i].out > max_out) max_out = lm->ad[i].out;
    }
    return lm->n ? linear_adapter_scratch_numel(rows, max_in, max_r, lm->spec.dora ? max_out : 0, lm->spec.dropout > 0.0f) : 0;
}
size_t lora_scratch_bytes(const LoraModel* lm, size_t rows) { return lora_scratch_numel(lm, rows) * sizeof(floatX); }

int lora_is_bitfit(const LoraModel* lm) { return lm->n == 0; }

int lora_max_segments(const LoraModel* lm) { return 1 + 2 * lm->n + lm->n_extra; }

// One decayed segment of the flat adapter buffers: n elements from off.
static void adapter_segment(const LoraModel* lm, TrainSeg* s, const char* name, size_t off, size_t n, float lr_scale) {
    s->name = name; s->p = lm->params + off; s->g = lm->grads + off; s->n = n;
    s->weight_decay = 1; s->lr_scale = lr_scale;
}

// The adapters' segments: one over the whole buffer, or with LoRA+ A and B of each adapter apart
// (the same elements in the same order: the optimizer state's layout does not change with it).
static int adapter_segments(const LoraModel* lm, TrainSeg* segs) {
    if (!lm->total) return 0; // (BitFit: no adapter)
    if (lm->plus_ratio == 1.0f) { adapter_segment(lm, &segs[0], "lora", 0, lm->total, 1.0f); return 1; }
    int n = 0;
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        adapter_segment(lm, &segs[n++], "lora_A", a->a_off, (size_t)a->rank * a->in, 1.0f);
        // (DoRA's magnitude follows B: 1-D, it is in B's group, as PEFT's create_loraplus_optimizer puts it)
        adapter_segment(lm, &segs[n++], "lora_B", a->b_off, (size_t)a->out * a->rank + (lm->spec.dora ? (size_t)a->out : 0), lm->plus_ratio);
    }
    return n;
}

int lora_segments(const LoraModel* lm, TrainSeg* segs) {
    memset(segs, 0, sizeof(TrainSeg) * (size_t)lora_max_segments(lm));
    int n = adapter_segments(lm, segs);
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        if (!e->p || !e->g) fatal("this is a bug in llmc", "trained base slice %s has no parameters or gradient in the model", e->key);
        segs[n].name = lm->pt.t[e->id].name;
        segs[n].p = e->p;
        segs[n].g = e->g;
        segs[n].n = extra_numel(lm, e);
        segs[n].weight_decay = 0;
        segs[n].lr_scale = lm->plus_ratio; // (1-D: PEFT's LoRA+ puts it in B's group)
        n++;
    }
    return n;
}

void lora_merge(const LoraModel* lm, const ParamTable* pt, float* host_params) {
    float* host = (float*)mallocCheck((lm->total ? lm->total : 1) * sizeof(float));
    lora_get_params(lm, host);
    lora_merge_host(lm, pt, host_params, host, 1.0f);
    free(host);
}

// Row o of adapter a's weight (wrow) += coef * (B A)[o, :], from the values host (flat layout).
static void add_ba_row(const LoraAdapter* a, const float* host, float coef, int o, float* wrow) {
    const float* A = host + a->a_off;
    const float* Bm = host + a->b_off;
    for (int j = 0; j < a->rank; j++) {
        const float bj = coef * Bm[(size_t)o * a->rank + j];
        if (bj == 0.0f) continue;
        const float* arow = A + (size_t)j * a->in;
        for (int c = 0; c < a->in; c++) wrow[c] += bj * arow[c];
    }
}

// W [out, in] += sign scaling B A, or with DoRA W = (m / ||W + scaling B A||_row) (W + scaling B A).
static void merge_adapter(const LoraAdapter* a, float* W, const float* host, float sign, int dora) {
    #pragma omp parallel for
    for (int o = 0; o < a->out; o++) {
        float* wrow = W + (size_t)o * a->in;
        add_ba_row(a, host, sign * a->scaling, o, wrow);
        if (!dora) continue;
        double ss = 0.0;
        for (int c = 0; c < a->in; c++) ss += (double)wrow[c] * wrow[c];
        const float g = (float)(host[a->m_off + o] / sqrt(ss));
        for (int c = 0; c < a->in; c++) wrow[c] *= g;
    }
}

void lora_merge_host(const LoraModel* lm, const ParamTable* pt, float* host_params, const float* host, float sign) {
    if (lm->spec.dora && sign != 1.0f) fatal("this is a bug in llmc", "a DoRA adapter cannot be subtracted from its base");
    for (int i = 0; i < lm->n; i++)
        merge_adapter(&lm->ad[i], host_params + params_layer_offset(pt, lm->ad[i].wid, lm->ad[i].layer), host, sign, lm->spec.dora);
}

void lora_dora_init(LoraModel* lm, LinearSet* lin) {
    if (!lm->spec.dora) return;
    float* h = (float*)mallocCheck(lm->norms_n * sizeof(float));
    for (int i = 0; i < lm->n; i++) linear_dora_norm(linear_at(lin, lm->ad[i].layer, lm->ad[i].lin));
    ops_to_host(h, lm->norms, lm->norms_n * sizeof(float));
    for (int i = 0; i < lm->n; i++) ops_upload_f32(lm->params + lm->ad[i].m_off, h + lm->ad[i].norm_off, (size_t)lm->ad[i].out);
    free(h);
}
