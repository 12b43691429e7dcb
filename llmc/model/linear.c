#include "model/linear.h"
#include "base/check.h"
#include "base/bf16.h"
#include "base/gguf.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define DROPOUT_SEED_MIX 0xD80F0D80Full // mixed into the dropout seed: masks apart from other draws

static const ParamId WEIGHT_ID[LINEAR_PER_BLOCK] = {PT_QKVW, PT_ATTPROJW, PT_FCW, PT_FCPROJW};

ParamId linear_weight_id(int kind) { return WEIGHT_ID[kind]; }

int linear_kind_of(ParamId id) {
    for (int k = 0; k < LINEAR_PER_BLOCK; k++) if (WEIGHT_ID[k] == id) return k;
    return -1;
}

// ----------------------------------------------------------------------------
// the set

LinearSet* linear_set_create(const ParamTable* pt) {
    LinearSet* s = (LinearSet*)callocCheck(1, sizeof(LinearSet));
    s->n_layers = pt->cfg.num_layers;
    s->layers = (Linear*)callocCheck((size_t)s->n_layers * LINEAR_PER_BLOCK, sizeof(Linear));
    for (int l = 0; l < s->n_layers; l++)
        for (int k = 0; k < LINEAR_PER_BLOCK; k++) {
            Linear* x = linear_at(s, l, k);
            x->out = (int)pt->t[WEIGHT_ID[k]].rows;
            x->in = (int)pt->t[WEIGHT_ID[k]].cols;
            x->sh = &s->shared;
        }
    return s;
}

static void free_adapter_scratch(LinearShared* sh) {
    if (!sh->xd) return;
    ops_free(sh->xd); ops_free(sh->h); ops_free(sh->dh); ops_free(sh->tmp);
    if (sh->z) { ops_free(sh->z); ops_free(sh->dz); }
    sh->xd = sh->h = sh->dh = sh->tmp = sh->z = sh->dz = NULL;
    sh->scratch_bytes = 0;
}

void linear_set_free(LinearSet* s) {
    if (!s) return;
    free_adapter_scratch(&s->shared);
    if (s->shared.wbuf) ops_free(s->shared.wbuf);
    free(s->layers);
    free(s);
}

Linear* linear_at(LinearSet* s, int layer, int kind) {
    if (layer < 0 || layer >= s->n_layers || kind < 0 || kind >= LINEAR_PER_BLOCK)
        fatal("this is a bug in llmc", "linear layer (%d, %d) of a model with %d layers", layer, kind, s->n_layers);
    return &s->layers[(size_t)layer * LINEAR_PER_BLOCK + kind];
}

void linear_set_alloc(LinearSet* s, int rows) {
    LinearShared* sh = &s->shared;
    size_t wmax = 0;
    int max_in = 0, max_r = 0, max_out_dora = 0;
    for (int i = 0; i < s->n_layers * LINEAR_PER_BLOCK; i++) {
        const Linear* x = &s->layers[i];
        const size_t n = (size_t)x->out * x->in;
        if (x->w.kind == LINEAR_W_NF4 && n > wmax) wmax = n;
        if (!x->has_adapter) continue;
        if (x->in > max_in) max_in = x->in;
        if (x->ad.rank > max_r) max_r = x->ad.rank;
        if (x->ad.m && x->out > max_out_dora) max_out_dora = x->out;
    }
    if (wmax && !sh->wbuf) {
        sh->wbuf = (floatX*)ops_alloc(wmax * sizeof(floatX));
        sh->wbuf_n = wmax;
    }
    if (!sh->n_adapters || (sh->xd && sh->rows >= rows)) return;
    free_adapter_scratch(sh);
    const size_t N = (size_t)rows, X = sizeof(floatX);
    // the dropped input and the input gradient through the mask are only needed with dropout;
    // keep token allocations otherwise
    const size_t nd = sh->dropout > 0.0f ? N * max_in : 1;
    sh->xd = (floatX*)ops_alloc(nd * X);
    sh->h = (floatX*)ops_alloc(N * max_r * X);
    sh->dh = (floatX*)ops_alloc(N * max_r * X);
    sh->tmp = (floatX*)ops_alloc(nd * X);
    if (max_out_dora) {
        sh->z = (floatX*)ops_alloc(N * max_out_dora * X);
        sh->dz = (floatX*)ops_alloc(N * max_out_dora * X);
    }
    sh->rows = rows;
    sh->scratch_bytes = linear_adapter_scratch_bytes(N, max_in, max_r, max_out_dora, sh->dropout > 0.0f);
}

