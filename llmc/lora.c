#include "lora.h"
#include "check.h"
#include "fileio.h"
#include "json.h"
#include "rand.h"
#include "safetensors.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// Module names as PEFT sees them (relative to a block), per LORA_LIN_*.
static const char* const LIN_MODULE[LORA_NUM_LIN] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
static const ParamId LIN_WID[LORA_NUM_LIN] = {PT_QKVW, PT_ATTPROJW, PT_FCW, PT_FCPROJW};
#define KEY_PREFIX "base_model.model.transformer.h."
#define RNG_STREAM_INIT 0x4C6F5241ull   // "LoRA": A init streams are this + adapter (layer, lin)
#define RNG_SEED_DROPOUT 0xD80F0D80Full

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

static float scaling_of(float alpha, int rank, int rslora) {
    return rslora ? alpha / sqrtf((float)rank) : alpha / (float)rank;
}

static const ParamId LIN_BIAS[LORA_NUM_LIN] = {PT_QKVB, PT_ATTPROJB, PT_FCB, PT_FCPROJB};

static void add_extra(LoraModel* lm, ParamId id, int layer, const char* key) {
    for (int i = 0; i < lm->n_extra; i++) if (lm->extra[i].id == id && lm->extra[i].layer == layer) return;
    LoraExtra* e = &lm->extra[lm->n_extra++];
    e->id = id; e->layer = layer;
    snprintf(e->key, sizeof(e->key), "%s", key);
}

// The bias of linear k in layer l, named as PEFT names it (base_layer when LoRA wraps it).
static void add_linear_bias(LoraModel* lm, int l, int k) {
    char key[160];
    snprintf(key, sizeof(key), KEY_PREFIX "%d.%s.%sbias", l, LIN_MODULE[k], lm->lookup[l][k] >= 0 ? "base_layer." : "");
    add_extra(lm, LIN_BIAS[k], l, key);
}

// Trained base slices of spec.bias / spec.train_ln_f, in PEFT's parameter order.
static void build_extras(LoraModel* lm) {
    const int L = lm->cfg.num_layers;
    lm->extra = (LoraExtra*)callocCheck((size_t)L * 6 + 3, sizeof(LoraExtra));
    char key[160];
    if (lm->spec.bias == LORA_BIAS_ALL) {
        for (int l = 0; l < L; l++) {
            snprintf(key, sizeof(key), KEY_PREFIX "%d.ln_1.bias", l);
            add_extra(lm, PT_LN1B, l, key);
            add_linear_bias(lm, l, LORA_LIN_QKV);
            add_linear_bias(lm, l, LORA_LIN_ATTPROJ);
            snprintf(key, sizeof(key), KEY_PREFIX "%d.ln_2.bias", l);
            add_extra(lm, PT_LN2B, l, key);
            add_linear_bias(lm, l, LORA_LIN_FC);
            add_linear_bias(lm, l, LORA_LIN_FCPROJ);
        }
    } else if (lm->spec.bias == LORA_BIAS_LORA_ONLY) {
        for (int i = 0; i < lm->n; i++) add_linear_bias(lm, lm->ad[i].layer, lm->ad[i].lin);
    }
    if (lm->spec.train_ln_f) add_extra(lm, PT_LNFW, -1, "base_model.model.transformer.ln_f.weight");
    if (lm->spec.bias == LORA_BIAS_ALL || lm->spec.train_ln_f) add_extra(lm, PT_LNFB, -1, "base_model.model.transformer.ln_f.bias");
}

static size_t extra_numel(const LoraModel* lm, const LoraExtra* e) { return params_layer_numel(&lm->pt, e->id); }
static size_t extra_offset(const LoraModel* lm, const LoraExtra* e) {
    return params_layer_offset(&lm->pt, e->id, e->layer < 0 ? 0 : e->layer);
}
// The slice in the model's memory (tensors are views: m->params need not hold every tensor).
static floatX* extra_ptr(const LoraModel* lm, const GPT2* m, const LoraExtra* e) {
    return m->p[e->id] + (extra_offset(lm, e) - lm->pt.t[e->id].offset);
}

// Find a trained base slice in a file. PEFT before the base_layer wrapping (< 0.7) saved the bias
// of a LoRA-wrapped linear as "...<module>.bias"; accept that spelling too.
static const StTensor* find_extra(const StFile* f, const LoraExtra* e, const char** name) {
    const StTensor* t = st_find(f, e->key);
    *name = e->key;
    const char* bl = strstr(e->key, ".base_layer.bias");
    if (!t && bl) {
        static char alt[160];
        snprintf(alt, sizeof(alt), "%.*s.bias", (int)(bl - e->key), e->key);
        t = st_find(f, alt);
        if (t) *name = alt;
    }
    return t;
}

unsigned lora_base_trainable_mask(const LoraModel* lm) {
    unsigned mask = 0;
    for (int i = 0; i < lm->n_extra; i++) mask |= 1u << lm->extra[i].id;
    return mask;
}

void lora_attach(LoraModel* lm, GPT2* m) {
    m->lora = lm;
    lora_alloc_scratch(lm, m->B * m->T);
    if (lm->extra_host) {
        size_t off = 0;
        for (int i = 0; i < lm->n_extra; i++) {
            size_t n = extra_numel(lm, &lm->extra[i]);
            ops_upload_f32(extra_ptr(lm, m, &lm->extra[i]), lm->extra_host + off, n);
            off += n;
        }
        free(lm->extra_host);
        lm->extra_host = NULL;
    }
}

