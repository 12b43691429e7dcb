// The named parameter table. Every GPT-2 tensor has a name, a shape, a trainable flag, a
// weight-decay flag and its Hugging Face key; loaders, savers, LoRA targets, ZeRO sharding and
// tests walk this table instead of using magic indices. Its order is the tensors' order in an
// llm.c .bin (docs/FORMATS.md).
//
// Storage: all parameters live in one flat buffer, tensor after tensor in table order (the llm.c
// .bin order), each tensor holding all layers contiguously. Matmul weights are [out, in]
// (llm.c orientation); HF Conv1D weights are [in, out] and get transposed at the file boundary.
#ifndef LLMC_PARAMS_H
#define LLMC_PARAMS_H

#include <stddef.h>
#include "model/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PT_WTE = 0,   // (Vp, C) token embedding, tied to lm_head
    PT_WPE,       // (maxT, C)
    PT_LN1W,      // (L, C)
    PT_LN1B,      // (L, C)
    PT_QKVW,      // (L, 3C, C)
    PT_QKVB,      // (L, 3C)
    PT_ATTPROJW,  // (L, C, C)
    PT_ATTPROJB,  // (L, C)
    PT_LN2W,      // (L, C)
    PT_LN2B,      // (L, C)
    PT_FCW,       // (L, 4C, C)
    PT_FCB,       // (L, 4C)
    PT_FCPROJW,   // (L, C, 4C)
    PT_FCPROJB,   // (L, C)
    PT_LNFW,      // (C)
    PT_LNFB,      // (C)
    NUM_PARAM_TENSORS
} ParamId;

typedef struct {
    const char* name;     // short name, as in llm.c: "qkvw"
    const char* hf_name;  // HF key without the "transformer." prefix; "%d" = layer index for per-layer tensors
    int per_layer;        // 1: one slice per block, all layers stored contiguously
    int ndim;             // dims of one layer's slice (1 or 2)
    size_t rows, cols;    // one layer's slice: [rows, cols] (cols = 1 for 1-D); rows of wte = Vp
    int hf_transposed;    // 1: HF stores [cols, rows] (Conv1D weight)
    int weight_decay;     // 1: decayed by AdamW (every 2-D tensor)
    int is_linear;        // 1: a matmul weight (LoRA / NF4 target)
    size_t numel;         // all layers
    size_t offset;        // element offset in the flat parameter buffer
} ParamInfo;

typedef struct {
    GPT2Config cfg;
    ParamInfo t[NUM_PARAM_TENSORS];
    size_t total;         // total elements, padded vocab included
} ParamTable;

// Build the table for a config.
void params_build(ParamTable* pt, const GPT2Config* cfg);
// Elements of one layer's slice of tensor id.
static inline size_t params_layer_numel(const ParamTable* pt, ParamId id) {
    return pt->t[id].rows * pt->t[id].cols;
}
// Element offset of layer l's slice of tensor id within the flat buffer.
static inline size_t params_layer_offset(const ParamTable* pt, ParamId id, int l) {
    return pt->t[id].offset + (pt->t[id].per_layer ? (size_t)l * params_layer_numel(pt, id) : 0);
}
// Format the HF key of (id, layer) into out, with the given prefix ("" or "transformer.").
void params_hf_key(char* out, size_t cap, ParamId id, int layer, const char* prefix);
// Number of parameters excluding the vocabulary padding rows (what HF counts).
size_t params_count_unpadded(const ParamTable* pt);

#ifdef __cplusplus
}
#endif
#endif // LLMC_PARAMS_H