size_t linear_adapter_scratch_numel(size_t rows, int max_in, int max_rank, int max_out_dora, int dropout) {
    return 2 * (dropout ? rows * (size_t)max_in : 1) + 2 * rows * (size_t)max_rank + 2 * rows * (size_t)max_out_dora;
}
size_t linear_adapter_scratch_bytes(size_t rows, int max_in, int max_rank, int max_out_dora, int dropout) {
    return linear_adapter_scratch_numel(rows, max_in, max_rank, max_out_dora, dropout) * sizeof(floatX);
}

int linear_set_rows(const LinearSet* s) { return s->shared.n_adapters ? s->shared.rows : INT_MAX; }

void linear_set_dropout(LinearSet* s, float p, uint64_t seed) {
    if (s->shared.xd && p > 0.0f && s->shared.dropout == 0.0f)
        fatal("this is a bug in llmc", "linear_set_dropout after the adapter scratch was sized without dropout");
    s->shared.dropout = p;
    s->shared.seed = seed;
}

void linear_set_training(LinearSet* s, int training, uint64_t tick) {
    s->shared.training = training;
    s->shared.tick = tick;
}

void linear_set_adapters(LinearSet* s, int on) { s->shared.adapters_off = !on; }

void linear_set_zero_grads(LinearSet* s) {
    for (int i = 0; i < s->n_layers * LINEAR_PER_BLOCK; i++) {
        const Linear* x = &s->layers[i];
        if (!x->has_adapter) continue;
        ops_zero(x->ad.dA, (size_t)x->ad.rank * x->in * sizeof(floatX));
        ops_zero(x->ad.dB, (size_t)x->out * x->ad.rank * sizeof(floatX));
        if (x->ad.dm) ops_zero(x->ad.dm, (size_t)x->out * sizeof(floatX));
    }
}

void linear_set_dora_cache(LinearSet* s, int on) {
    s->shared.dora_cache = on;
    for (int i = 0; i < s->n_layers * LINEAR_PER_BLOCK; i++)
        if (s->layers[i].has_adapter && s->layers[i].ad.norm_ready) *s->layers[i].ad.norm_ready = 0;
}

// ----------------------------------------------------------------------------
// weight sources

void linear_use_dense(Linear* x, const floatX* W) {
    x->w.kind = LINEAR_W_DENSE;
    x->w.dense = W;
}

void linear_use_nf4(Linear* x, const NF4Tensor* t, const Nf4Op* op) {
    if (t->ndim != 2 || t->shape[0] != x->out || t->shape[1] != x->in)
        fatal("this is a bug in llmc", "NF4 weight of %d dims for a [%d, %d] linear layer", t->ndim, x->out, x->in);
    x->w.kind = LINEAR_W_NF4;
    x->w.nf4 = t;
    x->w.nf4_op = op;
}

void linear_use_bf16(Linear* x, const uint16_t* W) {
    x->w.kind = LINEAR_W_BF16;
    x->w.bf16 = W;
}

void linear_use_q8(Linear* x, const uint8_t* W) {
    if (x->in % OPS_Q8_BLOCK) fatal("this is a bug in llmc", "Q8_0 weight for a layer of %d inputs (not a multiple of %d)", x->in, OPS_Q8_BLOCK);
    x->w.kind = LINEAR_W_Q8;
    x->w.q8 = W;
}

void linear_set_adapter(Linear* x, const LinearAdapter* a) {
    if (!x->has_adapter) x->sh->n_adapters++;
    x->ad = *a;
    x->has_adapter = 1;
}

// The weight [out, in] for a matmul: the dense tensor itself, or the weight decoded into the
// shared buffer (valid until the next layer decodes its own).
static const floatX* linear_weight(const Linear* x) {
    switch (x->w.kind) {
    case LINEAR_W_DENSE: return x->w.dense;
    case LINEAR_W_NF4:
        if (!x->sh->wbuf) fatal("this is a bug in llmc", "NF4 linear layer used before linear_set_alloc");
        nf4_dequantize_op(x->sh->wbuf, x->w.nf4_op, 0, (size_t)x->out);
        return x->sh->wbuf;
    default: break;
    }
    fatal("this is a bug in llmc", "linear layer [%d, %d] has no weight source", x->out, x->in);
    return NULL;
}

