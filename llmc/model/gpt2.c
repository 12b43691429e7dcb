#include "model/gpt2.h"
#include "base/bf16.h"
#include "base/check.h"
#include <string.h>

// Layer l's slice of a per-layer parameter, and of its gradient (NULL stays NULL).
static inline floatX* LP(const GPT2* m, ParamId id, int l) {
    return m->lp[(size_t)l * NUM_PARAM_TENSORS + id];
}
static inline floatX* LG(const GPT2* m, ParamId id, int l) {
    return m->g[id] ? m->g[id] + (size_t)l * m->g_stride[id] : NULL;
}
// Layer l's slice of an activation buffer that holds every layer, or the one-layer buffer of an
// activation that backward recomputes (keep_all = 0).
static inline floatX* LA(floatX* base, int l, size_t per_layer, int keep_all) {
    return keep_all ? base + (size_t)l * per_layer : base;
}
static inline Linear* LIN(const GPT2* m, int l, int kind) { return linear_at(m->lin, l, kind); }
// FSDP units (gpt2_set_units): no-ops for a model that holds all its parameters.
#define UNIT_HEAD(m) ((m)->cfg.num_layers)
#define UNIT_NEED(m, u) do { if ((m)->units) (m)->units->need((m)->units->ctx, (u)); } while (0)
#define UNIT_PREFETCH(m, u) do { if ((m)->units) (m)->units->prefetch((m)->units->ctx, (u)); } while (0)
#define UNIT_RELEASE(m, u) do { if ((m)->units) (m)->units->release((m)->units->ctx, (u)); } while (0)

// Point every linear layer at its bias, its gradients and, where it is held as floatX, its weight
// (the others get their source from the assembly, llmc/model/model.c).
static void gpt2_bind_layer_linears(GPT2* m, int l) {
    for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
        Linear* x = LIN(m, l, k);
        const ParamId w = linear_weight_id(k), b = (ParamId)(w + 1); // the bias follows its weight
        if (!(m->skipped & (1u << w))) linear_use_dense(x, LP(m, w, l));
        x->b = LP(m, b, l);
        x->dw = LG(m, w, l);
        x->db = LG(m, b, l);
    }
}
static void gpt2_bind_linears(GPT2* m) {
    for (int l = 0; l < m->cfg.num_layers; l++) gpt2_bind_layer_linears(m, l);
}

static void gpt2_bind_tensor(GPT2* m, int i, floatX* at) {
    m->p[i] = at;
    for (int l = 0; l < m->cfg.num_layers; l++)
        m->lp[(size_t)l * NUM_PARAM_TENSORS + i] = !at ? NULL : at + (m->pt.t[i].per_layer ? (size_t)l * params_layer_numel(&m->pt, (ParamId)i) : 0);
}

// Tensor and layer views into a full parameter buffer (table order, skipped tensors left out);
// resident tensors (gpt2_set_resident) into their own buffer.
static void gpt2_bind_full(GPT2* m, floatX* params) {
    size_t poff = 0, roff = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        floatX* at = NULL;
        if (!(m->skipped & (1u << i))) { at = params + poff; poff += m->pt.t[i].numel; }
        if (m->resident_buf && (m->resident & (1u << i))) { at = m->resident_buf + roff; roff += m->pt.t[i].numel; }
        gpt2_bind_tensor(m, i, at);
    }
}

void gpt2_count(const ParamTable* pt, unsigned trainable_mask, unsigned skip_mask, size_t* params_n, size_t* grads_n) {
    *params_n = *grads_n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!(skip_mask & (1u << i))) *params_n += pt->t[i].numel;
        if (trainable_mask & (1u << i)) *grads_n += pt->t[i].numel;
    }
}

void gpt2_init(GPT2* m, const GPT2Config* cfg, unsigned trainable_mask, unsigned skip_mask) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    gpt2_config_validate(cfg, "model config");
    params_build(&m->pt, cfg);
    if (trainable_mask & skip_mask) fatal("this is a bug in llmc", "gpt2_init: a tensor without a floatX copy cannot be trained");
    m->trainable = trainable_mask;
    m->skipped = skip_mask;
    // Gradients only for trainable tensors: a frozen base costs no gradient memory at all.
    gpt2_count(&m->pt, trainable_mask, skip_mask, &m->params_n, &m->grads_n);
    m->params = (floatX*)ops_alloc(m->params_n * sizeof(floatX));
    ops_zero(m->params, m->params_n * sizeof(floatX));
    if (m->grads_n) {
        m->grads = (floatX*)ops_alloc(m->grads_n * sizeof(floatX));
        ops_zero(m->grads, m->grads_n * sizeof(floatX));
    }
    m->lp = (floatX**)callocCheck((size_t)cfg->num_layers * NUM_PARAM_TENSORS, sizeof(floatX*));
    gpt2_bind_full(m, m->params);
    size_t goff = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        m->g[i] = NULL;
        if (trainable_mask & (1u << i)) { m->g[i] = m->grads + goff; goff += m->pt.t[i].numel; }
        m->g_stride[i] = m->pt.t[i].per_layer ? params_layer_numel(&m->pt, (ParamId)i) : 0;
    }
    m->lin = linear_set_create(&m->pt);
    gpt2_bind_linears(m);
}

