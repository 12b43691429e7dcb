// LoRA adapters on the linear layers of a frozen GPT-2 (PEFT semantics; the file formats are
// llmc/model/peft_io.h's). An adapter on a linear layer y = W x + b adds
//     y += scaling * B (A dropout(x)),   A: [rank, in], B: [out, rank],
// scaling = alpha / rank (or alpha / sqrt(rank) with rsLoRA). Adapters exist for any subset of
// (layer, linear): c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj. This file holds their structure and
// their values; the branch itself is computed by the linear layer that carries it (llmc/model/linear.h,
// which gets a LinearAdapter view of each adapter from the model assembly).
//
// q / k / v only ("q,v" is our feature; PEFT cannot split GPT-2's fused c_attn): defined as
// separate rank-r adapters on the q, k or v output rows of c_attn, each with scaling alpha / r.
// Stored exactly as PEFT stores the same function: one c_attn adapter of rank (blocks x r) with
// A = [A_q; A_v] stacked and B a block matrix (B_q in the q rows / columns 0..r, B_v in the v
// rows / columns r..2r, zeros elsewhere). The zero blocks of B get their gradient masked to zero
// after every backward, so they stay exactly zero under AdamW (zero gradient, zero moments,
// decay of zero) and training is exactly that of the separate adapters. The exported adapter
// uses rank_pattern / alpha_pattern for c_attn so PEFT applies the same scaling, and names the
// split in its tensor file so that continuing from it keeps the split (llmc/model/peft_io.h).
//
// DoRA (PEFT use_dora): each adapter also has a magnitude m [out], and the layer computes
//     y = (m / n) * (W x + scaling B A x) + b,   n[o] = || W[o, :] + scaling (B A)[o, :] ||_2,
// n detached from the gradient as PEFT detaches it; m starts as n of the initial adapter
// (lora_dora_init). GPT-2's Conv1D weights are PEFT's fan_in_fan_out, so its norm is over our
// [out, in] rows too: one magnitude per output feature.
//
// All adapter parameters live in one flat buffer (A, B, and with DoRA m, per adapter, adapters in
// (layer, linear) order), with one gradient buffer of the same layout: the optimizer sees one segment.
// Dropout: one mask per adapted layer (the q and v blocks of a split c_attn share theirs), drawn
// by the linear layers from dropout_seed.
#ifndef LLMC_LORA_H
#define LLMC_LORA_H

#include <stddef.h>
#include <stdint.h>
#include "model/config.h"
#include "model/linear.h"
#include "model/params.h"
#include "ops/ops.h"
#include "model/trainseg.h"

#ifdef __cplusplus
extern "C" {
#endif

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
// Adapter tensor keys: LORA_KEY_PREFIX "<layer>.<module>.lora_A.weight" (module: lora_module_name).
#define LORA_KEY_PREFIX "base_model.model.transformer.h."

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
    int init;                  // LORA_INIT_*: how new adapters start (PEFT init_lora_weights)
    int dora;                  // PEFT use_dora: each adapter has a magnitude vector (DoRA)
} LoraSpec;

enum { LORA_BIAS_NONE = 0, LORA_BIAS_ALL, LORA_BIAS_LORA_ONLY };
// --init (PEFT init_lora_weights True, "gaussian", "pissa", "olora"); names: LORA_INIT_NAMES.
enum { LORA_INIT_DEFAULT = 0, LORA_INIT_GAUSSIAN, LORA_INIT_PISSA, LORA_INIT_OLORA };
extern const char* const LORA_INIT_NAMES[]; // "default", "gaussian", "pissa", "olora", NULL

// A slice of a base tensor trained alongside the adapters (bias="all" / "lora_only",
// modules_to_save ["ln_f"]): one layer's slice of table tensor id (layer -1: not per layer).
// key: its name in the adapter file, exactly as PEFT writes it (the bias of a LoRA-wrapped
// linear is "...<module>.base_layer.bias", others "...<module>.bias", ln_f "...ln_f.weight").
// p / g: the slice and its gradient in the model the adapters are on (set by the assembly,
// llmc/model/model.c; NULL while they are on none).
typedef struct {
    ParamId id;
    int layer;
    char key[160];
    floatX* p;
    floatX* g;
} LoraExtra;

typedef struct {
    ParamId wid;               // PT_QKVW, PT_ATTPROJW, PT_FCW, PT_FCPROJW
    int lin;                   // LINEAR_*
    int layer;
    int in, out;               // the base layer: [out, in]
    int rank;                  // stacked rank (blocks x r for a q/k/v split)
    float scaling;
    float alpha;               // as exported (rank_pattern / alpha_pattern when it differs)
    unsigned blocks;           // 0: the whole layer; else q(1) k(2) v(4) rows of c_attn
    size_t a_off, b_off;       // offsets of A [rank, in] and B [out, rank] in the flat buffers
    size_t m_off;              // DoRA: offset of the magnitude [out] (right after B)
    size_t norm_off;           // DoRA: offset of the row norms [out] in LoraModel.norms
    floatX* b_mask;            // split adapters: 0/1 mask of B's structural non-zeros, else NULL
} LoraAdapter;