// The weight for the matmul ops that take floatX, or NULL for a bf16 or Q8_0 weight (their own ops).
static const floatX* layer_weight(const Linear* x) {
    return x->w.kind == LINEAR_W_BF16 || x->w.kind == LINEAR_W_Q8 ? NULL : linear_weight(x);
}

void linear_weight_to_host(const Linear* x, float* out) {
    switch (x->w.kind) {
    case LINEAR_W_DENSE: ops_download_f32(out, x->w.dense, (size_t)x->out * x->in); return;
    case LINEAR_W_NF4: nf4_dequantize(x->w.nf4, out); return;
    case LINEAR_W_BF16: {
        const size_t n = (size_t)x->out * x->in;
        uint16_t* h = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        ops_to_host(h, x->w.bf16, n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) out[i] = bf16_to_f32(h[i]);
        free(h);
        return;
    }
    case LINEAR_W_Q8: {
        const size_t n = (size_t)x->out * x->in, bytes = n / OPS_Q8_BLOCK * OPS_Q8_BLOCK_BYTES;
        uint8_t* h = (uint8_t*)mallocCheck(bytes);
        ops_to_host(h, x->w.q8, bytes);
        gguf_dequantize_q8_0(h, out, n);
        free(h);
        return;
    }
    default: break;
    }
    fatal("this is a bug in llmc", "linear layer [%d, %d] has no weight source", x->out, x->in);
}

// ----------------------------------------------------------------------------
// the adapter branch

// The mask's RNG stream: (training tick, layer's stream); 4 * 256 layers < 2^12.
static uint64_t dropout_stream(const Linear* x) { return (x->sh->tick << 12) | (uint64_t)x->ad.stream; }

// The input of the branch: inp itself, or (dropout while training) its dropped-out copy.
static const floatX* branch_input(const Linear* x, const floatX* inp, int N) {
    const LinearShared* sh = x->sh;
    if (!(sh->training && sh->dropout > 0.0f)) return inp;
    dropout_forward(sh->xd, inp, (size_t)N * x->in, sh->dropout, sh->seed ^ DROPOUT_SEED_MIX, dropout_stream(x));
    return sh->xd;
}

// h = scaling * drop(inp) A^T (N x rank) into the scratch; returns drop(inp).
static const floatX* branch_h(const Linear* x, const floatX* inp, int N) {
    const LinearAdapter* a = &x->ad;
    if (N > x->sh->rows) fatal("this is a bug in llmc", "adapter scratch for %d rows used with %d", x->sh->rows, N);
    const floatX* xin = branch_input(x, inp, N);
    matmul_forward(x->sh->h, NULL, xin, a->A, NULL, N, x->in, a->rank);
    scale_copy(x->sh->h, x->sh->h, a->scaling, (size_t)N * a->rank);
    return xin;
}

// out += h B^T, the GEMM adding to the base's output. Only N x rank intermediates.
static void adapter_forward(const Linear* x, floatX* out, const floatX* inp, int N) {
    branch_h(x, inp, N);
    matmul_forward_acc(out, x->sh->h, x->ad.B, N, x->ad.rank, x->out);
}

// The branch's backward from h (in the scratch, from branch_h) and the branch's input xin: dB, dA,
// and the input gradient added to dinp, through the dropout mask when xin is the dropped copy
// (with tmp_acc, added to what the scratch tmp holds first).
static void adapter_backward_h(const Linear* x, floatX* dinp, const floatX* dout, const floatX* inp, const floatX* xin,
                               int N, int tmp_acc) {
    const LinearAdapter* a = &x->ad;
    LinearShared* sh = x->sh;
    const size_t Nr = (size_t)N * a->rank;
    // out = h B^T: dB += dout^T h, dh = dout B
    matmul_backward(sh->dh, a->dB, NULL, dout, sh->h, a->B, N, a->rank, x->out, 0);
    if (a->b_mask) mul_inplace(a->dB, a->b_mask, (size_t)x->out * a->rank);
    // h = scaling * x A^T: dA += scaling dh^T x, dx += scaling dh A
    scale_copy(sh->dh, sh->dh, a->scaling, Nr);
    if (xin == inp) {
        matmul_backward(dinp, a->dA, NULL, sh->dh, xin, a->A, N, x->in, a->rank, 1);
        return;
    }
    const size_t nx = (size_t)N * x->in;
    matmul_backward(sh->tmp, a->dA, NULL, sh->dh, xin, a->A, N, x->in, a->rank, tmp_acc);
    // d/dx of drop(x) is the same mask and scale
    dropout_forward(sh->tmp, sh->tmp, nx, sh->dropout, sh->seed ^ DROPOUT_SEED_MIX, dropout_stream(x));
    add_inplace(dinp, sh->tmp, nx);
}

