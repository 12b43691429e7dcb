#include "linear.h"
#include "check.h"

// In the table every linear weight is directly followed by its bias.
static inline ParamId bias_of(ParamId wid) { return (ParamId)(wid + 1); }

void linear_forward(GPT2* m, ParamId wid, int l, floatX* out, floatX* gelu_out, const floatX* inp, int N) {
    const ParamInfo* w = &m->pt.t[wid];
    const int OC = (int)w->rows, C = (int)w->cols;
    const floatX* W = m->p[wid] + (size_t)l * params_layer_numel(&m->pt, wid);
    const floatX* b = m->p[bias_of(wid)] + (size_t)l * OC;
    matmul_forward(out, gelu_out, inp, W, b, N, C, OC);
}

void linear_backward(GPT2* m, ParamId wid, int l, floatX* dinp, const floatX* dout, const floatX* inp, int N) {
    const ParamInfo* w = &m->pt.t[wid];
    const int OC = (int)w->rows, C = (int)w->cols;
    const size_t lw = (size_t)l * params_layer_numel(&m->pt, wid);
    const floatX* W = m->p[wid] + lw;
    floatX* dW = m->g[wid] ? m->g[wid] + (size_t)l * m->g_stride[wid] : NULL;
    floatX* db = m->g[bias_of(wid)] ? m->g[bias_of(wid)] + (size_t)l * m->g_stride[bias_of(wid)] : NULL;
    matmul_backward(dinp, dW, db, dout, inp, W, N, C, OC);
}

void linear_zero_grads(GPT2* m) { (void)m; }
