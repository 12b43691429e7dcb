// GPT-2 forward and backward over the op interface (llmc/ops/ops.h). Backend-neutral: the same
// source is compiled for the CPU backend (floatX = float) and the CUDA backend (floatX = bf16).
// The model never touches tensor data itself; it only slices buffers and calls ops.
#ifndef LLMC_GPT2_H
#define LLMC_GPT2_H

#include <stddef.h>
#include "model/config.h"
#include "model/params.h"
#include "ops/ops.h"
#include "model/linear.h"

#ifdef __cplusplus
extern "C" {
#endif

// Activations kept for backward, every one [L, B, T, ...] except the final ones.
typedef struct {
    floatX* encoded;   // (B, T, C): input of layer 0
    floatX* ln1;       // (L, B, T, C)
    float*  ln1_mean;  // (L, B, T)
    float*  ln1_rstd;  // (L, B, T)
    floatX* qkv;       // (L, B, T, 3C)
    floatX* atty;      // (L, B, T, C)
    float*  att_lse;   // (L, B, NH, T)
    floatX* attproj;   // (L, B, T, C)
    floatX* residual2; // (L, B, T, C)  residual + attproj
    floatX* ln2;       // (L, B, T, C)
    float*  ln2_mean;  // (L, B, T)
    float*  ln2_rstd;  // (L, B, T)
    floatX* fch;       // (L, B, T, 4C) pre-GELU
    floatX* fch_gelu;  // (L, B, T, 4C)
    floatX* fcproj;    // (L, B, T, C)
    floatX* residual3; // (L, B, T, C)  residual2 + fcproj: output of layer l
    floatX* lnf;       // (B, T, C)
    float*  lnf_mean;  // (B, T)
    float*  lnf_rstd;  // (B, T)
    floatX* cls_logits;// (classifier_rows(B*T), Vp): the classifier's row block (llmc/ops/ops.h)
    floatX* logits;    // (B, T, Vp) of a forward without targets (allocated by the first one)
    float*  losses;    // (B, T)
} GPT2Acts;

// Scratch for backward: one layer's worth, reused for every layer (backward is sequential).
typedef struct {
    floatX* dresidual; // (B, T, C) gradient of the residual stream
    floatX* dln;       // (B, T, C)
    floatX* datty;     // (B, T, C)
    floatX* dqkv;      // (B, T, 3C)
    floatX* dfch;      // (B, T, 4C)
    floatX* dfch_gelu; // (B, T, 4C)
    float*  ln_mean;   // (B, T) statistics of a recomputed layernorm (the saved ones stay as they are)
    float*  ln_rstd;   // (B, T)
} GPT2Scratch;

// Activation recompute levels (--recompute): what backward recomputes instead of keeping per layer.
// The acts buffers concerned then hold one layer, (B, T, ...), instead of (L, B, T, ...).
enum {
    GPT2_RECOMPUTE_NONE = 0,  // keep every activation
    GPT2_RECOMPUTE_GELU = 1,  // fch_gelu = gelu(fch) recomputed in backward (saves L * B*T*4C)
    GPT2_RECOMPUTE_LN = 2,    // also ln1 / ln2 recomputed from the residual stream (saves 2 L * B*T*C)
};

// FSDP units (ZeRO-3, llmc/dist/fsdp.h): the parameters of block l (unit l) and of the embedding / head
// (unit L: wte, tied to lm_head, wpe, ln_f) need not be in memory all the time. With units set,
// forward and backward say when each unit's parameters are needed (need: they must be bound on
// return), which unit comes next (prefetch: start gathering it) and when a unit's compute is
// over for now (release). The order, per training micro-step, is
//   forward:  need H, prefetch 0, release H, need 0; block l: need l, prefetch l+1 (H after the
//             last), need l+1 (its ln_1 ends block l), release l; need H (logits)
//   backward: need H, prefetch L-1, release H; block l: need l, prefetch l-1, release l
typedef struct {
    void (*need)(void* ctx, int unit);
    void (*prefetch)(void* ctx, int unit);
    void (*release)(void* ctx, int unit);
    void* ctx;
} GPT2Units;

typedef struct GPT2 {
    GPT2Config cfg;
    ParamTable pt;
    floatX* params;                    // backend memory: every allocated tensor in table order
    size_t params_n;                   // elements in params (pt.total minus the skipped tensors)
    unsigned skipped;                  // bit i set: tensor i has no floatX copy (p[i] == NULL; its
                                       // linear layers get another weight source, e.g. NF4)
    floatX* grads;                     // gradients of the trainable tensors only, packed in table
                                       // order (NULL when every base tensor is frozen)
    size_t grads_n;                    // elements in grads
    unsigned trainable;                // bit i set: tensor i is trained
    floatX* p[NUM_PARAM_TENSORS];      // tensor views into params
    floatX** lp;                       // [L][NUM_PARAM_TENSORS]: layer l's slice of tensor i (per-layer
                                       // tensors), into params or into a unit's gather buffer
    const GPT2Units* units;            // NULL: every parameter is in params
    unsigned resident;                 // bit i set: tensor i stays whole in resident_buf, outside
    floatX* resident_buf;              // the units (gpt2_set_resident)
    const uint16_t* wte16;             // the frozen lm_head (wte) in bf16, owned by llmc/model/model.c,
                                       // for an fp32 backend's bf16 GEMMs (ops.h classifier_train), or NULL
                                       // (made with gpt2_wte_to_bf16)
    const uint8_t* wte_q8;             // the lm_head in Q8_0 blocks (ops.h matmul_forward_q8) for
                                       // sampling and scoring, owned by llmc/model/model.c, or NULL
    floatX* g[NUM_PARAM_TENSORS];      // tensor views into grads (NULL entries = frozen)
    size_t g_stride[NUM_PARAM_TENSORS];// elements between layer slices of g[i]: the layer size,
                                       // or 0 when g[i] is a one-layer bucket (gpt2_grads_into_buckets)
    int recompute;                     // GPT2_RECOMPUTE_*: set with gpt2_set_recompute
    int B, T;                          // activation capacity
    GPT2Acts acts;
    GPT2Scratch scr;
    void* act_memory;
    void* scr_memory;
    size_t act_bytes, scr_bytes;
    size_t batch_bytes;                // the six (B, T) int arrays below in backend memory
    size_t attn_bytes;                 // the attention's scratch for B x T (ops.h:
                                       // attention_scratch_bytes), reserved with the activations
    int backward;                      // the activations are for training: the attention
                                       // backward's scratch is reserved too
    int* inputs;                       // (B, T) backend memory
    int* inputs_host;                  // (B, T) the same tokens on the host (encoder backward
                                       // buckets positions per token from them)
    int* targets;                      // (B, T)
    int* doc_start;                    // (B, T) backend memory: the record starts of the last forward
    int* pos;                          // (B, T) backend memory: its positions in their records
    int* pos_host;                     // (B, T) the same positions on the host (encoder backward)
    int* head_rows;                    // (B, T) backend memory: the rows with a target of the last
                                       // forward, in order (the classifier runs on those: gpt2_head)
    int* head_targets;                 // (B, T) backend memory: their targets
    int* head_host;                    // (2, B, T) host: the same two lists, built from the targets
    int head_k;                        // how many rows had a target in the last forward
    int packed;                        // the last forward had record boundaries (doc_start and pos
                                       // in use); 0: every row one sequence, positions 0..T-1
    int cur_B, cur_T;                  // shape of the last forward
    int has_targets;                   // the last forward computed losses and turned the logits into
                                       // their gradient (targets given, dloss != 0)
    float* losses_host;                // (B, T)
    LinearSet* lin;                    // the linear layers: weight sources, biases, gradients,
                                       // adapters (llmc/model/linear.h)
} GPT2;

#define GPT2_TRAIN_ALL ((1u << NUM_PARAM_TENSORS) - 1u)
// Set up the table and allocate parameters, and gradients for the tensors whose bit is set in
// trainable_mask (GPT2_TRAIN_ALL for full training, 0 for a frozen base), without the tensors whose
// bit is set in skip_mask (frozen linear weights held elsewhere: the NF4 base of QLoRA,
// llmc/model/qlora.h, which the assembly gives their layers as weight source; skipped tensors cannot be
// trainable). Programs and tests assemble models with llmc/model/model.h.
void gpt2_init(GPT2* m, const GPT2Config* cfg, unsigned trainable_mask, unsigned skip_mask);
// The floatX parameter and gradient element counts gpt2_init allocates for these masks.
void gpt2_count(const ParamTable* pt, unsigned trainable_mask, unsigned skip_mask, size_t* params_n, size_t* grads_n);
// Allocate activations and scratch (the linear layers' too) for batches up to B x T (idempotent
// for the same sizes), and reserve the attention's scratch for that shape (ops.h:
// attention_reserve), the backward's too when backward = 1 (training), so that the first step
// takes no memory.
void gpt2_alloc_acts(GPT2* m, int B, int T, int backward);
// The bytes gpt2_alloc_acts takes at B x T, a recompute level and backward, before anything is
// allocated (the trainers' device memory check): what gpt2_acts_held says once it has, less the
// adapters' scratch (counted from the adapters themselves: lora_scratch_bytes).
size_t gpt2_acts_bytes(const GPT2Config* cfg, int B, int T, int recompute, int backward);
// The bytes the activations hold now: activations, scratch, the batch arrays and the attention's
// scratch and the linear layers' adapter scratch (the memory report's "activations").
size_t gpt2_acts_held(const GPT2* m);
// The sizes behind gpt2_acts_bytes, for a plan of either backend (llmc/plan/memplan.h): the bytes
// of each activation (GPT2Acts order) and backward scratch buffer (GPT2Scratch order) for floatX
// of X bytes and a classifier scratch of cls_rows rows (ops.h classifier_rows); gpt2_alloc_acts
// carves each at a 256-byte boundary (gpt2_carved_bytes); gpt2_batch_bytes: the (B, T) int
// arrays in backend memory (inputs, targets, record starts, positions, the classifier's rows and
// their targets).
#define GPT2_NACTS 21
#define GPT2_NSCR 8
extern const char* const gpt2_act_names[GPT2_NACTS];
extern const char* const gpt2_scratch_names[GPT2_NSCR];
void gpt2_act_sizes(const GPT2Config* cfg, int B, int T, int recompute, size_t X, size_t cls_rows, size_t abytes[GPT2_NACTS],
                    size_t sbytes[GPT2_NSCR]);
size_t gpt2_carved_bytes(const size_t* bytes, int n);
size_t gpt2_batch_bytes(int B, int T);
// Activation recompute level (GPT2_RECOMPUTE_*, 0..2). Call before gpt2_alloc_acts (a later call
// reallocates the activations). Every level gives bit-identical results on a given backend as long
// as the recomputing op rounds as the forward did (the CPU backend: always; CUDA: the GELU of
// cuBLASLt's epilogue and the GELU kernel may differ in the last bf16 bit).
void gpt2_set_recompute(GPT2* m, int level);
void gpt2_free(GPT2* m);

// Gradients in buckets (ZeRO-2, llmc/dist/gradsync.h): replace the full gradient buffer by views into
// two caller-owned buffers: layer_bucket holds one layer's slices of every per-layer tensor, packed
// in table order (params_layer_numel elements each), final_bucket the other tensors (wte, wpe,
// lnfw, lnfb) packed in table order; the layout of zero_gpt2_bucket's ranges. Every layer's
// backward then writes into the same layer bucket, which the sink of gpt2_backward must empty
// after each layer. Only for fully trainable models.
void gpt2_grads_into_buckets(GPT2* m, floatX* layer_bucket, floatX* final_bucket);

// One layer bucket for the per-layer gradients from now on (FSDP: two buckets take turns, one
// being reduce-scattered while backward fills the other). After gpt2_grads_into_buckets.
void gpt2_grads_layer_bucket(GPT2* m, floatX* layer_bucket);

// ---- FSDP units (see GPT2Units). A unit's parameters packed: its tensors (one layer's slices for
// a block) back to back in table order, tensors without a floatX copy left out; the same layout as
// the gradient buckets of gpt2_grads_into_buckets for a fully trainable model.
typedef struct { ParamId id; size_t off, n; } GPT2UnitTensor;
size_t gpt2_unit_numel(const GPT2* m, int unit);
// The same for a model of table pt without the tensors in skipped and resident (a plan's units).
size_t gpt2_unit_numel_for(const ParamTable* pt, unsigned skipped, unsigned resident, int unit);
// The unit's tensors and their offsets in the packed layout; out needs NUM_PARAM_TENSORS entries.
int gpt2_unit_tensors(const GPT2* m, int unit, GPT2UnitTensor* out);
// Copy the unit's parameters from where they are bound now into buf (packed).
void gpt2_unit_pack(const GPT2* m, int unit, floatX* buf);
// Point the unit's tensor views (and its linear layers) at buf (packed).
void gpt2_bind_unit(GPT2* m, int unit, floatX* buf);
// Free the full parameter buffer (every view NULL until bound), and allocate / bind it again.
void gpt2_params_drop(GPT2* m);
void gpt2_params_full(GPT2* m);
void gpt2_set_units(GPT2* m, const GPT2Units* units);
// Tensors kept whole on every rank, outside the units (ZeRO 3 of LoRA with trained base tensors:
// biases, ln_f). Call once, before the units are laid out, with the parameters full: their values
// move into a buffer of their own, where their views stay from then on (through gpt2_params_drop
// and gpt2_params_full).
void gpt2_set_resident(GPT2* m, unsigned mask);

// Host fp32 <-> model parameters (table layout, pt.total floats). set skips the tensors without
// a floatX copy; get fills them from their linear layers' weight source (NF4: dequant(quant(W))).
void gpt2_set_params(GPT2* m, const float* host);
void gpt2_get_params(GPT2* m, float* host);
// Layer l's slice of tensor id (the whole tensor when it is not per layer or l < 0), and of its
// gradient (NULL when the tensor is frozen).
floatX* gpt2_param_slice(const GPT2* m, ParamId id, int l);
floatX* gpt2_grad_slice(const GPT2* m, ParamId id, int l);

// Forward on host token arrays (B*T each; targets may be NULL). With targets, computes the
// per-token losses and returns the sum of losses over targets >= 0 (count in *n_valid).
// If dloss != 0 (a training forward) the classifier's backward is done too: the gradient of
// lnf waits for gpt2_backward, and wte's gradient is ADDED here (zero gradients before the
// forward). Without targets returns 0 and leaves logits in acts.logits.
// doc_start: NULL (each row one sequence), or packed records (host, B*T, as the data loader gives
// them: for each position, the position in its row where its record starts). Then every record
// computes what it would alone: its positions start at 0 (wpe) and its tokens attend only to its
// own (attention's doc_start, llmc/ops/ops.h); backward follows the same. Rows without a boundary
// cost nothing extra; a backend without ops_caps().doc_attention refuses boundaries.
double gpt2_forward(GPT2* m, const int* inputs, const int* targets, const int* doc_start, int B, int T,
                    float dloss, long* n_valid);
// The training forward (targets required): as gpt2_forward, but the sum of the losses is added
// into *loss_acc (one double in backend memory) and nothing is read back, so a step's
// micro-batches run without waiting for the device (the caller knows the valid targets).
void gpt2_forward_acc(GPT2* m, const int* inputs, const int* targets, const int* doc_start, int B, int T,
                      float dloss, double* loss_acc);
// A training step whose loss is a function of the per-token log-probabilities of the last forward
// (gpt2_forward with targets and dloss 0): the preference objectives (llmc/model/prefmodel.h).
// Runs the classifier's backward with a weight per row (dloss_rows: N floats in backend memory,
// row n's logits' gradient dloss_rows[n] * (softmax - onehot(target)), ops.h
// classifier_train_rows), recomputing the logits: lnf's gradient then waits for gpt2_backward,
// and wte's is added, as after a training forward.
void gpt2_classifier_backward_rows(GPT2* m, const float* dloss_rows);

// ---- the forward pass in pieces, shared with the key/value-cache forward (llmc/model/sampler.c)

// wte (all Vp rows) rounded to bf16 (to nearest even, as torch's .to(bfloat16)) from its current
// values into backend memory at dst (Vp x C): the lm_head's operand for bf16 GEMMs on an fp32
// backend (llmc/model/model.c, sampler.c). Through a host staging of GPT2_WTE16_ROWS rows in fp32
// and in bf16 (6 x rows x C bytes).
#define GPT2_WTE16_ROWS 1024
void gpt2_wte_to_bf16(const GPT2* m, uint16_t* dst);

// Token + position embeddings of tokens (backend memory, B x T) at positions [pos, pos + T), or
// at positions[b, t] (backend memory, B x T; packed records) when given, into x (N, C), and the
// first block's ln_1 of it into ln (mean / rstd: (N) statistics).
void gpt2_embed_forward(GPT2* m, floatX* x, floatX* ln, float* mean, float* rstd, const int* tokens,
                        const int* positions, int B, int T, int pos);

// One transformer block over N = B x T rows. ln1 holds ln_1 of the block's input on entry (the
// embedding or the previous block computed it); the block writes its output residual3 and, fused
// with that add, the next layernorm's output into ln_next: block l + 1's ln_1, or ln_f after the
// last block. Buffers may alias where the data flow allows it (the cache forward reuses one set
// of row buffers: residual3 = residual, ln2 = ln_next = ln1).
typedef struct {
    const floatX* residual;   // (N, C) the block's input
    const floatX* ln1;        // (N, C) ln_1(residual)
    floatX* qkv;              // (N, 3C)
    floatX* atty;             // (N, C) attention output
    float* lse;               // (B, NH, T) softmax log-sum-exp kept for backward (unused with a cache)
    floatX* attproj;          // (N, C)
    floatX* residual2;        // (N, C) residual + attproj
    floatX* ln2;              // (N, C)
    float* ln2_mean;          // (N)
    float* ln2_rstd;          // (N)
    floatX* fch;              // (N, 4C) pre-GELU
    floatX* fch_gelu;         // (N, 4C)
    floatX* fcproj;           // (N, C)
    floatX* residual3;        // (N, C) the block's output
    floatX* ln_next;          // (N, C) the next layernorm of residual3
    float* ln_next_mean;      // (N)
    float* ln_next_rstd;      // (N)
} GPT2BlockIO;

// Attention against a key/value cache: the T new rows of each of B sequences are positions
// [pos, pos + T); k / v hold this layer's cache for up to maxT positions.
// A layer's key/value cache: floatX, or bf16 (k16 / v16, the others NULL: attention_forward_kv16).
typedef struct { floatX* k; floatX* v; uint16_t* k16; uint16_t* v16; int pos; int maxT; } GPT2KVSlot;

// kv NULL: causal attention over the T rows themselves (training / full forward).
void gpt2_block_forward(GPT2* m, int l, const GPT2BlockIO* io, int B, int T, const GPT2KVSlot* kv);

// Called by gpt2_backward as soon as a bucket of parameter gradients is complete: bucket L-1-l
// after block l, bucket L (wte, wpe, ln_f and everything outside the blocks) at the end.
typedef struct {
    void (*bucket_done)(void* ctx, int bucket);
    void* ctx;
} GPT2GradSink;

// Backward of the last training forward. Accumulates into parameter gradients (m->g, the
// adapters' gradients) so micro-steps of gradient accumulation just add up. Frozen tensors get no
// weight gradient, only the gradient flowing through them. sink: NULL, or told of every
// completed bucket (ZeRO-2 reduces it there).
void gpt2_backward(GPT2* m, const GPT2GradSink* sink);
// Zero every gradient the model accumulates into: m->grads and the adapters' (llmc/model/linear.h).
void gpt2_zero_grads(GPT2* m);

// Bytes of the floatX parameters (skipped tensors not counted) and of the full gradient buffer
// (memory report; 0 with buckets, which their owner counts).
size_t gpt2_param_bytes(const GPT2* m);
size_t gpt2_resident_bytes(const GPT2* m); // (gpt2_set_resident's buffer)
size_t gpt2_grad_bytes(const GPT2* m);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GPT2_H