int lora_segments(const LoraModel* lm, GPT2* m, TrainSeg* segs) {
    int n = 0;
    memset(segs, 0, sizeof(TrainSeg) * (size_t)(1 + lm->n_extra));
    segs[n].name = "lora"; segs[n].p = lm->params; segs[n].g = lm->grads; segs[n].n = lm->total; segs[n].weight_decay = 1;
    n++;
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        size_t in_tensor = extra_offset(lm, e) - lm->pt.t[e->id].offset;
        if (!m->g[e->id]) fatal("this is a bug in llmc", "trained base tensor %s has no gradient (gpt2_init mask)", lm->pt.t[e->id].name);
        segs[n].name = lm->pt.t[e->id].name;
        segs[n].p = m->p[e->id] + in_tensor;
        segs[n].g = m->g[e->id] + in_tensor;
        segs[n].n = extra_numel(lm, e);
        segs[n].weight_decay = 0;
        n++;
    }
    return n;
}

// Lay out adapters (wid/lin/layer/in/out/rank/scaling/alpha/blocks already set) and allocate.
static LoraModel* lm_build(const GPT2Config* cfg, const LoraSpec* spec, LoraAdapter* ad, int n) {
    LoraModel* lm = (LoraModel*)callocCheck(1, sizeof(LoraModel));
    lm->cfg = *cfg;
    params_build(&lm->pt, cfg);
    lm->spec = *spec;
    lm->n = n;
    lm->ad = ad;
    for (int l = 0; l < LORA_MAX_LAYERS; l++) for (int k = 0; k < LORA_NUM_LIN; k++) lm->lookup[l][k] = -1;
    size_t off = 0, moff = 0, zeros = 0;
    for (int i = 0; i < n; i++) {
        LoraAdapter* a = &ad[i];
        lm->lookup[a->layer][a->lin] = i;
        a->a_off = off; off += (size_t)a->rank * a->in;
        a->b_off = off; off += (size_t)a->out * a->rank;
        if (a->blocks) {
            moff += (size_t)a->out * a->rank;
            // each B row of a targeted block keeps r of the nb*r columns; the untargeted rows none
            zeros += (size_t)a->out * a->rank - (size_t)(a->out / 3) * a->rank;
        }
    }
    lm->total = off;
    lm->n_trainable = off - zeros;
    lm->params = (floatX*)ops_alloc(off * sizeof(floatX));
    lm->grads = (floatX*)ops_alloc(off * sizeof(floatX));
    ops_zero(lm->params, off * sizeof(floatX));
    ops_zero(lm->grads, off * sizeof(floatX));
    if (moff) {
        // Masks of the split adapters: B[o, j] is a parameter iff output row o lies in the block
        // that rank column j belongs to.
        lm->masks = (floatX*)ops_alloc(moff * sizeof(floatX));
        float* hm = (float*)mallocCheck(moff * sizeof(float));
        size_t mo = 0;
        for (int i = 0; i < n; i++) {
            LoraAdapter* a = &ad[i];
            if (!a->blocks) continue;
            int C = a->out / 3, nb = 0, col_block[3] = {0, 0, 0};
            for (int j = 0; j < 3; j++) if ((a->blocks >> j) & 1) col_block[nb++] = j;
            int r = a->rank / nb;
            for (int o = 0; o < a->out; o++)
                for (int j = 0; j < a->rank; j++)
                    hm[mo + (size_t)o * a->rank + j] = (o / C == col_block[j / r]) ? 1.0f : 0.0f;
            a->b_mask = lm->masks + mo;
            mo += (size_t)a->out * a->rank;
        }
        ops_upload_f32(lm->masks, hm, moff);
        free(hm);
    }
    lm->dropout = spec->dropout;
    build_extras(lm);
    return lm;
}

LoraModel* lora_create(const GPT2Config* cfg, const LoraSpec* spec) {
    const char* hint = "check the --lora-* flags (run with --help)";
    const int L = cfg->num_layers, C = cfg->channels;
    if (spec->rank < 1) fatal(hint, "--lora-rank must be at least 1 (got %d)", spec->rank);
    if (!(spec->dropout >= 0.0f && spec->dropout < 1.0f)) fatal(hint, "--lora-dropout must be in [0, 1) (got %g)", spec->dropout);
    if (!spec->targets) fatal(hint, "no LoRA target layers");
    if (L > LORA_MAX_LAYERS) fatal(hint, "models with more than %d layers are not supported", LORA_MAX_LAYERS);
    int nl = 0;
    for (int l = 0; l < L; l++) nl += spec->layers[l] != 0;
    if (!nl) fatal(hint, "--lora-layers selects no layer of the model (it has %d)", L);
    LoraAdapter* ad = (LoraAdapter*)callocCheck((size_t)L * LORA_NUM_LIN, sizeof(LoraAdapter));
    int n = 0;
    unsigned qkv_bits = (spec->targets >> 1) & 7u; // q, k, v -> blocks 1, 2, 4
    for (int l = 0; l < L; l++) {
        if (!spec->layers[l]) continue;
        for (int k = 0; k < LORA_NUM_LIN; k++) {
            unsigned blocks = 0;
            int want = 0;
            switch (k) {
            case LORA_LIN_QKV: want = (spec->targets & LORA_T_CATTN) || qkv_bits; blocks = qkv_bits; break;
            case LORA_LIN_ATTPROJ: want = (spec->targets & LORA_T_ATTPROJ) != 0; break;
            case LORA_LIN_FC: want = (spec->targets & LORA_T_FC) != 0; break;
            case LORA_LIN_FCPROJ: want = (spec->targets & LORA_T_FCPROJ) != 0; break;
            }
            if (!want) continue;
            LoraAdapter* a = &ad[n++];
            a->lin = k; a->wid = LIN_WID[k]; a->layer = l; a->blocks = blocks;
            a->out = k == LORA_LIN_QKV ? 3 * C : k == LORA_LIN_FC ? 4 * C : C;
            a->in = k == LORA_LIN_FCPROJ ? 4 * C : C;
            int nb = 0;
            for (int j = 0; j < 3; j++) nb += (blocks >> j) & 1;
            a->rank = spec->rank * (blocks ? nb : 1);
            a->scaling = scaling_of(spec->alpha, spec->rank, spec->rslora);
            // exported alpha: the one that gives the same scaling at the stacked rank
            a->alpha = spec->rslora ? a->scaling * sqrtf((float)a->rank) : a->scaling * (float)a->rank;
            if (a->rank == spec->rank) a->alpha = spec->alpha;
        }
    }
    return lm_build(cfg, spec, ad, n);
}

