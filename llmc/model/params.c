#include "model/params.h"
#include "base/check.h"
#include <string.h>

typedef struct {
    const char* name; const char* hf_name; int per_layer; int ndim;
    int rows_mult; int cols_mult; // in units of C, except the special rows of wte/wpe
    int hf_transposed; int is_linear;
} ParamSpec;

// rows_mult < 0 marks the special row counts: -1 = padded vocab, -2 = max_seq_len.
static const ParamSpec SPECS[NUM_PARAM_TENSORS] = {
    {"wte",      "wte.weight",               0, 2, -1, 1, 0, 0},
    {"wpe",      "wpe.weight",               0, 2, -2, 1, 0, 0},
    {"ln1w",     "h.%d.ln_1.weight",         1, 1,  1, 0, 0, 0},
    {"ln1b",     "h.%d.ln_1.bias",           1, 1,  1, 0, 0, 0},
    {"qkvw",     "h.%d.attn.c_attn.weight",  1, 2,  3, 1, 1, 1},
    {"qkvb",     "h.%d.attn.c_attn.bias",    1, 1,  3, 0, 0, 0},
    {"attprojw", "h.%d.attn.c_proj.weight",  1, 2,  1, 1, 1, 1},
    {"attprojb", "h.%d.attn.c_proj.bias",    1, 1,  1, 0, 0, 0},
    {"ln2w",     "h.%d.ln_2.weight",         1, 1,  1, 0, 0, 0},
    {"ln2b",     "h.%d.ln_2.bias",           1, 1,  1, 0, 0, 0},
    {"fcw",      "h.%d.mlp.c_fc.weight",     1, 2,  4, 1, 1, 1},
    {"fcb",      "h.%d.mlp.c_fc.bias",       1, 1,  4, 0, 0, 0},
    {"fcprojw",  "h.%d.mlp.c_proj.weight",   1, 2,  1, 4, 1, 1},
    {"fcprojb",  "h.%d.mlp.c_proj.bias",     1, 1,  1, 0, 0, 0},
    {"lnfw",     "ln_f.weight",              0, 1,  1, 0, 0, 0},
    {"lnfb",     "ln_f.bias",                0, 1,  1, 0, 0, 0},
};

void params_build(ParamTable* pt, const GPT2Config* cfg) {
    memset(pt, 0, sizeof(*pt));
    pt->cfg = *cfg;
    size_t C = (size_t)cfg->channels, L = (size_t)cfg->num_layers;
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const ParamSpec* s = &SPECS[i];
        ParamInfo* p = &pt->t[i];
        p->name = s->name;
        p->hf_name = s->hf_name;
        p->per_layer = s->per_layer;
        p->ndim = s->ndim;
        if (s->rows_mult == -1) p->rows = (size_t)cfg->padded_vocab_size;
        else if (s->rows_mult == -2) p->rows = (size_t)cfg->max_seq_len;
        else p->rows = (size_t)s->rows_mult * C;
        p->cols = s->ndim == 2 ? (size_t)s->cols_mult * C : 1;
        p->hf_transposed = s->hf_transposed;
        p->weight_decay = s->ndim == 2;
        p->is_linear = s->is_linear;
        p->numel = p->rows * p->cols * (s->per_layer ? L : 1);
        p->offset = off;
        off += p->numel;
    }
    pt->total = off;
}

void params_hf_key(char* out, size_t cap, ParamId id, int layer, const char* prefix) {
    char tmp[256];
    if (SPECS[id].per_layer) snprintf(tmp, sizeof(tmp), SPECS[id].hf_name, layer);
    else snprintf(tmp, sizeof(tmp), "%s", SPECS[id].hf_name);
    int n = snprintf(out, cap, "%s%s", prefix, tmp);
    assertCheck(n > 0 && (size_t)n < cap);
}

size_t params_count_unpadded(const ParamTable* pt) {
    return pt->total - (size_t)(pt->cfg.padded_vocab_size - pt->cfg.vocab_size) * (size_t)pt->cfg.channels;
}
