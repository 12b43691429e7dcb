// Several adapters combined into one, as PEFT's add_weighted_adapter combines them
// (llmc/model/lora.h, lora_mix).
#include "model/lora.h"
#include "base/check.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char* const LORA_MIX_NAMES[] = {"cat", "linear", NULL};

// What PEFT cannot combine, or combines only as something else: 0, or -1 with the message in err.
static int mix_check(LoraModel* const* in, int n, int how, char* err, size_t cap) {
    for (int i = 0; i < n; i++) {
        const LoraModel* lm = in[i];
        const char* why = lm->n_extra ? "trains base tensors beside its adapters (bias / modules_to_save), which cannot be added"
                        : lm->spec.dora ? "is DoRA: its magnitudes do not add"
                        : lm->spec.init != LORA_INIT_DEFAULT && lora_init_rewrites_base(lm->spec.init) ? "is relative to a rewritten base (PiSSA)"
                        : lora_is_bitfit(lm) ? "has no adapter" : NULL;
        if (why) { snprintf(err, cap, "adapter %d of %d %s", i + 1, n, why); return -1; }
        for (int j = 0; how == LORA_MIX_LINEAR && j < lm->n; j++)
            if (lm->ad[j].rank != in[0]->ad[0].rank) {
                snprintf(err, cap, "the linear combination needs adapters of one rank: adapter %d has rank %d at h.%d.%s, adapter 1 rank %d "
                         "(the cat combination takes any ranks)", i + 1, lm->ad[j].rank, lm->ad[j].layer, lora_module_name(lm->ad[j].lin),
                         in[0]->ad[0].rank);
                return -1;
            }
    }
    return 0;
}

// The combined adapter's rank: the sum of every adapter's largest rank (cat), or their one rank
// (linear). PEFT gives every combined module this rank; a module fewer adapters adapt keeps zeros
// in the rest.
static int mix_rank(LoraModel* const* in, int n, int how) {
    int sum = 0;
    for (int i = 0; i < n; i++) {
        int r = 0;
        for (int j = 0; j < in[i]->n; j++) if (in[i]->ad[j].rank > r) r = in[i]->ad[j].rank;
        sum += r;
    }
    return how == LORA_MIX_CAT ? sum : in[0]->ad[0].rank;
}

// Adapter (layer, lin) of the combination, from every input that adapts it, into the combined
// values out (flat layout of a). cat: A rows w_i s_i A_i and B columns B_i, one block after the
// other in the inputs' order; linear: A = sum sign(w_i s_i) sqrt|w_i s_i| A_i,
// B = sum sqrt|w_i s_i| B_i.
static void mix_module(LoraModel* const* in, float* const* vals, const float* w, int n, int how, const LoraAdapter* a, float* out) {
    int col = 0;
    for (int i = 0; i < n; i++) {
        const int k = in[i]->lookup[a->layer][a->lin];
        if (k < 0) continue;
        const LoraAdapter* s = &in[i]->ad[k];
        const float* A = vals[i] + s->a_off;
        const float* B = vals[i] + s->b_off;
        float* oA = out + a->a_off;
        float* oB = out + a->b_off;
        const double ws = (double)w[i] * s->scaling;
        if (how == LORA_MIX_CAT) {
            for (int j = 0; j < s->rank; j++)
                for (int c = 0; c < a->in; c++) oA[(size_t)(col + j) * a->in + c] = (float)(ws * A[(size_t)j * a->in + c]);
            for (int o = 0; o < a->out; o++)
                for (int j = 0; j < s->rank; j++) oB[(size_t)o * a->rank + col + j] = B[(size_t)o * s->rank + j];
            col += s->rank;
        } else {
            const double wb = sqrt(fabs(ws)), wa = ws >= 0 ? wb : -wb;
            for (size_t e = 0; e < (size_t)a->rank * a->in; e++) oA[e] += (float)(wa * A[e]);
            for (size_t e = 0; e < (size_t)a->out * a->rank; e++) oB[e] += (float)(wb * B[e]);
        }
    }
}

LoraModel* lora_mix(LoraModel* const* in, const float* w, int n, int how, char* err, size_t cap) {
    if (n < 1 || mix_check(in, n, how, err, cap)) return NULL;
    const GPT2Config* cfg = &in[0]->cfg;
    const int R = mix_rank(in, n, how);
    // PEFT's combined config is the first adapter's with r = lora_alpha = R (use_rslora kept)
    LoraSpec spec = in[0]->spec;
    spec.rank = R; spec.alpha = (float)R; spec.init = LORA_INIT_DEFAULT;
    spec.targets = 0;
    memset(spec.layers, 0, sizeof(spec.layers));
    LoraAdapter* ad = (LoraAdapter*)callocCheck((size_t)cfg->num_layers * LINEAR_PER_BLOCK, sizeof(LoraAdapter));
    int na = 0;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
            const LoraAdapter* src = NULL;
            for (int i = 0; i < n && !src; i++) if (in[i]->lookup[l][k] >= 0) src = &in[i]->ad[in[i]->lookup[l][k]];
            if (!src) continue;
            LoraAdapter* a = &ad[na++];
            a->lin = k; a->wid = src->wid; a->layer = l; a->in = src->in; a->out = src->out;
            a->rank = R; a->alpha = (float)R; a->scaling = lora_scaling((float)R, R, spec.rslora);
            spec.layers[l] = 1;
            spec.targets |= k == LINEAR_QKV ? LORA_T_CATTN : k == LINEAR_ATTPROJ ? LORA_T_ATTPROJ : k == LINEAR_FC ? LORA_T_FC : LORA_T_FCPROJ;
        }
    spec.all_layers = 1;
    for (int l = 0; l < cfg->num_layers; l++) spec.all_layers &= spec.layers[l];
    LoraModel* lm = lora_from_adapters(cfg, &spec, ad, na);
    float** vals = (float**)mallocCheck((size_t)n * sizeof(float*));
    for (int i = 0; i < n; i++) {
        vals[i] = (float*)mallocCheck((in[i]->total ? in[i]->total : 1) * sizeof(float));
        lora_get_params(in[i], vals[i]);
    }
    float* out = (float*)callocCheck(lm->total ? lm->total : 1, sizeof(float));
    for (int j = 0; j < lm->n; j++) mix_module(in, vals, w, n, how, &lm->ad[j], out);
    lora_set_params(lm, out);
    snprintf(lm->base_name, sizeof(lm->base_name), "%s", in[0]->base_name);
    for (int i = 0; i < n; i++) free(vals[i]);
    free(vals);
    free(out);
    return lm;
}
