// Model conversion: any model the tool reads, as fp32 weights on the host, into any format it
// writes. Used by the `convert` program and by the trainers' outputs (the base model a LoRA
// adapter points to, written as a Hugging Face directory when --model is not one).
//
//   read:   llm.c .bin (fp32 or bf16), safetensors (a file, a sharded index, a model directory),
//           a transformers + bitsandbytes 4-bit checkpoint (dequantized: the fp32 values of its
//           NF4 weights, exactly what the tool computes with), a size descriptor (d12, tiny: the
//           GPT-2 initialization from a seed, as the trainers make it); then optionally a PEFT
//           adapter merged in (W += scaling B A, and the base tensors it trained replaced).
//   write:  llm.c .bin fp32 (version 3) or bf16 (version 5, rounded to nearest even), a
//           Hugging Face model directory (config.json, model.safetensors (F32),
//           generation_config.json and the tokenizer files), that directory's weights alone as
//           one .safetensors file, or GGUF for llama.cpp (F32 / F16 / BF16 / Q8_0 with the
//           tokenizer: llmc/model/gguf_io.h); an adapter alone as a GGUF LoRA adapter.
//
// Everything but the adapter stays on the host, so a conversion is exact on either backend
// wherever the target can hold the values: fp32 -> HF -> fp32 and bf16 -> HF -> bf16 give the
// same bytes back. (An adapter is read into the backend's memory, which is bf16 on CUDA: merge
// adapters with the CPU build for fp32-exact results.)
#ifndef LLMC_CONVERT_H
#define LLMC_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include "base/fileio.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

// A model's weights on the host: ParamTable layout (llm.c orientation, padded vocabulary).
typedef struct {
    GPT2Config cfg;
    ParamTable pt;
    float* params;                    // pt.total floats, malloc'd
    char source[LLMC_PATH_MAX + 64];  // what was loaded, for messages
} HostModel;

// Output formats.
typedef enum { CONVERT_HF = 0, CONVERT_LLMC_FP32, CONVERT_LLMC_BF16, CONVERT_SAFETENSORS, CONVERT_GGUF, CONVERT_GGUF_LORA } ConvertFormat;

// Load any model the trainers and generate take (see above); seed initializes a size descriptor.
// Fatal with a message naming the file on anything wrong.
void convert_load(HostModel* hm, const char* path, uint64_t seed);
// Merge the PEFT adapter in dir (or its adapter_model.safetensors) into hm (a PiSSA adapter,
// init_lora_weights "pissa", into the PiSSA residual of hm, as PEFT loads it). Needs the backend
// (ops_init) for reading the adapter.
void convert_merge_adapter(HostModel* hm, const char* adapter);
void convert_free(HostModel* hm);

// 1 if path is a directory transformers loads as a model: config.json with model.safetensors or
// model.safetensors.index.json.
int convert_is_hf_dir(const char* path);

// 0 if the vocabulary at vocab_path (a directory or file, as tok_load takes; NULL: none) can go
// with a model of cfg; else -1 with the reason in why (none there, or another size than the
// model's). Fatal on a vocabulary that does not load.
int convert_vocab_fits(const char* vocab_path, const GPT2Config* cfg, char* why, size_t why_cap);
// Write a Hugging Face model directory (created if missing): the weights, config.json,
// generation_config.json and, with a vocab_path that fits (convert_vocab_fits), the tokenizer
// files. Each file is written atomically.
void convert_write_hf(const char* dir, const ParamTable* pt, const float* params, const char* vocab_path);
// A lone .safetensors file (model_save_safetensors). Its loaders infer n_head as C / 64, so a
// model with another head size is refused (fatal, naming path) before anything is written.
void convert_write_safetensors(const char* path, const ParamTable* pt, const float* params);

// The tokenizer files alone (into a PEFT adapter directory), from a vocabulary that fits.
void convert_write_tokenizer(const char* dir, const char* vocab_path, const GPT2Config* cfg);

#ifdef __cplusplus
}
#endif
#endif // LLMC_CONVERT_H