void lora_free(LoraModel* lm) {
    if (!lm) return;
    ops_free(lm->params);
    ops_free(lm->grads);
    if (lm->masks) ops_free(lm->masks);
    if (lm->xd) { ops_free(lm->xd); ops_free(lm->h); ops_free(lm->dh); ops_free(lm->tmp); }
    free(lm->ad);
    free(lm->extra);
    free(lm->extra_host);
    free(lm);
}

void lora_init_params(LoraModel* lm, uint64_t seed) {
    float* host = (float*)callocCheck(lm->total, sizeof(float));
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        // kaiming_uniform_(a=sqrt(5)) on [rank, in]: bound = sqrt(6 / ((1 + 5) in)) = 1 / sqrt(in)
        double bound = 1.0 / sqrt((double)a->in);
        uint64_t stream = RNG_STREAM_INIT + (uint64_t)a->layer * LORA_NUM_LIN + (uint64_t)a->lin;
        size_t na = (size_t)a->rank * a->in;
        for (size_t j = 0; j < na; j++) host[a->a_off + j] = (float)((2.0 * rand_uniform(seed, stream, j) - 1.0) * bound);
    }
    ops_upload_f32(lm->params, host, lm->total);
    free(host);
}

void lora_alloc_scratch(LoraModel* lm, int N) {
    if (lm->xd && lm->scratch_N >= N) return;
    if (lm->xd) { ops_free(lm->xd); ops_free(lm->h); ops_free(lm->dh); ops_free(lm->tmp); }
    int max_in = 0, max_r = 0, max_io = 0;
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        if (a->in > max_in) max_in = a->in;
        if (a->rank > max_r) max_r = a->rank;
        if (a->in > max_io) max_io = a->in;
        if (a->out > max_io) max_io = a->out;
    }
    size_t X = sizeof(floatX);
    // the dropped input is only needed with dropout; keep a token allocation otherwise
    lm->xd = (floatX*)ops_alloc((lm->dropout > 0.0f ? (size_t)N * max_in : 1) * X);
    lm->h = (floatX*)ops_alloc((size_t)N * max_r * X);
    lm->dh = (floatX*)ops_alloc((size_t)N * max_r * X);
    lm->tmp = (floatX*)ops_alloc((size_t)N * max_io * X);
    lm->scratch_N = N;
}

void lora_zero_grads(LoraModel* lm) { ops_zero(lm->grads, lm->total * sizeof(floatX)); }
void lora_get_params(const LoraModel* lm, float* host) { ops_download_f32(host, lm->params, lm->total); }
void lora_set_params(LoraModel* lm, const float* host) { ops_upload_f32(lm->params, host, lm->total); }
void lora_get_grads(const LoraModel* lm, float* host) { ops_download_f32(host, lm->grads, lm->total); }

// ----------------------------------------------------------------------------
// forward / backward of the LoRA branch

int lora_has(const LoraModel* lm, int lin, int layer) {
    return lm && layer < LORA_MAX_LAYERS && lm->lookup[layer][lin] >= 0;
}

// The input of the LoRA branch: inp itself, or its dropped-out copy in lm->xd.
// The mask's RNG stream: (training tick, adapter's (layer, linear)); 4 * 256 layers < 2^12.
static uint64_t dropout_stream(const LoraModel* lm, const LoraAdapter* a) {
    return (lm->tick << 12) | (uint64_t)(a->layer * LORA_NUM_LIN + a->lin);
}

static const floatX* branch_input(LoraModel* lm, const LoraAdapter* a, const floatX* inp, int N) {
    if (!(lm->train_mode && lm->dropout > 0.0f)) return inp;
    dropout_forward(lm->xd, inp, (size_t)N * a->in, lm->dropout, lm->dropout_seed ^ RNG_SEED_DROPOUT, dropout_stream(lm, a));
    return lm->xd;
}

void lora_linear_forward(LoraModel* lm, int lin, int layer, floatX* out, const floatX* inp, int N) {
    if (!lora_has(lm, lin, layer)) return;
    int idx = lm->lookup[layer][lin];
    const LoraAdapter* a = &lm->ad[idx];
    if (N > lm->scratch_N) fatal("this is a bug in llmc", "LoRA scratch for %d rows used with %d", lm->scratch_N, N);
    const floatX* x = branch_input(lm, a, inp, N);
    // h = scaling * x A^T (N x rank); out += h B^T. Only N x rank intermediates besides tmp.
    matmul_forward(lm->h, NULL, x, lm->params + a->a_off, NULL, N, a->in, a->rank);
    scale_copy(lm->h, lm->h, a->scaling, (size_t)N * a->rank);
    matmul_forward(lm->tmp, NULL, lm->h, lm->params + a->b_off, NULL, N, a->rank, a->out);
    add_inplace(out, lm->tmp, (size_t)N * a->out);
}