void gpt2_grads_into_buckets(GPT2* m, floatX* layer_bucket, floatX* final_bucket) {
    assertCheck(m->trainable == GPT2_TRAIN_ALL);
    if (m->grads) { ops_free(m->grads); m->grads = NULL; m->grads_n = 0; }
    size_t lo = 0, fo = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (m->pt.t[i].per_layer) { m->g[i] = layer_bucket + lo; lo += params_layer_numel(&m->pt, (ParamId)i); }
        else { m->g[i] = final_bucket + fo; fo += m->pt.t[i].numel; }
        m->g_stride[i] = 0; // every layer writes into the same bucket slot
    }
    gpt2_bind_linears(m);
}

void gpt2_grads_layer_bucket(GPT2* m, floatX* layer_bucket) {
    size_t lo = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!m->pt.t[i].per_layer || !m->g[i]) continue;
        m->g[i] = layer_bucket + lo; lo += params_layer_numel(&m->pt, (ParamId)i);
    }
    gpt2_bind_linears(m);
}

// ----------------------------------------------------------------------------
// FSDP units: a unit's tensors packed back to back in table order (skipped tensors left out)

// Whether tensor i belongs to unit u (block u < L: its per-layer tensors; the head: the rest),
// for a model without the tensors in skipped and resident.
static int unit_has_masks(const ParamTable* pt, unsigned skipped, unsigned resident, int u, int i) {
    return !(skipped & (1u << i)) && !(resident & (1u << i)) && (pt->t[i].per_layer ? u < pt->cfg.num_layers : u == pt->cfg.num_layers);
}
static int unit_has(const GPT2* m, int u, int i) { return unit_has_masks(&m->pt, m->skipped, m->resident, u, i); }
static size_t unit_tensor_numel(const ParamTable* pt, int u, int i) {
    return u < pt->cfg.num_layers ? params_layer_numel(pt, (ParamId)i) : pt->t[i].numel;
}

size_t gpt2_unit_numel_for(const ParamTable* pt, unsigned skipped, unsigned resident, int u) {
    size_t n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) if (unit_has_masks(pt, skipped, resident, u, i)) n += unit_tensor_numel(pt, u, i);
    return n;
}
size_t gpt2_unit_numel(const GPT2* m, int u) { return gpt2_unit_numel_for(&m->pt, m->skipped, m->resident, u); }

int gpt2_unit_tensors(const GPT2* m, int u, GPT2UnitTensor* out) {
    int n = 0;
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!unit_has(m, u, i)) continue;
        out[n].id = (ParamId)i; out[n].off = off; out[n].n = unit_tensor_numel(&m->pt, u, i);
        off += out[n].n;
        n++;
    }
    return n;
}

void gpt2_bind_unit(GPT2* m, int u, floatX* buf) {
    GPT2UnitTensor t[NUM_PARAM_TENSORS];
    const int n = gpt2_unit_tensors(m, u, t);
    for (int k = 0; k < n; k++) {
        if (u == UNIT_HEAD(m)) m->p[t[k].id] = buf + t[k].off;
        else m->lp[(size_t)u * NUM_PARAM_TENSORS + t[k].id] = buf + t[k].off;
    }
    if (u < m->cfg.num_layers) gpt2_bind_layer_linears(m, u);
}

void gpt2_unit_pack(const GPT2* m, int u, floatX* buf) {
    GPT2UnitTensor t[NUM_PARAM_TENSORS];
    const int n = gpt2_unit_tensors(m, u, t);
    for (int k = 0; k < n; k++) // (a copy: x * 1 is exact)
        scale_copy(buf + t[k].off, u == UNIT_HEAD(m) ? m->p[t[k].id] : LP(m, t[k].id, u), 1.0f, t[k].n);
}

void gpt2_params_drop(GPT2* m) {
    if (m->params) ops_free(m->params);
    m->params = NULL;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++)
        if (!(m->resident & (1u << i))) gpt2_bind_tensor(m, i, NULL);
}

void gpt2_set_resident(GPT2* m, unsigned mask) {
    if (m->resident_buf || !m->params) fatal("this is a bug in llmc", "gpt2_set_resident: once, with the parameters full");
    size_t n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) if (mask & (1u << i)) n += m->pt.t[i].numel;
    if (!n) return;
    m->resident = mask;
    m->resident_buf = (floatX*)ops_alloc(n * sizeof(floatX));
    size_t off = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!(mask & (1u << i))) continue;
        scale_copy(m->resident_buf + off, m->p[i], 1.0f, m->pt.t[i].numel); // (a copy: x * 1 is exact)
        off += m->pt.t[i].numel;
    }
    gpt2_bind_full(m, m->params);
    gpt2_bind_linears(m);
}

void gpt2_params_full(GPT2* m) {
    if (!m->params) m->params = (floatX*)ops_alloc(m->params_n * sizeof(floatX));
    gpt2_bind_full(m, m->params);
    gpt2_bind_linears(m);
}

void gpt2_set_units(GPT2* m, const GPT2Units* units) { m->units = units; }

