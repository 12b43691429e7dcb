#include "model/model.h"
#include "base/check.h"
#include "model/config.h"
#include "model/model_io.h"
#include "model/peft_io.h"
#include "base/bf16.h"
#include "base/gguf.h"
#include <stdlib.h>
#include <string.h>

// Step 1: the config and the fp32 weights. *host is malloc'd here (*owned = 1) or the caller's.
// A 4-bit checkpoint also gives its NF4 weights (their fp32 slots stay zero).
static void model_weights(Model* m, const ModelSpec* s, GPT2Config* cfg, float** host, int* owned) {
    ParamTable pt;
    *owned = 1;
    if (!s->path) {
        if (!s->cfg || !s->host) fatal("this is a bug in llmc", "model_assemble: neither a path nor weights in memory");
        *cfg = *s->cfg;
        *host = (float*)s->host;
        *owned = 0;
        snprintf(m->source, sizeof(m->source), "(weights in memory)");
    } else if (gpt2_config_from_descriptor(cfg, s->path) == 0) {
        params_build(&pt, cfg);
        *host = (float*)mallocCheck(pt.total * sizeof(float));
        model_init_gpt2(&pt, *host, s->seed);
        snprintf(m->source, sizeof(m->source), "%s (GPT-2 init, seed %llu)", s->path, (unsigned long long)s->seed);
    } else if (qlora_is_hf4bit(s->path)) {
        m->nf4 = qlora_load_hf4bit(s->path, cfg, &pt, host);
        snprintf(m->source, sizeof(m->source), "%s (bitsandbytes 4-bit)", s->path);
    } else {
        model_load(s->path, cfg, &pt, host);
        snprintf(m->source, sizeof(m->source), "%s", s->path);
    }
}

// Step 2: adapters from a PEFT directory or new ones, now that the base's shape is known.
static LoraModel* model_build_lora(const LoraSource* src, const GPT2Config* cfg, const char* model_path) {
    LoraModel* lm;
    if (src->n_mix > 1) {
        LoraModel* in[LORA_MIX_MAX];
        char err[1024];
        if (src->n_mix > LORA_MIX_MAX) fatal("this is a bug in llmc", "%d adapters to combine", src->n_mix);
        for (int i = 0; i < src->n_mix; i++) in[i] = peft_load_adapter(src->mix[i], cfg);
        lm = lora_mix(in, src->mix_weights, src->n_mix, src->mix_how, err, sizeof(err));
        for (int i = 0; i < src->n_mix; i++) lora_free(in[i]);
        if (!lm) fatal("combine plain LoRA adapters of the base (PEFT's add_weighted_adapter takes the same)", "%s", err);
    } else if (src->adapter) {
        lm = peft_load_adapter(src->adapter, cfg);
        // else the adapter's own lora_dropout, as PEFT would continue
        if (src->dropout_override) lm->spec.dropout = src->spec.dropout;
    } else {
        LoraSpec spec = src->spec;
        char err[1024];
        if (lora_parse_layers(src->layers ? src->layers : "all", cfg->num_layers, &spec, err, sizeof(err)))
            fatal("give layer indices of the base model, e.g. --lora-layers 0-5,8", "%s", err);
        lm = lora_create(cfg, &spec);
        if (spec.init == LORA_INIT_GAUSSIAN) lora_init_gaussian(lm, src->seed);
        else if (!lora_init_rewrites_base(spec.init)) lora_init_params(lm, src->seed);
        // (PiSSA / OLoRA: model_lora_from_base, with the base's weights)
    }
    const char* base = src->base_name ? src->base_name : model_path;
    snprintf(lm->base_name, sizeof(lm->base_name), "%s", base ? base : "");
    lm->dropout_seed = src->seed;
    return lm;
}