typedef struct LoraModel {
    GPT2Config cfg;
    ParamTable pt;             // the base model's table (for the trained base slices)
    LoraSpec spec;
    int n;                     // adapters
    LoraAdapter* ad;
    int lookup[LORA_MAX_LAYERS][LINEAR_PER_BLOCK]; // adapter index or -1
    floatX* params;            // flat adapter parameters (backend memory)
    floatX* grads;             // same layout
    size_t total;              // elements
    size_t n_trainable;        // elements minus the structural zeros of split adapters
    floatX* masks;             // backend memory holding every b_mask
    size_t masks_n;            // its elements
    uint64_t dropout_seed;     // the dropout masks (probability: spec.dropout)
    char base_name[1024];      // base_model_name_or_path for the export
    int n_extra;               // trained base slices
    LoraExtra* extra;
    float* extra_host;         // values from an adapter file, until lora_put_base_values writes them
    float* init0;              // PiSSA / OLoRA: the initial A and B (host, flat layout), which the
                               // base lost (W_res = W - scaling B0 A0); else NULL
    float plus_ratio;          // LoRA+: the learning rate of B and of the 1-D trained base slices over A's (1: plain LoRA)
    float* norms;              // DoRA: every adapter's row norms of W + scaling B A (fp32, backend memory)
    size_t norms_n;            // its floats (the adapters' outputs summed)
    int* norm_ready;           // DoRA, host: adapter i's norms are current (only while linear_set_dora_cache holds them)
} LoraModel;

// Parse "--lora-targets": comma list of c_attn, q, k, v, attn.c_proj, mlp.c_fc, mlp.c_proj,
// c_proj (both projections, PEFT semantics), all-linear. Returns 0 or -1 with err filled.
int lora_parse_targets(const char* s, unsigned* out, char* err, size_t errcap);
// Parse "--lora-layers": "all" or a comma list of indices and ranges ("0-5,8"). 0 or -1.
int lora_parse_layers(const char* s, int num_layers, LoraSpec* spec, char* err, size_t errcap);

// Build the adapters for spec on a model of config cfg and allocate their parameters and
// gradients (zeroed). fatal on an inconsistent spec (no target, rank < 0, ...). Rank 0 is BitFit:
// no adapter at all, only the base slices of spec.bias (which must be LORA_BIAS_ALL) and ln_f.
LoraModel* lora_create(const GPT2Config* cfg, const LoraSpec* spec);
// The same without backend memory (params, grads and masks NULL): the structure and sizes a plan
// needs (llmc/plan/memplan.h) before anything is allocated. lora_free frees it.
LoraModel* lora_layout(const GPT2Config* cfg, const LoraSpec* spec);
// The same from adapters already described (lin, wid, layer, in, out, rank, scaling, alpha,
// blocks set; the rest is laid out here): lm takes ad (calloc'd, n entries) over.
LoraModel* lora_from_adapters(const GPT2Config* cfg, const LoraSpec* spec, LoraAdapter* ad, int n);
void lora_free(LoraModel* lm);
// PEFT init: A ~ U(-1/sqrt(in), 1/sqrt(in)) from the counter RNG (stream = adapter's (layer,
// linear)), B = 0. Deterministic in seed.
void lora_init_params(LoraModel* lm, uint64_t seed);
// ---- initialisations beside the default (llmc/model/lora_init.c)
// PEFT's "gaussian": A ~ N(0, (1 / r)^2) from the counter RNG (r: the rank of one q/k/v block),
// B = 0. Deterministic in seed; not torch's numbers.
void lora_init_gaussian(LoraModel* lm, uint64_t seed);
// 1 for the initialisations that take the adapter from the base and rewrite it (pissa, olora).
int lora_init_rewrites_base(int init);
// PiSSA (SVD) or OLoRA (QR) per lm->spec.init, of each adapted weight in host_params (fp32,
// table layout): the initial adapter values, in lm->init0 (the parameters are not touched). fatal
// for a q/k/v split or a rank above the weight's.
void lora_init_from_base(LoraModel* lm, const ParamTable* pt, const float* host_params);
// The base the adapters start from: W -= scaling * B0 A0 in host_params (lm->init0 set).
void lora_init_residual(const LoraModel* lm, const ParamTable* pt, float* host_params);
// The adapter as a plain LoRA of the original base (PEFT's save_pretrained with
// path_initial_model_for_weight_conversion): rank 2r, the same scaling, A' = [A; A0],
// B' = [B, -B0], so that scaling B' A' = scaling (B A - B0 A0). A layout (no backend memory; the
// trained base slices point at lm's) and its values (*values, malloc'd).
LoraModel* lora_converted(const LoraModel* lm, float** values);

