// The memory and time plan of a training run, made before anything is allocated: per rank and by
// component, the bytes every buffer of the run will take (parameters, master weights, gradients,
// optimizer state, activations by layer and recompute level, attention scratch, ZeRO buckets and
// gather buffers, the NF4 base, adapters, logits, the backend's and the collectives' scratch), the
// largest moment of the start-up (the weights are read into host memory before the model takes
// its own), the FLOPs of a step and, given a backend's measured rate, the step's time; and the
// search for the settings that fit a memory limit (micro-batch, recompute level, ZeRO stage,
// LoRA / QLoRA).
//
// Every size comes from the function the allocation itself uses (gpt2_count, gpt2_act_sizes,
// lora_layout, nf4_bytes_for / nf4_image_bytes_for, fsdp_sizes, gradsync_zero2_bucket_numel,
// opt_state_bytes_for, llmc/ops/sizes.h); the plan replays the trainer's start-up in order
// (memplan.c says which call each step stands for), so that its peak is the peak of the run. On
// the CPU backend a buffer counts (in the resident set) from its first write, so activations and
// scratch count from the first step; on a GPU from its allocation. test/test_memplan.c holds the
// figures to what the code allocates; dev/bench_plan.sh to the measured peak RSS (docs/MEMORY.md).
#ifndef LLMC_MEMPLAN_H
#define LLMC_MEMPLAN_H

#include <stddef.h>
#include <stdio.h>
#include "model/config.h"
#include "model/lora.h"
#include "run/runconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

// A backend as the plan sees it.
typedef struct {
    const char* name;     // "cpu" or "cuda"
    int device;           // 1: GPU memory (counts when allocated; host memory apart); 0: host memory
                          // (counts when first written: the resident set)
    size_t X;             // bytes of floatX: parameters, gradients, activations
    int master;           // the optimizer keeps fp32 master weights
    int bf16_gemm;        // CPU: GEMMs in bf16 or fp16 (operand scratch; LoRA's frozen base held in bf16)
    int f16_gemm;         // CPU: those GEMMs in fp16 (no weight held in 16 bits; the lm_head rounded per block)
    size_t gemm_widen;    // CPU without a bf16 matmul: the fp32 panels its bf16 GEMMs widen into
    size_t runtime;       // what the process holds besides the run's buffers: CPU the libraries and
                          // threads (measured, MEMPLAN_CPU_RUNTIME); GPU the reserve for cuBLASLt,
                          // NCCL and the ops' small scratch (memplan_backend_cuda)
    size_t runtime_mpi;   // CPU: more under MPI (several ranks)
    size_t blas;          // CPU: OpenBLAS's buffers at most (fp32 GEMMs, full training), from the first step on
    double flops;         // training throughput in model FLOP/s predicted on this backend (0: unknown)
    double gemm_flops;    // CPU: the GEMM rate --plan measured (plan_run.c), flops' basis
    double link;          // bytes/s a rank sends to the others (0: unknown)
} PlanBackend;

// Measured on the 2-core development machine (Debian's OpenBLAS, oneDNN, OpenMPI 4): the resident
// set of train_gpt2 / train_lora beyond the buffers the plan lists (docs/MEMORY.md): the program,
// its libraries and threads; under MPI OpenMPI's on top. With fp32 GEMMs and every parameter
// trained, OpenBLAS's buffers grow with the weight gradients' GEMMs: about 176 KiB per row of the
// classifier's blocks (min(B T, 512)), at most 44 MiB (LoRA's fp32 GEMMs, and bf16 GEMMs, which
// never call OpenBLAS, add nothing measurable).
#define MEMPLAN_CPU_RUNTIME ((size_t)16 << 20)
#define MEMPLAN_CPU_BLAS_ROW ((size_t)176 << 10)
#define MEMPLAN_CPU_BLAS ((size_t)44 << 20)
#define MEMPLAN_CPU_RUNTIME_MPI ((size_t)4 << 20)       // and as much per peer rank
#define MEMPLAN_CPU_MPI_FRAGMENTS ((size_t)6 << 20)     // per peer rank: ZeRO 3's non-blocking gathers
// What a writer of the outputs holds beside the model, per token of the vocabulary, measured with
// GPT-2's (50257 tokens) on the development machine: the tokenizer files of a model directory
// load the vocabulary to check it (6.5 MiB at its peak), a GGUF file builds its tokenizer tables
// (8.0 MiB).
#define MEMPLAN_TOKENIZER_PER_TOKEN ((size_t)136)
#define MEMPLAN_GGUF_VOCAB_PER_TOKEN ((size_t)167)

