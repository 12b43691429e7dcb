// Model assembly: the one way every program, test and tool puts a ready-to-run GPT-2 together.
//   1. weights: a model file or directory (llm.c .bin, safetensors, HF dir), a transformers +
//      bitsandbytes 4-bit checkpoint (its linear weights stay NF4), a size descriptor (d12, tiny)
//      initialized from a seed, or fp32 values already in memory;
//   2. adapters: given by the caller, loaded from a PEFT directory, or new ones (PEFT init), once
//      the base's shape is known; PiSSA / OLoRA take theirs from the fp32 base weights and leave
//      the residual W - scaling B0 A0 in their place, before anything is rounded or uploaded;
//   3. QLoRA: the linear weights quantized to NF4 (always for a 4-bit checkpoint);
//   4. the GPT2 tensors (gradients for the trainable tensors and the base slices the adapters
//      train; no floatX copy of NF4 weights) and the parameters;
//   5. the linear layers' NF4 or bf16 weights and adapters (llmc/model/linear.h), the base slices the adapters
//      train pointed at the model's; the recompute level, the activations (and adapter values
//      from a checkpoint, on resume).
#ifndef LLMC_MODEL_H
#define LLMC_MODEL_H

#include <stdint.h>
#include "base/fileio.h"
#include "model/gpt2.h"
#include "model/lora.h"
#include "model/trainseg.h"
#include "model/qlora.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_SOURCE_MAX (LLMC_PATH_MAX + 64)

// Adapters built during assembly (the Model owns them).
typedef struct {
    const char* adapter;       // a PEFT adapter directory: structure and values; or NULL and
    LoraSpec spec;             // new adapters of this structure (targets, rank, alpha, ...),
    const char* layers;        //   on these blocks ("all" or "0-5,8"; NULL = all)
    int dropout_override;      // with adapter: spec.dropout replaces the adapter's lora_dropout
    uint64_t seed;             // PEFT init of new adapters, and the dropout masks
    const char* base_name;     // base_model_name_or_path of the export (NULL: the model path)
    const char* values;        // then load the adapter tensors from this file (a checkpoint)
    const char* init_values;   // spec.init pissa / olora: the initial adapter from this file (a
                               // resume: peft_save_adapter_init's) instead of factoring the base
    const char* const* mix;    // adapter NULL, n_mix >= 2: these PEFT adapters combined (lora_mix)
    int n_mix;
    const float* mix_weights;  //   with these weights (n_mix of them)
    int mix_how;               //   LORA_MIX_*
} LoraSource;

// What the assembled model will hold in backend memory, in bytes, known before any of it is
// allocated: the model's own count, which test/test_memplan.c holds the trainers' plan
// (llmc/plan/memplan.h, whose refusal runs before the model is built) to.
typedef struct {
    size_t params;             // floatX parameters, the adapters' included
    size_t grads;              // floatX gradients, the adapters' included
    size_t base;               // the frozen base held apart: NF4 blocks + the dequant buffer, bf16 or
                               // Q8_0; and the frozen lm_head in bf16 (Model.wte16) or Q8_0
    size_t acts;               // activations and scratch at the spec's B x T, recompute level and
                               // backward (gpt2_acts_bytes: the attention's scratch included), and
                               // the adapters' scratch (lora_scratch_bytes)
    size_t trainable;          // elements the optimizer updates (adapters + the base slices they train,
                               // or every trainable tensor)
} ModelFootprint;

// ModelSpec.base_q8: dense weights; Q8_0 (a DoRA adapter or a channel count that is not a
// multiple of 32 refused); Q8_0 where those allow it, dense otherwise.
enum { MODEL_Q8_OFF = 0, MODEL_Q8_ON = 1, MODEL_Q8_WHERE_ABLE = 2 };

