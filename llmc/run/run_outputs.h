// What a training run writes for people and other tools to load (the optimizer state and the
// DONE marker of a checkpoint are the trainer's, llmc/run/checkpoint.h). Every directory loads on its
// own: Hugging Face model directories carry config.json, model.safetensors,
// generation_config.json and the tokenizer files; every LoRA adapter, mid-run ones too, is a PEFT
// directory (adapter_config.json, adapter_model.safetensors, the tokenizer files) whose
// base_model_name_or_path is the absolute path of a Hugging Face model directory.
//
//   OUT/model_SSSSSSSS.bin          train_gpt2 checkpoint: the model, llm.c .bin fp32
//   OUT/adapter_SSSSSSSS/           train_lora checkpoint: a PEFT directory
//   OUT/config.json, model.safetensors, generation_config.json, tokenizer files, model.bin
//                                   train_gpt2's final model (--save-format hf / llmc / both)
//   OUT/adapter_config.json, adapter_model.safetensors, tokenizer files
//                                   train_lora's final adapter (OUT is a PEFT directory)
//   OUT/merged/                     train_lora --merge: the merged model, as train_gpt2's final
//   OUT/init_adapter/               train_lora --init pissa / olora: the initial adapter (init_lora_weights
//                                   true), PEFT's path_initial_model_for_weight_conversion directory;
//                                   a resume takes the residual base from it
//   OUT/base/                       train_lora when --model is not a Hugging Face directory (an
//                                   llm.c .bin, a lone .safetensors file, a size descriptor): the
//                                   base as one, for base_model_name_or_path
// Tokenizer files: vocab.json + merges.txt (or tokenizer.json), tokenizer_config.json,
// special_tokens_map.json, copied from the run's vocabulary (--vocab, next to --model, or the
// bundled data/gpt2) when its size is the model's; otherwise a note says why they are missing.
#ifndef LLMC_RUN_OUTPUTS_H
#define LLMC_RUN_OUTPUTS_H

#include "base/fileio.h"
#include "model/model.h"
#include "run/runconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const RunConfig* c;
    int rank;
    const char* vocab;            // the vocabulary of the tokenizer files, or NULL (none fits)
    char vocab_buf[LLMC_PATH_MAX];
    char base[LLMC_PATH_MAX];     // train_lora: base_model_name_or_path of the adapters
    long ckpt_step;               // the step of the checkpoint that holds the model outputs_save writes
                                  // into --out (its model.bin is that checkpoint's file), or -1
} RunOutputs;

// A run never writes over its own inputs: fatal (rank 0, before anything is written) when --model
// or --adapter is --out itself, or lies in an entry of --out the run writes or replaces: a final
// output (model.safetensors, model.bin, the adapter's files, merged/, best/, base/), or, for
// to >= 0, the checkpoint of a step in (from, to] (a model_SSSSSSSS.bin or adapter_SSSSSSSS/ kept
// in --out and trained from is fine while the run does not reach step SSSSSSSS).
void outputs_check_inputs(const RunConfig* c, long from, long to);
// After the model is assembled and --out exists, on rank 0 (which writes every output; other
// ranks only keep c and rank): the vocabulary, and for train_lora the base the adapters point to
// (OUT/base/ written when it is needed and not there yet), recorded in m's adapters.
void outputs_init(RunOutputs* o, const RunConfig* c, Model* m, int rank);
// A new run, once --out exists, on rank 0: what stays for the whole run (--init pissa / olora:
// the initial adapter, OUT/init_adapter/).
void outputs_start(const RunOutputs* o, const Model* m);
// The initial adapter's tensor file, OUT/init_adapter/adapter_model.safetensors, in out (cap bytes).
const char* outputs_init_path(char* out, size_t cap, const RunConfig* c);
// The model's parameters as fp32 host memory in the table's layout where the model holds them so
// (the CPU backend's fp32 tensors, each whole and in its place: full training, a ZeRO 3 model once
// gathered): the writers read them there instead of from a copy (the same bytes gpt2_get_params
// would copy; the memory plan counts no copy then); NULL otherwise.
const float* outputs_params_in_place(const Model* m);
// Rank 0: the model (train_gpt2) or the PEFT adapter directory (train_lora) of the checkpoint of
// `step`, at the paths ckpt_path gives for "model" / "adapter".
void outputs_checkpoint(const RunOutputs* o, const Model* m, long step);
// Rank 0: the adapter as a PEFT directory dir (--init pissa / olora: converted to a plain LoRA of
// the original base, peft_save_adapter_final; checkpoints keep the factors of the residual base)
// (and with --merge the merged model in dir/merged)
// or the model in dir, in the formats of --save-format: the final model (dir = --out). There,
// model.bin is a hard link to the model file of the checkpoint of ckpt_step (the same bytes: both
// are model_save_llmc of the same weights), so the final model takes no disk of its own; it is
// written where the file system has no hard links.
void outputs_save(const RunOutputs* o, const Model* m, const char* dir);

#ifdef __cplusplus
}
#endif
#endif // LLMC_RUN_OUTPUTS_H