static void adapter_backward(const Linear* x, floatX* dinp, const floatX* dout, const floatX* inp, int N) {
    // h is recomputed (cheaper than keeping it per layer; the dropout mask is regenerated from
    // the counter RNG, so it is the forward's mask exactly)
    const floatX* xin = branch_h(x, inp, N);
    adapter_backward_h(x, dinp, dout, inp, xin, N, 0);
}

// A Q8_0 weight is for sampling and scoring only.
static void linear_check_backward(const Linear* x) {
    if (x->w.kind == LINEAR_W_Q8) fatal("this is a bug in llmc", "a backward through a Q8_0 weight [%d, %d]", x->out, x->in);
}

// ----------------------------------------------------------------------------
// DoRA

// The base's matmul by the weight W layer_weight gave (NULL: the layer's bf16 or Q8_0 weight), with
// the bias given (DoRA adds the layer's after its scale), and its input gradient.
static void base_mm(const Linear* x, floatX* out, floatX* gelu_out, const floatX* inp, const floatX* W, const floatX* bias, int N) {
    if (x->w.kind == LINEAR_W_BF16) matmul_forward_w16(out, gelu_out, inp, x->w.bf16, bias, N, x->in, x->out);
    else if (x->w.kind == LINEAR_W_Q8) matmul_forward_q8(out, gelu_out, inp, x->w.q8, bias, N, x->in, x->out);
    else matmul_forward(out, gelu_out, inp, W, bias, N, x->in, x->out);
}
static void base_mm_backward(const Linear* x, floatX* dinp, floatX* db, const floatX* dout, const floatX* W, int N, int accumulate) {
    if (x->w.kind == LINEAR_W_BF16) matmul_backward_w16(dinp, db, dout, x->w.bf16, N, x->in, x->out, accumulate);
    else matmul_backward(dinp, NULL, db, dout, NULL, W, N, x->in, x->out, accumulate);
}

// The row norms of W + scaling B A into the adapter's norm (W: layer_weight's); with the set's
// cache on, once until it is switched again.
static void dora_norm_of(const Linear* x, const floatX* W) {
    const LinearAdapter* a = &x->ad;
    if (x->sh->dora_cache && *a->norm_ready) return;
    if (x->w.kind == LINEAR_W_Q8) fatal("this is a bug in llmc", "DoRA norms of a Q8_0 weight (generate refuses the pair)");
    if (W) dora_norm(a->norm, W, a->A, a->B, a->scaling, x->out, x->in, a->rank);
    else dora_norm_w16(a->norm, x->w.bf16, a->A, a->B, a->scaling, x->out, x->in, a->rank);
    *a->norm_ready = x->sh->dora_cache;
}

void linear_dora_norm(const Linear* x) {
    if (!x->has_adapter || !x->ad.m) fatal("this is a bug in llmc", "linear_dora_norm on a layer without a DoRA adapter");
    dora_norm_of(x, layer_weight(x));
}

// y = g (W x + s B A x) + b with g = m / n; under dropout (training), PEFT's form
// y = W x + b + (g - 1) W xd + g s B A xd, xd = drop(x).
static void dora_forward(const Linear* x, floatX* out, const floatX* inp, int N) {
    const LinearAdapter* a = &x->ad;
    LinearShared* sh = x->sh;
    const floatX* W = layer_weight(x);
    dora_norm_of(x, W);
    const floatX* xin = branch_h(x, inp, N); // h = s xd A^T
    if (xin == inp) {
        base_mm(x, out, NULL, inp, W, NULL, N);
        matmul_forward_acc(out, sh->h, a->B, N, a->rank, x->out);
        dora_scale(out, out, a->m, a->norm, 0.0f, x->b, N, x->out, 0);
        return;
    }
    base_mm(x, out, NULL, inp, W, x->b, N);
    base_mm(x, sh->z, NULL, xin, W, NULL, N);
    dora_scale(out, sh->z, a->m, a->norm, -1.0f, NULL, N, x->out, 1);
    matmul_forward(sh->z, NULL, sh->h, a->B, NULL, N, a->rank, x->out);
    dora_scale(out, sh->z, a->m, a->norm, 0.0f, NULL, N, x->out, 1);
}

