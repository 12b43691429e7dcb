// Loading and saving GPT-2 weights (formats: docs/FORMATS.md). In memory the model is
// always one host fp32 array in ParamTable layout: llm.c orientation ([out, in] matmul weights),
// vocabulary padded to a multiple of 128 with zero rows. Conversions (HF Conv1D transposes,
// bf16/fp16 widening, padding) happen here, at the file boundary only.
//
// model_load sniffs what `path` is:
//   - an llm.c checkpoint (.bin, magic 20240326): version 3 (fp32) or 5 (bf16); the file size
//     must be exactly 1024 + the bytes of every tensor;
//   - a GGUF model (magic "GGUF"): a GPT-2 as `convert --to gguf` writes it (llmc/model/gguf_io.h),
//     F16 / BF16 / Q8_0 weights dequantized to fp32;
//   - a safetensors file (F32 / BF16 / F16), with config.json from the same directory when there
//     is one (otherwise the config is inferred from the tensor shapes; n_head defaults to C/64);
//   - a sharded checkpoint's model.safetensors.index.json (only its weight_map is used);
//   - a directory holding model.safetensors or model.safetensors.index.json (+ config.json).
// Hugging Face keys are accepted with or without the "transformer." prefix; attn.bias /
// attn.masked_bias buffers are ignored; lm_head.weight is accepted only if it equals wte
// (GPT-2 ties them). Every expected tensor must be present with its exact shape, and no other
// tensor may be. Any problem is fatal with a message naming the file.
#ifndef LLMC_MODEL_IO_H
#define LLMC_MODEL_IO_H

#include <stdint.h>
#include "model/config.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LLMC_MODEL_MAGIC 20240326

// Loads a model; *params_out is malloc'd (pt_out->total floats), the caller frees it.
void model_load(const char* path, GPT2Config* cfg_out, ParamTable* pt_out, float** params_out);

// Writes an llm.c checkpoint: version 3 (fp32) or, with bf16 != 0, version 5 (bf16, rounded to
// nearest even). Atomic.
void model_save_llmc(const char* path, const ParamTable* pt, const float* params, int bf16);

// Writes a Hugging Face model directory: dir/config.json and dir/model.safetensors (F32,
// "transformer."-prefixed keys, Conv1D [in, out] weights, unpadded vocab, no lm_head), the
// layout GPT2LMHeadModel.save_pretrained produces, and generation_config.json (eos = the
// end-of-text token). Creates dir; each file is written atomically, config.json last, so a
// directory holding config.json is complete.
void model_save_hf(const char* dir, const ParamTable* pt, const float* params);

// The weights file of model_save_hf alone (one F32 safetensors file, atomic): it loads as a lone
// .safetensors, whose config is inferred from the shapes (n_head = C / 64, GPT-2's head size).
void model_save_safetensors(const char* path, const ParamTable* pt, const float* params);

// Adds the tokenizer to a Hugging Face model directory, so AutoTokenizer.from_pretrained(dir)
// and pipeline("text-generation", model=dir) work: vocab.json + merges.txt (copies of
// encoder.json + vocab.bpe, or of vocab.json + merges.txt) or tokenizer.json, from the vocabulary
// at vocab_path (a directory or file, as tok_load takes), plus tokenizer_config.json and
// special_tokens_map.json. Returns 0; or -1 with the reason in why, writing nothing, when
// vocab_path holds no vocabulary or one of another size than the model's (cfg->vocab_size).
int model_save_hf_tokenizer(const char* dir, const char* vocab_path, const GPT2Config* cfg, char* why, size_t why_cap);

// GPT-2 initialization for training from scratch: matmul weights and embeddings N(0, 0.02),
// the residual projections (attprojw, fcprojw) N(0, 0.02 / sqrt(2 L)), biases 0, layernorm
// weights 1, padded vocab rows 0. Deterministic given seed (counter-based, llmc/base/rand.h: stream
// = tensor id, counter = element index within the tensor), independent of thread count.
void model_init_gpt2(const ParamTable* pt, float* params, uint64_t seed);

// Reads a Hugging Face config.json into cfg (padded vocab computed); fatal on anything that is
// not a GPT-2 this tool can run. Exposed for tools that only need the config.
void model_read_hf_config(const char* path, GPT2Config* cfg);

#ifdef __cplusplus
}
#endif
#endif // LLMC_MODEL_IO_H