// Step 2': PiSSA / OLoRA: the initial adapter from the base's fp32 weights (or, resuming, from
// the one the run wrote), the values of new adapters, and the base rewritten to the residual in
// place (a loaded PiSSA adapter keeps its values: they are those of that residual).
static void model_lora_from_base(LoraModel* lm, const LoraSource* src, const GPT2Config* cfg, float* host, int owned) {
    if (!owned || !host) fatal("this is a bug in llmc", "--init %s needs the base's weights read from --model", LORA_INIT_NAMES[lm->spec.init]);
    ParamTable pt;
    params_build(&pt, cfg);
    if (src->init_values) {
        lm->init0 = (float*)callocCheck(lm->total ? lm->total : 1, sizeof(float));
        peft_read_factors(lm, src->init_values, lm->init0);
        lora_set_params(lm, lm->init0);
    } else {
        lora_init_from_base(lm, &pt, host);
        if (!src->adapter) lora_set_params(lm, lm->init0);
    }
    lora_init_residual(lm, &pt, host);
}

// Step 5a: every linear layer's weight from the NF4 base (in backend memory first).
static void model_bind_nf4(Model* m) {
    Nf4Base* b = m->nf4;
    qlora_upload(b);
    for (int k = 0; k < QLORA_NQ; k++)
        for (int l = 0; l < b->L; l++) linear_use_nf4(linear_at(m->gpt.lin, l, k), &b->t[k * b->L + l], b->dev[k * b->L + l]);
}

size_t model_bf16_stage(const ParamTable* pt) {
    size_t max_layer = 0;
    for (int k = 0; k < LINEAR_PER_BLOCK; k++)
        if (params_layer_numel(pt, linear_weight_id(k)) > max_layer) max_layer = params_layer_numel(pt, linear_weight_id(k));
    return max_layer;
}

// Step 5a': the frozen linear weights rounded to bf16 (to nearest even, as torch's
// .to(bfloat16)), in backend memory, as every layer's weight source; the fp32 copies are never
// allocated (the same skip mask as NF4's).
static void model_bind_bf16(Model* m, const ParamTable* pt, const float* host) {
    const int L = pt->cfg.num_layers;
    uint16_t* tmp = (uint16_t*)mallocCheck(model_bf16_stage(pt) * sizeof(uint16_t));
    m->base16 = (uint16_t*)ops_alloc(qlora_replaced_numel(pt) * sizeof(uint16_t));
    size_t off = 0;
    for (int k = 0; k < LINEAR_PER_BLOCK; k++)
        for (int l = 0; l < L; l++) {
            const ParamId id = linear_weight_id(k);
            const size_t n = params_layer_numel(pt, id);
            const float* w = host + params_layer_offset(pt, id, l);
            for (size_t i = 0; i < n; i++) tmp[i] = bf16_from_f32(w[i]);
            ops_to_device(m->base16 + off, tmp, n * sizeof(uint16_t));
            linear_use_bf16(linear_at(m->gpt.lin, l, k), m->base16 + off);
            off += n;
        }
    free(tmp);
}

// Q8_0 bytes of n values (n a multiple of the block); ops.h's block is GGUF's
_Static_assert(OPS_Q8_BLOCK == GGUF_QK8_0 && OPS_Q8_BLOCK_BYTES == GGUF_Q8_0_BYTES, "ops.h's Q8_0 block is GGUF's");
static size_t model_q8_bytes(size_t n) { return n / OPS_Q8_BLOCK * OPS_Q8_BLOCK_BYTES; }

// Step 5a' with base_q8: the linear weights in llama.cpp's Q8_0 blocks (gguf_quantize_q8_0, which
// gives back the same blocks from a Q8_0 file's dequantized values), in backend memory, as every
// layer's weight source; the fp32 copies are never allocated.
static void model_bind_q8(Model* m, const ParamTable* pt, const float* host) {
    const int L = pt->cfg.num_layers;
    uint8_t* tmp = (uint8_t*)mallocCheck(model_q8_bytes(model_bf16_stage(pt)));
    m->base_q8 = (uint8_t*)ops_alloc(model_q8_bytes(qlora_replaced_numel(pt)));
    size_t off = 0;
    for (int k = 0; k < LINEAR_PER_BLOCK; k++)
        for (int l = 0; l < L; l++) {
            const ParamId id = linear_weight_id(k);
            const size_t bytes = model_q8_bytes(params_layer_numel(pt, id));
            gguf_quantize_q8_0(host + params_layer_offset(pt, id, l), tmp, params_layer_numel(pt, id));
            ops_to_device(m->base_q8 + off, tmp, bytes);
            linear_use_q8(linear_at(m->gpt.lin, l, k), m->base_q8 + off);
            off += bytes;
        }
    free(tmp);
}

