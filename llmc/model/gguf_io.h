// GPT-2 models and LoRA adapters as GGUF files that llama.cpp (and Ollama, LM Studio,
// llama-cpp-python) runs as they are: the container is llmc/base/gguf.h; this file decides what
// goes in it, as llama.cpp's own converters (gguf-py, convert_hf_to_gguf.py,
// convert_lora_to_gguf.py) define it for the "gpt2" architecture (docs/FORMATS.md, "GGUF").
//
// Model file:
//   metadata  general.* (architecture gpt2, type model, name, file_type, quantization_version,
//             provenance: base_model.0.name, finetune, description), gpt2.* hyperparameters
//             (context_length, embedding_length, feed_forward_length, block_count,
//             attention.head_count, attention.layer_norm_epsilon), tokenizer.ggml.* (model gpt2,
//             pre gpt-2, tokens, token_type, merges, bos / eos / unknown ids, add_bos_token
//             false): everything llama.cpp needs, nothing else to download.
//   tensors   token_embd, position_embd, blk.N.{attn_norm, attn_qkv, attn_output, ffn_norm,
//             ffn_up, ffn_down}.{weight, bias}, output_norm.{weight, bias}; matmul weights in
//             llm.c's [out, in] layout (ggml ne = {in, out}: HF's Conv1D weights transposed), the
//             vocabulary unpadded, no output.weight (llama.cpp ties it to token_embd as GPT-2
//             does). The 2-D weights (token_embd and the four matmuls) are stored in the chosen
//             type; biases, norms and position_embd stay F32 (as convert_hf_to_gguf.py does);
//             Q8_0 rows that are not a multiple of 32 values fall back to F16 (ditto).
// Adapter file: general.type adapter, adapter.type lora, adapter.lora.alpha, and per adapted
//   matmul "<base tensor>.weight.lora_a" [rank, in] and ".lora_b" [out, rank], applied by
//   llama.cpp as W x + (alpha / rank) B A x.
#ifndef LLMC_GGUF_IO_H
#define LLMC_GGUF_IO_H

#include "base/gguf.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

// Where a file came from, for general.*; NULL fields are left out. Names, never paths: a file is
// shared, and where its sources lay on the machine that wrote it is nobody's business (llama.cpp's
// converter writes the model's name too).
typedef struct {
    const char* name;        // general.name (NULL: the output file's name without .gguf)
    const char* base_model;  // general.base_model.0.name: the name of the model it was made from
    const char* finetune;    // general.finetune: how it was made, e.g. "lora-merged", "full"
    const char* description; // general.description
} GgufProvenance;

// The name of the model (or adapter) at path, for GgufProvenance: the base name of the file or
// directory it is (resolved, so "." names the directory) without .gguf / .bin / .safetensors /
// .json; a model directory's weights file (model.safetensors, its index) or config.json gives the
// directory's name; a size descriptor (d12, tiny) is its own name.
void gguf_model_name(const char* path, char* out, size_t cap);

// "f32", "f16", "bf16", "q8_0" -> the ggml type; -1 for anything else.
int gguf_parse_type(const char* s, GgmlType* out);
// llama.cpp's general.file_type (LlamaFileType) of a file whose matmul weights are in type.
uint32_t gguf_file_type(GgmlType type);

// Writes a GPT-2 model (host fp32 weights in ParamTable layout) as a GGUF file, atomically.
// vocab_path: the model's vocabulary (a directory or file as tok_load takes; its size must be the
// model's: convert_vocab_fits); fatal with a message naming it otherwise.
void gguf_save_gpt2(const char* path, const ParamTable* pt, const float* params, GgmlType type,
                    const char* vocab_path, const GgufProvenance* prov);

// Writes the adapters of lm as a GGUF LoRA adapter, atomically. llama.cpp has one alpha per file
// and computes each scale as alpha / rank: alpha is written so that this is the adapters'
// scaling (alpha itself for plain LoRA, scaling x rank for rsLoRA), and an adapter whose scaling
// differs from alpha / its rank (a q/k/v split stacks r-rank blocks) has the factor folded into
// its B. Adapters that also train base tensors (bias=, modules_to_save) are refused: GGUF LoRA
// files cannot carry them (export the merged model instead). type: f32 / f16 / bf16 / q8_0.
void gguf_save_lora(const char* path, const LoraModel* lm, GgmlType type, const GgufProvenance* prov);

// Reads a GPT-2 GGUF model (as gguf_save_gpt2 writes it, or convert_hf_to_gguf.py): the config
// from gpt2.* and the tensor shapes, every tensor as fp32 (F16 / BF16 / Q8_0 dequantized) into a
// malloc'd ParamTable buffer (*params_out, vocabulary padded with zero rows). fatal naming the
// file on anything that is not such a model (another architecture, an adapter, a tensor missing,
// extra or of the wrong shape, an output.weight that is not token_embd's copy).
// An error exit on the way leaves nothing allocated.
void gguf_load_gpt2(const char* path, GPT2Config* cfg_out, ParamTable* pt_out, float** params_out);
// The config of such a file alone (what a plan needs before the weights: its shape is in its
// metadata, gpt2.* and the vocabulary's size), checked as gguf_load_gpt2 checks it, tensor shapes
// included; no weight is read (but an output.weight, compared with token_embd.weight).
void gguf_read_gpt2_config(const char* path, GPT2Config* cfg_out);
// Whether path is a GGUF GPT-2 whose four linear weights are Q8_0 in every layer (0 for any other
// file; a GGUF file that is not a GPT-2 of ours stops with gguf_load_gpt2's message).
int gguf_gpt2_linear_q8_0(const char* path);

// The GGUF name of (tensor id, layer), e.g. "blk.3.attn_qkv.weight".
void gguf_tensor_name(char* out, size_t cap, ParamId id, int layer);

#ifdef __cplusplus
}
#endif
#endif // LLMC_GGUF_IO_H