// The backward of dora_forward (the norms are the forward's: nothing has changed them since).
// db += sum dout; dm += sum dout z / n with z = W xd + s B A xd (recomputed); the input gradient
// g dout W + the branch's with g dout for dout, or under dropout dout W + drop((g - 1) dout W +
// the branch's).
static void dora_backward(const Linear* x, floatX* dinp, const floatX* dout, const floatX* inp, int N, int accumulate) {
    const LinearAdapter* a = &x->ad;
    LinearShared* sh = x->sh;
    if (x->dw) fatal("this is a bug in llmc", "a DoRA adapter on a trained weight");
    const floatX* W = layer_weight(x);
    const floatX* xin = branch_h(x, inp, N);
    base_mm(x, sh->z, NULL, xin, W, NULL, N);
    matmul_forward_acc(sh->z, sh->h, a->B, N, a->rank, x->out);
    dora_magnitude_backward(a->dm, dout, sh->z, a->norm, N, x->out);
    if (xin == inp) {
        dora_scale(sh->dz, dout, a->m, a->norm, 0.0f, NULL, N, x->out, 0);
        if (x->db) base_mm_backward(x, NULL, x->db, dout, W, N, 0);
        base_mm_backward(x, dinp, NULL, sh->dz, W, N, accumulate);
        adapter_backward_h(x, dinp, sh->dz, inp, xin, N, 0);
        return;
    }
    base_mm_backward(x, dinp, x->db, dout, W, N, accumulate);
    dora_scale(sh->dz, dout, a->m, a->norm, -1.0f, NULL, N, x->out, 0);
    base_mm_backward(x, sh->tmp, NULL, sh->dz, W, N, 0);
    dora_scale(sh->dz, dout, a->m, a->norm, 0.0f, NULL, N, x->out, 0);
    adapter_backward_h(x, dinp, sh->dz, inp, xin, N, 1);
}

// ----------------------------------------------------------------------------
// the layer

// The base matmul, from whichever weight source the layer has.
static void base_forward(const Linear* x, floatX* out, floatX* gelu_out, const floatX* inp, int N) {
    base_mm(x, out, gelu_out, inp, layer_weight(x), x->b, N);
}

void linear_forward(const Linear* x, floatX* out, floatX* gelu_out, const floatX* inp, int N) {
    if (!x->has_adapter || x->sh->adapters_off) {
        base_forward(x, out, gelu_out, inp, N);
        return;
    }
    // the GELU epilogue (mlp.c_fc) must see the pre-activation including the adapter's term,
    // so the base matmul runs without it and GELU is applied after the add
    if (x->ad.m) dora_forward(x, out, inp, N);
    else {
        base_forward(x, out, NULL, inp, N);
        adapter_forward(x, out, inp, N);
    }
    if (gelu_out) gelu_forward(gelu_out, out, (size_t)N * x->out);
}

void linear_backward(const Linear* x, floatX* dinp, const floatX* dout, const floatX* inp, int N, int accumulate) {
    if (x->sh->adapters_off) fatal("this is a bug in llmc", "a backward with the adapters switched off (linear_set_adapters)");
    linear_check_backward(x);
    if (x->has_adapter && x->ad.m) { dora_backward(x, dinp, dout, inp, N, accumulate); return; }
    // (a frozen weight, dense, NF4 or bf16, has no gradient: dw is NULL)
    if (x->w.kind == LINEAR_W_BF16) matmul_backward_w16(dinp, x->db, dout, x->w.bf16, N, x->in, x->out, accumulate);
    else matmul_backward(dinp, x->dw, x->db, dout, inp, linear_weight(x), N, x->in, x->out, accumulate);
    if (x->has_adapter) adapter_backward(x, dinp, dout, inp, N);
}

void linear_backward_gelu(const Linear* x, floatX* dpre, floatX* dact, const floatX* dout, const floatX* inp,
                          const floatX* pre, int N) {
    linear_check_backward(x);
    if (!x->has_adapter && x->w.kind != LINEAR_W_BF16) {
        matmul_backward_gelu(dpre, x->dw, x->db, dout, inp, pre, linear_weight(x), N, x->in, x->out);
        return;
    }
    // the adapter's part (or a weight held in bf16, which has no fused op) goes through dact
    linear_backward(x, dact, dout, inp, N, 0);
    gelu_backward(dpre, pre, dact, (size_t)N * x->in, 0);
}
