// The linear layers of GPT-2 (c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj of every block), every
// variant of them handled here and nowhere else. One layer computes
//     y[N, out] = x[N, in] W^T + b   (+ scaling * B (A drop(x)) when it carries an adapter)
// and is described by a Linear:
//   - its weight source: where W comes from. LINEAR_W_DENSE, a floatX tensor of the model's
//     parameters; LINEAR_W_NF4, QLoRA's frozen 4-bit weight (llmc/ops/nf4.h, bitsandbytes' format),
//     dequantized by the backend op into a buffer all layers share just before each matmul. A new
//     kind (e.g. bf16 weights on the CPU backend) is one more LinearWeightKind, a setter like
//     linear_use_nf4, and a case in linear.c's linear_weight() and linear_weight_to_host();
//   - its bias, and the weight / bias gradients where they are trained (NULL where frozen);
//   - optionally a low-rank adapter (LoRA, PEFT semantics): A [rank, in], B [out, rank] and their
//     gradients, held in the owner's buffers (llmc/model/lora.h builds them, llmc/model/model.c puts them on
//     the layers). With a 0/1 mask on B's gradient (the q/k/v split of c_attn) the masked entries
//     of B stay exactly zero under AdamW.
// The layers of a model are one LinearSet (GPT2.lin), which also holds what they share: the
// decoded-weight buffer, the adapters' scratch (one layer's worth, backward is sequential) and the
// dropout state. A DoRA adapter (a magnitude m beside A and B, llmc/model/lora.h) scales the
// layer's output row by m / ||W + scaling B A||_row; the norms are recomputed by every forward, or
// once while the parameters are fixed (sampling: linear_set_dora_cache). Dropout (PEFT: inverted dropout on the input of the adapter branch, one mask per
// layer) draws from the counter-based RNG: the mask of a layer at training tick t is a pure
// function of (seed, t, layer, element), so backward regenerates it instead of storing it and a
// resumed run draws the same masks.
#ifndef LLMC_LINEAR_H
#define LLMC_LINEAR_H

#include <stddef.h>
#include <stdint.h>
#include "ops/ops.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

// The linear layers of a block, in block order (the order of their weights in the table).
enum { LINEAR_QKV = 0, LINEAR_ATTPROJ, LINEAR_FC, LINEAR_FCPROJ, LINEAR_PER_BLOCK };

// The table tensor of a kind's weight (its bias follows it in the table); the kind of a weight
// tensor, -1 for a tensor that is not a linear weight.
ParamId linear_weight_id(int kind);
int linear_kind_of(ParamId id);

typedef enum {
    LINEAR_W_NONE = 0,    // no source yet (a bug if the layer runs)
    LINEAR_W_DENSE,       // floatX [out, in] in the model's parameters
    LINEAR_W_NF4,         // NF4 [out, in], dequantized into the shared buffer for each matmul
    LINEAR_W_BF16,        // bf16 [out, in] (raw bit patterns) in backend memory: a frozen weight at
                          // half the memory where floatX is fp32 (LoRA with --dtype bf16 on the CPU)
    LINEAR_W_Q8,          // Q8_0 blocks [out, in / 32] (ops.h matmul_forward_q8) in backend memory:
                          // a frozen weight for sampling and scoring (generate --weights q8_0)
} LinearWeightKind;

typedef struct {
    LinearWeightKind kind;
    const floatX* dense;      // LINEAR_W_DENSE
    const NF4Tensor* nf4;     // LINEAR_W_NF4: the host tensor (host copies of the weight) ...
    const Nf4Op* nf4_op;      //   ... and its backend handle (the matmuls)
    const uint16_t* bf16;     // LINEAR_W_BF16
    const uint8_t* q8;        // LINEAR_W_Q8
} LinearWeight;

typedef struct {
    int rank;
    float scaling;            // alpha / r (alpha / sqrt(r) with rsLoRA)
    const floatX* A;          // [rank, in]
    const floatX* B;          // [out, rank]
    floatX* dA;               // gradients, same shapes
    floatX* dB;
    const floatX* b_mask;     // [out, rank] 0/1: the entries of B that are parameters, or NULL (all)
    uint32_t stream;          // the layer's dropout stream: layer * LINEAR_PER_BLOCK + kind
    const floatX* m;          // DoRA: the magnitude [out], or NULL (plain LoRA)
    floatX* dm;               //   its gradient
    float* norm;              //   [out] fp32: the row norms of W + scaling B A, of the last forward
    int* norm_ready;          //   host flag: norm holds the current parameters' (linear_set_dora_cache)
} LinearAdapter;

typedef struct {
    floatX* wbuf;             // one decoded weight (the largest non-dense one), or NULL
    size_t wbuf_n;            // its elements
    int n_adapters;
    int rows;                 // rows the adapter scratch holds
    floatX* xd;               // (rows, max in) the dropped-out input, with dropout
    floatX* h;                // (rows, max rank)
    floatX* dh;               // (rows, max rank)
    floatX* tmp;              // (rows, max in) the input gradient through the dropout mask, with dropout
    floatX* z;                // DoRA: (rows, max out) the layer's output before the magnitude's scale
    floatX* dz;               // DoRA: (rows, max out) the output gradient scaled by m / n
    size_t scratch_bytes;     // xd + h + dh + tmp (+ z + dz), for the memory report
    float dropout;            // p in [0, 1)
    uint64_t seed;
    uint64_t tick;            // the training micro-step whose masks are drawn
    int training;             // 1: dropout active (a training forward / backward)
    int adapters_off;         // 1: the layers compute without their adapters (linear_set_adapters)
    int dora_cache;           // 1: DoRA's norms are computed once and kept (linear_set_dora_cache)
} LinearShared;

