// PEFT adapter files, beside the model files of llmc/model/model_io.h: a directory with
//   adapter_config.json         PEFT's LoraConfig (r, lora_alpha, target_modules, exclude_modules,
//                               bias, modules_to_save, layers_to_transform, rank_pattern,
//                               alpha_pattern, use_rslora, base_model_name_or_path, ...);
//   adapter_model.safetensors   "base_model.model.transformer.h.<l>.<module>.lora_A.weight"
//                               [r, in] and ".lora_B.weight" [out, r] (F32; BF16 / F16 read too),
//                               with use_dora ".lora_magnitude_vector" [out] (no ".weight"),
//                               plus the base tensors trained with bias= / modules_to_save.
// PEFT loads what we write (AutoPeftModelForCausalLM / PeftModel.from_pretrained) and we load what
// PEFT writes, with a message naming the file and key for anything we cannot apply exactly: which
// modules are adapted is decided as PEFT decides it (target_modules, exclude_modules,
// layers_to_transform, rank_pattern / alpha_pattern keys, regular expressions of the plain kind:
// names, '.', '\.', '^', '$'), and the LoraConfig fields of other LoRA variants (aLoRA's invocation
// tokens, target_parameters, lora_bias, layer replication, base-rewriting initialisations
// such as OLoRA, ...) are refused by name rather than applied as a plain LoRA (docs/FORMATS.md).
// A PiSSA adapter (init_lora_weights "pissa") loads with spec.init LORA_INIT_PISSA: its factors
// are those of the base rewritten to the PiSSA residual, which model_assemble and
// convert_merge_adapter do first, as PEFT does when it loads one.
//
// A q/k/v split of c_attn (llmc/model/lora.h) is a c_attn adapter of rank blocks x r for PEFT, which
// computes the same function with it. So that continuing from the file keeps the split (the
// structural zeros of B stay zero, the trainable count stays that of the split), the tensor file
// names it in its metadata, key PEFT_META_QKV_SPLIT, value the blocks ("q,v"); PEFT reads only
// the tensors and ignores it.
//
// The same tensor file (without adapter_config.json) is the adapter part of a LoRA checkpoint.
#ifndef LLMC_PEFT_IO_H
#define LLMC_PEFT_IO_H

#include <stddef.h>
#include "model/config.h"
#include "model/lora.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PEFT_META_QKV_SPLIT "llmc_qkv_split"

// Values of an adapter_model.safetensors written by peft_save_adapter (or PEFT) into adapters of the same structure
// (and the trained base slices into the model they are on); every tensor must be present with
// its shape, no other may be. fatal naming the file and tensor otherwise.
void peft_load_tensors(LoraModel* lm, const char* path);
// dir/adapter_model.safetensors + dir/adapter_config.json (creates dir), each written atomically:
// the adapter as it is, with init_lora_weights its --init (true, or "gaussian", "pissa", "olora":
// for PiSSA / OLoRA, lora_A / lora_B of the rewritten base, as PEFT's save_pretrained writes them).
void peft_save_adapter(const LoraModel* lm, const char* dir);
// PiSSA / OLoRA's initial adapter (lm->init0), init_lora_weights true: what PEFT's
// save_pretrained(path_initial_model_for_weight_conversion=dir) reads, and what a resume takes
// the residual base from.
void peft_save_adapter_init(const LoraModel* lm, const char* dir);
// A run's final adapter: a PiSSA / OLoRA adapter converted to a plain LoRA of the original base
// (lora_converted: rank 2r, init_lora_weights true); any other as peft_save_adapter writes it.
void peft_save_adapter_final(const LoraModel* lm, const char* dir);
// The lora_A / lora_B tensors of an adapter file of lm's structure into host (flat layout); the
// file's other tensors are not read. fatal naming the file and tensor on a missing or misshapen one.
void peft_read_factors(const LoraModel* lm, const char* path, float* host);
// The adapter tensors and the trained base slices alone, as one safetensors file at path (atomic):
// what peft_load_tensors reads (a BitFit checkpoint, which no adapter_config.json can describe).
void peft_save_tensors(const LoraModel* lm, const char* path);
// Load an adapter: path is the adapter directory (or its adapter_model.safetensors). The
// structure (targets, layers, ranks, scalings, q/k/v split) comes from the files; the trained
// base slices' values wait in the adapters until lora_put_base_values. fatal with a message
// naming the file and key on anything inconsistent; the try_ variant returns NULL and fills err.
LoraModel* peft_load_adapter(const char* path, const GPT2Config* cfg);
LoraModel* peft_try_load_adapter(const char* path, const GPT2Config* cfg, char* err, size_t errcap);

#ifdef __cplusplus
}
#endif
#endif // LLMC_PEFT_IO_H