void lora_linear_backward(LoraModel* lm, int lin, int layer, floatX* dinp, const floatX* dout,
                          const floatX* inp, int N) {
    if (!lora_has(lm, lin, layer)) return;
    int idx = lm->lookup[layer][lin];
    const LoraAdapter* a = &lm->ad[idx];
    const floatX* A = lm->params + a->a_off;
    const floatX* Bw = lm->params + a->b_off;
    floatX* dA = lm->grads + a->a_off;
    floatX* dB = lm->grads + a->b_off;
    const size_t Nr = (size_t)N * a->rank, X = sizeof(floatX);
    // Recompute h = scaling * drop(x) A^T (cheaper than keeping it per layer; the dropout mask
    // is regenerated from the counter RNG, so it is the forward's mask exactly).
    const floatX* x = branch_input(lm, a, inp, N);
    matmul_forward(lm->h, NULL, x, A, NULL, N, a->in, a->rank);
    scale_copy(lm->h, lm->h, a->scaling, Nr);
    // out = h B^T: dB += dout^T h, dh = dout B
    ops_zero(lm->dh, Nr * X);
    matmul_backward(lm->dh, dB, NULL, dout, lm->h, Bw, N, a->rank, a->out);
    if (a->b_mask) mul_inplace(dB, a->b_mask, (size_t)a->out * a->rank);
    // h = scaling * x A^T: dA += scaling dh^T x, dx += scaling dh A
    scale_copy(lm->dh, lm->dh, a->scaling, Nr);
    if (x == inp) {
        matmul_backward(dinp, dA, NULL, lm->dh, x, A, N, a->in, a->rank);
    } else {
        size_t nx = (size_t)N * a->in;
        ops_zero(lm->tmp, nx * X);
        matmul_backward(lm->tmp, dA, NULL, lm->dh, x, A, N, a->in, a->rank);
        // d/dx of drop(x) is the same mask and scale
        dropout_forward(lm->tmp, lm->tmp, nx, lm->dropout, lm->dropout_seed ^ RNG_SEED_DROPOUT, dropout_stream(lm, a));
        add_inplace(dinp, lm->tmp, nx);
    }
}

// ----------------------------------------------------------------------------
// tensors on disk

static void key_of(char* out, size_t cap, const LoraAdapter* a, char which) {
    snprintf(out, cap, KEY_PREFIX "%d.%s.lora_%c.weight", a->layer, LIN_MODULE[a->lin], which);
}

void lora_save_tensors(const LoraModel* lm, const GPT2* m, const char* path) {
    float* host = (float*)mallocCheck((lm->total ? lm->total : 1) * sizeof(float));
    lora_get_params(lm, host);
    size_t ne = 0;
    for (int i = 0; i < lm->n_extra; i++) ne += extra_numel(lm, &lm->extra[i]);
    float* ehost = (float*)mallocCheck((ne ? ne : 1) * sizeof(float));
    if (lm->n_extra && !m) fatal("this is a bug in llmc", "lora_save_tensors without the model holding the trained base tensors");
    StWriter w;
    st_writer_init(&w);
    // PEFT's order: the trained base slices interleave with the adapters by module name; the
    // order in the file does not matter to any reader, so they simply go first.
    for (int i = 0, off = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        size_t n = extra_numel(lm, e);
        ops_download_f32(ehost + off, extra_ptr(lm, m, e), n);
        int64_t shape[1] = {(int64_t)n};
        st_writer_add(&w, e->key, ST_F32, 1, shape, ehost + off);
        off += (int)n;
    }
    char (*keys)[160] = (char(*)[160])mallocCheck((size_t)lm->n * 2 * 160);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        int64_t sa[2] = {a->rank, a->in}, sb[2] = {a->out, a->rank};
        key_of(keys[2 * i], 160, a, 'A');
        key_of(keys[2 * i + 1], 160, a, 'B');
        st_writer_add(&w, keys[2 * i], ST_F32, 2, sa, host + a->a_off);
        st_writer_add(&w, keys[2 * i + 1], ST_F32, 2, sb, host + a->b_off);
    }
    st_writer_save(&w, path);
    st_writer_free(&w);
    free(keys);
    free(host);
    free(ehost);
}

void lora_load_tensors(LoraModel* lm, GPT2* m, const char* path) {
    StFile f;
    st_open(&f, path);
    const char* hint = "resume with the same --lora-* flags as the run that wrote the checkpoint";
    float* host = (float*)callocCheck(lm->total ? lm->total : 1, sizeof(float));
    int found = 0;
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        for (int w = 0; w < 2; w++) {
            char key[160];
            key_of(key, sizeof(key), a, w ? 'B' : 'A');
            const StTensor* t = st_find(&f, key);
            if (!t) fatal(hint, "'%s': adapter tensor '%s' is missing", path, key);
            int64_t r0 = w ? a->out : a->rank, r1 = w ? a->rank : a->in;
            if (t->ndim != 2 || t->shape[0] != r0 || t->shape[1] != r1)
                fatal(hint, "'%s': tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", path, key,
                      (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)r0, (long long)r1);
            st_read_f32(&f, t, host + (w ? a->b_off : a->a_off));
            found++;
        }
    }
    for (int i = 0; i < lm->n_extra; i++) {
        const LoraExtra* e = &lm->extra[i];
        const char* tname;
        const StTensor* t = find_extra(&f, e, &tname);
        size_t n = extra_numel(lm, e);
        if (!t) fatal(hint, "'%s': trained base tensor '%s' is missing", path, e->key);
        if (t->numel != n || t->ndim != 1) fatal(hint, "'%s': tensor '%s' has %llu elements, expected %zu", path, e->key, (unsigned long long)t->numel, n);
        if (!m) fatal("this is a bug in llmc", "lora_load_tensors without the model for the trained base tensors");
        float* tmp = (float*)mallocCheck(n * sizeof(float));
        st_read_f32(&f, t, tmp);
        ops_upload_f32(extra_ptr(lm, m, e), tmp, n);
        free(tmp);
        found++;
    }
    if (found != f.n_tensors)
        fatal(hint, "'%s' holds %d tensors; this run's adapters have %d", path, f.n_tensors, found);
    lora_set_params(lm, host);
    free(host);
    st_close(&f);
}

static int is_integral(double x) { return x == floor(x) && fabs(x) < 1e9; }

static void jw_number(JsonWriter* w, double x) {
    if (is_integral(x)) jw_int(w, (int64_t)x); else jw_double(w, x);
}