// Step 5a'' with base_q8: wte in Q8_0 for the lm_head, from the model's own copy (as wte16, through
// a host staging of GPT2_WTE16_ROWS rows).
static void model_bind_wte_q8(Model* m) {
    const GPT2Config* c = &m->gpt.cfg;
    const size_t C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size, rows = GPT2_WTE16_ROWS;
    float* f = (float*)mallocCheck(rows * C * sizeof(float));
    uint8_t* q = (uint8_t*)mallocCheck(model_q8_bytes(rows * C));
    m->wte_q8 = (uint8_t*)ops_alloc(model_q8_bytes(Vp * C));
    for (size_t r0 = 0; r0 < Vp; r0 += rows) {
        const size_t n = (Vp - r0 < rows ? Vp - r0 : rows) * C;
        ops_download_f32(f, m->gpt.p[PT_WTE] + r0 * C, n);
        gguf_quantize_q8_0(f, q, n);
        ops_to_device(m->wte_q8 + model_q8_bytes(r0 * C), q, model_q8_bytes(n));
    }
    free(f);
    free(q);
    m->gpt.wte_q8 = m->wte_q8;
}

// Step 5a'': a frozen wte rounded to bf16 for the lm_head (its fp32 copy stays: the embedding reads
// it), from the model's own copy once the host weights are gone, so that the build's peak (the
// host weights beside the model) does not grow by it.
static void model_bind_wte16(Model* m) {
    m->wte16 = (uint16_t*)ops_alloc(params_layer_numel(&m->gpt.pt, PT_WTE) * sizeof(uint16_t));
    gpt2_wte_to_bf16(&m->gpt, m->wte16);
    m->gpt.wte16 = m->wte16;
}

// Step 5b: the adapters onto their linear layers, their dropout, and the base slices they train
// pointed at the model's (with the values an adapter file gave them).
static void model_bind_lora(Model* m) {
    LoraModel* lm = m->lora;
    for (int i = 0; i < lm->n; i++) {
        const LinearAdapter a = lora_linear_adapter(lm, i);
        linear_set_adapter(linear_at(m->gpt.lin, lm->ad[i].layer, lm->ad[i].lin), &a);
    }
    linear_set_dropout(m->gpt.lin, lm->spec.dropout, lm->dropout_seed);
    model_lora_extras_rebind(m);
    if (lm->spec.train_ln_f) { // the base's ln_f, before the adapter's values replace it (model_set_adapters)
        const size_t C = (size_t)m->gpt.cfg.channels;
        m->ref_lnf = (floatX*)ops_alloc(4 * C * sizeof(floatX));
        m->lnf_keep = m->ref_lnf + 2 * C;
        scale_copy(m->ref_lnf, m->gpt.p[PT_LNFW], 1.0f, C); // (a copy: x * 1 is exact)
        scale_copy(m->ref_lnf + C, m->gpt.p[PT_LNFB], 1.0f, C);
    }
    lora_put_base_values(lm);
}

void model_lora_extras_rebind(Model* m) {
    for (int i = 0; m->lora && i < m->lora->n_extra; i++) {
        LoraExtra* e = &m->lora->extra[i];
        e->p = gpt2_param_slice(&m->gpt, e->id, e->layer);
        e->g = gpt2_grad_slice(&m->gpt, e->id, e->layer);
    }
}