// One allocation for all activations: sizes listed once, pointers carved in order.
static size_t carve(void* base, void** ptrs[], const size_t* bytes, int n);
size_t gpt2_carved_bytes(const size_t* bytes, int n) { return carve(NULL, NULL, bytes, n); }
static size_t carve(void* base, void** ptrs[], const size_t* bytes, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (ptrs) *ptrs[i] = base ? (void*)((char*)base + off) : NULL;
        off += (bytes[i] + 255) & ~(size_t)255; // keep every buffer 256-byte aligned
    }
    return off;
}

void gpt2_set_recompute(GPT2* m, int level) {
    if (level < GPT2_RECOMPUTE_NONE || level > GPT2_RECOMPUTE_LN)
        fatal("use --recompute 0 (keep every activation), 1 (recompute GELU) or 2 (GELU and layernorms)",
              "recompute level %d is out of range", level);
    if (level != m->recompute && m->act_memory) m->B = m->T = 0; // carve again at the next alloc
    m->recompute = level;
}

// The batch-sized buffers of gpt2_alloc_acts.
static void gpt2_free_acts(GPT2* m) {
    ops_free(m->act_memory); ops_free(m->scr_memory);
    ops_free(m->inputs); ops_free(m->targets); ops_free(m->doc_start); ops_free(m->pos);
    ops_free(m->head_rows); ops_free(m->head_targets);
    free(m->losses_host); free(m->inputs_host); free(m->pos_host); free(m->head_host);
}

// The activation and scratch buffers' sizes in bytes, in the order of GPT2Acts / GPT2Scratch.
const char* const gpt2_act_names[GPT2_NACTS] = {
    "encoded", "ln1", "ln1_mean", "ln1_rstd", "qkv", "atty", "att_lse", "attproj", "residual2", "ln2", "ln2_mean",
    "ln2_rstd", "fch", "fch_gelu", "fcproj", "residual3", "lnf", "lnf_mean", "lnf_rstd", "cls_logits", "losses" };
const char* const gpt2_scratch_names[GPT2_NSCR] = { "dresidual", "dln", "datty", "dqkv", "dfch", "dfch_gelu", "ln_mean", "ln_rstd" };
void gpt2_act_sizes(const GPT2Config* cfg, int B, int T, int recompute, size_t X, size_t cls_rows, size_t abytes[GPT2_NACTS],
                    size_t sbytes[GPT2_NSCR]) {
    size_t L = (size_t)cfg->num_layers, C = (size_t)cfg->channels, NH = (size_t)cfg->num_heads;
    size_t BT = (size_t)B * T, Vp = (size_t)cfg->padded_vocab_size, F = sizeof(float);
    // layers kept: L, or 1 for the buffers backward recomputes (one layer at a time)
    size_t Lg = recompute >= GPT2_RECOMPUTE_GELU ? 1 : L, Lln = recompute >= GPT2_RECOMPUTE_LN ? 1 : L;
    const size_t a[GPT2_NACTS] = {
        BT * C * X, Lln * BT * C * X, L * BT * F, L * BT * F, L * BT * 3 * C * X,
        L * BT * C * X, L * B * NH * T * F, L * BT * C * X, L * BT * C * X, Lln * BT * C * X,
        L * BT * F, L * BT * F, L * BT * 4 * C * X, Lg * BT * 4 * C * X, L * BT * C * X,
        L * BT * C * X, BT * C * X, BT * F, BT * F, cls_rows * Vp * X,
        BT * F };
    const size_t sln = recompute >= GPT2_RECOMPUTE_LN ? BT * F : 0;
    const size_t sc[GPT2_NSCR] = { BT * C * X, BT * C * X, BT * C * X, BT * 3 * C * X, BT * 4 * C * X, BT * 4 * C * X, sln, sln };
    memcpy(abytes, a, sizeof(a));
    memcpy(sbytes, sc, sizeof(sc));
}

static void act_sizes(const GPT2Config* cfg, int B, int T, int recompute, size_t abytes[GPT2_NACTS], size_t sbytes[GPT2_NSCR]) {
    gpt2_act_sizes(cfg, B, T, recompute, sizeof(floatX), (size_t)classifier_rows(B * T), abytes, sbytes);
}

// inputs, targets, doc_start, pos, head_rows, head_targets
size_t gpt2_batch_bytes(int B, int T) { return 6 * (size_t)B * T * sizeof(int); }
static size_t batch_bytes(int B, int T) { return gpt2_batch_bytes(B, T); }

size_t gpt2_acts_bytes(const GPT2Config* cfg, int B, int T, int recompute, int backward) {
    size_t abytes[GPT2_NACTS], sbytes[GPT2_NSCR];
    act_sizes(cfg, B, T, recompute, abytes, sbytes);
    return carve(NULL, NULL, abytes, GPT2_NACTS) + carve(NULL, NULL, sbytes, GPT2_NSCR) + batch_bytes(B, T) +
           attention_scratch_bytes(B, T, cfg->channels, cfg->num_heads, backward);
}

size_t gpt2_acts_held(const GPT2* m) {
    return m->act_bytes + m->scr_bytes + m->batch_bytes + m->attn_bytes + m->lin->shared.scratch_bytes;
}