typedef struct {
    int in, out;
    LinearWeight w;
    const floatX* b;          // bias [out]
    floatX* dw;               // weight gradient [out, in], or NULL
    floatX* db;               // bias gradient [out], or NULL
    int has_adapter;
    LinearAdapter ad;
    LinearShared* sh;         // the set's shared state
} Linear;

typedef struct {
    int n_layers;
    Linear* layers;           // [n_layers * LINEAR_PER_BLOCK], layer-major
    LinearShared shared;
} LinearSet;

// The linear layers of a model of table pt, with their shapes and no weight source yet.
LinearSet* linear_set_create(const ParamTable* pt);
void linear_set_free(LinearSet* s);
Linear* linear_at(LinearSet* s, int layer, int kind);
// Buffers for batches of up to rows = B x T rows: the decoded weight (once) and, with adapters,
// their scratch (grows only). Call after every weight source and adapter is in place.
void linear_set_alloc(LinearSet* s, int rows);
// The adapters' scratch for rows rows in bytes of floatX: what linear_set_alloc takes for adapters
// whose largest input and rank are max_in, max_rank (the dropped input and its gradient only
// with dropout; DoRA's two outputs with max_out_dora, the largest output of a DoRA adapter, > 0).
// The memory footprint counts it before the layers exist (lora_scratch_bytes).
size_t linear_adapter_scratch_bytes(size_t rows, int max_in, int max_rank, int max_out_dora, int dropout);
size_t linear_adapter_scratch_numel(size_t rows, int max_in, int max_rank, int max_out_dora, int dropout); // (in floatX elements)
// Rows the adapters' scratch holds (a bound on N of one call), or INT_MAX without adapters.
int linear_set_rows(const LinearSet* s);
// Dropout of every adapter: probability p, masks drawn from seed.
void linear_set_dropout(LinearSet* s, float p, uint64_t seed);
// training 1: the adapters apply dropout with the masks of micro-step tick; 0: evaluation.
void linear_set_training(LinearSet* s, int training, uint64_t tick);
// on 0: every layer computes its base alone, as if it had no adapter (PEFT's disable_adapter():
// the reference model of DPO / IPO with LoRA, llmc/model/prefmodel.h), until on 1 again. A forward
// only: a backward with the adapters off is refused.
void linear_set_adapters(LinearSet* s, int on);
// Zero the adapters' gradients (the weight / bias gradients are the model's).
void linear_set_zero_grads(LinearSet* s);
// on 1: DoRA layers compute their norms once and keep them, for as long as nothing changes the
// adapters or the weights (sampling, scoring); 0: every forward computes them (training).
void linear_set_dora_cache(LinearSet* s, int on);
// A DoRA layer's norms of W + scaling B A now, into its adapter's norm (lora_dora_init).
void linear_dora_norm(const Linear* x);

// Weight sources (shapes must be the layer's [out, in]).
void linear_use_dense(Linear* x, const floatX* W);
void linear_use_nf4(Linear* x, const NF4Tensor* t, const Nf4Op* op);
void linear_use_bf16(Linear* x, const uint16_t* W);
// A weight in Q8_0 blocks (in a multiple of 32): forward only (a backward through it is a bug).
void linear_use_q8(Linear* x, const uint8_t* W);
// Put an adapter on the layer (copied; its buffers stay the caller's).
void linear_set_adapter(Linear* x, const LinearAdapter* a);

// out[N, out] = inp[N, in] W^T + b (+ the adapter); with gelu_out, also gelu_out = gelu(out).
void linear_forward(const Linear* x, floatX* out, floatX* gelu_out, const floatX* inp, int N);
// dinp = dout W + the adapter branch's part (added to what dinp holds with accumulate); the
// weight, bias and adapter gradients accumulate where they are trained.
void linear_backward(const Linear* x, floatX* dinp, const floatX* dout, const floatX* inp, int N, int accumulate);
// The backward of a layer whose input is inp = gelu(pre) (mlp.c_proj), to the gradient of pre:
// dpre = gelu'(pre) * (dout W + the adapter branch's part), written. Without an adapter one GEMM
// with the GELU derivative in its epilogue; with one (or a weight held in bf16), the gradient of
// inp goes through dact (N x in scratch) first, since the adapter's part must be added before
// the derivative applies.
void linear_backward_gelu(const Linear* x, floatX* dpre, floatX* dact, const floatX* dout, const floatX* inp,
                          const floatX* pre, int N);
// The weight as host fp32 [out, in] (an NF4 weight: dequant(quant(W))).
void linear_weight_to_host(const Linear* x, float* out);

#ifdef __cplusplus
}
#endif
#endif // LLMC_LINEAR_H
