// LoRA adapters on the linear layers of a frozen GPT-2 (PEFT semantics; format facts: shared
// docs FORMATS.md). An adapter on a linear layer y = W x + b adds
//     y += scaling * B (A dropout(x)),   A: [rank, in], B: [out, rank],
// scaling = alpha / rank (or alpha / sqrt(rank) with rsLoRA). Adapters exist for any subset of
// (layer, linear): c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj.
//
// q / k / v only ("q,v" is our feature; PEFT cannot split GPT-2's fused c_attn): defined as
// separate rank-r adapters on the q, k or v output rows of c_attn, each with scaling alpha / r.
// Stored exactly as PEFT stores the same function: one c_attn adapter of rank (blocks x r) with
// A = [A_q; A_v] stacked and B a block matrix (B_q in the q rows / columns 0..r, B_v in the v
// rows / columns r..2r, zeros elsewhere). The zero blocks of B get their gradient masked to zero
// after every backward, so they stay exactly zero under AdamW (zero gradient, zero moments,
// decay of zero) and training is exactly that of the separate adapters. The exported adapter
// uses rank_pattern / alpha_pattern for c_attn so PEFT applies the same scaling.
//
// All adapter parameters live in one flat buffer (A then B per adapter, adapters in (layer,
// linear) order), with one gradient buffer of the same layout: the optimizer sees one segment.
// Dropout (PEFT: inverted dropout on the input of the LoRA branch only; one mask per adapted
// layer, so the q and v blocks of a split c_attn share theirs) uses the counter-based
// RNG: the mask of adapter i at training tick t is a pure function of (seed, t, i, element), so
// backward regenerates it instead of storing it, and resumed runs draw the same masks.
#ifndef LLMC_LORA_H
#define LLMC_LORA_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "params.h"
#include "ops.h"
#include "gpt2.h"
#include "optimizer.h"