// Step 4': the bytes steps 4 and 5 will take in backend memory (ModelFootprint), for the spec's
// before_alloc check. The same sums as the trainers' memory report.
static ModelFootprint model_footprint(const Model* m, const ModelSpec* s, const ParamTable* pt, unsigned trainable,
                                      unsigned skip, int base16, int wte16, int q8) {
    ModelFootprint fp;
    memset(&fp, 0, sizeof(fp));
    const size_t X = ops_caps().floatx_bytes;
    size_t params_n, grads_n;
    gpt2_count(pt, trainable, skip, &params_n, &grads_n);
    const size_t adapters = m->lora ? m->lora->total : 0;
    fp.params = (params_n + adapters) * X;
    fp.grads = (grads_n + adapters) * X;
    fp.trainable = m->lora ? lora_trainable_numel(m->lora) : grads_n;
    if (m->nf4) {
        size_t wmax = 0; // the one dequant buffer: the largest quantized matrix (llmc/model/linear.c)
        for (int i = 0; i < NUM_PARAM_TENSORS; i++)
            if (qlora_is_quantized((ParamId)i) && params_layer_numel(pt, (ParamId)i) > wmax) wmax = params_layer_numel(pt, (ParamId)i);
        fp.base = m->nf4->bytes + wmax * X;
    } else if (q8) {
        fp.base = model_q8_bytes(qlora_replaced_numel(pt)) + model_q8_bytes(params_layer_numel(pt, PT_WTE));
    } else if (base16) {
        fp.base = qlora_replaced_numel(pt) * sizeof(uint16_t);
    }
    if (wte16) fp.base += params_layer_numel(pt, PT_WTE) * sizeof(uint16_t);
    if (s->B > 0) fp.acts = gpt2_acts_bytes(&pt->cfg, s->B, s->T, s->recompute, s->backward);
    if (s->B > 0 && m->lora) fp.acts += lora_scratch_bytes(m->lora, (size_t)s->B * s->T);
    return fp;
}

void model_assemble(Model* m, const ModelSpec* s) {
    memset(m, 0, sizeof(*m));
    GPT2Config cfg;
    float* host = NULL;
    int owned = 0;
    model_weights(m, s, &cfg, &host, &owned);
    if (s->lora) m->lora = s->lora;
    else if (s->lora_src) { m->lora = model_build_lora(s->lora_src, &cfg, s->path); m->owns_lora = 1; }
    if (m->owns_lora && lora_init_rewrites_base(m->lora->spec.init)) {
        if (m->nf4 || s->qlora)
            fatal("use the base in fp32 or bf16", "%s rewrites the base in fp32; a 4-bit (NF4) base is not supported",
                  s->lora_src->adapter ? "a PiSSA adapter (init_lora_weights \"pissa\")" : LORA_INIT_NAMES[m->lora->spec.init]);
        model_lora_from_base(m->lora, s->lora_src, &cfg, host, owned);
    }
    ParamTable pt;
    params_build(&pt, &cfg);
    if (s->qlora && !m->nf4) {
        m->nf4 = qlora_quantize(&pt, host);
        // the fp32 copies of the quantized weights are not needed any more
        if (owned) qlora_release_host(&pt, host);
    }
    const unsigned trainable = s->trainable | (m->lora ? lora_base_trainable_mask(m->lora) : 0u);
    // bf16 base weights only where no gradient flows into them (adapters, or no training at all)
    // Q8_0 weights where nothing trains
    const int q8_unable = cfg.channels % OPS_Q8_BLOCK || (m->lora && m->lora->spec.dora);
    const int q8 = s->base_q8 == MODEL_Q8_ON || (s->base_q8 == MODEL_Q8_WHERE_ABLE && !q8_unable);
    if (q8 && (trainable || m->nf4)) fatal("this is a bug in llmc", "a Q8_0 base for a model that trains or has an NF4 base");
    if (q8 && cfg.channels % OPS_Q8_BLOCK)
        fatal("use --weights dense", "%s: Q8_0 weights need a channel count that is a multiple of %d; this model has %d",
              m->source, OPS_Q8_BLOCK, cfg.channels);
    if (q8 && m->lora && m->lora->spec.dora)
        fatal("use --weights dense with a DoRA adapter", "a DoRA adapter over Q8_0 weights: its norms need the dense weight");
    const int base16 = !q8 && s->base_bf16 && !(trainable & QLORA_MASK) && !m->nf4 && ops_caps().floatx == OPS_F32;
    const unsigned skip = m->nf4 || base16 || q8 ? QLORA_MASK : 0u;
    // the lm_head's weight in bf16 once, where wte has no gradient (NF4 bases too)
    const int wte16 = !q8 && s->base_bf16 && !(trainable & (1u << PT_WTE)) && ops_caps().floatx == OPS_F32;
    if (s->before_alloc) {
        const ModelFootprint fp = model_footprint(m, s, &pt, trainable, skip, base16, wte16, q8);
        s->before_alloc(s->before_alloc_ctx, &fp);
    }
    gpt2_init(&m->gpt, &cfg, trainable, skip);
    if (m->nf4) model_bind_nf4(m);
    if (base16) model_bind_bf16(m, &pt, host);
    if (q8) model_bind_q8(m, &pt, host);
    gpt2_set_params(&m->gpt, host);
    if (owned) free(host);
    if (wte16) model_bind_wte16(m);
    if (q8) model_bind_wte_q8(m);
    if (s->B > 0 && s->T > cfg.max_seq_len) {
        const char* what = s->T_flag ? s->T_flag : "sequence length";
        char hint[128];
        snprintf(hint, sizeof(hint), "use a %s no larger than the model's n_positions", what);
        fatal(hint, "%s %d exceeds the model's maximum sequence length %d", what, s->T, cfg.max_seq_len);
    }
    if (m->lora) model_bind_lora(m);
    gpt2_set_recompute(&m->gpt, s->recompute);
    if (s->B > 0) gpt2_alloc_acts(&m->gpt, s->B, s->T, s->backward);
    if (m->owns_lora && m->lora->spec.dora && !s->lora_src->adapter) { // new DoRA adapters: m = ||W + s B A||
        if (s->B <= 0) linear_set_alloc(m->gpt.lin, 1); // (the decoded-weight buffer of an NF4 base)
        lora_dora_init(m->lora, m->gpt.lin);
    }
    if (m->lora && s->lora_src && s->lora_src->values) peft_load_tensors(m->lora, s->lora_src->values);
}