void gpt2_alloc_acts(GPT2* m, int B, int T, int backward) {
    if (m->act_memory && m->B == B && m->T == T && m->backward >= backward) return;
    if (T > m->cfg.max_seq_len)
        fatal("use a --seq-len (or prompt + new tokens) no larger than the model's n_positions",
              "sequences of %d tokens exceed the model's maximum sequence length %d (n_positions)", T, m->cfg.max_seq_len);
    if (m->act_memory) gpt2_free_acts(m);
    if (m->acts.logits) ops_free(m->acts.logits);
    m->acts.logits = NULL;
    m->B = B; m->T = T;
    const size_t BT = (size_t)B * T;
    size_t abytes[GPT2_NACTS], sbytes[GPT2_NSCR];
    act_sizes(&m->cfg, B, T, m->recompute, abytes, sbytes);
    GPT2Acts* a = &m->acts;
    void** aptr[GPT2_NACTS] = {
        (void**)&a->encoded, (void**)&a->ln1, (void**)&a->ln1_mean, (void**)&a->ln1_rstd, (void**)&a->qkv,
        (void**)&a->atty, (void**)&a->att_lse, (void**)&a->attproj, (void**)&a->residual2, (void**)&a->ln2,
        (void**)&a->ln2_mean, (void**)&a->ln2_rstd, (void**)&a->fch, (void**)&a->fch_gelu, (void**)&a->fcproj,
        (void**)&a->residual3, (void**)&a->lnf, (void**)&a->lnf_mean, (void**)&a->lnf_rstd, (void**)&a->cls_logits,
        (void**)&a->losses };
    m->act_bytes = carve(NULL, NULL, abytes, GPT2_NACTS);
    m->act_memory = ops_alloc(m->act_bytes);
    carve(m->act_memory, aptr, abytes, GPT2_NACTS);

    GPT2Scratch* s = &m->scr;
    void** sptr[GPT2_NSCR] = { (void**)&s->dresidual, (void**)&s->dln, (void**)&s->datty, (void**)&s->dqkv,
                               (void**)&s->dfch, (void**)&s->dfch_gelu, (void**)&s->ln_mean, (void**)&s->ln_rstd };
    m->scr_bytes = carve(NULL, NULL, sbytes, GPT2_NSCR);
    m->scr_memory = ops_alloc(m->scr_bytes);
    carve(m->scr_memory, sptr, sbytes, GPT2_NSCR);

    m->inputs = (int*)ops_alloc(BT * sizeof(int));
    m->targets = (int*)ops_alloc(BT * sizeof(int));
    m->doc_start = (int*)ops_alloc(BT * sizeof(int));
    m->pos = (int*)ops_alloc(BT * sizeof(int));
    m->head_rows = (int*)ops_alloc(BT * sizeof(int));
    m->head_targets = (int*)ops_alloc(BT * sizeof(int));
    m->losses_host = (float*)mallocCheck(BT * sizeof(float));
    m->inputs_host = (int*)mallocCheck(BT * sizeof(int));
    m->pos_host = (int*)mallocCheck(BT * sizeof(int));
    m->head_host = (int*)mallocCheck(2 * BT * sizeof(int));
    m->batch_bytes = batch_bytes(B, T);
    m->backward = backward;
    m->attn_bytes = attention_scratch_bytes(B, T, m->cfg.channels, m->cfg.num_heads, backward);
    attention_reserve(B, T, m->cfg.channels, m->cfg.num_heads, backward);
    linear_set_alloc(m->lin, B * T);
}

void gpt2_free(GPT2* m) {
    if (m->acts.logits) ops_free(m->acts.logits);
    if (m->act_memory) gpt2_free_acts(m);
    if (m->params) ops_free(m->params);
    if (m->resident_buf) ops_free(m->resident_buf);
    if (m->grads) ops_free(m->grads);
    free(m->lp);
    linear_set_free(m->lin);
    memset(m, 0, sizeof(*m));
}

void gpt2_set_params(GPT2* m, const float* host) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++)
        if (m->p[i]) ops_upload_f32(m->p[i], host + m->pt.t[i].offset, m->pt.t[i].numel);
}

void gpt2_get_params(GPT2* m, float* host) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        float* h = host + m->pt.t[i].offset;
        const int kind = linear_kind_of((ParamId)i);
        const size_t per_layer = params_layer_numel(&m->pt, (ParamId)i);
        if (m->p[i]) ops_download_f32(h, m->p[i], m->pt.t[i].numel);
        else if (kind >= 0) // a linear weight held another way: its layers' weight source
            for (int l = 0; l < m->cfg.num_layers; l++) linear_weight_to_host(LIN(m, l, kind), h + (size_t)l * per_layer);
        else memset(h, 0, m->pt.t[i].numel * sizeof(float));
    }
}

floatX* gpt2_param_slice(const GPT2* m, ParamId id, int l) {
    return !m->p[id] ? NULL : l < 0 || !m->pt.t[id].per_layer ? m->p[id] : LP(m, id, l);
}
floatX* gpt2_grad_slice(const GPT2* m, ParamId id, int l) {
    return l < 0 || !m->pt.t[id].per_layer ? m->g[id] : LG(m, id, l);
}

void gpt2_zero_grads(GPT2* m) {
    if (m->grads) ops_zero(m->grads, m->grads_n * sizeof(floatX));
    linear_set_zero_grads(m->lin);
}