typedef struct {
    const char* path;          // model file / directory, or a size descriptor (d12, tiny); or
    const GPT2Config* cfg;     //   with path NULL: fp32 weights in ParamTable layout (the caller's)
    const float* host;
    uint64_t seed;             // initialization of a size descriptor
    int qlora;                 // the linear weights as NF4 (a 4-bit checkpoint always is)
    int base_bf16;             // linear weights without gradients (LoRA's base, or generate), not
                               // NF4, on a backend whose floatX is fp32: held in bf16 only (half
                               // the memory; --dtype bf16 on the CPU), their matmuls in bf16;
                               // and a frozen wte's bf16 copy for the lm_head (Model.wte16)
    int base_q8;               // MODEL_Q8_*: nothing trains (generate): the linear weights and the
                               // lm_head in Q8_0 blocks (Model.base_q8, wte_q8; ops.h
                               // matmul_forward_q8), their fp32 copies never allocated; over base_bf16
    unsigned trainable;        // table tensors with gradients (GPT2_TRAIN_ALL, or 0); the base
                               // slices the adapters train are added
    int recompute;             // GPT2_RECOMPUTE_*
    int B, T;                  // activations for batches up to B x T (B = 0: none)
    int backward;              // they are for training: the attention backward's scratch is
                               // counted in the footprint and reserved with them
    const char* T_flag;        // the flag that set T, for the message when it exceeds n_positions
    LoraModel* lora;           // adapters to attach (the caller keeps them), or
    const LoraSource* lora_src;//   adapters to build
    // called once the footprint is known, before the parameters, the base and the activations are
    // allocated (new adapters already are: a few MiB at most); may be NULL (the trainers plan
    // before this instead: llmc/plan/plan_run.h)
    void (*before_alloc)(void* ctx, const ModelFootprint* fp);
    void* before_alloc_ctx;
} ModelSpec;

typedef struct {
    GPT2 gpt;
    LoraModel* lora;           // the attached adapters, or NULL
    Nf4Base* nf4;              // the NF4 base weights, or NULL
    uint16_t* base16;          // the bf16 base weights (ModelSpec.base_bf16), or NULL
    uint16_t* wte16;           // with base_bf16 and wte frozen: wte in bf16, the lm_head's GEMM
                               // operand (gpt2.wte16), rounded once instead of at every step
    uint8_t* base_q8;          // the Q8_0 linear weights (ModelSpec.base_q8), or NULL
    uint8_t* wte_q8;           // with base_q8: wte in Q8_0 for the lm_head (gpt2.wte_q8)
    floatX* ref_lnf;           // the base's ln_f (weight, bias: 2 C) where the adapters train it,
    floatX* lnf_keep;          //   and room for the trained one while the adapters are off
    int adapters_off;          // model_set_adapters(m, 0) is in force
    int owns_lora;
    char source[MODEL_SOURCE_MAX]; // where the weights came from, for reports and messages
} Model;

// Elements of the host staging through which model_assemble rounds the frozen linear weights to
// bf16 (one layer's largest linear weight).
size_t model_bf16_stage(const ParamTable* pt);

// Assemble m from spec. Fatal with a message naming the file or flag value on anything wrong.
// The adapters (lora) stay on m until model_free, also when they are the caller's.
void model_assemble(Model* m, const ModelSpec* spec);
// (Re)allocate the activations, and the linear layers' scratch, for batches up to B x T (backward:
// as ModelSpec's): for callers that know the sequence length only once the model's config is
// known (generate).
void model_alloc_acts(Model* m, int B, int T, int backward);
void model_free(Model* m);

// on 0: the model without its adapters, as PEFT's disable_adapter() has it: the reference model
// of DPO and IPO with LoRA (llmc/model/prefmodel.h). Every linear layer computes its base alone;
// ln_f, where the adapters train it (modules_to_save), is the base's again (PEFT then uses the
// original module), while trained biases keep their trained values (PEFT trains them in place).
// For forwards only, until on 1. Nothing is allocated or copied but ln_f (2 C values).
void model_set_adapters(Model* m, int on);

// The optimizer's segments: with adapters, the adapters (one segment) and the base slices they
// train; otherwise every trainable tensor in table order. segs needs model_max_segments entries.
int model_segments(Model* m, TrainSeg* segs);
int model_max_segments(const Model* m);
// The trained base slices of the adapters (biases, ln_f) pointed at where the model holds them
// now (after ZeRO 3 moved them, llmc/dist/fsdp.h).
void model_lora_extras_rebind(Model* m);

#ifdef __cplusplus
}
#endif
#endif // LLMC_MODEL_H