void model_alloc_acts(Model* m, int B, int T, int backward) { gpt2_alloc_acts(&m->gpt, B, T, backward); }

void model_free(Model* m) {
    for (int i = 0; m->lora && i < m->lora->n_extra; i++) // a caller's adapters are on no model any more
        m->lora->extra[i].p = m->lora->extra[i].g = NULL;
    gpt2_free(&m->gpt);
    qlora_free(m->nf4);
    if (m->base16) ops_free(m->base16);
    if (m->wte16) ops_free(m->wte16);
    if (m->base_q8) ops_free(m->base_q8);
    if (m->wte_q8) ops_free(m->wte_q8);
    if (m->ref_lnf) ops_free(m->ref_lnf);
    if (m->owns_lora) lora_free(m->lora);
    memset(m, 0, sizeof(*m));
}

void model_set_adapters(Model* m, int on) {
    if (!m->lora || on == !m->adapters_off) return;
    linear_set_adapters(m->gpt.lin, on);
    m->adapters_off = !on;
    if (!m->ref_lnf) return;
    const size_t C = (size_t)m->gpt.cfg.channels;
    floatX* w = m->gpt.p[PT_LNFW];
    floatX* b = m->gpt.p[PT_LNFB];
    if (!on) { scale_copy(m->lnf_keep, w, 1.0f, C); scale_copy(m->lnf_keep + C, b, 1.0f, C); }
    const floatX* from = on ? m->lnf_keep : m->ref_lnf;
    scale_copy(w, from, 1.0f, C);
    scale_copy(b, from + C, 1.0f, C);
}

int model_max_segments(const Model* m) { return m->lora ? lora_max_segments(m->lora) : NUM_PARAM_TENSORS; }

int model_segments(Model* m, TrainSeg* segs) {
    if (m->lora) return lora_segments(m->lora, segs);
    int n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!m->gpt.g[i]) continue;
        memset(&segs[n], 0, sizeof(segs[n]));
        segs[n].name = m->gpt.pt.t[i].name;
        segs[n].p = m->gpt.p[i];
        segs[n].g = m->gpt.g[i];
        segs[n].n = m->gpt.pt.t[i].numel;
        segs[n].weight_decay = m->gpt.pt.t[i].weight_decay;
        segs[n].lr_scale = 1.0f;
        n++;
    }
    return n;
}