size_t gpt2_param_bytes(const GPT2* m) { return m->params_n * sizeof(floatX); }
size_t gpt2_grad_bytes(const GPT2* m) { return m->grads_n * sizeof(floatX); }
size_t gpt2_resident_bytes(const GPT2* m) {
    size_t n = 0;
    for (int i = 0; m->resident_buf && i < NUM_PARAM_TENSORS; i++) if (m->resident & (1u << i)) n += m->pt.t[i].numel;
    return n * sizeof(floatX);
}

void gpt2_embed_forward(GPT2* m, floatX* x, floatX* ln, float* mean, float* rstd, const int* tokens,
                        const int* positions, int B, int T, int pos) {
    const int C = m->cfg.channels;
    // positions pos.. use rows pos.. of wpe
    UNIT_NEED(m, UNIT_HEAD(m));
    UNIT_PREFETCH(m, 0);
    encoder_forward(x, tokens, m->p[PT_WTE], m->p[PT_WPE] + (size_t)pos * C, positions, B, T, C);
    UNIT_RELEASE(m, UNIT_HEAD(m));
    // The first layernorm stands alone; every later one is fused with the residual add before it.
    UNIT_NEED(m, 0);
    layernorm_forward(ln, mean, rstd, x, LP(m, PT_LN1W, 0), LP(m, PT_LN1B, 0), B * T, C);
}

void gpt2_block_forward(GPT2* m, int l, const GPT2BlockIO* io, int B, int T, const GPT2KVSlot* kv) {
    const int L = m->cfg.num_layers, C = m->cfg.channels, NH = m->cfg.num_heads, N = B * T;
    const int next = l + 1 < L ? l + 1 : UNIT_HEAD(m); // the unit whose layernorm ends this block
    UNIT_NEED(m, l);
    UNIT_PREFETCH(m, next);
    linear_forward(LIN(m, l, LINEAR_QKV), io->qkv, NULL, io->ln1, N);
    if (kv && kv->k16) attention_forward_kv16(io->atty, io->qkv, kv->k16, kv->v16, B, kv->pos, T, kv->maxT, C, NH);
    else if (kv) attention_forward_kv(io->atty, io->qkv, kv->k, kv->v, B, kv->pos, T, kv->maxT, C, NH);
    else attention_forward(io->atty, io->lse, io->qkv, m->packed ? m->doc_start : NULL, B, T, C, NH);
    linear_forward(LIN(m, l, LINEAR_ATTPROJ), io->attproj, NULL, io->atty, N);
    fused_residual_layernorm_forward(io->residual2, io->ln2, io->ln2_mean, io->ln2_rstd, io->residual, io->attproj,
                                     LP(m, PT_LN2W, l), LP(m, PT_LN2B, l), N, C);
    linear_forward(LIN(m, l, LINEAR_FC), io->fch, io->fch_gelu, io->ln2, N);
    linear_forward(LIN(m, l, LINEAR_FCPROJ), io->fcproj, NULL, io->fch_gelu, N);
    // the block's output, and the next layernorm of the residual stream: block l + 1's ln_1, or ln_f
    UNIT_NEED(m, next);
    const floatX* w = l + 1 < L ? LP(m, PT_LN1W, l + 1) : m->p[PT_LNFW];
    const floatX* b = l + 1 < L ? LP(m, PT_LN1B, l + 1) : m->p[PT_LNFB];
    fused_residual_layernorm_forward(io->residual3, io->ln_next, io->ln_next_mean, io->ln_next_rstd, io->residual2, io->fcproj,
                                     w, b, N, C);
    UNIT_RELEASE(m, l);
}

// Block l's slices of the training activations (every layer kept, or one layer for what backward
// recomputes).
static GPT2BlockIO block_io(GPT2* m, int l, int B, int T) {
    const int L = m->cfg.num_layers, N = B * T;
    const size_t BTC = (size_t)N * m->cfg.channels;
    const int keep_gelu = m->recompute < GPT2_RECOMPUTE_GELU, keep_ln = m->recompute < GPT2_RECOMPUTE_LN;
    GPT2Acts* a = &m->acts;
    GPT2BlockIO io;
    io.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BTC;
    io.ln1 = LA(a->ln1, l, BTC, keep_ln);
    io.qkv = a->qkv + l * BTC * 3;
    io.atty = a->atty + l * BTC;
    io.lse = a->att_lse + (size_t)l * B * m->cfg.num_heads * T;
    io.attproj = a->attproj + l * BTC;
    io.residual2 = a->residual2 + l * BTC;
    io.ln2 = LA(a->ln2, l, BTC, keep_ln);
    io.ln2_mean = a->ln2_mean + (size_t)l * N;
    io.ln2_rstd = a->ln2_rstd + (size_t)l * N;
    io.fch = a->fch + l * BTC * 4;
    io.fch_gelu = LA(a->fch_gelu, l, BTC * 4, keep_gelu);
    io.fcproj = a->fcproj + l * BTC;
    io.residual3 = a->residual3 + l * BTC;
    io.ln_next = l + 1 < L ? LA(a->ln1, l + 1, BTC, keep_ln) : a->lnf;
    io.ln_next_mean = l + 1 < L ? a->ln1_mean + (size_t)(l + 1) * N : a->lnf_mean;
    io.ln_next_rstd = l + 1 < L ? a->ln1_rstd + (size_t)(l + 1) * N : a->lnf_rstd;
    return io;
}

