// QLoRA: the frozen matmul weights of GPT-2 (qkvw, attprojw, fcw, fcprojw of every layer) held as
// NF4 with double quantization, bit-compatible with bitsandbytes (llmc/ops/nf4.h), instead of floatX.
// Each layer's weight is one quantized tensor in [out, in] orientation: the matrix transformers'
// bitsandbytes integration quantizes too (it transposes GPT-2's Conv1D weight to Linear4bit's
// [out, in] before quantize_4bit), so the blocks of 64 and the double-quantization groups are the
// same. This file makes and loads those tensors; the model assembly (llmc/model/model.c) gives each
// linear layer its tensor as weight source (llmc/model/linear.h), which dequantizes it into one shared
// buffer before each forward / backward matmul with the backend op nf4_dequantize_op; the base
// gets no weight gradient. The floatX copies of these weights are never allocated (gpt2_init skip
// mask).
#ifndef LLMC_QLORA_H
#define LLMC_QLORA_H

#include "model/linear.h"
#include "ops/nf4.h"
#include "ops/ops.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

// The tensors QLoRA quantizes: the weights of the linear layers.
#define QLORA_MASK ((1u << PT_QKVW) | (1u << PT_ATTPROJW) | (1u << PT_FCW) | (1u << PT_FCPROJW))
#define QLORA_NQ LINEAR_PER_BLOCK

typedef struct Nf4Base {
    int L;
    NF4Tensor* t;      // [QLORA_NQ * L]: the weight of linear kind q (LINEAR_*) of layer l at q * L + l
    Nf4Op** dev;       // backend handles of t (after qlora_upload)
    int64_t n_quant;   // weights quantized
    size_t bytes;      // NF4 storage: codes + 8-bit absmax + nested scales / offsets
} Nf4Base;

// 1 if id is quantized by QLoRA.
int qlora_is_quantized(ParamId id);

// Quantize the four matmul weights of every layer of host (ParamTable layout, fp32) with double
// quantization, as bitsandbytes' Linear4bit does on one PyTorch thread.
Nf4Base* qlora_quantize(const ParamTable* pt, const float* host);

// Give the pages of host (a malloc'd ParamTable-layout fp32 array) that only hold quantized
// tensors back to the OS (their contents become zero): after qlora_quantize the load no longer
// holds the fp32 copy of the weights it quantized while the model is set up. No-op where the
// platform has no madvise.
void qlora_release_host(const ParamTable* pt, float* host);

// 1 if path (a model directory or .safetensors file) is a Hugging Face GPT-2 saved 4-bit by
// transformers + bitsandbytes (holds "<...>.weight.quant_state.bitsandbytes__nf4" tensors).
int qlora_is_hf4bit(const char* path);
// Load such a checkpoint: the quantized weights stay NF4 exactly as stored (returned), every other
// tensor goes into *host (ParamTable layout, malloc'd; the quantized tensors' slots are zero).
Nf4Base* qlora_load_hf4bit(const char* path, GPT2Config* cfg, ParamTable* pt, float** host);

// Put the quantized tensors in backend memory (b->dev).
void qlora_upload(Nf4Base* b);
// Host fp32 dequant(quant(W)) of every layer of tensor id (ParamTable layout of that tensor).
void qlora_dequant_host(const Nf4Base* b, const ParamTable* pt, ParamId id, float* out);
// Elements of the floatX copies the quantized tensors replace.
size_t qlora_replaced_numel(const ParamTable* pt);
void qlora_free(Nf4Base* b);

#ifdef __cplusplus
}
#endif
#endif // LLMC_QLORA_H