// The share of a GPU's peak bf16 FLOP/s (llmc/base/mfu.h) a training step reaches, measured on an
// H100 at GPT-2 124M shapes, T = 1024, B = 16 (dev/reports/gpu_2026-11-28: full fine-tuning 37.7%,
// GPT-2 XL 41.2% at B = 8; LoRA and QLoRA on c_attn 33%): the trainers' predicted step time on a
// GPU of the table.
#define MEMPLAN_GPU_MFU_FULL 0.377
#define MEMPLAN_GPU_MFU_LORA 0.33
// On the CPU, the share of its GEMM rate (measured by --plan: plan_run.c) a training step's
// model FLOPs reach: GPT-2 124M, T = 1024, on the 2-core AVX512-BF16 development machine
// (docs/MEMORY.md, "Time"): the step's GELU, layernorm, attention, softmax and
// optimizer at the GEMMs' rate would give 1.0.
#define MEMPLAN_CPU_STEP_OF_GEMM_FULL 0.43
#define MEMPLAN_CPU_STEP_OF_GEMM_LORA 0.42

void memplan_backend_cpu(PlanBackend* b, int bf16_gemm);
// A GPU with total bytes of memory (the reserve: 1/16 of it, at most 512 MiB).
void memplan_backend_cuda(PlanBackend* b, size_t total);
// The backend this program is linked with (ops_caps, the GEMM precision in force, the GPU's size).
void memplan_backend_this(PlanBackend* b);

// Where the weights come from: they are read (or initialized) into host fp32 first.
typedef enum { PLAN_SRC_INIT = 0, PLAN_SRC_BIN, PLAN_SRC_HF, PLAN_SRC_GGUF } PlanSource;

typedef struct {
    GPT2Config cfg;
    int lora;             // 0: every parameter trains (train_gpt2); 1: adapters (train_lora)
    int qlora;            // with lora: the frozen linear weights in NF4
    LoraSpec lspec;       // with lora: rank, targets, layers, dropout, trained biases / ln_f
    int B, T, recompute;  // micro-batch per rank, sequence length, --recompute
    int accum;            // micro-steps per optimizer step (>= 1)
    int zero, world, rank;// --zero, ranks, the rank planned for
    int keep, shard_group;// --zero3-keep, --shard-group
    int offload;          // --offload-optimizer
    int save;             // the run writes models and checkpoints (not --out none)
    int sample;           // the run samples (--sample-tokens): at ZeRO 3 rank 0 gathers the model for it
    int pref;             // a preference objective (--objective dpo|ipo|orpo|simpo): its pair buffers
    PlanSource source;
    size_t budget;        // --memory-budget: the buffers at their largest (peak_buffers) within these bytes; 0: no bound
    // what the run writes (with save): the final model's formats (--save-format, --save-gguf, with
    // --merge the merged model of train_lora), --keep-best's copies, whether a vocabulary is found
    // (its tokenizer files go into every model directory), and the final model.bin as a second
    // name of the last checkpoint's model file (outputs_save)
    int save_hf, save_llmc, save_gguf, merge, keep_best, vocab, link_llmc;
    int bitfit;                  // train_lora --lora-rank 0: no adapter; the checkpoints hold the biases, the output is the model
    size_t vocab_bytes;   // with vocab: the tokenizer files of one model directory
    // the stored reference of DPO and IPO (llmc/run/preftrain.h): every pair's log-probabilities,
    // computed before training (ref_pass) with the model itself (train_gpt2) or with a second
    // model (ref_model: its config and source); pairs: of the training and validation data
    int ref_stored, ref_pass, ref_model;
    GPT2Config ref_cfg;
    PlanSource ref_source;
    int64_t pairs;
    // the most rows with a target in a micro-batch of B sequences of T (the data's loss masks:
    // llmc/plan/plan_run.c); the classifier writes its logits on those rows only; NULL: every row
    int (*target_rows)(const void* ctx, int B, int T);
    const void* target_ctx;
} PlanSpec;

// The defaults of the trainers' flags for cfg (B 4, T 1024 capped at n_positions, one rank).
void memplan_spec_init(PlanSpec* s, const GPT2Config* cfg);
// The config of --model without its weights, and where they would come from: a descriptor (d12),
// a Hugging Face directory or config.json (or a .safetensors / index with config.json beside it),
// an llm.c .bin (its header). Fatal, naming the path, on what the loader would refuse.
void memplan_model_config(const char* model, GPT2Config* cfg, PlanSource* source);
// The spec of a trainer's run from its flags (llmc/run/runconfig.h) for rank of world ranks: what
// --plan and --batch-size auto plan. LoRA's structure comes from the --lora-* flags (an --adapter
// directory's own structure is not read: the plan takes the flags' shape for it, by default rank
// 8 on c_attn; the adapters are a small part of a run's memory). A flag given as
// auto (--batch-size, --recompute) is planned at 1 and 0 until the trainer's plan step chooses.
void memplan_spec_from_run(PlanSpec* s, const RunConfig* rc, const GPT2Config* cfg, int world, int rank);

enum { PLAN_HOST = 0, PLAN_BACKEND = 1 };
#define MEMPLAN_MAX_ITEMS 40
typedef struct {
    const char* name;     // "parameters", "optimizer state", ...
    size_t bytes;
    int where;            // PLAN_HOST or PLAN_BACKEND
    char what[96];        // how it is made up
} PlanItem;