void gpt2_wte_to_bf16(const GPT2* m, uint16_t* dst) {
    const size_t C = (size_t)m->cfg.channels, Vp = (size_t)m->cfg.padded_vocab_size, rows = GPT2_WTE16_ROWS;
    float* f = (float*)mallocCheck(rows * C * sizeof(float));
    uint16_t* h = (uint16_t*)mallocCheck(rows * C * sizeof(uint16_t));
    for (size_t r0 = 0; r0 < Vp; r0 += rows) {
        const size_t n = (Vp - r0 < rows ? Vp - r0 : rows) * C;
        ops_download_f32(f, m->p[PT_WTE] + r0 * C, n);
        for (size_t i = 0; i < n; i++) h[i] = bf16_from_f32(f[i]);
        ops_to_device(dst + r0 * C, h, n * sizeof(uint16_t));
    }
    free(f);
    free(h);
}

// The logits of all N rows into acts.logits, for the callers that read them (tests, sampling
// without the key/value cache): allocated by the first forward without targets (training never
// makes one).
static void gpt2_logits_forward(GPT2* m, int N) {
    GPT2Acts* a = &m->acts;
    const size_t rows = (size_t)m->B * m->T, Vp = (size_t)m->cfg.padded_vocab_size;
    if (!a->logits) a->logits = (floatX*)ops_alloc(rows * Vp * sizeof(floatX));
    if (m->wte_q8) matmul_forward_q8(a->logits, NULL, a->lnf, m->wte_q8, NULL, N, m->cfg.channels, (int)Vp);
    else if (m->wte16) matmul_forward_w16(a->logits, NULL, a->lnf, m->wte16, NULL, N, m->cfg.channels, (int)Vp);
    else matmul_forward(a->logits, NULL, a->lnf, m->p[PT_WTE], NULL, N, m->cfg.channels, (int)Vp);
}

// The record boundaries of a forward (doc_start on the host, or NULL): each row must be contiguous
// records. The positions in the records go to the encoder, the starts to attention, both uploaded
// only when some row has a boundary; a batch without one runs as plain rows (m->packed = 0).
static void gpt2_set_docs(GPT2* m, const int* doc_start, int B, int T) {
    m->packed = 0;
    if (!doc_start) return;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int i = b * T + t, d = doc_start[i];
            if (t == 0 ? d != 0 : d != doc_start[i - 1] && d != t)
                fatal("this is a bug in llmc (record starts come from the data loader)",
                      "doc_start[%d][%d] = %d: not the start of a run of positions", b, t, d);
            m->pos_host[i] = t - d;
            m->packed |= d != 0;
        }
    if (!m->packed) return;
    if (!ops_caps().doc_attention)
        fatal("train packed data (data/prepare --pack) with the CPU build, or prepare it with --record-windows",
              "the %s backend's attention does not keep packed records apart", ops_backend_name());
    ops_to_device_async(m->doc_start, doc_start, (size_t)B * T * sizeof(int));
    ops_to_device_async(m->pos, m->pos_host, (size_t)B * T * sizeof(int));
}

// The rows of a forward that have a target (head_rows, in order, and their targets), on the host
// from the targets and uploaded with the batch: the whole lists, so that each step stages as
// many bytes (llmc/cuda/backend.cu ops_stage_host grows once).
static void gpt2_head_rows(GPT2* m, const int* targets, int N) {
    int* rows = m->head_host;
    int* tg = m->head_host + N;
    int k = 0;
    for (int i = 0; i < N; i++)
        if (targets[i] >= 0) { rows[k] = i; tg[k] = targets[i]; k++; }
    for (int i = k; i < N; i++) rows[i] = tg[i] = 0;
    m->head_k = k;
    if (k == N) return;   // every row: the classifier reads the rows and targets in place
    ops_to_device_async(m->head_rows, rows, (size_t)N * sizeof(int));
    ops_to_device_async(m->head_targets, tg, (size_t)N * sizeof(int));
}