#ifdef __cplusplus
extern "C" {
#endif

// Linear layers in block order; index k of lora lookups.
enum { LORA_LIN_QKV = 0, LORA_LIN_ATTPROJ, LORA_LIN_FC, LORA_LIN_FCPROJ, LORA_NUM_LIN };

// Target bits (--lora-targets).
#define LORA_T_CATTN   (1u << 0)  // c_attn, whole
#define LORA_T_Q       (1u << 1)  // c_attn q rows only
#define LORA_T_K       (1u << 2)
#define LORA_T_V       (1u << 3)
#define LORA_T_ATTPROJ (1u << 4)  // attn.c_proj
#define LORA_T_FC      (1u << 5)  // mlp.c_fc
#define LORA_T_FCPROJ  (1u << 6)  // mlp.c_proj
#define LORA_T_ALL     (LORA_T_CATTN | LORA_T_ATTPROJ | LORA_T_FC | LORA_T_FCPROJ)

#define LORA_MAX_LAYERS 256

typedef struct {
    int rank;                  // r
    float alpha;               // lora_alpha
    int rslora;                // scaling = alpha / sqrt(r)
    float dropout;             // p in [0, 1)
    unsigned targets;          // LORA_T_* bits
    unsigned char layers[LORA_MAX_LAYERS]; // 1 = layer adapted
    int all_layers;            // layers[] covers every layer (no layers_to_transform in the export)
    int bias;                  // LORA_BIAS_*: PEFT bias= (which base biases are trained too)
    int train_ln_f;            // PEFT modules_to_save=["ln_f"]: the final layernorm is trained too
} LoraSpec;

enum { LORA_BIAS_NONE = 0, LORA_BIAS_ALL, LORA_BIAS_LORA_ONLY };

// A slice of a base tensor trained alongside the adapters (bias="all" / "lora_only",
// modules_to_save ["ln_f"]): one layer's slice of table tensor id (layer -1: not per layer).
// key: its name in the adapter file, exactly as PEFT writes it (the bias of a LoRA-wrapped
// linear is "...<module>.base_layer.bias", others "...<module>.bias", ln_f "...ln_f.weight").
typedef struct {
    ParamId id;
    int layer;
    char key[160];
} LoraExtra;

typedef struct {
    ParamId wid;               // PT_QKVW, PT_ATTPROJW, PT_FCW, PT_FCPROJW
    int lin;                   // LORA_LIN_*
    int layer;
    int in, out;               // the base layer: [out, in]
    int rank;                  // stacked rank (blocks x r for a q/k/v split)
    float scaling;
    float alpha;               // as exported (rank_pattern / alpha_pattern when it differs)
    unsigned blocks;           // 0: the whole layer; else q(1) k(2) v(4) rows of c_attn
    size_t a_off, b_off;       // offsets of A [rank, in] and B [out, rank] in the flat buffers
    floatX* b_mask;            // split adapters: 0/1 mask of B's structural non-zeros, else NULL
} LoraAdapter;

typedef struct LoraModel {
    GPT2Config cfg;
    ParamTable pt;             // the base model's table (for the trained base slices)
    LoraSpec spec;
    int n;                     // adapters
    LoraAdapter* ad;
    int lookup[LORA_MAX_LAYERS][LORA_NUM_LIN]; // adapter index or -1
    floatX* params;            // flat adapter parameters (backend memory)
    floatX* grads;             // same layout
    size_t total;              // elements
    size_t n_trainable;        // elements minus the structural zeros of split adapters
    floatX* masks;             // backend memory holding every b_mask
    // dropout
    float dropout;
    uint64_t dropout_seed;
    uint64_t tick;             // set by the trainer before each training micro-step
    int train_mode;            // 1: dropout active (training forward/backward)
    // scratch, one layer's worth, allocated for up to scratch_N rows
    int scratch_N;
    floatX* xd;                // (N, max in)  dropped input
    floatX* h;                 // (N, max rank)
    floatX* dh;                // (N, max rank)
    floatX* tmp;               // (N, max(out, in))
    char base_name[1024];      // base_model_name_or_path for the export
    int n_extra;               // trained base slices
    LoraExtra* extra;
    float* extra_host;         // values read by lora_load_peft, until lora_attach puts them in the model
} LoraModel;

// Parse "--lora-targets": comma list of c_attn, q, k, v, attn.c_proj, mlp.c_fc, mlp.c_proj,
// c_proj (both projections, PEFT semantics), all-linear. Returns 0 or -1 with err filled.
int lora_parse_targets(const char* s, unsigned* out, char* err, size_t errcap);
// Parse "--lora-layers": "all" or a comma list of indices and ranges ("0-5,8"). 0 or -1.
int lora_parse_layers(const char* s, int num_layers, LoraSpec* spec, char* err, size_t errcap);

// Build the adapters for spec on a model of config cfg and allocate their parameters and
// gradients (zeroed). fatal on an inconsistent spec (no target, rank < 1, ...).
LoraModel* lora_create(const GPT2Config* cfg, const LoraSpec* spec);
void lora_free(LoraModel* lm);
// PEFT init: A ~ U(-1/sqrt(in), 1/sqrt(in)) from the counter RNG (stream = adapter's (layer,
// linear)), B = 0. Deterministic in seed.
void lora_init_params(LoraModel* lm, uint64_t seed);
// Scratch for batches of up to N = B*T rows (idempotent).
void lora_alloc_scratch(LoraModel* lm, int N);
void lora_zero_grads(LoraModel* lm);
// Host fp32 copies of the flat parameters (lm->total elements).
void lora_get_params(const LoraModel* lm, float* host);
void lora_set_params(LoraModel* lm, const float* host);
void lora_get_grads(const LoraModel* lm, float* host);

// The LoRA term of one linear layer, called by llmc/linear.c. No-op when (layer, lin) has no
// adapter. forward: out[N, OC] += scaling * B (A drop(inp)). backward: accumulates dA, dB and
// dinp += the gradient through the LoRA branch (the frozen W's part is linear.c's).
int lora_has(const LoraModel* lm, int lin, int layer);
void lora_linear_forward(LoraModel* lm, int lin, int layer, floatX* out, const floatX* inp, int N);
void lora_linear_backward(LoraModel* lm, int lin, int layer, floatX* dinp, const floatX* dout,
                          const floatX* inp, int N);

// ---- trained base slices
// Table tensors that have trained slices (the trainable mask for gpt2_init).
unsigned lora_base_trainable_mask(const LoraModel* lm);
// Attach the adapters to model m (m->lora = lm, scratch for m's batch size) and, for an adapter
// from lora_load_peft, write its trained base slices into m's parameters.
void lora_attach(LoraModel* lm, GPT2* m);
// Optimizer segments: the adapters (one segment, decayed: all 2-D) then every trained base
// slice (not decayed: 1-D, as HF Trainer does for biases and LayerNorm). segs needs room for
// 1 + lm->n_extra. Returns the count.
int lora_segments(const LoraModel* lm, GPT2* m, TrainSeg* segs);

// ---- files
// Adapter tensors (PEFT keys, F32) plus the trained base slices read from m (m may be NULL
// when there are none): checkpoints and adapter_model.safetensors. Atomic.
void lora_save_tensors(const LoraModel* lm, const GPT2* m, const char* path);
// Load tensors written by lora_save_tensors (or PEFT) into an existing model with the same
// adapters (and the trained base slices into m); every tensor must be present with its shape,
// no other may be.
void lora_load_tensors(LoraModel* lm, GPT2* m, const char* path);
// dir/adapter_model.safetensors + dir/adapter_config.json (creates dir).
void lora_save_peft(const LoraModel* lm, const GPT2* m, const char* dir);
// Load a PEFT adapter: path is the adapter directory (or its adapter_model.safetensors). The
// structure (targets, ranks, scalings) comes from the files; fatal with a message naming the
// file and key on anything inconsistent. try_ variant: returns NULL and fills err instead.
LoraModel* lora_load_peft(const char* path, const GPT2Config* cfg);
LoraModel* lora_try_load_peft(const char* path, const GPT2Config* cfg, char* err, size_t errcap);
// Merge every adapter into host fp32 base parameters (table layout): W += scaling * B A.
void lora_merge(const LoraModel* lm, const ParamTable* pt, float* host_params);

#ifdef __cplusplus
}
#endif
#endif // LLMC_LORA_H