typedef struct {
    PlanSpec spec;
    PlanBackend be;
    PlanItem item[MEMPLAN_MAX_ITEMS]; // what stays during training, per rank
    int n;
    size_t steady[2];     // their sums: host, backend
    size_t peak;          // the largest moment: CPU the resident set; GPU the device memory
    size_t peak_host;     // GPU: the host memory's largest moment (the weights being read)
    const char* peak_at;  // "reading the weights", "building the model", "sharding the model", "training", ...
    size_t peak_first_step; // the peak up to the end of the first step (start-up and training: saving comes later)
    size_t peak_buffers;  // the memory report's components (memplan_category; on a GPU those in its memory)
    const char* peak_buffers_at; // at their largest, and when: what --memory-budget limits
    struct {              // the model before sharding (model_assemble's ModelFootprint)
        size_t params, grads, base, acts, trainable;
    } model;
    struct {              // what a checkpoint holds beside training, for the tests: the staging buffer,
        size_t staging, state_layout, model; // ZeRO 3's array in the state file's layout, rank 0's model (adapter) in fp32
    } save;
    struct { size_t params, acts; } ref; // --ref-model's model: its parameters; its activations, logits, scratch and batch
    size_t acts_level[3]; // activations with their scratch at recompute 0, 1, 2 (the rest equal)
    size_t acts_layer[3]; // of which kept per layer
    double flops;         // model FLOPs of one optimizer step on this rank
    double comm_bytes;    // bytes this rank sends per optimizer step (ZeRO collectives)
    double step_s;        // predicted time of a step (0: no rate known)
} Plan;

// The plan of one run. Fatal, with the same message the run would give, on a spec the run would
// refuse (a bad LoRA spec, a sequence longer than n_positions, a --shard-group that does not
// divide the ranks).
void memplan_make(const PlanSpec* s, const PlanBackend* b, Plan* p);
void memplan_print(const Plan* p, FILE* out);
// The memory report's group of a plan item (by its name): parameters (with the NF4 or bf16 base,
// ZeRO 3's shards and gather buffers; "adapters", A and B with their gradients, is half of it and
// half gradients), gradients (with ZeRO's shards and buckets), optimizer state, activations (with
// the logits and every scratch buffer of the step), or none of them (the runtime, the libraries'
// and the collectives' buffers, what start-up and saving hold for a while, host staging).
enum { PLAN_CAT_OTHER = 0, PLAN_CAT_PARAMS, PLAN_CAT_GRADS, PLAN_CAT_OPT, PLAN_CAT_ACTS };
int memplan_category(const char* name);
const PlanItem* memplan_item(const Plan* p, const char* name); // NULL when the run has none
// Whether a plan fits: its peak within limit (0: no bound) and its buffers within its spec's budget.
int memplan_fits(const Plan* p, size_t limit);

// The bytes of the files a run writes (the headers of safetensors and GGUF files, and a GGUF
// file's tokenizer, estimated; the small JSON files left out): one checkpoint (the model or the
// adapter directory, and every rank's state file), and the final outputs as --save-format,
// --save-gguf and --merge ask (train_gpt2's model.bin is the last checkpoint's file: no bytes of
// its own, unless --keep-best writes one more into best/).
typedef struct {
    size_t ckpt_model, ckpt_state;   // one checkpoint: model_SSSSSSSS.bin or adapter_SSSSSSSS/, all state_* files
    size_t hf, llmc, gguf;           // the final model (train_lora: merged/, with --merge), each format
    size_t adapter, adapter_gguf;    // train_lora's final adapter, and its GGUF
    size_t base;                     // train_lora: OUT/base/ when --model is not a Hugging Face directory
} PlanDisk;
void memplan_disk(const Plan* p, PlanDisk* d);

// The largest micro-batch (1..max_B) whose peak is within limit less the margin (a fraction of
// limit, e.g. 0.05; limit 0: no bound) and whose buffers are within the spec's budget, with its
// plan in *p; 0 when even B = 1 does not fit.
int memplan_max_batch(const PlanSpec* s, const PlanBackend* b, size_t limit, double margin, int max_B, Plan* p);

// The settings that fit: for each training mode the run may use (full training: itself; LoRA:
// LoRA and QLoRA), ZeRO stage (0 alone with one rank) and recompute level, the largest micro-batch
// within limit less the margin and the spec's budget (memplan_max_batch), or 0.
typedef struct { int lora, qlora, zero, recompute, B; size_t peak; } PlanOption;
int memplan_options(const PlanSpec* s, const PlanBackend* b, size_t limit, double margin, PlanOption* out, int cap);

// The memory a run may take here: a GPU's free memory; on the CPU the smaller of the cgroup's
// limit and MemAvailable. 0 when unknown; *what names the source.
size_t memplan_memory_available(const PlanBackend* b, const char** what);

#ifdef __cplusplus
}
#endif
#endif // LLMC_MEMPLAN_H