// The classifier (lm_head, losses, and with dloss != 0 or dloss_rows their backward into dln and
// wte's gradient) on the rows that have a target only: a row without one has a loss of 0 and no
// gradient, so its logits need not exist. Prompt tokens masked out of supervised fine-tuning and
// the prompts of preference pairs are often half the rows or more, and the lm_head's three GEMMs
// (2 N C Vp FLOPs each: 77 MFLOP a row at GPT-2 small) are about a third of a step's work. With
// some rows left out, the rows with a target are gathered into the backward scratch, which is
// free until gpt2_backward (x: datty, dx: dresidual, losses and row weights: dqkv), and the
// losses and dx scattered back in place. dloss_rows: each row's weight (the preference
// objectives, classifier_train_rows), or NULL: dloss for every row.
static void gpt2_head(GPT2* m, float dloss, const float* dloss_rows) {
    const int N = m->cur_B * m->cur_T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    const int K = m->head_k, train = dloss != 0.0f;
    GPT2Acts* a = &m->acts;
    GPT2Scratch* s = &m->scr;
    floatX* dx = train ? s->dln : NULL;
    floatX* dw = train ? m->g[PT_WTE] : NULL;
    const floatX* w = m->p[PT_WTE];
    const uint16_t* w16 = m->wte16;
    if (dx) ops_zero(dx, (size_t)N * C * sizeof(floatX));
    if (K == N) {
        if (dloss_rows) classifier_train_rows(a->losses, dx, dw, a->cls_logits, a->lnf, w, w16, m->targets, dloss_rows, N, C, V, Vp);
        else classifier_train(a->losses, dx, dw, a->cls_logits, a->lnf, w, w16, m->targets, dloss, N, C, V, Vp);
        return;
    }
    ops_zero(a->losses, (size_t)N * sizeof(float));
    if (K == 0) return;
    floatX* xk = s->datty;
    floatX* dxk = train ? s->dresidual : NULL;
    float* lk = (float*)s->dqkv;
    float* wk = dloss_rows ? lk + N : NULL;
    const size_t row = (size_t)C * sizeof(floatX);
    rows_gather(xk, a->lnf, m->head_rows, K, row);
    if (dxk) ops_zero(dxk, (size_t)K * row);
    if (wk) {
        rows_gather(wk, dloss_rows, m->head_rows, K, sizeof(float));
        classifier_train_rows(lk, dxk, dw, a->cls_logits, xk, w, w16, m->head_targets, wk, K, C, V, Vp);
    } else classifier_train(lk, dxk, dw, a->cls_logits, xk, w, w16, m->head_targets, dloss, K, C, V, Vp);
    rows_scatter(a->losses, lk, m->head_rows, K, sizeof(float));
    if (dxk) rows_scatter(dx, dxk, m->head_rows, K, row);
}

// The forward up to the per-token losses (acts.losses, when targets are given).
static void gpt2_forward_run(GPT2* m, const int* inputs, const int* targets, const int* doc_start, int B, int T, float dloss) {
    if (B > m->B || T > m->T) fatal("this is a bug in llmc", "forward with B=%d T=%d beyond allocated %d x %d", B, T, m->B, m->T);
    const int L = m->cfg.num_layers, V = m->cfg.vocab_size;
    const int N = B * T;
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            fatal("the data was tokenized with a different vocabulary than the model's",
                  "input token id %d at position %d is out of range for the model's vocabulary (%d)", inputs[i], i, V);
        if (targets && targets[i] >= V)
            fatal("the data was tokenized with a different vocabulary than the model's",
                  "target token id %d at position %d is out of range for the model's vocabulary (%d)", targets[i], i, V);
    }
    m->cur_B = B; m->cur_T = T;
    memcpy(m->inputs_host, inputs, (size_t)N * sizeof(int));
    ops_to_device_async(m->inputs, inputs, (size_t)N * sizeof(int));
    if (targets) ops_to_device_async(m->targets, targets, (size_t)N * sizeof(int));
    gpt2_set_docs(m, doc_start, B, T);
    GPT2Acts* a = &m->acts;
    gpt2_embed_forward(m, a->encoded, a->ln1, a->ln1_mean, a->ln1_rstd, m->inputs, m->packed ? m->pos : NULL, B, T, 0);
    for (int l = 0; l < L; l++) {
        GPT2BlockIO io = block_io(m, l, B, T);
        gpt2_block_forward(m, l, &io, B, T, NULL);
    }
    // lm_head is tied to wte: logits = lnf @ wte^T over the padded vocabulary.
    UNIT_NEED(m, UNIT_HEAD(m));
    m->has_targets = targets != NULL && dloss != 0.0f;
    if (!targets) { gpt2_logits_forward(m, N); UNIT_RELEASE(m, UNIT_HEAD(m)); return; }
    // With targets, the classifier op does lm_head, the losses and (training) their backward as
    // far as lnf and wte (gpt2_head). dlnf waits in the backward scratch's dln for gpt2_backward.
    gpt2_head_rows(m, targets, N);
    gpt2_head(m, dloss, NULL);
    if (!m->has_targets) UNIT_RELEASE(m, UNIT_HEAD(m)); // (else backward starts with this unit: ln_f)
}

double gpt2_forward(GPT2* m, const int* inputs, const int* targets, const int* doc_start, int B, int T, float dloss,
                    long* n_valid) {
    gpt2_forward_run(m, inputs, targets, doc_start, B, T, dloss);
    if (!targets) { if (n_valid) *n_valid = 0; return 0.0; }
    const int N = B * T;
    ops_to_host(m->losses_host, m->acts.losses, (size_t)N * sizeof(float));
    double sum = 0.0; long cnt = 0;
    for (int i = 0; i < N; i++) if (targets[i] >= 0) { sum += m->losses_host[i]; cnt++; }
    if (n_valid) *n_valid = cnt;
    return sum;
}

void gpt2_forward_acc(GPT2* m, const int* inputs, const int* targets, const int* doc_start, int B, int T, float dloss,
                      double* loss_acc) {
    if (!targets) fatal("this is a bug in llmc", "gpt2_forward_acc without targets");
    gpt2_forward_run(m, inputs, targets, doc_start, B, T, dloss);
    // ignored targets have a loss of 0 (fused_classifier): the sum over every row is the sum over valid ones
    sum_f32_acc(loss_acc, m->acts.losses, (size_t)B * T);
}