void lora_save_peft(const LoraModel* lm, const GPT2* m, const char* dir) {
    mkdir_p(dir);
    char path[LLMC_PATH_MAX];
    path_join(path, sizeof(path), dir, "adapter_model.safetensors");
    lora_save_tensors(lm, m, path);

    const LoraSpec* s = &lm->spec;
    unsigned lins = 0;
    for (int i = 0; i < lm->n; i++) lins |= 1u << lm->ad[i].lin;
    JsonWriter w;
    jw_init(&w, 1);
    jw_begin_object(&w);
    jw_key(&w, "peft_type"); jw_string(&w, "LORA");
    jw_key(&w, "task_type"); jw_string(&w, "CAUSAL_LM");
    jw_key(&w, "r"); jw_int(&w, s->rank);
    jw_key(&w, "lora_alpha"); jw_number(&w, s->alpha);
    jw_key(&w, "lora_dropout"); jw_double(&w, s->dropout);
    jw_key(&w, "target_modules"); jw_begin_array(&w);
    if (lins & (1u << LORA_LIN_QKV)) jw_string(&w, "c_attn");
    if ((lins & (1u << LORA_LIN_ATTPROJ)) && (lins & (1u << LORA_LIN_FCPROJ))) jw_string(&w, "c_proj");
    else if (lins & (1u << LORA_LIN_ATTPROJ)) jw_string(&w, "attn.c_proj");
    else if (lins & (1u << LORA_LIN_FCPROJ)) jw_string(&w, "mlp.c_proj");
    if (lins & (1u << LORA_LIN_FC)) jw_string(&w, "c_fc");
    jw_end_array(&w);
    jw_key(&w, "fan_in_fan_out"); jw_bool(&w, 1);
    jw_key(&w, "bias"); jw_string(&w, s->bias == LORA_BIAS_ALL ? "all" : s->bias == LORA_BIAS_LORA_ONLY ? "lora_only" : "none");
    jw_key(&w, "use_rslora"); jw_bool(&w, s->rslora);
    jw_key(&w, "use_dora"); jw_bool(&w, 0);
    jw_key(&w, "modules_to_save");
    if (s->train_ln_f) { jw_begin_array(&w); jw_string(&w, "ln_f"); jw_end_array(&w); } else jw_null(&w);
    jw_key(&w, "init_lora_weights"); jw_bool(&w, 1);
    jw_key(&w, "inference_mode"); jw_bool(&w, 1);
    jw_key(&w, "base_model_name_or_path"); jw_string(&w, lm->base_name);
    jw_key(&w, "revision"); jw_null(&w);
    jw_key(&w, "layers_to_transform");
    if (s->all_layers) jw_null(&w);
    else {
        jw_begin_array(&w);
        for (int l = 0; l < lm->cfg.num_layers; l++) if (s->layers[l]) jw_int(&w, l);
        jw_end_array(&w);
    }
    jw_key(&w, "layers_pattern");
    if (s->all_layers) jw_null(&w); else jw_string(&w, "h");
    // Adapters whose rank / alpha differ from the global ones (the stacked q/k/v split, or a
    // loaded adapter with patterns): by module when uniform across layers, else by layer.
    for (int pass = 0; pass < 2; pass++) {
        jw_key(&w, pass == 0 ? "rank_pattern" : "alpha_pattern");
        jw_begin_object(&w);
        for (int k = 0; k < LORA_NUM_LIN; k++) {
            int first = -1, uniform = 1, differs = 0;
            for (int i = 0; i < lm->n; i++) {
                const LoraAdapter* a = &lm->ad[i];
                if (a->lin != k) continue;
                double v = pass == 0 ? (double)a->rank : (double)a->alpha;
                double g = pass == 0 ? (double)s->rank : (double)s->alpha;
                if (v != g) differs = 1;
                if (first < 0) first = i;
                else if ((pass == 0 ? (double)lm->ad[first].rank : (double)lm->ad[first].alpha) != v) uniform = 0;
            }
            if (!differs) continue;
            for (int i = 0; i < lm->n; i++) {
                const LoraAdapter* a = &lm->ad[i];
                if (a->lin != k) continue;
                char key[128];
                if (uniform) snprintf(key, sizeof(key), "%s", LIN_MODULE[k]);
                else snprintf(key, sizeof(key), "transformer.h.%d.%s", a->layer, LIN_MODULE[k]);
                jw_key(&w, key);
                if (pass == 0) jw_int(&w, a->rank); else jw_number(&w, a->alpha);
                if (uniform) break;
            }
        }
        jw_end_object(&w);
    }
    jw_end_object(&w);
    jw_raw(&w, "\n", 1);
    path_join(path, sizeof(path), dir, "adapter_config.json");
    atomic_write_file(path, w.buf, w.len);
    jw_free(&w);
}

// ----------------------------------------------------------------------------
// loading PEFT adapters

#define LFAIL(...) do { snprintf(err, errcap, __VA_ARGS__); goto fail; } while (0)

static int ends_with_module(const char* name, const char* target) {
    // PEFT list semantics: the module's key equals the target or ends with "." + target
    size_t a = strlen(name), b = strlen(target);
    if (a == b) return !strcmp(name, target);
    return a > b && name[a - b - 1] == '.' && !strcmp(name + a - b, target);
}

// Value of a rank_pattern / alpha_pattern object for module "transformer.h.L.MOD": the first key
// matching (PEFT: re.match("(.*\.)?KEY$"), taken literally here). NULL if none.
static const JsonValue* pattern_lookup(const JsonValue* pat, const char* full) {
    if (!pat || pat->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < pat->n; i++)
        if (ends_with_module(full, pat->keys[i])) return &pat->items[i];
    return NULL;
}