// Host fp32 copies of the flat parameters (lm->total elements).
void lora_get_params(const LoraModel* lm, float* host);
void lora_set_params(LoraModel* lm, const float* host);
void lora_get_grads(const LoraModel* lm, float* host);

// The scaling of an adapter of rank r (alpha / r, or alpha / sqrt(r) with rsLoRA).
float lora_scaling(float alpha, int rank, int rslora);
// PEFT's module name of a linear kind ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj").
const char* lora_module_name(int lin);
// The 0/1 mask of B's parameters of a split adapter (out x rank, host): B[o, j] is a parameter
// iff output row o lies in the q/k/v block that rank column j belongs to; all 1 when unsplit.
void lora_b_mask_host(const LoraAdapter* a, float* mask);
// What the linear layer of adapter i computes with (llmc/model/linear.h): shapes, scaling, and the
// adapter's slices of the flat parameter / gradient / mask buffers.
LinearAdapter lora_linear_adapter(const LoraModel* lm, int i);
// The q/k/v blocks of a split (bits 1, 2, 4) as a list: "q,v".
void lora_split_name(unsigned blocks, char* out, size_t cap);
// What is trained, for the report: "r=8 alpha=16 dropout=0 | targets q,v | layers all", from
// the adapters themselves (a loaded adapter's targets, layers and rank / alpha patterns).
void lora_describe(const LoraModel* lm, char* out, size_t cap);

// ---- trained base slices
// Table tensors that have trained slices (the trainable mask for gpt2_init).
unsigned lora_base_trainable_mask(const LoraModel* lm);
// Once every extra[i].p points into the model: write the values an adapter file gave the
// trained base slices (no-op for new adapters).
void lora_put_base_values(LoraModel* lm);
// Optimizer segments: the adapters (decayed: all 2-D) then every trained base slice (not decayed:
// 1-D, as HF Trainer does for biases and LayerNorm; extra[i].p / .g must be set). The adapters
// are one segment, or with LoRA+ (plus_ratio != 1) one per A and per B, in the same flat order:
// B's learning rate is plus_ratio times A's, and so is every trained base slice's, as PEFT's
// create_loraplus_optimizer groups them (lora_B and every 1-D parameter at lr * ratio). segs
// needs room for lora_max_segments(lm). Returns the count.
int lora_segments(const LoraModel* lm, TrainSeg* segs);
int lora_max_segments(const LoraModel* lm);
// BitFit (rank 0): no adapter, the trained base slices are all there is.
int lora_is_bitfit(const LoraModel* lm);
// The elements of those segments: lm->total and the trained base slices.
size_t lora_trainable_numel(const LoraModel* lm);
// Bytes of backend memory the linear layers' adapter scratch will take for batches of rows
// tokens (linear_set_alloc): part of the activations in the memory footprint.
size_t lora_scratch_bytes(const LoraModel* lm, size_t rows);
size_t lora_scratch_numel(const LoraModel* lm, size_t rows); // (the same in floatX elements)
// DoRA: every magnitude set to the row norms of its layer's weight plus the adapter as they are
// now (PEFT's initialisation), computed by the linear layers the adapters are on.
void lora_dora_init(LoraModel* lm, LinearSet* lin);
// Merge every adapter into host fp32 base parameters (table layout): W += scaling * B A (DoRA:
// W = (m / n) * (W + scaling B A), row by row, as PEFT's merge_and_unload).
void lora_merge(const LoraModel* lm, const ParamTable* pt, float* host_params);
// The same with the adapter values given (host, flat layout) and a sign: W += sign scaling B A.
void lora_merge_host(const LoraModel* lm, const ParamTable* pt, float* host_params, const float* values, float sign);

// ---- several adapters as one (llmc/model/lora_mix.c): PEFT's add_weighted_adapter
// LORA_MIX_CAT: the exact weighted sum of the adapters' changes, sum_i w_i scaling_i B_i A_i, as
// one adapter of the summed ranks (scaling 1); LORA_MIX_LINEAR: PEFT's "linear", for adapters of
// one rank r: A = sum sign(w_i s_i) sqrt|w_i s_i| A_i, B = sum sqrt|w_i s_i| B_i (the cross terms
// B_i A_j included, so not the weighted sum). Either combined adapter has r = lora_alpha = its
// rank and the first adapter's use_rslora, as PEFT configures it; names: LORA_MIX_NAMES.
enum { LORA_MIX_CAT = 0, LORA_MIX_LINEAR };
#define LORA_MIX_MAX 16 // adapters one combination takes
extern const char* const LORA_MIX_NAMES[]; // "cat", "linear", NULL
// The combination of in[0..n) (adapters of one base, values in their backend buffers) with
// weights w, as a new LoraModel on no model; NULL with the reason in err for adapters that do not
// combine (trained base tensors, DoRA, a PiSSA residual, linear over several ranks).
LoraModel* lora_mix(LoraModel* const* in, const float* w, int n, int how, char* err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif // LLMC_LORA_H
