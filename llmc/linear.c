#include "linear.h"
#include "lora.h"
#include "check.h"
#include "qlora.h"

// In the table every linear weight is directly followed by its bias.
static inline ParamId bias_of(ParamId wid) { return (ParamId)(wid + 1); }

// LORA_LIN_* index of a linear weight.
static inline int lin_of(ParamId wid) {
    switch (wid) {
    case PT_QKVW: return LORA_LIN_QKV;
    case PT_ATTPROJW: return LORA_LIN_ATTPROJ;
    case PT_FCW: return LORA_LIN_FC;
    default: return LORA_LIN_FCPROJ;
    }
}

// Layer l's weight [OC, C]: the floatX tensor, or (QLoRA) the NF4 weight dequantized into the
// scratch buffer, valid until the next dequantization.
static const floatX* weight_of(GPT2* m, ParamId wid, int l) {
    if (!m->p[wid]) {
        if (!m->nf4) fatal("this is a bug in llmc", "linear weight %s has neither a floatX nor an NF4 copy", m->pt.t[wid].name);
        return qlora_weight(m->nf4, wid, l);
    }
    return m->p[wid] + (size_t)l * params_layer_numel(&m->pt, wid);
}

void linear_forward(GPT2* m, ParamId wid, int l, floatX* out, floatX* gelu_out, const floatX* inp, int N) {
    const ParamInfo* w = &m->pt.t[wid];
    const int OC = (int)w->rows, C = (int)w->cols;
    const floatX* W = weight_of(m, wid, l);
    const floatX* b = m->p[bias_of(wid)] + (size_t)l * OC;
    const int lin = lin_of(wid);
    if (!lora_has(m->lora, lin, l)) {
        matmul_forward(out, gelu_out, inp, W, b, N, C, OC);
        return;
    }
    // LoRA: the GELU epilogue (mlp.c_fc) must see the pre-activation including the LoRA term,
    // so the base matmul runs without it and GELU is applied after the add.
    matmul_forward(out, NULL, inp, W, b, N, C, OC);
    lora_linear_forward(m->lora, lin, l, out, inp, N);
    if (gelu_out) gelu_forward(gelu_out, out, (size_t)N * OC);
}

void linear_backward(GPT2* m, ParamId wid, int l, floatX* dinp, const floatX* dout, const floatX* inp, int N) {
    const ParamInfo* w = &m->pt.t[wid];
    const int OC = (int)w->rows, C = (int)w->cols;
    const floatX* W = weight_of(m, wid, l); // (a frozen NF4 weight has no gradient: dW is NULL)
    floatX* dW = m->g[wid] ? m->g[wid] + (size_t)l * m->g_stride[wid] : NULL;
    floatX* db = m->g[bias_of(wid)] ? m->g[bias_of(wid)] + (size_t)l * m->g_stride[bias_of(wid)] : NULL;
    matmul_backward(dinp, dW, db, dout, inp, W, N, C, OC);
    lora_linear_backward(m->lora, lin_of(wid), l, dinp, dout, inp, N);
}

void linear_zero_grads(GPT2* m) {
    if (m->lora) lora_zero_grads(m->lora);
}