LoraModel* lora_try_load_peft(const char* path, const GPT2Config* cfg, char* err, size_t errcap) {
    char dir[4096], cpath[LLMC_PATH_MAX], tpath[LLMC_PATH_MAX];
    JsonValue* js = NULL;
    char* text = NULL;
    StFile f;
    int f_open = 0;
    LoraAdapter* ad = NULL;
    float* host = NULL;
    LoraModel* lm = NULL;
    if (dir_exists(path)) snprintf(dir, sizeof(dir), "%s", path);
    else {
        snprintf(dir, sizeof(dir), "%s", path);
        char* slash = strrchr(dir, '/');
        if (slash) *slash = '\0'; else snprintf(dir, sizeof(dir), ".");
    }
    path_join(cpath, sizeof(cpath), dir, "adapter_config.json");
    if (dir_exists(path)) path_join(tpath, sizeof(tpath), dir, "adapter_model.safetensors");
    else snprintf(tpath, sizeof(tpath), "%s", path);
    if (!dir_exists(path) && !file_exists(path)) LFAIL("'%s' does not exist (expected an adapter directory with adapter_config.json and adapter_model.safetensors)", path);
    if (!file_exists(cpath)) LFAIL("'%s' does not exist: an adapter directory holds adapter_config.json and adapter_model.safetensors", cpath);
    if (!file_exists(tpath)) {
        char bin[LLMC_PATH_MAX];
        path_join(bin, sizeof(bin), dir, "adapter_model.bin");
        if (file_exists(bin)) LFAIL("'%s': pickled adapters are not supported; save it with safe_serialization=True", bin);
        LFAIL("'%s' does not exist", tpath);
    }
    size_t len;
    text = read_file_all(cpath, &len);
    char jerr[256];
    js = json_parse(text, len, jerr, sizeof(jerr));
    if (!js) LFAIL("'%s': %s", cpath, jerr);
    if (js->type != JSON_OBJECT) LFAIL("'%s': expected a JSON object", cpath);
    const char* pt = json_as_string(json_get(js, "peft_type"));
    if (pt && strcmp(pt, "LORA")) LFAIL("'%s': peft_type is \"%s\"; only LORA adapters are supported", cpath, pt);
    int r;
    double alpha, dropout = 0.0;
    if (!json_as_int(json_get(js, "r"), &r) || r < 1) LFAIL("'%s': key \"r\" must be a positive integer", cpath);
    if (!json_as_number(json_get(js, "lora_alpha"), &alpha)) LFAIL("'%s': key \"lora_alpha\" must be a number", cpath);
    if (json_get(js, "lora_dropout") && !json_as_number(json_get(js, "lora_dropout"), &dropout))
        LFAIL("'%s': key \"lora_dropout\" must be a number", cpath);
    int rslora = 0, dora = 0;
    if (json_get(js, "use_rslora") && !json_is_null(json_get(js, "use_rslora")) && !json_as_bool(json_get(js, "use_rslora"), &rslora))
        LFAIL("'%s': key \"use_rslora\" must be true or false", cpath);
    if (json_as_bool(json_get(js, "use_dora"), &dora) && dora) LFAIL("'%s': DoRA adapters (use_dora true) are not supported", cpath);
    const char* bias = json_as_string(json_get(js, "bias"));
    int bias_mode = LORA_BIAS_NONE, ln_f = 0;
    if (!bias || !strcmp(bias, "none")) bias_mode = LORA_BIAS_NONE;
    else if (!strcmp(bias, "all")) bias_mode = LORA_BIAS_ALL;
    else if (!strcmp(bias, "lora_only")) bias_mode = LORA_BIAS_LORA_ONLY;
    else LFAIL("'%s': bias \"%s\" is not one of \"none\", \"all\", \"lora_only\"", cpath, bias);
    const JsonValue* mts = json_get(js, "modules_to_save");
    if (mts && !json_is_null(mts)) {
        if (mts->type != JSON_ARRAY) LFAIL("'%s': modules_to_save must be null or a list", cpath);
        for (int i = 0; i < mts->n; i++) {
            const char* s = json_as_string(&mts->items[i]);
            if (s && (!strcmp(s, "ln_f") || !strcmp(s, "transformer.ln_f"))) ln_f = 1;
            else LFAIL("'%s': modules_to_save entry %s%s%s is not supported (only \"ln_f\")", cpath, s ? "\"" : "", s ? s : "(not a string)", s ? "\"" : "");
        }
    }
    const JsonValue* tm = json_get(js, "target_modules");
    if (!tm) LFAIL("'%s': key \"target_modules\" is missing", cpath);
    int all_linear = 0;
    if (tm->type == JSON_STRING) {
        if (!strcmp(tm->string, "all-linear")) all_linear = 1;
        else LFAIL("'%s': target_modules \"%s\" is a regular expression; only a list of module names or \"all-linear\" is supported", cpath, tm->string);
    } else if (tm->type == JSON_ARRAY) {
        for (int i = 0; i < tm->n; i++) {
            const char* s = json_as_string(&tm->items[i]);
            if (!s) LFAIL("'%s': target_modules[%d] is not a string", cpath, i);
            int known = 0;
            for (int l = 0; l < cfg->num_layers && !known; l++)
                for (int k = 0; k < LORA_NUM_LIN; k++) {
                    char full[128];
                    snprintf(full, sizeof(full), "transformer.h.%d.%s", l, LIN_MODULE[k]);
                    if (ends_with_module(full, s)) known = 1;
                }
            if (!known) LFAIL("'%s': unknown target module \"%s\" for GPT-2 (LoRA applies to c_attn, attn.c_proj, c_fc, mlp.c_proj)", cpath, s);
        }
    } else LFAIL("'%s': key \"target_modules\" must be a list of strings", cpath);
    const JsonValue* ltt = json_get(js, "layers_to_transform");
    unsigned char layer_ok[LORA_MAX_LAYERS];
    int all_layers = 1;
    const int L = cfg->num_layers, C = cfg->channels;
    for (int l = 0; l < LORA_MAX_LAYERS; l++) layer_ok[l] = 1;
    if (ltt && !json_is_null(ltt)) {
        int v;
        all_layers = 0;
        memset(layer_ok, 0, sizeof(layer_ok));
        if (json_as_int(ltt, &v)) { if (v < 0 || v >= L) LFAIL("'%s': layers_to_transform %d is outside 0-%d", cpath, v, L - 1); layer_ok[v] = 1; }
        else if (ltt->type == JSON_ARRAY) {
            for (int i = 0; i < ltt->n; i++) {
                if (!json_as_int(&ltt->items[i], &v) || v < 0 || v >= L)
                    LFAIL("'%s': layers_to_transform[%d] is not a layer index 0-%d", cpath, i, L - 1);
                layer_ok[v] = 1;
            }
        } else LFAIL("'%s': key \"layers_to_transform\" must be null, an integer or a list of integers", cpath);
    }
    const JsonValue* rpat = json_get(js, "rank_pattern");
    const JsonValue* apat = json_get(js, "alpha_pattern");

    if (st_try_open(&f, tpath, err, errcap) != 0) goto fail;
    f_open = 1;
    // Every tensor must be an A or B of a known module of an existing layer.
    for (int i = 0; i < f.n_tensors; i++) {
        const char* name = f.tensors[i].name;
        if (!strncmp(name, "base_model.model.transformer.ln_f.", 34)) continue; // modules_to_save / bias: checked below
        if (strncmp(name, KEY_PREFIX, strlen(KEY_PREFIX)) != 0)
            LFAIL("'%s': unexpected tensor '%s' (expected " KEY_PREFIX "<layer>.<module>.lora_A|lora_B.weight)", tpath, name);
        int l = atoi(name + strlen(KEY_PREFIX));
        if (l < 0 || l >= L) LFAIL("'%s': tensor '%s' is for layer %d but the base model has %d layers (wrong base model?)", tpath, name, l, L);
    }
    ad = (LoraAdapter*)callocCheck((size_t)(L > 0 ? L : 1) * LORA_NUM_LIN, sizeof(LoraAdapter));
    int n = 0, matched = 0;
    for (int l = 0; l < L; l++) {
        for (int k = 0; k < LORA_NUM_LIN; k++) {
            char ka[160], kb[160], full[128];
            snprintf(ka, sizeof(ka), KEY_PREFIX "%d.%s.lora_A.weight", l, LIN_MODULE[k]);
            snprintf(kb, sizeof(kb), KEY_PREFIX "%d.%s.lora_B.weight", l, LIN_MODULE[k]);
            snprintf(full, sizeof(full), "transformer.h.%d.%s", l, LIN_MODULE[k]);
            const StTensor* ta = st_find(&f, ka);
            const StTensor* tb = st_find(&f, kb);
            int targeted = all_linear;
            if (!all_linear) for (int i = 0; i < tm->n; i++) if (ends_with_module(full, tm->items[i].string)) targeted = 1;
            targeted = targeted && layer_ok[l];
            if (!ta && !tb) {
                if (targeted) LFAIL("'%s' targets %s but '%s' has no tensors for it (config/tensor disagreement)", cpath, full, tpath);
                continue;
            }
            if (!ta) LFAIL("'%s': '%s' has no matching lora_A tensor '%s'", tpath, kb, ka);
            if (!tb) LFAIL("'%s': '%s' has no matching lora_B tensor '%s'", tpath, ka, kb);
            if (!targeted) LFAIL("'%s': tensor '%s' is for %s, which adapter_config.json does not target (config/tensor disagreement)", tpath, ka, full);
            matched += 2;
            int out = k == LORA_LIN_QKV ? 3 * C : k == LORA_LIN_FC ? 4 * C : C;
            int in = k == LORA_LIN_FCPROJ ? 4 * C : C;
            if (ta->ndim != 2 || tb->ndim != 2) LFAIL("'%s': '%s' and '%s' must be 2-D", tpath, ka, kb);
            if (ta->shape[1] != in) LFAIL("'%s': '%s' has shape [%lld, %lld]; the base model's %s takes %d inputs (wrong base model?)",
                                         tpath, ka, (long long)ta->shape[0], (long long)ta->shape[1], full, in);
            if (tb->shape[0] != out) LFAIL("'%s': '%s' has shape [%lld, %lld]; the base model's %s has %d outputs (wrong base model?)",
                                          tpath, kb, (long long)tb->shape[0], (long long)tb->shape[1], full, out);
            if (ta->shape[0] != tb->shape[1]) LFAIL("'%s': rank mismatch: '%s' has rank %lld but '%s' has rank %lld",
                                                    tpath, ka, (long long)ta->shape[0], kb, (long long)tb->shape[1]);
            int rk = r;
            double al = alpha;
            const JsonValue* rv = pattern_lookup(rpat, full);
            if (rv && (!json_as_int(rv, &rk) || rk < 1)) LFAIL("'%s': rank_pattern value for %s must be a positive integer", cpath, full);
            const JsonValue* av = pattern_lookup(apat, full);
            if (av && !json_as_number(av, &al)) LFAIL("'%s': alpha_pattern value for %s must be a number", cpath, full);
            if (ta->shape[0] != rk) LFAIL("'%s': '%s' has rank %lld but adapter_config.json says r = %d for %s (config/tensor disagreement)",
                                          tpath, ka, (long long)ta->shape[0], rk, full);
            LoraAdapter* a = &ad[n++];
            a->lin = k; a->wid = LIN_WID[k]; a->layer = l; a->in = in; a->out = out; a->rank = rk;
            a->alpha = (float)al; a->scaling = scaling_of((float)al, rk, rslora); a->blocks = 0;
        }
    }
    if (n == 0) LFAIL("'%s' holds no LoRA tensors", tpath);
    if (dropout < 0.0 || dropout >= 1.0) LFAIL("'%s': lora_dropout %g is outside [0, 1)", cpath, dropout);
    LoraSpec spec;
    memset(&spec, 0, sizeof(spec));
    spec.rank = r; spec.alpha = (float)alpha; spec.rslora = rslora; spec.dropout = (float)dropout;
    spec.all_layers = all_layers;
    spec.bias = bias_mode; spec.train_ln_f = ln_f;
    for (int i = 0; i < n; i++) {
        spec.layers[ad[i].layer] = 1;
        spec.targets |= ad[i].lin == LORA_LIN_QKV ? LORA_T_CATTN : ad[i].lin == LORA_LIN_ATTPROJ ? LORA_T_ATTPROJ
                      : ad[i].lin == LORA_LIN_FC ? LORA_T_FC : LORA_T_FCPROJ;
    }
    if (!all_layers) for (int l = 0; l < L; l++) spec.layers[l] = layer_ok[l];
    lm = lm_build(cfg, &spec, ad, n);
    ad = NULL;
    // the trained base slices the config announces must all be there
    size_t ne = 0;
    for (int i = 0; i < lm->n_extra; i++) {
        const char* tname;
        const StTensor* t = find_extra(&f, &lm->extra[i], &tname);
        if (!t) LFAIL("'%s': bias \"%s\"%s in '%s' needs tensor '%s', which is missing (config/tensor disagreement)",
                      tpath, bias ? bias : "none", ln_f ? " / modules_to_save [\"ln_f\"]" : "", cpath, lm->extra[i].key);
        if (t->ndim != 1 || t->numel != extra_numel(lm, &lm->extra[i]))
            LFAIL("'%s': '%s' has %llu elements; the base model's tensor has %zu (wrong base model?)", tpath, lm->extra[i].key,
                  (unsigned long long)t->numel, extra_numel(lm, &lm->extra[i]));
        ne += extra_numel(lm, &lm->extra[i]);
        matched++;
    }
    if (matched != f.n_tensors) {
        for (int i = 0; i < f.n_tensors; i++) {
            const char* name = f.tensors[i].name;
            int known = 0;
            for (int e = 0; e < lm->n_extra && !known; e++) {
                const char* tname;
                known = find_extra(&f, &lm->extra[e], &tname) != NULL && !strcmp(tname, name);
            }
            for (int l = 0; l < L && !known; l++)
                for (int k = 0; k < LORA_NUM_LIN && !known; k++)
                    for (int w = 0; w < 2 && !known; w++) {
                        char key[160];
                        snprintf(key, sizeof(key), KEY_PREFIX "%d.%s.lora_%c.weight", l, LIN_MODULE[k], w ? 'B' : 'A');
                        known = !strcmp(key, name);
                    }
            if (!known) LFAIL("'%s': unknown tensor '%s' (neither a lora_A / lora_B of a GPT-2 linear layer nor a base tensor trained by the config's bias / modules_to_save)", tpath, name);
        }
    }

    host = (float*)callocCheck(lm->total, sizeof(float));
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        char ka[160], kb[160];
        key_of(ka, sizeof(ka), a, 'A');
        key_of(kb, sizeof(kb), a, 'B');
        const StTensor* ta = st_find(&f, ka);
        const StTensor* tb = st_find(&f, kb);
        if (ta->dtype != ST_F32 && ta->dtype != ST_BF16 && ta->dtype != ST_F16)
            LFAIL("'%s': '%s' has dtype %s; expected F32, BF16 or F16", tpath, ka, st_dtype_name(ta->dtype));
        if (tb->dtype != ST_F32 && tb->dtype != ST_BF16 && tb->dtype != ST_F16)
            LFAIL("'%s': '%s' has dtype %s; expected F32, BF16 or F16", tpath, kb, st_dtype_name(tb->dtype));
        st_read_f32(&f, ta, host + a->a_off);
        st_read_f32(&f, tb, host + a->b_off);
    }
    lora_set_params(lm, host);
    lm->extra_host = (float*)mallocCheck((ne ? ne : 1) * sizeof(float));
    for (int i = 0, off = 0; i < lm->n_extra; i++) {
        const char* tname;
        st_read_f32(&f, find_extra(&f, &lm->extra[i], &tname), lm->extra_host + off);
        off += (int)extra_numel(lm, &lm->extra[i]);
    }
    const char* base = json_as_string(json_get(js, "base_model_name_or_path"));
    if (base) snprintf(lm->base_name, sizeof(lm->base_name), "%s", base);
    free(host);
    st_close(&f);
    json_free(js);
    free(text);
    return lm;