void gpt2_classifier_backward_rows(GPT2* m, const float* dloss_rows) {
    const int N = m->cur_B * m->cur_T;
    if (!N || m->has_targets) fatal("this is a bug in llmc", "gpt2_classifier_backward_rows needs a forward with targets and dloss 0 before it");
    UNIT_NEED(m, UNIT_HEAD(m));
    gpt2_head(m, 1.0f, dloss_rows);
    m->has_targets = 1; // (gpt2_backward goes on from here, the head unit still needed)
}

void gpt2_backward(GPT2* m, const GPT2GradSink* sink) {
    if (!m->has_targets) fatal("this is a bug in llmc", "gpt2_backward without a training forward (targets and dloss != 0)");
    const int B = m->cur_B, T = m->cur_T;
    const int L = m->cfg.num_layers, C = m->cfg.channels, NH = m->cfg.num_heads;
    const int N = B * T;
    const size_t BTC = (size_t)N * C;
    GPT2Acts* a = &m->acts;
    GPT2Scratch* s = &m->scr;

    // the training forward did lm_head's backward: s->dln holds dlnf, wte has its first gradient
    // (ZeRO 3: in the head's gradient bucket, reduced after the whole backward); ln_f's is next
    // Each activation gradient from here on is written by its first contribution (accumulate 0)
    // rather than zeroed and added to; only dresidual, which every layernorm adds into, accumulates.
    UNIT_NEED(m, UNIT_HEAD(m));
    UNIT_PREFETCH(m, L - 1);
    layernorm_backward(s->dresidual, m->g[PT_LNFW], m->g[PT_LNFB], s->dln, a->residual3 + (size_t)(L - 1) * BTC,
                       m->p[PT_LNFW], a->lnf_mean, a->lnf_rstd, N, C, 0);
    UNIT_RELEASE(m, UNIT_HEAD(m));

    const int keep_gelu = m->recompute < GPT2_RECOMPUTE_GELU, keep_ln = m->recompute < GPT2_RECOMPUTE_LN;
    for (int l = L - 1; l >= 0; l--) {
        UNIT_NEED(m, l);
        if (l > 0) UNIT_PREFETCH(m, l - 1);
        const floatX* residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BTC;
        // dresidual is the gradient of this layer's output residual3 = residual2 + fcproj; it
        // flows unchanged into residual2 and is also the gradient of fcproj.
        floatX* fch = a->fch + l * BTC * 4;
        floatX* fch_gelu = LA(a->fch_gelu, l, BTC * 4, keep_gelu);
        if (!keep_gelu) gelu_forward(fch_gelu, fch, BTC * 4);
        // through c_proj and the GELU at once: dfch = gelu'(fch) * (dresidual W_proj + adapter)
        linear_backward_gelu(LIN(m, l, LINEAR_FCPROJ), s->dfch, s->dfch_gelu, s->dresidual, fch_gelu, fch, N);
        floatX* ln2 = LA(a->ln2, l, BTC, keep_ln);
        if (!keep_ln) // same op and input as the forward's fused residual + layernorm: same rounding
            layernorm_forward(ln2, s->ln_mean, s->ln_rstd, a->residual2 + l * BTC, LP(m, PT_LN2W, l), LP(m, PT_LN2B, l), N, C);
        linear_backward(LIN(m, l, LINEAR_FC), s->dln, s->dfch, ln2, N, 0);
        layernorm_backward(s->dresidual, LG(m, PT_LN2W, l), LG(m, PT_LN2B, l), s->dln,
                           a->residual2 + l * BTC, LP(m, PT_LN2W, l),
                           a->ln2_mean + (size_t)l * N, a->ln2_rstd + (size_t)l * N, N, C, 1);
        // dresidual is now the gradient of residual2 = residual + attproj.
        linear_backward(LIN(m, l, LINEAR_ATTPROJ), s->datty, s->dresidual, a->atty + l * BTC, N, 0);
        attention_backward(s->dqkv, s->datty, a->qkv + l * BTC * 3, a->atty + l * BTC,
                           a->att_lse + (size_t)l * B * NH * T, m->packed ? m->doc_start : NULL, B, T, C, NH, 0);
        floatX* ln1 = LA(a->ln1, l, BTC, keep_ln);
        if (!keep_ln)
            layernorm_forward(ln1, s->ln_mean, s->ln_rstd, residual, LP(m, PT_LN1W, l), LP(m, PT_LN1B, l), N, C);
        linear_backward(LIN(m, l, LINEAR_QKV), s->dln, s->dqkv, ln1, N, 0);
        layernorm_backward(s->dresidual, LG(m, PT_LN1W, l), LG(m, PT_LN1B, l), s->dln,
                           residual, LP(m, PT_LN1W, l),
                           a->ln1_mean + (size_t)l * N, a->ln1_rstd + (size_t)l * N, N, C, 1);
        UNIT_RELEASE(m, l);
        if (sink) sink->bucket_done(sink->ctx, L - 1 - l);
    }
    encoder_backward(m->g[PT_WTE], m->g[PT_WPE], s->dresidual, m->inputs, m->inputs_host,
                     m->packed ? m->pos : NULL, m->packed ? m->pos_host : NULL, B, T, C);
    if (sink) sink->bucket_done(sink->ctx, L);
}
