// The linear layers of GPT-2 (c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) in one place, so that
// every variant of a linear layer is handled here and nowhere else: a plain weight, a weight
// with LoRA adapters on top, an NF4-quantized frozen weight dequantized on the fly.
#ifndef LLMC_LINEAR_H
#define LLMC_LINEAR_H

#include "gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

// out[N, OC] = inp[N, C] @ W_l^T + b_l (+ LoRA); with gelu_out, also gelu_out = gelu(out).
void linear_forward(GPT2* m, ParamId wid, int l, floatX* out, floatX* gelu_out, const floatX* inp, int N);
// dinp += dout @ W_l (+ LoRA path); weight / bias / LoRA gradients accumulate where trainable.
void linear_backward(GPT2* m, ParamId wid, int l, floatX* dinp, const floatX* dout, const floatX* inp, int N);
// Zero the gradients that live outside the flat parameter gradients (LoRA).
void linear_zero_grads(GPT2* m);

#ifdef __cplusplus
}
#endif
#endif // LLMC_LINEAR_H