fail:
    free(host);
    free(ad);
    if (lm) lora_free(lm);
    if (f_open) st_close(&f);
    if (js) json_free(js);
    free(text);
    return NULL;
}

LoraModel* lora_load_peft(const char* path, const GPT2Config* cfg) {
    char err[1024];
    LoraModel* lm = lora_try_load_peft(path, cfg, err, sizeof(err));
    if (!lm) fatal("check that the adapter was trained for this base model (--model) and saved by PEFT or train_lora", "%s", err);
    return lm;
}

void lora_merge(const LoraModel* lm, const ParamTable* pt, float* host_params) {
    float* host = (float*)mallocCheck((lm->total ? lm->total : 1) * sizeof(float));
    lora_get_params(lm, host);
    for (int i = 0; i < lm->n; i++) {
        const LoraAdapter* a = &lm->ad[i];
        float* W = host_params + params_layer_offset(pt, a->wid, a->layer);
        const float* A = host + a->a_off;
        const float* Bm = host + a->b_off;
        #pragma omp parallel for
        for (int o = 0; o < a->out; o++) {
            float* wrow = W + (size_t)o * a->in;
            for (int j = 0; j < a->rank; j++) {
                float bj = a->scaling * Bm[(size_t)o * a->rank + j];
                if (bj == 0.0f) continue;
                const float* arow = A + (size_t)j * a->in;
                for (int c = 0; c < a->in; c++) wrow[c] += bj * arow[c];
            }
        }
    }
    free(host);
}
